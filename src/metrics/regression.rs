//! Regression: how good a model's Gaussian predictions `N(mu_i, sigma_i^2)` are against the
//! targets `y_i`, and how honest their uncertainty is. Conventions, stated because users argue
//! about them (every figure in the targets' own units):
//!
//! - **RMSE**, **MAE**: of `y - mu` (scikit-learn's `root_mean_squared_error`,
//!   `mean_absolute_error`).
//! - **NLL**: mean of `0.5 ln(2 pi sigma^2) + (y - mu)^2 / (2 sigma^2)`, nats.
//! - **CRPS**: mean continuous ranked probability score of the Gaussian, closed form
//!   `sigma (z (2 Phi(z) - 1) + 2 phi(z) - 1 / sqrt(pi))`, `z = (y - mu) / sigma` (as
//!   properscoring's `crps_gaussian`); lower is better, in the targets' units.
//! - **Coverage** and **width** of central intervals at level `p`: `mu ± z_p sigma` with
//!   `z_p = Phi^-1((1 + p) / 2)`; coverage counts targets inside, bounds included.
//! - **Quantile calibration error** (Kuleshov, Fenner & Ermon 2018, weights 1): at the levels
//!   `p_j = j / 20`, `j = 1..19`, `phat_j` = the fraction of items with `Phi(z_i) <= p_j`;
//!   the error is `sum_j (p_j - phat_j)^2` (0 for a calibrated model).
//! - **Spearman**: rank correlation of `sigma` with `|y - mu|` (midranks on ties, as SciPy's
//!   `spearmanr`); undefined when either is constant.
//! - **Sparsification** (Ilg et al. 2018): for `k = 0..K-1` (`K = 20`) the `floor(k n / K)`
//!   items of largest `sigma` are removed (a stable order: the lower index first among ties)
//!   and the RMSE of the rest taken; the oracle removes by largest `|y - mu|`. Both curves are
//!   divided by the RMSE of all items; **AUSE** is the mean over `k` of model minus oracle
//!   (0 when the uncertainty orders the errors perfectly). Undefined when every error is 0.

use crate::error::{Error, Result};
use serde::Serialize;

/// Central-interval levels reported when the caller names none.
pub const DEFAULT_LEVELS: [f64; 4] = [0.5, 0.8, 0.9, 0.95];
/// Steps of the sparsification curve.
pub const SPARSIFICATION_STEPS: usize = 20;

/// Standard normal density.
pub fn normal_pdf(z: f64) -> f64 {
    (-0.5 * z * z).exp() / (2.0 * std::f64::consts::PI).sqrt()
}

/// Standard normal distribution function, accurate in both tails (through `erfc`).
pub fn normal_cdf(z: f64) -> f64 {
    0.5 * libm::erfc(-z / std::f64::consts::SQRT_2)
}

