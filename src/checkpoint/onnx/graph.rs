//! What of an ONNX file's graph is read: its nodes, output names and initializers (kept as
//! their undecoded `TensorProto` bytes), and the walks the last layer's search needs (the
//! node writing a tensor, `Identity` passed through, a constant's value).

use super::protobuf::{bytes, fields, int64, message_field, string, Wire};
use super::tensors::{decode_tensor, Constant};
use std::collections::HashMap;

/// One attribute value of a node, of the kinds the last layer's ops use.
#[derive(Clone, Copy)]
pub(super) enum Attr<'a> {
    Int(i64),
    Float(f32),
    Tensor(&'a [u8]),
    Other,
}

/// A node (`NodeProto`).
pub(super) struct Node<'a> {
    pub(super) op: String,
    pub(super) domain: String,
    pub(super) name: String,
    pub(super) inputs: Vec<String>,
    pub(super) outputs: Vec<String>,
    pub(super) attrs: HashMap<String, Attr<'a>>,
}

/// What of an ONNX file's graph is read: nodes, output names and initializers (as their
/// undecoded `TensorProto` bytes).
pub(super) struct Graph<'a> {
    pub(super) nodes: Vec<Node<'a>>,
    pub(super) outputs: Vec<String>,
    pub(super) initializers: HashMap<String, &'a [u8]>,
    /// The folder an initializer's external data file is named relative to (the model's);
    /// `None` refuses external data.
    pub(super) dir: Option<std::path::PathBuf>,
    /// The whole `ModelProto`, for the tensors outside the top graph's initializers.
    pub(super) model: &'a [u8],
}

/// A node (`NodeProto`) of the bytes `buf`.
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
pub(super) fn parse_model(buf: &[u8]) -> std::result::Result<Graph<'_>, String> {
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
pub(super) fn extra_output(name: &str) -> Vec<u8> {
    // ModelProto.graph (7) > GraphProto.output (12) > ValueInfoProto.name (1).
    message_field(7, &message_field(12, &message_field(1, name.as_bytes())))
}

impl<'a> Graph<'a> {
    /// The node that writes `name`.
    pub(super) fn producer(&self, name: &str) -> Option<&Node<'a>> {
        self.nodes
            .iter()
            .find(|n| n.domain.is_empty() && n.outputs.iter().any(|o| o == name))
    }

    /// `name` with every `Identity` before it passed through.
    pub(super) fn source(&self, name: &str) -> String {
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
    pub(super) fn constant(&self, name: &str) -> Option<std::result::Result<Constant, String>> {
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

    /// `n`'s integer attribute `key`, `default` where it has none.
    pub(super) fn int_attr(n: &Node<'_>, key: &str, default: i64) -> i64 {
        match n.attrs.get(key) {
            Some(Attr::Int(v)) => *v,
            _ => default,
        }
    }

    /// `n`'s float attribute `key`, `default` where it has none.
    pub(super) fn float_attr(n: &Node<'_>, key: &str, default: f32) -> f32 {
        match n.attrs.get(key) {
            Some(Attr::Float(v)) => *v,
            _ => default,
        }
    }
}
