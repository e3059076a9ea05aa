//! External data: where a tensor's values lie outside the model (`TensorProto.external_data`),
//! found wherever ONNX Runtime would load them (initializers, sparse initializers, node
//! attributes, subgraphs), each location checked to be a plain relative path below the model's
//! folder and each byte range checked against its file before ONNX Runtime is given the model.

use super::protobuf::{bytes, fields, int64, string, varint, Wire};
use std::collections::HashMap;
use std::path::Path;

/// Where a tensor's values lie outside the model (`TensorProto.external_data`): a file named
/// relative to the model's folder, and the byte range in it.
#[derive(Debug, Default, PartialEq)]
pub(super) struct External {
    pub(super) location: String,
    pub(super) offset: u64,
    pub(super) length: Option<u64>,
}

impl External {
    /// Reads one `StringStringEntryProto` (key 1, value 2) into `self`.
    fn entry(&mut self, b: &[u8]) -> std::result::Result<(), String> {
        let (mut key, mut value) = (String::new(), String::new());
        for f in fields(b) {
            match f? {
                (1, w) => key = string(w, "an external data key")?,
                (2, w) => value = string(w, "an external data value")?,
                _ => {}
            }
        }
        let number = |v: &str| {
            v.parse::<u64>()
                .map_err(|_| format!("external data `{key}` is `{v}`, not a byte count"))
        };
        match key.as_str() {
            "location" => self.location = value,
            "offset" => self.offset = number(&value)?,
            "length" => self.length = Some(number(&value)?),
            _ => {}
        }
        Ok(())
    }

    /// The file named, below `dir`: a relative path of plain names (no `..`, no root), as
    /// ONNX's checker requires, so a model cannot make alkit or ONNX Runtime read outside its
    /// folder. `*` (ONNX Runtime's `*/_ORT_MEM_ADDR_/*` takes the offset as a memory address),
    /// `:` (a drive or an NTFS stream) and `\\` (a Windows separator) are refused too.
    fn path(&self, dir: &Path) -> std::result::Result<std::path::PathBuf, String> {
        use std::path::Component;
        let rel = Path::new(&self.location);
        let plain = !self.location.is_empty()
            && !self.location.contains(['\0', '*', ':', '\\'])
            && rel.components().all(|c| matches!(c, Component::Normal(_)));
        if !plain {
            return Err(format!(
                "external data location `{}` is not a relative path below the model's folder",
                self.location.escape_debug()
            ));
        }
        Ok(dir.join(rel))
    }

    /// The `want` bytes at the range given, checked against the range and the file's size
    /// before anything is read.
    pub(super) fn read(&self, dir: &Path, want: usize) -> std::result::Result<Vec<u8>, String> {
        use std::io::{Read, Seek, SeekFrom};
        let path = self.path(dir)?;
        let shown = path.display();
        let size = regular_size(&path)?;
        let mut f = std::fs::File::open(&path).map_err(|e| format!("{shown}: {e}"))?;
        let want = want as u64;
        if self.length.is_some_and(|l| l != want) {
            return Err(format!(
                "external data length {} for {want} bytes of values",
                self.length.unwrap_or_default()
            ));
        }
        if self.offset.checked_add(want).is_none_or(|end| end > size) {
            return Err(format!(
                "{shown} holds {size} bytes; the values need {want} from offset {}",
                self.offset
            ));
        }
        let mut buf = vec![0u8; want as usize];
        f.seek(SeekFrom::Start(self.offset))
            .and_then(|_| f.read_exact(&mut buf))
            .map_err(|e| format!("{shown}: {e}"))?;
        Ok(buf)
    }
}

/// The size of the regular file `path` (a link is followed: a Hub snapshot's files are links
/// into its blobs); a folder, a FIFO or a device is refused, as nothing could be read from it.
fn regular_size(path: &Path) -> std::result::Result<u64, String> {
    let m = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if !m.is_file() {
        return Err(format!("{}: not a regular file", path.display()));
    }
    Ok(m.len())
}

/// Bytes of `count` values of ONNX data type `dtype`, `None` for strings and unknown types
/// (4-bit types are packed two to a byte).
fn data_bytes(dtype: i64, count: u64) -> Option<u64> {
    match dtype {
        2 | 3 | 9 | 17..=20 => Some(count),
        4 | 5 | 10 | 16 => count.checked_mul(2),
        1 | 6 | 12 => count.checked_mul(4),
        7 | 11 | 13 | 14 => count.checked_mul(8),
        15 => count.checked_mul(16),
        21..=23 => Some(count.div_ceil(2)),
        _ => None,
    }
}

