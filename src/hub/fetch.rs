//! Talking to a Hub endpoint: listing a repository and downloading one file into the cache.
//!
//! Everything a server sends is input. The commit hash and ETag of a response become folder
//! and file names of the cache (`snapshots/COMMIT/`, `blobs/ETAG`), and the listing's file
//! names become paths under a snapshot, so each is checked to be one safe path component (or,
//! for file names, safe components) before anything is created; a listing is read up to
//! [`MAX_LISTING`] bytes; a body longer or shorter than the size the server announced is an
//! error and leaves nothing in the cache; redirects are followed a bounded number of times.
//! hf-hub's own downloader takes those headers as they come (a commit hash of `../..` places
//! files outside the cache, a redirect without `Location` panics), so alkit speaks HTTP itself
//! through `ureq` and keeps hf-hub for the cache layout and the token. The three URL paths
//! ([`Remote`]) are written here too: hf-hub offers them only with its `ureq` feature, which
//! would compile its downloader and a progress-bar crate into every library user.

use super::repo::{HubRepo, RepoKind};
use crate::observe::{Control, Event, Observer};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A repository as the endpoint's URLs name it.
pub struct Remote<'a> {
    /// The repository and its revision.
    pub repo: &'a HubRepo,
    /// Dataset or model.
    pub kind: RepoKind,
}

impl Remote<'_> {
    /// `OWNER/NAME` for a model, `datasets/OWNER/NAME` for a dataset.
    fn path(&self) -> String {
        match self.kind {
            RepoKind::Model => self.repo.id.clone(),
            RepoKind::Dataset => format!("datasets/{}", self.repo.id),
        }
    }

    /// The revision as one URL path segment (a branch name's `/` escaped).
    fn revision(&self) -> String {
        self.repo.revision.replace('/', "%2F")
    }

    /// The API's path of the repository's metadata at its revision.
    fn api_path(&self) -> String {
        let kind = match self.kind {
            RepoKind::Model => "models",
            RepoKind::Dataset => "datasets",
        };
        format!("{kind}/{}/revision/{}", self.repo.id, self.revision())
    }
}

/// The largest repository listing read (the Hub's listing of a large dataset is a few MB).
pub const MAX_LISTING: u64 = 32 << 20;
/// Redirects followed per request.
const REDIRECTS: usize = 5;

/// A file name the Hub may give: `/`-separated components, none empty, `.` or `..`, without
/// backslashes or control characters, at most 1024 bytes in all.
pub fn safe_file_name(name: &str) -> bool {
    name.len() <= 1024
        && name.split('/').all(|c| {
            !c.is_empty()
                && c != "."
                && c != ".."
                && c.len() <= 255
                && !c.chars().any(|ch| ch == '\\' || ch.is_control())
        })
}

/// A commit hash or ETag that may name a folder or file of the cache: 1 to 128 ASCII letters,
/// digits, `-` or `_`.
pub fn safe_token(s: &str) -> bool {
    (1..=128).contains(&s.len())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
}

/// One endpoint with its token.
pub struct Client {
    base: String,
    token: Option<String>,
    agent: ureq::Agent,
}

