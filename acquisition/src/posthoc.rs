//! Post-hoc out-of-distribution detectors over a trained classifier's penultimate features and
//! last layer ([`Features`]), as OpenOOD v1.5 runs them. Each is a [`Scorer`]: one score per
//! candidate, **higher = more likely out of distribution** (the negative of the papers'
//! confidence), so they rank candidates for labeling like every other score.
//!
//! With logits `z = W h + b`:
//! - `max-logit` (Hendrycks et al. 2022): `-max_c z_c`;
//! - `energy` (Liu et al. 2020): `-log sum_c exp z_c`;
//! - `gen` (Liu et al. 2023): `sum_{j <= M} p_(j)^g (1 - p_(j))^g` over the `M` largest
//!   probabilities;
//! - `ash` (ASH-S, Djurisic et al. 2023) and `scale` (Xu et al. 2024): each row's features
//!   reshaped (ASH: all but the top `k` entries zeroed; both: scaled by `exp(s1 / s2)`, `s1`
//!   the row's sum, `s2` the sum of its top `k`), then the energy score; they act on the
//!   pooled penultimate features, the vector every model here gives;
//! - `react` (Sun et al. 2021): features clipped at the `percentile` of the training
//!   features' entries, then the energy score;
//! - `knn` (Sun et al. 2022): the Euclidean distance from the normalised features to the
//!   `k`-th nearest normalised training feature;
//! - `mahalanobis` (Lee et al. 2018, OpenOOD's MDS): the smallest squared Mahalanobis
//!   distance to a class mean, with the tied covariance of the training features (a
//!   pseudo-inverse, so dead units are ignored rather than fatal);
//! - `vim` (Wang et al. 2022): `alpha |(h - o) P_perp| - log sum exp z`, with the origin
//!   `o = -pinv(W) b`, `P_perp` the training features' principal complement beyond `D`
//!   dimensions and `alpha` matching the residual's scale to the mean largest logit.
//!
//! The last four read the training statistics from [`Evidence::reference`]: the features and
//! labels of the data the model was trained on, fitted once per reference
//! ([`Reference::memo`]). They never fit on the candidates being scored.

use crate::kernels::{matmul_nt_serial, par_rows, par_rows_min};
use crate::linalg::{eigh, logits, logsumexp, normalized, pinvh_factor, softmax};
use crate::{Evidence, Features, Needs, Reference, ScoreError, Scorer};

/// A post-hoc OOD detector with its setting (see the module docs for each formula).
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum PostHoc {
    /// `-max_c z_c`.
    MaxLogit,
    /// `-logsumexp(z)`.
    Energy,
    /// GEN's generalized entropy over the `m` largest probabilities, exponent `gamma`.
    Gen {
        /// Exponent `gamma` (0.1 in the paper and OpenOOD).
        gamma: f32,
        /// Probabilities kept, `M` (100 in OpenOOD; at most the class count).
        m: usize,
    },
    /// ReAct: features clipped at the training features' `percentile`, then energy.
    React {
        /// Percentile of the training features' entries (90 in the paper).
        percentile: f32,
    },
    /// ASH-S: all but the top `100 - percentile` % of each row zeroed, the rest scaled.
    Ash {
        /// Percent of each row's entries pruned (90 in OpenOOD).
        percentile: f32,
    },
    /// ASH-B: the top `100 - percentile` % of each row's positions set to the row's sum over
    /// their count, the rest zeroed (the variant OpenOOD v1.5 runs as "ASH").
    AshB {
        /// Percent of each row's entries pruned (90 in OpenOOD).
        percentile: f32,
    },
    /// SCALE: each row scaled by `exp(s1 / s2)` over its top `100 - percentile` %.
    Scale {
        /// Percentile defining the top entries (85 in OpenOOD).
        percentile: f32,
    },
    /// Distance to the `k`-th nearest normalised training feature (the farthest, when there
    /// are fewer than `k`).
    Knn {
        /// `k` (50 in the paper for CIFAR-10).
        k: usize,
    },
    /// Smallest squared Mahalanobis distance to a class mean, tied covariance.
    Mahalanobis,
    /// ViM's virtual-logit score with principal dimension `dim` (`None`: the paper's rule,
    /// 1000 for `d >= 2048`, 512 for `d >= 768`, else `d / 2`).
    Vim {
        /// Principal dimension `D`, below the feature dimension.
        dim: Option<usize>,
    },
}