/// Whether the `TensorProto` `t` keeps its values in an external data file, and where: its
/// name and the location, offset and length, the location checked ([`External::path`]) and
/// the length the tensor's dims and type need (given where the file leaves it out, refused
/// where it says another). `data_location` is read as protobuf reads an enum, its low 32
/// bits, so a value ONNX Runtime takes for external is taken so here; any value other than
/// default (0) and external (1) is refused.
pub(super) fn tensor_external(t: &[u8]) -> std::result::Result<Option<(String, External)>, String> {
    let (mut dims, mut dtype, mut name) = (Vec::new(), 0i64, String::new());
    let (mut ext, mut location) = (External::default(), 0u32);
    for f in fields(t) {
        match f? {
            (1, Wire::Bytes(mut b)) => {
                while !b.is_empty() {
                    dims.push(varint(&mut b)?);
                }
            }
            (1, Wire::Varint(v)) => dims.push(v),
            (2, w) => dtype = int64(w, "a data type")?,
            (8, w) => name = string(w, "a tensor name")?,
            (13, Wire::Bytes(b)) => ext.entry(b)?,
            (14, Wire::Varint(v)) => location = v as u32,
            _ => {}
        }
    }
    let shown = |name: &str| {
        if name.is_empty() {
            "a tensor".to_string()
        } else {
            format!("tensor `{name}`")
        }
    };
    match location {
        0 => return Ok(None),
        1 => {}
        v => return Err(format!("{}: data location {v} (0 or 1)", shown(&name))),
    }
    ext.path(Path::new("."))
        .map_err(|e| format!("{}: {e}", shown(&name)))?;
    let count = dims
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d))
        .ok_or_else(|| format!("{}: dimensions whose product overflows", shown(&name)))?;
    match (data_bytes(dtype, count), ext.length) {
        (Some(need), Some(l)) if l != need => {
            return Err(format!(
            "{}: external data length {l} for {count} values of data type {dtype} ({need} bytes)",
            shown(&name)
        ))
        }
        (Some(need), None) => ext.length = Some(need),
        (None, None) => {
            return Err(format!(
                "{}: external data of data type {dtype} with no length",
                shown(&name)
            ))
        }
        _ => {}
    }
    Ok(Some((name, ext)))
}

/// Subgraphs nested deeper than this are refused (a hostile file could nest them until the
/// walk ran out of stack).
const MAX_GRAPH_DEPTH: usize = 64;

/// Every tensor with external data anywhere in the `ModelProto` `model`, in file order: the
/// graphs' initializers and sparse initializers, and every node attribute's tensors and
/// subgraphs (`If`, `Loop`, `Scan`), which ONNX Runtime loads alike.
pub(super) fn external_tensors(
    model: &[u8],
) -> std::result::Result<Vec<(String, External)>, String> {
    fn sparse(b: &[u8], out: &mut Vec<(String, External)>) -> std::result::Result<(), String> {
        for f in fields(b) {
            if let (1 | 2, w) = f? {
                out.extend(tensor_external(bytes(w, "a sparse tensor's values")?)?);
            }
        }
        Ok(())
    }
    fn graph(
        b: &[u8],
        depth: usize,
        out: &mut Vec<(String, External)>,
    ) -> std::result::Result<(), String> {
        if depth > MAX_GRAPH_DEPTH {
            return Err(format!("subgraphs nested deeper than {MAX_GRAPH_DEPTH}"));
        }
        for f in fields(b) {
            match f? {
                (5, w) => out.extend(tensor_external(bytes(w, "an initializer")?)?),
                (15, w) => sparse(bytes(w, "a sparse initializer")?, out)?,
                (1, w) => {
                    for f in fields(bytes(w, "a node")?) {
                        let (5, w) = f? else { continue };
                        for f in fields(bytes(w, "an attribute")?) {
                            match f? {
                                (5 | 10, w) => {
                                    out.extend(tensor_external(bytes(w, "a tensor attribute")?)?)
                                }
                                (6 | 11, w) => graph(bytes(w, "a subgraph")?, depth + 1, out)?,
                                (22 | 23, w) => {
                                    sparse(bytes(w, "a sparse tensor attribute")?, out)?
                                }
                                _ => {}
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    for f in fields(model) {
        if let (7, w) = f? {
            graph(bytes(w, "the graph")?, 0, &mut out)?;
        }
    }
    Ok(out)
}

/// The external data files the `ModelProto` `model`'s tensors name below `dir`, each once, in file
/// order, each a regular file holding every range named in it: a model is refused by
/// name before ONNX Runtime reads any of them.
pub(super) fn external_files(
    model: &[u8],
    dir: &Path,
) -> std::result::Result<Vec<std::path::PathBuf>, String> {
    let mut files: Vec<std::path::PathBuf> = Vec::new();
    let mut sizes: HashMap<std::path::PathBuf, u64> = HashMap::new();
    for (name, ext) in external_tensors(model)? {
        let path = ext.path(dir)?;
        let size = match sizes.get(&path) {
            Some(&s) => s,
            None => {
                let s = regular_size(&path).map_err(|e| format!("tensor `{name}`: {e}"))?;
                sizes.insert(path.clone(), s);
                files.push(path.clone());
                s
            }
        };
        let end = ext.offset.checked_add(ext.length.unwrap_or(0));
        if end.is_none_or(|e| e > size) {
            return Err(format!(
                "tensor `{name}`: {} holds {size} bytes; its values lie at offset {} \
                 length {}",
                path.display(),
                ext.offset,
                ext.length.unwrap_or(0)
            ));
        }
    }
    Ok(files)
}
