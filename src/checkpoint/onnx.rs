//! ONNX models as checkpoints (cargo feature `onnx`): a `.onnx` file, as `torch.onnx.export`
//! or another exporter writes it, run by ONNX Runtime through the `ort` crate, which opens the
//! library the environment variable `ORT_DYLIB_PATH` names (scripts/onnxruntime.sh installs
//! it from PyPI's wheel and writes an env.sh that sets it).
//!
//! What is read of the model: one image input `(N, C, H, W)` of f32, whose batch is dynamic or
//! fixed (a fixed batch is served by padding the last one with zeros); the logits output
//! `(N, classes)` (the output named `logits`, else the graph's first); and the features its last
//! layer multiplies: the output the setting `onnx_features` names, or, where none is named, the
//! input of the Gemm (or MatMul, with or without an Add of a bias) that computes the logits,
//! found in the graph, told to the observer ([`Event::Chose`]) and added to the session's
//! outputs where the graph does not give it already. That node's weight and bias are read from
//! the file's initializers, so that the model's answer to [`Ask::LastLayer`] multiplies exactly
//! what the graph multiplies: `h W^T + b` is its logits (a probe batch checks it when the model
//! is opened). Nothing else of the graph is interpreted: the file is parsed here only as far as
//! the graph's nodes, outputs and initializers (a protobuf reader that checks every length
//! against what is left), and ONNX Runtime runs it. Weights kept in external data files are
//! checked wherever a tensor names one (location, regular file, byte range) before ONNX
//! Runtime is given the model, and read from the model's folder by both.
//!
//! The preprocessing is timm's: a timm `config.json` beside the model (as `save_config_for_hf`
//! writes it) says the input size, resize, crop, mean, std and class names, timm's defaults
//! filling absent keys (see [`super::timm`]); without one, timm's defaults for the input's own
//! size. ONNX Runtime has no autograd: training, weight noise and gradients through the whole
//! network are refused by name; last-layer quantities come from [`Ask::LastLayer`].

use super::config::{read_config_value, validate_config, Checkpoint, CheckpointConfig};
use super::config::{OpenOptions, FORMAT};
use super::timm::{data_config, DataConfig};
use crate::error::{contain, Error, Result, ResultExt};
use crate::models::{Arch, OnnxArch};
use crate::nn::init::Weights;
use crate::nn::{Ask, Classifier, LastLayer, Mode, Offer};
use crate::observe::{Event, Observer};
use candle_core::{DType, Tensor};
use ort::session::Session;
use ort::value::{TensorElementType, ValueType};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

/// The folder of the model file `path` (`.` for a bare name), where its external data lie.
fn model_dir(path: &Path) -> std::path::PathBuf {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf()
}

/// What alkit reads of an ONNX model's graph before ONNX Runtime sees it (what [`load`] reads
/// first, with the same bounded reader): for tools that inspect a model, and for the fuzzer.
#[derive(Debug, Clone, PartialEq)]
pub struct Outline {
    /// The graph's outputs.
    pub outputs: Vec<String>,
    /// The last layer computing the logits (the output `logits`, else the first): the tensor
    /// it multiplies, its classes and the features' dimension; or why none was found.
    pub last_layer: std::result::Result<(String, usize, usize), String>,
    /// The external data files its weights lie in, relative to its folder.
    pub external: Vec<String>,
}

/// The [`Outline`] of the ONNX model `path` (read whole, at most 2 GiB); its last layer's
/// weights are decoded, from external data files below its folder where they lie there.
pub fn outline(path: &Path) -> Result<Outline> {
    let bytes = read_model(path)?;
    let graph = checked_graph(&bytes, path)?;
    let external = locations(&graph, path)?;
    let logits = graph
        .outputs
        .iter()
        .find(|o| *o == "logits")
        .or(graph.outputs.first())
        .cloned();
    let last_layer = match logits {
        Some(l) => graph.head(&l).map(|h| (h.features, h.classes, h.dim)),
        None => Err("the graph has no output".to_string()),
    };
    Ok(Outline {
        outputs: graph.outputs.clone(),
        last_layer,
        external,
    })
}

/// The external data files the ONNX model `path` names, as locations relative to its folder
/// (checked as [`load`] checks them, not looked for): what a Hub repository's snapshot must
/// hold beside `model.onnx`.
pub fn external_locations(path: &Path) -> Result<Vec<String>> {
    let bytes = read_model(path)?;
    let graph =
        parse_model(&bytes).map_err(|e| Error::state(path, format!("not an ONNX model: {e}")))?;
    locations(&graph, path)
}

/// The graph of the model file `path` whose bytes are `bytes`, with every external data file
/// its tensors name checked (location, regular file, byte range) and its folder set for
/// reading them. Weights kept in external data files (as `onnx.save_model(...,
/// save_as_external_data=True)` and large exports write them) lie beside the model: ONNX
/// Runtime reads them from that folder, and the last layer's are read from them too.
fn checked_graph<'a>(bytes: &'a [u8], path: &Path) -> Result<Graph<'a>> {
    let mut graph =
        parse_model(bytes).map_err(|e| Error::state(path, format!("not an ONNX model: {e}")))?;
    let dir = model_dir(path);
    graph
        .external_files(&dir)
        .map_err(|e| Error::state(path, format!("external data: {e}")))?;
    graph.dir = Some(dir);
    Ok(graph)
}

/// The bytes of the model file `path`, refused past protobuf's 2 GiB before any is read.
fn read_model(path: &Path) -> Result<Vec<u8>> {
    let size = std::fs::metadata(path)
        .map_err(|e| Error::io(path, e))?
        .len();
    if size > MAX_MODEL_BYTES {
        return Err(Error::state(
            path,
            format!("{size} bytes; an ONNX model of at most {MAX_MODEL_BYTES} is read"),
        ));
    }
    std::fs::read(path).map_err(|e| Error::io(path, e))
}

/// The external data files `graph` names, each once, relative to the model's folder.
fn locations(graph: &Graph<'_>, path: &Path) -> Result<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    for (_, ext) in graph
        .externals()
        .map_err(|e| Error::state(path, format!("external data: {e}")))?
    {
        if !out.contains(&ext.location) {
            out.push(ext.location);
        }
    }
    Ok(out)
}

/// The environment variable naming ONNX Runtime's shared library.
pub const ORT_DYLIB_PATH: &str = "ORT_DYLIB_PATH";

/// The largest `.onnx` file read: protobuf's own limit for one message (2 GiB).
const MAX_MODEL_BYTES: u64 = 2 << 30;

/// The most classes a logits output may have (timm's bound for a head).
const MAX_CLASSES: usize = 1 << 16;