/// The standard normal quantile `Phi^-1(p)` for `p` in `(0, 1)`: Acklam's rational
/// approximation (relative error 1.2e-9) refined by one Halley step on `Phi`, which brings
/// it to double precision.
pub fn normal_quantile(p: f64) -> f64 {
    if p <= 0.0 {
        return f64::NEG_INFINITY;
    }
    if p >= 1.0 {
        return f64::INFINITY;
    }
    const A: [f64; 6] = [
        -3.969683028665376e1,
        2.209460984245205e2,
        -2.759285104469687e2,
        1.383_577_518_672_69e2,
        -3.066479806614716e1,
        2.506628277459239,
    ];
    const B: [f64; 5] = [
        -5.447609879822406e1,
        1.615858368580409e2,
        -1.556989798598866e2,
        6.680131188771972e1,
        -1.328068155288572e1,
    ];
    const C: [f64; 6] = [
        -7.784894002430293e-3,
        -3.223964580411365e-1,
        -2.400758277161838,
        -2.549732539343734,
        4.374664141464968,
        2.938163982698783,
    ];
    const D: [f64; 4] = [
        7.784695709041462e-3,
        3.224671290700398e-1,
        2.445134137142996,
        3.754408661907416,
    ];
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    let x = if p < 0.02425 {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - 0.02425 {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    };
    let e = normal_cdf(x) - p;
    let u = e * (2.0 * std::f64::consts::PI).sqrt() * (0.5 * x * x).exp();
    x - u / (1.0 + 0.5 * x * u)
}

/// Checks predictions and targets `(n,)` each: the same length, at least one item, every
/// value finite and every standard deviation positive. `what` names them in errors.
pub fn check_predictions(y: &[f64], mean: &[f64], std: &[f64], what: &str) -> Result<()> {
    let n = y.len();
    if n == 0 || mean.len() != n || std.len() != n {
        return Err(Error::config(
            "regression metrics",
            format!(
                "{what}: {n} targets, {} means, {} standard deviations; expected as many of \
                 each, at least one",
                mean.len(),
                std.len()
            ),
        ));
    }
    let bad = |name: &str, i: usize, v: f64| {
        Err(Error::config(
            "regression metrics",
            format!("{what}: item {i} has {name} {v}"),
        ))
    };
    for i in 0..n {
        if !y[i].is_finite() {
            return bad("target", i, y[i]);
        }
        if !mean[i].is_finite() {
            return bad("mean", i, mean[i]);
        }
        if !(std[i].is_finite() && std[i] > 0.0) {
            return bad("standard deviation", i, std[i]);
        }
    }
    Ok(())
}

/// Root mean squared error of `mean` against `y`.
pub fn rmse(y: &[f64], mean: &[f64]) -> f64 {
    let s: f64 = y.iter().zip(mean).map(|(a, b)| (a - b).powi(2)).sum();
    (s / y.len() as f64).sqrt()
}

/// Mean absolute error of `mean` against `y`.
pub fn mae(y: &[f64], mean: &[f64]) -> f64 {
    y.iter().zip(mean).map(|(a, b)| (a - b).abs()).sum::<f64>() / y.len() as f64
}

/// Mean Gaussian negative log-likelihood, nats.
pub fn gaussian_nll(y: &[f64], mean: &[f64], std: &[f64]) -> f64 {
    let ln2pi = (2.0 * std::f64::consts::PI).ln();
    let s: f64 = (0..y.len())
        .map(|i| {
            let z = (y[i] - mean[i]) / std[i];
            0.5 * ln2pi + std[i].ln() + 0.5 * z * z
        })
        .sum();
    s / y.len() as f64
}

/// Mean CRPS of the Gaussians at the targets (closed form).
pub fn crps_gaussian(y: &[f64], mean: &[f64], std: &[f64]) -> f64 {
    let inv_sqrt_pi = 1.0 / std::f64::consts::PI.sqrt();
    let s: f64 = (0..y.len())
        .map(|i| {
            let z = (y[i] - mean[i]) / std[i];
            std[i] * (z * (2.0 * normal_cdf(z) - 1.0) + 2.0 * normal_pdf(z) - inv_sqrt_pi)
        })
        .sum();
    s / y.len() as f64
}

/// Coverage and mean width of one central interval level.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct IntervalCoverage {
    /// Nominal level `p`.
    pub level: f64,
    /// Fraction of targets inside `mu ± z_p sigma`.
    pub coverage: f64,
    /// Mean width `2 z_p sigma`.
    pub width: f64,
}

/// Coverage and width of the central intervals at each level in `(0, 1)`.
pub fn central_intervals(
    y: &[f64],
    mean: &[f64],
    std: &[f64],
    levels: &[f64],
) -> Vec<IntervalCoverage> {
    let n = y.len() as f64;
    levels
        .iter()
        .map(|&level| {
            let z = normal_quantile(0.5 + 0.5 * level);
            let inside = (0..y.len())
                .filter(|&i| (y[i] - mean[i]).abs() <= z * std[i])
                .count();
            IntervalCoverage {
                level,
                coverage: inside as f64 / n,
                width: std.iter().map(|s| 2.0 * z * s).sum::<f64>() / n,
            }
        })
        .collect()
}

/// The levels of the quantile calibration, `p_j = j / 20` for `j = 1..19`.
pub fn quantile_levels() -> Vec<f64> {
    (1..20).map(|j| j as f64 / 20.0).collect()
}