impl PostHoc {
    /// Every detector with the papers' default settings, in the order tables list them.
    pub const DEFAULTS: [PostHoc; 10] = [
        PostHoc::MaxLogit,
        PostHoc::Energy,
        PostHoc::Gen { gamma: 0.1, m: 100 },
        PostHoc::React { percentile: 90.0 },
        PostHoc::Ash { percentile: 90.0 },
        PostHoc::AshB { percentile: 90.0 },
        PostHoc::Scale { percentile: 85.0 },
        PostHoc::Knn { k: 50 },
        PostHoc::Mahalanobis,
        PostHoc::Vim { dim: None },
    ];

    /// Whether the detector reads training statistics ([`Evidence::reference`]).
    pub fn needs_reference(&self) -> bool {
        matches!(
            self,
            PostHoc::React { .. }
                | PostHoc::Knn { .. }
                | PostHoc::Mahalanobis
                | PostHoc::Vim { .. }
        )
    }
}

impl Scorer for PostHoc {
    fn name(&self) -> &str {
        match self {
            PostHoc::MaxLogit => "max-logit",
            PostHoc::Energy => "energy",
            PostHoc::Gen { .. } => "gen",
            PostHoc::React { .. } => "react",
            PostHoc::Ash { .. } => "ash",
            PostHoc::AshB { .. } => "ash-b",
            PostHoc::Scale { .. } => "scale",
            PostHoc::Knn { .. } => "knn",
            PostHoc::Mahalanobis => "mahalanobis",
            PostHoc::Vim { .. } => "vim",
        }
    }

    fn needs(&self) -> Needs {
        Needs {
            reference: self.needs_reference(),
            ..Needs::FEATURES
        }
    }

    fn score(&self, ev: &Evidence) -> Result<Vec<f32>, ScoreError> {
        let f = ev.features(self.name())?;
        let scores = match *self {
            PostHoc::MaxLogit => per_row(f, |h| {
                -logits(h, f.weight(), f.bias())
                    .into_iter()
                    .fold(f64::NEG_INFINITY, f64::max)
            }),
            PostHoc::Energy => per_row(f, |h| -logsumexp(&logits(h, f.weight(), f.bias()))),
            PostHoc::Gen { gamma, m } => gen(f, f64::from(gamma), m),
            PostHoc::Ash { percentile } => {
                let k = kept(f.dim(), percentile)?;
                per_row(f, |h| -logsumexp(&logits(&ash(h, k), f.weight(), f.bias())))
            }
            PostHoc::AshB { percentile } => {
                let k = kept(f.dim(), percentile)?;
                per_row(f, |h| {
                    -logsumexp(&logits(&ash_b(h, k), f.weight(), f.bias()))
                })
            }
            PostHoc::Scale { percentile } => {
                let k = kept(f.dim(), percentile)?;
                per_row(f, |h| {
                    -logsumexp(&logits(&scale(h, k), f.weight(), f.bias()))
                })
            }
            PostHoc::React { percentile } => {
                check_percentile(percentile)?;
                let r = reference(ev, self.name(), f)?;
                let t = *r.memo(&format!("react-{percentile}"), |r| {
                    Ok(crate::linalg::percentile(
                        r.features().as_slice(),
                        f64::from(percentile),
                    ))
                })?;
                per_row(f, |h| {
                    let clipped: Vec<f64> = h.iter().map(|&v| v.min(t)).collect();
                    -logsumexp(&logits(&clipped, f.weight(), f.bias()))
                })
            }
            PostHoc::Knn { k } => knn(f, reference(ev, self.name(), f)?, k)?,
            PostHoc::Mahalanobis => mahalanobis(f, reference(ev, self.name(), f)?)?,
            PostHoc::Vim { dim } => vim(f, reference(ev, self.name(), f)?, dim)?,
        };
        if let Some(position) = scores.iter().position(|v| !v.is_finite()) {
            return Err(ScoreError::NonFinite {
                position,
                value: scores[position],
            });
        }
        Ok(scores)
    }
}

