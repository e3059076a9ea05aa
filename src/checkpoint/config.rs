//! What every kind of checkpoint shares, at the bottom of the folder: the `config.json`
//! types ([`CheckpointConfig`], [`TensorInfo`]), a loaded [`Checkpoint`], the [`OpenOptions`]
//! some kinds read, and the checks every configuration passes before any tensor is read.

use crate::data::image::Preprocess;
use crate::data::Normalizer;
use crate::error::{Error, Result};
use crate::fsutil::read_json;
use crate::models::Arch;
use crate::nn::init::Weights;
use crate::nn::Classifier;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// One tensor in a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorInfo {
    /// Name in `model.safetensors`.
    pub name: String,
    /// Shape.
    pub shape: Vec<usize>,
}

/// The content of `config.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointConfig {
    /// Checkpoint format version.
    pub format: u32,
    /// alkit version that wrote it.
    pub alkit_version: String,
    /// The architecture.
    pub arch: Arch,
    /// Normalisation statistics fitted on the training split; apply to every input.
    pub normalizer: Normalizer,
    /// Shape of one input item, e.g. `[1, 28, 28]`.
    pub item_shape: Vec<usize>,
    /// Class names, index = class id.
    pub classes: Vec<String>,
    /// Every tensor in `model.safetensors`, in creation order.
    pub tensors: Vec<TensorInfo>,
    /// How an image becomes an input (resize, centre crop, channels), for models trained
    /// elsewhere on photos of any size (a timm repository's evaluation transform); `None`:
    /// items must already have `item_shape`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preprocess: Option<Preprocess>,
}

/// A loaded checkpoint.
pub struct Checkpoint {
    /// Its configuration.
    pub config: CheckpointConfig,
    /// The model, ready for inference.
    pub model: Box<dyn Classifier>,
    /// Its parameters as `Var`s (for gradient evidence through autograd).
    pub params: Weights,
}

/// The version of alkit's own `config.json` this build reads and writes.
pub(crate) const FORMAT: u32 = 1;

/// How checkpoints are opened, beyond their names: what some kinds need said.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OpenOptions {
    /// An ONNX model's output holding the features its last layer multiplies (`None`: found
    /// in the graph as that layer's input, and told to the observer).
    pub onnx_features: Option<String>,
    /// An ONNX model's preprocessing: a timm `config.json` to read instead of the one beside
    /// the model (`None`: the one beside it, else timm's defaults for the model's input).
    pub onnx_config: Option<PathBuf>,
    /// An ONNX model without a `config.json`: the mean subtracted from its input values in
    /// `[0, 1]`, one value for every channel or one per channel (with `input_std`; both or
    /// neither); the items are then resized to the model's input without a crop. timm's
    /// defaults otherwise, which exist for 3-channel inputs only.
    pub input_mean: Option<Vec<f32>>,
    /// The standard deviation its input values are divided by (see `input_mean`).
    pub input_std: Option<Vec<f32>>,
}

impl OpenOptions {
    /// Refuses the normalisation these options give inline for the checkpoint `name`, which
    /// is not an ONNX model: its own `config.json` gives its normalisation.
    pub(crate) fn refuse_inline_normalisation(&self, name: &str) -> Result<()> {
        if self.input_mean.is_some() || self.input_std.is_some() {
            return Err(Error::config(
                "input_mean",
                format!(
                    "and setting `input_std` give an ONNX model's normalisation; `{name}` is not \
                     an ONNX model (its config.json gives its own): leave them out"
                ),
            ));
        }
        Ok(())
    }
}

/// Checks what `config.json` promises before any tensor is read: one finite mean and one
/// finite positive standard deviation per input channel, and one distinct, non-empty class
/// name per model output.
pub(crate) fn validate_config(config: &CheckpointConfig, path: &Path) -> Result<()> {
    let channels = config.item_shape.first().copied().unwrap_or(0);
    config
        .normalizer
        .check(channels)
        .map_err(|m| Error::state(path, format!("{m} (items {:?})", config.item_shape)))?;
    config
        .arch
        .check_input(&config.item_shape)
        .map_err(|e| Error::state(path, e.to_string()))?;
    if let Some(pre) = &config.preprocess {
        pre.check()
            .map_err(|m| Error::state(path, format!("preprocessing asks for {m}")))?;
        if pre.item_shape() != config.item_shape {
            return Err(Error::state(
                path,
                format!(
                    "preprocessing makes items of shape {:?}, the model takes {:?}",
                    pre.item_shape(),
                    config.item_shape
                ),
            ));
        }
    }
    if config.classes.len() != config.arch.classes() {
        return Err(Error::state(
            path,
            format!(
                "{} class names for a model with {} outputs",
                config.classes.len(),
                config.arch.classes()
            ),
        ));
    }
    let mut seen = std::collections::HashSet::new();
    if let Some(c) = config
        .classes
        .iter()
        .find(|c| c.trim().is_empty() || !seen.insert(c.as_str()))
    {
        return Err(Error::state(
            path,
            format!("class name `{c}` is empty or given twice"),
        ));
    }
    Ok(())
}

/// The largest `config.json` read (a timm head's label names included).
const MAX_CONFIG_BYTES: u64 = 64 << 20;

/// A `config.json` parsed, refused unread above [`MAX_CONFIG_BYTES`].
pub(crate) fn read_config_value(path: &Path) -> Result<serde_json::Value> {
    let size = std::fs::metadata(path)
        .map_err(|e| Error::io(path, e))?
        .len();
    if size > MAX_CONFIG_BYTES {
        return Err(Error::state(
            path,
            format!(
                "{size} bytes; a checkpoint configuration of at most {MAX_CONFIG_BYTES} is read"
            ),
        ));
    }
    read_json(path)
}
