//! What a person is shown of an item that is only numbers: an embedding file may name, per
//! item, the text it embeds or the image it was computed from, so that the labeling page and
//! Label Studio tasks show the item itself instead of its `d` features. alkit has no
//! tokenizer: text pools come in as embeddings computed elsewhere, and this is how their
//! labeler reads them.

use crate::error::{DataProblem, Error, Result};
use std::path::{Component, Path, PathBuf};

/// The longest text shown for one item, in bytes (a paragraph or a page; a labeler reads no
/// more, and the page's answer must stay small).
pub const MAX_TEXT: usize = 64 << 10;

/// The largest image file shown for one item (a photo at full resolution; more is not a
/// photo, and Label Studio tasks inline it).
pub const MAX_IMAGE_BYTES: u64 = 64 << 20;

/// How items are shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DisplayKind {
    /// A text per item.
    Text,
    /// An image file per item (PNG, JPEG or WebP), its path relative to the folder of the
    /// file that names it (or to the folder its metadata `display_root` names), never above
    /// that folder: no `..`, no absolute path, no link that leads out of it.
    Image,
}

/// Every pool item's text or image, in the pool's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Displays {
    kind: DisplayKind,
    values: Vec<String>,
    /// The folder relative image paths are taken from.
    base: PathBuf,
}

impl Displays {
    /// The displays `values` of a pool of `n` items, named by `file` (whose folder relative
    /// image paths start from) in its part `what` (``metadata `display` ``, ...), checked: one
    /// per item, each non-empty and at most [`MAX_TEXT`] bytes, an image path relative, with
    /// an image's extension and no `..`.
    pub fn new(
        kind: DisplayKind,
        values: Vec<String>,
        n: usize,
        file: &Path,
        what: &str,
    ) -> Result<Self> {
        let bad = |m: String| Error::data(file, DataProblem::Other(m));
        if values.len() != n {
            return Err(bad(format!(
                "{what} lists {} entries for {n} items",
                values.len()
            )));
        }
        for (i, v) in values.iter().enumerate() {
            if v.is_empty() || v.len() > MAX_TEXT {
                return Err(bad(format!(
                    "{what}: entry {i} is empty or longer than {MAX_TEXT} bytes"
                )));
            }
            if kind == DisplayKind::Image {
                let p = Path::new(v);
                let ext = p
                    .extension()
                    .map(|e| e.to_string_lossy().to_ascii_lowercase())
                    .unwrap_or_default();
                let below = p
                    .components()
                    .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
                if !matches!(ext.as_str(), "png" | "jpg" | "jpeg" | "webp") || !below {
                    return Err(bad(format!(
                        "{what}: entry {i} (`{v}`) is not the path of a PNG, JPEG or WebP file \
                         relative to the file's folder (no absolute path, no `..`); write the \
                         images' paths relative to that folder"
                    )));
                }
            }
        }
        Ok(Displays {
            kind,
            values,
            base: file.parent().map(Path::to_path_buf).unwrap_or_default(),
        })
    }

    /// These displays with relative image paths taken from `root` instead of the naming
    /// file's folder (an image folder's embeddings name the folder once, as metadata
    /// `display_root`, and each image by its id).
    pub fn rooted(mut self, root: PathBuf) -> Displays {
        self.base = root;
        self
    }

    /// The bytes of item `i`'s image file and its media type (read from the bytes), for an
    /// image display: a PNG, JPEG or WebP file of at most [`MAX_IMAGE_BYTES`] inside the
    /// displays' folder once links are followed, or an error naming it. Checked when read,
    /// since a link may change after the pool was opened.
    pub fn image_bytes(&self, i: usize) -> Option<Result<(Vec<u8>, &'static str)>> {
        let (path, _) = self.image(i)?;
        Some(self.read_image(&path))
    }