fn check_percentile(q: f32) -> Result<(), ScoreError> {
    if !(0.0..100.0).contains(&q) {
        return Err(ScoreError::Setting {
            setting: "percentile",
            why: format!("{q} is not in [0, 100)"),
        });
    }
    Ok(())
}

/// Entries kept per row by ASH and SCALE: `d - round(d q / 100)` (numpy's rounding), at least 1.
fn kept(d: usize, q: f32) -> Result<usize, ScoreError> {
    check_percentile(q)?;
    let pruned = (d as f64 * f64::from(q) / 100.0).round_ties_even() as usize;
    Ok(d.saturating_sub(pruned).max(1))
}

/// The training reference, checked against the candidates' feature dimension.
fn reference<'a>(ev: &'a Evidence, name: &str, f: &Features) -> Result<&'a Reference, ScoreError> {
    let r = ev.reference.as_deref().ok_or(ScoreError::Missing {
        scorer: name.to_string(),
        evidence: "the training features (reference evidence)",
    })?;
    if r.features().dim() != f.dim() || r.features().classes() != f.classes() {
        return Err(ScoreError::Shape {
            what: "reference features",
            expected: format!("(m, {}) with {} classes", f.dim(), f.classes()),
            got: format!(
                "(m, {}) with {} classes",
                r.features().dim(),
                r.features().classes()
            ),
        });
    }
    if r.is_empty() {
        return Err(ScoreError::Shape {
            what: "reference features",
            expected: "at least one training row".into(),
            got: "none".into(),
        });
    }
    Ok(r)
}

/// `f(h)` for every candidate row (in `f64`), in parallel over rows.
fn per_row(f: &Features, score: impl Fn(&[f64]) -> f64 + Sync) -> Vec<f32> {
    let mut out = vec![0f32; f.n()];
    par_rows(&mut out, 1, |first, part| {
        let mut h = Vec::with_capacity(f.dim());
        for (i, o) in part.iter_mut().enumerate() {
            h.clear();
            h.extend(f.row(first + i).iter().map(|&v| f64::from(v)));
            *o = score(&h) as f32;
        }
    });
    out
}

fn gen(f: &Features, gamma: f64, m: usize) -> Vec<f32> {
    let m = m.clamp(1, f.classes());
    per_row(f, |h| {
        let mut p = softmax(&logits(h, f.weight(), f.bias()));
        p.sort_by(|a, b| b.total_cmp(a));
        p[..m]
            .iter()
            .map(|&q| q.powf(gamma) * (1.0 - q).max(0.0).powf(gamma))
            .sum()
    })
}

/// The positions of the `k` largest entries of `h` (ties: lower position first).
fn top(h: &[f64], k: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..h.len()).collect();
    idx.sort_by(|&a, &b| h[b].total_cmp(&h[a]).then(a.cmp(&b)));
    idx.truncate(k);
    idx
}

fn ash(h: &[f64], k: usize) -> Vec<f64> {
    let s1: f64 = h.iter().sum();
    let keep = top(h, k);
    let s2: f64 = keep.iter().map(|&j| h[j]).sum();
    if s2 <= 0.0 {
        return h.to_vec();
    }
    let factor = (s1 / s2).exp();
    let mut out = vec![0.0; h.len()];
    for j in keep {
        out[j] = h[j] * factor;
    }
    out
}

fn ash_b(h: &[f64], k: usize) -> Vec<f64> {
    let fill = h.iter().sum::<f64>() / k as f64;
    let mut out = vec![0.0; h.len()];
    for j in top(h, k) {
        out[j] = fill;
    }
    out
}

fn scale(h: &[f64], k: usize) -> Vec<f64> {
    let s1: f64 = h.iter().sum();
    let s2: f64 = top(h, k).iter().map(|&j| h[j]).sum();
    if s2 <= 0.0 {
        return h.to_vec();
    }
    let factor = (s1 / s2).exp();
    h.iter().map(|v| v * factor).collect()
}

/// Queries scored against the bank at once, per core.
const KNN_BLOCK: usize = 512;
/// Bank rows per product: a `(KNN_BLOCK, KNN_TILE)` buffer of 4 MiB.
const KNN_TILE: usize = 2048;

