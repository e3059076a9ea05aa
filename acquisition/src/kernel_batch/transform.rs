//! The kernel transforms a selection rule runs on: the rows of the pool and of the labeled
//! items in feature space, scaled so that the labeled items' mean squared norm is 1 and
//! conditioned on them as a Gaussian process with noise `sigma^2` (Holzmüller et al. 2023's
//! `scale` and `train` transforms, which their recommended combinations chain).
//!
//! The posterior's feature map is `phi'(x) = sigma L^-1 phi(x)` with `L L^T = T^T T +
//! sigma^2 I` over the labeled rows `T (m, p)`, so that `phi'(x) . phi'(y)` is the posterior
//! covariance `k(x, y) - k(x, T) (K_TT + sigma^2 I)^-1 k(T, y)` with no `n x n` matrix: the
//! cost is one `p x p` Cholesky factor and one `(n + m, p) x (p, p)` product.

use crate::kernels::{matmul_nt, par_rows};
use crate::ScoreError;

/// Row-major `f64` rows of `p` values: the pool's first, then (in TP mode) the labeled items'.
#[derive(Debug, Clone)]
pub(super) struct Rows {
    pub(super) x: Vec<f64>,
    pub(super) p: usize,
}

impl Rows {
    /// The `f32` rows of `first` then of `then`, `p` values each, widened to `f64` and
    /// multiplied by `factor`, on every core.
    pub(super) fn widened(first: &[f32], then: &[f32], p: usize, factor: f64) -> Rows {
        let split = first.len() / p;
        let mut x = vec![0f64; first.len() + then.len()];
        par_rows(&mut x, p, |start, out| {
            for (i, row) in (start..).zip(out.chunks_exact_mut(p)) {
                let from = if i < split {
                    &first[i * p..(i + 1) * p]
                } else {
                    &then[(i - split) * p..(i - split + 1) * p]
                };
                for (o, &v) in row.iter_mut().zip(from) {
                    *o = f64::from(v) * factor;
                }
            }
        });
        Rows { x, p }
    }

    pub(super) fn len(&self) -> usize {
        self.x.len() / self.p
    }

    pub(super) fn row(&self, i: usize) -> &[f64] {
        &self.x[i * self.p..(i + 1) * self.p]
    }

    /// `|x_i|^2` for every row: the kernel's diagonal.
    pub(super) fn diag(&self) -> Vec<f64> {
        self.x
            .chunks_exact(self.p)
            .map(|r| r.iter().map(|v| v * v).sum())
            .collect()
    }

    fn scale(&mut self, factor: f64) {
        self.x.iter_mut().for_each(|v| *v *= factor);
    }
}

/// The factor that brings the labeled rows' mean squared norm to 1 (1 when there are none or
/// they are all zero): the paper's `scale` transform.
pub(super) fn unit_scale(train: &Rows) -> f64 {
    let mean_diag = train.diag().iter().sum::<f64>() / train.len().max(1) as f64;
    if mean_diag > 0.0 {
        1.0 / mean_diag.sqrt()
    } else {
        1.0
    }
}

/// Scales `pool` and `train` so that the labeled rows' mean squared norm is 1, then maps both
/// to the posterior features given the labeled rows with noise `sigma^2`. Nothing happens
/// without labeled rows (the prior is then the posterior).
pub(super) fn posterior(pool: &mut Rows, train: &mut Rows, sigma: f64) -> Result<(), ScoreError> {
    if train.len() == 0 {
        return Ok(());
    }
    let factor = unit_scale(train);
    pool.scale(factor);
    train.scale(factor);
    let p = train.p;
    let mut cov = gram(train);
    for i in 0..p {
        cov[i * p + i] += sigma * sigma;
    }
    let l = cholesky_jittered(cov, p)?;
    let mut a = lower_inverse(&l, p);
    a.iter_mut().for_each(|v| *v *= sigma);
    for rows in [pool, train] {
        times_transposed(rows, &a);
    }
    Ok(())
}

/// Rows whose product is formed at once: bounds the temporary to `BLOCK x p` values.
pub(super) const BLOCK: usize = 4096;

/// `x <- x A^T` for a `(p, p)` matrix `A`, in place, a block of rows at a time.
fn times_transposed(rows: &mut Rows, a: &[f64]) {
    let p = rows.p;
    for block in rows.x.chunks_mut(BLOCK * p) {
        // matmul_nt multiplies by the second operand's transpose.
        let out = matmul_nt(block, a, (block.len() / p, p, p));
        block.copy_from_slice(&out);
    }
}

/// `T^T T (p, p)` of the rows, summed over blocks of [`BLOCK`] rows.
pub(super) fn gram(rows: &Rows) -> Vec<f64> {
    let p = rows.p;
    let mut g = vec![0f64; p * p];
    for block in rows.x.chunks(BLOCK * p) {
        let n = block.len() / p;
        let mut t = vec![0f64; p * n];
        for (i, r) in block.chunks_exact(p).enumerate() {
            for (j, &v) in r.iter().enumerate() {
                t[j * n + i] = v;
            }
        }
        g.iter_mut()
            .zip(matmul_nt(&t, &t, (p, p, n)))
            .for_each(|(a, b)| *a += b);
    }
    g
}

