//! Statistics over seeds, for asking whether one acquisition strategy beats another: the
//! normalised area under a budget curve ([`aubc`]), a Student-t interval for a mean
//! ([`mean_interval`]), Wilcoxon's signed-rank test on paired differences ([`wilcoxon`], as
//! `scipy.stats.wilcoxon` computes it by default) and a percentile bootstrap interval for a
//! mean difference ([`bootstrap_interval`]). Plain `f64` vectors, no tensors.

use rand::RngCore;

/// The area under `value` against `labeled` (trapezoids), divided by the labels spent: the
/// curve's mean height, so 1 for a model perfect from the first point. One point: its value.
/// `labeled` ascending, both of one length.
pub fn aubc(labeled: &[f64], value: &[f64]) -> f64 {
    let n = labeled.len().min(value.len());
    if n == 0 {
        return f64::NAN;
    }
    let span = labeled[n - 1] - labeled[0];
    if n == 1 || span <= 0.0 {
        return value[..n].iter().sum::<f64>() / n as f64;
    }
    let area: f64 = (1..n)
        .map(|i| (labeled[i] - labeled[i - 1]) * (value[i] + value[i - 1]) / 2.0)
        .sum();
    area / span
}

/// A mean and its two-sided interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    /// The mean.
    pub mean: f64,
    /// Lower bound (NaN when there is no interval: fewer than two values).
    pub lo: f64,
    /// Upper bound (NaN likewise).
    pub hi: f64,
}

/// The mean of `xs` and its Student-t interval at `level` (0.95: 95%): `mean ± t s / sqrt(n)`
/// with the sample standard deviation `s` and `n - 1` degrees of freedom.
pub fn mean_interval(xs: &[f64], level: f64) -> Interval {
    let n = xs.len();
    let mean = xs.iter().sum::<f64>() / n as f64;
    if n < 2 {
        return Interval {
            mean,
            lo: f64::NAN,
            hi: f64::NAN,
        };
    }
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    let half = t_quantile(0.5 + level / 2.0, (n - 1) as f64) * (var / n as f64).sqrt();
    Interval {
        mean,
        lo: mean - half,
        hi: mean + half,
    }
}