/// The most values one input item may have (a 3 x 4096 x 4096 image is far below).
const MAX_ITEM_VALUES: usize = 1 << 26;

/// The largest fixed batch served (a larger one is exported for a reason alkit cannot know).
const MAX_FIXED_BATCH: usize = 4096;

// ---------------------------------------------------------------------------------------------
// The protobuf wire format, as far as ONNX's graph needs it.

/// One field's value (wire types 0, 1, 2 and 5; the deprecated groups are refused).
#[derive(Clone, Copy)]
enum Wire<'a> {
    Varint(u64),
    I64(u64),
    Bytes(&'a [u8]),
    I32(u32),
}

/// The fields of one message, in order; an error ends the iteration.
struct Fields<'a> {
    buf: &'a [u8],
    failed: bool,
}

fn fields(buf: &[u8]) -> Fields<'_> {
    Fields { buf, failed: false }
}

fn varint(buf: &mut &[u8]) -> std::result::Result<u64, String> {
    let mut v = 0u64;
    for i in 0..10 {
        let (&b, rest) = buf
            .split_first()
            .ok_or_else(|| "a number runs past the end".to_string())?;
        *buf = rest;
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err("a number longer than 10 bytes".into())
}

fn take<'a>(buf: &mut &'a [u8], n: usize) -> std::result::Result<&'a [u8], String> {
    if n > buf.len() {
        return Err(format!(
            "a field of {n} bytes where {} are left (truncated?)",
            buf.len()
        ));
    }
    let (head, rest) = buf.split_at(n);
    *buf = rest;
    Ok(head)
}

impl<'a> Fields<'a> {
    fn read(&mut self) -> std::result::Result<(u64, Wire<'a>), String> {
        let key = varint(&mut self.buf)?;
        let field = key >> 3;
        if field == 0 {
            return Err("field number 0".into());
        }
        let value = match key & 7 {
            0 => Wire::Varint(varint(&mut self.buf)?),
            1 => {
                let b = take(&mut self.buf, 8)?;
                Wire::I64(u64::from_le_bytes(b.try_into().map_err(|_| "8 bytes")?))
            }
            2 => {
                let n = varint(&mut self.buf)?;
                let n = usize::try_from(n).map_err(|_| format!("a length of {n}"))?;
                Wire::Bytes(take(&mut self.buf, n)?)
            }
            5 => {
                let b = take(&mut self.buf, 4)?;
                Wire::I32(u32::from_le_bytes(b.try_into().map_err(|_| "4 bytes")?))
            }
            w => return Err(format!("wire type {w} (not a protobuf message)")),
        };
        Ok((field, value))
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = std::result::Result<(u64, Wire<'a>), String>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.buf.is_empty() {
            return None;
        }
        let r = self.read();
        self.failed = r.is_err();
        Some(r)
    }
}

fn string(w: Wire<'_>, what: &str) -> std::result::Result<String, String> {
    match w {
        Wire::Bytes(b) => std::str::from_utf8(b)
            .map(str::to_string)
            .map_err(|_| format!("{what} is not UTF-8")),
        _ => Err(format!("{what} is not a string")),
    }
}

fn bytes<'a>(w: Wire<'a>, what: &str) -> std::result::Result<&'a [u8], String> {
    match w {
        Wire::Bytes(b) => Ok(b),
        _ => Err(format!("{what} is not a message")),
    }
}

/// A varint read as protobuf's `int64` (two's complement).
fn int64(w: Wire<'_>, what: &str) -> std::result::Result<i64, String> {
    match w {
        Wire::Varint(v) => Ok(v as i64),
        _ => Err(format!("{what} is not an integer")),
    }
}

// ---------------------------------------------------------------------------------------------
// The graph: nodes, outputs and initializers.

/// One attribute value of a node, of the kinds the last layer's ops use.
#[derive(Clone, Copy)]
enum Attr<'a> {
    Int(i64),
    Float(f32),
    Tensor(&'a [u8]),
    Other,
}

/// A node (`NodeProto`).
struct Node<'a> {
    op: String,
    domain: String,
    name: String,
    inputs: Vec<String>,
    outputs: Vec<String>,
    attrs: HashMap<String, Attr<'a>>,
}

/// What of an ONNX file's graph is read: nodes, output names and initializers (as their
/// undecoded `TensorProto` bytes).
struct Graph<'a> {
    nodes: Vec<Node<'a>>,
    outputs: Vec<String>,
    initializers: HashMap<String, &'a [u8]>,
    /// The folder an initializer's external data file is named relative to (the model's);
    /// `None` refuses external data.
    dir: Option<std::path::PathBuf>,
    /// The whole `ModelProto`, for the tensors outside the top graph's initializers.
    model: &'a [u8],
}

fn parse_node(buf: &[u8]) -> std::result::Result<Node<'_>, String> {
    let mut n = Node {
        op: String::new(),
        domain: String::new(),
        name: String::new(),
        inputs: Vec::new(),
        outputs: Vec::new(),
        attrs: HashMap::new(),
    };
    for f in fields(buf) {
        match f? {
            (1, w) => n.inputs.push(string(w, "a node input")?),
            (2, w) => n.outputs.push(string(w, "a node output")?),
            (3, w) => n.name = string(w, "a node name")?,
            (4, w) => n.op = string(w, "an op type")?,
            (7, w) => n.domain = string(w, "a node domain")?,
            (5, w) => {
                let (mut name, mut value) = (String::new(), Attr::Other);
                for a in fields(bytes(w, "an attribute")?) {
                    match a? {
                        (1, w) => name = string(w, "an attribute name")?,
                        (2, Wire::I32(f)) => value = Attr::Float(f32::from_bits(f)),
                        (3, w) => value = Attr::Int(int64(w, "an attribute")?),
                        (5, Wire::Bytes(t)) => value = Attr::Tensor(t),
                        _ => {}
                    }
                }
                n.attrs.insert(name, value);
            }
            _ => {}
        }
    }
    Ok(n)
}

/// The graph of a `ModelProto`; several `graph` fields are merged as protobuf merges them
/// (their repeated fields appended).
fn parse_model(buf: &[u8]) -> std::result::Result<Graph<'_>, String> {
    let mut g = Graph {
        nodes: Vec::new(),
        outputs: Vec::new(),
        initializers: HashMap::new(),
        dir: None,
        model: buf,
    };
    let mut seen = false;
    for f in fields(buf) {
        let (7, w) = f? else { continue };
        seen = true;
        for f in fields(bytes(w, "the graph")?) {
            match f? {
                (1, w) => g.nodes.push(parse_node(bytes(w, "a node")?)?),
                (5, w) => {
                    let t = bytes(w, "an initializer")?;
                    let mut name = String::new();
                    for f in fields(t) {
                        if let (8, w) = f? {
                            name = string(w, "an initializer name")?;
                        }
                    }
                    g.initializers.insert(name, t);
                }
                (12, w) => {
                    for f in fields(bytes(w, "a graph output")?) {
                        if let (1, w) = f? {
                            g.outputs.push(string(w, "an output name")?);
                        }
                    }
                }
                _ => {}
            }
        }
    }
    if !seen {
        return Err("no graph".into());
    }
    Ok(g)
}

