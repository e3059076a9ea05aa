//! Safetensors files: a tensor `x` `(n, ...)` of F32 or U8 (U8 scaled by 1/255; `(n, h, w)`
//! is one-channel images), an optional integer `y` `(n,)`, optional metadata `classes`
//! (comma-separated); ids are positions. Read whole through the `safetensors` crate; streamed,
//! by positioned reads of `x` after the header was checked against the file's length (every
//! tensor's byte range inside the data section, ranges tiling it, sizes matching shapes), so no
//! chunk read can leave the file. Both share the per-value code, so their items are equal bit
//! for bit.

use crate::data::labels::{declared_classes, LabelCheck};
use crate::data::plan::ImagePlan;
use crate::data::stream::{
    labels_beside_values, position_ids, Chunk, Format, ItemStream, Items, Loaded, PoolLabels,
};
use crate::error::{DataProblem, Error, Result};
use crate::hub::Hub;
use crate::observe::Observer;
use serde_json::Value;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// A safetensors file.
pub(crate) struct Safetensors<'a>(pub(crate) &'a Path);

impl Format for Safetensors<'_> {
    fn name(&self) -> String {
        self.0.display().to_string()
    }

    fn open(
        &self,
        _hub: &Hub,
        _observer: &mut dyn Observer,
        _plan: Option<&ImagePlan>,
    ) -> Result<Box<dyn ItemStream>> {
        Ok(Box::new(SafetensorsStream::open(self.0)?))
    }

    fn load(
        &self,
        _hub: &Hub,
        _observer: &mut dyn Observer,
        _plan: Option<&ImagePlan>,
    ) -> Result<Loaded> {
        Ok(Loaded {
            pool: load_safetensors(self.0)?,
            test: None,
        })
    }

    fn pool_labels(&self, _hub: &Hub, _observer: &mut dyn Observer) -> Result<PoolLabels> {
        Err(labels_beside_values(self.0))
    }
}

/// The largest safetensors header read (the format's own limit is 100 MB).
const MAX_HEADER: u64 = 100 << 20;

/// Values of a safetensors pool's `x` from its little-endian bytes (`u8s`: U8 scaled by
/// 1/255, else F32), checked finite; `first` is the flat position of `bytes`' first value in
/// the tensor, for the error (a streamed chunk starts past 0).
fn x_values(bytes: &[u8], u8s: bool, first: usize, path: &Path) -> Result<Vec<f32>> {
    let x: Vec<f32> = if u8s {
        bytes.iter().map(|&b| f32::from(b) / 255.0).collect()
    } else {
        bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    };
    if let Some(i) = x.iter().position(|v| !v.is_finite()) {
        return Err(Error::data(
            path,
            DataProblem::Other(format!(
                "tensor `x` holds a non-finite value at flat position {}",
                first + i
            )),
        ));
    }
    Ok(x)
}

/// The item shape of a safetensors pool's `x` of shape `(n, ...)`: `(n, h, w)` is one-channel
/// images `(1, h, w)`.
fn x_item_shape(shape: &[usize]) -> Vec<usize> {
    match &shape[1..] {
        [h, w] => vec![1, *h, *w],
        rest => rest.to_vec(),
    }
}

/// The first name a safetensors header gives twice, if any. A JSON object may repeat a key and
/// parsers keep one of them silently, so a file naming `x` twice would be read as whichever
/// came last.
fn repeated_key(header: &[u8]) -> Option<String> {
    struct FirstRepeat;
    impl<'de> serde::de::Visitor<'de> for FirstRepeat {
        type Value = Option<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> std::result::Result<Option<String>, A::Error> {
            let mut seen = std::collections::HashSet::new();
            let mut repeat = None;
            while let Some(k) = map.next_key::<String>()? {
                map.next_value::<serde::de::IgnoredAny>()?;
                if repeat.is_none() && !seen.insert(k.clone()) {
                    repeat = Some(k);
                }
            }
            Ok(repeat)
        }
    }
    let mut de = serde_json::Deserializer::from_slice(header);
    serde::Deserializer::deserialize_map(&mut de, FirstRepeat)
        .ok()
        .flatten()
}

fn repeated(key: &str) -> String {
    format!("not a valid safetensors file: its header names `{key}` twice")
}

