//! timm model repositories: a `config.json` as timm's `save_for_hf` writes it beside a
//! `model.safetensors` state dict, read as an alkit checkpoint.
//!
//! timm's `config.json` names the architecture (`architecture`), the classes (`num_classes`,
//! optionally `label_names`), the constructor's arguments (`model_args`) and, in
//! `pretrained_cfg`, how its evaluation transform prepares an image: the input size, the
//! interpolation, the crop fraction and mode, the mean and standard deviation. Here that
//! becomes a [`CheckpointConfig`] whose [`Preprocess`] and [`Normalizer`] say the same, with
//! timm's own defaults (`resolve_data_config`) where a key is absent. Only architectures alkit
//! builds with timm's exact tensor names are taken (timm's `resnet18`, `resnet34`, `resnet50`:
//! torchvision's layout and names); a constructor argument that would change the network is
//! refused by name rather than ignored. Nothing in the file is executed.

use super::config::{read_config_value, CheckpointConfig, TensorInfo, FORMAT};
use crate::data::image::{CropMode, Filter, Preprocess};
use crate::data::Normalizer;
use crate::error::{Error, Result};
use crate::models::Arch;
use crate::nn::resnet::{ResNetConfig, Stem};
use crate::train::ModelBuilder;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::path::Path;

/// What timm takes for a key `pretrained_cfg` leaves out. A repository's `config.json` becomes
/// timm's `PretrainedCfg(**pretrained_cfg)` (`timm/models/_builder.py`, `resolve_pretrained_cfg`
/// lines 394-397), so an absent key takes that dataclass's default
/// (`timm/models/_pretrained.py` lines 29-42: input_size `(3, 224, 224)`, interpolation
/// `bicubic`, crop_pct 0.875, crop_mode `center`, ImageNet's mean and std, num_classes 1000),
/// and `timm.data.resolve_data_config` (`timm/data/config.py` lines 29-96) falls back to the
/// same values for a key that is null, empty or zero. These are the same for every
/// architecture: timm reads its registry's per-architecture configuration (`resnet18.a1_in1k`:
/// crop_pct 0.95) only for a model created by name, never for one created from a
/// `config.json` (checked against timm by `tests/reference/timm_defaults.py`).
const DEFAULT_SIZE: usize = 224;
const DEFAULT_CROP_PCT: f64 = 0.875;
const DEFAULT_INTERPOLATION: &str = "bicubic";
const DEFAULT_CROP_MODE: &str = "center";
const DEFAULT_CLASSES: usize = 1000;
const IMAGENET_MEAN: [f32; 3] = [0.485, 0.456, 0.406];
const IMAGENET_STD: [f32; 3] = [0.229, 0.224, 0.225];

/// The most classes a timm head may declare (ImageNet-22k has 21,843).
const MAX_CLASSES: usize = 1 << 16;

/// `model_args` keys that leave the evaluated network as alkit builds it: the head's size and
/// input channels (checked), the pooling (checked), and rates of regularisers that act in
/// training only.
const HARMLESS_ARGS: &[&str] = &[
    "num_classes",
    "in_chans",
    "global_pool",
    "drop_rate",
    "drop_path_rate",
    "drop_block_rate",
    "pretrained",
];

#[derive(Deserialize)]
struct TimmConfig {
    // Absent only in a configuration read for its data alone (an ONNX model's): `is_timm`
    // asks for it before a checkpoint is read as timm's.
    #[serde(default)]
    architecture: String,
    num_classes: Option<usize>,
    global_pool: Option<String>,
    label_names: Option<Vec<String>>,
    #[serde(default)]
    model_args: Map<String, Value>,
}

/// The keys of timm's `PretrainedCfg` that say how an image is prepared and what the head is.
/// Others (`test_input_size`, `test_crop_pct`, ...) are not read: timm's evaluation transform
/// uses them only when asked for the test size (`resolve_data_config(use_test_size=True)`).
#[derive(Deserialize, Default)]
struct PretrainedCfg {
    input_size: Option<Vec<usize>>,
    interpolation: Option<String>,
    crop_pct: Option<f64>,
    crop_mode: Option<String>,
    mean: Option<Vec<f64>>,
    std: Option<Vec<f64>>,
    num_classes: Option<usize>,
    label_names: Option<Vec<String>>,
    labels: Option<Vec<String>>,
}

