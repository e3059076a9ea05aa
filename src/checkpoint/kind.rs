//! The door every kind of checkpoint comes through: [`Kind`], what the folder's dispatcher
//! asks of each (whether a path is one, how to open it, which files it is read from, how to
//! fetch it from the Hub), and [`Found`], a path recognised once as one kind.

use super::config::{Checkpoint, OpenOptions};
use crate::error::Result;
use crate::hub::{Hub, HubRepo};
use crate::observe::Observer;
use candle_core::Device;
use std::path::{Path, PathBuf};

/// One kind of checkpoint. A new kind is a file implementing this and a line of the
/// dispatcher's registry (`checkpoint/mod.rs`).
pub(crate) trait Kind: Sync {
    /// What to open when the local `path` is of this kind (the path itself, or the file
    /// inside a folder it names), else `None`. Reads names and headers only.
    fn detect(&self, path: &Path) -> Result<Option<PathBuf>>;

    /// Whether the kind reads the normalisation [`OpenOptions`] give inline (an ONNX model
    /// without a `config.json`); every other kind's own files give theirs, and the
    /// dispatcher refuses inline values for it.
    fn reads_inline_normalisation(&self) -> bool {
        false
    }

    /// The checkpoint at `found` (what [`Kind::detect`] or [`Kind::fetch_from_hub`] gave), opened
    /// as `options` say; what it chose unnamed is told to `observer`.
    fn open(
        &self,
        found: &Path,
        options: &OpenOptions,
        device: &Device,
        observer: &mut dyn Observer,
    ) -> Result<Checkpoint>;

    /// The files the checkpoint at `found` is read from, in a fixed order: what a content
    /// hash reads and what no output may overwrite.
    fn files(&self, found: &Path) -> Result<Vec<PathBuf>>;

    /// This kind's files fetched from the Hub model repository `repo` through `hub`'s cache:
    /// what to open, `Ok(None)` for a kind the Hub never holds, or the error of the first
    /// file that could not be had.
    fn fetch_from_hub(
        &self,
        repo: &HubRepo,
        hub: &Hub,
        observer: &mut dyn Observer,
    ) -> Result<Option<PathBuf>>;
}

/// A checkpoint recognised once: its kind and what to open.
pub(crate) struct Found {
    /// The kind that recognised it.
    pub kind: &'static dyn Kind,
    /// What to open: the path given, or the file inside the folder it names.
    pub path: PathBuf,
}