/// The observed frequencies `phat_j` at [`quantile_levels`]: the fraction of items whose
/// predicted distribution function at the target is at most `p_j`.
pub fn quantile_observed(y: &[f64], mean: &[f64], std: &[f64]) -> Vec<f64> {
    let pit: Vec<f64> = (0..y.len())
        .map(|i| normal_cdf((y[i] - mean[i]) / std[i]))
        .collect();
    let n = y.len() as f64;
    quantile_levels()
        .into_iter()
        .map(|p| pit.iter().filter(|&&u| u <= p).count() as f64 / n)
        .collect()
}

/// Kuleshov et al.'s calibration error of the predicted quantiles (module docs).
pub fn quantile_calibration_error(y: &[f64], mean: &[f64], std: &[f64]) -> f64 {
    quantile_levels()
        .iter()
        .zip(quantile_observed(y, mean, std))
        .map(|(p, phat)| (p - phat).powi(2))
        .sum()
}

/// Midranks (1-based) of `v`.
fn midranks(v: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..v.len()).collect();
    order.sort_by(|&a, &b| v[a].total_cmp(&v[b]));
    let mut ranks = vec![0.0; v.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i + 1;
        while j < order.len() && v[order[j]] == v[order[i]] {
            j += 1;
        }
        let r = (i + j + 1) as f64 / 2.0;
        for &k in &order[i..j] {
            ranks[k] = r;
        }
        i = j;
    }
    ranks
}

/// Spearman's rank correlation of `a` and `b`, `None` when either is constant.
pub fn spearman(a: &[f64], b: &[f64]) -> Option<f64> {
    let (ra, rb) = (midranks(a), midranks(b));
    let n = a.len() as f64;
    let (ma, mb) = (ra.iter().sum::<f64>() / n, rb.iter().sum::<f64>() / n);
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for (x, y) in ra.iter().zip(&rb) {
        sab += (x - ma) * (y - mb);
        saa += (x - ma).powi(2);
        sbb += (y - mb).powi(2);
    }
    (saa > 0.0 && sbb > 0.0).then(|| sab / (saa * sbb).sqrt())
}

/// A sparsification curve, its oracle and the area between them (module docs).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sparsification {
    /// Fraction removed at each step, `k / K`.
    pub fractions: Vec<f64>,
    /// RMSE of the rest when removing by uncertainty, over the RMSE of all.
    pub model: Vec<f64>,
    /// The same when removing by the error itself.
    pub oracle: Vec<f64>,
    /// Mean of model minus oracle.
    pub ause: f64,
}

/// RMSE of the items left after removing the first `floor(k n / K)` of `order`, per `k`.
fn removal_curve(sq: &[f64], order: &[usize], steps: usize) -> Vec<f64> {
    let n = sq.len();
    // Suffix sums of squared errors in removal order: what is left after removing a prefix.
    let mut left = vec![0.0; n + 1];
    for i in (0..n).rev() {
        left[i] = left[i + 1] + sq[order[i]];
    }
    (0..steps)
        .map(|k| {
            let removed = k * n / steps;
            (left[removed] / (n - removed) as f64).sqrt()
        })
        .collect()
}

/// The sparsification curve of `std` against the errors, `None` when every error is 0.
pub fn sparsification(y: &[f64], mean: &[f64], std: &[f64]) -> Option<Sparsification> {
    let steps = SPARSIFICATION_STEPS;
    let err: Vec<f64> = y.iter().zip(mean).map(|(a, b)| (a - b).abs()).collect();
    let sq: Vec<f64> = err.iter().map(|e| e * e).collect();
    let descending = |key: &[f64]| {
        let mut order: Vec<usize> = (0..key.len()).collect();
        order.sort_by(|&a, &b| key[b].total_cmp(&key[a]));
        order
    };
    let all = rmse(y, mean);
    if all == 0.0 {
        return None;
    }
    let norm = |c: Vec<f64>| c.into_iter().map(|v| v / all).collect::<Vec<f64>>();
    let model = norm(removal_curve(&sq, &descending(std), steps));
    let oracle = norm(removal_curve(&sq, &descending(&err), steps));
    let ause = model.iter().zip(&oracle).map(|(m, o)| m - o).sum::<f64>() / steps as f64;
    Some(Sparsification {
        fractions: (0..steps).map(|k| k as f64 / steps as f64).collect(),
        model,
        oracle,
        ause,
    })
}

