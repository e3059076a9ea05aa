//! Per-item scores: from the arrays a user's own model gives ([`score_arrays`]) and from a
//! checkpoint and a data source named by path ([`score_data`]). Both look scorers up in the
//! library's one registry ([`alkit::strategies`]), so a name means what it means on the
//! command line.

use crate::arrays::{self, Draws, Inputs, Layer, Layout};
use crate::errors::{PyAlkitResult, Signals};
use crate::settings::{self, Reads};
use alkit::error::{Error, Result};
use alkit::jobs::score::{ScoreJob, Split};
use alkit::strategies::{per_item_scorers, Layers, ScorerSettings, StrategyKind};
use candle_core::Device;
use numpy::{PyArray1, PyReadonlyArray1, PyReadonlyArray2, PyReadonlyArray3};
use pyo3::prelude::*;

/// The registry's strategies named `names`, refusing an unknown name with the list.
pub fn kinds(names: &[String]) -> Result<Vec<StrategyKind>> {
    if names.is_empty() {
        return Err(Error::config("scorers", "name at least one scorer"));
    }
    names
        .iter()
        .map(|n| n.parse().map_err(|e: String| Error::config("scorers", e)))
        .collect()
}

/// The settings scoring arrays reads: the scorers' own, not those of a model's evidence
/// (noise, draws, layers: the arrays are the evidence) or of selection.
const ARRAYS_READ: Reads = Reads::Only(&[
    "lambda",
    "knn_k",
    "vim_dim",
    "epig_targets",
    "hessian",
    "prior_precision",
]);

/// The settings scoring by path reads: all but selection's (the scores are the output).
const PATH_READS: Reads = Reads::AllBut(&["select", "beta", "probcover_delta"]);

/// The scorers that read features without a last layer: distances to the training features.
const FEATURES_ONLY: [&str; 2] = ["knn", "mahalanobis"];

/// One score per item for each scorer, computed from arrays: `(name, scores)` in the order
/// asked, each name as the registry prints it (`<name>@last` for a gradient score over the
/// given last layer).
#[pyfunction]
#[pyo3(signature = (
    scorers, *, probs=None, draws=None, layout="nct", features=None, weight=None, bias=None,
    train_features=None, train_labels=None, settings=None
))]
#[allow(clippy::too_many_arguments)]
pub fn score_arrays<'py>(
    py: Python<'py>,
    scorers: Vec<String>,
    probs: Option<PyReadonlyArray2<'py, f32>>,
    draws: Option<PyReadonlyArray3<'py, f32>>,
    layout: &str,
    features: Option<PyReadonlyArray2<'py, f32>>,
    weight: Option<PyReadonlyArray2<'py, f32>>,
    bias: Option<PyReadonlyArray1<'py, f32>>,
    train_features: Option<PyReadonlyArray2<'py, f32>>,
    train_labels: Option<PyReadonlyArray1<'py, i64>>,
    settings: Option<&str>,
) -> PyAlkitResult<Vec<(String, Bound<'py, PyArray1<f32>>)>> {
    let given = settings::read(
        settings,
        ARRAYS_READ,
        "when scoring a checkpoint on a data source",
    )?;
    let layout = Layout::parse(layout)?;
    // Without a last layer, features serve only the scores that compare them with the
    // training features by distance; under a zero layer of as many classes as the training
    // labels name (so that their class means exist), every other score would be a constant.
    let train_labels = train_labels
        .map(|y| arrays::labels(&y, "train_labels", Some(arrays::MAX_LABEL)))
        .transpose()?;
    let labels_classes = train_labels
        .as_ref()
        .and_then(|y| y.iter().max())
        .map_or(1, |m| m + 1);
    let layer = Layer::read(weight.as_ref(), bias.as_ref(), labels_classes)?;
    check_layer(features.is_some(), &layer, &scorers)?;
    let reference = reference(train_features, train_labels, &layer)?;
    let inputs = Inputs {
        probs: probs
            .as_ref()
            .map(|p| arrays::matrix(p, "probs"))
            .transpose()?,
        draws: draws.as_ref().map(|d| Draws::read(d, layout)).transpose()?,
        layer: features.is_some().then_some(layer),
        features: features
            .as_ref()
            .map(|f| arrays::matrix(f, "features"))
            .transpose()?,
        reference,
    };
    let settings = ScorerSettings {
        // Draws are taken as given, whatever made them (MC dropout, ensemble members).
        members: true,
        layers: if inputs.features.is_some() {
            Layers::Last
        } else {
            Layers::All
        },
        ..given
    };
    let scored = py.detach(move || -> Result<Vec<(String, Vec<f32>)>> {
        settings.validate()?;
        let scorers = per_item_scorers(&kinds(&scorers)?, &settings)?;
        let grads = scorers
            .iter()
            .filter_map(|s| s.needs().grads)
            .map(|g| g.expected)
            .reduce(|a, b| a || b);
        let ev = inputs.evidence(grads)?;
        scorers
            .iter()
            .map(|s| Ok((s.name().to_string(), s.score(&ev)?)))
            .collect()
    })?;
    Ok(scored
        .into_iter()
        .map(|(name, v)| (name, PyArray1::from_vec(py, v)))
        .collect())
}