/// The `p` quantile of Student's t with `df` degrees of freedom (`0 < p < 1`), by bisection
/// on [`t_cdf`] to `f64` precision.
pub fn t_quantile(p: f64, df: f64) -> f64 {
    if p == 0.5 {
        return 0.0;
    }
    if p < 0.5 {
        return -t_quantile(1.0 - p, df);
    }
    let mut hi = 1.0;
    while t_cdf(hi, df) < p && hi < 1e300 {
        hi *= 2.0;
    }
    let mut lo = 0.0;
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if mid == lo || mid == hi {
            break;
        }
        if t_cdf(mid, df) < p {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// Student's t distribution function: `1 - I_x(df / 2, 1 / 2) / 2` for `t > 0`,
/// `x = df / (df + t^2)`.
pub fn t_cdf(t: f64, df: f64) -> f64 {
    let tail = 0.5 * beta_inc(df / 2.0, 0.5, df / (df + t * t));
    if t >= 0.0 {
        1.0 - tail
    } else {
        tail
    }
}

/// The regularised incomplete beta function `I_x(a, b)`, by its continued fraction (Lentz's
/// method), on the side of `x` where it converges fast.
fn beta_inc(a: f64, b: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let ln_front =
        libm::lgamma(a + b) - libm::lgamma(a) - libm::lgamma(b) + a * x.ln() + b * (1.0 - x).ln();
    if x < (a + 1.0) / (a + b + 2.0) {
        ln_front.exp() * beta_fraction(a, b, x) / a
    } else {
        1.0 - ln_front.exp() * beta_fraction(b, a, 1.0 - x) / b
    }
}

fn beta_fraction(a: f64, b: f64, x: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let guard = |v: f64| if v.abs() < TINY { TINY } else { v };
    let mut c = 1.0;
    let mut d = 1.0 / guard(1.0 - (a + b) * x / (a + 1.0));
    let mut h = d;
    for m in 1..=1000 {
        let m = f64::from(m);
        let even = m * (b - m) * x / ((a + 2.0 * m - 1.0) * (a + 2.0 * m));
        d = 1.0 / guard(1.0 + even * d);
        c = guard(1.0 + even / c);
        h *= d * c;
        let odd = -(a + m) * (a + b + m) * x / ((a + 2.0 * m) * (a + 2.0 * m + 1.0));
        d = 1.0 / guard(1.0 + odd * d);
        c = guard(1.0 + odd / c);
        let step = d * c;
        h *= step;
        if (step - 1.0).abs() < 4.0 * f64::EPSILON {
            break;
        }
    }
    h
}

/// The outcome of Wilcoxon's signed-rank test.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SignedRank {
    /// `min(R+, R-)`: the smaller sum of the ranks of `|d|` over positive and negative `d`.
    pub statistic: f64,
    /// The two-sided p-value.
    pub p: f64,
}

/// Wilcoxon's signed-rank test of paired differences `d` against a median of zero, two-sided,
/// as `scipy.stats.wilcoxon(d)` computes it by default: zeros dropped (`wilcox`), ties
/// ranked by their average; the exact null distribution for at most 50 differences without
/// ties or zeros, the exact sign-flip permutation distribution for at most 13 with them, and
/// otherwise the normal approximation with the tie correction and no continuity correction.
/// All differences zero: `p = 1` (scipy gives NaN beyond 13); a non-finite difference: NaN.
pub fn wilcoxon(d: &[f64]) -> SignedRank {
    if d.iter().any(|v| !v.is_finite()) {
        // SciPy's `nan_policy="propagate"`: no test on a difference that is not a number.
        return SignedRank {
            statistic: f64::NAN,
            p: f64::NAN,
        };
    }
    let ranks = signed_ranks(d);
    let plus: f64 = ranks.iter().filter(|r| r.0).map(|r| r.1).sum();
    let minus: f64 = ranks.iter().filter(|r| !r.0).map(|r| r.1).sum();
    let statistic = plus.min(minus);
    let zeros = d.len() - ranks.len();
    if ranks.is_empty() {
        return SignedRank { statistic, p: 1.0 };
    }
    let ties = tie_sum(&ranks.iter().map(|r| r.1).collect::<Vec<_>>());
    let p = if d.len() <= 50 && ties == 0.0 && zeros == 0 {
        exact_p(ranks.len(), plus)
    } else if d.len() <= 13 {
        permutation_p(&ranks, plus)
    } else {
        normal_p(ranks.len(), ties, plus)
    };
    SignedRank {
        statistic,
        p: p.clamp(0.0, 1.0),
    }
}

/// `(positive, rank of |d|)` for every nonzero difference, ties given their average rank.
fn signed_ranks(d: &[f64]) -> Vec<(bool, f64)> {
    let nz: Vec<f64> = d.iter().copied().filter(|v| *v != 0.0).collect();
    let abs: Vec<f64> = nz.iter().map(|v| v.abs()).collect();
    nz.iter()
        .zip(average_ranks(&abs))
        .map(|(v, r)| (*v > 0.0, r))
        .collect()
}

/// The ranks of `values`, 1 for the smallest, ties given their average rank.
fn average_ranks(values: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
    let mut ranks = vec![0.0; values.len()];
    let mut i = 0;
    while i < order.len() {
        let j = order[i..]
            .iter()
            .take_while(|&&o| values[o] == values[order[i]])
            .count();
        for &o in &order[i..i + j] {
            ranks[o] = (2 * i + j + 1) as f64 / 2.0;
        }
        i += j;
    }
    ranks
}

/// `sum (t^3 - t)` over the groups of `t` equal ranks: the tie term of the rank tests'
/// variances (0 without ties).
fn tie_sum(ranks: &[f64]) -> f64 {
    let mut sorted = ranks.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mut sum = 0.0;
    let mut i = 0;
    while i < sorted.len() {
        let t = sorted[i..].iter().take_while(|&&r| r == sorted[i]).count();
        sum += (t * t * t - t) as f64;
        i += t;
    }
    sum
}

/// `2 min(P(T >= t), P(T <= t))` under the exact null of `n` untied ranks (a count of the
/// sign patterns giving each rank sum).
fn exact_p(n: usize, plus: f64) -> f64 {
    let max = n * (n + 1) / 2;
    let mut counts = vec![0f64; max + 1];
    counts[0] = 1.0;
    for r in 1..=n {
        for s in (r..=max).rev() {
            counts[s] += counts[s - r];
        }
    }
    let total: f64 = counts.iter().sum();
    let t = plus.round() as usize;
    let below: f64 = counts[..=t.min(max)].iter().sum();
    let above: f64 = counts[t.min(max)..].iter().sum();
    2.0 * below.min(above) / total
}

/// The same over every sign flip of the ranks (what scipy's permutation test enumerates for
/// tied or zero differences): `2 min(#(T <= t), #(T >= t)) / 2^n`.
fn permutation_p(ranks: &[(bool, f64)], plus: f64) -> f64 {
    let n = ranks.len();
    let tol = 1e-14 * plus.abs().max(1.0);
    let (mut le, mut ge) = (0u64, 0u64);
    for mask in 0u64..(1 << n) {
        let t: f64 = (0..n)
            .filter(|&i| mask >> i & 1 == 1)
            .map(|i| ranks[i].1)
            .sum();
        le += u64::from(t <= plus + tol);
        ge += u64::from(t >= plus - tol);
    }
    2.0 * le.min(ge) as f64 / (1u64 << n) as f64
}

/// The normal approximation over `n` ranks: `z = (R+ - n(n+1)/4) / se`, `se` with the tie
/// term `ties` ([`tie_sum`]).
fn normal_p(n: usize, ties: f64, plus: f64) -> f64 {
    let n = n as f64;
    let se = ((n * (n + 1.0) * (2.0 * n + 1.0) - ties / 2.0) / 24.0).sqrt();
    let z = (plus - n * (n + 1.0) / 4.0) / se;
    libm::erfc(z.abs() / std::f64::consts::SQRT_2)
}

/// The percentile bootstrap interval at `level` of the mean of `d`: `resamples` means of `n`
/// values drawn with replacement from `rng`, their `(1 - level) / 2` and `(1 + level) / 2`
/// quantiles interpolated linearly (numpy's default). NaN bounds for fewer than two values.
pub fn bootstrap_interval(
    d: &[f64],
    resamples: usize,
    level: f64,
    rng: &mut dyn RngCore,
) -> (f64, f64) {
    let n = d.len();
    if n < 2 || resamples == 0 {
        return (f64::NAN, f64::NAN);
    }
    let mut means: Vec<f64> = (0..resamples)
        .map(|_| (0..n).map(|_| d[crate::rng::below(rng, n)]).sum::<f64>() / n as f64)
        .collect();
    means.sort_by(f64::total_cmp);
    let q = |p: f64| {
        let at = p * (resamples - 1) as f64;
        let (i, f) = (at.floor() as usize, at.fract());
        means[i] + f * (means[(i + 1).min(resamples - 1)] - means[i])
    };
    (q((1.0 - level) / 2.0), q((1.0 + level) / 2.0))
}

/// Friedman's test of `k` strategies over `n` data sets.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Friedman {
    /// Each strategy's rank averaged over the data sets (1 = best).
    pub mean_ranks: Vec<f64>,
    /// The chi-square statistic, corrected for ties (as `scipy.stats.friedmanchisquare`).
    pub chi2: f64,
    /// Its p-value, from the chi-square distribution with `k - 1` degrees of freedom.
    pub p: f64,
}

