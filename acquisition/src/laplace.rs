//! Last-layer Laplace (Kristiadi, Hein & Hennig, ICML 2020; Daxberger et al., "Laplace
//! Redux", NeurIPS 2021): a Gaussian posterior over a trained network's last linear layer
//! `theta = (W (c, d), b (c,))`, centred at the trained weights, whose precision is the
//! generalised Gauss-Newton of the summed cross-entropy over the items the model was trained
//! on (the [`Reference`]) plus a scalar prior precision `delta`:
//!
//! `P = sum_n J_n^T (diag p_n - p_n p_n^T) J_n + delta I`, `J_n = [I_c (x) h_n^T, I_c]`.
//!
//! Three structures of the Gauss-Newton ([`Hessian`]):
//! - `diag`: its diagonal, `sum_n p_nk (1 - p_nk) h_nj^2` for `W_kj` (`h_nj = 1` for `b_k`);
//! - `kron`: KFAC, the weight block `G (x) A` with `G = sum_n (diag p_n - p_n p_n^T)` and
//!   `A = (1/m) sum_n h_n h_n^T`, the bias block `G` (weight and bias kept apart, as
//!   laplace-torch's curvlinops backend does);
//! - `full`: the whole `(c (d + 1))^2` matrix, for small heads ([`MAX_FULL_PARAMS`]).
//!
//! The prior precision is given, or fitted by maximising the Laplace approximation of the log
//! marginal likelihood
//! `log Z(delta) = -L(theta) - (1/2) (sum_i ln(lambda_i + delta) - P ln delta + delta ||theta||^2)`
//! (`L` the summed cross-entropy, `lambda_i` the Gauss-Newton's `P` eigenvalues under the
//! chosen structure). Its stationary point solves
//! `sum_i lambda_i / (lambda_i + delta) = delta ||theta||^2` (MacKay's effective number of
//! parameters), whose left side falls and right side rises with `delta`: bisection on
//! `ln delta` finds that one root to rounding, where laplace-torch takes 100 Adam steps
//! toward it.
//!
//! The last layer is linear in `theta`, so the logits of a candidate `h` are exactly
//! `f ~ N(W h + b, J Sigma J^T)` (the linearised and the network predictive agree).
//! [`LaplacePosterior::probit`] is the probit approximation `softmax(kappa f_mean)`,
//! `kappa_k = 1 / sqrt(1 + pi/8 Var f_k)`; [`LaplacePosterior::draws`] samples weights
//! `theta_s ~ N(theta, Sigma)` from the caller's RNG, each draw shared by every candidate
//! (what BatchBALD's and EPIG's joint draws need). All sums run in `f64`.

use crate::kernels::matmul_nt;
use crate::linalg::{eigh, logsumexp, normal, softmax};
use crate::scorers::entropy;
use crate::{Evidence, Features, Needs, Probs, Reference, Samples, ScoreError, Scorer};
use rand::RngCore;
use std::sync::Arc;

/// The most last-layer parameters `c (d + 1)` the full Hessian is formed for (its
/// eigendecomposition is cubic in them): a larger head takes `kron` or `diag`.
pub const MAX_FULL_PARAMS: usize = 2048;

/// The largest Kronecker factor side (classes or features) `kron` decomposes.
pub const MAX_KRON_SIDE: usize = 4096;

/// The prior precisions a posterior takes, given or fitted: past them `1 / (lambda + delta)`
/// overflows or the prior swamps every datum.
pub const PRIOR_RANGE: (f64, f64) = (1e-12, 1e12);

/// The most candidates handled at once (fewer where their scratch would pass 32 MiB).
const BLOCK: usize = 1024;

/// The structure of the Gauss-Newton matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Hessian {
    /// The diagonal.
    Diag,
    /// Kronecker-factored (KFAC), weight and bias blocks apart.
    Kron,
    /// The whole matrix, for at most [`MAX_FULL_PARAMS`] parameters.
    Full,
}

impl Hessian {
    /// The name users type.
    pub fn name(self) -> &'static str {
        match self {
            Hessian::Diag => "diag",
            Hessian::Kron => "kron",
            Hessian::Full => "full",
        }
    }
}

/// How a last-layer Laplace posterior is fitted: the Hessian's structure and the prior
/// precision (`None`: fitted by the marginal likelihood).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LastLayerLaplace {
    /// The Gauss-Newton's structure.
    pub hessian: Hessian,
    /// A fixed prior precision `delta > 0`, or `None` to maximise the marginal likelihood.
    pub prior_precision: Option<f64>,
}

