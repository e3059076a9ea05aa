//! A classifier's last layer kept in an embedding file: a safetensors or `.npz` file with
//! `features` `(n, d)` (the items) and `head.weight` `(C, d)` with an optional `head.bias`
//! `(C,)`, the linear layer the model that computed the features ends with, opens as a
//! checkpoint of the built-in `linear` model over raw features (no normalisation). So a file
//! written in PyTorch or numpy from an encoder and its fine-tuned head is scored with no other
//! checkpoint: `--checkpoint emb.safetensors --data emb.safetensors`, every scorer exact over
//! that layer.
//!
//! An optional `logits` `(n, C)` (what the model itself gave) is checked against
//! `features W^T + b` on the first rows when the file opens, so a transposed or mismatched head
//! is refused instead of scoring garbage. Only the headers, the head and those rows are read:
//! the features of a large file are not loaded. Both file kinds answer the same
//! [`HeadFile`] questions, so they are checked alike.

use super::config::{validate_config, Checkpoint, CheckpointConfig, OpenOptions};
use super::config::{TensorInfo, FORMAT};
use super::kind::Kind;
use super::weights::from_tensors;
use crate::data::source::{listed_classes, CheckedHeader, NpzHead, TensorEntry};
use crate::data::Normalizer;
use crate::error::{Error, Result};
use crate::hub::{Hub, HubRepo};
use crate::models::{Arch, ModelKind};
use crate::observe::Observer;
use candle_core::{Device, Tensor};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

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

/// What the head is read through: the arrays of one embedding file, by name.
trait HeadFile {
    /// What the file calls its arrays, for errors: "tensor" (safetensors) or "array" (numpy).
    fn noun(&self) -> &'static str;
    /// The shape of array `name`, `None` when the file has none.
    fn shape(&self, name: &str) -> Option<Vec<u64>>;
    /// Every value of the array `name` (present, its shape checked by the caller), as f64.
    fn values(&mut self, name: &str, path: &Path) -> Result<Vec<f64>>;
    /// The first `rows` rows of the two-dimensional array `name`, as f64.
    fn first_rows(&mut self, name: &str, rows: u64, path: &Path) -> Result<Vec<f64>>;
    /// The class names the file lists, `None` when it lists none.
    fn classes(&self) -> Result<Option<Vec<String>>>;
}

impl HeadFile for CheckedHeader {
    fn noun(&self) -> &'static str {
        "tensor"
    }

    fn shape(&self, name: &str) -> Option<Vec<u64>> {
        self.tensor(name).map(|t| t.shape.clone())
    }

    fn values(&mut self, name: &str, path: &Path) -> Result<Vec<f64>> {
        let t = entry(self, name, path)?;
        floats(&self.bytes(&t, path)?, &t.dtype, name, path)
    }

    fn first_rows(&mut self, name: &str, rows: u64, path: &Path) -> Result<Vec<f64>> {
        let t = entry(self, name, path)?;
        let n = t.shape.first().copied().unwrap_or(0).max(1);
        let part = TensorEntry {
            len: t.len / n * rows.min(n),
            ..t.clone()
        };
        floats(&self.bytes(&part, path)?, &t.dtype, name, path)
    }

    fn classes(&self) -> Result<Option<Vec<String>>> {
        Ok(listed_classes(
            self.header
                .get("__metadata__")
                .and_then(|m| m.get("classes"))
                .and_then(serde_json::Value::as_str),
        ))
    }
}

/// The tensor `name` of a checked header (present: the caller found its shape).
fn entry(h: &CheckedHeader, name: &str, path: &Path) -> Result<TensorEntry> {
    h.tensor(name)
        .cloned()
        .ok_or_else(|| bad(path, format!("has no tensor `{name}`")))
}

impl HeadFile for NpzHead {
    fn noun(&self) -> &'static str {
        "array"
    }

    fn shape(&self, name: &str) -> Option<Vec<u64>> {
        NpzHead::shape(self, name).map(|s| s.iter().map(|&d| d as u64).collect())
    }

    fn values(&mut self, name: &str, _path: &Path) -> Result<Vec<f64>> {
        Ok(NpzHead::values(self, name, None)?
            .into_iter()
            .map(f64::from)
            .collect())
    }

    fn first_rows(&mut self, name: &str, rows: u64, _path: &Path) -> Result<Vec<f64>> {
        Ok(NpzHead::values(self, name, Some(rows as usize))?
            .into_iter()
            .map(f64::from)
            .collect())
    }

    fn classes(&self) -> Result<Option<Vec<String>>> {
        NpzHead::classes(self)
    }
}

/// The embedding file `path` opened for its head when it holds one: a safetensors file or an
/// `.npz` with both [`FEATURES`] and [`HEAD_WEIGHT`] (a model's own weights file may name a
/// `head.weight`, a timm ViT's does, and opens as weights); `None` for anything else or
/// unreadable, which then opens (and fails) as the weights file it may be.
fn head_file(path: &Path) -> Result<Option<Box<dyn HeadFile>>> {
    let ext = |e: &str| path.extension().is_some_and(|x| x.eq_ignore_ascii_case(e));
    if !path.is_file() {
        return Ok(None);
    }
    if ext("safetensors") {
        let Ok(h) = CheckedHeader::read(path) else {
            return Ok(None);
        };
        let has = h.tensor(HEAD_WEIGHT).is_some() && h.tensor(FEATURES).is_some();
        return Ok(has.then(|| Box::new(h) as Box<dyn HeadFile>));
    }
    if ext("npz") {
        return Ok(NpzHead::open(path)?.map(|h| Box::new(h) as Box<dyn HeadFile>));
    }
    Ok(None)
}