/// `ModelProto` bytes that, appended to a model, add `name` to its graph's outputs (protobuf
/// merges a repeated `graph` field into the first, appending its outputs); ONNX Runtime infers
/// the output's type and shape.
fn extra_output(name: &str) -> Vec<u8> {
    fn varint_bytes(mut v: u64, out: &mut Vec<u8>) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }
    fn field(number: u64, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(payload.len() + 12);
        varint_bytes((number << 3) | 2, &mut out);
        varint_bytes(payload.len() as u64, &mut out);
        out.extend_from_slice(payload);
        out
    }
    // ModelProto.graph (7) > GraphProto.output (12) > ValueInfoProto.name (1).
    field(7, &field(12, &field(1, name.as_bytes())))
}

/// A constant tensor, decoded to f32: its dims and values.
struct Constant {
    dims: Vec<usize>,
    values: Vec<f32>,
}

fn f16_to_f32(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0f32 } else { 1.0 };
    let exp = i32::from((h >> 10) & 0x1f);
    let mant = f32::from(h & 0x3ff);
    match exp {
        0 => sign * mant * 2f32.powi(-24),
        31 if mant == 0.0 => sign * f32::INFINITY,
        31 => f32::NAN,
        e => sign * (1.0 + mant / 1024.0) * 2f32.powi(e - 15),
    }
}

/// Where a tensor's values lie outside the model (`TensorProto.external_data`): a file named
/// relative to the model's folder, and the byte range in it.
#[derive(Debug, Default, PartialEq)]
struct External {
    location: String,
    offset: u64,
    length: Option<u64>,
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
    fn read(&self, dir: &Path, want: usize) -> std::result::Result<Vec<u8>, String> {
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
fn tensor_external(t: &[u8]) -> std::result::Result<Option<(String, External)>, String> {
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
fn external_tensors(model: &[u8]) -> std::result::Result<Vec<(String, External)>, String> {
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

/// Decodes a `TensorProto` of f32, f64, f16 or bf16 values, stored in the file (raw bytes or
/// typed fields) or, with `dir`, in an external data file below it; every count is checked
/// against the bytes present before anything is kept.
fn decode_tensor(t: &[u8], dir: Option<&Path>) -> std::result::Result<Constant, String> {
    let (mut dims, mut dtype, mut raw) = (Vec::new(), 0i64, None);
    let external = tensor_external(t)?;
    let read;
    let (mut floats, mut doubles, mut int32s) = (Vec::new(), Vec::new(), Vec::new());
    for f in fields(t) {
        match f? {
            (1, Wire::Bytes(mut b)) => {
                while !b.is_empty() {
                    dims.push(varint(&mut b)? as i64);
                }
            }
            (1, w) => dims.push(int64(w, "a dimension")?),
            (2, w) => dtype = int64(w, "a data type")?,
            (4, Wire::Bytes(b)) => {
                if b.len() % 4 != 0 {
                    return Err("float data of a length not a multiple of 4".into());
                }
                floats.extend(
                    b.chunks_exact(4)
                        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
                );
            }
            (4, Wire::I32(v)) => floats.push(f32::from_bits(v)),
            (5, Wire::Bytes(mut b)) => {
                while !b.is_empty() {
                    int32s.push(varint(&mut b)? as u32);
                }
            }
            (5, Wire::Varint(v)) => int32s.push(v as u32),
            (9, Wire::Bytes(b)) => raw = Some(b),
            (10, Wire::Bytes(b)) => {
                if b.len() % 8 != 0 {
                    return Err("double data of a length not a multiple of 8".into());
                }
                doubles.extend(b.chunks_exact(8).map(|c| {
                    f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]) as f32
                }));
            }
            (10, Wire::I64(v)) => doubles.push(f64::from_bits(v) as f32),
            _ => {}
        }
    }
    let dims: Vec<usize> = dims
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("dimension {d}")))
        .collect::<std::result::Result<_, _>>()?;
    let count = dims
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or("dimensions whose product overflows")?;
    let size = match dtype {
        1 => 4,
        11 => 8,
        10 | 16 => 2,
        d => {
            return Err(format!(
                "data type {d} (alkit reads float, double, float16, bfloat16)"
            ))
        }
    };
    if let Some((_, ext)) = external {
        let dir = dir.ok_or("its values are kept in an external data file")?;
        let want = count
            .checked_mul(size)
            .ok_or("dimensions whose product overflows")?;
        read = ext.read(dir, want)?;
        raw = Some(&read[..]);
    }
    let values: Vec<f32> = match raw {
        Some(b) => {
            if Some(b.len()) != count.checked_mul(size) {
                return Err(format!(
                    "{} bytes of data for {count} values of {size} bytes",
                    b.len()
                ));
            }
            match dtype {
                1 => b
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
                11 => b
                    .chunks_exact(8)
                    .map(|c| {
                        f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]) as f32
                    })
                    .collect(),
                10 => b
                    .chunks_exact(2)
                    .map(|c| f16_to_f32(u16::from_le_bytes([c[0], c[1]])))
                    .collect(),
                _ => b
                    .chunks_exact(2)
                    .map(|c| f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16))
                    .collect(),
            }
        }
        None => match dtype {
            1 => floats,
            11 => doubles,
            10 => int32s.iter().map(|&v| f16_to_f32(v as u16)).collect(),
            _ => int32s.iter().map(|&v| f32::from_bits(v << 16)).collect(),
        },
    };
    if values.len() != count {
        return Err(format!("{} values for dimensions {dims:?}", values.len()));
    }
    Ok(Constant { dims, values })
}

/// The last layer found in the graph: the tensor it multiplies, its weight `(c, d)` and bias
/// `(c,)`, and the node, in words.
struct Head {
    features: String,
    w: Vec<f32>,
    b: Vec<f32>,
    classes: usize,
    dim: usize,
    node: String,
}

impl<'a> Graph<'a> {
    /// Every tensor whose values lie in an external data file ([`external_tensors`]), by
    /// name, with where they lie, each checked ([`tensor_external`]).
    fn externals(&self) -> std::result::Result<Vec<(String, External)>, String> {
        external_tensors(self.model)
    }

