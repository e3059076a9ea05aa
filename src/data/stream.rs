//! Pools read in chunks, for scoring pools larger than memory.
//!
//! An [`ItemStream`] hands out consecutive chunks of a pool's items (ids and features, in the
//! pool's order); a scorer keeps only what it needs from each. Peak memory is then set by the
//! chunk size, not the pool. A safetensors pool is streamed by positioned reads of its `x`
//! tensor after its header was checked against the file's length (every tensor's byte range
//! inside the data section, ranges tiling it, sizes matching shapes), so no chunk read can
//! leave the file. Values are converted and checked (finite) by the in-memory loader's own
//! code ([`load_safetensors`](super::source::load_safetensors)), so a streamed item equals the
//! in-memory one bit for bit.

use super::source::Source;
use crate::error::{DataProblem, Error, Result};
use serde_json::Value;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// The largest safetensors header read (the format's own limit is 100 MB).
const MAX_HEADER: u64 = 100 << 20;

/// Consecutive items of a pool.
#[derive(Debug, Clone, PartialEq)]
pub struct Chunk {
    /// Position of the first item in the pool.
    pub start: usize,
    /// Ids `(k,)`.
    pub ids: Vec<String>,
    /// Features `(k, *item_shape)`, as the in-memory loader gives them.
    pub x: Vec<f32>,
}

/// A pool read chunk by chunk.
pub trait ItemStream {
    /// Items in the pool.
    fn len(&self) -> usize;
    /// True when the pool has no items.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Shape of one item.
    fn item_shape(&self) -> &[usize];
    /// The next at most `max` items, `None` once all were read.
    fn next_chunk(&mut self, max: usize) -> Result<Option<Chunk>>;
}

/// A streaming reader for `source`'s items (its training split), or `None` for source kinds
/// read whole (IDX, image folders, CSV, Parquet, the Hub).
pub fn open(source: &Source) -> Result<Option<Box<dyn ItemStream>>> {
    match source {
        Source::Safetensors(p) => Ok(Some(Box::new(SafetensorsStream::open(p)?))),
        _ => Ok(None),
    }
}

#[derive(Clone, Copy)]
enum Dtype {
    F32,
    U8,
}

/// The `x` tensor of a safetensors file, read in chunks.
pub struct SafetensorsStream {
    path: PathBuf,
    file: std::fs::File,
    dtype: Dtype,
    n: usize,
    item_shape: Vec<usize>,
    /// Byte offset of `x`'s first item in the file.
    base: u64,
    next: usize,
}

fn bad(path: &Path, m: impl Into<String>) -> Error {
    Error::data(path, DataProblem::Other(m.into()))
}

fn elem_size(dtype: &str) -> Option<u64> {
    Some(match dtype {
        "BOOL" | "U8" | "I8" | "F8_E5M2" | "F8_E4M3" => 1,
        "U16" | "I16" | "F16" | "BF16" => 2,
        "U32" | "I32" | "F32" => 4,
        "U64" | "I64" | "F64" => 8,
        _ => return None,
    })
}

