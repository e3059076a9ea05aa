//! alkit's own checkpoints and timm's: a `config.json` (alkit's, or a timm repository's read
//! through [`super::timm`]) beside a weights file (safetensors, or PyTorch's `torch.save`
//! files read by [`super::pytorch`] without running them), in a folder, as a file with its
//! `config.json` beside it, or in a Hub repository's snapshot. Loading checks that the file
//! holds exactly the tensors the configuration lists, with their shapes, every value finite.

use super::config::{
    read_config_value, validate_config, Checkpoint, CheckpointConfig, OpenOptions,
};
use super::config::{TensorInfo, FORMAT};
use super::kind::Kind;
use super::{pytorch, timm};
use crate::error::{Error, Result};
use crate::hub::{Hub, HubRepo, RepoKind};
use crate::nn::init::Weights as Params;
use crate::observe::Observer;
use crate::train::ModelBuilder;
use candle_core::{DType, Device};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The kind: a weights file with its `config.json` beside it. Recognises whatever no other
/// kind did (a folder, or a file whose first bytes are safetensors' or PyTorch's), so it is
/// the registry's last.
pub(crate) struct WeightsKind;

impl Kind for WeightsKind {
    fn detect(&self, path: &Path) -> Result<Option<PathBuf>> {
        if path.is_file() {
            return match pytorch::sniff(path)? {
                Some(_) => Ok(Some(path.to_path_buf())),
                None => Err(Error::state(
                    path,
                    "neither a checkpoint folder nor a weights file (safetensors or PyTorch's)",
                )),
            };
        }
        let weights = WEIGHTS_FILES
            .iter()
            .map(|f| path.join(f))
            .find(|p| p.is_file())
            .unwrap_or_else(|| path.join(WEIGHTS_FILES[0]));
        Ok(Some(weights))
    }

    fn open(
        &self,
        found: &Path,
        _: &OpenOptions,
        device: &Device,
        _: &mut dyn Observer,
    ) -> Result<Checkpoint> {
        let config = found.with_file_name("config.json");
        if found.is_file() && !config.is_file() {
            if let Some(format) = pytorch::sniff(found)? {
                return Err(weights_without_config(found, format));
            }
        }
        load_from(&config, found, device)
    }

    fn files(&self, found: &Path) -> Result<Vec<PathBuf>> {
        Ok(vec![
            found.with_file_name("config.json"),
            found.to_path_buf(),
        ])
    }

    fn fetch_from_hub(
        &self,
        repo: &HubRepo,
        hub: &Hub,
        observer: &mut dyn Observer,
    ) -> Result<Option<PathBuf>> {
        hub.get(repo, RepoKind::Model, "config.json", observer)?;
        let weights = hub
            .get(repo, RepoKind::Model, WEIGHTS_FILES[0], observer)
            .or_else(|e| {
                hub.get(repo, RepoKind::Model, WEIGHTS_FILES[1], observer)
                    .map_err(|_| e)
            })?;
        Ok(Some(weights))
    }
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

/// PyTorch's batch counter (`bn1.num_batches_tracked`) sits beside every batch norm's running
/// statistics in a torchvision or timm state dict; alkit's momentum update does not read it,
/// so beside an expected `running_mean` it is accepted and dropped.
pub(crate) fn is_batch_counter(name: &str, expected: &[TensorInfo]) -> bool {
    name.strip_suffix("num_batches_tracked").is_some_and(|p| {
        let mean = format!("{p}running_mean");
        expected.iter().any(|t| t.name == mean)
    })
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
pub(crate) fn from_tensors(
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
        params: Params::from_named(named),
    })
}
