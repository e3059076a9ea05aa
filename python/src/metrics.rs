//! Evaluating scores on their own: OOD detection, calibration with temperature scaling, and
//! split conformal prediction sets, all from [`alkit::metrics`] and the acquisition crate
//! with the conventions stated there (scikit-learn's AUROC and average precision, OpenOOD's
//! FPR@95, 15-bin ECE).

use crate::arrays;
use crate::errors::{PyAlkitError, PyAlkitResult};
use alkit::acquisition::{check_draws, ApsForm, ClassConformal, Conformal, ConformalScore, Probs};
use alkit::error::{Error, Result};
use alkit::metrics;
use numpy::{PyArray2, PyReadonlyArray1, PyReadonlyArray2};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// AUROC, AUPR-in, AUPR-out and FPR@95 of scores of in-distribution and OOD items (higher
/// = more likely OOD).
#[pyfunction]
pub fn ood_metrics<'py>(
    py: Python<'py>,
    in_scores: PyReadonlyArray1<'py, f32>,
    out_scores: PyReadonlyArray1<'py, f32>,
) -> PyAlkitResult<Bound<'py, PyDict>> {
    let a = arrays::values(&in_scores, "in-distribution scores")?;
    let b = arrays::values(&out_scores, "OOD scores")?;
    let m = py.detach(move || metrics::ood_metrics(&a, &b))?;
    let d = PyDict::new(py);
    d.set_item("auroc", m.auroc)?;
    d.set_item("aupr_in", m.aupr_in)?;
    d.set_item("aupr_out", m.aupr_out)?;
    d.set_item("fpr95", m.fpr95)?;
    Ok(d)
}

/// Probabilities `(n, c)` and their labels, checked against each other.
fn probs_labels(
    probs: &PyReadonlyArray2<'_, f32>,
    labels: &PyReadonlyArray1<'_, i64>,
) -> Result<(Probs, Vec<usize>)> {
    let (p, n, c) = arrays::matrix(probs, "probs")?;
    let y = arrays::labels(labels, "labels", Some(c))?;
    if y.len() != n {
        return Err(Error::config(
            "labels",
            format!("{} labels for {n} rows of probabilities", y.len()),
        ));
    }
    Ok((Probs::new(p, n, c)?, y))
}