impl SafetensorsStream {
    /// Opens `path` and checks its header (see the module docs); reads no item yet.
    pub fn open(path: &Path) -> Result<SafetensorsStream> {
        let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        let mut n8 = [0u8; 8];
        file.read_exact(&mut n8).map_err(|_| {
            bad(
                path,
                "not a safetensors file: shorter than its 8-byte header size",
            )
        })?;
        let hlen = u64::from_le_bytes(n8);
        if hlen > MAX_HEADER || hlen > len - 8 {
            return Err(bad(
                path,
                format!("not a safetensors file: a header of {hlen} bytes in a file of {len}"),
            ));
        }
        let mut header = vec![0u8; hlen as usize];
        file.read_exact(&mut header)
            .map_err(|e| Error::io(path, e))?;
        let v: Value = serde_json::from_slice(&header)
            .map_err(|e| bad(path, format!("not a safetensors file: header: {e}")))?;
        let obj = v
            .as_object()
            .ok_or_else(|| bad(path, "not a safetensors file: the header is not an object"))?;
        let data_len = len - 8 - hlen;
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        let mut x = None;
        for (name, t) in obj {
            if name == "__metadata__" {
                continue;
            }
            let dtype = t.get("dtype").and_then(Value::as_str).unwrap_or("");
            let shape: Option<Vec<u64>> = t
                .get("shape")
                .and_then(Value::as_array)
                .and_then(|a| a.iter().map(Value::as_u64).collect());
            let offs: Option<Vec<u64>> = t
                .get("data_offsets")
                .and_then(Value::as_array)
                .and_then(|a| a.iter().map(Value::as_u64).collect());
            let (Some(size), Some(shape), Some([b, e])) = (
                elem_size(dtype),
                shape,
                offs.as_deref()
                    .map(<[u64]>::to_vec)
                    .and_then(|o| <[u64; 2]>::try_from(o).ok()),
            ) else {
                return Err(bad(
                    path,
                    format!("not a safetensors file: tensor `{name}` has no valid dtype, shape or offsets"),
                ));
            };
            let bytes = shape
                .iter()
                .try_fold(size, |a, &d| a.checked_mul(d))
                .ok_or_else(|| bad(path, format!("tensor `{name}`: its shape overflows")))?;
            if b > e || e > data_len || e - b != bytes {
                return Err(bad(
                    path,
                    format!(
                        "not a safetensors file: tensor `{name}` at bytes {b}..{e} of a \
                         {data_len}-byte data section, for {bytes} bytes of {shape:?}"
                    ),
                ));
            }
            ranges.push((b, e));
            if name == "x" {
                x = Some((dtype.to_string(), shape, b));
            }
        }
        ranges.sort_unstable();
        let mut at = 0;
        for &(b, e) in &ranges {
            if b != at {
                return Err(bad(
                    path,
                    "not a safetensors file: tensors overlap or leave gaps",
                ));
            }
            at = e;
        }
        if at != data_len {
            return Err(bad(
                path,
                format!("not a safetensors file: tensors cover {at} of {data_len} data bytes"),
            ));
        }
        let (dtype, shape, b) = x.ok_or_else(|| bad(path, "has no tensor `x` (items, ...)"))?;
        let dtype = match dtype.as_str() {
            "F32" => Dtype::F32,
            "U8" => Dtype::U8,
            d => return Err(bad(path, format!("tensor `x` is {d}; expected F32 or U8"))),
        };
        if shape.len() < 2 || shape[0] == 0 {
            return Err(bad(
                path,
                format!("tensor `x` has shape {shape:?}; expected (n, ...) with n > 0"),
            ));
        }
        let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
        let item_shape = super::source::x_item_shape(&dims);
        Ok(SafetensorsStream {
            path: path.to_path_buf(),
            file,
            dtype,
            n: dims[0],
            item_shape,
            base: 8 + hlen + b,
            next: 0,
        })
    }
}

impl ItemStream for SafetensorsStream {
    fn len(&self) -> usize {
        self.n
    }

    fn item_shape(&self) -> &[usize] {
        &self.item_shape
    }

    fn next_chunk(&mut self, max: usize) -> Result<Option<Chunk>> {
        if self.next >= self.n || max == 0 {
            return Ok(None);
        }
        let (start, k) = (self.next, max.min(self.n - self.next));
        let item: usize = self.item_shape.iter().product();
        let size = match self.dtype {
            Dtype::F32 => 4,
            Dtype::U8 => 1,
        };
        let mut buf = vec![0u8; k * item * size];
        self.file
            .seek(SeekFrom::Start(self.base + (start * item * size) as u64))
            .and_then(|_| self.file.read_exact(&mut buf))
            .map_err(|e| Error::io(&self.path, e))?;
        let u8s = matches!(self.dtype, Dtype::U8);
        let x = super::source::x_values(&buf, u8s, start * item, &self.path)?;
        self.next += k;
        Ok(Some(Chunk {
            start,
            ids: (start..start + k).map(|i| i.to_string()).collect(),
            x,
        }))
    }
}
