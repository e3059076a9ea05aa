//! What a person is shown of an item that is only numbers: an embedding file may name, per
//! item, the text it embeds or the image it was computed from, so that the labeling page and
//! Label Studio tasks show the item itself instead of its `d` features. alkit has no
//! tokenizer: text pools come in as embeddings computed elsewhere, and this is how their
//! labeler reads them.

use crate::error::{DataProblem, Error, Result};
use std::path::{Path, PathBuf};

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
    /// An image file per item (PNG, JPEG or WebP), its path relative to the file that names it
    /// or absolute.
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
    /// per item, each non-empty and at most [`MAX_TEXT`] bytes, an image path with an image's
    /// extension and no `..`.
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
                if !matches!(ext.as_str(), "png" | "jpg" | "jpeg" | "webp")
                    || p.components().any(|c| c == std::path::Component::ParentDir)
                {
                    return Err(bad(format!(
                        "{what}: entry {i} (`{v}`) is not the path of a PNG, JPEG or WebP file \
                         without `..`"
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

    /// The bytes of item `i`'s image file and its media type, for an image display: a file of
    /// at most [`MAX_IMAGE_BYTES`], or an error naming it.
    pub fn image_bytes(&self, i: usize) -> Option<Result<(Vec<u8>, &'static str)>> {
        let (path, media) = self.image(i)?;
        let read = || -> Result<Vec<u8>> {
            let meta = std::fs::metadata(&path).map_err(|e| Error::io(&path, e))?;
            if !meta.is_file() || meta.len() > MAX_IMAGE_BYTES {
                return Err(Error::data(
                    &path,
                    DataProblem::Other(format!(
                        "an item's image must be a file of at most {MAX_IMAGE_BYTES} bytes"
                    )),
                ));
            }
            std::fs::read(&path).map_err(|e| Error::io(&path, e))
        };
        Some(read().map(|b| (b, media)))
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
