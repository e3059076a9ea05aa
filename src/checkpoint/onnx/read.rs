//! The model file as alkit reads it before ONNX Runtime sees it: its bytes (bounded by
//! protobuf's 2 GiB), its graph with every external data file checked, and the [`Outline`]
//! tools and the fuzzer inspect.

use super::external::{external_files, external_tensors};
use super::graph::{parse_model, Graph};
use crate::error::{Error, Result};
use std::path::Path;

/// The folder of the model file `path` (`.` for a bare name), where its external data lie.
pub(super) fn model_dir(path: &Path) -> std::path::PathBuf {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf()
}

/// What alkit reads of an ONNX model's graph before ONNX Runtime sees it (what [`load`](super::load) reads
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
/// (checked as [`load`](super::load) checks them, not looked for): what a Hub repository's snapshot must
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
pub(super) fn checked_graph<'a>(bytes: &'a [u8], path: &Path) -> Result<Graph<'a>> {
    let mut graph =
        parse_model(bytes).map_err(|e| Error::state(path, format!("not an ONNX model: {e}")))?;
    let dir = model_dir(path);
    external_files(graph.model, &dir)
        .map_err(|e| Error::state(path, format!("external data: {e}")))?;
    graph.dir = Some(dir);
    Ok(graph)
}

/// The bytes of the model file `path`, refused past protobuf's 2 GiB before any is read.
pub(super) fn read_model(path: &Path) -> Result<Vec<u8>> {
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
    let found = external_tensors(graph.model)
        .map_err(|e| Error::state(path, format!("external data: {e}")))?;
    for (_, ext) in found {
        if !out.contains(&ext.location) {
            out.push(ext.location);
        }
    }
    Ok(out)
}

/// The largest `.onnx` file read: protobuf's own limit for one message (2 GiB).
const MAX_MODEL_BYTES: u64 = 2 << 30;