/// The kind: an embedding file holding a head (see [`head_file`]), opened as a `linear`
/// checkpoint over the raw features; its headers are read when it is recognised and again
/// when it opens.
pub(crate) struct EmbeddedKind;

impl Kind for EmbeddedKind {
    fn detect(&self, path: &Path) -> Result<Option<PathBuf>> {
        Ok(head_file(path)?.map(|_| path.to_path_buf()))
    }

    fn open(
        &self,
        found: &Path,
        _: &OpenOptions,
        device: &Device,
        _: &mut dyn Observer,
    ) -> Result<Checkpoint> {
        match head_file(found)? {
            Some(mut h) => load(h.as_mut(), found, device),
            None => Err(bad(found, "no longer an embedding file with a head")),
        }
    }

    fn files(&self, found: &Path) -> Result<Vec<PathBuf>> {
        Ok(vec![found.to_path_buf()])
    }

    fn fetch_from_hub(
        &self,
        _: &HubRepo,
        _: &Hub,
        _: &mut dyn Observer,
    ) -> Result<Option<PathBuf>> {
        Ok(None)
    }
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

/// The head's sizes, checked against each other before any value is read.
struct HeadShape {
    /// Items `n`, feature dimension `d`, classes `c`.
    n: u64,
    d: usize,
    c: usize,
    /// Whether the file holds a bias and the model's logits.
    bias: bool,
    logits: bool,
}

/// The head's shapes in `h`: `features` `(n, d)`, `head.weight` `(c, d)` with `c >= 2`, the
/// optional bias `(c,)` and logits `(n, c)`; each mismatch is refused naming the tensor.
fn head_shape(h: &dyn HeadFile, path: &Path) -> Result<HeadShape> {
    let (Some(w), Some(x)) = (h.shape(HEAD_WEIGHT), h.shape(FEATURES)) else {
        return Err(bad(
            path,
            format!(
                "a head (`{HEAD_WEIGHT}`) kept in an embedding file needs the items as \
                 `{FEATURES}` (n, d) beside it"
            ),
        ));
    };
    let (b, logits) = (h.shape(HEAD_BIAS), h.shape(LOGITS));
    let noun = h.noun();
    let &[n, d] = x.as_slice() else {
        return Err(bad(
            path,
            format!("{noun} `{FEATURES}` has shape {x:?}; expected (n, d)"),
        ));
    };
    let &[c, wd] = w.as_slice() else {
        return Err(bad(
            path,
            format!("{noun} `{HEAD_WEIGHT}` has shape {w:?}; expected (C, d)"),
        ));
    };
    if wd != d {
        return Err(bad(
            path,
            format!(
                "{noun} `{HEAD_WEIGHT}` has shape ({c}, {wd}) for features of dimension {d}: \
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
            format!("{noun} `{HEAD_WEIGHT}` of shape ({c}, {d}): a head needs 2 classes or more and d >= 1"),
        ));
    }
    if let Some(b) = &b {
        if b.as_slice() != [c] {
            return Err(bad(
                path,
                format!(
                    "{noun} `{HEAD_BIAS}` has shape {b:?}; expected ({c},) for `{HEAD_WEIGHT}`'s {c} classes"
                ),
            ));
        }
    }
    if let Some(l) = &logits {
        if l.as_slice() != [n, c] {
            return Err(bad(
                path,
                format!(
                    "{noun} `{LOGITS}` has shape {l:?}; expected ({n}, {c}), a row of `{HEAD_WEIGHT}`'s \
                     classes per item"
                ),
            ));
        }
    }
    Ok(HeadShape {
        n,
        d: d as usize,
        c: c as usize,
        bias: b.is_some(),
        logits: logits.is_some(),
    })
}

/// The `linear` checkpoint configuration of a head of `c` classes over `d` raw features,
/// named by the file's `classes` (else `0..c`).
fn head_config(h: &mut dyn HeadFile, path: &Path, d: usize, c: usize) -> Result<CheckpointConfig> {
    let classes = match h.classes()? {
        Some(names) if names.len() != c => {
            return Err(bad(
                path,
                format!(
                    "the file's `classes` names {} classes, `{HEAD_WEIGHT}` has {c} rows",
                    names.len()
                ),
            ))
        }
        Some(names) => names,
        None => (0..c).map(|k| k.to_string()).collect(),
    };
    let kind = ModelKind::from_name("linear")
        .ok_or_else(|| Error::config("model", "the built-in `linear` model is missing"))?;
    let config = CheckpointConfig {
        format: FORMAT,
        alkit_version: env!("CARGO_PKG_VERSION").into(),
        arch: Arch::for_shape(kind, &[d], c),
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
    validate_config(&config, path)?;
    Ok(config)
}

/// Opens the head kept in the embedding file `path`, read through `h`, as a `linear`
/// checkpoint.
fn load(h: &mut dyn HeadFile, path: &Path, device: &Device) -> Result<Checkpoint> {
    let HeadShape {
        n,
        d,
        c,
        bias,
        logits,
    } = head_shape(h, path)?;
    // Sizes are within the file (its headers were checked against its length), so they fit
    // memory: the head is read only now that its shapes are right.
    let wv = h.values(HEAD_WEIGHT, path)?;
    let bv = match bias {
        true => h.values(HEAD_BIAS, path)?,
        false => vec![0.0; c],
    };
    if logits {
        let rows = CHECKED_ROWS.min(n);
        let xs = h.first_rows(FEATURES, rows, path)?;
        let ls = h.first_rows(LOGITS, rows, path)?;
        check_logits(&xs, &wv, &bv, &ls, (d, c), path)?;
    }
    let config = head_config(h, path, d, c)?;
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
