//! The Hugging Face Hub: `hf:OWNER/NAME[@REVISION]` datasets and checkpoints in the hub's
//! cache.
//!
//! Files live in the hub's standard cache layout (shared with Python's `huggingface_hub`):
//! `CACHE/{datasets,models}--OWNER--NAME/refs/REVISION` holds a commit hash and
//! `.../snapshots/COMMIT/PATH` the files. The cache folder is `HF_HUB_CACHE`, else
//! `HF_HOME/hub`, else `~/.cache/huggingface/hub`. A file already in the cache is used without
//! any network access; otherwise it is downloaded (endpoint `HF_ENDPOINT`, token from the
//! cache's token file, see [`fetch`]), reporting bytes through the [`Observer`] as
//! [`crate::observe::Event::Download`]. With `HF_HUB_OFFLINE=1` the network is never used: a
//! file missing from the cache is an error naming the cache folder. Names, revisions, refs
//! read from the cache and everything a server answers are checked so that no path alkit reads
//! or writes leaves the cache.

pub mod fetch;
mod repo;

pub use repo::{HubRepo, RepoKind};

use crate::error::{Error, Result};
use crate::observe::Observer;
use hf_hub::{Cache, Repo};
use std::path::{Path, PathBuf};

/// Access to the Hub through a cache folder.
#[derive(Debug, Clone)]
pub struct Hub {
    cache: PathBuf,
    offline: bool,
    endpoint: Option<String>,
}

fn env_truthy(name: &str) -> bool {
    std::env::var(name)
        .map(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "on" | "yes" | "true"))
        .unwrap_or(false)
}

impl Hub {
    /// Cache folder and offline mode from the environment (`HF_HUB_CACHE`, `HF_HOME`,
    /// `HF_HUB_OFFLINE`, `HF_ENDPOINT`), like the Python client.
    pub fn from_env() -> Hub {
        let cache = if let Some(c) = std::env::var_os("HF_HUB_CACHE") {
            PathBuf::from(c)
        } else if let Some(h) = std::env::var_os("HF_HOME") {
            PathBuf::from(h).join("hub")
        } else {
            std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("."))
                .join(".cache/huggingface/hub")
        };
        Hub {
            cache,
            offline: env_truthy("HF_HUB_OFFLINE"),
            endpoint: std::env::var("HF_ENDPOINT").ok(),
        }
    }

    /// A hub over an explicit cache folder; `offline` forbids any network access.
    pub fn new(cache: impl Into<PathBuf>, offline: bool) -> Hub {
        Hub {
            cache: cache.into(),
            offline,
            endpoint: None,
        }
    }

    /// The same hub talking to `endpoint` (what `HF_ENDPOINT` sets), e.g. a mirror.
    pub fn with_endpoint(self, endpoint: impl Into<String>) -> Hub {
        Hub {
            endpoint: Some(endpoint.into()),
            ..self
        }
    }

    /// The cache folder.
    pub fn cache_dir(&self) -> &Path {
        &self.cache
    }

    /// True when the network is never used.
    pub fn is_offline(&self) -> bool {
        self.offline
    }

    fn repo(&self, repo: &HubRepo, kind: RepoKind) -> Repo {
        Repo::with_revision(repo.id.clone(), kind.hf(), repo.revision.clone())
    }

    fn error(&self, repo: &HubRepo, problem: impl Into<String>) -> Error {
        Error::Hub {
            repo: repo.to_string(),
            cache: self.cache.clone(),
            problem: problem.into(),
        }
    }

    /// The repository's folder of the cache.
    fn repo_dir(&self, repo: &HubRepo, kind: RepoKind) -> PathBuf {
        self.cache.join(self.repo(repo, kind).folder_name())
    }

    /// The cached snapshot folder of `repo` at its revision, if the cache has one. A ref
    /// whose content is not a commit hash (an edited cache) is an error naming it, never a
    /// path followed.
    fn snapshot(&self, repo: &HubRepo, kind: RepoKind) -> Result<Option<PathBuf>> {
        let base = self.repo_dir(repo, kind);
        let ref_path = base.join("refs").join(&repo.revision);
        let commit = match std::fs::read(&ref_path) {
            Ok(c) => {
                let c = String::from_utf8_lossy(&c[..c.len().min(256)])
                    .trim()
                    .to_string();
                if !fetch::safe_token(&c) {
                    return Err(Error::state(
                        &ref_path,
                        format!("`{}` is not a commit hash", c.escape_debug()),
                    ));
                }
                c
            }
            // A commit hash given as the revision needs no ref.
            Err(_) if fetch::safe_token(&repo.revision) => repo.revision.clone(),
            Err(_) => return Ok(None),
        };
        let dir = base.join("snapshots").join(commit);
        Ok(dir.is_dir().then_some(dir))
    }

    fn client(&self) -> fetch::Client {
        fetch::Client::new(
            self.endpoint.as_deref(),
            Cache::new(self.cache.clone()).token(),
        )
    }

    /// Every file of `repo` (paths inside the repository, sorted): from the Hub's API when
    /// online, else (offline, or when the API cannot be reached) from the cached snapshot.
    pub fn files(&self, repo: &HubRepo, kind: RepoKind) -> Result<Vec<String>> {
        let online_err = if self.offline {
            None
        } else {
            match self.client().list(&fetch::Remote { repo, kind }) {
                Ok(files) => return Ok(files),
                Err(e) => Some(e),
            }
        };
        let Some(dir) = self.snapshot(repo, kind)? else {
            return Err(self.error(
                repo,
                match online_err {
                    Some(e) => format!("cannot list the repository ({e}) and it is not cached"),
                    None => "not in the local cache (HF_HUB_OFFLINE is set)".into(),
                },
            ));
        };
        let mut files = Vec::new();
        walk(&dir, &dir, 0, &mut files).map_err(|e| Error::io(&dir, e))?;
        files.sort();
        Ok(files)
    }

    /// The local path of `file` in `repo`: from the cache when present, else downloaded
    /// into it (never when offline). `file` must be a safe relative path
    /// ([`fetch::safe_file_name`]).
    pub fn get(
        &self,
        repo: &HubRepo,
        kind: RepoKind,
        file: &str,
        observer: &mut dyn Observer,
    ) -> Result<PathBuf> {
        if !fetch::safe_file_name(file) {
            return Err(self.error(
                repo,
                format!("`{}` is not a safe file name", file.escape_debug()),
            ));
        }
        if let Some(dir) = self.snapshot(repo, kind)? {
            let p = dir.join(file);
            if p.is_file() {
                return Ok(p);
            }
        }
        if self.offline {
            return Err(self.error(
                repo,
                format!("`{file}` is not in the local cache (HF_HUB_OFFLINE is set)"),
            ));
        }
        self.client()
            .download(
                &fetch::Remote { repo, kind },
                &self.repo_dir(repo, kind),
                file,
                observer,
            )
            .map_err(|e| self.error(repo, format!("downloading `{file}`: {e}")))
    }
}