/// The `k` smallest values offered so far, kept loosely: values below the threshold go to a
/// list that is cut back to the `k` smallest (lowering the threshold) when it holds `4 k`.
struct Kept {
    k: usize,
    values: Vec<f32>,
    threshold: f32,
}

impl Kept {
    fn new(k: usize) -> Self {
        Self {
            k,
            values: Vec::with_capacity(4 * k),
            threshold: f32::INFINITY,
        }
    }

    fn clear(&mut self) {
        self.values.clear();
        self.threshold = f32::INFINITY;
    }

    fn offer(&mut self, v: f32) {
        if v < self.threshold {
            self.values.push(v);
            if self.values.len() == 4 * self.k {
                self.values
                    .select_nth_unstable_by(self.k - 1, f32::total_cmp);
                self.values.truncate(self.k);
                self.threshold = self.values[self.k - 1];
            }
        }
    }

    /// The `k`-th smallest value offered (the list holds at least `k`: the bank has `k` rows).
    fn kth(&mut self) -> f32 {
        let k = self.k.min(self.values.len()).max(1);
        *self.values.select_nth_unstable_by(k - 1, f32::total_cmp).1
    }
}

fn knn(f: &Features, r: &Reference, k: usize) -> Result<Vec<f32>, ScoreError> {
    let m = r.len();
    if k == 0 {
        return Err(ScoreError::Setting {
            setting: "knn_k",
            why: "k must be at least 1".into(),
        });
    }
    // Fewer training rows than k (an early acquisition round): the farthest one.
    let k = k.min(m);
    let d = f.dim();
    let bank = r.memo("knn-bank", |r| {
        Ok(normalized(r.features().as_slice(), d, 1e-10))
    })?;
    let bank_sq = r.memo("knn-bank-norms", |_| {
        Ok(crate::linalg::row_sq_norms(&bank, d))
    })?;
    let bank_sq: Vec<f32> = bank_sq.iter().map(|&v| v as f32).collect();
    let queries = normalized(f.as_slice(), d, 1e-10);
    let q_sq = crate::linalg::row_sq_norms(&queries, d);
    // Each core takes a contiguous run of queries, KNN_BLOCK at a time, and walks the bank in
    // tiles of KNN_TILE rows: one product per tile (a buffer that stays in cache), whose
    // values `|b|^2 - 2 q.b` pass through a per-query threshold into a short candidate list,
    // cut back to the k smallest whenever it fills.
    let mut out = vec![0f32; f.n()];
    par_rows_min(&mut out, 1, KNN_BLOCK, |first, part| {
        let block = KNN_BLOCK.min(part.len());
        let tile = KNN_TILE.min(m);
        let mut dots = vec![0f32; block * tile];
        let mut kept: Vec<Kept> = (0..block).map(|_| Kept::new(k)).collect();
        for (bi, chunk) in part.chunks_mut(KNN_BLOCK).enumerate() {
            let q0 = first + bi * KNN_BLOCK;
            let rows = chunk.len();
            let queries = &queries[q0 * d..(q0 + rows) * d];
            kept.iter_mut().for_each(Kept::clear);
            for t0 in (0..m).step_by(tile) {
                let cols = tile.min(m - t0);
                let dots = &mut dots[..rows * cols];
                matmul_nt_serial(
                    queries,
                    &bank[t0 * d..(t0 + cols) * d],
                    dots,
                    (rows, cols, d),
                );
                for (i, kq) in kept.iter_mut().take(rows).enumerate() {
                    let norms = &bank_sq[t0..t0 + cols];
                    for (&g, &bn) in dots[i * cols..(i + 1) * cols].iter().zip(norms) {
                        kq.offer(bn - 2.0 * g);
                    }
                }
            }
            for (i, o) in chunk.iter_mut().enumerate() {
                let v = kept[i].kth();
                *o = (q_sq[q0 + i] + f64::from(v)).max(0.0).sqrt() as f32;
            }
        }
    });
    Ok(out)
}

