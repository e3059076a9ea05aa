//! Checkpoints: `config.json` + `model.safetensors` (or PyTorch's `pytorch_model.bin`) in a
//! folder.
//!
//! `config.json` holds the architecture ([`Arch`](crate::models::Arch)), the normalisation statistics, the item
//! shape, the class names, the alkit version and the list of tensors with their shapes; nothing
//! in it is executed. Tensor names follow PyTorch's `state_dict` names for the same layers (see
//! [`crate::nn::Cnn`] and [`crate::nn::Mlp`]), so weights trained elsewhere can be converted by
//! renaming at most. Loading checks that the file holds exactly the expected tensors with the
//! expected shapes. [`open`] also takes `hf:OWNER/NAME` model repositories, and
//! [`open_ensemble`] several checkpoints as one deep ensemble. A folder or repository in
//! timm's layout (its own `config.json`) is read through [`timm`]: its weights by their
//! state-dict names, its evaluation transform as the checkpoint's [`Preprocess`](crate::data::image::Preprocess). Weights may
//! also be PyTorch's own files (`pytorch_model.bin`, a `.pth` with a `config.json` beside it,
//! or [`import`]'s input), read by [`pytorch`] without running any of their code. A `.onnx`
//! file (or a folder holding `model.onnx`) is an ONNX model run by ONNX Runtime (`onnx`, with
//! the cargo feature `onnx`).

mod config;
mod embedded;
mod kind;
pub mod onnx;
pub mod pytorch;
mod save;
pub mod timm;
mod weights;

pub use config::{Checkpoint, CheckpointConfig, OpenOptions, TensorInfo};
pub use onnx::ONNX_FILE;
pub use save::{import, save};
pub use weights::{read_weights, WEIGHTS_FILES};

use crate::error::{Error, Result};
use crate::hub::{Hub, HubRepo};
use crate::nn::init::Weights;
use crate::nn::Ensemble;
use crate::observe::Observer;
use candle_core::Device;
use kind::{Found, Kind};
use std::path::{Path, PathBuf};

/// Every kind of checkpoint, in the order a local path is offered to them: the first that
/// recognises it opens it ([`weights::WeightsKind`] takes whatever is left, so it comes last).
static KINDS: &[&dyn Kind] = &[
    &onnx::OnnxKind,
    &embedded::EmbeddedKind,
    &weights::WeightsKind,
];

/// The kinds a Hub model repository may hold, in the order looked for: weights first, an
/// ONNX model where the repository has none.
static HUB_KINDS: &[&dyn Kind] = &[&weights::WeightsKind, &onnx::OnnxKind];

/// The local checkpoint `path` recognised once, by the first kind of [`KINDS`] that takes it.
fn find_local(path: &Path) -> Result<Found> {
    for &kind in KINDS {
        if let Some(found) = kind.detect(path)? {
            return Ok(Found { kind, path: found });
        }
    }
    Err(Error::state(
        path,
        "not a checkpoint of any kind alkit opens",
    ))
}

