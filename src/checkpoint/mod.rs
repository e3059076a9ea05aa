//! Checkpoints: `config.json` + `model.safetensors` (or PyTorch's `pytorch_model.bin`) in a
//! folder.
//!
//! `config.json` holds the architecture ([`Arch`]), the normalisation statistics, the item
//! shape, the class names, the alkit version and the list of tensors with their shapes; nothing
//! in it is executed. Tensor names follow PyTorch's `state_dict` names for the same layers (see
//! [`crate::nn::Cnn`] and [`crate::nn::Mlp`]), so weights trained elsewhere can be converted by
//! renaming at most. Loading checks that the file holds exactly the expected tensors with the
//! expected shapes. [`open`] also takes `hf:OWNER/NAME` model repositories, and
//! [`open_ensemble`] several checkpoints as one deep ensemble. A folder or repository in
//! timm's layout (its own `config.json`) is read through [`timm`]: its weights by their
//! state-dict names, its evaluation transform as the checkpoint's [`Preprocess`]. Weights may
//! also be PyTorch's own files (`pytorch_model.bin`, a `.pth` with a `config.json` beside it,
//! or [`import`]'s input), read by [`pytorch`] without running any of their code. A `.onnx`
//! file (or a folder holding `model.onnx`) is an ONNX model run by ONNX Runtime (`onnx`, with
//! the cargo feature `onnx`).

mod embedded;
#[cfg(feature = "onnx")]
pub mod onnx;
pub mod pytorch;
pub mod timm;

use crate::data::image::Preprocess;
use crate::data::Normalizer;
use crate::error::{Error, Result};
use crate::fsutil::{read_json, write_atomic, write_json};
use crate::hub::{Hub, HubRepo, RepoKind};
use crate::models::Arch;
use crate::nn::init::Weights;
use crate::nn::{Classifier, Ensemble};
use crate::observe::Observer;
use crate::train::ModelBuilder;
use candle_core::{DType, Device};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
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

const FORMAT: u32 = 1;

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

/// The file name of an ONNX model inside a checkpoint folder.
pub const ONNX_FILE: &str = "model.onnx";

/// Whether `path` names an ONNX model: a `.onnx` file, or a folder holding [`ONNX_FILE`] and
/// none of [`WEIGHTS_FILES`].
fn onnx_model(path: &Path) -> Option<PathBuf> {
    if path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("onnx"))
    {
        return Some(path.to_path_buf());
    }
    let inside = path.join(ONNX_FILE);
    (path.is_dir() && inside.is_file() && !WEIGHTS_FILES.iter().any(|f| path.join(f).is_file()))
        .then_some(inside)
}

/// Opens the ONNX model at `path` ([`onnx::load`]), or says how to get a build that can.
#[cfg(feature = "onnx")]
fn load_onnx(
    path: &Path,
    options: &OpenOptions,
    observer: &mut dyn Observer,
) -> Result<Checkpoint> {
    onnx::load(path, options, observer)
}

/// Without the feature: an error saying how to get a build that runs ONNX models.
#[cfg(not(feature = "onnx"))]
fn load_onnx(
    path: &Path,
    options: &OpenOptions,
    observer: &mut dyn Observer,
) -> Result<Checkpoint> {
    let _ = (options, observer);
    Err(Error::state(
        path,
        "an ONNX model, and this build of alkit runs none: build it with the cargo feature \
         `onnx` and install ONNX Runtime with scripts/onnxruntime.sh DIR (then source \
         DIR/env.sh, which sets ORT_DYLIB_PATH)",
    ))
}