/// The ranks of `row`, 1 for its highest value, ties given their average rank.
pub fn ranks_high_first(row: &[f64]) -> Vec<f64> {
    average_ranks(&row.iter().map(|v| -v).collect::<Vec<_>>())
}

/// Friedman's test over `table[d][s]`, the score (higher is better) of strategy `s` on data
/// set `d`; every row has the same `k >= 2` entries and there is at least one row (SciPy
/// asks for `k >= 3`; two strategies are tested the same way). A table whose every row is
/// tied has no statistic: `chi2` NaN and `p = 1` (SciPy: NaN for both).
pub fn friedman(table: &[Vec<f64>]) -> Friedman {
    let (n, k) = (table.len() as f64, table.first().map_or(0, Vec::len));
    let kf = k as f64;
    let mut sums = vec![0.0; k];
    let mut ties = 0.0;
    for row in table {
        let ranks = ranks_high_first(row);
        for (s, r) in sums.iter_mut().zip(&ranks) {
            *s += r;
        }
        ties += tie_sum(&ranks);
    }
    let ssbn: f64 = sums.iter().map(|s| s * s).sum();
    let c = 1.0 - ties / (kf * (kf * kf - 1.0) * n);
    let chi2 = (12.0 / (kf * n * (kf + 1.0)) * ssbn - 3.0 * n * (kf + 1.0)) / c;
    Friedman {
        mean_ranks: sums.iter().map(|s| s / n).collect(),
        chi2,
        p: if chi2.is_finite() {
            chi2_sf(chi2, kf - 1.0)
        } else {
            1.0
        },
    }
}