impl Default for LastLayerLaplace {
    /// Laplace Redux's recommendation: KFAC, the prior precision by the marginal likelihood.
    fn default() -> Self {
        Self {
            hessian: Hessian::Kron,
            prior_precision: None,
        }
    }
}

/// An eigendecomposition of an `(n, n)` matrix `E^T diag(values) E`.
#[derive(Debug, Clone)]
struct Eigen {
    /// `(n,)`, none below zero.
    values: Vec<f64>,
    /// `E (n, n)`: the unit eigenvectors as rows.
    vectors: Vec<f64>,
    /// `E^T (n, n)`, kept because draws and variances read the eigenvectors by column.
    transposed: Vec<f64>,
}

impl Eigen {
    /// `a (n, n)` decomposed, eigenvalues below zero (rounding of a semi-definite matrix)
    /// raised to zero.
    fn of(a: &[f64], n: usize) -> Result<Self, ScoreError> {
        let (mut values, vectors) = eigh(a, n)?;
        for v in &mut values {
            *v = v.max(0.0);
        }
        let transposed = transpose(&vectors, n, n);
        Ok(Self {
            values,
            vectors,
            transposed,
        })
    }

    /// `E^T diag(f(values)) E` `(n, n)`.
    fn matrix(&self, n: usize, f: impl Fn(f64) -> f64) -> Vec<f64> {
        let scaled: Vec<f64> = self
            .vectors
            .chunks_exact(n)
            .zip(&self.values)
            .flat_map(|(row, &l)| {
                let fl = f(l);
                row.iter().map(move |v| v * fl)
            })
            .collect();
        matmul_nt(&transpose(&scaled, n, n), &self.transposed, (n, n, n))
    }
}

/// The Gauss-Newton under its structure.
#[derive(Debug, Clone)]
enum Curvature {
    /// `w (c, d)` and `b (c,)`.
    Diag { w: Vec<f64>, b: Vec<f64> },
    /// `G (c, c)` and `A (d, d)` decomposed.
    Kron { g: Eigen, a: Eigen },
    /// The matrix decomposed, parameters in class-major order `k (d + 1) + j` (`j = d` the
    /// bias), and the posterior covariance `Sigma` in the same order once `delta` is known.
    Full { eig: Eigen, sigma: Vec<f64> },
}

/// A fitted last-layer Laplace posterior.
#[derive(Debug, Clone)]
pub struct LaplacePosterior {
    c: usize,
    d: usize,
    /// The trained weight `(c, d)`, the posterior mean.
    w: Vec<f64>,
    /// The trained bias `(c,)`.
    b: Vec<f64>,
    /// The prior precision.
    delta: f64,
    /// The summed cross-entropy of the training rows.
    loss: f64,
    /// `||theta||^2` over weight and bias.
    sq_norm: f64,
    curvature: Curvature,
}

impl LastLayerLaplace {
    /// The posterior of `reference`'s last layer given its rows and labels.
    ///
    /// # Errors
    /// An empty reference; a head too large for `full` ([`MAX_FULL_PARAMS`]) or `kron`
    /// ([`MAX_KRON_SIDE`]); a prior precision outside [`PRIOR_RANGE`]; an all-zero last layer
    /// when the prior precision is to be fitted (the marginal likelihood then grows without
    /// bound).
    pub fn fit(&self, reference: &Reference) -> Result<LaplacePosterior, ScoreError> {
        let f = reference.features();
        let (m, d, c) = (reference.len(), f.dim(), f.classes());
        if m == 0 {
            return Err(ScoreError::Shape {
                what: "Laplace's training rows (reference)",
                expected: "at least one labeled row".into(),
                got: "none".into(),
            });
        }
        self.check_size(c, d)?;
        if let Some(delta) = self.prior_precision {
            check_prior(delta)?;
        }
        let w: Vec<f64> = f.weight().iter().map(|&v| f64::from(v)).collect();
        let b: Vec<f64> = f.bias().iter().map(|&v| f64::from(v)).collect();
        let h: Vec<f64> = f.as_slice().iter().map(|&v| f64::from(v)).collect();
        let (p, loss) = softmax_rows(&h, &w, &b, (m, c, d), Some(reference.labels()));
        let curvature = match self.hessian {
            Hessian::Diag => diag_curvature(&h, &p, (m, c, d)),
            Hessian::Kron => kron_curvature(&h, &p, (m, c, d))?,
            Hessian::Full => full_curvature(&h, &p, (m, c, d))?,
        };
        let sq_norm = w.iter().chain(&b).map(|v| v * v).sum();
        let mut post = LaplacePosterior {
            c,
            d,
            w,
            b,
            delta: 1.0,
            loss,
            sq_norm,
            curvature,
        };
        post.delta = match self.prior_precision {
            Some(delta) => delta,
            None => post.fitted_prior()?,
        };
        post.finish();
        Ok(post)
    }