/// Writes `dir/model.safetensors` and `dir/config.json` (each atomically); returns the config
/// written.
pub fn save(
    dir: &Path,
    arch: &Arch,
    params: &Weights,
    normalizer: &Normalizer,
    item_shape: &[usize],
    classes: Vec<String>,
) -> Result<CheckpointConfig> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let named = params.named();
    // Little-endian f32 bytes per tensor, serialised in memory and written through the one
    // atomic writer (synced, folder synced, ordinary permissions).
    let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = named
        .iter()
        .map(|(n, v)| {
            let t = v.as_tensor().to_dtype(DType::F32)?;
            let data: Vec<u8> = t
                .flatten_all()?
                .to_vec1::<f32>()?
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect();
            Ok((n.clone(), t.dims().to_vec(), data))
        })
        .collect::<Result<_>>()?;
    let path = dir.join("model.safetensors");
    let views = bytes
        .iter()
        .map(|(n, shape, data)| {
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), data)
                .map(|v| (n.clone(), v))
        })
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::state(&path, format!("cannot serialise: {e}")))?;
    let file = safetensors::serialize(views, None)
        .map_err(|e| Error::state(&path, format!("cannot serialise: {e}")))?;
    write_atomic(&path, &file)?;
    let config = CheckpointConfig {
        format: FORMAT,
        alkit_version: env!("CARGO_PKG_VERSION").into(),
        arch: arch.clone(),
        normalizer: normalizer.clone(),
        item_shape: item_shape.to_vec(),
        classes,
        tensors: named
            .iter()
            .map(|(n, v)| TensorInfo {
                name: n.clone(),
                shape: v.dims().to_vec(),
            })
            .collect(),
        preprocess: None,
    };
    write_json(&dir.join("config.json"), &config)?;
    Ok(config)
}

/// Converts bare weights (a file of named tensors: a PyTorch `state_dict` saved with
/// `torch.save` or `safetensors.torch.save_file`, or a training checkpoint holding one) into a
/// checkpoint folder for `arch`.
///
/// The names and shapes must be exactly those `arch` defines (see [`crate::nn::Cnn`] and
/// [`crate::nn::Mlp`]; PyTorch's names for the same layers); any other dtype is converted to
/// f32. Every missing, misshapen or unexpected tensor is an error naming it, and nothing is
/// written then.
pub fn import(
    weights: &Path,
    arch: &Arch,
    normalizer: &Normalizer,
    item_shape: &[usize],
    classes: Vec<String>,
    out: &Path,
) -> Result<()> {
    let (vb, expected) = crate::nn::init::shapes(DType::F32, &Device::Cpu);
    arch.build(vb)
        .map_err(|e| Error::config("arch", format!("cannot be built: {e}")))?;
    let tensors = read_weights(weights, &Device::Cpu)?;
    let mut named = Vec::new();
    for (name, var) in expected.named() {
        let t = tensors
            .get(&name)
            .ok_or_else(|| Error::state(weights, format!("tensor `{name}` is missing")))?;
        if t.dims() != var.dims() {
            return Err(Error::state(
                weights,
                format!(
                    "tensor `{name}` has shape {:?}, the architecture needs {:?}",
                    t.dims(),
                    var.dims()
                ),
            ));
        }
        named.push((
            name,
            candle_core::Var::from_tensor(&t.to_dtype(DType::F32)?)?,
        ));
    }
    let infos: Vec<TensorInfo> = named
        .iter()
        .map(|(n, v)| TensorInfo {
            name: n.clone(),
            shape: v.dims().to_vec(),
        })
        .collect();
    if let Some(extra) = tensors
        .keys()
        .find(|k| !named.iter().any(|(n, _)| n == *k) && !is_batch_counter(k, &infos))
    {
        return Err(Error::state(
            weights,
            format!("unexpected tensor `{extra}` (not part of the architecture)"),
        ));
    }
    if classes.len() != arch.classes() {
        return Err(Error::config(
            "classes",
            format!(
                "{} names for a model with {} outputs",
                classes.len(),
                arch.classes()
            ),
        ));
    }
    save(
        out,
        arch,
        &Weights::from_named(named),
        normalizer,
        item_shape,
        classes,
    )
    .map(|_| ())
}

/// PyTorch's batch counter (`bn1.num_batches_tracked`) sits beside every batch norm's running
/// statistics in a torchvision or timm state dict; alkit's momentum update does not read it,
/// so beside an expected `running_mean` it is accepted and dropped.
fn is_batch_counter(name: &str, expected: &[TensorInfo]) -> bool {
    name.strip_suffix("num_batches_tracked").is_some_and(|p| {
        let mean = format!("{p}running_mean");
        expected.iter().any(|t| t.name == mean)
    })
}

