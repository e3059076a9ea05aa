//! Opening an ONNX model, step by step: the file and its graph read and checked, the
//! preprocessing read, the logits and features outputs chosen, the session built, the input
//! read, the class count found, the last layer checked against one probe batch, and the
//! checkpoint's configuration written from what was found.

use super::super::config::{validate_config, Checkpoint, CheckpointConfig, OpenOptions, FORMAT};
use super::super::timm::DataConfig;
use super::graph::{extra_output, Graph};
use super::head::Head;
use super::model::OnnxModel;
use super::preprocess::{chosen, class_names, given};
use super::read::{checked_graph, model_dir, read_model};
use super::runtime::{fixed, output_dims, session};
use crate::error::{contain, Error, Result};
use crate::models::{Arch, OnnxArch};
use crate::nn::init::Weights;
use crate::observe::{Event, Observer};
use candle_core::{DType, Device, Tensor};
use ort::session::Session;
use ort::value::{TensorElementType, ValueType};
use std::path::Path;
use std::sync::Mutex;

/// The most classes a logits output may have (timm's bound for a head).
const MAX_CLASSES: usize = 1 << 16;

/// The most values one input item may have (a 3 x 4096 x 4096 image is far below).
const MAX_ITEM_VALUES: usize = 1 << 26;

/// The largest fixed batch served (a larger one is exported for a reason alkit cannot know).
const MAX_FIXED_BATCH: usize = 4096;

