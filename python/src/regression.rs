//! Regression from arrays: the scores over Gaussian predictions (means and variances per
//! draw), every regression metric, and split-conformal intervals, from
//! [`alkit::metrics::regression`] and the acquisition crate with the conventions stated
//! there.

use crate::arrays;
use crate::errors::PyAlkitResult;
use crate::scoring::kinds;
use alkit::acquisition::{
    ConformalIntervals, Evidence, Gaussian, IntervalScore, Prediction, SampleRequest, Thresholds,
};
use alkit::error::{Error, Result};
use alkit::metrics::regression::{regression_metrics, DEFAULT_LEVELS};
use alkit::strategies::{per_item_scorers, ScorerSettings};
use numpy::{PyArray1, PyReadonlyArray1, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// Means and variances of the same shape: `(n,)` one draw of one output, `(m, n)` `m` draws
/// of one output, `(m, n, k)` `m` draws of `k` outputs.
fn gaussian(
    means: &PyReadonlyArrayDyn<'_, f32>,
    variances: &PyReadonlyArrayDyn<'_, f32>,
) -> Result<Gaussian> {
    let shape = means.shape().to_vec();
    if variances.shape() != shape.as_slice() {
        return Err(Error::config(
            "variances",
            format!(
                "shape {:?}, where the means have {shape:?}: give one variance per mean",
                variances.shape()
            ),
        ));
    }
    let (m, n, k) = match shape[..] {
        [n] => (1, n, 1),
        [m, n] => (m, n, 1),
        [m, n, k] => (m, n, k),
        _ => {
            return Err(Error::config(
                "means",
                format!("shape {shape:?}; expected (n,), (draws, n) or (draws, n, outputs)"),
            ))
        }
    };
    let mu = arrays::values(means, "means")?;
    let var = arrays::values(variances, "variances")?;
    Ok(Gaussian::new(mu, var, m, n, k)?)
}

/// One score per item for each regression scorer (`variance`, `epistemic`, `aleatoric`,
/// `gauss-mi`), from Gaussian predictions as given: `(name, scores)` in the order asked.
#[pyfunction]
pub fn score_gaussian<'py>(
    py: Python<'py>,
    scorers: Vec<String>,
    means: PyReadonlyArrayDyn<'py, f32>,
    variances: PyReadonlyArrayDyn<'py, f32>,
) -> PyAlkitResult<Vec<(String, Bound<'py, PyArray1<f32>>)>> {
    let g = gaussian(&means, &variances)?;
    let scored = py.detach(move || -> Result<Vec<(String, Vec<f32>)>> {
        // The draws are taken as given, whatever made them (an ensemble, MC dropout).
        let settings = ScorerSettings {
            members: true,
            ..ScorerSettings::default()
        };
        let scorers = per_item_scorers(&kinds(&scorers)?, &settings)?;
        let ev = Evidence::from_gaussian(g);
        scorers
            .iter()
            .map(|s| {
                if s.needs().gaussian != Some(SampleRequest::Members) {
                    return Err(Error::config(
                        "scorers",
                        format!(
                            "`{}` scores a classifier's predictions; means and variances are \
                             scored by variance, epistemic, aleatoric and gauss-mi",
                            s.name()
                        ),
                    ));
                }
                Ok((s.name().to_string(), s.score(&ev)?))
            })
            .collect()
    })?;
    Ok(scored
        .into_iter()
        .map(|(name, v)| (name, PyArray1::from_vec(py, v)))
        .collect())
}

/// Targets, means and standard deviations `(n,)` each, as `f64`.
fn columns(
    y: &PyReadonlyArray1<'_, f64>,
    mean: &PyReadonlyArray1<'_, f64>,
    std: &PyReadonlyArray1<'_, f64>,
) -> Result<(Vec<f64>, Vec<f64>, Vec<f64>)> {
    Ok((
        arrays::values(y, "y")?,
        arrays::values(mean, "mean")?,
        arrays::values(std, "std")?,
    ))
}

/// RMSE, MAE, NLL, CRPS, central-interval coverage and width at `levels`, the quantile
/// calibration error, Spearman's rank correlation of the standard deviation with the error,
/// and the sparsification curve with its AUSE.
#[pyfunction]
#[pyo3(signature = (y, mean, std, levels=None))]
pub fn regression<'py>(
    py: Python<'py>,
    y: PyReadonlyArray1<'py, f64>,
    mean: PyReadonlyArray1<'py, f64>,
    std: PyReadonlyArray1<'py, f64>,
    levels: Option<Vec<f64>>,
) -> PyAlkitResult<Bound<'py, PyDict>> {
    let (y, mean, std) = columns(&y, &mean, &std)?;
    let levels = levels.unwrap_or_else(|| DEFAULT_LEVELS.to_vec());
    let m = py.detach(move || regression_metrics(&y, &mean, &std, &levels))?;
    let d = PyDict::new(py);
    d.set_item("n", m.n)?;
    d.set_item("rmse", m.rmse)?;
    d.set_item("mae", m.mae)?;
    d.set_item("nll", m.nll)?;
    d.set_item("crps", m.crps)?;
    let levels: Vec<f64> = m.intervals.iter().map(|i| i.level).collect();
    d.set_item("levels", levels)?;
    d.set_item(
        "coverage",
        m.intervals.iter().map(|i| i.coverage).collect::<Vec<_>>(),
    )?;
    d.set_item(
        "width",
        m.intervals.iter().map(|i| i.width).collect::<Vec<_>>(),
    )?;
    d.set_item("quantile_calibration_error", m.quantile_calibration_error)?;
    d.set_item("spearman", m.spearman)?;
    match m.sparsification {
        Some(s) => {
            d.set_item("ause", s.ause)?;
            d.set_item("sparsification", s.model)?;
            d.set_item("sparsification_oracle", s.oracle)?;
        }
        None => d.set_item("ause", py.None())?,
    }
    Ok(d)
}