/// `(1/m) sum_i (x_i - c_i)(x_i - c_i)^T` in `f64` over the reference rows, with `center(i)`
/// each row's centre; accumulated on every core over contiguous runs of rows, summed in a
/// fixed order.
fn covariance(x: &[f32], d: usize, center: impl Fn(usize) -> Vec<f64> + Sync) -> Vec<f64> {
    let m = x.len() / d;
    let mut cov = vec![0f64; d * d];
    // Samples a block at a time (centred once), the lower triangle's rows split over the
    // cores: each entry is summed by one thread in sample order, so the bytes do not depend
    // on the core count, and memory is one (d, d) matrix.
    const SAMPLES: usize = 256;
    let mut z = vec![0f64; SAMPLES * d];
    for start in (0..m).step_by(SAMPLES) {
        let rows = SAMPLES.min(m - start);
        for (r, zr) in z.chunks_mut(d).take(rows).enumerate() {
            let c = center(start + r);
            for (j, zj) in zr.iter_mut().enumerate() {
                *zj = f64::from(x[(start + r) * d + j]) - c[j];
            }
        }
        let z = &z[..rows * d];
        crate::kernels::par_rows_min(&mut cov, d, 16, |first, part| {
            for (ai, row) in part.chunks_mut(d).enumerate() {
                let a = first + ai;
                for zr in z.chunks_exact(d) {
                    let za = zr[a];
                    if za != 0.0 {
                        for (acc, zb) in row[..=a].iter_mut().zip(zr) {
                            *acc += za * zb;
                        }
                    }
                }
            }
        });
    }
    for a in 0..d {
        for b in 0..=a {
            let v = cov[a * d + b] / m as f64;
            cov[a * d + b] = v;
            cov[b * d + a] = v;
        }
    }
    cov
}

/// Whitened vectors `(s_r u_r . x)_r` of every row of `x (n, d)`, `(n, r)`, in `f64`.
fn whiten(x: &[f32], d: usize, u: &[f64], s: &[f64]) -> Vec<f64> {
    let r = s.len();
    let n = x.len() / d;
    let mut out = vec![0f64; n * r];
    par_rows(&mut out, r, |first, part| {
        for (i, row) in part.chunks_mut(r.max(1)).enumerate() {
            let xi = &x[(first + i) * d..(first + i + 1) * d];
            for (k, o) in row.iter_mut().enumerate() {
                let dot: f64 = u[k * d..(k + 1) * d]
                    .iter()
                    .zip(xi)
                    .map(|(a, &b)| a * f64::from(b))
                    .sum();
                *o = s[k] * dot;
            }
        }
    });
    out
}

/// Class means and the whitening of the tied covariance's pseudo-inverse.
struct Gaussian {
    /// Whitened class means, one per class present in the reference: `(class, (r,))`.
    means: Vec<Vec<f64>>,
    u: Vec<f64>,
    s: Vec<f64>,
}

fn mahalanobis(f: &Features, r: &Reference) -> Result<Vec<f32>, ScoreError> {
    let d = f.dim();
    let g = r.memo("mahalanobis", |r| {
        let c = r.features().classes();
        let x = r.features().as_slice();
        let mut sums = vec![vec![0f64; d]; c];
        let mut counts = vec![0usize; c];
        for (i, &l) in r.labels().iter().enumerate() {
            counts[l] += 1;
            for (s, &v) in sums[l].iter_mut().zip(&x[i * d..(i + 1) * d]) {
                *s += f64::from(v);
            }
        }
        let means: Vec<Vec<f64>> = sums
            .iter()
            .zip(&counts)
            .map(|(s, &n)| s.iter().map(|v| v / n.max(1) as f64).collect())
            .collect();
        let cov = covariance(x, d, |i| means[r.labels()[i]].clone());
        let (u, s) = pinvh_factor(&cov, d)?;
        let rank = s.len();
        let white = |mu: &[f64]| -> Vec<f64> {
            (0..rank)
                .map(|k| {
                    s[k] * u[k * d..(k + 1) * d]
                        .iter()
                        .zip(mu)
                        .map(|(a, b)| a * b)
                        .sum::<f64>()
                })
                .collect()
        };
        Ok(Gaussian {
            means: (0..c)
                .filter(|&l| counts[l] > 0)
                .map(|l| white(&means[l]))
                .collect(),
            u,
            s,
        })
    })?;
    let r_dim = g.s.len();
    let y = whiten(f.as_slice(), d, &g.u, &g.s);
    Ok((0..f.n())
        .map(|i| {
            let yi = &y[i * r_dim..(i + 1) * r_dim];
            g.means
                .iter()
                .map(|mu| {
                    yi.iter()
                        .zip(mu)
                        .map(|(a, b)| (a - b) * (a - b))
                        .sum::<f64>()
                })
                .fold(f64::INFINITY, f64::min) as f32
        })
        .collect())
}

