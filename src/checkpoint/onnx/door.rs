//! ONNX models at the door: a `.onnx` file, or a folder holding [`ONNX_FILE`] and no weights
//! file, or a Hub repository's `model.onnx`. Recognised in every build; opened by
//! [`load`](super) here, ONNX Runtime behind the cargo feature `onnx`, and without it refused
//! saying how to get a build that runs it.

use super::super::config::{Checkpoint, OpenOptions};
use super::super::kind::Kind;
use super::super::weights::WEIGHTS_FILES;
use crate::error::Result;
use crate::hub::{Hub, HubRepo, RepoKind};
use crate::observe::Observer;
use candle_core::Device;
use std::path::{Path, PathBuf};

/// The file name of an ONNX model inside a checkpoint folder.
pub const ONNX_FILE: &str = "model.onnx";

/// The kind.
pub(crate) struct OnnxKind;

impl Kind for OnnxKind {
    fn reads_inline_normalisation(&self) -> bool {
        true
    }

    fn detect(&self, path: &Path) -> Result<Option<PathBuf>> {
        if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("onnx"))
        {
            return Ok(Some(path.to_path_buf()));
        }
        let inside = path.join(ONNX_FILE);
        let weights = WEIGHTS_FILES.iter().any(|f| path.join(f).is_file());
        Ok((path.is_dir() && inside.is_file() && !weights).then_some(inside))
    }

    fn open(
        &self,
        found: &Path,
        options: &OpenOptions,
        _: &Device,
        observer: &mut dyn Observer,
    ) -> Result<Checkpoint> {
        load(found, options, observer)
    }

    /// The `config.json` beside the model where there is one, the model, then the external
    /// data files its weights lie in.
    fn files(&self, found: &Path) -> Result<Vec<PathBuf>> {
        let config = found.with_file_name("config.json");
        let dir = found.parent().map(Path::to_path_buf).unwrap_or_default();
        let external: Vec<PathBuf> = locations(found)?.iter().map(|l| dir.join(l)).collect();
        Ok(config
            .is_file()
            .then_some(config)
            .into_iter()
            .chain([found.to_path_buf()])
            .chain(external)
            .collect())
    }

    /// `model.onnx`, its `config.json` when the repository has one (for the preprocessing)
    /// and the external data files it names, fetched beside it.
    fn fetch_from_hub(
        &self,
        repo: &HubRepo,
        hub: &Hub,
        observer: &mut dyn Observer,
    ) -> Result<Option<PathBuf>> {
        let model = hub.get(repo, RepoKind::Model, ONNX_FILE, observer)?;
        // The preprocessing, where the repository gives it; timm's defaults otherwise.
        let _ = hub.get(repo, RepoKind::Model, "config.json", observer);
        for location in locations(&model)? {
            hub.get(repo, RepoKind::Model, &location, observer)?;
        }
        Ok(Some(model))
    }
}

/// Opens the ONNX model at `path` ([`super::load`]).
#[cfg(feature = "onnx")]
fn load(path: &Path, options: &OpenOptions, observer: &mut dyn Observer) -> Result<Checkpoint> {
    super::load::load(path, options, observer)
}

/// Without the feature: an error saying how to get a build that runs ONNX models.
#[cfg(not(feature = "onnx"))]
fn load(path: &Path, options: &OpenOptions, observer: &mut dyn Observer) -> Result<Checkpoint> {
    let _ = (options, observer);
    Err(crate::error::Error::state(
        path,
        "an ONNX model, and this build of alkit runs none: build it with the cargo feature \
         `onnx` and install ONNX Runtime with scripts/onnxruntime.sh DIR (then source \
         DIR/env.sh, which sets ORT_DYLIB_PATH)",
    ))
}

/// The external data files the ONNX model `path` names, relative to its folder
/// ([`super::external_locations`]); none without the `onnx` feature, which cannot open
/// it.
fn locations(path: &Path) -> Result<Vec<String>> {
    #[cfg(feature = "onnx")]
    return super::read::external_locations(path);
    #[cfg(not(feature = "onnx"))]
    {
        let _ = path;
        Ok(Vec::new())
    }
}