/// Folders deeper than this under a snapshot are not listed (a symbolic-link loop in an
/// edited cache would otherwise recurse without end).
const MAX_DEPTH: usize = 16;

fn walk(root: &Path, dir: &Path, depth: usize, out: &mut Vec<String>) -> std::io::Result<()> {
    if depth > MAX_DEPTH {
        return Ok(());
    }
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            walk(root, &path, depth + 1, out)?;
        } else if let Ok(rel) = path.strip_prefix(root) {
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_names_parse_and_print() {
        let r = HubRepo::parse("ylecun/mnist").unwrap();
        assert_eq!(
            (r.id.as_str(), r.revision.as_str()),
            ("ylecun/mnist", "main")
        );
        assert_eq!(r.to_string(), "hf:ylecun/mnist");
        let r = HubRepo::parse("zalando-datasets/fashion_mnist@v1.0").unwrap();
        assert_eq!(r.revision, "v1.0");
        assert_eq!(r.to_string(), "hf:zalando-datasets/fashion_mnist@v1.0");
        assert_eq!(
            HubRepo::parse("o/n@refs/pr/1").unwrap().revision,
            "refs/pr/1"
        );
        for bad in [
            "",
            "a/b/c",
            "a//b",
            "a/b@",
            "a b/c",
            "../b",
            "a/..",
            "a/b@../../../evil/ref",
            "a/b@..",
            "a/b@/etc/passwd",
            "a/b@main/",
            "a/b@x\\..\\y",
            "a/b@ma in",
        ] {
            assert!(HubRepo::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn offline_without_cache_names_the_cache() {
        let hub = Hub::new("/nonexistent/hub-cache", true);
        let r = HubRepo::parse("o/n").unwrap();
        let e = hub.files(&r, RepoKind::Dataset).unwrap_err().to_string();
        assert!(
            e.contains("/nonexistent/hub-cache") && e.contains("HF_HUB_OFFLINE"),
            "{e}"
        );
        let e = hub
            .get(
                &r,
                RepoKind::Model,
                "config.json",
                &mut crate::observe::Silent,
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("config.json"), "{e}");
    }
}
