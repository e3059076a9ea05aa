//! A classifier's last layer kept in an embedding file: a safetensors file with `features`
//! `(n, d)` (the items) and `head.weight` `(C, d)` with an optional `head.bias` `(C,)`, the
//! linear layer the model that computed the features ends with, opens as a checkpoint of the
//! built-in `linear` model over raw features (no normalisation). So a file written in PyTorch
//! from an encoder and its fine-tuned head is scored with no other checkpoint:
//! `--checkpoint emb.safetensors --data emb.safetensors`, every scorer exact over that layer.
//!
//! An optional `logits` `(n, C)` (what the model itself gave) is checked against
//! `features W^T + b` on the first rows when the file opens, so a transposed or mismatched head
//! is refused instead of scoring garbage. Only the header, the head and those rows are read:
//! the features of a large file are not loaded.

use super::{from_tensors, Checkpoint, CheckpointConfig, TensorInfo, FORMAT};
use crate::data::source::{listed_classes, CheckedHeader, TensorEntry};
use crate::data::Normalizer;
use crate::error::{Error, Result};
use crate::models::{Arch, ModelKind};
use candle_core::{Device, Tensor};
use std::collections::HashMap;
use std::path::Path;

/// The head's weight `(C, d)`.
pub const HEAD_WEIGHT: &str = "head.weight";
/// The head's bias `(C,)`; zeros where the file has none.
pub const HEAD_BIAS: &str = "head.bias";
/// The model's own logits `(n, C)`, checked against the head.
pub const LOGITS: &str = "logits";
/// The items, as the embedding layout names them.
const FEATURES: &str = "features";

/// Rows of `logits` checked against the head when the file opens.
const CHECKED_ROWS: u64 = 256;

/// The checked header of `path` when it is an embedding file holding a head: a safetensors
/// file with both [`FEATURES`] and [`HEAD_WEIGHT`] (a model's own weights file may name a
/// `head.weight`, a timm ViT's does, and opens as weights); `None` for anything else or
/// unreadable, which then opens (and fails) as the weights file it may be.
fn head_header(path: &Path) -> Option<CheckedHeader> {
    let safetensors = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("safetensors"));
    if !(safetensors && path.is_file()) {
        return None;
    }
    let h = CheckedHeader::read(path).ok()?;
    let has = |name: &str| h.tensors.iter().any(|t| t.name == name);
    (has(HEAD_WEIGHT) && has(FEATURES)).then_some(h)
}

/// Whether `path` is an embedding file holding a head (see [`head_header`]).
pub(super) fn has_head(path: &Path) -> bool {
    head_header(path).is_some()
}

/// The head kept in the embedding file `path` as a `linear` checkpoint (see the module
/// docs), `None` when `path` is not such a file; its header is read once.
pub(super) fn load_if_head(path: &Path, device: &Device) -> Result<Option<Checkpoint>> {
    head_header(path).map(|h| load(h, path, device)).transpose()
}

fn bad(path: &Path, m: impl Into<String>) -> Error {
    Error::state(path, m.into())
}

/// The f64 values of `bytes`, `name`'s data of dtype `dtype` (a float type).
fn floats(bytes: &[u8], dtype: &str, name: &str, path: &Path) -> Result<Vec<f64>> {
    let v: Vec<f64> = match dtype {
        "F32" => bytes
            .chunks_exact(4)
            .map(|b| f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])))
            .collect(),
        "F64" => bytes
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes(b.try_into().unwrap_or_default()))
            .collect(),
        "F16" => bytes
            .chunks_exact(2)
            .map(|b| f64::from(half::f16::from_le_bytes([b[0], b[1]]).to_f32()))
            .collect(),
        "BF16" => bytes
            .chunks_exact(2)
            .map(|b| f64::from(half::bf16::from_le_bytes([b[0], b[1]]).to_f32()))
            .collect(),
        d => {
            return Err(bad(
                path,
                format!("tensor `{name}` is {d}; expected F32, F64, F16 or BF16"),
            ))
        }
    };
    if let Some(i) = v
        .iter()
        .position(|x| !x.is_finite() || x.abs() > f64::from(f32::MAX))
    {
        return Err(bad(
            path,
            format!("tensor `{name}` holds a value that is not a finite f32 at flat position {i}"),
        ));
    }
    Ok(v)
}

/// The first `rows` rows of tensor `t` `(n, k)`, as f64.
fn first_rows(h: &mut CheckedHeader, t: &TensorEntry, rows: u64, path: &Path) -> Result<Vec<f64>> {
    let n = t.shape.first().copied().unwrap_or(0).max(1);
    let part = TensorEntry {
        len: t.len / n * rows.min(n),
        ..t.clone()
    };
    floats(&h.bytes(&part, path)?, &t.dtype, &t.name, path)
}