/// Every regression metric of one set of predictions (module docs).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RegressionMetrics {
    /// Items.
    pub n: usize,
    /// Root mean squared error.
    pub rmse: f64,
    /// Mean absolute error.
    pub mae: f64,
    /// Mean Gaussian negative log-likelihood.
    pub nll: f64,
    /// Mean CRPS.
    pub crps: f64,
    /// Central intervals, one per level.
    pub intervals: Vec<IntervalCoverage>,
    /// Kuleshov et al.'s quantile calibration error.
    pub quantile_calibration_error: f64,
    /// The observed frequencies at the levels `j / 20` ([`quantile_observed`]).
    pub quantile_observed: Vec<f64>,
    /// Rank correlation of the standard deviation with the absolute error.
    pub spearman: Option<f64>,
    /// Sparsification curve and AUSE.
    pub sparsification: Option<Sparsification>,
}

/// Every metric of predictions `mean`, `std` `(n,)` against targets `y` `(n,)`, with the
/// central intervals at `levels` (each in `(0, 1)`).
pub fn regression_metrics(
    y: &[f64],
    mean: &[f64],
    std: &[f64],
    levels: &[f64],
) -> Result<RegressionMetrics> {
    check_predictions(y, mean, std, "predictions")?;
    if let Some(l) = levels.iter().find(|l| !(**l > 0.0 && **l < 1.0)) {
        return Err(Error::config(
            "levels",
            format!("interval level {l}; each must be in (0, 1)"),
        ));
    }
    let err: Vec<f64> = y.iter().zip(mean).map(|(a, b)| (a - b).abs()).collect();
    Ok(RegressionMetrics {
        n: y.len(),
        rmse: rmse(y, mean),
        mae: mae(y, mean),
        nll: gaussian_nll(y, mean, std),
        crps: crps_gaussian(y, mean, std),
        intervals: central_intervals(y, mean, std, levels),
        quantile_calibration_error: quantile_calibration_error(y, mean, std),
        quantile_observed: quantile_observed(y, mean, std),
        spearman: spearman(std, &err),
        sparsification: sparsification(y, mean, std),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_quantile_inverts_the_cdf_in_both_tails() {
        for &p in &[1e-12, 1e-6, 0.01, 0.025, 0.3, 0.5, 0.8, 0.975, 0.999_999] {
            let z = normal_quantile(p);
            assert!((normal_cdf(z) - p).abs() <= 1e-14 * p.max(1e-3), "{p} {z}");
        }
        // z_0.975 = 1.959963984540054 (tables).
        assert!((normal_quantile(0.975) - 1.959_963_984_540_054).abs() < 1e-13);
    }

    #[test]
    fn small_case_by_hand() {
        let y = [1.0, 2.0, 4.0];
        let mean = [1.0, 1.0, 1.0];
        let std = [1.0, 2.0, 3.0];
        assert_eq!(rmse(&y, &mean), (10.0f64 / 3.0).sqrt());
        assert_eq!(mae(&y, &mean), 4.0 / 3.0);
        // Errors 0, 1, 3 follow sigma 1, 2, 3: a perfect ordering.
        assert_eq!(spearman(&std, &[0.0, 1.0, 3.0]), Some(1.0));
        let s = sparsification(&y, &mean, &std).unwrap();
        assert!(s.ause.abs() < 1e-15, "{s:?}");
        assert_eq!(spearman(&[1.0, 1.0, 1.0], &y), None);
        // CRPS of N(0, 1) at 0: 2 phi(0) - 1 / sqrt(pi) = (sqrt(2) - 1) / sqrt(pi).
        let c = crps_gaussian(&[0.0], &[0.0], &[1.0]);
        assert!((c - (2f64.sqrt() - 1.0) / std::f64::consts::PI.sqrt()).abs() < 1e-15);
    }

    #[test]
    fn bad_predictions_name_the_item() {
        let e = regression_metrics(&[1.0, 2.0], &[0.0, 0.0], &[1.0, 0.0], &[0.9]).unwrap_err();
        assert!(e.to_string().contains("item 1"), "{e}");
        assert!(regression_metrics(&[1.0], &[0.0], &[1.0], &[1.0]).is_err());
    }
}