/// Reads `x` (f32 or u8, `(n, ...)`) and optional `y` (any integer type, `(n,)`).
fn load_safetensors(path: &Path) -> Result<Items> {
    use safetensors::{Dtype, SafeTensors};
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let bad = |m: String| Error::data(path, DataProblem::Other(m));
    let st = SafeTensors::deserialize(&bytes)
        .map_err(|e| bad(format!("not a safetensors file: {e}")))?;
    // The crate checked the header's length against the file.
    let hlen = u64::from_le_bytes(bytes[..8].try_into().unwrap_or_default());
    if let Some(key) = repeated_key(&bytes[8..8 + hlen as usize]) {
        return Err(bad(repeated(&key)));
    }
    let (_, meta) = SafeTensors::read_metadata(&bytes)
        .map_err(|e| bad(format!("not a safetensors file: {e}")))?;
    let xv = st
        .tensor("x")
        .map_err(|_| bad("has no tensor `x` (items, ...)".into()))?;
    let shape = xv.shape().to_vec();
    if shape.len() < 2 || shape[0] == 0 {
        return Err(bad(format!(
            "tensor `x` has shape {shape:?}; expected (n, ...) with n > 0"
        )));
    }
    let n = shape[0];
    let u8s = match xv.dtype() {
        Dtype::F32 => false,
        Dtype::U8 => true,
        d => return Err(bad(format!("tensor `x` is {d:?}; expected F32 or U8"))),
    };
    let x = x_values(xv.data(), u8s, 0, path)?;
    let item_shape = x_item_shape(&shape);
    let labels: Vec<Option<u32>> = match st.tensor("y") {
        Err(_) => vec![None; n],
        Ok(yv) => {
            if yv.shape() != [n] {
                return Err(bad(format!(
                    "tensor `y` has shape {:?}; expected ({n},)",
                    yv.shape()
                )));
            }
            let dtype = format!("{:?}", yv.dtype());
            y_labels(yv.data(), &dtype, 0, path)?
                .into_iter()
                .map(Some)
                .collect()
        }
    };
    let listed = listed_classes(
        meta.metadata()
            .as_ref()
            .and_then(|m| m.get("classes"))
            .map(String::as_str),
    );
    let classes = declared_classes(&labels, listed, "the metadata `classes`", path)?;
    Ok(Items {
        ids: (0..n).map(|i| i.to_string()).collect(),
        x,
        item_shape,
        labels,
        classes,
    })
}

/// Labels from the little-endian bytes of a safetensors pool's `y` of dtype `dtype` (`U8`,
/// `I32`, `U32` or `I64`), each in `0..=u32::MAX`; `first` is the item of `bytes`' first value,
/// for the error (a streamed read starts past 0).
fn y_labels(bytes: &[u8], dtype: &str, first: usize, path: &Path) -> Result<Vec<u32>> {
    let bad = |m: String| Error::data(path, DataProblem::Other(m));
    let vals: Vec<i64> = match dtype {
        "U8" => bytes.iter().map(|&b| i64::from(b)).collect(),
        "I32" => bytes
            .chunks_exact(4)
            .map(|b| i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])))
            .collect(),
        "U32" => bytes
            .chunks_exact(4)
            .map(|b| i64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])))
            .collect(),
        "I64" => bytes
            .chunks_exact(8)
            .map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes")))
            .collect(),
        t => return Err(bad(format!("tensor `y` is {t}; expected an integer type"))),
    };
    if let Some(i) = vals
        .iter()
        .position(|&v| !(0..=i64::from(u32::MAX)).contains(&v))
    {
        return Err(bad(format!(
            "label {} of item {} is negative or too large",
            vals[i],
            first + i
        )));
    }
    Ok(vals.into_iter().map(|v| v as u32).collect())
}

/// The class names a safetensors pool's metadata lists (`classes`, comma-separated).
fn listed_classes(classes: Option<&str>) -> Option<Vec<String>> {
    classes
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.split(',').map(|c| c.trim().to_string()).collect())
}

#[derive(Clone, Copy)]
enum Dtype {
    F32,
    U8,
}

/// The `x` tensor of a safetensors file, read in chunks.
struct SafetensorsStream {
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
    fn open(path: &Path) -> Result<SafetensorsStream> {
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
        if let Some(key) = repeated_key(&header) {
            return Err(bad(path, repeated(&key)));
        }
        let obj = v
            .as_object()
            .ok_or_else(|| bad(path, "not a safetensors file: the header is not an object"))?;
        let data_len = len - 8 - hlen;
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        let mut x = None;
        let mut y = None;
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
            } else if name == "y" {
                y = Some((dtype.to_string(), shape, b, e - b));
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
        let item_shape = x_item_shape(&dims);
        // Labels, as the whole loader checks them: read in blocks, never all at once.
        let listed = listed_classes(
            obj.get("__metadata__")
                .and_then(|m| m.get("classes"))
                .and_then(Value::as_str),
        );
        let mut check = LabelCheck::new(listed, "the metadata `classes`", path)?;
        if let Some((ydtype, yshape, yb, ylen)) = y {
            if yshape != [shape[0]] {
                return Err(bad(
                    path,
                    format!("tensor `y` has shape {yshape:?}; expected ({},)", shape[0]),
                ));
            }
            let size = elem_size(&ydtype).unwrap_or(1);
            let block = (1u64 << 20) / size * size;
            let mut at = 0u64;
            let mut buf = Vec::new();
            while at < ylen {
                buf.clear();
                file.seek(SeekFrom::Start(8 + hlen + yb + at))
                    .and_then(|_| (&mut file).take(block.min(ylen - at)).read_to_end(&mut buf))
                    .map_err(|e| Error::io(path, e))?;
                if buf.is_empty() {
                    return Err(Error::io(
                        path,
                        std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "tensor `y`"),
                    ));
                }
                let first = (at / size) as usize;
                for l in y_labels(&buf, &ydtype, first, path)? {
                    check.add(Some(l))?;
                }
                at += buf.len() as u64;
            }
        }
        // Without `y` every label is absent, which no class rule can refuse.
        check.finish()?;
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
        let x = x_values(&buf, u8s, start * item, &self.path)?;
        self.next += k;
        Ok(Some(Chunk {
            start,
            ids: position_ids(start, k),
            x,
        }))
    }
}