    /// The external data files the model's tensors name below `dir`, each once, in file
    /// order, each a regular file holding every range named in it: a model is refused by
    /// name before ONNX Runtime reads any of them.
    fn external_files(&self, dir: &Path) -> std::result::Result<Vec<std::path::PathBuf>, String> {
        let mut files: Vec<std::path::PathBuf> = Vec::new();
        let mut sizes: HashMap<std::path::PathBuf, u64> = HashMap::new();
        for (name, ext) in self.externals()? {
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

    /// The node that writes `name`.
    fn producer(&self, name: &str) -> Option<&Node<'a>> {
        self.nodes
            .iter()
            .find(|n| n.domain.is_empty() && n.outputs.iter().any(|o| o == name))
    }

    /// `name` with every `Identity` before it passed through.
    fn source(&self, name: &str) -> String {
        let mut name = name.to_string();
        for _ in 0..self.nodes.len() {
            match self.producer(&name) {
                Some(n) if n.op == "Identity" && !n.inputs.is_empty() => name = n.inputs[0].clone(),
                _ => break,
            }
        }
        name
    }

    /// The constant tensor `name` holds (an initializer or a `Constant` node's value), if any.
    fn constant(&self, name: &str) -> Option<std::result::Result<Constant, String>> {
        let name = self.source(name);
        if let Some(t) = self.initializers.get(&name) {
            return Some(
                decode_tensor(t, self.dir.as_deref())
                    .map_err(|e| format!("initializer `{name}`: {e}")),
            );
        }
        match self.producer(&name) {
            Some(n) if n.op == "Constant" => match n.attrs.get("value") {
                Some(Attr::Tensor(t)) => Some(
                    decode_tensor(t, self.dir.as_deref())
                        .map_err(|e| format!("constant `{name}`: {e}")),
                ),
                _ => None,
            },
            _ => None,
        }
    }

    fn int_attr(n: &Node<'_>, key: &str, default: i64) -> i64 {
        match n.attrs.get(key) {
            Some(Attr::Int(v)) => *v,
            _ => default,
        }
    }

    fn float_attr(n: &Node<'_>, key: &str, default: f32) -> f32 {
        match n.attrs.get(key) {
            Some(Attr::Float(v)) => *v,
            _ => default,
        }
    }

    /// The last layer that writes `logits`: a Gemm, a MatMul, or an Add of a bias to a MatMul,
    /// whose weight (and bias) are constants; `Err` says why none was found.
    fn head(&self, logits: &str) -> std::result::Result<Head, String> {
        let name = self.source(logits);
        let node = self
            .producer(&name)
            .ok_or_else(|| format!("no node writes the logits `{logits}`"))?;
        let label = |n: &Node<'_>| {
            if n.name.is_empty() {
                format!("{} writing `{}`", n.op, n.outputs.join(", "))
            } else {
                format!("{} `{}`", n.op, n.name)
            }
        };
        let constant = |name: &str, what: &str| -> std::result::Result<Constant, String> {
            self.constant(name)
                .unwrap_or_else(|| Err(format!("its {what} `{name}` is not a constant")))
        };
        // The weight `(c, d)` from a `(d, c)` right operand: transposed.
        let transposed = |b: &Constant| -> std::result::Result<(Vec<f32>, usize, usize), String> {
            let [d, c] = b.dims[..] else {
                return Err(format!("its weight has dimensions {:?}", b.dims));
            };
            let mut w = vec![0f32; c * d];
            for i in 0..d {
                for j in 0..c {
                    w[j * d + i] = b.values[i * c + j];
                }
            }
            Ok((w, c, d))
        };
        // A bias broadcast over the batch: `(c,)`, `(1, c)` or one value.
        let bias = |t: &Constant, c: usize, scale: f32| -> std::result::Result<Vec<f32>, String> {
            match (&t.dims[..], t.values.len()) {
                (_, 1) => Ok(vec![t.values[0] * scale; c]),
                ([n], _) | ([1, n], _) if *n == c => {
                    Ok(t.values.iter().map(|v| v * scale).collect())
                }
                (d, _) => Err(format!(
                    "its bias has dimensions {d:?}, not one value per class ({c})"
                )),
            }
        };
        match node.op.as_str() {
            "Gemm" if node.inputs.len() >= 2 => {
                if Self::int_attr(node, "transA", 0) != 0 {
                    return Err(format!("{} transposes its input", label(node)));
                }
                let b = constant(&node.inputs[1], "weight")
                    .map_err(|e| format!("{}: {e}", label(node)))?;
                let alpha = Self::float_attr(node, "alpha", 1.0);
                let beta = Self::float_attr(node, "beta", 1.0);
                let (mut w, c, d) = if Self::int_attr(node, "transB", 0) != 0 {
                    let [c, d] = b.dims[..] else {
                        return Err(format!("{}: weight dimensions {:?}", label(node), b.dims));
                    };
                    (b.values, c, d)
                } else {
                    transposed(&b).map_err(|e| format!("{}: {e}", label(node)))?
                };
                w.iter_mut().for_each(|v| *v *= alpha);
                let b = match node.inputs.get(2).filter(|s| !s.is_empty()) {
                    Some(cname) => {
                        let t =
                            constant(cname, "bias").map_err(|e| format!("{}: {e}", label(node)))?;
                        bias(&t, c, beta).map_err(|e| format!("{}: {e}", label(node)))?
                    }
                    None => vec![0.0; c],
                };
                Ok(Head {
                    features: self.source(&node.inputs[0]),
                    w,
                    b,
                    classes: c,
                    dim: d,
                    node: label(node),
                })
            }
            "MatMul" | "Add" => {
                let (matmul, b) = if node.op == "Add" && node.inputs.len() == 2 {
                    let pick = |i: usize| {
                        let n = self.producer(&self.source(&node.inputs[i]))?;
                        (n.op == "MatMul").then_some((n, 1 - i))
                    };
                    let (m, other) = pick(0)
                        .or_else(|| pick(1))
                        .ok_or_else(|| format!("{} adds no MatMul's product", label(node)))?;
                    (m, Some(constant(&node.inputs[other], "bias")?))
                } else {
                    (node, None)
                };
                if matmul.inputs.len() != 2 {
                    return Err(format!(
                        "{} has {} inputs",
                        label(matmul),
                        matmul.inputs.len()
                    ));
                }
                let wt = constant(&matmul.inputs[1], "weight")
                    .map_err(|e| format!("{}: {e}", label(matmul)))?;
                let (w, c, d) = transposed(&wt).map_err(|e| format!("{}: {e}", label(matmul)))?;
                let b = match b {
                    Some(t) => bias(&t, c, 1.0).map_err(|e| format!("{}: {e}", label(node)))?,
                    None => vec![0.0; c],
                };
                Ok(Head {
                    features: self.source(&matmul.inputs[0]),
                    w,
                    b,
                    classes: c,
                    dim: d,
                    node: label(matmul),
                })
            }
            _ => Err(format!(
                "the logits are written by {}, not by a Gemm or MatMul",
                label(node)
            )),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// ONNX Runtime.

/// The process's ONNX Runtime environment, created once (the library opened from
/// `ORT_DYLIB_PATH`, its log silenced: the library never prints).
fn runtime() -> Result<&'static ort::environment::Environment> {
    static ENV: OnceLock<ort::environment::Environment> = OnceLock::new();
    static INIT: Mutex<()> = Mutex::new(());
    if let Some(env) = ENV.get() {
        return Ok(env);
    }
    let _guard = INIT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(env) = ENV.get() {
        return Ok(env);
    }
    let how = "ONNX models run in ONNX Runtime, whose shared library this variable names: \
               scripts/onnxruntime.sh DIR installs it from PyPI and writes DIR/env.sh, which sets it";
    let path = std::env::var_os(ORT_DYLIB_PATH).unwrap_or_default();
    if path.is_empty() {
        return Err(Error::env(ORT_DYLIB_PATH, "", format!("not set; {how}")));
    }
    let shown = path.to_string_lossy().into_owned();
    if !Path::new(&path).is_file() {
        return Err(Error::env(
            ORT_DYLIB_PATH,
            shown,
            format!("names no file; {how}"),
        ));
    }
    let builder = ort::init_from(&path).map_err(|e| {
        Error::env(
            ORT_DYLIB_PATH,
            shown.clone(),
            format!("not ONNX Runtime's library ({e}); {how}"),
        )
    })?;
    let env = contain(Path::new(&path), "ONNX Runtime", || {
        builder
            .with_name("alkit")
            .with_logger(std::sync::Arc::new(|_, _, _, _, _| {}))
            .build()
            .map_err(|e| {
                Error::env(
                    ORT_DYLIB_PATH,
                    shown.clone(),
                    format!("ONNX Runtime did not start: {e}"),
                )
            })
    })?;
    Ok(ENV.get_or_init(|| env))
}

/// A dimension of an input or output as ONNX Runtime reports it: `None` when dynamic.
fn fixed(d: i64) -> Option<usize> {
    usize::try_from(d).ok().filter(|&d| d > 0)
}

/// An output's dims as ONNX Runtime reports them, checked to be f32 of rank 2.
fn output_dims(session: &Session, name: &str, path: &Path, what: &str) -> Result<Vec<i64>> {
    let outlet = session
        .outputs()
        .iter()
        .find(|o| o.name() == name)
        .ok_or_else(|| Error::state(path, format!("ONNX Runtime lists no output `{name}`")))?;
    match outlet.dtype() {
        ValueType::Tensor { ty, shape, .. } if *ty == TensorElementType::Float32 => {
            if shape.len() != 2 {
                return Err(Error::state(
                    path,
                    format!(
                        "output `{name}` ({what}) has dimensions {:?}; alkit reads (batch, {what})",
                        &shape[..]
                    ),
                ));
            }
            Ok(shape.to_vec())
        }
        other => Err(Error::state(
            path,
            format!("output `{name}` ({what}) is {other}, not a float32 tensor"),
        )),
    }
}

/// An ONNX model run by ONNX Runtime: inference only ([`Classifier::forward`] in training mode
/// is an error), features and its last layer through [`Ask::LastLayer`].
pub struct OnnxModel {
    session: Mutex<Session>,
    input: String,
    logits: String,
    /// The features output and the last layer `(W (c, d), b (c,))`, where found.
    head: Option<(String, Tensor, Tensor)>,
    /// A batch dimension fixed in the graph: every run has exactly this many rows.
    fixed_batch: Option<usize>,
    item_shape: Vec<usize>,
    classes: usize,
}

impl OnnxModel {
    /// Logits `(n, c)` and, when asked and found, features `(n, d)` of `x (n, *item_shape)`,
    /// in the model's fixed batches (the last padded with zeros) or in one run.
    fn run(&self, x: &Tensor, features: bool) -> candle_core::Result<(Tensor, Option<Tensor>)> {
        let dims = x.dims();
        if dims.len() != self.item_shape.len() + 1 || dims[1..] != self.item_shape[..] {
            candle_core::bail!(
                "the ONNX model takes items of shape {:?}, given a batch {dims:?}",
                self.item_shape
            );
        }
        let n = dims[0];
        let per: usize = self.item_shape.iter().product();
        let values = x.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        let feature_name = self.head.as_ref().filter(|_| features).map(|h| h.0.clone());
        let step = self.fixed_batch.unwrap_or(n.max(1));
        let (mut logits, mut feats) = (Vec::with_capacity(n * self.classes), Vec::new());
        let mut session = self
            .session
            .lock()
            .map_err(|_| candle_core::Error::Msg("the ONNX session was poisoned".into()))?;
        let mut start = 0;
        while start < n {
            let rows = step.min(n - start);
            let mut chunk = values[start * per..(start + rows) * per].to_vec();
            chunk.resize(step * per, 0.0);
            let mut shape = vec![step as i64];
            shape.extend(self.item_shape.iter().map(|&d| d as i64));
            let ort_err = |e: ort::Error| candle_core::Error::Msg(format!("ONNX Runtime: {e}"));
            let tensor = ort::value::Tensor::from_array((shape, chunk)).map_err(ort_err)?;
            let out = session
                .run(ort::inputs![self.input.as_str() => tensor])
                .map_err(ort_err)?;
            let read = |name: &str, width: Option<usize>, into: &mut Vec<f32>| {
                let value = out.get(name).ok_or_else(|| {
                    candle_core::Error::Msg(format!("ONNX Runtime gave no output `{name}`"))
                })?;
                let (s, data) = value.try_extract_tensor::<f32>().map_err(ort_err)?;
                let ok =
                    s.len() == 2 && s[0] == step as i64 && width.is_none_or(|w| s[1] == w as i64);
                if !ok {
                    candle_core::bail!(
                        "output `{name}` has dimensions {:?} for a batch of {step}",
                        &s[..]
                    );
                }
                let w = s[1] as usize;
                into.extend_from_slice(&data[..rows * w]);
                Ok(w)
            };
            read(&self.logits, Some(self.classes), &mut logits)?;
            if let Some(f) = &feature_name {
                read(f, None, &mut feats)?;
            }
            start += rows;
        }
        drop(session);
        let device = x.device();
        let logits = Tensor::from_vec(logits, (n, self.classes), device)?;
        let feats = match feature_name {
            Some(_) => {
                let d = feats.len().checked_div(n).unwrap_or(0);
                Some(Tensor::from_vec(feats, (n, d), device)?)
            }
            None => None,
        };
        Ok((logits.to_dtype(x.dtype())?, feats))
    }
}

impl Classifier for OnnxModel {
    fn forward(&self, x: &Tensor, mode: &mut Mode<'_>) -> candle_core::Result<Tensor> {
        match mode {
            Mode::Eval => self.predict(x),
            Mode::Train(_) => candle_core::bail!(
                "an ONNX model runs in ONNX Runtime, which has no autograd: it cannot be \
                 trained, run with dropout on or differentiated (its last layer's quantities \
                 come from its features)"
            ),
        }
    }

    fn predict(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        Ok(self.run(x, false)?.0)
    }

    fn offer(&self, ask: Ask<'_>) -> candle_core::Result<Option<Offer>> {
        match ask {
            Ask::LastLayer { x } => {
                let Some((_, w, b)) = &self.head else {
                    return Ok(None);
                };
                let (_, h) = self.run(x, true)?;
                let h = h.ok_or_else(|| candle_core::Error::Msg("no features".into()))?;
                let h = h.to_dtype(w.dtype())?;
                Ok(Some(Offer::LastLayer(LastLayer::new(
                    &h,
                    &w.to_device(x.device())?,
                    Some(&b.to_device(x.device())?),
                )?)))
            }
            _ => Ok(None),
        }
    }

    fn classes(&self) -> usize {
        self.classes
    }
}

/// The preprocessing of a model without a `config.json`: timm's defaults for its input
/// `item_shape` `(c, h, w)`; or, with the mean and std `options` give, those, the items
/// resized to the model's size without a crop. timm's defaults have a mean and std for 3
/// channels only; without them another channel count is refused with the `config.json` to
/// write at `cfg_path`.
fn defaults(
    item_shape: &[usize],
    classes: usize,
    options: &OpenOptions,
    cfg_path: &Path,
) -> Result<DataConfig> {
    let [c, h, w] = item_shape[..] else {
        return Err(Error::state(cfg_path, "an image input of three dimensions"));
    };
    if h != w {
        return Err(Error::state(
            cfg_path,
            format!(
                "missing, and the model takes {h}x{w} inputs: timm's default transform prepares \
                 square inputs only; write the model's preprocessing there"
            ),
        ));
    }
    let per_channel = |v: &Option<Vec<f32>>, name: &'static str| -> Result<Option<Vec<f32>>> {
        match v.as_deref() {
            None => Ok(None),
            Some([one]) => Ok(Some(vec![*one; c])),
            Some(all) if all.len() == c => Ok(Some(all.to_vec())),
            Some(all) => Err(Error::config(
                name,
                format!(
                    "{} values for a model of {c} channels: give one, or {c}",
                    all.len()
                ),
            )),
        }
    };
    let (mean, std) = (
        per_channel(&options.input_mean, "input_mean")?,
        per_channel(&options.input_std, "input_std")?,
    );
    let mut cfg = serde_json::json!({"input_size": [c, h, w], "num_classes": classes});
    match (mean, std) {
        (Some(m), Some(s)) => {
            if let Some(bad) = s.iter().find(|v| !(v.is_finite() && **v > 0.0)) {
                return Err(Error::config(
                    "input_std",
                    format!("{bad} is not a positive number"),
                ));
            }
            if let Some(bad) = m.iter().find(|v| !v.is_finite()) {
                return Err(Error::config(
                    "input_mean",
                    format!("{bad} is not a number"),
                ));
            }
            // Given inline, the items are taken at the model's size as they are (no
            // crop), as a model trained on such items saw them.
            cfg["mean"] = serde_json::json!(m);
            cfg["std"] = serde_json::json!(s);
            cfg["crop_pct"] = serde_json::json!(1.0);
            cfg["interpolation"] = serde_json::json!("bilinear");
        }
        (None, None) if c == 3 => {}
        (None, None) => return Err(Error::state(cfg_path, minimal_config(c, h, classes))),
        _ => {
            return Err(Error::config(
                "input_mean",
                "and setting `input_std` give the model's normalisation together: give both",
            ))
        }
    }
    data_config(serde_json::json!({ "pretrained_cfg": cfg }), cfg_path)
}

/// Why a model of `c` channels needs a `config.json`, and the one to write.
fn minimal_config(c: usize, side: usize, classes: usize) -> String {
    let zeros = vec!["0.0"; c].join(", ");
    let ones = vec!["1.0"; c].join(", ");
    format!(
        "missing, and timm's defaults (ImageNet's mean and std) are for 3 channels, not the \
         model's {c}: write its preprocessing there, with the mean and std its training used \
         on pixel values in [0, 1], e.g.\n  {{\"architecture\": \"onnx\", \"num_classes\": \
         {classes}, \"pretrained_cfg\": {{\"input_size\": [{c}, {side}, {side}], \"mean\": \
         [{zeros}], \"std\": [{ones}], \"interpolation\": \"bilinear\", \"crop_pct\": \
         1.0}}}}\nor, for a model that takes the pixel values in [0, 1] as they are, give \
         setting `input_mean` 0 and setting `input_std` 1"
    )
}

/// Opens the ONNX model at `path` (see the module's documentation); what it chose unnamed (the
/// features, the logits output by position) is told to `observer`.
pub fn load(path: &Path, options: &OpenOptions, observer: &mut dyn Observer) -> Result<Checkpoint> {
    let mut bytes = read_model(path)?;
    let graph = checked_graph(&bytes, path)?;
    let dir = model_dir(path);
    let shown = path.display().to_string();
    // The timm configuration beside it, read before anything runs.
    // One given in the options is read whatever it is (a missing file is an error, not
    // timm's defaults).
    let cfg_path = options
        .onnx_config
        .clone()
        .unwrap_or_else(|| path.with_file_name("config.json"));
    let data: Option<DataConfig> = if options.onnx_config.is_some() {
        let read = read_config_value(&cfg_path).and_then(|v| data_config(v, &cfg_path));
        Some(read.context_with(|| "the preprocessing that setting `onnx_config` names")?)
    } else if cfg_path.is_file() {
        Some(data_config(read_config_value(&cfg_path)?, &cfg_path)?)
    } else {
        None
    };
    // The outputs: logits by name or position, features by the setting or the graph.
    let outputs = &graph.outputs;
    let listed = || {
        outputs
            .iter()
            .map(|o| format!("`{o}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let logits = match outputs.iter().find(|o| *o == "logits") {
        Some(l) => l.clone(),
        None => {
            let first = outputs
                .first()
                .ok_or_else(|| Error::state(path, "the graph has no output"))?
                .clone();
            observer.on(&Event::Chose {
                source: &shown,
                what: &format!(
                    "logits: output `{first}`, the graph's first (none is named `logits`)"
                ),
            });
            first
        }
    };
    let head = graph.head(&logits);
    let (features, added) = match (&options.onnx_features, &head) {
        (Some(named), _) if !outputs.contains(named) => {
            return Err(Error::config(
                "onnx_features",
                format!("{shown} has no output `{named}`; its outputs: {}", listed()),
            ))
        }
        (Some(named), Err(why)) => {
            return Err(Error::config(
                "onnx_features",
                format!(
                    "{shown}: output `{named}` is named as the features, but the last layer \
                     that multiplies them was not found: {why}"
                ),
            ))
        }
        (Some(named), Ok(h)) => {
            if graph.source(named) != h.features {
                return Err(Error::config(
                    "onnx_features",
                    format!(
                        "{shown}: output `{named}` is not what the last layer ({}) multiplies \
                         (`{}`), so its features with that layer would not give the logits",
                        h.node, h.features
                    ),
                ));
            }
            (Some(named.clone()), false)
        }
        (None, Ok(h)) => {
            // The graph's own output where it gives the tensor (through Identity or not).
            let given = outputs.iter().find(|o| graph.source(o) == h.features);
            let name = given.cloned().unwrap_or_else(|| h.features.clone());
            observer.on(&Event::Chose {
                source: &shown,
                what: &format!(
                    "features: `{name}`, the input of the last layer ({}, {} x {}){}",
                    h.node,
                    h.classes,
                    h.dim,
                    if given.is_some() {
                        ""
                    } else {
                        ", added to the outputs"
                    }
                ),
            });
            (Some(name), given.is_none())
        }
        (None, Err(why)) => {
            observer.on(&Event::Chose {
                source: &shown,
                what: &format!(
                    "no features: {why}; scores that read features or the last layer are \
                     unavailable"
                ),
            });
            (None, false)
        }
    };
    let head = head.ok().filter(|_| features.is_some());
    drop(graph);
    if let (true, Some(f)) = (added, &features) {
        bytes.extend_from_slice(&extra_output(f));
    }
    let env = runtime()?;
    let threads = rayon::current_num_threads().max(1);
    let session = contain(path, "ONNX Runtime", || {
        let refused = |e: String| Error::state(path, format!("ONNX Runtime refused it: {e}"));
        // A model given as bytes has no folder of its own: name the one its external data
        // lie in (checked above), wherever in the graph a tensor names them.
        Session::builder(env)
            .map_err(|e| refused(e.to_string()))?
            .with_intra_threads(threads)
            .map_err(|e| refused(e.to_string()))?
            .with_config_entry(
                "session.model_external_initializers_file_folder_path",
                dir.to_string_lossy(),
            )
            .map_err(|e| refused(e.to_string()))?
            .commit_from_memory(&bytes)
            .map_err(|e| refused(e.to_string()))
    })?;
    drop(bytes);
    // The input: one image tensor (N, C, H, W) of f32.
    let [input] = session.inputs() else {
        return Err(Error::state(
            path,
            format!(
                "{} inputs; alkit feeds a model one input, the images",
                session.inputs().len()
            ),
        ));
    };
    let input_name = input.name().to_string();
    let in_dims: Vec<i64> = match input.dtype() {
        ValueType::Tensor { ty, shape, .. } if *ty == TensorElementType::Float32 => shape.to_vec(),
        other => {
            return Err(Error::state(
                path,
                format!("input `{input_name}` is {other}, not a float32 tensor"),
            ))
        }
    };
    if in_dims.len() != 4 {
        return Err(Error::state(
            path,
            format!(
                "input `{input_name}` has dimensions {in_dims:?}; alkit feeds images \
                 (batch, channels, height, width)"
            ),
        ));
    }
    let fixed_batch = fixed(in_dims[0]);
    if fixed_batch.is_some_and(|b| b > MAX_FIXED_BATCH) {
        return Err(Error::state(
            path,
            format!(
                "input `{input_name}` has a fixed batch of {}; at most {MAX_FIXED_BATCH} is served",
                in_dims[0]
            ),
        ));
    }
    let from_config = data.as_ref().map(|d| d.preprocess.item_shape());
    let names = ["channels", "height", "width"];
    let mut item_shape = Vec::with_capacity(3);
    for (k, &d) in in_dims[1..].iter().enumerate() {
        let given = from_config.as_ref().map(|s| s[k]);
        item_shape.push(match (fixed(d), given) {
            (Some(d), Some(g)) if d != g => {
                return Err(Error::state(
                    &cfg_path,
                    format!(
                        "says {} {g}, the model's input `{input_name}` has {d}",
                        names[k]
                    ),
                ))
            }
            (Some(d), _) => d,
            (None, Some(g)) => g,
            (None, None) => {
                return Err(Error::state(
                    path,
                    format!(
                        "input `{input_name}` has a dynamic {} (dimension {}), and no config.json \
                         beside the model says its size: write one with pretrained_cfg.input_size",
                        names[k],
                        k + 1
                    ),
                ))
            }
        });
    }
    if item_shape.iter().product::<usize>() > MAX_ITEM_VALUES {
        return Err(Error::state(
            path,
            format!("items of shape {item_shape:?} are larger than alkit reads"),
        ));
    }
    let logit_dims = output_dims(&session, &logits, path, "classes")?;
    if let Some(f) = &features {
        output_dims(&session, f, path, "features")?;
    }
    let mut model = OnnxModel {
        session: Mutex::new(session),
        input: input_name,
        logits: logits.clone(),
        head: None,
        fixed_batch,
        item_shape: item_shape.clone(),
        classes: 0,
    };
    // The class count: the output's, or one probe batch's where it is dynamic.
    let probe_rows = fixed_batch.unwrap_or(1);
    let mut probe_shape = vec![probe_rows];
    probe_shape.extend(&item_shape);
    let probe = Tensor::zeros(probe_shape, DType::F32, &candle_core::Device::Cpu)?;
    model.classes = match fixed(logit_dims[1]) {
        Some(c) => c,
        None => {
            // A run reads the class count from the output itself.
            let run = contain(path, "ONNX Runtime", || {
                let mut s = model
                    .session
                    .lock()
                    .map_err(|_| Error::state(path, "the ONNX session was poisoned"))?;
                let mut shape = vec![probe_rows as i64];
                shape.extend(item_shape.iter().map(|&d| d as i64));
                let t = ort::value::Tensor::from_array((shape, vec![0f32; probe.elem_count()]))
                    .map_err(|e| Error::state(path, format!("ONNX Runtime: {e}")))?;
                let out = s
                    .run(ort::inputs![model.input.as_str() => t])
                    .map_err(|e| Error::state(path, format!("ONNX Runtime failed: {e}")))?;
                let v = out.get(&logits).ok_or_else(|| {
                    Error::state(path, format!("ONNX Runtime gave no output `{logits}`"))
                })?;
                let (s, _) = v
                    .try_extract_tensor::<f32>()
                    .map_err(|e| Error::state(path, format!("output `{logits}`: {e}")))?;
                Ok(s.get(1).copied().unwrap_or(0))
            })?;
            usize::try_from(run).unwrap_or(0)
        }
    };
    if model.classes == 0 || model.classes > MAX_CLASSES {
        return Err(Error::state(
            path,
            format!(
                "output `{logits}` has {} classes; a classifier of 1 to {MAX_CLASSES} is read",
                model.classes
            ),
        ));
    }
    if let (Some(h), Some(f)) = (&head, &features) {
        if h.classes != model.classes {
            return Err(Error::state(
                path,
                format!(
                    "the last layer ({}) has {} outputs, the logits `{logits}` {}",
                    h.node, h.classes, model.classes
                ),
            ));
        }
        let w = Tensor::from_vec(h.w.clone(), (h.classes, h.dim), &candle_core::Device::Cpu)?;
        let b = Tensor::from_vec(h.b.clone(), h.classes, &candle_core::Device::Cpu)?;
        model.head = Some((f.clone(), w, b));
    }
    // One probe batch through the session: the outputs' shapes, and the last layer found in
    // the graph giving the logits ONNX Runtime computes.
    let probed = contain(path, "ONNX Runtime", || {
        let (logits_out, feats) = model
            .run(&probe, model.head.is_some())
            .map_err(|e| Error::state(path, e.to_string()))?;
        if let (Some(h), Some((_, w, b))) = (feats, &model.head) {
            if h.dim(1)? != w.dim(1)? {
                return Err(Error::state(
                    path,
                    format!(
                        "the features have {} values, the last layer takes {}",
                        h.dim(1)?,
                        w.dim(1)?
                    ),
                ));
            }
            let again = h.matmul(&w.t()?)?.broadcast_add(b)?;
            let diff = (again - &logits_out)?
                .abs()?
                .max_all()?
                .to_scalar::<f32>()?;
            let scale = logits_out.abs()?.max_all()?.to_scalar::<f32>()?.max(1.0);
            if diff.is_nan() || diff > 1e-3 * scale {
                return Err(Error::state(
                    path,
                    format!(
                        "the last layer read from the graph does not give the logits ONNX \
                         Runtime computes (differs by {diff})"
                    ),
                ));
            }
        }
        Ok(())
    });
    probed?;
    // Classes, normalisation and preprocessing: the config.json's, or timm's defaults for the
    // input's own size with the mean and std given, if any.
    let data = match data {
        Some(_) if options.input_mean.is_some() || options.input_std.is_some() => {
            return Err(Error::config(
                "input_mean",
                format!(
                    "with setting `input_std` gives an ONNX model's normalisation, but {} \
                     gives it already: leave them out, or remove its mean and std",
                    cfg_path.display()
                ),
            ))
        }
        Some(d) => d,
        None => defaults(&item_shape, model.classes, options, &cfg_path)?,
    };
    if data.classes_given && data.classes != model.classes {
        return Err(Error::state(
            &cfg_path,
            format!(
                "says {} classes, the model's logits `{logits}` have {}",
                data.classes, model.classes
            ),
        ));
    }
    let names = if data.classes_given {
        data.names
    } else {
        (0..model.classes).map(|c| c.to_string()).collect()
    };
    if names.len() != model.classes {
        return Err(Error::state(
            &cfg_path,
            format!(
                "names {} classes, the model's logits `{logits}` have {}",
                names.len(),
                model.classes
            ),
        ));
    }
    data.normalizer
        .check(item_shape[0])
        .map_err(|m| Error::state(&cfg_path, format!("{m} (items {item_shape:?})")))?;
    let config = CheckpointConfig {
        format: FORMAT,
        alkit_version: env!("CARGO_PKG_VERSION").into(),
        arch: Arch::Onnx(OnnxArch {
            classes: model.classes,
            input: item_shape.clone(),
        }),
        normalizer: data.normalizer,
        item_shape,
        classes: names,
        tensors: Vec::new(),
        preprocess: Some(data.preprocess),
    };
    validate_config(&config, path)?;
    Ok(Checkpoint {
        config,
        model: Box::new(model),
        params: Weights::from_named(Vec::new()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_bytes_are_refused_not_panicked_on() {
        for bytes in [
            &b""[..],
            b"\x3a",
            b"\x3a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
            b"\x3a\x05\x0a\x03abc",
            b"\x0b\x0c",
            b"\x3a\x02\x0a\x80",
        ] {
            assert!(parse_model(bytes).is_err(), "{bytes:?}");
        }
        // A tensor whose dims promise more than its bytes hold.
        let t = [0x08, 0x80, 0x80, 0x04, 0x10, 0x01, 0x4a, 0x04, 0, 0, 0, 0];
        assert!(decode_tensor(&t, None).is_err());
    }

    /// Every prefix of a real model, and copies with bytes flipped, are parsed and searched
    /// for their last layer without a panic (an error or a graph, nothing else).
    #[test]
    fn truncated_and_corrupted_models_never_panic() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/onnx/resnet/model.onnx");
        let bytes = std::fs::read(path).unwrap();
        let g = parse_model(&bytes).unwrap();
        let head = g.head("logits").unwrap();
        assert_eq!(
            (head.classes, head.dim, head.features.as_str()),
            (10, 96, "features")
        );
        for cut in (0..bytes.len()).step_by(997) {
            if let Ok(g) = parse_model(&bytes[..cut]) {
                let _ = g.head("logits");
            }
        }
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..300 {
            let mut b = bytes.clone();
            for _ in 0..8 {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let i = (state % b.len() as u64) as usize;
                b[i] = (state >> 32) as u8;
            }
            if let Ok(g) = parse_model(&b) {
                let _ = g.head("logits");
            }
        }
    }

    #[test]
    fn an_added_output_parses_back_as_one() {
        let mut m = vec![0x3a, 0x00];
        m.extend(extra_output("h"));
        let g = parse_model(&m).unwrap();
        assert_eq!(g.outputs, ["h"]);
    }

    #[test]
    fn half_precision_values_decode() {
        assert_eq!(f16_to_f32(0x3c00), 1.0);
        assert_eq!(f16_to_f32(0xc000), -2.0);
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
        assert!(f16_to_f32(0x7c00).is_infinite());
    }
}