/// The checkpoint `name` recognised once: a local path by the first kind of [`KINDS`] that
/// takes it, `hf:OWNER/NAME[@REV]` by the first kind of [`HUB_KINDS`] whose files the
/// repository has (fetched through `hub`'s cache); when none has them, the error of the first
/// file that could not be had.
fn find(name: &str, hub: &Hub, observer: &mut dyn Observer) -> Result<Found> {
    let Some(repo) = name.strip_prefix("hf:") else {
        return find_local(Path::new(name));
    };
    let repo = HubRepo::parse(repo)?;
    let mut first_error = None;
    for &kind in HUB_KINDS {
        match kind.fetch_from_hub(&repo, hub, observer) {
            Ok(Some(found)) => return Ok(Found { kind, path: found }),
            Ok(None) => {}
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    Err(first_error
        .unwrap_or_else(|| Error::config("checkpoint", format!("`{name}` holds no checkpoint"))))
}

/// Loads a checkpoint onto `device`: a folder holding `config.json` (alkit's own, or a timm
/// model's: see [`timm`]) and one of [`WEIGHTS_FILES`], or a weights file (safetensors or
/// PyTorch's) with a `config.json` beside it, or an ONNX model (see [`load_with`]).
pub fn load(dir: &Path, device: &Device) -> Result<Checkpoint> {
    load_with(
        dir,
        &OpenOptions::default(),
        device,
        &mut crate::observe::Silent,
    )
}

/// [`load`] with `options`: an ONNX model (a `.onnx` file, or a folder holding [`ONNX_FILE`]
/// and no weights file) is opened as they say, and what was chosen for it unnamed is told to
/// `observer`.
pub fn load_with(
    dir: &Path,
    options: &OpenOptions,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<Checkpoint> {
    let found = find_local(dir)?;
    open_found(found, &dir.display().to_string(), options, device, observer)
}

/// Opens a checkpoint by name: a folder or weights file (see [`load`]), or `hf:OWNER/NAME[@REV]`
/// for a model repository on the Hub (its `config.json` and weights fetched through `hub`'s
/// cache first: `model.safetensors`, or `pytorch_model.bin` where the repository has no
/// safetensors; where it has neither, its `model.onnx`, an ONNX model as [`load_with`] opens
/// one, its `config.json` giving the preprocessing when there is one).
pub fn open(
    name: &str,
    hub: &Hub,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<Checkpoint> {
    open_with(name, &OpenOptions::default(), hub, device, observer)
}

/// [`open`] with `options` (see [`load_with`]).
pub fn open_with(
    name: &str,
    options: &OpenOptions,
    hub: &Hub,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<Checkpoint> {
    let found = find(name, hub, observer)?;
    open_found(found, name, options, device, observer)
}

/// Opens what `find` found for the checkpoint `name`, refusing the normalisation `options`
/// give inline when its kind reads its own.
fn open_found(
    found: Found,
    name: &str,
    options: &OpenOptions,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<Checkpoint> {
    if !found.kind.reads_inline_normalisation() {
        options.refuse_inline_normalisation(name)?;
    }
    found.kind.open(&found.path, options, device, observer)
}

/// The files checkpoint `name` is read from: `config.json` and `model.safetensors` of its
/// folder, or of a Hub repository's cached snapshot (fetched through `hub` when missing, as
/// [`open`] fetches them); for an ONNX model, the `.onnx` file, the `config.json` beside it
/// where there is one, and the external data files it names.
pub fn files(name: &str, hub: &Hub, observer: &mut dyn Observer) -> Result<Vec<PathBuf>> {
    let found = find(name, hub, observer)?;
    found.kind.files(&found.path)
}

/// A content hash of the checkpoints `names` (an ensemble's members, in order): FNV-1a (64
/// bits, [`crate::data::Fnv1a`]) over each member's [`files`], every file's length and then
/// its bytes, read 1 MiB at a time. It tells a checkpoint retrained or replaced in place from
/// the one a path named before: sharded scoring records it so that `merge` refuses shards of
/// different weights. `options`' features output and preprocessing file (an ONNX model's)
/// are part of it, as they change what the models give. Cost: one sequential read of the
/// weights (about 0.05 s for 45 MB on this project's machine; docs/sharding.md).
pub fn content_hash(
    names: &[String],
    options: &OpenOptions,
    hub: &Hub,
    observer: &mut dyn Observer,
) -> Result<u64> {
    use std::hash::Hasher;
    use std::io::Read;
    let mut h = crate::data::Fnv1a::default();
    let mut buf = vec![0u8; 1 << 20];
    // How the models are opened changes what they give: the features output named, the
    // normalisation given inline, the preprocessing read from elsewhere (its bytes, below).
    if let Some(f) = &options.onnx_features {
        h.write(f.as_bytes());
        h.write(&[0]);
    }
    for (tag, values) in [(b'm', &options.input_mean), (b's', &options.input_std)] {
        if let Some(v) = values {
            h.write(&[tag]);
            h.write(&(v.len() as u64).to_le_bytes());
            for x in v {
                h.write(&x.to_le_bytes());
            }
        }
    }
    let mut paths = Vec::new();
    for name in names {
        paths.extend(files(name, hub, observer)?);
    }
    paths.extend(options.onnx_config.iter().cloned());
    for path in paths {
        let mut f = std::fs::File::open(&path).map_err(|e| Error::io(&path, e))?;
        let len = f.metadata().map_err(|e| Error::io(&path, e))?.len();
        h.write(&len.to_le_bytes());
        let mut read = 0u64;
        loop {
            let n = f.read(&mut buf).map_err(|e| Error::io(&path, e))?;
            if n == 0 {
                break;
            }
            h.write(&buf[..n]);
            read += n as u64;
        }
        if read != len {
            return Err(Error::state(
                &path,
                format!("changed while it was read ({len} bytes, then {read})"),
            ));
        }
    }
    Ok(h.finish())
}

/// Opens one checkpoint, or several of the same architecture and normalisation as one deep
/// [`Ensemble`] (parameters renamed `m{k}.{name}`; the first checkpoint's config).
pub fn open_ensemble(
    names: &[String],
    hub: &Hub,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<Checkpoint> {
    open_ensemble_with(names, &OpenOptions::default(), hub, device, observer)
}

/// [`open_ensemble`] with `options` (see [`load_with`]); the members must also prepare their
/// inputs alike (the same preprocessing).
pub fn open_ensemble_with(
    names: &[String],
    options: &OpenOptions,
    hub: &Hub,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<Checkpoint> {
    match names {
        [] => return Err(Error::config("checkpoint", "no checkpoint given")),
        [one] => return open_with(one, options, hub, device, observer),
        _ => {}
    }
    let mut members = Vec::new();
    let mut member_params = Vec::new();
    let mut config: Option<CheckpointConfig> = None;
    for name in names {
        let c = open_with(name, options, hub, device, observer)?;
        if let Some(first) = &config {
            if first.arch != c.config.arch
                || first.normalizer != c.config.normalizer
                || first.preprocess != c.config.preprocess
            {
                return Err(Error::state(
                    name,
                    format!(
                        "an ensemble's checkpoints must share the architecture, \
                         normalisation and preprocessing of {}",
                        names[0]
                    ),
                ));
            }
        }
        member_params.push(c.params);
        members.push(c.model);
        config.get_or_insert(c.config);
    }
    let config = config.ok_or_else(|| Error::config("checkpoint", "no checkpoint given"))?;
    Ok(Checkpoint {
        config,
        model: Box::new(Ensemble::new(members)?),
        params: Weights::of_members(&member_params),
    })
}