    /// [`LastLayerLaplace::fit`] once per reference and setting, shared by every chunk of
    /// candidates scored against it.
    pub fn memo(&self, reference: &Reference) -> Result<Arc<LaplacePosterior>, ScoreError> {
        let key = format!(
            "laplace-{}-{:?}",
            self.hessian.name(),
            self.prior_precision.map(f64::to_bits)
        );
        reference.memo(&key, |r| self.fit(r))
    }

    /// Refuses a head of `c` classes and `d` features too large for the structure, before
    /// anything is allocated.
    fn check_size(&self, c: usize, d: usize) -> Result<(), ScoreError> {
        let params = c.saturating_mul(d + 1);
        let why = match self.hessian {
            Hessian::Full if params > MAX_FULL_PARAMS => format!(
                "the full Hessian of a last layer with {params} parameters ({c} classes x \
                 {d} features + bias) is above its limit of {MAX_FULL_PARAMS}: use kron or diag"
            ),
            Hessian::Kron if c.max(d) > MAX_KRON_SIDE => format!(
                "the Kronecker factors of a last layer with {c} classes and {d} features are \
                 above their limit of {MAX_KRON_SIDE} rows: use diag"
            ),
            _ => return Ok(()),
        };
        Err(ScoreError::Setting {
            setting: "hessian",
            why,
        })
    }
}

fn check_prior(delta: f64) -> Result<(), ScoreError> {
    let (lo, hi) = PRIOR_RANGE;
    if (lo..=hi).contains(&delta) {
        Ok(())
    } else {
        Err(ScoreError::Setting {
            setting: "prior_precision",
            why: format!("{delta}; expected a number from {lo:e} to {hi:e}"),
        })
    }
}

/// Row-wise `softmax(h W^T + b)` `(m, c)` and, given labels, the summed cross-entropy.
fn softmax_rows(
    h: &[f64],
    w: &[f64],
    b: &[f64],
    (m, c, d): (usize, usize, usize),
    labels: Option<&[usize]>,
) -> (Vec<f64>, f64) {
    let mut z = matmul_nt(h, w, (m, c, d));
    let mut loss = 0.0;
    for (i, row) in z.chunks_exact_mut(c).enumerate() {
        for (v, bk) in row.iter_mut().zip(b) {
            *v += bk;
        }
        let lse = logsumexp(row);
        if let Some(y) = labels {
            loss += lse - row[y[i]];
        }
        for v in row.iter_mut() {
            *v = (*v - lse).exp();
        }
    }
    (z, loss)
}

/// `x (r, s)` transposed to `(s, r)`.
fn transpose(x: &[f64], r: usize, s: usize) -> Vec<f64> {
    let mut t = vec![0.0; x.len()];
    for i in 0..r {
        for j in 0..s {
            t[j * r + i] = x[i * s + j];
        }
    }
    t
}

/// Block `(k, l)` `(e, e)` of an `(n, n)` matrix in class-major order (`e` values per class).
fn class_block(m: &[f64], n: usize, (k, l): (usize, usize), e: usize) -> Vec<f64> {
    (0..e)
        .flat_map(|i| {
            m[(k * e + i) * n + l * e..(k * e + i) * n + (l + 1) * e]
                .iter()
                .copied()
        })
        .collect()
}

/// The Gauss-Newton's diagonal from the rows `h (m, d)` and their probabilities `p (m, c)`.
fn diag_curvature(h: &[f64], p: &[f64], (m, c, d): (usize, usize, usize)) -> Curvature {
    let q: Vec<f64> = p.iter().map(|v| v * (1.0 - v)).collect();
    let h2: Vec<f64> = h.iter().map(|v| v * v).collect();
    let w = matmul_nt(&transpose(&q, m, c), &transpose(&h2, m, d), (c, d, m));
    let mut b = vec![0.0; c];
    for row in q.chunks_exact(c) {
        for (s, v) in b.iter_mut().zip(row) {
            *s += v;
        }
    }
    Curvature::Diag { w, b }
}