/// Checks what `config.json` promises before any tensor is read: one finite mean and one
/// finite positive standard deviation per input channel, and one distinct, non-empty class
/// name per model output.
fn validate_config(config: &CheckpointConfig, path: &Path) -> Result<()> {
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
fn read_config_value(path: &Path) -> Result<serde_json::Value> {
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

/// The weights file names a checkpoint folder may hold, in the order looked for: alkit's and
/// timm's safetensors, then the `pytorch_model.bin` that timm's `save_pretrained` and
/// `push_to_hub` write when not told to write safetensors.
pub const WEIGHTS_FILES: [&str; 2] = ["model.safetensors", "pytorch_model.bin"];

/// A weights file's tensors by name, on `device`: safetensors or PyTorch's own format
/// (either of `torch.save`'s), recognised by its first bytes.
pub fn read_weights(path: &Path, device: &Device) -> Result<HashMap<String, candle_core::Tensor>> {
    match pytorch::sniff(path)? {
        Some(pytorch::Format::TorchZip | pytorch::Format::TorchLegacy) => pytorch::read(path)?
            .into_iter()
            .map(|(k, t)| Ok((k, t.to_device(device)?)))
            .collect(),
        _ => candle_core::safetensors::load(path, device)
            .map_err(|e| Error::state(path, format!("unreadable safetensors file: {e}"))),
    }
}

/// What to do with a weights file given where a checkpoint folder is expected and no
/// `config.json` beside it: the one file that says what network the weights are for.
fn weights_without_config(path: &Path, format: pytorch::Format) -> Error {
    let what = match format {
        pytorch::Format::Safetensors => "a safetensors weights file",
        _ => "a PyTorch weights file (torch.save)",
    };
    let config = path.with_file_name("config.json");
    Error::state(
        path,
        format!(
            "{what}, without the config.json that says which network it holds. Write one at {}: \
             for a timm or torchvision ResNet `{{\"architecture\": \"resnet18\", \"num_classes\": 10}}` \
             with its own class count (resnet34 and resnet50 alike; timm's defaults fill the \
             rest) and open this file again; for alkit's own architectures, checkpoint::import writes a checkpoint \
             folder from it",
            config.display()
        ),
    )
}

/// Loads a checkpoint onto `device`: a folder holding `config.json` (alkit's own, or a timm
/// model's: see [`timm`]) and one of [`WEIGHTS_FILES`], or a weights file (safetensors or
/// PyTorch's) with a `config.json` beside it, or an ONNX model (see [`load_with`]).
pub fn load(dir: &Path, device: &Device) -> Result<Checkpoint> {
    load_with(
        dir,
        &OpenOptions::default(),
        device,
        &mut crate::observe::Silent,
    )
}

/// [`load`] with `options`: an ONNX model (a `.onnx` file, or a folder holding [`ONNX_FILE`]
/// and no weights file) is opened as they say, and what was chosen for it unnamed is told to
/// `observer`.
pub fn load_with(
    dir: &Path,
    options: &OpenOptions,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<Checkpoint> {
    if let Some(model) = onnx_model(dir) {
        return load_onnx(&model, options, observer);
    }
    not_for_onnx_only(options, &dir.display().to_string())?;
    if let Some(ck) = embedded::load_if_head(dir, device)? {
        return Ok(ck);
    }
    if dir.is_file() {
        let Some(format) = pytorch::sniff(dir)? else {
            return Err(Error::state(
                dir,
                "neither a checkpoint folder nor a weights file (safetensors or PyTorch's)",
            ));
        };
        let config = dir.with_file_name("config.json");
        if !config.is_file() {
            return Err(weights_without_config(dir, format));
        }
        return load_from(&config, dir, device);
    }
    let cfg_path = dir.join("config.json");
    let weights = WEIGHTS_FILES
        .iter()
        .map(|f| dir.join(f))
        .find(|p| p.is_file())
        .unwrap_or_else(|| dir.join(WEIGHTS_FILES[0]));
    load_from(&cfg_path, &weights, device)
}

/// Loads the checkpoint `cfg_path` describes with the weights in `path`.
fn load_from(cfg_path: &Path, path: &Path, device: &Device) -> Result<Checkpoint> {
    let cfg_path = cfg_path.to_path_buf();
    let value = read_config_value(&cfg_path)?;
    // A state dict saved elsewhere: any float dtype, PyTorch's batch counters beside it.
    let foreign = timm::is_timm(&value);
    let config: CheckpointConfig = if foreign {
        timm::config(value, &cfg_path)?
    } else {
        serde_json::from_value(value)
            .map_err(|e| Error::state(&cfg_path, format!("not an alkit checkpoint: {e}")))?
    };
    if config.format != FORMAT {
        return Err(Error::state(
            &cfg_path,
            format!(
                "checkpoint format {} is not supported (expected {FORMAT})",
                config.format
            ),
        ));
    }
    validate_config(&config, &cfg_path)?;
    if !path.is_file() {
        return Err(Error::io(
            path,
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!(
                    "missing (a checkpoint's weights are {})",
                    WEIGHTS_FILES.join(" or ")
                ),
            ),
        ));
    }
    let mut tensors = read_weights(path, device)?;
    if foreign {
        tensors.retain(|k, _| !is_batch_counter(k, &config.tensors));
    }
    from_tensors(config, tensors, foreign, path, device)
}

/// The checkpoint `config` describes, built from `tensors` read from `path`: exactly the
/// tensors `config` lists with their shapes, F32 (any float dtype when `foreign`, the
/// weights of another tool), every value finite.
fn from_tensors(
    config: CheckpointConfig,
    tensors: HashMap<String, candle_core::Tensor>,
    foreign: bool,
    path: &Path,
    device: &Device,
) -> Result<Checkpoint> {
    for t in &config.tensors {
        match tensors.get(&t.name) {
            None => {
                return Err(Error::state(
                    path,
                    format!("tensor `{}` is missing", t.name),
                ))
            }
            Some(x) if x.dims() != t.shape.as_slice() => {
                return Err(Error::state(
                    path,
                    format!(
                        "tensor `{}` has shape {:?}, config.json says {:?}",
                        t.name,
                        x.dims(),
                        t.shape
                    ),
                ))
            }
            Some(x) if foreign && !x.dtype().is_float() => {
                return Err(Error::state(
                    path,
                    format!("tensor `{}` is {:?}, not floating point", t.name, x.dtype()),
                ))
            }
            // `save` writes f32 only: another dtype in the header means a file that was not
            // written by alkit for this config (its bytes would be read as something else).
            Some(x) if !foreign && x.dtype() != DType::F32 => {
                return Err(Error::state(
                    path,
                    format!(
                        "tensor `{}` is {:?}; a checkpoint holds F32 tensors (`checkpoint::import` converts \
                         foreign weights)",
                        t.name,
                        x.dtype()
                    ),
                ))
            }
            _ => {}
        }
    }
    if let Some(extra) = tensors
        .keys()
        .find(|k| !config.tensors.iter().any(|t| &t.name == *k))
    {
        return Err(Error::state(path, format!("unexpected tensor `{extra}`")));
    }
    let mut named = Vec::with_capacity(config.tensors.len());
    let mut as_tensors = HashMap::new();
    for t in &config.tensors {
        let values = tensors[&t.name].to_dtype(DType::F32)?;
        let bad = values
            .flatten_all()?
            .to_vec1::<f32>()?
            .iter()
            .filter(|v| !v.is_finite())
            .count();
        if bad > 0 {
            return Err(Error::state(
                path,
                format!(
                    "tensor `{}` holds {bad} values that are NaN or infinite",
                    t.name
                ),
            ));
        }
        let var = candle_core::Var::from_tensor(&values)?;
        as_tensors.insert(t.name.clone(), var.as_tensor().clone());
        named.push((t.name.clone(), var));
    }
    let vb = candle_nn::VarBuilder::from_tensors(as_tensors, DType::F32, device);
    let model = config
        .arch
        .build(vb)
        .map_err(|e| Error::state(path, format!("tensors do not fit the architecture: {e}")))?;
    Ok(Checkpoint {
        config,
        model,
        params: Weights::from_named(named),
    })
}

/// Opens a checkpoint by name: a folder or weights file (see [`load`]), or `hf:OWNER/NAME[@REV]`
/// for a model repository on the Hub (its `config.json` and weights fetched through `hub`'s
/// cache first: `model.safetensors`, or `pytorch_model.bin` where the repository has no
/// safetensors; where it has neither, its `model.onnx`, an ONNX model as [`load_with`] opens
/// one, its `config.json` giving the preprocessing when there is one).
pub fn open(
    name: &str,
    hub: &Hub,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<Checkpoint> {
    open_with(name, &OpenOptions::default(), hub, device, observer)
}

/// [`open`] with `options` (see [`load_with`]).
pub fn open_with(
    name: &str,
    options: &OpenOptions,
    hub: &Hub,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<Checkpoint> {
    let Some(repo) = name.strip_prefix("hf:") else {
        return load_with(Path::new(name), options, device, observer);
    };
    let repo = HubRepo::parse(repo)?;
    match hub_files(&repo, hub, observer)? {
        HubModel::Weights { config, weights } => {
            not_for_onnx_only(options, name)?;
            load_from(&config, &weights, device)
        }
        HubModel::Onnx(model) => load_onnx(&model, options, observer),
    }
}

/// Refuses the normalisation `options` give inline for the checkpoint `name`, which is not
/// an ONNX model: its own `config.json` gives its normalisation.
fn not_for_onnx_only(options: &OpenOptions, name: &str) -> Result<()> {
    if options.input_mean.is_some() || options.input_std.is_some() {
        return Err(Error::config(
            "input_mean",
            format!(
                "and setting `input_std` give an ONNX model's normalisation; `{name}` is not an \
                 ONNX model (its config.json gives its own): leave them out"
            ),
        ));
    }
    Ok(())
}

/// What a Hub model repository holds, fetched into the cache.
enum HubModel {
    /// `config.json` and the weights (`model.safetensors`, else `pytorch_model.bin`).
    Weights { config: PathBuf, weights: PathBuf },
    /// `model.onnx` (with the repository's `config.json` beside it in the snapshot, where it
    /// has one, for the preprocessing, and the external data files its weights lie in).
    Onnx(PathBuf),
}

/// The files of the Hub model repository `repo` (fetched through `hub` when not cached):
/// `config.json` and weights, or where there are no weights `model.onnx` (its `config.json`
/// fetched too when the repository has one, and the external data files it names). When none
/// can be had, the error of the first file that could not is returned.
fn hub_files(repo: &HubRepo, hub: &Hub, observer: &mut dyn Observer) -> Result<HubModel> {
    let config = hub.get(repo, RepoKind::Model, "config.json", observer);
    let weights = hub
        .get(repo, RepoKind::Model, WEIGHTS_FILES[0], observer)
        .or_else(|e| {
            hub.get(repo, RepoKind::Model, WEIGHTS_FILES[1], observer)
                .map_err(|_| e)
        });
    match (config, weights) {
        (Ok(config), Ok(weights)) => Ok(HubModel::Weights { config, weights }),
        (config, Err(e)) => match hub.get(repo, RepoKind::Model, ONNX_FILE, observer) {
            Ok(model) => {
                // Weights kept in external data files are fetched beside the model.
                for location in onnx_locations(&model)? {
                    hub.get(repo, RepoKind::Model, &location, observer)?;
                }
                Ok(HubModel::Onnx(model))
            }
            Err(_) => Err(config.err().unwrap_or(e)),
        },
        (Err(e), Ok(_)) => Err(e),
    }
}

/// The files checkpoint `name` is read from: `config.json` and `model.safetensors` of its
/// folder, or of a Hub repository's cached snapshot (fetched through `hub` when missing, as
/// [`open`] fetches them); for an ONNX model, the `.onnx` file, the `config.json` beside it
/// where there is one, and the external data files it names.
pub fn files(name: &str, hub: &Hub, observer: &mut dyn Observer) -> Result<Vec<PathBuf>> {
    const FILES: [&str; 2] = ["config.json", "model.safetensors"];
    if embedded::has_head(Path::new(name)) {
        return Ok(vec![PathBuf::from(name)]);
    }
    if let Some(model) = onnx_model(Path::new(name)).filter(|_| !name.starts_with("hf:")) {
        return onnx_files(model);
    }
    let Some(repo) = name.strip_prefix("hf:") else {
        return Ok(FILES.iter().map(|f| Path::new(name).join(f)).collect());
    };
    let repo = HubRepo::parse(repo)?;
    Ok(match hub_files(&repo, hub, observer)? {
        HubModel::Weights { config, weights } => vec![config, weights],
        HubModel::Onnx(model) => onnx_files(model)?,
    })
}

/// An ONNX model's files: the `config.json` beside it where there is one, the model, then
/// the external data files its weights lie in.
fn onnx_files(model: PathBuf) -> Result<Vec<PathBuf>> {
    let config = model.with_file_name("config.json");
    let dir = model.parent().map(Path::to_path_buf).unwrap_or_default();
    let external: Vec<PathBuf> = onnx_locations(&model)?
        .iter()
        .map(|l| dir.join(l))
        .collect();
    Ok(config
        .is_file()
        .then_some(config)
        .into_iter()
        .chain([model])
        .chain(external)
        .collect())
}

/// The external data files the ONNX model `path` names, relative to its folder
/// ([`onnx::external_locations`]); none without the `onnx` feature, which cannot open it.
fn onnx_locations(path: &Path) -> Result<Vec<String>> {
    #[cfg(feature = "onnx")]
    return onnx::external_locations(path);
    #[cfg(not(feature = "onnx"))]
    {
        let _ = path;
        Ok(Vec::new())
    }
}

/// A content hash of the checkpoints `names` (an ensemble's members, in order): FNV-1a (64
/// bits, [`crate::data::Fnv1a`]) over each member's [`files`], every file's length and then
/// its bytes, read 1 MiB at a time. It tells a checkpoint retrained or replaced in place from
/// the one a path named before: sharded scoring records it so that `merge` refuses shards of
/// different weights. `options`' features output and preprocessing file (an ONNX model's)
/// are part of it, as they change what the models give. Cost: one sequential read of the
/// weights (about 0.05 s for 45 MB on this project's machine; docs/sharding.md).
pub fn content_hash(
    names: &[String],
    options: &OpenOptions,
    hub: &Hub,
    observer: &mut dyn Observer,
) -> Result<u64> {
    use std::hash::Hasher;
    use std::io::Read;
    let mut h = crate::data::Fnv1a::default();
    let mut buf = vec![0u8; 1 << 20];
    // How the models are opened changes what they give: the features output named, the
    // normalisation given inline, the preprocessing read from elsewhere (its bytes, below).
    if let Some(f) = &options.onnx_features {
        h.write(f.as_bytes());
        h.write(&[0]);
    }
    for (tag, values) in [(b'm', &options.input_mean), (b's', &options.input_std)] {
        if let Some(v) = values {
            h.write(&[tag]);
            h.write(&(v.len() as u64).to_le_bytes());
            for x in v {
                h.write(&x.to_le_bytes());
            }
        }
    }
    let mut paths = Vec::new();
    for name in names {
        paths.extend(files(name, hub, observer)?);
    }
    paths.extend(options.onnx_config.iter().cloned());
    for path in paths {
        let mut f = std::fs::File::open(&path).map_err(|e| Error::io(&path, e))?;
        let len = f.metadata().map_err(|e| Error::io(&path, e))?.len();
        h.write(&len.to_le_bytes());
        let mut read = 0u64;
        loop {
            let n = f.read(&mut buf).map_err(|e| Error::io(&path, e))?;
            if n == 0 {
                break;
            }
            h.write(&buf[..n]);
            read += n as u64;
        }
        if read != len {
            return Err(Error::state(
                &path,
                format!("changed while it was read ({len} bytes, then {read})"),
            ));
        }
    }
    Ok(h.finish())
}

/// Opens one checkpoint, or several of the same architecture and normalisation as one deep
/// [`Ensemble`] (parameters renamed `m{k}.{name}`; the first checkpoint's config).
pub fn open_ensemble(
    names: &[String],
    hub: &Hub,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<Checkpoint> {
    open_ensemble_with(names, &OpenOptions::default(), hub, device, observer)
}

/// [`open_ensemble`] with `options` (see [`load_with`]); the members must also prepare their
/// inputs alike (the same preprocessing).
pub fn open_ensemble_with(
    names: &[String],
    options: &OpenOptions,
    hub: &Hub,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<Checkpoint> {
    match names {
        [] => return Err(Error::config("checkpoint", "no checkpoint given")),
        [one] => return open_with(one, options, hub, device, observer),
        _ => {}
    }
    let mut members = Vec::new();
    let mut member_params = Vec::new();
    let mut config: Option<CheckpointConfig> = None;
    for name in names {
        let c = open_with(name, options, hub, device, observer)?;
        if let Some(first) = &config {
            if first.arch != c.config.arch
                || first.normalizer != c.config.normalizer
                || first.preprocess != c.config.preprocess
            {
                return Err(Error::state(
                    name,
                    format!(
                        "an ensemble's checkpoints must share the architecture, \
                         normalisation and preprocessing of {}",
                        names[0]
                    ),
                ));
            }
        }
        member_params.push(c.params);
        members.push(c.model);
        config.get_or_insert(c.config);
    }
    let config = config.ok_or_else(|| Error::config("checkpoint", "no checkpoint given"))?;
    Ok(Checkpoint {
        config,
        model: Box::new(Ensemble::new(members)?),
        params: Weights::of_members(&member_params),
    })
}
