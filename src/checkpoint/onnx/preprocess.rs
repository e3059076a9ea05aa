//! The preprocessing of an ONNX model: timm's `config.json` beside it (or the one setting
//! `onnx_config` names), else timm's defaults for the input's own size, with a mean and std
//! given inline where the model has no configuration of its own.

use super::super::config::{read_config_value, OpenOptions};
use super::super::timm::{data_config, DataConfig};
use crate::error::{Error, Result, ResultExt};
use std::path::{Path, PathBuf};

/// The preprocessing of a model without a `config.json`: timm's defaults for its input
/// `item_shape` `(c, h, w)`; or, with the mean and std `options` give, those, the items
/// resized to the model's size without a crop. timm's defaults have a mean and std for 3
/// channels only; without them another channel count is refused with the `config.json` to
/// write at `cfg_path`.
pub(super) fn defaults(
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

/// The preprocessing's file (the one setting `onnx_config` names, else `config.json` beside
/// the model) and what it says, read before anything runs: a file named in the options is read
/// whatever it is (a missing one is an error, not timm's defaults).
pub(super) fn given(path: &Path, options: &OpenOptions) -> Result<(PathBuf, Option<DataConfig>)> {
    let cfg_path = options
        .onnx_config
        .clone()
        .unwrap_or_else(|| path.with_file_name("config.json"));
    let data = if options.onnx_config.is_some() {
        let read = read_config_value(&cfg_path).and_then(|v| data_config(v, &cfg_path));
        Some(read.context_with(|| "the preprocessing that setting `onnx_config` names")?)
    } else if cfg_path.is_file() {
        Some(data_config(read_config_value(&cfg_path)?, &cfg_path)?)
    } else {
        None
    };
    Ok((cfg_path, data))
}

/// The preprocessing used: the configuration's `data` (then no mean or std may be given
/// inline), or [`defaults`] for the input's own size; a configuration naming its classes must
/// name the model's.
pub(super) fn chosen(
    data: Option<DataConfig>,
    options: &OpenOptions,
    item_shape: &[usize],
    classes: usize,
    cfg_path: &Path,
) -> Result<DataConfig> {
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
        None => defaults(item_shape, classes, options, cfg_path)?,
    };
    Ok(data)
}

/// The class names: the configuration's where it gives them (as many as the model's
/// `classes`, the width of the output `logits`), else the class numbers.
pub(super) fn class_names(
    data: &DataConfig,
    classes: usize,
    logits: &str,
    cfg_path: &Path,
) -> Result<Vec<String>> {
    if data.classes_given && data.classes != classes {
        return Err(Error::state(
            cfg_path,
            format!(
                "says {} classes, the model's logits `{logits}` have {classes}",
                data.classes
            ),
        ));
    }
    let names = if data.classes_given {
        data.names.clone()
    } else {
        (0..classes).map(|c| c.to_string()).collect()
    };
    if names.len() != classes {
        return Err(Error::state(
            cfg_path,
            format!(
                "names {} classes, the model's logits `{logits}` have {classes}",
                names.len()
            ),
        ));
    }
    Ok(names)
}