/// True when a parsed `config.json` is timm's (it names an `architecture` and is not alkit's,
/// which carries `format` and `arch`).
pub(crate) fn is_timm(value: &Value) -> bool {
    value.get("architecture").is_some() && value.get("format").is_none()
}

/// Reads a timm `config.json` as the checkpoint configuration it describes: the
/// architecture, classes, normalisation and preprocessing that [`super::load`] uses for a
/// timm folder, without reading any weights.
pub fn read_config(path: &Path) -> Result<CheckpointConfig> {
    config(read_config_value(path)?, path)
}

/// The checkpoint configuration a timm `config.json` (parsed as `value`, read from `path`)
/// describes; its tensor list is the architecture's, by torchvision's names.
pub(crate) fn config(value: Value, path: &Path) -> Result<CheckpointConfig> {
    let bad = |m: String| Error::state(path, m);
    let (depth, data) = read(value, path, |cfg| {
        let depth = match cfg.architecture.as_str() {
            "resnet18" => 18,
            "resnet34" => 34,
            "resnet50" => 50,
            other => {
                return Err(bad(format!(
                    "timm architecture `{other}` is not one alkit builds (resnet18, resnet34, \
                     resnet50 with timm's default stem and names)"
                )))
            }
        };
        if let Some(key) = cfg
            .model_args
            .keys()
            .find(|k| !HARMLESS_ARGS.contains(&k.as_str()))
        {
            return Err(bad(format!(
                "model_args.{key} changes the network, and alkit builds timm's `{}` only as \
                 created with its defaults",
                cfg.architecture
            )));
        }
        let arg_pool = match cfg.model_args.get("global_pool") {
            Some(Value::String(s)) => Some(s.clone()),
            None | Some(Value::Null) => None,
            Some(v) => return Err(bad(format!("model_args.global_pool is {v}, not a name"))),
        };
        if let Some(p) = [arg_pool, cfg.global_pool.clone()]
            .into_iter()
            .flatten()
            .find(|p| p != "avg")
        {
            return Err(bad(format!(
                "global pooling `{p}`: alkit's ResNets average (`avg`)"
            )));
        }
        Ok(depth)
    })?;
    let arch = Arch::Resnet(ResNetConfig {
        depth,
        stem: Stem::Imagenet,
        in_channels: data.preprocess.channels,
        classes: data.classes,
    });
    Ok(CheckpointConfig {
        format: FORMAT,
        alkit_version: env!("CARGO_PKG_VERSION").into(),
        tensors: expected_tensors(&arch)?,
        arch,
        normalizer: data.normalizer,
        item_shape: data.preprocess.item_shape(),
        classes: data.names,
        preprocess: Some(data.preprocess),
    })
}

/// What a timm `config.json` says of a model's data, whatever its architecture: the classes
/// (count and names), the normalisation and the evaluation transform.
// Read whole by ONNX models only (feature `onnx`); timm's own checkpoints take its parts.
#[cfg_attr(not(feature = "onnx"), allow(dead_code))]
pub(crate) struct DataConfig {
    /// The class count of the head (timm's default 1000 where none is given).
    pub(crate) classes: usize,
    /// Whether the file gives the class count (else `classes` is timm's default).
    pub(crate) classes_given: bool,
    /// One name per class (`0`, `1`, ... where the file names none).
    pub(crate) names: Vec<String>,
    /// The mean and standard deviation.
    pub(crate) normalizer: Normalizer,
    /// Resize, crop, channels.
    pub(crate) preprocess: Preprocess,
}

/// What a timm `config.json` (or an ONNX model's `config.json` beside it) says of the data a
/// model of any architecture takes ([`DataConfig`]), timm's defaults where keys are absent.
#[cfg_attr(not(feature = "onnx"), allow(dead_code))]
pub(crate) fn data_config(value: Value, path: &Path) -> Result<DataConfig> {
    read(value, path, |_| Ok(())).map(|(_, d)| d)
}