/// A last layer is read over features, so it needs them; features without one serve only the
/// scores that compare them with the training features by distance ([`FEATURES_ONLY`]).
fn check_layer(features: bool, layer: &Layer, scorers: &[String]) -> Result<()> {
    match (features, layer) {
        (false, Layer::Given { .. }) => Err(Error::config(
            "weight",
            "a last layer is read over the features: give the features too",
        )),
        (true, Layer::Zero(_)) => match scorers
            .iter()
            .find(|s| !FEATURES_ONLY.contains(&s.as_str()))
        {
            Some(s) => Err(Error::config(
                "weight",
                format!(
                    "`{s}` reads the model's last layer over the features: give its weight \
                     and bias (without them, only {} score features)",
                    FEATURES_ONLY.join(" and ")
                ),
            )),
            None => Ok(()),
        },
        _ => Ok(()),
    }
}

/// The training items, as their features and labels together (labels below the layer's
/// classes), or none.
fn reference(
    features: Option<PyReadonlyArray2<'_, f32>>,
    labels: Option<Vec<usize>>,
    layer: &Layer,
) -> Result<Option<(arrays::Matrix, Vec<usize>)>> {
    match (features, labels) {
        (Some(f), Some(y)) => {
            arrays::check_below(&y, "train_labels", layer.classes())?;
            Ok(Some((arrays::matrix(&f, "train_features")?, y)))
        }
        (None, None) => Ok(None),
        _ => Err(Error::config(
            "train_features",
            "the training items are their features and their labels: give both",
        )),
    }
}

/// What [`score_data`] returns: positions, ids and `(name, scores)` per scorer.
type Table<'py> = (
    Bound<'py, PyArray1<usize>>,
    Vec<String>,
    Vec<(String, Bound<'py, PyArray1<f32>>)>,
);

/// Every item of a data source's split scored by a checkpoint (several: an ensemble), as the
/// command line's `score` scores it, kept in memory.
#[pyfunction]
#[pyo3(signature = (
    checkpoints, data, scorers, *, split="train", batch=None, seed=0, settings=None,
    onnx_features=None, onnx_config=None, input_mean=None, input_std=None
))]
#[allow(clippy::too_many_arguments)]
pub fn score_data<'py>(
    py: Python<'py>,
    checkpoints: Vec<String>,
    data: String,
    scorers: Vec<String>,
    split: &str,
    batch: Option<usize>,
    seed: u64,
    settings: Option<&str>,
    onnx_features: Option<String>,
    onnx_config: Option<String>,
    input_mean: Option<Vec<f32>>,
    input_std: Option<Vec<f32>>,
) -> PyAlkitResult<Table<'py>> {
    let split = match split {
        "train" => Split::Train,
        "test" => Split::Test,
        other => {
            return Err(Error::config(
                "split",
                format!("unknown split `{other}`; expected train or test"),
            )
            .into())
        }
    };
    if checkpoints.is_empty() {
        return Err(Error::config("checkpoint", "name at least one checkpoint").into());
    }
    let settings = settings::read(settings, PATH_READS, "when scoring arrays")?;
    let table = py.detach(move || -> Result<_> {
        let job = ScoreJob {
            checkpoints,
            checkpoint_options: alkit::checkpoint::OpenOptions {
                onnx_features,
                onnx_config: onnx_config.map(Into::into),
                input_mean,
                input_std,
            },
            data,
            split,
            scorers: kinds(&scorers)?,
            settings,
            top: None,
            candidates: None,
            batch,
            chunk: alkit::jobs::score::DEFAULT_CHUNK,
            seed,
            shard: None,
            out: Default::default(),
        };
        alkit::jobs::score::table(
            &job,
            &alkit::hub::Hub::from_env(),
            &Device::Cpu,
            &mut Signals,
        )
    })?;
    let cols = table
        .names
        .into_iter()
        .zip(table.cols)
        .map(|(name, v)| (name, PyArray1::from_vec(py, v)))
        .collect();
    Ok((PyArray1::from_vec(py, table.indices), table.ids, cols))
}

/// The registry: `(name, what it is, whether it scores items one at a time)` for every
/// strategy, in the order the command line lists them.
#[pyfunction]
pub fn registry() -> Vec<(&'static str, &'static str, bool)> {
    let settings = ScorerSettings::default();
    StrategyKind::all()
        .map(|k| (k.name(), k.about(), k.scorer(&settings).is_some()))
        .collect()
}
