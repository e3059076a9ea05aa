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
//! found in the graph, told to the observer ([`Event::Chose`](crate::observe::Event::Chose)) and added to the session's
//! outputs where the graph does not give it already. That node's weight and bias are read from
//! the file's initializers, so that the model's answer to [`Ask::LastLayer`](crate::nn::Ask::LastLayer) multiplies exactly
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
//! network are refused by name; last-layer quantities come from [`Ask::LastLayer`](crate::nn::Ask::LastLayer).

//!
//! The parts, in the order a model is read: `door` recognises it (in every build); `read`
//! reads the file and its outline, through `protobuf`'s bounded reader into `graph`, with
//! `external` data checked and `tensors` decoded where `head` finds the last layer;
//! `preprocess` reads timm's configuration; `load` opens it in ONNX Runtime (`runtime`) as
//! the `Classifier` of `model`.

mod door;
#[cfg(feature = "onnx")]
mod external;
#[cfg(feature = "onnx")]
mod graph;
#[cfg(feature = "onnx")]
mod head;
#[cfg(feature = "onnx")]
mod load;
#[cfg(feature = "onnx")]
mod model;
#[cfg(feature = "onnx")]
mod preprocess;
#[cfg(feature = "onnx")]
mod protobuf;
#[cfg(feature = "onnx")]
mod read;
#[cfg(feature = "onnx")]
mod runtime;
#[cfg(feature = "onnx")]
mod tensors;
#[cfg(all(test, feature = "onnx"))]
mod tests;

pub(crate) use door::OnnxKind;
pub use door::ONNX_FILE;
#[cfg(feature = "onnx")]
pub use load::load;
#[cfg(feature = "onnx")]
pub use model::OnnxModel;
#[cfg(feature = "onnx")]
pub use read::{external_locations, outline, Outline};
#[cfg(feature = "onnx")]
pub use runtime::ORT_DYLIB_PATH;