/// The chi-square survival function `P(X > x)` with `df` degrees of freedom: the upper
/// regularised incomplete gamma function `Q(df / 2, x / 2)`.
pub fn chi2_sf(x: f64, df: f64) -> f64 {
    if x <= 0.0 {
        return 1.0;
    }
    let (a, x) = (df / 2.0, x / 2.0);
    let ln_front = a * x.ln() - x - libm::lgamma(a);
    if x < a + 1.0 {
        // The series of the lower function P.
        let (mut term, mut sum, mut ap) = (1.0 / a, 1.0 / a, a);
        for _ in 0..10_000 {
            ap += 1.0;
            term *= x / ap;
            sum += term;
            if term.abs() < sum.abs() * f64::EPSILON {
                break;
            }
        }
        1.0 - sum * ln_front.exp()
    } else {
        // The continued fraction of Q (Lentz's method).
        const TINY: f64 = 1e-300;
        let mut b = x + 1.0 - a;
        let (mut c, mut d) = (1.0 / TINY, 1.0 / b);
        let mut h = d;
        for i in 1..10_000 {
            let an = -f64::from(i) * (f64::from(i) - a);
            b += 2.0;
            d = an * d + b;
            d = if d.abs() < TINY { TINY } else { d };
            c = b + an / c;
            c = if c.abs() < TINY { TINY } else { c };
            d = 1.0 / d;
            let step = d * c;
            h *= step;
            if (step - 1.0).abs() < 4.0 * f64::EPSILON {
                break;
            }
        }
        ln_front.exp() * h
    }
}

/// Nemenyi's critical difference at level `alpha` (0.05) for the mean ranks of `k >= 2`
/// strategies over `n` data sets (Demšar 2006): `q sqrt(k (k + 1) / (6 n))`, with `q` the
/// studentized range's `1 - alpha` quantile for `k` means and infinite degrees of freedom,
/// divided by `sqrt(2)`. Two strategies whose mean ranks differ by less are not told apart.
pub fn nemenyi_cd(k: usize, n: usize, alpha: f64) -> f64 {
    let kf = k as f64;
    let (mut lo, mut hi) = (0.0, 20.0);
    for _ in 0..100 {
        let mid = 0.5 * (lo + hi);
        if range_cdf(mid, k) < 1.0 - alpha {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi) / std::f64::consts::SQRT_2 * (kf * (kf + 1.0) / (6.0 * n as f64)).sqrt()
}

/// The distribution function of the range of `k` standard normal draws:
/// `k ∫ φ(z) (Φ(z) - Φ(z - q))^(k - 1) dz`, by Simpson's rule over `[-12, 12]`.
fn range_cdf(q: f64, k: usize) -> f64 {
    const STEPS: usize = 4000;
    let normal_cdf = |z: f64| 0.5 * libm::erfc(-z / std::f64::consts::SQRT_2);
    let normal_pdf = |z: f64| (-0.5 * z * z).exp() / (2.0 * std::f64::consts::PI).sqrt();
    let (a, b) = (-12.0, 12.0);
    let h = (b - a) / STEPS as f64;
    let f = |z: f64| normal_pdf(z) * (normal_cdf(z) - normal_cdf(z - q)).powi(k as i32 - 1);
    let mut sum = f(a) + f(b);
    for i in 1..STEPS {
        let w = if i % 2 == 1 { 4.0 } else { 2.0 };
        sum += w * f(a + i as f64 * h);
    }
    k as f64 * sum * h / 3.0
}