/// `G = sum_n diag p_n - p_n p_n^T` `(c, c)`.
fn output_factor(p: &[f64], (m, c): (usize, usize)) -> Vec<f64> {
    let pt = transpose(p, m, c);
    let mut g = matmul_nt(&pt, &pt, (c, c, m));
    for (k, row) in pt.chunks_exact(m).enumerate() {
        g[k * c + k] -= row.iter().sum::<f64>();
    }
    g.iter_mut().for_each(|v| *v = -*v);
    g
}

/// KFAC's factors `G (c, c)` and `A (d, d)` from `h (m, d)` and `p (m, c)`, decomposed.
fn kron_curvature(
    h: &[f64],
    p: &[f64],
    (m, c, d): (usize, usize, usize),
) -> Result<Curvature, ScoreError> {
    let ht = transpose(h, m, d);
    let mut a = matmul_nt(&ht, &ht, (d, d, m));
    a.iter_mut().for_each(|v| *v /= m as f64);
    Ok(Curvature::Kron {
        g: Eigen::of(&output_factor(p, (m, c)), c)?,
        a: Eigen::of(&a, d)?,
    })
}

/// The whole Gauss-Newton `(c (d + 1))^2` in class-major order from `h (m, d)` and
/// `p (m, c)`, decomposed.
fn full_curvature(
    h: &[f64],
    p: &[f64],
    (m, c, d): (usize, usize, usize),
) -> Result<Curvature, ScoreError> {
    let e = d + 1;
    let n = c * e;
    // The rows with a 1 appended, transposed `(e, m)`: block (k, l) of the Gauss-Newton is
    // `sum_n H_n[k, l] h~_n h~_n^T`, one product of the rows weighted by `H_n[k, l]`.
    let mut aug = Vec::with_capacity(m * e);
    for row in h.chunks_exact(d) {
        aug.extend_from_slice(row);
        aug.push(1.0);
    }
    let at = transpose(&aug, m, e);
    let mut ggn = vec![0.0; n * n];
    let mut weighted = vec![0.0; e * m];
    for k in 0..c {
        for l in k..c {
            for (dst, src) in weighted.chunks_exact_mut(m).zip(at.chunks_exact(m)) {
                for (i, (o, &v)) in dst.iter_mut().zip(src).enumerate() {
                    let (pk, pl) = (p[i * c + k], p[i * c + l]);
                    *o = v * (if k == l { pk } else { 0.0 } - pk * pl);
                }
            }
            let block = matmul_nt(&weighted, &at, (e, e, m));
            for i in 0..e {
                for j in 0..e {
                    ggn[(k * e + i) * n + l * e + j] = block[i * e + j];
                    ggn[(l * e + j) * n + k * e + i] = block[i * e + j];
                }
            }
        }
    }
    Ok(Curvature::Full {
        eig: Eigen::of(&ggn, n)?,
        sigma: Vec::new(),
    })
}

impl LaplacePosterior {
    /// The prior precision `delta` (given, or fitted).
    pub fn prior_precision(&self) -> f64 {
        self.delta
    }

    /// The number of last-layer parameters `c (d + 1)`.
    pub fn params(&self) -> usize {
        self.c * (self.d + 1)
    }

    /// The summed cross-entropy of the training rows at the trained weights.
    pub fn loss(&self) -> f64 {
        self.loss
    }

    /// The Gauss-Newton's eigenvalues under its structure, `P` of them.
    fn eigenvalues(&self) -> Vec<f64> {
        match &self.curvature {
            Curvature::Diag { w, b } => w.iter().chain(b).map(|v| v.max(0.0)).collect(),
            Curvature::Kron { g, a } => {
                let mut out = Vec::with_capacity(self.params());
                for &lg in &g.values {
                    out.extend(a.values.iter().map(|la| lg * la));
                }
                out.extend_from_slice(&g.values);
                out
            }
            Curvature::Full { eig, .. } => eig.values.clone(),
        }
    }

    /// The Laplace approximation of the log marginal likelihood at prior precision
    /// `delta > 0` (NaN at `delta <= 0`, where it is undefined).
    pub fn log_marginal_likelihood(&self, delta: f64) -> f64 {
        let log_det: f64 = self.eigenvalues().iter().map(|l| (l + delta).ln()).sum();
        let ratio = log_det - self.params() as f64 * delta.ln();
        -self.loss - 0.5 * (ratio + delta * self.sq_norm)
    }

