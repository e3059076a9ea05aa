//! Where an experiment's model comes from ([`ModelSource`]: a checkpoint, or one trained here
//! and saved at once, so a long training is never lost), the checks that it fits the data, and
//! its scoring context.

use super::train::fit_and_save;
use crate::checkpoint::{self, Checkpoint};
use crate::data::source::{load_named, load_splits};
use crate::data::{Dataset, Splits};
use crate::error::{Error, Result, ResultExt};
use crate::hub::Hub;
use crate::models::{Arch, ModelKind};
use crate::observe::Observer;
use crate::predict::Scoring;
use alkit_acquisition::Scorer;
use candle_core::Device;
use std::path::Path;
use std::sync::Arc;

/// Where an experiment's model comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSource {
    /// A checkpoint folder or `hf:OWNER/NAME[@REV]`; `None`: train `model` here.
    pub checkpoint: Option<String>,
    /// How the checkpoint is opened (an ONNX model's features output).
    pub checkpoint_options: crate::checkpoint::OpenOptions,
    /// The built-in model to train when no checkpoint is given.
    pub model: ModelKind,
    /// Optimiser steps when training here.
    pub steps: usize,
    /// Mini-batch size when training here (`None`: 32, or DUQ's own 128).
    pub batch_size: Option<usize>,
    /// Seed of the training and of the scorers' noise.
    pub seed: u64,
    /// Where a checkpoint's training features (the detectors' statistics) are cached: an
    /// embedding file keyed by the checkpoint's content hash and the data's files, as
    /// [`super::embed::cached`] keeps them, reused by every later evaluation of the same
    /// checkpoint on the same data. `None`: computed in memory each run.
    pub stats_cache: Option<std::path::PathBuf>,
}

impl ModelSource {
    /// The rule the command line follows: a checkpoint's statistics kept in the given cache
    /// folder, else in the default embedding cache ([`super::embed::default_cache`]), else
    /// (no cache folder anywhere: no `HOME`) computed in memory.
    pub fn caching_statistics(mut self) -> Self {
        if self.checkpoint.is_some() && self.stats_cache.is_none() {
            self.stats_cache = super::embed::default_cache().ok();
        }
        self
    }
}

