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

/// Candidates whose functional covariances are formed at once (bounds the scratch memory).
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

/// An eigendecomposition: values, and the unit eigenvectors as the rows of `vectors`.
#[derive(Debug, Clone)]
struct Eigen {
    values: Vec<f64>,
    vectors: Vec<f64>,
}

impl Eigen {
    /// `a (n, n)` decomposed, eigenvalues below zero (rounding of a semi-definite matrix)
    /// raised to zero.
    fn of(a: &[f64], n: usize) -> Result<Self, ScoreError> {
        let (mut values, vectors) = eigh(a, n)?;
        for v in &mut values {
            *v = v.max(0.0);
        }
        Ok(Self { values, vectors })
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
    w: Vec<f64>,
    b: Vec<f64>,
    delta: f64,
    loss: f64,
    sq_norm: f64,
    curvature: Curvature,
}

impl LastLayerLaplace {
    /// The posterior of `reference`'s last layer given its rows and labels.
    ///
    /// # Errors
    /// An empty reference; a head too large for the structure; a prior precision that is not
    /// a finite number above zero; an all-zero last layer when the prior precision is to be
    /// fitted (the marginal likelihood then grows without bound).
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
    if delta.is_finite() && delta > 0.0 {
        Ok(())
    } else {
        Err(ScoreError::Setting {
            setting: "prior_precision",
            why: format!("{delta}; expected a finite number above 0"),
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

    /// The Laplace approximation of the log marginal likelihood at prior precision `delta`.
    pub fn log_marginal_likelihood(&self, delta: f64) -> f64 {
        let log_det: f64 = self.eigenvalues().iter().map(|l| (l + delta).ln()).sum();
        let ratio = log_det - self.params() as f64 * delta.ln();
        -self.loss - 0.5 * (ratio + delta * self.sq_norm)
    }

    /// The prior precision that maximises the marginal likelihood: the root of
    /// `sum_i lambda_i / (lambda_i + delta) - delta ||theta||^2`, falling in `delta`, by
    /// bisection on `ln delta` within `[e^-30, e^30]` (a bound is returned when the root lies
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
        let (mut lo, mut hi) = (-30.0f64, 30.0f64);
        if slope(lo) <= 0.0 {
            return Ok(lo.exp());
        }
        if slope(hi) >= 0.0 {
            return Ok(hi.exp());
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
        Ok((0.5 * (lo + hi)).exp())
    }

    /// Forms what the predictive needs once `delta` is known (the full covariance).
    fn finish(&mut self) {
        let delta = self.delta;
        if let Curvature::Full { eig, sigma } = &mut self.curvature {
            let n = eig.values.len();
            let scaled: Vec<f64> = eig
                .vectors
                .chunks_exact(n)
                .zip(&eig.values)
                .flat_map(|(row, l)| row.iter().map(move |v| v / (l + delta)))
                .collect();
            // Sigma = E^T diag(1 / (lambda + delta)) E, E's rows the eigenvectors.
            *sigma = matmul_nt(
                &transpose(&scaled, n, n),
                &transpose(&eig.vectors, n, n),
                (n, n, n),
            );
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
                let (gm, am) = (g.matrix(c), a.matrix(d));
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
                let ggn = eig.matrix(n);
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

    /// The logits' posterior mean `(n, c)` and covariances `(n, c, c)` of the candidates
    /// `f`, in blocks of rows handed to `each(first_row, mean, cov)`.
    fn functional(
        &self,
        f: &Features,
        mut each: impl FnMut(usize, &[f64], &[f64]),
    ) -> Result<(), ScoreError> {
        self.check_features(f)?;
        let (c, d) = (self.c, self.d);
        let h = f.as_slice();
        for first in (0..f.n()).step_by(BLOCK) {
            let rows = BLOCK.min(f.n() - first);
            let hb: Vec<f64> = h[first * d..(first + rows) * d]
                .iter()
                .map(|&v| f64::from(v))
                .collect();
            let mut mean = matmul_nt(&hb, &self.w, (rows, c, d));
            for row in mean.chunks_exact_mut(c) {
                row.iter_mut().zip(&self.b).for_each(|(v, b)| *v += b);
            }
            let cov = self.covariances(&hb, rows);
            each(first, &mean, &cov);
        }
        Ok(())
    }

    /// `J Sigma J^T` `(rows, c, c)` of the rows `h (rows, d)`.
    fn covariances(&self, h: &[f64], rows: usize) -> Vec<f64> {
        let (c, d, delta) = (self.c, self.d, self.delta);
        let mut out = vec![0.0; rows * c * c];
        match &self.curvature {
            Curvature::Diag { w, b } => {
                let var: Vec<f64> = w.iter().map(|v| 1.0 / (v + delta)).collect();
                let h2: Vec<f64> = h.iter().map(|v| v * v).collect();
                let v = matmul_nt(&h2, &var, (rows, c, d));
                for (i, vi) in v.chunks_exact(c).enumerate() {
                    for k in 0..c {
                        out[i * c * c + k * c + k] = vi[k] + 1.0 / (b[k] + delta);
                    }
                }
            }
            Curvature::Kron { g, a } => {
                // u = E_A h; s_i = sum_j u_j^2 / (lg_i la_j + delta) + 1 / (lg_i + delta);
                // the covariance is E_G^T diag(s) E_G.
                let u = matmul_nt(h, &a.vectors, (rows, d, d));
                let u2: Vec<f64> = u.iter().map(|v| v * v).collect();
                let inv: Vec<f64> = g
                    .values
                    .iter()
                    .flat_map(|lg| a.values.iter().map(move |la| 1.0 / (lg * la + delta)))
                    .collect();
                let s = matmul_nt(&u2, &inv, (rows, c, d));
                let eg = &g.vectors;
                for (i, si) in s.chunks_exact(c).enumerate() {
                    let o = &mut out[i * c * c..(i + 1) * c * c];
                    for (r, lg) in g.values.iter().enumerate() {
                        let sr = si[r] + 1.0 / (lg + delta);
                        let er = &eg[r * c..(r + 1) * c];
                        for k in 0..c {
                            let ek = er[k] * sr;
                            for l in 0..c {
                                o[k * c + l] += ek * er[l];
                            }
                        }
                    }
                }
            }
            Curvature::Full { sigma, .. } => {
                let e = d + 1;
                let n = c * e;
                let mut aug = Vec::with_capacity(rows * e);
                for row in h.chunks_exact(d) {
                    aug.extend_from_slice(row);
                    aug.push(1.0);
                }
                for k in 0..c {
                    // Column block k of Sigma, `(n, e)`: row (l, j), column i is
                    // Sigma[(l, j), (k, i)].
                    let col: Vec<f64> = sigma
                        .chunks_exact(n)
                        .flat_map(|row| row[k * e..(k + 1) * e].iter().copied())
                        .collect();
                    let y = matmul_nt(&aug, &col, (rows, n, e));
                    for (i, yi) in y.chunks_exact(n).enumerate() {
                        let hi = &aug[i * e..(i + 1) * e];
                        for l in 0..c {
                            out[i * c * c + k * c + l] = yi[l * e..(l + 1) * e]
                                .iter()
                                .zip(hi)
                                .map(|(a, b)| a * b)
                                .sum();
                        }
                    }
                }
            }
        }
        out
    }

    /// The logits' posterior mean `(n, c)` and covariance `(n, c, c)` of the candidates `f`
    /// (laplace-torch's `_glm_predictive_distribution`), in `f64`.
    pub fn functional_distribution(
        &self,
        f: &Features,
    ) -> Result<(Vec<f64>, Vec<f64>), ScoreError> {
        let c = self.c;
        let mut means = Vec::with_capacity(f.n() * c);
        let mut covs = Vec::with_capacity(f.n() * c * c);
        self.functional(f, |_, mean, cov| {
            means.extend_from_slice(mean);
            covs.extend_from_slice(cov);
        })?;
        Ok((means, covs))
    }

    /// The probit approximation of the predictive `(n, c)`:
    /// `softmax(f_mean / sqrt(1 + pi/8 diag(f_cov)))`.
    pub fn probit(&self, f: &Features) -> Result<Probs, ScoreError> {
        let c = self.c;
        let mut out = Vec::with_capacity(f.n() * c);
        self.functional(f, |_, mean, cov| {
            for (i, mi) in mean.chunks_exact(c).enumerate() {
                let z: Vec<f64> = mi
                    .iter()
                    .enumerate()
                    .map(|(k, m)| {
                        let var = cov[i * c * c + k * c + k];
                        m / (1.0 + std::f64::consts::PI / 8.0 * var).sqrt()
                    })
                    .collect();
                out.extend(softmax(&z).into_iter().map(|v| v as f32));
            }
        })?;
        Probs::new(out, f.n(), c)
    }

    /// One weight draw `theta_s ~ N(theta, Sigma)`: `W (c, d)` and `b (c,)`. The draw reads
    /// `c (d + 1)` normals from `rng` (`W` row by row, then `b`).
    pub fn sample_weights(&self, rng: &mut dyn RngCore) -> (Vec<f64>, Vec<f64>) {
        let (c, d, delta) = (self.c, self.d, self.delta);
        let eps: Vec<f64> = (0..self.params()).map(|_| normal(rng)).collect();
        let (mut w, mut b) = (self.w.clone(), self.b.clone());
        match &self.curvature {
            Curvature::Diag { w: hw, b: hb } => {
                for ((o, e), l) in w.iter_mut().zip(&eps).zip(hw) {
                    *o += e / (l + delta).sqrt();
                }
                for ((o, e), l) in b.iter_mut().zip(&eps[c * d..]).zip(hb) {
                    *o += e / (l + delta).sqrt();
                }
            }
            Curvature::Kron { g, a } => {
                // Sigma^(1/2) eps = E_G^T Z E_A with Z_ij = eps_ij / sqrt(lg_i la_j + delta).
                let z: Vec<f64> = eps[..c * d]
                    .iter()
                    .enumerate()
                    .map(|(i, e)| e / (g.values[i / d] * a.values[i % d] + delta).sqrt())
                    .collect();
                let egt = transpose(&g.vectors, c, c);
                let za = matmul_nt(&z, &transpose(&a.vectors, d, d), (c, d, d));
                let noise = matmul_nt(&egt, &transpose(&za, c, d), (c, d, c));
                w.iter_mut().zip(&noise).for_each(|(o, v)| *o += v);
                for (k, o) in b.iter_mut().enumerate() {
                    *o += (0..c)
                        .map(|r| {
                            g.vectors[r * c + k] * eps[c * d + r] / (g.values[r] + delta).sqrt()
                        })
                        .sum::<f64>();
                }
            }
            Curvature::Full { eig, .. } => {
                let (n, e) = (self.params(), d + 1);
                let z: Vec<f64> = eps
                    .iter()
                    .zip(&eig.values)
                    .map(|(e, l)| e / (l + delta).sqrt())
                    .collect();
                for r in 0..n {
                    let v: f64 = (0..n).map(|s| eig.vectors[s * n + r] * z[s]).sum();
                    let (k, j) = (r / e, r % e);
                    if j == d {
                        b[k] += v;
                    } else {
                        w[k * d + j] += v;
                    }
                }
            }
        }
        (w, b)
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

impl Eigen {
    /// `E^T diag(values) E`, the matrix decomposed.
    fn matrix(&self, n: usize) -> Vec<f64> {
        let scaled: Vec<f64> = self
            .vectors
            .chunks_exact(n)
            .zip(&self.values)
            .flat_map(|(row, l)| row.iter().map(move |v| v * l))
            .collect();
        matmul_nt(
            &transpose(&scaled, n, n),
            &transpose(&self.vectors, n, n),
            (n, n, n),
        )
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
        let missing = |evidence| ScoreError::Missing {
            scorer: self.name().to_string(),
            evidence,
        };
        let f = ev
            .features
            .as_ref()
            .ok_or_else(|| missing("penultimate features and the last layer"))?;
        let reference = ev
            .reference
            .as_deref()
            .ok_or_else(|| missing("the training features (reference evidence)"))?;
        let posterior = self.laplace.memo(reference)?;
        let p = posterior.probit(f)?;
        Ok(p.rows().map(|r| entropy(r) as f32).collect())
    }
}