/// Reads `value` as timm's configuration: the architecture's own checks `arch` first (on the
/// top-level keys, before any value of the data is read), then the data configuration.
fn read<T>(
    value: Value,
    path: &Path,
    arch: impl FnOnce(&TimmConfig) -> Result<T>,
) -> Result<(T, DataConfig)> {
    let not_timm =
        |e: serde_json::Error| Error::state(path, format!("not a timm model configuration: {e}"));
    // timm's `_parse_model_cfg` (`timm/models/_hub.py` lines 165-174): a config without
    // `pretrained_cfg` is the older single dict, whose own keys are the pretrained
    // configuration (`labels` for `label_names`).
    let r = Reading {
        path,
        legacy: value.get("pretrained_cfg").is_none(),
    };
    let pc: PretrainedCfg = match value.get("pretrained_cfg") {
        None => PretrainedCfg::deserialize(&value).map_err(not_timm)?,
        Some(Value::Object(_)) => {
            PretrainedCfg::deserialize(&value["pretrained_cfg"]).map_err(not_timm)?
        }
        Some(v) => return Err(r.bad(format!("pretrained_cfg is {v}, not a dictionary"))),
    };
    let cfg: TimmConfig = serde_json::from_value(value).map_err(not_timm)?;
    let chosen = arch(&cfg)?;
    let (classes, classes_given) = r.class_count(&cfg, &pc)?;
    let (channels, size) = r.input(&cfg, &pc)?;
    let preprocess = r.preprocess(&pc, channels, size)?;
    let normalizer = Normalizer {
        mean: r.stats(&pc.mean, IMAGENET_MEAN, "mean", channels)?,
        std: r.stats(&pc.std, IMAGENET_STD, "std", channels)?,
    };
    // timm: the top-level `label_names` over the pretrained configuration's.
    let legacy_labels = pc.labels.filter(|_| r.legacy);
    let names = match cfg.label_names.or(pc.label_names).or(legacy_labels) {
        Some(names) => names,
        None => (0..classes).map(|c| c.to_string()).collect(),
    };
    Ok((
        chosen,
        DataConfig {
            classes,
            classes_given,
            names,
            normalizer,
            preprocess,
        },
    ))
}

/// A timm configuration being read: its file, and whether it is the older single dict.
struct Reading<'a> {
    path: &'a Path,
    legacy: bool,
}