/// `source.model` trained here on `train_raw[..limit]` (all of it when `limit` is `None`,
/// normalised with statistics of the whole split) and saved as a checkpoint in `save_to`
/// before anything else happens.
fn train_and_save(
    source: &ModelSource,
    train_raw: &Dataset,
    limit: Option<usize>,
    save_to: &Path,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<Checkpoint> {
    let params = source
        .model
        .train_config(source.steps, source.batch_size, None, None)?
        .validate()?;
    let n = limit.unwrap_or(train_raw.len()).min(train_raw.len());
    let ids: Vec<usize> = (0..n).collect();
    fit_and_save(
        source.model,
        train_raw,
        &ids,
        &params,
        source.seed,
        save_to,
        device,
        observer,
    )
}

impl ModelSource {
    /// The model, the splits of `data` (the data it is evaluated on, with a test split) and
    /// the items of each of `others` (OOD data sets: their test split where they have one,
    /// else all their items, a plain folder of images say; their labels are not read), all
    /// read for it. A checkpoint is opened first and the data read through its preprocessing
    /// (a timm model's resize and crop); without one the data are read as stored and `model`
    /// is trained on `data`'s `train[..limit(n)]` and saved to `save_to` (`train_and_save`). Scorers the model
    /// cannot serve (`duq` without DUQ, MC dropout without dropout) are refused before anything
    /// trains; the scorers are returned as the model serves them ([`served_scorers`]).
    /// Downloads and training report to `observer`.
    /// The data's labels are put in the model's class order by name (a folder whose classes
    /// sort otherwise, or hold fewer of them); data whose class names are not the model's
    /// come back with [`Evaluation::foreign_labels`] saying so.
    #[allow(clippy::too_many_arguments)]
    pub fn model_and_data(
        &self,
        data: &str,
        others: &[&str],
        scorers: &[Arc<dyn Scorer>],
        limit: impl Fn(usize) -> Option<usize>,
        save_to: &Path,
        hub: &Hub,
        device: &Device,
        observer: &mut dyn Observer,
    ) -> Result<Evaluation> {
        let check = |arch: &Arch| -> Result<Served> {
            let served = served_scorers(arch, scorers);
            for s in &served {
                arch.check_needs(s.name(), &s.needs())?;
            }
            Ok(served)
        };
        let Some(c) = &self.checkpoint else {
            let splits = load_splits(data, None, hub, observer)?;
            let other = scored_items(others, None, hub, observer)?;
            let served = check(&Arch::for_data(self.model, &splits.train))?;
            let limit = limit(splits.train.len());
            let ck = train_and_save(self, &splits.train, limit, save_to, device, observer)
                .context_with(|| format!("training the model saved to {}", save_to.display()))?;
            return Ok(Evaluation {
                ck,
                splits,
                others: other,
                served,
                foreign_labels: None,
            });
        };
        let ck = checkpoint::open_ensemble_with(
            std::slice::from_ref(c),
            &self.checkpoint_options,
            hub,
            device,
            observer,
        )
        .context_with(|| format!("loading the checkpoint {c}"))?;
        let served = check(&ck.config.arch)?;
        let pre = ck.config.preprocess;
        let (source, loaded) = load_named(data, pre.as_ref(), hub, observer)?;
        let mut splits = loaded
            .splits(&source)
            .context_with(|| format!("loading the data {data}"))?;
        let foreign_labels = match align(&ck.config.classes, &loaded.pool.classes) {
            Alignment::Same => None,
            Alignment::Renamed(map) => {
                let n = ck.config.classes.len();
                splits.train = splits.train.relabeled(&map, n)?;
                splits.test = splits.test.relabeled(&map, n)?;
                None
            }
            Alignment::Foreign(why) if splits.train.classes() > ck.config.classes.len() => {
                return Err(Error::config(
                    "checkpoint",
                    format!(
                        "{data}: {why}; it also has more classes ({}) than the model ({})",
                        splits.train.classes(),
                        ck.config.classes.len()
                    ),
                ));
            }
            Alignment::Foreign(why) => Some(format!("{data}: {why}")),
        };
        let other = scored_items(others, pre.as_ref(), hub, observer)?;
        // `data`'s labels are scored against the model's classes; the others (OOD data) only
        // need its item shape, which their evaluation checks.
        for split in [&splits.train, &splits.test] {
            check_fits(&ck, c, split).context_with(|| format!("evaluating on {data}"))?;
        }
        Ok(Evaluation {
            ck,
            splits,
            others: other,
            served,
            foreign_labels,
        })
    }
}

/// What [`ModelSource::model_and_data`] read.
pub struct Evaluation {
    /// The model.
    pub ck: Checkpoint,
    /// The data it is evaluated on, labels in the model's class order.
    pub splits: Splits,
    /// The items of each other data set.
    pub others: Vec<Dataset>,
    /// The scorers as the model serves them.
    pub served: Served,
    /// Why the data's labels are not the model's classes, when their names are not among
    /// the model's (digits against letters): accuracy or calibration against them would
    /// measure nothing.
    pub foreign_labels: Option<String>,
}

/// How a data set's class names line up with a model's.
#[derive(Debug, Clone, PartialEq)]
enum Alignment {
    /// The same names in the same places (the data may hold fewer classes).
    Same,
    /// Every data class is a model class: data class `k` is model class `map[k]`.
    Renamed(Vec<u32>),
    /// Some data class is not a model class: why, naming both lists.
    Foreign(String),
}

/// Lines `data`'s class names up with `model`'s. Data whose names are only their indices
/// (`0`, `1`, ...: a source that names no class) are taken by position, as before names
/// were compared; a model that names two classes alike cannot be matched by name.
fn align(model: &[String], data: &[String]) -> Alignment {
    let unnamed = data.iter().enumerate().all(|(k, d)| *d == k.to_string());
    if data.len() <= model.len() && (unnamed || data.iter().zip(model).all(|(d, m)| d == m)) {
        return Alignment::Same;
    }
    let distinct: std::collections::HashSet<&String> = model.iter().collect();
    if distinct.len() < model.len() {
        return Alignment::Foreign(format!(
            "the model names two classes alike, so its classes {} cannot be matched to the \
             data's {} by name",
            shown(model),
            shown(data)
        ));
    }
    let map: Option<Vec<u32>> = data
        .iter()
        .map(|d| model.iter().position(|m| m == d).map(|k| k as u32))
        .collect();
    match map {
        Some(map) => Alignment::Renamed(map),
        None => Alignment::Foreign(format!(
            "its classes {} are not among the model's classes {}; label the data with the \
             model's class names, or name the model's classes (a checkpoint's config.json \
             `classes`, a timm repository's `label_names`)",
            shown(data),
            shown(model)
        )),
    }
}

/// Up to six names of `names`, with the count when there are more.
fn shown(names: &[String]) -> String {
    let head: Vec<&str> = names.iter().take(6).map(String::as_str).collect();
    match names.len() {
        n if n > 6 => format!("[{}, ... ({n} in all)]", head.join(", ")),
        _ => format!("[{}]", head.join(", ")),
    }
}

/// The items of each data set of `names` an evaluation scores without reading their labels
/// (see [`ModelSource::model_and_data`]): the test split where there is one, else every item.
fn scored_items(
    names: &[&str],
    pre: Option<&crate::data::image::Preprocess>,
    hub: &Hub,
    observer: &mut dyn Observer,
) -> Result<Vec<Dataset>> {
    names
        .iter()
        .map(|name| {
            let (_, loaded) = crate::data::source::load_named(name, pre, hub, observer)?;
            loaded
                .test
                .as_ref()
                .unwrap_or(&loaded.pool)
                .dataset()
                .context_with(|| format!("loading the data {name}"))
        })
        .collect()
}

/// Scorers as a model serves them ([`served_scorers`]).
pub type Served = Vec<Arc<dyn Scorer>>;

/// The scorers as a model of `arch` serves them: a model without autograd through its network
/// (an ONNX model, known by its features and last layer) takes the gradient scorers over that
/// layer (`<name>@last`, [`alkit_acquisition::AtLastLayer`]); any other keeps them as they are.
pub fn served_scorers(arch: &Arch, scorers: &[Arc<dyn Scorer>]) -> Served {
    let all = alkit_acquisition::GradLayers::All;
    let autograd = arch.capabilities().autograd;
    scorers
        .iter()
        .map(|s| -> Arc<dyn Scorer> {
            let whole = s.needs().grads.is_some_and(|g| g.layers == all);
            match alkit_acquisition::AtLastLayer::new(s.clone()) {
                Some(last) if whole && !autograd => Arc::new(last),
                _ => s.clone(),
            }
        })
        .collect()
}

/// Checks that the checkpoint `name` takes `data`'s items and has a class for each of its
/// labels (a model of 5 classes evaluated on data of 12 is refused, not indexed past its
/// outputs).
pub fn check_fits(ck: &Checkpoint, name: &str, data: &Dataset) -> Result<()> {
    if ck.config.item_shape != data.item_shape() {
        return Err(Error::config(
            "checkpoint",
            format!(
                "{name} expects items {:?}, the data has {:?}",
                ck.config.item_shape,
                data.item_shape()
            ),
        ));
    }
    if data.classes() > ck.model.classes() {
        return Err(Error::config(
            "checkpoint",
            format!(
                "{name} has {} classes, the data {}: its labels would point past the model's outputs",
                ck.model.classes(),
                data.classes()
            ),
        ));
    }
    Ok(())
}

/// The training statistics the `scorers` read, if any does ([`alkit_acquisition::Needs::reference`]):
/// the features and labels of `train_raw[indices]` (the items the model was trained on, read
/// as stored from the source `data`) through the checkpoint's model, normalised with its
/// statistics, in one batched pass. With a checkpoint, the whole split and
/// [`ModelSource::stats_cache`], the features come from (or go to) the cache. `None` when no
/// scorer asks, so nothing is computed for nothing.
#[allow(clippy::too_many_arguments)]
pub fn training_reference(
    source: &ModelSource,
    ck: &Checkpoint,
    data: &str,
    train_raw: &Dataset,
    indices: &[usize],
    scorers: &[Arc<dyn Scorer>],
    hub: &Hub,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<Option<Arc<alkit_acquisition::Reference>>> {
    if !scorers.iter().any(|s| s.needs().reference) {
        return Ok(None);
    }
    if indices.is_empty() {
        return Err(Error::config(
            "data",
            "the train split holds no item to fit the detectors' statistics on",
        ));
    }
    let batch = crate::predict::default_batch(ck.config.item_shape.iter().product());
    let what = || "the training split's features (the detectors' statistics)";
    let whole =
        indices.len() == train_raw.len() && indices.iter().enumerate().all(|(i, &j)| i == j);
    let cache = match (&source.checkpoint, &source.stats_cache) {
        (Some(c), Some(dir))
            if whole && source.checkpoint_options == crate::checkpoint::OpenOptions::default() =>
        {
            Some((c, dir))
        }
        _ => None,
    };
    let reference = match cache {
        Some((c, dir)) => {
            let job = super::embed::EmbedJob {
                backbone: c.clone(),
                data: data.to_string(),
                batch: Some(batch),
                chunk: 16384,
            };
            let file = super::embed::cached(&job, dir, hub, device, observer).context_with(what)?;
            let (_, loaded) =
                crate::data::source::load_named(&file.path.to_string_lossy(), None, hub, observer)
                    .context_with(what)?;
            let pool = loaded.pool;
            if pool.len() != train_raw.len() || pool.item_shape != [file.dim] {
                return Err(Error::state(
                    &file.path,
                    format!(
                        "the cached features hold {} items of {:?}, the train split {} items",
                        pool.len(),
                        pool.item_shape,
                        train_raw.len()
                    ),
                ));
            }
            // The last layer, from one item through the model.
            let len = train_raw.item_len();
            let one = Dataset::new(
                train_raw.features()[..len].to_vec(),
                train_raw.labels()[..1].to_vec(),
                train_raw.item_shape().to_vec(),
                train_raw.classes(),
            )?;
            let one = ck.config.normalizer.apply(&one)?;
            let layer =
                crate::predict::features_of(ck.model.as_ref(), &one, &[0], 1, device, observer)?;
            let features = alkit_acquisition::Features::new(
                pool.x,
                train_raw.len(),
                file.dim,
                layer.weight().to_vec(),
                layer.bias().to_vec(),
            )?;
            let labels = train_raw.labels().iter().map(|&l| l as usize).collect();
            alkit_acquisition::Reference::new(features, labels)?
        }
        None => {
            let train = ck.config.normalizer.apply(train_raw)?;
            crate::predict::reference_of(
                ck.model.as_ref(),
                &train,
                indices,
                batch,
                device,
                observer,
            )
            .context_with(what)?
        }
    };
    Ok(Some(Arc::new(reference)))
}

/// The scoring context of a checkpoint's model: gradients through its parameters,
/// perturbation scorers through its architecture (inference batch
/// [`crate::predict::default_batch`] of its items).
pub fn scoring<'a>(ck: &'a Checkpoint, device: &'a Device) -> Scoring<'a> {
    Scoring {
        model: ck.model.as_ref(),
        params: Some(&ck.params),
        builder: Some(&ck.config.arch),
        input_std: &ck.config.normalizer.std,
        batch: crate::predict::default_batch(ck.config.item_shape.iter().product()),
        device,
        reference: None,
    }
}

#[cfg(test)]
mod tests {
    use super::{align, Alignment};

    fn names(s: &str) -> Vec<String> {
        s.split(',').map(String::from).collect()
    }

    #[test]
    fn data_labels_follow_the_models_class_names() {
        let model = names("ant,bee,cat,dog");
        assert_eq!(align(&model, &names("ant,bee")), Alignment::Same);
        // Unnamed data (its names are its indices) are taken by position.
        assert_eq!(align(&model, &names("0,1,2")), Alignment::Same);
        assert!(matches!(
            align(&names("crane,crane,dog"), &names("dog")),
            Alignment::Foreign(_)
        ));
        assert_eq!(
            align(&model, &names("cat,ant")),
            Alignment::Renamed(vec![2, 0])
        );
        let Alignment::Foreign(why) = align(&names("0,1,2,3,4,5,6,7,8,9"), &names("a,b,c")) else {
            panic!("letters passed for digits");
        };
        assert!(
            why.contains("[a, b, c]") && why.contains("... (10 in all)"),
            "{why}"
        );
    }
}