/// The Cholesky factor of a symmetric positive semi-definite `(p, p)` matrix, retried with
/// jitter `1e-5 trace / p` on the diagonal, doubled up to 15 times, when rounding makes it
/// indefinite (the jitter the reference implementation adds).
fn cholesky_jittered(mut a: Vec<f64>, p: usize) -> Result<Vec<f64>, ScoreError> {
    let trace: f64 = (0..p).map(|i| a[i * p + i]).sum();
    let mut eps = 1e-5 * trace / p as f64 + 1e-30;
    for _ in 0..15 {
        if let Some(l) = cholesky(&a, p) {
            return Ok(l);
        }
        for i in 0..p {
            a[i * p + i] += eps;
        }
        eps *= 2.0;
    }
    Err(ScoreError::Setting {
        setting: "sigma",
        why: "the labeled items' kernel matrix is not positive definite even with jitter; \
              raise the posterior noise sigma"
            .into(),
    })
}

/// Lower Cholesky factor `L (p, p)` with `L L^T = a`, or `None` when a pivot is not positive.
fn cholesky(a: &[f64], p: usize) -> Option<Vec<f64>> {
    let mut l = vec![0f64; p * p];
    for j in 0..p {
        let s: f64 = (0..j).map(|k| l[j * p + k] * l[j * p + k]).sum();
        let d = a[j * p + j] - s;
        if !(d.is_finite() && d > 0.0) {
            return None;
        }
        let d = d.sqrt();
        l[j * p + j] = d;
        for i in j + 1..p {
            let s: f64 = (0..j).map(|k| l[i * p + k] * l[j * p + k]).sum();
            l[i * p + j] = (a[i * p + j] - s) / d;
        }
    }
    Some(l)
}

/// `L^-1` of a lower-triangular `(p, p)` matrix with a positive diagonal, by forward
/// substitution on the identity's columns.
fn lower_inverse(l: &[f64], p: usize) -> Vec<f64> {
    let mut inv = vec![0f64; p * p];
    for c in 0..p {
        for i in c..p {
            let rhs = if i == c { 1.0 } else { 0.0 };
            let s: f64 = (c..i).map(|k| l[i * p + k] * inv[k * p + c]).sum();
            inv[i * p + c] = (rhs - s) / l[i * p + i];
        }
    }
    inv
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows of a tiny hand-made problem.
    fn rows(x: &[f64], p: usize) -> Rows {
        Rows { x: x.to_vec(), p }
    }

    #[test]
    fn posterior_features_give_the_gp_posterior_covariance() {
        // Labeled rows t1 = (1, 0), t2 = (1, 1); pool rows x = (0, 1), y = (2, -1).
        let (t, x) = ([1.0, 0.0, 1.0, 1.0], [0.0, 1.0, 2.0, -1.0]);
        let sigma = 0.3;
        let (mut pool, mut train) = (rows(&x, 2), rows(&t, 2));
        posterior(&mut pool, &mut train, sigma).unwrap();
        // By hand: scale c = 1 / sqrt(mean(|t|^2)) = 1 / sqrt(1.5); the posterior covariance of
        // the scaled kernel is k(a, b) - k(a, T) (K_TT + s^2 I)^-1 k(T, b), with 2x2 inverses.
        let c2 = 1.0 / 1.5;
        let k = |a: &[f64], b: &[f64]| c2 * (a[0] * b[0] + a[1] * b[1]);
        let (t1, t2) = (&t[0..2], &t[2..4]);
        let m = [
            k(t1, t1) + sigma * sigma,
            k(t1, t2),
            k(t2, t1),
            k(t2, t2) + sigma * sigma,
        ];
        let det = m[0] * m[3] - m[1] * m[2];
        let inv = [m[3] / det, -m[1] / det, -m[2] / det, m[0] / det];
        let post = |a: &[f64], b: &[f64]| {
            let (ka, kb) = ([k(a, t1), k(a, t2)], [k(t1, b), k(t2, b)]);
            k(a, b)
                - (ka[0] * (inv[0] * kb[0] + inv[1] * kb[1])
                    + ka[1] * (inv[2] * kb[0] + inv[3] * kb[1]))
        };
        let dot = |a: &[f64], b: &[f64]| a[0] * b[0] + a[1] * b[1];
        let (px, py) = (&x[0..2], &x[2..4]);
        for (a, b, fa, fb) in [
            (px, px, pool.row(0), pool.row(0)),
            (px, py, pool.row(0), pool.row(1)),
            (py, py, pool.row(1), pool.row(1)),
            (t1, py, train.row(0), pool.row(1)),
        ] {
            assert!((dot(fa, fb) - post(a, b)).abs() < 1e-12, "{a:?} {b:?}");
        }
    }

    #[test]
    fn cholesky_and_inverse_reproduce_the_matrix() {
        let a = [4.0, 2.0, 0.4, 2.0, 5.0, 1.0, 0.4, 1.0, 3.0];
        let l = cholesky(&a, 3).unwrap();
        let inv = lower_inverse(&l, 3);
        for i in 0..3 {
            for j in 0..3 {
                let llt: f64 = (0..3).map(|k| l[i * 3 + k] * l[j * 3 + k]).sum();
                assert!((llt - a[i * 3 + j]).abs() < 1e-12);
                let id: f64 = (0..3).map(|k| inv[i * 3 + k] * l[k * 3 + j]).sum();
                assert!((id - f64::from(u8::from(i == j))).abs() < 1e-12);
            }
        }
        assert!(cholesky(&[1.0, 2.0, 2.0, 1.0], 2).is_none());
    }
}
