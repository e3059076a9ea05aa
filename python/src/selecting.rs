//! Choosing a batch: from scores ([`select`]: top-k, random and the stochastic power, softmax
//! and soft-rank modes) and jointly from the items' evidence ([`select_batch`]: BatchBALD over
//! draws, BADGE, core-set, TypiClust and ProbCover over features, and the regression rules
//! MaxDiag, MaxDet, BAIT, MaxDist, k-means++ and LCMD over kernel features), through the
//! registry.
//! Every random choice draws from alkit's stream for `(seed, selection, 0)`, so the same seed
//! picks the same items on every machine.

use crate::arrays::{self, Draws, Inputs, Layer, Layout};
use crate::errors::{PyAlkitError, PyAlkitResult};
use crate::settings::{self, Reads};
use alkit::acquisition::{
    BatchBald, BatchSelector, Evidence, KernelFeatures, SampleScore, SampleScorer,
};
use alkit::acquisition::{Scorer, Selection};
use alkit::error::{Error, Result};
use alkit::jobs::shard::{joint_pick, Candidate, Joint};
use alkit::rng::{stream, Purpose};
use alkit::round::Pick;
use alkit::strategies::{ScorerSettings, SelectKind, StrategyKind};
use numpy::{
    PyArray1, PyReadonlyArray1, PyReadonlyArray2, PyReadonlyArray3, PyUntypedArrayMethods,
};
use pyo3::prelude::*;

/// `k` positions chosen from `scores` by `method` with inverse temperature `beta`, in the
/// order chosen.
#[pyfunction]
#[pyo3(signature = (scores, k, *, method="top-k", beta=1.0, seed=0))]
pub fn select<'py>(
    py: Python<'py>,
    scores: PyReadonlyArray1<'py, f32>,
    k: usize,
    method: &str,
    beta: f32,
    seed: u64,
) -> PyAlkitResult<Bound<'py, PyArray1<usize>>> {
    let selection = match method {
        "random" => Selection::Random,
        other => {
            let kind: SelectKind = other
                .parse()
                .map_err(|e: String| Error::config("method", format!("{e}, random")))?;
            if !beta.is_finite() {
                return Err(Error::config("beta", "must be a finite number").into());
            }
            kind.selection(beta).ok_or_else(|| {
                PyAlkitError::from(Error::config(
                    "method",
                    "batchbald chooses from draws, not scores: use select_batch",
                ))
            })?
        }
    };
    let scores = arrays::values(&scores, "scores")?;
    let picks = py.detach(move || {
        let mut rng = stream(seed, Purpose::Select, 0);
        selection.select(&scores, k, &mut rng)
    })?;
    Ok(PyArray1::from_vec(py, picks))
}

/// The pool's kernel features `(n, p)` and the labeled items' `(m, p)` (none: `m = 0`), for
/// the regression rules.
fn kernel_features(
    (pool, n, p): (Vec<f32>, usize, usize),
    labeled: Option<&PyReadonlyArray2<'_, f32>>,
) -> Result<KernelFeatures> {
    let labeled = match labeled {
        Some(l) => {
            let (rows, m, q) = arrays::matrix(l, "labeled")?;
            if q != p {
                return Err(Error::config(
                    "labeled",
                    format!(
                        "{m} rows of {q} values, where the features have {p}: give the \
                             labeled items' features in the same space"
                    ),
                ));
            }
            rows
        }
        None => Vec::new(),
    };
    debug_assert_eq!(pool.len(), n * p);
    Ok(KernelFeatures::new(pool, labeled, p)?)
}

/// `k` positions chosen jointly by the registry's batch selector `name` from the items'
/// draws or features, in the order chosen.
#[pyfunction]
#[pyo3(signature = (
    name, k, *, draws=None, layout="nct", features=None, weight=None, bias=None, classes=None,
    labeled=None, candidates=None, seed=0, settings=None, max_configs=None
))]
#[allow(clippy::too_many_arguments)]
pub fn select_batch<'py>(
    py: Python<'py>,
    name: &str,
    k: usize,
    draws: Option<PyReadonlyArray3<'py, f32>>,
    layout: &str,
    features: Option<PyReadonlyArray2<'py, f32>>,
    weight: Option<PyReadonlyArray2<'py, f32>>,
    bias: Option<PyReadonlyArray1<'py, f32>>,
    classes: Option<usize>,
    labeled: Option<PyReadonlyArray2<'py, f32>>,
    candidates: Option<usize>,
    seed: u64,
    settings: Option<&str>,
    max_configs: Option<usize>,
) -> PyAlkitResult<Bound<'py, PyArray1<usize>>> {
    let settings = ScorerSettings {
        // The draws are taken as given, whatever made them.
        members: true,
        ..settings::read(
            settings,
            Reads::Only(&[
                "probcover_delta",
                "kernel_transform",
                "kernel_mode",
                "kernel_sigma",
            ]),
            "when scoring or in a session (the selectors read the evidence as given; the \
             regression rules' features are the ones given, never a network's kernel or sketch)",
        )?
    };
    let selector = batch_selector(name, &settings, max_configs)?;
    let needs = selector.needs();
    if needs.kernel_features.is_some() {
        let pool = features
            .as_ref()
            .map(|f| arrays::matrix(f, "features"))
            .transpose()?
            .ok_or_else(|| {
                Error::config(
                    "features",
                    format!("`{name}` chooses from the items' kernel features: give them"),
                )
            })?;
        let f = kernel_features(pool, labeled.as_ref())?;
        let picks = py.detach(move || -> Result<Vec<usize>> {
            let mut rng = stream(seed, Purpose::Select, 0);
            Ok(selector.select(&Evidence::from_kernel_features(f), k, &mut rng)?)
        })?;
        return Ok(PyArray1::from_vec(py, picks));
    }
    let layout = Layout::parse(layout)?;
    let layer = Layer::read(weight.as_ref(), bias.as_ref(), classes.unwrap_or(1))?;
    if needs.features {
        check_layer(
            selector.as_ref(),
            &layer,
            features.is_some(),
            classes,
            settings.probcover_delta,
        )?;
    }
    check_candidates(name, k, candidates, needs.samples.is_some())?;
    // The labeled items: what core-set covers and TypiClust and ProbCover leave out. Their
    // labels play no part in a selection, so each is given class 0.
    let labeled = labeled
        .as_ref()
        .map(|l| arrays::matrix(l, "labeled"))
        .transpose()?;
    let reference = labeled
        .or_else(|| {
            (needs.reference)
                .then(|| features.as_ref().map(|f| (Vec::new(), 0, f.shape()[1])))
                .flatten()
        })
        .map(|rows| {
            let m = rows.1;
            (rows, vec![0; m])
        });
    let inputs = Inputs {
        probs: None,
        draws: draws.as_ref().map(|d| Draws::read(d, layout)).transpose()?,
        layer: features.is_some().then_some(layer),
        features: features
            .as_ref()
            .map(|f| arrays::matrix(f, "features"))
            .transpose()?,
        reference,
    };
    let picks = py.detach(move || -> Result<Vec<usize>> {
        let ev = inputs.evidence(None)?;
        match candidates {
            None => {
                let mut rng = stream(seed, Purpose::Select, 0);
                Ok(selector.select(&ev, k, &mut rng)?)
            }
            Some(m) => {
                let configs = max_configs.unwrap_or(BatchBald::DEFAULT_CONFIGS);
                among_best_bald(&ev, m, k, seed, configs)
            }
        }
    })?;
    Ok(PyArray1::from_vec(py, picks))
}