/// Opens the ONNX model at `path` (see the module's documentation); what it chose unnamed (the
/// features, the logits output by position) is told to `observer`.
pub fn load(path: &Path, options: &OpenOptions, observer: &mut dyn Observer) -> Result<Checkpoint> {
    let mut bytes = read_model(path)?;
    let graph = checked_graph(&bytes, path)?;
    let (cfg_path, data) = given(path, options)?;
    let outputs = Outputs::choose(&graph, options, path, observer)?;
    drop(graph);
    if let (true, Some(f)) = (outputs.added, &outputs.features) {
        bytes.extend_from_slice(&extra_output(f));
    }
    let session = session(path, &model_dir(path), &bytes)?;
    drop(bytes);
    let input = Input::read(&session, path, data.as_ref(), &cfg_path)?;
    let logit_dims = output_dims(&session, &outputs.logits, path, "classes")?;
    if let Some(f) = &outputs.features {
        output_dims(&session, f, path, "features")?;
    }
    let mut model = OnnxModel {
        session: Mutex::new(session),
        input: input.name,
        logits: outputs.logits.clone(),
        head: None,
        fixed_batch: input.fixed_batch,
        item_shape: input.item_shape.clone(),
        classes: 0,
    };
    let probe = Tensor::zeros(probe_shape(&model), DType::F32, &Device::Cpu)?;
    model.classes = count_classes(&model, logit_dims[1], &probe, path)?;
    attach_head(&mut model, outputs, path)?;
    check_head(&model, &probe, path)?;
    let data = chosen(data, options, &input.item_shape, model.classes, &cfg_path)?;
    let names = class_names(&data, model.classes, &model.logits, &cfg_path)?;
    data.normalizer
        .check(input.item_shape[0])
        .map_err(|m| Error::state(&cfg_path, format!("{m} (items {:?})", input.item_shape)))?;
    let config = CheckpointConfig {
        format: FORMAT,
        alkit_version: env!("CARGO_PKG_VERSION").into(),
        arch: Arch::Onnx(OnnxArch {
            classes: model.classes,
            input: input.item_shape.clone(),
        }),
        normalizer: data.normalizer,
        item_shape: input.item_shape,
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

/// The outputs read: the logits, by name or position; the features, by the setting or the
/// graph, and whether they must be added to the graph's outputs; the last layer found.
struct Outputs {
    logits: String,
    features: Option<String>,
    added: bool,
    head: Option<Head>,
}

impl Outputs {
    fn choose(
        graph: &Graph<'_>,
        options: &OpenOptions,
        path: &Path,
        observer: &mut dyn Observer,
    ) -> Result<Outputs> {
        let shown = path.display().to_string();
        let logits = logits_output(&graph.outputs, path, &shown, observer)?;
        let head = graph.head(&logits);
        let (features, added) = match &options.onnx_features {
            Some(named) => (Some(named_features(graph, named, &head, &shown)?), false),
            None => found_features(graph, &head, &shown, observer),
        };
        let head = head.ok().filter(|_| features.is_some());
        Ok(Outputs {
            logits,
            features,
            added,
            head,
        })
    }
}

/// The output named `logits`, else the graph's first (told to `observer`).
fn logits_output(
    outputs: &[String],
    path: &Path,
    shown: &str,
    observer: &mut dyn Observer,
) -> Result<String> {
    if let Some(l) = outputs.iter().find(|o| *o == "logits") {
        return Ok(l.clone());
    }
    let first = outputs
        .first()
        .ok_or_else(|| Error::state(path, "the graph has no output"))?
        .clone();
    observer.on(&Event::Chose {
        source: shown,
        what: &format!("logits: output `{first}`, the graph's first (none is named `logits`)"),
    });
    Ok(first)
}

/// The features output setting `onnx_features` names, checked to be an output and what the
/// last layer found multiplies.
fn named_features(
    graph: &Graph<'_>,
    named: &String,
    head: &std::result::Result<Head, String>,
    shown: &str,
) -> Result<String> {
    if !graph.outputs.contains(named) {
        let listed = graph
            .outputs
            .iter()
            .map(|o| format!("`{o}`"))
            .collect::<Vec<_>>()
            .join(", ");
        return Err(Error::config(
            "onnx_features",
            format!("{shown} has no output `{named}`; its outputs: {listed}"),
        ));
    }
    let h = head.as_ref().map_err(|why| {
        Error::config(
            "onnx_features",
            format!(
                "{shown}: output `{named}` is named as the features, but the last layer \
                 that multiplies them was not found: {why}"
            ),
        )
    })?;
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
    Ok(named.clone())
}

/// The features the last layer found multiplies (the graph's own output where it gives that
/// tensor, through Identity or not; else the tensor, to be added to the outputs), or none
/// where no last layer was found; either told to `observer`.
fn found_features(
    graph: &Graph<'_>,
    head: &std::result::Result<Head, String>,
    shown: &str,
    observer: &mut dyn Observer,
) -> (Option<String>, bool) {
    let h = match head {
        Ok(h) => h,
        Err(why) => {
            observer.on(&Event::Chose {
                source: shown,
                what: &format!(
                    "no features: {why}; scores that read features or the last layer are \
                     unavailable"
                ),
            });
            return (None, false);
        }
    };
    let given = graph.outputs.iter().find(|o| graph.source(o) == h.features);
    let name = given.cloned().unwrap_or_else(|| h.features.clone());
    let added = if given.is_some() {
        ""
    } else {
        ", added to the outputs"
    };
    observer.on(&Event::Chose {
        source: shown,
        what: &format!(
            "features: `{name}`, the input of the last layer ({}, {} x {}){added}",
            h.node, h.classes, h.dim
        ),
    });
    (Some(name), given.is_none())
}

/// The model's one input: images `(N, C, H, W)` of f32, the batch fixed or dynamic.
struct Input {
    name: String,
    fixed_batch: Option<usize>,
    item_shape: Vec<usize>,
}

impl Input {
    /// The session's input, its item shape from the graph's fixed dimensions and the
    /// preprocessing `data` (read from `cfg_path`), which must agree where both say it.
    fn read(
        session: &Session,
        path: &Path,
        data: Option<&DataConfig>,
        cfg_path: &Path,
    ) -> Result<Input> {
        let [input] = session.inputs() else {
            return Err(Error::state(
                path,
                format!(
                    "{} inputs; alkit feeds a model one input, the images",
                    session.inputs().len()
                ),
            ));
        };
        let name = input.name().to_string();
        let dims: Vec<i64> = match input.dtype() {
            ValueType::Tensor { ty, shape, .. } if *ty == TensorElementType::Float32 => {
                shape.to_vec()
            }
            other => {
                return Err(Error::state(
                    path,
                    format!("input `{name}` is {other}, not a float32 tensor"),
                ))
            }
        };
        if dims.len() != 4 {
            return Err(Error::state(
                path,
                format!(
                    "input `{name}` has dimensions {dims:?}; alkit feeds images \
                     (batch, channels, height, width)"
                ),
            ));
        }
        let fixed_batch = fixed(dims[0]);
        if fixed_batch.is_some_and(|b| b > MAX_FIXED_BATCH) {
            return Err(Error::state(
                path,
                format!(
                    "input `{name}` has a fixed batch of {}; at most {MAX_FIXED_BATCH} is served",
                    dims[0]
                ),
            ));
        }
        let from_config = data.map(|d| d.preprocess.item_shape());
        let item_shape = item_shape(&dims[1..], from_config, &name, path, cfg_path)?;
        Ok(Input {
            name,
            fixed_batch,
            item_shape,
        })
    }
}

/// The item shape `(c, h, w)`: each of the input's `dims` where fixed, else the configuration's;
/// the two must agree where both say it, and one of them must.
fn item_shape(
    dims: &[i64],
    from_config: Option<Vec<usize>>,
    input: &str,
    path: &Path,
    cfg_path: &Path,
) -> Result<Vec<usize>> {
    let names = ["channels", "height", "width"];
    let mut shape = Vec::with_capacity(3);
    for (k, &d) in dims.iter().enumerate() {
        let given = from_config.as_ref().map(|s| s[k]);
        shape.push(match (fixed(d), given) {
            (Some(d), Some(g)) if d != g => {
                return Err(Error::state(
                    cfg_path,
                    format!("says {} {g}, the model's input `{input}` has {d}", names[k]),
                ))
            }
            (Some(d), _) => d,
            (None, Some(g)) => g,
            (None, None) => {
                return Err(Error::state(
                    path,
                    format!(
                        "input `{input}` has a dynamic {} (dimension {}), and no config.json \
                         beside the model says its size: write one with pretrained_cfg.input_size",
                        names[k],
                        k + 1
                    ),
                ))
            }
        });
    }
    if shape.iter().product::<usize>() > MAX_ITEM_VALUES {
        return Err(Error::state(
            path,
            format!("items of shape {shape:?} are larger than alkit reads"),
        ));
    }
    Ok(shape)
}

/// The shape of one probe batch: the model's fixed batch, or one item.
fn probe_shape(model: &OnnxModel) -> Vec<usize> {
    let mut shape = vec![model.fixed_batch.unwrap_or(1)];
    shape.extend(&model.item_shape);
    shape
}

/// The class count: the logits output's `dim` where fixed, or one probe batch's where it is
/// dynamic; refused outside 1 to [`MAX_CLASSES`].
fn count_classes(model: &OnnxModel, dim: i64, probe: &Tensor, path: &Path) -> Result<usize> {
    let classes = match fixed(dim) {
        Some(c) => c,
        None => usize::try_from(probed_classes(model, probe, path)?).unwrap_or(0),
    };
    if classes == 0 || classes > MAX_CLASSES {
        return Err(Error::state(
            path,
            format!(
                "output `{}` has {classes} classes; a classifier of 1 to {MAX_CLASSES} is read",
                model.logits
            ),
        ));
    }
    Ok(classes)
}

/// The logits' width of a run of `probe` (zeros) through the session.
fn probed_classes(model: &OnnxModel, probe: &Tensor, path: &Path) -> Result<i64> {
    let logits = &model.logits;
    contain(path, "ONNX Runtime", || {
        let mut s = model
            .session
            .lock()
            .map_err(|_| Error::state(path, "the ONNX session was poisoned"))?;
        let shape: Vec<i64> = probe.dims().iter().map(|&d| d as i64).collect();
        let t = ort::value::Tensor::from_array((shape, vec![0f32; probe.elem_count()]))
            .map_err(|e| Error::state(path, format!("ONNX Runtime: {e}")))?;
        let out = s
            .run(ort::inputs![model.input.as_str() => t])
            .map_err(|e| Error::state(path, format!("ONNX Runtime failed: {e}")))?;
        let v = out
            .get(logits)
            .ok_or_else(|| Error::state(path, format!("ONNX Runtime gave no output `{logits}`")))?;
        let (s, _) = v
            .try_extract_tensor::<f32>()
            .map_err(|e| Error::state(path, format!("output `{logits}`: {e}")))?;
        Ok(s.get(1).copied().unwrap_or(0))
    })
}

/// The last layer found, where the features are read, as the model's `(W, b)`; its outputs
/// must be the model's classes.
fn attach_head(model: &mut OnnxModel, outputs: Outputs, path: &Path) -> Result<()> {
    let (Some(h), Some(f)) = (outputs.head, outputs.features) else {
        return Ok(());
    };
    if h.classes != model.classes {
        return Err(Error::state(
            path,
            format!(
                "the last layer ({}) has {} outputs, the logits `{}` {}",
                h.node, h.classes, model.logits, model.classes
            ),
        ));
    }
    let w = Tensor::from_vec(h.w, (h.classes, h.dim), &Device::Cpu)?;
    let b = Tensor::from_vec(h.b, h.classes, &Device::Cpu)?;
    model.head = Some((f, w, b));
    Ok(())
}

/// One probe batch through the session: the outputs' shapes, and the last layer found in the
/// graph giving the logits ONNX Runtime computes.
fn check_head(model: &OnnxModel, probe: &Tensor, path: &Path) -> Result<()> {
    contain(path, "ONNX Runtime", || {
        let (logits_out, feats) = model
            .run(probe, model.head.is_some())
            .map_err(|e| Error::state(path, e.to_string()))?;
        let (Some(h), Some((_, w, b))) = (feats, &model.head) else {
            return Ok(());
        };
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
        Ok(())
    })
}
