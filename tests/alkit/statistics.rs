//! The statistics over seeds (`alkit::metrics::stats`) against SciPy on the same numbers
//! (tests/reference/stats.py, live: the reference Python is `ALKIT_PYTHON`): Wilcoxon's
//! signed-rank test in each of SciPy's four regimes (exact, sign-flip permutation, normal
//! approximation with ties, zeros and more than 50 pairs), Student-t quantiles, the percentile
//! bootstrap interval within its Monte Carlo error; and by hand: the AUBC of a curve worked
//! out on paper, a t interval, and the smallest exact p-values.

use super::feature_methods::{python, reference};
use super::tmp;
use alkit::metrics::stats::{aubc, bootstrap_interval, mean_interval, t_quantile, wilcoxon};
use rand::SeedableRng;
use serde_json::{json, Value};

/// Paired differences that exercise every regime of scipy's `method="auto"`.
fn wilcoxon_cases() -> Vec<Vec<f64>> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
    let mut draw = |n: usize, shift: f64| -> Vec<f64> {
        (0..n)
            .map(|_| alkit::rng::normal(&mut rng) * 0.02 + shift)
            .collect()
    };
    let mut cases = vec![
        draw(10, 0.01),                                           // exact
        draw(30, 0.004),                                          // exact
        draw(50, 0.0),                                            // exact, at the limit
        draw(51, 0.005),                                          // normal, no ties
        draw(80, 0.003),                                          // normal
        vec![0.5, -0.25, 0.25, 0.75, -0.5, 0.5, 1.0, 0.125],      // ties: permutation
        vec![0.1, 0.0, -0.2, 0.3, 0.0, 0.4, 0.5, -0.6, 0.7, 0.8], // zeros: permutation
        vec![0.03, 0.01, 0.02, 0.04, 0.05],                       // one sign: p = 1/16
        vec![1.0; 13],                                            // 13 ties
    ];
    // Ties and zeros past 13 pairs: the normal approximation with the tie correction.
    let tied: Vec<f64> = (0..20).map(|i| f64::from(i % 5 - 1) * 0.25).collect();
    cases.push(tied);
    let rounded: Vec<f64> = draw(40, 0.01)
        .iter()
        .map(|v| (v * 100.0).round() / 100.0)
        .collect();
    cases.push(rounded);
    cases
}

#[test]
fn statistics_equal_scipy_on_the_same_numbers() {
    let Some(py) = python() else { return };
    let dir = tmp("statistics");
    let cases = wilcoxon_cases();
    let t = [
        (0.975, 1.0),
        (0.975, 2.0),
        (0.975, 4.0),
        (0.975, 49.0),
        (0.995, 9.0),
        (0.025, 7.0),
        (0.9, 1000.0),
    ];
    let boot: Vec<Vec<f64>> = cases[..5].to_vec();
    let resamples = 20_000;
    let input = json!({"wilcoxon": cases, "t": t, "bootstrap": boot, "resamples": resamples});
    let out: Value = reference(&py, "stats.py", &input, &dir);
    for (d, want) in cases.iter().zip(out["wilcoxon"].as_array().unwrap()) {
        let got = wilcoxon(d);
        let (s, p) = (want[0].as_f64().unwrap(), want[1].as_f64().unwrap());
        assert_eq!(got.statistic, s, "{d:?}");
        assert!(
            (got.p - p).abs() <= 1e-12 + 1e-9 * p,
            "{} pairs: p {} vs scipy {p}",
            d.len(),
            got.p
        );
    }
    for (&(p, df), want) in t.iter().zip(out["t"].as_array().unwrap()) {
        let want = want.as_f64().unwrap();
        let got = t_quantile(p, df);
        assert!(
            (got - want).abs() <= 1e-10 * want.abs(),
            "t({p}, {df}): {got} vs {want}"
        );
    }
    let mut rng = alkit::rng::stream(0, alkit::rng::Purpose::Tool, 0);
    for (d, want) in boot.iter().zip(out["bootstrap"].as_array().unwrap()) {
        let (lo, hi) = bootstrap_interval(d, resamples, 0.95, &mut rng);
        let (wlo, whi) = (want[0].as_f64().unwrap(), want[1].as_f64().unwrap());
        // Two Monte Carlo estimates of one quantile: within a small share of the width.
        let tol = 0.03 * (whi - wlo);
        assert!(
            (lo - wlo).abs() < tol && (hi - whi).abs() < tol,
            "{} pairs: ({lo}, {hi}) vs scipy ({wlo}, {whi})",
            d.len()
        );
    }
}

#[test]
fn aubc_intervals_and_small_p_values_worked_by_hand() {
    // Labels 10, 20, 40; accuracies 0.5, 0.7, 0.8: trapezoids 10 * 0.6 + 20 * 0.75 = 21, over
    // 30 labels spent.
    assert!((aubc(&[10.0, 20.0, 40.0], &[0.5, 0.7, 0.8]) - 0.7).abs() < 1e-15);
    assert_eq!(aubc(&[10.0], &[0.25]), 0.25);
    // 1, 2, 3: mean 2, s = 1, t(0.975, 2) = 4.302652729749464: 2 ± 4.3027 / sqrt(3).
    let i = mean_interval(&[1.0, 2.0, 3.0], 0.95);
    let half = 4.302_652_729_749_464 / 3f64.sqrt();
    assert!((i.lo - (2.0 - half)).abs() < 1e-12 && (i.hi - (2.0 + half)).abs() < 1e-12);
    assert!(mean_interval(&[0.4], 0.95).lo.is_nan());
    // Three seeds all better: R+ = 6 is one of 2^3 sign patterns; two-sided p = 2/8. Three
    // seeds can never show a difference at 5%.
    let r = wilcoxon(&[0.01, 0.02, 0.03]);
    assert_eq!((r.statistic, r.p), (0.0, 0.25));
    // Six: 2/64.
    assert_eq!(wilcoxon(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).p, 2.0 / 64.0);
    assert_eq!(wilcoxon(&[0.0, 0.0, 0.0]).p, 1.0);
}