    fn read_image(&self, path: &Path) -> Result<(Vec<u8>, &'static str)> {
        use std::io::Read;
        let bad = |m: String| Error::data(path, DataProblem::Other(m));
        let base = std::fs::canonicalize(&self.base).map_err(|e| Error::io(&self.base, e))?;
        let outside = |real: &Path| {
            bad(format!(
                "an item's image leads out of the folder {} (to {}, through a link): images \
                 shown must lie inside it",
                self.base.display(),
                real.display()
            ))
        };
        let real = std::fs::canonicalize(path).map_err(|e| Error::io(path, e))?;
        if !real.starts_with(&base) {
            return Err(outside(&real));
        }
        // Opened once, and everything after is asked of the open file: a link swapped in
        // after the check above changes nothing read here.
        let file = std::fs::File::open(&real).map_err(|e| Error::io(path, e))?;
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            let opened = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()));
            if let Ok(opened) = opened {
                if !opened.starts_with(&base) {
                    return Err(outside(&opened));
                }
            }
        }
        let meta = file.metadata().map_err(|e| Error::io(path, e))?;
        if !meta.is_file() || meta.len() > MAX_IMAGE_BYTES {
            return Err(bad(format!(
                "an item's image must be a file of at most {MAX_IMAGE_BYTES} bytes"
            )));
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        file.take(MAX_IMAGE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| Error::io(path, e))?;
        if bytes.len() as u64 > MAX_IMAGE_BYTES {
            return Err(bad(format!(
                "an item's image must be a file of at most {MAX_IMAGE_BYTES} bytes"
            )));
        }
        let media = media_of(&bytes).ok_or_else(|| {
            bad(
                "an item's image is not a PNG, JPEG or WebP file (its first bytes say \
                 otherwise)"
                    .into(),
            )
        })?;
        Ok((bytes, media))
    }

    /// How items are shown.
    pub fn kind(&self) -> DisplayKind {
        self.kind
    }

    /// Item `i`'s text, or its image's path as the file names it.
    pub fn value(&self, i: usize) -> Option<&str> {
        self.values.get(i).map(String::as_str)
    }

    /// Item `i`'s image file and its media type, for an image display.
    pub fn image(&self, i: usize) -> Option<(PathBuf, &'static str)> {
        if self.kind != DisplayKind::Image {
            return None;
        }
        let p = self.base.join(self.values.get(i)?);
        let ext = p.extension()?.to_string_lossy().to_ascii_lowercase();
        let media = match ext.as_str() {
            "png" => "image/png",
            "webp" => "image/webp",
            _ => "image/jpeg",
        };
        Some((p, media))
    }
}

/// The media type of a PNG, JPEG or WebP file by its signature, `None` for anything else.
fn media_of(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if bytes.starts_with(&[0xff, 0xd8, 0xff]) {
        Some("image/jpeg")
    } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

/// The kind named by an embedding file's metadata `display_kind` (`text` when absent).
pub fn kind_named(name: Option<&str>, file: &Path) -> Result<DisplayKind> {
    match name {
        None | Some("text") => Ok(DisplayKind::Text),
        Some("image") => Ok(DisplayKind::Image),
        Some(other) => Err(Error::data(
            file,
            DataProblem::Other(format!(
                "metadata `display_kind` is `{other}`; expected `text` or `image`"
            )),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn images(values: &[&str], file: &Path) -> Result<Displays> {
        let v: Vec<String> = values.iter().map(|s| s.to_string()).collect();
        Displays::new(
            DisplayKind::Image,
            v,
            values.len(),
            file,
            "array `display_image`",
        )
    }

    #[test]
    fn image_paths_stay_inside_the_files_folder() {
        let root = std::env::temp_dir().join(format!("alkit-display-{}", std::process::id()));
        let (inside, outside) = (root.join("pool"), root.join("secret"));
        std::fs::create_dir_all(inside.join("img")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        let file = inside.join("emb.npz");
        let png = b"\x89PNG\r\n\x1a\nrest of a png".to_vec();
        std::fs::write(inside.join("img/a.png"), &png).unwrap();
        std::fs::write(inside.join("notes.png"), b"a text file named .png").unwrap();
        std::fs::write(outside.join("key.txt"), b"secret").unwrap();
        std::fs::write(outside.join("b.png"), &png).unwrap();
        for bad in [
            "/etc/passwd.png",
            "../secret/b.png",
            "img/../../secret/b.png",
        ] {
            let e = images(&[bad], &file).unwrap_err().to_string();
            assert!(e.contains(bad) && e.contains("relative"), "{e}");
        }
        let ok = images(&["img/a.png", "./img/a.png"], &file).unwrap();
        for i in 0..2 {
            assert_eq!(
                ok.image_bytes(i).unwrap().unwrap(),
                (png.clone(), "image/png")
            );
        }
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(outside.join("key.txt"), inside.join("link.png")).unwrap();
            std::os::unix::fs::symlink(&outside, inside.join("dir")).unwrap();
            let links = images(&["link.png", "dir/b.png"], &file).unwrap();
            for i in 0..2 {
                let e = links.image_bytes(i).unwrap().unwrap_err().to_string();
                assert!(e.contains("leads out of the folder"), "{e}");
            }
        }
        let text = images(&["notes.png"], &file).unwrap();
        let e = text.image_bytes(0).unwrap().unwrap_err().to_string();
        assert!(e.contains("notes.png") && e.contains("not a PNG"), "{e}");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