/// ViM's fitted origin, residual basis and scale.
struct VimFit {
    origin: Vec<f64>,
    /// The residual basis `(d - D, d)`, unit rows.
    ns: Vec<f64>,
    alpha: f64,
}

/// The paper's principal dimension for feature dimension `d`.
fn vim_default_dim(d: usize) -> usize {
    if d >= 2048 {
        1000
    } else if d >= 768 {
        512
    } else {
        d / 2
    }
}

fn vim(f: &Features, r: &Reference, dim: Option<usize>) -> Result<Vec<f32>, ScoreError> {
    let d = f.dim();
    let dim = dim.unwrap_or_else(|| vim_default_dim(d));
    if dim == 0 || dim >= d {
        return Err(ScoreError::Setting {
            setting: "vim_dim",
            why: format!("the principal dimension {dim} must be between 1 and the feature dimension {d} minus 1"),
        });
    }
    let fit = r.memo(&format!("vim-{dim}"), |r| {
        let (w, b) = (r.features().weight(), r.features().bias());
        let c = b.len();
        // o = -pinv(W) b.
        let origin: Vec<f64> = crate::linalg::pinv_apply(w, c, d, b)
            .into_iter()
            .map(|v| -v)
            .collect();
        let x = r.features().as_slice();
        let cov = covariance(x, d, |_| origin.clone());
        let (_, vectors) = eigh(&cov, d)?;
        let ns = vectors[dim * d..].to_vec();
        let m = r.len();
        let (mut logit_sum, mut residual_sum) = (0.0, 0.0);
        let mut h = vec![0f64; d];
        for i in 0..m {
            for (hj, &v) in h.iter_mut().zip(&x[i * d..(i + 1) * d]) {
                *hj = f64::from(v);
            }
            logit_sum += logits(&h, w, b)
                .into_iter()
                .fold(f64::NEG_INFINITY, f64::max);
            residual_sum += residual(&h, &origin, &ns);
        }
        if residual_sum <= 0.0 {
            return Err(ScoreError::Setting {
                setting: "vim_dim",
                why: format!(
                    "the training features have no variance beyond {dim} principal dimensions"
                ),
            });
        }
        Ok(VimFit {
            origin,
            ns,
            alpha: (logit_sum / m as f64) / (residual_sum / m as f64),
        })
    })?;
    Ok(per_row(f, |h| {
        fit.alpha * residual(h, &fit.origin, &fit.ns) - logsumexp(&logits(h, f.weight(), f.bias()))
    }))
}

