//! Writing alkit's own checkpoints: [`save`] a trained model's parameters as
//! `model.safetensors` beside its `config.json`, [`import`] weights trained elsewhere for one
//! of alkit's architectures into such a folder.

use super::config::{CheckpointConfig, TensorInfo, FORMAT};
use super::weights::{is_batch_counter, read_weights};
use crate::data::Normalizer;
use crate::error::{Error, Result};
use crate::fsutil::{write_atomic, write_json};
use crate::models::Arch;
use crate::nn::init::Weights;
use crate::train::ModelBuilder;
use candle_core::{DType, Device};
use std::path::Path;

/// Writes `dir/model.safetensors` and `dir/config.json` (each atomically); returns the config
/// written.
pub fn save(
    dir: &Path,
    arch: &Arch,
    params: &Weights,
    normalizer: &Normalizer,
    item_shape: &[usize],
    classes: Vec<String>,
) -> Result<CheckpointConfig> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let named = params.named();
    // Little-endian f32 bytes per tensor, serialised in memory and written through the one
    // atomic writer (synced, folder synced, ordinary permissions).
    let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = named
        .iter()
        .map(|(n, v)| {
            let t = v.as_tensor().to_dtype(DType::F32)?;
            let data: Vec<u8> = t
                .flatten_all()?
                .to_vec1::<f32>()?
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect();
            Ok((n.clone(), t.dims().to_vec(), data))
        })
        .collect::<Result<_>>()?;
    let path = dir.join("model.safetensors");
    let views = bytes
        .iter()
        .map(|(n, shape, data)| {
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), data)
                .map(|v| (n.clone(), v))
        })
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::state(&path, format!("cannot serialise: {e}")))?;
    let file = safetensors::serialize(views, None)
        .map_err(|e| Error::state(&path, format!("cannot serialise: {e}")))?;
    write_atomic(&path, &file)?;
    let config = CheckpointConfig {
        format: FORMAT,
        alkit_version: env!("CARGO_PKG_VERSION").into(),
        arch: arch.clone(),
        normalizer: normalizer.clone(),
        item_shape: item_shape.to_vec(),
        classes,
        tensors: named
            .iter()
            .map(|(n, v)| TensorInfo {
                name: n.clone(),
                shape: v.dims().to_vec(),
            })
            .collect(),
        preprocess: None,
    };
    write_json(&dir.join("config.json"), &config)?;
    Ok(config)
}

/// Converts bare weights (a file of named tensors: a PyTorch `state_dict` saved with
/// `torch.save` or `safetensors.torch.save_file`, or a training checkpoint holding one) into a
/// checkpoint folder for `arch`.
///
/// The names and shapes must be exactly those `arch` defines (see [`crate::nn::Cnn`] and
/// [`crate::nn::Mlp`]; PyTorch's names for the same layers); any other dtype is converted to
/// f32. Every missing, misshapen or unexpected tensor is an error naming it, and nothing is
/// written then.
pub fn import(
    weights: &Path,
    arch: &Arch,
    normalizer: &Normalizer,
    item_shape: &[usize],
    classes: Vec<String>,
    out: &Path,
) -> Result<()> {
    let (vb, expected) = crate::nn::init::shapes(DType::F32, &Device::Cpu);
    arch.build(vb)
        .map_err(|e| Error::config("arch", format!("cannot be built: {e}")))?;
    let tensors = read_weights(weights, &Device::Cpu)?;
    let mut named = Vec::new();
    for (name, var) in expected.named() {
        let t = tensors
            .get(&name)
            .ok_or_else(|| Error::state(weights, format!("tensor `{name}` is missing")))?;
        if t.dims() != var.dims() {
            return Err(Error::state(
                weights,
                format!(
                    "tensor `{name}` has shape {:?}, the architecture needs {:?}",
                    t.dims(),
                    var.dims()
                ),
            ));
        }
        named.push((
            name,
            candle_core::Var::from_tensor(&t.to_dtype(DType::F32)?)?,
        ));
    }
    let infos: Vec<TensorInfo> = named
        .iter()
        .map(|(n, v)| TensorInfo {
            name: n.clone(),
            shape: v.dims().to_vec(),
        })
        .collect();
    if let Some(extra) = tensors
        .keys()
        .find(|k| !named.iter().any(|(n, _)| n == *k) && !is_batch_counter(k, &infos))
    {
        return Err(Error::state(
            weights,
            format!("unexpected tensor `{extra}` (not part of the architecture)"),
        ));
    }
    if classes.len() != arch.classes() {
        return Err(Error::config(
            "classes",
            format!(
                "{} names for a model with {} outputs",
                classes.len(),
                arch.classes()
            ),
        ));
    }
    save(
        out,
        arch,
        &Weights::from_named(named),
        normalizer,
        item_shape,
        classes,
    )
    .map(|_| ())
}