    /// The prior precision that maximises the marginal likelihood: the root of
    /// `sum_i lambda_i / (lambda_i + delta) - delta ||theta||^2`, falling in `delta`, by
    /// bisection on `ln delta` within [`PRIOR_RANGE`] (a bound is returned when the root lies
    /// past it).
    fn fitted_prior(&self) -> Result<f64, ScoreError> {
        if self.sq_norm == 0.0 {
            return Err(ScoreError::Setting {
                setting: "prior_precision",
                why: "the last layer is all zeros, so the marginal likelihood grows without \
                      bound in the prior precision: give one"
                    .into(),
            });
        }
        let lambdas = self.eigenvalues();
        let slope = |t: f64| {
            let delta = t.exp();
            lambdas.iter().map(|l| l / (l + delta)).sum::<f64>() - delta * self.sq_norm
        };
        let (mut lo, mut hi) = (PRIOR_RANGE.0.ln(), PRIOR_RANGE.1.ln());
        if slope(lo) <= 0.0 {
            return Ok(PRIOR_RANGE.0);
        }
        if slope(hi) >= 0.0 {
            return Ok(PRIOR_RANGE.1);
        }
        for _ in 0..200 {
            let mid = 0.5 * (lo + hi);
            if mid <= lo || mid >= hi {
                break;
            }
            if slope(mid) > 0.0 {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Ok((0.5 * (lo + hi)).exp().clamp(PRIOR_RANGE.0, PRIOR_RANGE.1))
    }

    /// Forms what the predictive needs once `delta` is known (the full covariance).
    fn finish(&mut self) {
        let delta = self.delta;
        if let Curvature::Full { eig, sigma } = &mut self.curvature {
            *sigma = eig.matrix(eig.values.len(), |l| 1.0 / (l + delta));
        }
    }

    /// The posterior precision `(P, P)` in laplace-torch's parameter order (`W` row by row,
    /// then `b`), for heads of at most [`MAX_FULL_PARAMS`] parameters.
    pub fn precision(&self) -> Result<Vec<f64>, ScoreError> {
        let (c, d, n) = (self.c, self.d, self.params());
        if n > MAX_FULL_PARAMS {
            return Err(ScoreError::Setting {
                setting: "hessian",
                why: format!("a dense precision of {n} parameters is above {MAX_FULL_PARAMS}"),
            });
        }
        // Class-major augmented index `k (d + 1) + j` to laplace-torch's.
        let torch = |k: usize, j: usize| if j == d { c * d + k } else { k * d + j };
        let mut out = vec![0.0; n * n];
        match &self.curvature {
            Curvature::Diag { w, b } => {
                for k in 0..c {
                    for j in 0..d {
                        out[(k * d + j) * n + k * d + j] = w[k * d + j];
                    }
                    out[(c * d + k) * n + c * d + k] = b[k];
                }
            }
            Curvature::Kron { g, a } => {
                let (gm, am) = (g.matrix(c, |l| l), a.matrix(d, |l| l));
                for k in 0..c {
                    for l in 0..c {
                        for i in 0..d {
                            for j in 0..d {
                                out[(k * d + i) * n + l * d + j] = gm[k * c + l] * am[i * d + j];
                            }
                        }
                        out[(c * d + k) * n + c * d + l] = gm[k * c + l];
                    }
                }
            }
            Curvature::Full { eig, .. } => {
                let e = d + 1;
                let ggn = eig.matrix(n, |l| l);
                for r in 0..n {
                    for s in 0..n {
                        out[torch(r / e, r % e) * n + torch(s / e, s % e)] = ggn[r * n + s];
                    }
                }
            }
        }
        for i in 0..n {
            out[i * n + i] += self.delta;
        }
        Ok(out)
    }

    fn check_features(&self, f: &Features) -> Result<(), ScoreError> {
        if f.dim() != self.d || f.classes() != self.c {
            return Err(ScoreError::Shape {
                what: "candidate features",
                expected: format!("(n, {}) with {} classes", self.d, self.c),
                got: format!("(n, {}) with {} classes", f.dim(), f.classes()),
            });
        }
        let same = |a: &[f32], b: &[f64]| a.iter().zip(b).all(|(&x, &y)| f64::from(x) == y);
        if !same(f.weight(), &self.w) || !same(f.bias(), &self.b) {
            return Err(ScoreError::Shape {
                what: "candidate features",
                expected: "the last layer the posterior was fitted to".into(),
                got: "another last layer".into(),
            });
        }
        Ok(())
    }

    /// Rows of candidates handled at once when each carries `width` values of scratch (about
    /// 32 MiB of `f64`, at least one row, at most [`BLOCK`]).
    fn block_rows(width: usize) -> usize {
        ((1usize << 22) / width.max(1)).clamp(1, BLOCK)
    }

    /// The candidates `f` in blocks of at most `rows` rows, each handed to
    /// `each(h (r, d), mean (r, c))` in `f64`.
    fn blocks(
        &self,
        f: &Features,
        rows: usize,
        mut each: impl FnMut(&[f64], &[f64]),
    ) -> Result<(), ScoreError> {
        self.check_features(f)?;
        let (c, d) = (self.c, self.d);
        for first in (0..f.n()).step_by(rows) {
            let r = rows.min(f.n() - first);
            let h: Vec<f64> = f.as_slice()[first * d..(first + r) * d]
                .iter()
                .map(|&v| f64::from(v))
                .collect();
            let mut mean = matmul_nt(&h, &self.w, (r, c, d));
            for row in mean.chunks_exact_mut(c) {
                row.iter_mut().zip(&self.b).for_each(|(v, b)| *v += b);
            }
            each(&h, &mean);
        }
        Ok(())
    }

    /// The rows `h (r, d)` with a 1 appended, `(r, d + 1)`.
    fn augmented(&self, h: &[f64]) -> Vec<f64> {
        h.chunks_exact(self.d)
            .flat_map(|row| row.iter().copied().chain(std::iter::once(1.0)))
            .collect()
    }

    /// Kron's `s (r, c)`: the logits' covariance of row `i` is `E_G^T diag(s_i) E_G`, with
    /// `s_ir = sum_j u_j^2 / (lg_r la_j + delta) + 1 / (lg_r + delta)` and `u = E_A h`: in the
    /// factors' eigenbases the Kronecker-factored precision is diagonal.
    fn kron_scales(&self, g: &Eigen, a: &Eigen, h: &[f64], r: usize) -> Vec<f64> {
        let (c, d, delta) = (self.c, self.d, self.delta);
        let u2: Vec<f64> = matmul_nt(h, &a.vectors, (r, d, d))
            .into_iter()
            .map(|v| v * v)
            .collect();
        let inv: Vec<f64> = g
            .values
            .iter()
            .flat_map(|lg| a.values.iter().map(move |la| 1.0 / (lg * la + delta)))
            .collect();
        let mut s = matmul_nt(&u2, &inv, (r, c, d));
        for row in s.chunks_exact_mut(c) {
            for (v, lg) in row.iter_mut().zip(&g.values) {
                *v += 1.0 / (lg + delta);
            }
        }
        s
    }

    /// The variances of the logits `(r, c)` of the rows `h (r, d)`: the diagonal of
    /// `J Sigma J^T`, without forming it.
    fn variances(&self, h: &[f64], r: usize) -> Vec<f64> {
        let (c, d, delta) = (self.c, self.d, self.delta);
        match &self.curvature {
            Curvature::Diag { w, b } => {
                let var: Vec<f64> = w.iter().map(|v| 1.0 / (v + delta)).collect();
                let h2: Vec<f64> = h.iter().map(|v| v * v).collect();
                let mut v = matmul_nt(&h2, &var, (r, c, d));
                for row in v.chunks_exact_mut(c) {
                    row.iter_mut()
                        .zip(b)
                        .for_each(|(v, bk)| *v += 1.0 / (bk + delta));
                }
                v
            }
            Curvature::Kron { g, a } => {
                // var_k = sum_r E_G[r, k]^2 s_r.
                let sq: Vec<f64> = g.transposed.iter().map(|v| v * v).collect();
                matmul_nt(&self.kron_scales(g, a, h, r), &sq, (r, c, c))
            }
            Curvature::Full { sigma, .. } => {
                let (e, aug) = (d + 1, self.augmented(h));
                let mut v = vec![0.0; r * c];
                for k in 0..c {
                    let block = class_block(sigma, c * e, (k, k), e);
                    let y = matmul_nt(&aug, &block, (r, e, e));
                    for (i, (yi, hi)) in y.chunks_exact(e).zip(aug.chunks_exact(e)).enumerate() {
                        v[i * c + k] = yi.iter().zip(hi).map(|(a, b)| a * b).sum();
                    }
                }
                v
            }
        }
    }

    /// `J Sigma J^T` `(r, c, c)` of the rows `h (r, d)`.
    fn covariances(&self, h: &[f64], r: usize) -> Vec<f64> {
        let (c, d) = (self.c, self.d);
        let mut out = vec![0.0; r * c * c];
        match &self.curvature {
            Curvature::Diag { .. } => {
                for (i, v) in self.variances(h, r).chunks_exact(c).enumerate() {
                    for (k, vk) in v.iter().enumerate() {
                        out[i * c * c + k * c + k] = *vk;
                    }
                }
            }
            Curvature::Kron { g, a } => {
                for (i, si) in self.kron_scales(g, a, h, r).chunks_exact(c).enumerate() {
                    // E_G^T diag(s_i) E_G, E_G's rows the eigenvectors.
                    let scaled: Vec<f64> = g
                        .transposed
                        .chunks_exact(c)
                        .flat_map(|row| row.iter().zip(si).map(|(e, s)| e * s))
                        .collect();
                    let cov = matmul_nt(&scaled, &g.transposed, (c, c, c));
                    out[i * c * c..(i + 1) * c * c].copy_from_slice(&cov);
                }
            }
            Curvature::Full { sigma, .. } => {
                let (e, aug) = (d + 1, self.augmented(h));
                for k in 0..c {
                    for l in 0..c {
                        let block = class_block(sigma, c * e, (l, k), e);
                        let y = matmul_nt(&aug, &block, (r, e, e));
                        for (i, (yi, hi)) in y.chunks_exact(e).zip(aug.chunks_exact(e)).enumerate()
                        {
                            out[i * c * c + k * c + l] =
                                yi.iter().zip(hi).map(|(a, b)| a * b).sum();
                        }
                    }
                }
            }
        }
        out
    }

    /// The logits' posterior mean `(n, c)` and covariance `(n, c, c)` of the candidates `f`
    /// (laplace-torch's `_glm_predictive_distribution`), in `f64`. Refused when the
    /// covariances would pass `2^27` values (1 GiB): [`LaplacePosterior::probit`] and
    /// [`LaplacePosterior::draws`] never form them.
    pub fn functional_distribution(
        &self,
        f: &Features,
    ) -> Result<(Vec<f64>, Vec<f64>), ScoreError> {
        let c = self.c;
        let values = f.n().checked_mul(c * c).filter(|&v| v <= 1 << 27);
        let Some(values) = values else {
            return Err(ScoreError::Shape {
                what: "functional covariances",
                expected: "at most 2^27 values (n x c x c)".into(),
                got: format!("{} candidates x {c} x {c}", f.n()),
            });
        };
        let mut means = Vec::with_capacity(f.n() * c);
        let mut covs = Vec::with_capacity(values);
        self.blocks(f, Self::block_rows(c * c), |h, mean| {
            means.extend_from_slice(mean);
            covs.extend(self.covariances(h, mean.len() / c));
        })?;
        Ok((means, covs))
    }

    /// The probit approximation of the predictive `(n, c)`:
    /// `softmax(f_mean / sqrt(1 + pi/8 Var f))`, the variances alone formed.
    pub fn probit(&self, f: &Features) -> Result<Probs, ScoreError> {
        let c = self.c;
        let mut out = Vec::with_capacity(f.n() * c);
        let width = c.max(self.d + 1).saturating_mul(2);
        self.blocks(f, Self::block_rows(width), |h, mean| {
            let var = self.variances(h, mean.len() / c);
            for (m, v) in mean.chunks_exact(c).zip(var.chunks_exact(c)) {
                let z: Vec<f64> = m
                    .iter()
                    .zip(v)
                    .map(|(m, v)| m / (1.0 + std::f64::consts::PI / 8.0 * v).sqrt())
                    .collect();
                out.extend(softmax(&z).into_iter().map(|p| p as f32));
            }
        })?;
        Probs::new(out, f.n(), c)
    }

    /// One weight draw `theta_s ~ N(theta, Sigma)`: `W (c, d)` and `b (c,)`, from
    /// `c (d + 1)` standard normals of `rng` (in the posterior's own coordinates: `W`'s then
    /// `b`'s for diag, the Kronecker eigenbasis for kron, the eigenbasis for full).
    pub fn sample_weights(&self, rng: &mut dyn RngCore) -> (Vec<f64>, Vec<f64>) {
        let eps: Vec<f64> = (0..self.params()).map(|_| normal(rng)).collect();
        let (mut w, mut b) = (self.w.clone(), self.b.clone());
        let (dw, db) = match &self.curvature {
            Curvature::Diag { w: hw, b: hb } => self.diag_noise(hw, hb, &eps),
            Curvature::Kron { g, a } => self.kron_noise(g, a, &eps),
            Curvature::Full { eig, .. } => self.full_noise(eig, &eps),
        };
        w.iter_mut().zip(&dw).for_each(|(o, v)| *o += v);
        b.iter_mut().zip(&db).for_each(|(o, v)| *o += v);
        (w, b)
    }

    /// `eps / sqrt(lambda + delta)` per parameter.
    fn diag_noise(&self, hw: &[f64], hb: &[f64], eps: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let scale = |(e, l): (&f64, &f64)| e / (l + self.delta).sqrt();
        let cd = self.c * self.d;
        (
            eps[..cd].iter().zip(hw).map(scale).collect(),
            eps[cd..].iter().zip(hb).map(scale).collect(),
        )
    }

    /// `Sigma^(1/2) eps`: `E_G^T Z E_A` with `Z_rj = eps_rj / sqrt(lg_r la_j + delta)` for the
    /// weight, `E_G^T (eps_r / sqrt(lg_r + delta))` for the bias.
    fn kron_noise(&self, g: &Eigen, a: &Eigen, eps: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let (c, d, delta) = (self.c, self.d, self.delta);
        let z: Vec<f64> = eps[..c * d]
            .iter()
            .enumerate()
            .map(|(i, e)| e / (g.values[i / d] * a.values[i % d] + delta).sqrt())
            .collect();
        let za = matmul_nt(&z, &a.transposed, (c, d, d));
        let dw = matmul_nt(&g.transposed, &transpose(&za, c, d), (c, d, c));
        let zb: Vec<f64> = eps[c * d..]
            .iter()
            .zip(&g.values)
            .map(|(e, lg)| e / (lg + delta).sqrt())
            .collect();
        (dw, matmul_nt(&g.transposed, &zb, (c, 1, c)))
    }

    /// `E^T (eps / sqrt(lambda + delta))`, unpacked from the class-major order.
    fn full_noise(&self, eig: &Eigen, eps: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let (c, d, n) = (self.c, self.d, self.params());
        let z: Vec<f64> = eps
            .iter()
            .zip(&eig.values)
            .map(|(e, l)| e / (l + self.delta).sqrt())
            .collect();
        let v = matmul_nt(&eig.transposed, &z, (n, 1, n));
        let (mut dw, mut db) = (vec![0.0; c * d], vec![0.0; c]);
        for (r, vr) in v.into_iter().enumerate() {
            let (k, j) = (r / (d + 1), r % (d + 1));
            if j == d {
                db[k] = vr;
            } else {
                dw[k * d + j] = vr;
            }
        }
        (dw, db)
    }

    /// `samples` predictive draws `(s, n, c)` of the candidates `f`, each from one weight
    /// draw ([`LaplacePosterior::sample_weights`], in order) shared by every candidate.
    pub fn draws(
        &self,
        f: &Features,
        samples: usize,
        rng: &mut dyn RngCore,
    ) -> Result<Samples, ScoreError> {
        self.check_features(f)?;
        let (n, c, d) = (f.n(), self.c, self.d);
        let h: Vec<f64> = f.as_slice().iter().map(|&v| f64::from(v)).collect();
        let mut draws = Vec::with_capacity(samples.max(1));
        for _ in 0..samples.max(1) {
            let (w, b) = self.sample_weights(rng);
            let (p, _) = softmax_rows(&h, &w, &b, (n, c, d), None);
            draws.push(Probs::new(p.into_iter().map(|v| v as f32).collect(), n, c)?);
        }
        Samples::new(draws)
    }
}

/// `la`: the entropy of the last-layer Laplace posterior's probit predictive (Kristiadi et
/// al. 2020), the posterior fitted once per reference (the items the model was trained on).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LaplaceEntropy {
    /// How the posterior is fitted.
    pub laplace: LastLayerLaplace,
}

impl Scorer for LaplaceEntropy {
    fn name(&self) -> &str {
        "la"
    }

    fn needs(&self) -> Needs {
        Needs {
            probs: false,
            reference: true,
            ..Needs::FEATURES
        }
    }

    fn score(&self, ev: &Evidence) -> Result<Vec<f32>, ScoreError> {
        let f = ev.features(self.name())?;
        let reference = ev.reference.as_deref().ok_or(ScoreError::Missing {
            scorer: self.name().to_string(),
            evidence: "the training features (reference evidence)",
        })?;
        let posterior = self.laplace.memo(reference)?;
        let p = posterior.probit(f)?;
        Ok(p.rows().map(|r| entropy(r) as f32).collect())
    }
}