/// `|(h - o) NS|`: the norm of the residual's coordinates in the basis `ns`.
fn residual(h: &[f64], origin: &[f64], ns: &[f64]) -> f64 {
    let d = h.len();
    let z: Vec<f64> = h.iter().zip(origin).map(|(a, b)| a - b).collect();
    ns.chunks_exact(d)
        .map(|v| {
            let t: f64 = v.iter().zip(&z).map(|(a, b)| a * b).sum();
            t * t
        })
        .sum::<f64>()
        .sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn features(h: Vec<f32>, n: usize, d: usize) -> Features {
        // Two classes: z_0 = h_0, z_1 = h_1.
        let mut w = vec![0.0; 2 * d];
        w[0] = 1.0;
        w[d + 1] = 1.0;
        Features::new(h, n, d, w, vec![0.0, 0.0]).unwrap()
    }

    #[test]
    fn logit_scores_match_hand_worked_values() {
        let f = features(vec![1.0, 2.0, 0.0, 0.0], 2, 2);
        let ev = Evidence {
            features: Some(f),
            ..Evidence::default()
        };
        let ml = PostHoc::MaxLogit.score(&ev).unwrap();
        assert_eq!(ml, vec![-2.0, 0.0]);
        let e = PostHoc::Energy.score(&ev).unwrap();
        assert!((e[0] - -(2.0 + (1.0 + (-1f64).exp()).ln()) as f32).abs() < 1e-6);
        assert!((e[1] + 2f32.ln()).abs() < 1e-6);
        // GEN at p = (1/2, 1/2), gamma 1: 2 * 1/4.
        let g = PostHoc::Gen { gamma: 1.0, m: 100 }.score(&ev).unwrap();
        assert!((g[1] - 0.5).abs() < 1e-6);
    }

    #[test]
    fn ash_keeps_the_top_entries_and_rescales() {
        // h = (4, 1, 0, 3), k = 2: s1 = 8, kept 4 and 3 (s2 = 7), factor e^(8/7).
        let out = ash(&[4.0, 1.0, 0.0, 3.0], 2);
        let f = (8.0f64 / 7.0).exp();
        assert_eq!(out, vec![4.0 * f, 0.0, 0.0, 3.0 * f]);
        assert_eq!(
            scale(&[4.0, 1.0, 0.0, 3.0], 2),
            vec![4.0 * f, f, 0.0, 3.0 * f]
        );
        assert_eq!(ash_b(&[4.0, 1.0, 0.0, 3.0], 2), vec![4.0, 0.0, 0.0, 4.0]);
        assert_eq!(kept(512, 90.0).unwrap(), 51);
        assert_eq!(kept(10, 85.0).unwrap(), 2); // round(8.5) = 8 (ties to even)
        assert!(kept(10, 100.0).is_err());
    }

    #[test]
    fn reference_scores_refuse_a_missing_or_mismatched_reference() {
        let f = features(vec![1.0, 2.0], 1, 2);
        let ev = Evidence {
            features: Some(f.clone()),
            ..Evidence::default()
        };
        assert!(matches!(
            PostHoc::Knn { k: 1 }.score(&ev),
            Err(ScoreError::Missing { .. })
        ));
        let r = Reference::new(features(vec![0.0, 1.0, 1.0, 0.0], 2, 2), vec![1, 0]).unwrap();
        let ev = Evidence {
            features: Some(f),
            reference: Some(Arc::new(r)),
            ..Evidence::default()
        };
        // Normalised query (1, 2)/sqrt5; bank (0, 1), (1, 0): nearest is (0, 1).
        let s = PostHoc::Knn { k: 1 }.score(&ev).unwrap();
        let q = [1.0 / 5f64.sqrt(), 2.0 / 5f64.sqrt()];
        let want = (q[0] * q[0] + (q[1] - 1.0) * (q[1] - 1.0)).sqrt();
        assert!((f64::from(s[0]) - want).abs() < 1e-6);
        // Two training rows: k = 3 takes the second, the farthest.
        let far = ((q[0] - 1.0) * (q[0] - 1.0) + q[1] * q[1]).sqrt();
        let s3 = PostHoc::Knn { k: 3 }.score(&ev).unwrap();
        assert!((f64::from(s3[0]) - far).abs() < 1e-6);
        assert!(PostHoc::Knn { k: 0 }.score(&ev).is_err());
    }

    #[test]
    fn mahalanobis_with_identity_covariance_is_the_squared_distance() {
        // Class 0 at (+-1, 0) around (0, 0)... built so the tied covariance is diag(1, 1):
        // rows (1,1), (-1,-1), (1,-1), (-1,1) of class 0 (mean 0), same shifted by (10, 0)
        // for class 1.
        let mut h = vec![1.0, 1.0, -1.0, -1.0, 1.0, -1.0, -1.0, 1.0];
        h.extend([11.0, 1.0, 9.0, -1.0, 11.0, -1.0, 9.0, 1.0]);
        let r = Reference::new(features(h, 8, 2), vec![0, 0, 0, 0, 1, 1, 1, 1]).unwrap();
        let ev = Evidence {
            features: Some(features(vec![2.0, 0.0, 8.0, 3.0], 2, 2)),
            reference: Some(Arc::new(r)),
            ..Evidence::default()
        };
        let s = PostHoc::Mahalanobis.score(&ev).unwrap();
        assert!(
            (s[0] - 4.0).abs() < 1e-5 && (s[1] - 13.0).abs() < 1e-5,
            "{s:?}"
        );
    }
}