/// A URL's path with everything but unreserved characters and `/` percent-encoded.
fn encode_path(p: &str) -> String {
    let mut out = String::with_capacity(p.len());
    for b in p.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl Client {
    /// A client for `base` (`https://huggingface.co` unless given), authenticating with
    /// `token` when set.
    pub fn new(base: Option<&str>, token: Option<String>) -> Client {
        let agent = ureq::AgentBuilder::new()
            .redirects(0)
            .timeout_connect(Duration::from_secs(20))
            .timeout_read(Duration::from_secs(120))
            .user_agent(concat!("alkit/", env!("CARGO_PKG_VERSION")))
            .build();
        Client {
            base: base
                .unwrap_or("https://huggingface.co")
                .trim_end_matches('/')
                .to_string(),
            token,
            agent,
        }
    }

    /// GET `url`, following up to [`REDIRECTS`] redirects when `follow` (any redirect) or only
    /// relative ones otherwise (the Hub answers a file request with its headers and then a
    /// redirect to a CDN; the headers of the Hub's own answer are what count). Returns the last
    /// response and, when it is an absolute redirect not followed, its target.
    fn get(
        &self,
        url: &str,
        range: Option<&str>,
        follow: bool,
    ) -> Result<(ureq::Response, Option<String>), String> {
        let mut url = url.to_string();
        for _ in 0..=REDIRECTS {
            let mut req = self.agent.get(&url);
            if let Some(r) = range {
                req = req.set("Range", r);
            }
            // The token goes to the endpoint only, never to a CDN it redirects to.
            if let (Some(t), true) = (&self.token, url.starts_with(&self.base)) {
                req = req.set("Authorization", &format!("Bearer {t}"));
            }
            let resp = match req.call() {
                Ok(r) => r,
                Err(ureq::Error::Status(code, r)) => {
                    return Err(format!(
                        "{url}: the server answered {code} {}",
                        r.status_text()
                    ))
                }
                Err(e) => return Err(format!("{url}: {e}")),
            };
            if !(300..400).contains(&resp.status()) {
                return Ok((resp, None));
            }
            let location = resp
                .header("Location")
                .ok_or_else(|| format!("{url}: a redirect ({}) without a Location", resp.status()))?
                .to_string();
            let next = if location.starts_with('/') && !location.starts_with("//") {
                format!("{}{location}", origin(&url))
            } else if location.starts_with("https://") || location.starts_with("http://") {
                if !follow {
                    return Ok((resp, Some(location)));
                }
                location
            } else {
                return Err(format!(
                    "{url}: a redirect to `{location}`, which is not a URL"
                ));
            };
            url = next;
        }
        Err(format!("{url}: more than {REDIRECTS} redirects"))
    }

    /// Every file name of `repo` at its revision, from the endpoint's API.
    pub fn list(&self, repo: &Remote) -> Result<Vec<String>, String> {
        let url = format!("{}/api/{}", self.base, repo.api_path());
        let (resp, _) = self.get(&url, None, true)?;
        let mut body = Vec::new();
        resp.into_reader()
            .take(MAX_LISTING + 1)
            .read_to_end(&mut body)
            .map_err(|e| format!("{url}: {e}"))?;
        if body.len() as u64 > MAX_LISTING {
            return Err(format!(
                "{url}: the listing is larger than {MAX_LISTING} bytes"
            ));
        }
        #[derive(serde::Deserialize)]
        struct Sibling {
            rfilename: String,
        }
        #[derive(serde::Deserialize)]
        struct Info {
            siblings: Vec<Sibling>,
        }
        let info: Info = serde_json::from_slice(&body)
            .map_err(|e| format!("{url}: not a repository listing: {e}"))?;
        let mut files = Vec::with_capacity(info.siblings.len());
        for s in info.siblings {
            if !safe_file_name(&s.rfilename) {
                return Err(format!(
                    "{url}: the listing names the file `{}`, which is not a safe relative path",
                    s.rfilename.escape_debug()
                ));
            }
            files.push(s.rfilename);
        }
        files.sort();
        files.dedup();
        Ok(files)
    }

    /// Downloads `file` of `repo` into `repo_dir` (the repository's folder of the cache):
    /// `blobs/ETAG`, `snapshots/COMMIT/FILE` pointing at it, and `refs/REVISION` holding
    /// COMMIT. Reports bytes to `observer`, which may stop the download (nothing is kept then).
    pub fn download(
        &self,
        repo: &Remote,
        repo_dir: &Path,
        file: &str,
        observer: &mut dyn Observer,
    ) -> Result<PathBuf, String> {
        if !safe_file_name(file) {
            return Err(format!("`{}` is not a safe file name", file.escape_debug()));
        }
        let url = format!(
            "{}/{}/resolve/{}/{}",
            self.base,
            repo.path(),
            repo.revision(),
            encode_path(file)
        );
        let (head, cdn) = self.get(&url, Some("bytes=0-0"), false)?;
        let commit = head
            .header("x-repo-commit")
            .ok_or_else(|| format!("{url}: the answer has no x-repo-commit header"))?
            .trim()
            .to_string();
        let etag = head
            .header("x-linked-etag")
            .or_else(|| head.header("etag"))
            .ok_or_else(|| format!("{url}: the answer has no ETag"))?;
        let etag = etag.trim().trim_start_matches("W/").replace('"', "");
        if !safe_token(&commit) {
            return Err(format!(
                "{url}: the commit hash `{}` the server sent is not a hash",
                commit.escape_debug()
            ));
        }
        if !safe_token(&etag) {
            return Err(format!(
                "{url}: the ETag `{}` the server sent cannot name a cache file",
                etag.escape_debug()
            ));
        }
        drop(head);
        let (body, _) = self.get(cdn.as_deref().unwrap_or(&url), None, true)?;
        let announced = match body.header("Content-Length") {
            None => None,
            Some(v) => Some(v.trim().parse::<u64>().map_err(|_| {
                format!("{url}: Content-Length `{}` is not a size", v.escape_debug())
            })?),
        };
        let blobs = repo_dir.join("blobs");
        std::fs::create_dir_all(&blobs).map_err(|e| format!("{}: {e}", blobs.display()))?;
        let blob = blobs.join(&etag);
        let tmp = blobs.join(format!("{etag}.{}.incomplete", std::process::id()));
        let result = copy_body(body, &tmp, announced, file, observer, &url);
        if let Err(e) = result {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        std::fs::rename(&tmp, &blob).map_err(|e| format!("{}: {e}", blob.display()))?;
        let pointer = repo_dir.join("snapshots").join(&commit).join(file);
        let parent = pointer.parent().expect("inside the snapshot");
        std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        link(&blob, &pointer, file).map_err(|e| format!("{}: {e}", pointer.display()))?;
        let refs = repo_dir.join("refs").join(&repo.repo.revision);
        if let Some(p) = refs.parent() {
            std::fs::create_dir_all(p).map_err(|e| format!("{}: {e}", p.display()))?;
        }
        crate::fsutil::write_atomic(&refs, commit.as_bytes()).map_err(|e| e.to_string())?;
        Ok(pointer)
    }
}

/// `scheme://host[:port]` of an absolute URL.
fn origin(url: &str) -> &str {
    let after = url.find("://").map_or(0, |i| i + 3);
    match url[after..].find('/') {
        Some(i) => &url[..after + i],
        None => url,
    }
}

/// Streams a response body into `tmp`, no more than `announced` bytes (when announced), and
/// checks that exactly that many came.
fn copy_body(
    body: ureq::Response,
    tmp: &Path,
    announced: Option<u64>,
    file: &str,
    observer: &mut dyn Observer,
    url: &str,
) -> Result<(), String> {
    let mut out = std::fs::File::create(tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
    let limit = announced.map_or(u64::MAX, |n| n.saturating_add(1));
    let mut reader = body.into_reader().take(limit);
    let mut buf = vec![0u8; 1 << 16];
    let mut done = 0u64;
    let total = announced.unwrap_or(0);
    loop {
        let n = reader.read(&mut buf).map_err(|e| format!("{url}: {e}"))?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n])
            .map_err(|e| format!("{}: {e}", tmp.display()))?;
        done += n as u64;
        if observer.on(&Event::Download { file, done, total }) == Control::Stop {
            return Err(format!("{url}: download stopped"));
        }
    }
    if let Some(n) = announced {
        if done != n {
            return Err(format!(
                "{url}: the server announced {n} bytes and sent {}",
                if done > n {
                    "more".to_string()
                } else {
                    done.to_string()
                }
            ));
        }
    }
    out.sync_all()
        .map_err(|e| format!("{}: {e}", tmp.display()))
}

/// Points `pointer` at `blob`: a relative symbolic link where the platform has them (the
/// hub's layout, so the cache can move), a copy elsewhere.
fn link(blob: &Path, pointer: &Path, file: &str) -> std::io::Result<()> {
    if pointer.symlink_metadata().is_ok() {
        std::fs::remove_file(pointer)?;
    }
    #[cfg(unix)]
    {
        let ups = 1 + file.split('/').count();
        let target = PathBuf::from("../".repeat(ups))
            .join("blobs")
            .join(blob.file_name().expect("a blob file"));
        std::os::unix::fs::symlink(target, pointer)
    }
    #[cfg(not(unix))]
    {
        let _ = file;
        std::fs::copy(blob, pointer).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_paths_are_the_hubs() {
        // The paths huggingface_hub and hf-hub request: models at the root, datasets under
        // `datasets/`, a branch name's `/` escaped in both the file and the API path.
        let mnist = HubRepo::parse("ylecun/mnist").unwrap();
        let d = Remote {
            repo: &mnist,
            kind: RepoKind::Dataset,
        };
        assert_eq!(d.path(), "datasets/ylecun/mnist");
        assert_eq!(d.revision(), "main");
        assert_eq!(d.api_path(), "datasets/ylecun/mnist/revision/main");
        let pr = HubRepo::parse("timm/resnet18.a1_in1k@refs/pr/1").unwrap();
        let m = Remote {
            repo: &pr,
            kind: RepoKind::Model,
        };
        assert_eq!(m.path(), "timm/resnet18.a1_in1k");
        assert_eq!(m.revision(), "refs%2Fpr%2F1");
        assert_eq!(
            m.api_path(),
            "models/timm/resnet18.a1_in1k/revision/refs%2Fpr%2F1"
        );
    }
}