/// Predictions of one split: a mean and a standard deviation each, or a quantile head's
/// bounds, as the score reads them.
fn predictions(
    score: IntervalScore,
    center: &PyReadonlyArray1<'_, f64>,
    spread: &PyReadonlyArray1<'_, f64>,
    names: (&'static str, &'static str),
) -> Result<Vec<Prediction>> {
    let a = arrays::values(center, names.0)?;
    let b = arrays::values(spread, names.1)?;
    if a.len() != b.len() {
        return Err(Error::config(
            names.1,
            format!("{} values, where `{}` has {}", b.len(), names.0, a.len()),
        ));
    }
    Ok(a.into_iter()
        .zip(b)
        .map(|(a, b)| match score {
            IntervalScore::Cqr => Prediction::Quantiles { lower: a, upper: b },
            _ => Prediction::Gaussian { mean: a, std: b },
        })
        .collect())
}

fn interval_score(name: &str) -> Result<IntervalScore> {
    [
        IntervalScore::Absolute,
        IntervalScore::Normalized,
        IntervalScore::Cqr,
    ]
    .into_iter()
    .find(|s| s.name() == name)
    .ok_or_else(|| {
        Error::config(
            "score",
            format!("unknown interval score `{name}`; expected absolute, normalized or cqr"),
        )
    })
}

fn groups(g: Option<PyReadonlyArray1<'_, i64>>, name: &'static str) -> Result<Option<Vec<u32>>> {
    g.map(|g| {
        arrays::values(&g, name)?
            .into_iter()
            .map(|v| {
                u32::try_from(v).map_err(|_| {
                    Error::config(name, format!("group {v}; groups are integers from 0"))
                })
            })
            .collect()
    })
    .transpose()
}

/// What [`conformal_intervals`] returns: the thresholds, the lower and the upper bounds.
type Intervals<'py> = (
    Bound<'py, PyDict>,
    Bound<'py, PyArray1<f64>>,
    Bound<'py, PyArray1<f64>>,
);

/// Split-conformal intervals at miscoverage `alpha`: calibrated on `cal_y` with the
/// calibration items' `cal_a`, `cal_b` (means and standard deviations; a quantile head's
/// lower and upper bounds for `cqr`), then the intervals of `a`, `b`; with groups, one
/// threshold per group (Mondrian; a group the calibration lacks gets infinite intervals).
/// Returns the thresholds (`{group: q}`, key `None` without groups) and the bounds.
#[pyfunction]
#[pyo3(signature = (cal_y, cal_a, cal_b, a, b, alpha, *, score="absolute", cal_groups=None, groups=None))]
#[allow(clippy::too_many_arguments)]
pub fn conformal_intervals<'py>(
    py: Python<'py>,
    cal_y: PyReadonlyArray1<'py, f64>,
    cal_a: PyReadonlyArray1<'py, f64>,
    cal_b: PyReadonlyArray1<'py, f64>,
    a: PyReadonlyArray1<'py, f64>,
    b: PyReadonlyArray1<'py, f64>,
    alpha: f64,
    score: &str,
    cal_groups: Option<PyReadonlyArray1<'py, i64>>,
    groups: Option<PyReadonlyArray1<'py, i64>>,
) -> PyAlkitResult<Intervals<'py>> {
    let score = interval_score(score)?;
    let cal = predictions(score, &cal_a, &cal_b, ("cal_a", "cal_b"))?;
    let test = predictions(score, &a, &b, ("a", "b"))?;
    let y = arrays::values(&cal_y, "cal_y")?;
    let (cal_g, test_g) = (
        self::groups(cal_groups, "cal_groups")?,
        self::groups(groups, "groups")?,
    );
    if cal_g.is_some() != test_g.is_some() || test_g.as_ref().is_some_and(|g| g.len() != test.len())
    {
        return Err(Error::config(
            "groups",
            "Mondrian intervals need the groups of the calibration items and of the items, one each",
        )
        .into());
    }
    let c = ConformalIntervals::calibrate(score, &cal, &y, alpha, cal_g.as_deref())?;
    let (mut lo, mut hi) = (
        Vec::with_capacity(test.len()),
        Vec::with_capacity(test.len()),
    );
    for (i, p) in test.iter().enumerate() {
        let (l, h) = c.interval(p, test_g.as_ref().map(|g| g[i]))?;
        lo.push(l);
        hi.push(h);
    }
    let q = PyDict::new(py);
    match &c.thresholds {
        Thresholds::One(t) => q.set_item(py.None(), *t)?,
        Thresholds::Groups(by) => {
            for (g, t) in by {
                q.set_item(*g, *t)?;
            }
        }
    }
    Ok((q, PyArray1::from_vec(py, lo), PyArray1::from_vec(py, hi)))
}
