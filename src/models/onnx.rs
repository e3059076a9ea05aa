//! An ONNX model's place among the architectures: [`OnnxArch`], what a checkpoint opened from a
//! `.onnx` file records as its [`super::Arch`] (the model itself runs in ONNX Runtime, through
//! `checkpoint::onnx` with the cargo feature `onnx`).
//!
//! It is an architecture no one can name (`--model` lists no kind of it: its kind list is
//! empty) and alkit can neither build from weights nor train: ONNX Runtime's inference
//! sessions have no autograd, so building one (for weight-noise draws) or training one is
//! refused by name. What it does hold, the class count and the input shape, is what an
//! ensemble's members must share and what [`super::Arch::check_input`] checks items against.

use super::builtin::{BuiltinModel, Capabilities, KindInfo, ModelKind};
use crate::nn::Classifier;
use crate::train::ModelBuilder;
use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

/// The one kind of every ONNX model; not among [`BuiltinModel::kinds`], so no user can ask for
/// one to be trained.
static KIND: KindInfo = KindInfo {
    name: "onnx",
    about: "An ONNX model run by ONNX Runtime (inference only)",
    duq: false,
    resnet: false,
    default_batch: || 32,
};

/// What a checkpoint opened from an ONNX model records of it: its class count and the shape of
/// one input item `(channels, height, width)`. The weights stay in the `.onnx` file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OnnxArch {
    /// Number of classes (the logits output's second dimension).
    pub classes: usize,
    /// One item's shape `(c, h, w)`, as the model's input takes it.
    pub input: Vec<usize>,
}

/// Why an ONNX model cannot be built from weights here.
const NOT_BUILT: &str = "an ONNX model runs in ONNX Runtime, which has no autograd: alkit cannot \
     rebuild it from weights (weight-noise draws) or train it";

impl ModelBuilder for OnnxArch {
    fn build(&self, _vb: VarBuilder) -> candle_core::Result<Box<dyn Classifier>> {
        Err(candle_core::Error::Msg(NOT_BUILT.into()))
    }
}

impl BuiltinModel for OnnxArch {
    fn kinds() -> &'static [KindInfo] {
        &[]
    }

    fn for_shape(_: ModelKind, item_shape: &[usize], classes: usize) -> Self {
        OnnxArch {
            classes,
            input: item_shape.to_vec(),
        }
    }

    fn kind(&self) -> ModelKind {
        ModelKind::new(&KIND)
    }

    fn classes(&self) -> usize {
        self.classes
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            autograd: false,
            rebuild: false,
            what: "an ONNX model",
            runtime: "ONNX Runtime",
        }
    }

    /// Refuses items of another shape than the model's input (without building anything).
    fn check_own_input(&self, item_shape: &[usize]) -> Option<crate::error::Result<()>> {
        Some(if item_shape != self.input.as_slice() {
            Err(crate::Error::config(
                "model",
                format!(
                    "the ONNX model takes items of shape {:?}, not {item_shape:?}",
                    self.input
                ),
            ))
        } else {
            Ok(())
        })
    }

    fn weights_bound(&self) -> Option<u128> {
        // Nothing is allocated from these settings: the weights are ONNX Runtime's.
        Some(0)
    }
}