impl Reading<'_> {
    fn bad(&self, m: String) -> Error {
        Error::state(self.path, m)
    }

    /// How a key of the pretrained configuration is named in this file's layout.
    fn key(&self, k: &str) -> String {
        if self.legacy {
            k.to_string()
        } else {
            format!("pretrained_cfg.{k}")
        }
    }

    /// `model_args.KEY` as a count, if given.
    fn arg_usize(&self, cfg: &TimmConfig, key: &str) -> Result<Option<usize>> {
        match cfg.model_args.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|v| usize::try_from(v).ok())
                .map(Some)
                .ok_or_else(|| self.bad(format!("model_args.{key} is {v}, not a count"))),
        }
    }

    /// One class count, wherever it is given (timm's default where none is), and whether
    /// one was.
    fn class_count(&self, cfg: &TimmConfig, pc: &PretrainedCfg) -> Result<(usize, bool)> {
        let counts = [
            ("num_classes", cfg.num_classes),
            (
                "model_args.num_classes",
                self.arg_usize(cfg, "num_classes")?,
            ),
            (
                "pretrained_cfg.num_classes",
                pc.num_classes.filter(|_| !self.legacy),
            ),
        ];
        let given: Vec<(&str, usize)> = counts
            .iter()
            .filter_map(|(k, v)| v.map(|v| (*k, v)))
            .collect();
        let classes = given.first().map_or(DEFAULT_CLASSES, |g| g.1);
        if let Some((k, v)) = given.iter().find(|(_, v)| *v != classes) {
            return Err(self.bad(format!("{k} is {v} where {} is {classes}", given[0].0)));
        }
        if classes == 0 || classes > MAX_CLASSES {
            return Err(self.bad(format!(
                "num_classes {classes}: a classifier head of 1 to {MAX_CLASSES} classes is read"
            )));
        }
        Ok((classes, !given.is_empty()))
    }

    /// The input's channels and (square) side.
    fn input(&self, cfg: &TimmConfig, pc: &PretrainedCfg) -> Result<(usize, usize)> {
        let in_chans = self.arg_usize(cfg, "in_chans")?;
        let input = match &pc.input_size {
            Some(s) => s.clone(),
            None => vec![in_chans.unwrap_or(3), DEFAULT_SIZE, DEFAULT_SIZE],
        };
        let [channels, h, w] = input[..] else {
            return Err(self.bad(format!(
                "{} is {input:?}, not [channels, height, width]",
                self.key("input_size")
            )));
        };
        if in_chans.is_some_and(|c| c != channels) {
            return Err(self.bad(format!(
                "model_args.in_chans is {} where {} has {channels} channels",
                in_chans.unwrap_or(0),
                self.key("input_size")
            )));
        }
        if h != w {
            return Err(self.bad(format!(
                "{} is {h}x{w}: alkit prepares square inputs only",
                self.key("input_size")
            )));
        }
        Ok((channels, h))
    }

    /// timm's evaluation transform for inputs of `channels` x `h` x `h`.
    fn preprocess(&self, pc: &PretrainedCfg, channels: usize, h: usize) -> Result<Preprocess> {
        // `resolve_data_config` takes a value only when Python reads it as true: a zero crop
        // or an empty name is the default.
        let crop_pct = pc
            .crop_pct
            .filter(|&c| c != 0.0)
            .unwrap_or(DEFAULT_CROP_PCT);
        if !(crop_pct > 0.0 && crop_pct <= 1.0) {
            return Err(self.bad(format!(
                "{} is {crop_pct}: a crop of a fraction in (0, 1] is taken \
                 (a larger one would pad the image)",
                self.key("crop_pct")
            )));
        }
        let named = |v: &Option<String>, default| {
            v.as_deref()
                .filter(|s| !s.is_empty())
                .unwrap_or(default)
                .to_string()
        };
        let interpolation = named(&pc.interpolation, DEFAULT_INTERPOLATION);
        let filter = Filter::from_name(&interpolation).ok_or_else(|| {
            self.bad(format!(
                "{} `{interpolation}` is not bilinear, bicubic or lanczos",
                self.key("interpolation")
            ))
        })?;
        let mode = match named(&pc.crop_mode, DEFAULT_CROP_MODE).as_str() {
            "center" => CropMode::Center,
            "squash" => CropMode::Squash,
            other => {
                return Err(self.bad(format!(
                    "{} `{other}` is not center or squash",
                    self.key("crop_mode")
                )))
            }
        };
        // timm: `scale_size = math.floor(img_size / crop_pct)`, in floating point.
        let resize = (h as f64 / crop_pct).floor();
        let pre = Preprocess {
            size: h,
            resize: if resize.is_finite() && resize < 1e9 {
                resize as usize
            } else {
                usize::MAX
            },
            mode,
            filter,
            channels,
        };
        pre.check().map_err(|m| {
            let what = if self.legacy {
                "the configuration"
            } else {
                "pretrained_cfg"
            };
            self.bad(format!("{what} asks for {m}"))
        })?;
        Ok(pre)
    }

    /// A per-channel statistic `name` (`mean`, `std`): the given values, one repeated over
    /// the channels as timm does, else timm's default for 3 channels.
    fn stats(
        &self,
        given: &Option<Vec<f64>>,
        default: [f32; 3],
        name: &str,
        channels: usize,
    ) -> Result<Vec<f32>> {
        let v: Vec<f32> = match given {
            Some(v) if !v.is_empty() => v.iter().map(|&x| x as f32).collect(),
            _ if channels == 3 => default.to_vec(),
            _ => {
                return Err(self.bad(format!(
                    "{} is missing, and timm's default is for 3 channels, not {channels}",
                    self.key(name)
                )))
            }
        };
        Ok(if v.len() == 1 {
            vec![v[0]; channels]
        } else {
            v
        })
    }
}

/// The tensors `arch` defines, by name, in creation order.
fn expected_tensors(arch: &Arch) -> Result<Vec<TensorInfo>> {
    let (vb, params) = crate::nn::init::shapes(candle_core::DType::F32, &candle_core::Device::Cpu);
    arch.build(vb)
        .map_err(|e| Error::config("arch", format!("cannot be built: {e}")))?;
    Ok(params
        .named()
        .into_iter()
        .map(|(name, v)| TensorInfo {
            name,
            shape: v.dims().to_vec(),
        })
        .collect())
}