/// The registry's joint batch selector `name` under `settings` (BatchBALD with at most
/// `max_configs` joint configurations where given).
fn batch_selector(
    name: &str,
    settings: &ScorerSettings,
    max_configs: Option<usize>,
) -> Result<std::sync::Arc<dyn BatchSelector>> {
    let kind: StrategyKind = name.parse().map_err(|e: String| Error::config("name", e))?;
    let Pick::Batch(selector) = kind.build(settings) else {
        return Err(Error::config(
            "name",
            format!("`{name}` scores items one at a time: score them, then select from the scores"),
        ));
    };
    let Some(max) = max_configs else {
        return Ok(selector);
    };
    if name != "batchbald" || max == 0 || max > alkit::limits::MAX_SAMPLES {
        return Err(Error::config(
            "max_configs",
            format!(
                "BatchBALD's joint configurations, between 1 and {} (`{name}` has none)",
                alkit::limits::MAX_SAMPLES
            ),
        ));
    }
    Ok(std::sync::Arc::new(BatchBald {
        max_configs: max,
        ..BatchBald::members()
    }))
}

/// BALD's best `candidates`, for a selector over draws, must hold the batch of `k`.
fn check_candidates(name: &str, k: usize, candidates: Option<usize>, draws: bool) -> Result<()> {
    if candidates.is_some_and(|m| m < k) {
        return Err(Error::config(
            "candidates",
            format!(
                "{} candidates cannot hold a batch of {k}",
                candidates.unwrap_or(0)
            ),
        ));
    }
    if candidates.is_some() && !draws {
        return Err(Error::config(
            "candidates",
            format!("`{name}` chooses among every item; candidates by BALD are for draws"),
        ));
    }
    Ok(())
}

/// A feature selector needs the features, and a model's last layer unless it can choose cold
/// (from the items' own vectors); ProbCover's purity rule clusters into the class count.
fn check_layer(
    selector: &dyn BatchSelector,
    layer: &Layer,
    has_features: bool,
    classes: Option<usize>,
    delta: Option<f32>,
) -> Result<()> {
    let name = selector.name();
    if !has_features {
        return Err(Error::config(
            "features",
            format!("`{name}` chooses from the items' features: give them"),
        ));
    }
    if let Layer::Zero(_) = layer {
        if !selector.cold_start() {
            return Err(Error::config(
                "weight",
                format!("`{name}` reads the model's last layer: give its weight and bias"),
            ));
        }
        if name == "probcover" && delta.is_none() && classes.is_none() {
            return Err(Error::config(
                "classes",
                "probcover's radius comes from clustering into the class count: give the \
                 number of classes, or the radius (probcover_delta)",
            ));
        }
    }
    Ok(())
}

/// BatchBALD among the best `m` items by BALD, chosen as the command line chooses them
/// ([`alkit::jobs::shard::joint_pick`]): positions in the whole batch.
fn among_best_bald(
    ev: &Evidence,
    m: usize,
    k: usize,
    seed: u64,
    max_configs: usize,
) -> Result<Vec<usize>> {
    let bald = SampleScorer::members(SampleScore::Bald).score(ev)?;
    let samples = ev.samples("batchbald")?;
    let draws = samples.draws();
    let cands = bald
        .iter()
        .enumerate()
        .map(|(i, &key)| Candidate {
            index: i,
            key: f64::from(key),
            fields: Vec::new(),
            draws: draws.iter().flat_map(|d| d.row(i)).copied().collect(),
        })
        .collect();
    let joint = Joint {
        candidates: m,
        draws: draws.len(),
        classes: draws[0].classes(),
        seed,
    };
    Ok(joint_pick(cands, &joint, k, max_configs)?
        .into_iter()
        .map(|c| c.index)
        .collect())
}