/// Accuracy, ECE, MCE, NLL and Brier of probabilities `(n, c)` with their labels, and per
/// scorer the rAULC and the misclassification AUROC of its scores.
#[pyfunction]
#[pyo3(signature = (probs, labels, scores=None))]
pub fn calibration<'py>(
    py: Python<'py>,
    probs: PyReadonlyArray2<'py, f32>,
    labels: PyReadonlyArray1<'py, i64>,
    scores: Option<Vec<(String, PyReadonlyArray1<'py, f32>)>>,
) -> PyAlkitResult<Bound<'py, PyDict>> {
    let (p, y) = probs_labels(&probs, &labels)?;
    let scores: Vec<(String, Vec<f32>)> = scores
        .unwrap_or_default()
        .iter()
        .map(|(name, s)| Ok((name.clone(), arrays::values(s, "scores")?)))
        .collect::<Result<_>>()?;
    // rAULC and the misclassification AUROC need right and wrong items both: with every item
    // right (or every one wrong) they are undefined, reported as None, not as an error that
    // would hide the other figures.
    type Figures = ([f64; 5], Vec<(String, Option<f64>, Option<f64>)>);
    let (figures, per) = py.detach(move || -> Result<Figures> {
        let y: Vec<u32> = y.iter().map(|&v| v as u32).collect();
        let metrics::ProbabilityMetrics {
            correct,
            accuracy,
            ece,
            mce,
            nll,
            brier,
            ..
        } = metrics::probability_metrics(&p, &y)?;
        let wrong: Vec<bool> = correct.iter().map(|k| !k).collect();
        let per = scores
            .into_iter()
            .map(|(name, s)| {
                if s.len() != correct.len() {
                    return Err(Error::config(
                        "scores",
                        format!(
                            "`{name}` has {} scores for {} items",
                            s.len(),
                            correct.len()
                        ),
                    ));
                }
                let defined = correct.contains(&true) && correct.contains(&false);
                if !defined {
                    return Ok((name, None, None));
                }
                let raulc = metrics::raulc(&s, &correct)?;
                let auroc = metrics::auroc(&s, &wrong)?;
                Ok((name, Some(raulc), Some(auroc)))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(([accuracy, ece, mce, nll, brier], per))
    })?;
    let d = PyDict::new(py);
    for (k, v) in ["accuracy", "ece", "mce", "nll", "brier"]
        .iter()
        .zip(figures)
    {
        d.set_item(k, v)?;
    }
    let s = PyDict::new(py);
    for (name, raulc, auroc) in per {
        let row = PyDict::new(py);
        row.set_item("raulc", raulc)?;
        row.set_item("misclassification_auroc", auroc)?;
        s.set_item(name, row)?;
    }
    d.set_item("scorers", s)?;
    Ok(d)
}

/// The temperature `T > 0` minimising the NLL of `softmax(logits / T)` for the labels.
#[pyfunction]
pub fn fit_temperature(
    py: Python<'_>,
    logits: PyReadonlyArray2<'_, f32>,
    labels: PyReadonlyArray1<'_, i64>,
) -> PyAlkitResult<f64> {
    let (z, n, c) = arrays::matrix(&logits, "logits")?;
    let y = arrays::labels(&labels, "labels", Some(c))?;
    if y.len() != n {
        return Err(Error::config(
            "labels",
            format!("{} labels for {n} rows of logits", y.len()),
        )
        .into());
    }
    let y: Vec<u32> = y.into_iter().map(|v| v as u32).collect();
    py.detach(move || metrics::fit_temperature(&z, c, &y))
        .map_err(PyAlkitError::from)
}

/// Platt scaling of a binary score: `(slope, intercept)` with `P(positive | s) =
/// sigmoid(slope s + intercept)`, fitted to held-out `scores` and whether each is `positive`.
#[pyfunction]
pub fn fit_platt(
    py: Python<'_>,
    scores: PyReadonlyArray1<'_, f64>,
    positive: PyReadonlyArray1<'_, bool>,
) -> PyAlkitResult<(f64, f64)> {
    let s = arrays::values(&scores, "scores")?;
    let y = arrays::values(&positive, "positive")?;
    let p = py.detach(move || metrics::Platt::fit(&s, &y))?;
    Ok((p.slope, p.intercept))
}

/// The conformal score named `name` (`lac`, `aps`, `raps`, with `-randomized` or
/// `-inclusive` after the other forms of APS and RAPS).
fn conformal_score(name: &str, raps_lambda: f32, raps_k_reg: usize) -> Result<ConformalScore> {
    let (base, form) = match name.split_once('-') {
        None => (name, ApsForm::Romano),
        Some((b, "randomized")) => (b, ApsForm::Randomized),
        Some((b, "inclusive")) => (b, ApsForm::Inclusive),
        Some(_) => ("", ApsForm::Romano),
    };
    match base {
        "lac" if name == "lac" => Ok(ConformalScore::Lac),
        "aps" => Ok(ConformalScore::Aps { form }),
        "raps" if raps_lambda.is_finite() && raps_lambda >= 0.0 => Ok(ConformalScore::Raps {
            lambda: raps_lambda,
            k_reg: raps_k_reg,
            form,
        }),
        "raps" => Err(Error::config("raps_lambda", "must be a finite number >= 0")),
        _ => Err(Error::config(
            "score",
            format!(
                "unknown conformal score `{name}`; expected lac, aps or raps, the latter two \
                 with -randomized or -inclusive for their other forms"
            ),
        )),
    }
}

/// Split conformal prediction: the threshold calibrated on `cal_probs` with `cal_labels` at
/// miscoverage `alpha`, and the sets of `probs` as a boolean mask `(n, c)`. The randomised
/// forms take one uniform draw per item: `cal_draws (n_cal,)` and `draws (n,)` when given,
/// else from `seed`'s stream (calibration items first).
#[pyfunction]
#[pyo3(signature = (
    cal_probs, cal_labels, probs, alpha, *, score="aps", raps_lambda=0.01, raps_k_reg=5,
    seed=0, cal_draws=None, draws=None, mondrian=false
))]
#[allow(clippy::too_many_arguments)]
pub fn conformal<'py>(
    py: Python<'py>,
    cal_probs: PyReadonlyArray2<'py, f32>,
    cal_labels: PyReadonlyArray1<'py, i64>,
    probs: PyReadonlyArray2<'py, f32>,
    alpha: f64,
    score: &str,
    raps_lambda: f32,
    raps_k_reg: usize,
    seed: u64,
    cal_draws: Option<PyReadonlyArray1<'py, f64>>,
    draws: Option<PyReadonlyArray1<'py, f64>>,
    mondrian: bool,
) -> PyAlkitResult<(Vec<f64>, Bound<'py, PyArray2<bool>>)> {
    let score = conformal_score(score, raps_lambda, raps_k_reg)?;
    let given = |a: &Option<PyReadonlyArray1<'py, f64>>, name| {
        a.as_ref().map(|a| arrays::values(a, name)).transpose()
    };
    let (cal_u, test_u) = (given(&cal_draws, "cal_draws")?, given(&draws, "draws")?);
    if (cal_u.is_some() || test_u.is_some()) && !score.randomized() {
        return Err(Error::config(
            "draws",
            format!(
                "`{}` draws nothing; draws are for the randomised forms",
                score.name()
            ),
        )
        .into());
    }
    let (cal, y) = probs_labels(&cal_probs, &cal_labels)?;
    let (p, n, c) = arrays::matrix(&probs, "probs")?;
    if c != cal.classes() {
        return Err(Error::config(
            "probs",
            format!(
                "{c} classes, where the calibration items have {}",
                cal.classes()
            ),
        )
        .into());
    }
    let p = Probs::new(p, n, c)?;
    let (threshold, mask) = py.detach(move || -> Result<(Vec<f64>, Vec<bool>)> {
        let (cal_u, test_u) = uniform_draws(score, seed, cal.n(), n, cal_u, test_u)?;
        let (thresholds, set): (Vec<f64>, Box<SetOf>) = if mondrian {
            let fitted = ClassConformal::calibrate(score, &cal, &y, alpha, &cal_u)?;
            (
                fitted.thresholds.clone(),
                Box::new(move |r, u| fitted.set(r, u)),
            )
        } else {
            let fitted = Conformal::calibrate(score, &cal, &y, alpha, &cal_u)?;
            (
                vec![fitted.threshold],
                Box::new(move |r, u| fitted.set(r, u)),
            )
        };
        let mut mask = vec![false; n * c];
        for (i, row) in p.rows().enumerate() {
            for k in set(row, test_u.get(i).copied().unwrap_or(0.0)) {
                mask[i * c + k] = true;
            }
        }
        Ok((thresholds, mask))
    })?;
    let mask = numpy::ndarray::Array2::from_shape_vec((n, c), mask)
        .map_err(|e| Error::config("probs", e.to_string()))?;
    Ok((threshold, numpy::IntoPyArray::into_pyarray(mask, py)))
}

/// A calibrated predictor's set of a probability row and its item's draw.
type SetOf = dyn Fn(&[f32], f64) -> Vec<usize>;

/// The randomised form's draws: those given, else `seed`'s stream (the `n_cal` calibration
/// items' first, then the `n` others'); none for the other scores.
fn uniform_draws(
    score: ConformalScore,
    seed: u64,
    n_cal: usize,
    n: usize,
    cal: Option<Vec<f64>>,
    test: Option<Vec<f64>>,
) -> Result<(Vec<f64>, Vec<f64>)> {
    if !score.randomized() {
        return Ok((Vec::new(), Vec::new()));
    }
    let mut rng = alkit::rng::stream(seed, alkit::rng::Purpose::Tool, 1);
    let mut draw =
        |k: usize| -> Vec<f64> { (0..k).map(|_| alkit::rng::uniform(&mut rng)).collect() };
    let cal = cal.unwrap_or_else(|| draw(n_cal));
    let test = test.unwrap_or_else(|| draw(n));
    check_draws(score, &test, n, "draws")?;
    Ok((cal, test))
}