/// Opens the head kept in the embedding file `path`, whose checked header is `h`, as a
/// `linear` checkpoint.
fn load(mut h: CheckedHeader, path: &Path, device: &Device) -> Result<Checkpoint> {
    let find = |name: &str| h.tensors.iter().find(|t| t.name == name);
    let (Some(w), Some(x)) = (find(HEAD_WEIGHT), find(FEATURES)) else {
        return Err(bad(
            path,
            format!(
                "a head (`{HEAD_WEIGHT}`) kept in an embedding file needs the items as \
                 `{FEATURES}` (n, d) beside it"
            ),
        ));
    };
    let (w, x) = (w.clone(), x.clone());
    let (b, logits) = (find(HEAD_BIAS).cloned(), find(LOGITS).cloned());
    let &[n, d] = x.shape.as_slice() else {
        return Err(bad(
            path,
            format!(
                "tensor `{FEATURES}` has shape {:?}; expected (n, d)",
                x.shape
            ),
        ));
    };
    let &[c, wd] = w.shape.as_slice() else {
        return Err(bad(
            path,
            format!(
                "tensor `{HEAD_WEIGHT}` has shape {:?}; expected (C, d)",
                w.shape
            ),
        ));
    };
    if wd != d {
        return Err(bad(
            path,
            format!(
                "tensor `{HEAD_WEIGHT}` has shape ({c}, {wd}) for features of dimension {d}: \
                 it must be (classes, {d}), as PyTorch's nn.Linear stores it{}",
                if c == d {
                    " (a matrix stored (d, classes) must be transposed)"
                } else {
                    ""
                }
            ),
        ));
    }
    if c < 2 || d == 0 {
        return Err(bad(
            path,
            format!("tensor `{HEAD_WEIGHT}` of shape ({c}, {d}): a head needs 2 classes or more and d >= 1"),
        ));
    }
    // Sizes fit the file (the header was checked against its length), so they fit memory.
    let (c, d) = (c as usize, d as usize);
    let wv = floats(&h.bytes(&w, path)?, &w.dtype, HEAD_WEIGHT, path)?;
    let bv = match &b {
        Some(b) if b.shape != [c as u64] => {
            return Err(bad(
                path,
                format!(
                    "tensor `{HEAD_BIAS}` has shape {:?}; expected ({c},) for `{HEAD_WEIGHT}`'s {c} classes",
                    b.shape
                ),
            ))
        }
        Some(b) => floats(&h.bytes(b, path)?, &b.dtype, HEAD_BIAS, path)?,
        None => vec![0.0; c],
    };
    if let Some(l) = &logits {
        if l.shape != [n, c as u64] {
            return Err(bad(
                path,
                format!(
                    "tensor `{LOGITS}` has shape {:?}; expected ({n}, {c}), a row of `{HEAD_WEIGHT}`'s \
                     classes per item",
                    l.shape
                ),
            ));
        }
        let rows = CHECKED_ROWS.min(n);
        let xs = first_rows(&mut h, &x, rows, path)?;
        let ls = first_rows(&mut h, l, rows, path)?;
        check_logits(&xs, &wv, &bv, &ls, (d, c), path)?;
    }
    let meta = h.header.get("__metadata__");
    let classes = match listed_classes(
        meta.and_then(|m| m.get("classes"))
            .and_then(serde_json::Value::as_str),
    ) {
        Some(names) if names.len() != c => {
            return Err(bad(
                path,
                format!(
                    "the metadata `classes` names {} classes, `{HEAD_WEIGHT}` has {c} rows",
                    names.len()
                ),
            ))
        }
        Some(names) => names,
        None => (0..c).map(|k| k.to_string()).collect(),
    };
    let kind = ModelKind::from_name("linear")
        .ok_or_else(|| Error::config("model", "the built-in `linear` model is missing"))?;
    let arch = Arch::for_shape(kind, &[d], c);
    let config = CheckpointConfig {
        format: FORMAT,
        alkit_version: env!("CARGO_PKG_VERSION").into(),
        arch,
        // The head takes the features as the model that computed them gave them.
        normalizer: Normalizer {
            mean: vec![0.0; d],
            std: vec![1.0; d],
        },
        item_shape: vec![d],
        classes,
        tensors: vec![
            TensorInfo {
                name: "fc1.weight".into(),
                shape: vec![c, d],
            },
            TensorInfo {
                name: "fc1.bias".into(),
                shape: vec![c],
            },
        ],
        preprocess: None,
    };
    super::validate_config(&config, path)?;
    let to_f32 = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
    let mut tensors = HashMap::new();
    tensors.insert(
        "fc1.weight".to_string(),
        Tensor::from_vec(to_f32(&wv), (c, d), device)?,
    );
    tensors.insert(
        "fc1.bias".to_string(),
        Tensor::from_vec(to_f32(&bv), c, device)?,
    );
    from_tensors(config, tensors, false, path, device)
}

/// `features W^T + b` equals `logits` on the rows given: features `(r, d)`, `W` `(c, d)`,
/// `b` `(c)`, logits `(r, c)`, within 1e-4 of the logit's size (f32 rounding of a dot
/// product; a wrong head is off by whole units).
fn check_logits(
    xs: &[f64],
    w: &[f64],
    b: &[f64],
    logits: &[f64],
    (d, c): (usize, usize),
    path: &Path,
) -> Result<()> {
    for (r, (x, l)) in xs.chunks_exact(d).zip(logits.chunks_exact(c)).enumerate() {
        for k in 0..c {
            let z: f64 = b[k]
                + x.iter()
                    .zip(&w[k * d..(k + 1) * d])
                    .map(|(a, b)| a * b)
                    .sum::<f64>();
            let scale: f64 = 1.0
                + x.iter()
                    .zip(&w[k * d..(k + 1) * d])
                    .map(|(a, b)| (a * b).abs())
                    .sum::<f64>();
            if (z - l[k]).abs() > 1e-4 * scale {
                return Err(bad(
                    path,
                    format!(
                        "`{HEAD_WEIGHT}` and `{HEAD_BIAS}` do not give the file's `{LOGITS}`: item \
                         {r}, class {k}: features W^T + b = {z:.6}, logits = {:.6} (is the head \
                         the layer these features feed?)",
                        l[k]
                    ),
                ));
            }
        }
    }
    Ok(())
}
