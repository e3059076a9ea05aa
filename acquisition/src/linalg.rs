//! Small dense linear algebra in `f64` for the detectors' training statistics (a symmetric
//! eigendecomposition for covariance pseudo-inverses and ViM's principal subspace), the
//! numeric helpers the post-hoc scores share (log-sum-exp, numpy's linear percentile), the
//! one way a uniform number is drawn from the caller's RNG, and squared Euclidean distances
//! between row sets through one matrix multiply (the gemm crate, split over the cores).

use crate::kernels::matmul_nt;
use crate::ScoreError;
use rand::RngCore;

/// A uniform number in `[0, 1)` from one `u64` of `rng`: its top 53 bits times `2^-53`.
/// Every selector draws through this, so a test that records the `u64`s can replay a
/// selection in a reference implementation.
pub fn unit(rng: &mut dyn RngCore) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Standard normal draw (Box-Muller; one value per call, the pair's second half discarded so
/// that the stream position depends only on the number of calls).
pub fn normal(rng: &mut dyn RngCore) -> f64 {
    let u1 = 1.0 - unit(rng); // (0, 1]: ln is finite
    let u2 = unit(rng);
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

/// `log sum_c exp(z_c)` in `f64`, shifted by the maximum.
pub fn logsumexp(z: &[f64]) -> f64 {
    let max = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !max.is_finite() {
        return max;
    }
    max + z.iter().map(|v| (v - max).exp()).sum::<f64>().ln()
}

/// `softmax(z)`: `exp(z_c - log sum exp z)` in `f64`.
pub fn softmax(z: &[f64]) -> Vec<f64> {
    let lse = logsumexp(z);
    z.iter().map(|v| (v - lse).exp()).collect()
}

/// Logits `z = W h + b` of one row `h (d,)` with `W (c, d)`, `b (c,)`, in `f64`.
pub fn logits(h: &[f64], w: &[f32], b: &[f32]) -> Vec<f64> {
    let d = h.len();
    b.iter()
        .enumerate()
        .map(|(c, &bc)| {
            f64::from(bc)
                + w[c * d..(c + 1) * d]
                    .iter()
                    .zip(h)
                    .map(|(&wv, hv)| f64::from(wv) * hv)
                    .sum::<f64>()
        })
        .collect()
}

/// numpy's default (linear) percentile `q` in `[0, 100]` of `values` (not empty): the sorted
/// values at position `q/100 (N - 1)`, interpolated. Two partial selections, no full sort.
pub fn percentile(values: &[f32], q: f64) -> f64 {
    let mut v = values.to_vec();
    let n = v.len();
    let pos = q / 100.0 * (n - 1) as f64;
    let lo = (pos.floor() as usize).min(n - 1);
    let t = pos - lo as f64;
    let (_, &mut a, upper) = v.select_nth_unstable_by(lo, f32::total_cmp);
    let a = f64::from(a);
    if t == 0.0 || upper.is_empty() {
        return a;
    }
    let b = f64::from(upper.iter().copied().fold(f32::INFINITY, f32::min));
    // numpy's lerp: from the nearer end, so that t = 1 gives exactly b.
    if t >= 0.5 {
        b - (b - a) * (1.0 - t)
    } else {
        a + (b - a) * t
    }
}

/// Squared Euclidean distances `(m, n)` between the rows of `a (m, d)` and `b (n, d)`:
/// `|a|^2 + |b|^2 - 2 a.b` with the products from one matrix multiply, clamped at 0.
pub fn sq_distances(a: &[f32], b: &[f32], d: usize) -> Vec<f32> {
    let (m, n) = (a.len() / d.max(1), b.len() / d.max(1));
    let na = row_sq_norms(a, d);
    let nb = row_sq_norms(b, d);
    let mut g = matmul_nt(a, b, (m, n, d));
    for (i, row) in g.chunks_mut(n.max(1)).enumerate() {
        for (j, v) in row.iter_mut().enumerate() {
            *v = (na[i] + nb[j] - 2.0 * f64::from(*v)).max(0.0) as f32;
        }
    }
    g
}

/// Squared norms of the rows of `x (n, d)`, in `f64`.
pub fn row_sq_norms(x: &[f32], d: usize) -> Vec<f64> {
    x.chunks_exact(d.max(1))
        .map(|r| r.iter().map(|&v| f64::from(v) * f64::from(v)).sum())
        .collect()
}

/// The rows of `x (n, d)` scaled to unit length (`x / (|x| + eps)`, so a zero row stays 0).
pub fn normalized(x: &[f32], d: usize, eps: f64) -> Vec<f32> {
    let mut out = x.to_vec();
    for r in out.chunks_exact_mut(d.max(1)) {
        let norm = r
            .iter()
            .map(|&v| f64::from(v) * f64::from(v))
            .sum::<f64>()
            .sqrt();
        if norm + eps > 0.0 {
            r.iter_mut()
                .for_each(|v| *v = (f64::from(*v) / (norm + eps)) as f32);
        }
    }
    out
}

/// Eigen-decomposition of a symmetric `(n, n)` matrix (row-major, `f64`): eigenvalues in
/// descending order and the matching unit eigenvectors as the rows of the returned `(n, n)`
/// matrix. Householder tridiagonalisation then the implicit QL algorithm (the EISPACK routines
/// tred2 and tql2, as in JAMA). Errors when the iteration does not converge (non-finite input).
pub fn eigh(a: &[f64], n: usize) -> Result<(Vec<f64>, Vec<f64>), ScoreError> {
    if n == 0 {
        return Ok((vec![], vec![]));
    }
    if a.iter().any(|v| !v.is_finite()) {
        return Err(not_converged("a non-finite entry"));
    }
    let mut v = a.to_vec();
    let mut d = vec![0f64; n];
    let mut e = vec![0f64; n];
    tred2(&mut v, n, &mut d, &mut e);
    // tql2 rotates pairs of eigenvector columns: keep them as rows for contiguous access.
    let mut vt = vec![0f64; n * n];
    for i in 0..n {
        for j in 0..n {
            vt[j * n + i] = v[i * n + j];
        }
    }
    tql2(&mut vt, n, &mut d, &mut e)?;
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&i, &j| d[j].total_cmp(&d[i]).then(i.cmp(&j)));
    let values = order.iter().map(|&i| d[i]).collect();
    let mut vectors = Vec::with_capacity(n * n);
    for &i in &order {
        vectors.extend_from_slice(&vt[i * n..(i + 1) * n]);
    }
    Ok((values, vectors))
}

fn not_converged(why: &str) -> ScoreError {
    ScoreError::Shape {
        what: "eigendecomposition",
        expected: "a finite symmetric matrix".into(),
        got: why.into(),
    }
}

#[allow(clippy::many_single_char_names)]
fn tred2(v: &mut [f64], n: usize, d: &mut [f64], e: &mut [f64]) {
    d.copy_from_slice(&v[(n - 1) * n..n * n]);
    for i in (1..n).rev() {
        let scale: f64 = d[..i].iter().map(|x| x.abs()).sum();
        let mut h = 0.0;
        if scale == 0.0 {
            e[i] = d[i - 1];
            for j in 0..i {
                d[j] = v[(i - 1) * n + j];
                v[i * n + j] = 0.0;
                v[j * n + i] = 0.0;
            }
        } else {
            for x in &mut d[..i] {
                *x /= scale;
                h += *x * *x;
            }
            let mut f = d[i - 1];
            let mut g = h.sqrt();
            if f > 0.0 {
                g = -g;
            }
            e[i] = scale * g;
            h -= f * g;
            d[i - 1] = f - g;
            e[..i].fill(0.0);
            for j in 0..i {
                f = d[j];
                v[j * n + i] = f;
                g = e[j] + v[j * n + j] * f;
                for k in j + 1..i {
                    g += v[k * n + j] * d[k];
                    e[k] += v[k * n + j] * f;
                }
                e[j] = g;
            }
            f = 0.0;
            for j in 0..i {
                e[j] /= h;
                f += e[j] * d[j];
            }
            let hh = f / (h + h);
            for j in 0..i {
                e[j] -= hh * d[j];
            }
            for j in 0..i {
                f = d[j];
                g = e[j];
                for k in j..i {
                    v[k * n + j] -= f * e[k] + g * d[k];
                }
                d[j] = v[(i - 1) * n + j];
                v[i * n + j] = 0.0;
            }
        }
        d[i] = h;
    }
    for i in 0..n - 1 {
        v[(n - 1) * n + i] = v[i * n + i];
        v[i * n + i] = 1.0;
        let h = d[i + 1];
        if h != 0.0 {
            for k in 0..=i {
                d[k] = v[k * n + i + 1] / h;
            }
            for j in 0..=i {
                let mut g = 0.0;
                for k in 0..=i {
                    g += v[k * n + i + 1] * v[k * n + j];
                }
                for k in 0..=i {
                    v[k * n + j] -= g * d[k];
                }
            }
        }
        for k in 0..=i {
            v[k * n + i + 1] = 0.0;
        }
    }
    for j in 0..n {
        d[j] = v[(n - 1) * n + j];
        v[(n - 1) * n + j] = 0.0;
    }
    v[(n - 1) * n + n - 1] = 1.0;
    e[0] = 0.0;
}

/// The QL iterations on the tridiagonal `(d, e)`, rotating the rows of `vt` (the eigenvector
/// matrix transposed).
fn tql2(vt: &mut [f64], n: usize, d: &mut [f64], e: &mut [f64]) -> Result<(), ScoreError> {
    for i in 1..n {
        e[i - 1] = e[i];
    }
    e[n - 1] = 0.0;
    let mut f = 0.0;
    let mut tst1 = 0f64;
    let eps = f64::EPSILON;
    for l in 0..n {
        tst1 = tst1.max(d[l].abs() + e[l].abs());
        let mut m = l;
        while m < n - 1 && e[m].abs() > eps * tst1 {
            m += 1;
        }
        if m > l {
            let mut iterations = 0;
            loop {
                iterations += 1;
                if iterations > 100 {
                    return Err(not_converged("no convergence after 100 QL iterations"));
                }
                let mut g = d[l];
                let mut p = (d[l + 1] - g) / (2.0 * e[l]);
                let mut r = p.hypot(1.0);
                if p < 0.0 {
                    r = -r;
                }
                d[l] = e[l] / (p + r);
                d[l + 1] = e[l] * (p + r);
                let dl1 = d[l + 1];
                let mut h = g - d[l];
                for x in &mut d[l + 2..n] {
                    *x -= h;
                }
                f += h;
                p = d[m];
                let (mut c, mut c2, mut c3) = (1.0, 1.0, 1.0);
                let el1 = e[l + 1];
                let (mut s, mut s2) = (0.0, 0.0);
                for i in (l..m).rev() {
                    c3 = c2;
                    c2 = c;
                    s2 = s;
                    g = c * e[i];
                    h = c * p;
                    r = p.hypot(e[i]);
                    e[i + 1] = s * r;
                    s = e[i] / r;
                    c = p / r;
                    p = c * d[i] - s * g;
                    d[i + 1] = h + s * (c * g + s * d[i]);
                    let (lo, hi) = vt.split_at_mut((i + 1) * n);
                    let (vi, vi1) = (&mut lo[i * n..], &mut hi[..n]);
                    for (a, b) in vi.iter_mut().zip(vi1.iter_mut()) {
                        let t = *b;
                        *b = s * *a + c * t;
                        *a = c * *a - s * t;
                    }
                }
                p = -s * s2 * c3 * el1 * e[l] / dl1;
                e[l] = s * p;
                d[l] = c * p;
                if e[l].abs() <= eps * tst1 {
                    break;
                }
            }
        }
        d[l] += f;
        e[l] = 0.0;
    }
    Ok(())
}

/// The Moore-Penrose pseudo-inverse of a symmetric `(n, n)` matrix as `(U, s)`: with `U`'s
/// `r` rows the eigenvectors whose eigenvalue is above `n * eps * max` (scipy's `pinvh`
/// cutoff) and `s` their `1 / sqrt(lambda)`, so `pinv = sum_r s_r^2 u_r u_r^T` and a
/// whitened vector is `(s_r u_r . x)_r`.
pub fn pinvh_factor(a: &[f64], n: usize) -> Result<(Vec<f64>, Vec<f64>), ScoreError> {
    let (values, vectors) = eigh(a, n)?;
    let max = values.iter().map(|v| v.abs()).fold(0.0, f64::max);
    let cutoff = n as f64 * f64::EPSILON * max;
    let mut u = Vec::new();
    let mut s = Vec::new();
    for (i, &l) in values.iter().enumerate() {
        if l > cutoff {
            u.extend_from_slice(&vectors[i * n..(i + 1) * n]);
            s.push(1.0 / l.sqrt());
        }
    }
    Ok((u, s))
}

/// `pinv(W) b`: the least-squares solution of least norm of `W x = b` for `W (c, d)` row-major
/// and `b (c,)`, in `f64`, as numpy's `pinv` gives it (singular values at most `1e-15` times
/// the largest count as zero). Never through `W W^T`: a last layer with a condition number of
/// `1e8` (seen on real embeddings) would square to `1e16` and lose its small directions.
/// A layer of full rank `min(c, d)` (every trained one) is solved by Householder QR of its
/// longer side (`2 max(c, d) min(c, d)^2` operations); a rank-deficient one by one-sided
/// Jacobi, which finds the rank.
pub fn pinv_apply(w: &[f32], c: usize, d: usize, b: &[f32]) -> Vec<f64> {
    qr_solve(w, c, d, b).unwrap_or_else(|| pinv_apply_jacobi(w, c, d, b))
}

/// Householder QR of the `rows x cols` matrix `m` stored column by column (`rows >= cols`),
/// in place: `R` on and above the diagonal (its diagonal in `diag`), the reflectors below.
/// `None` when a diagonal entry of `R` is at most `1e-13` of the largest (rank-deficient, or
/// too close for a triangular solve).
fn householder(m: &mut [f64], rows: usize, cols: usize) -> Option<(Vec<f64>, Vec<Vec<f64>>)> {
    let mut diag = Vec::with_capacity(cols);
    let mut vs = Vec::with_capacity(cols);
    for j in 0..cols {
        let x = &m[j * rows + j..(j + 1) * rows];
        let norm = x.iter().map(|v| v * v).sum::<f64>().sqrt();
        let alpha = if x[0] > 0.0 { -norm } else { norm };
        let mut v = x.to_vec();
        v[0] -= alpha;
        let vn = v.iter().map(|a| a * a).sum::<f64>().sqrt();
        if vn > 0.0 {
            v.iter_mut().for_each(|a| *a /= vn);
            for l in j..cols {
                let col = &mut m[l * rows + j..(l + 1) * rows];
                let dot: f64 = v.iter().zip(col.iter()).map(|(a, b)| a * b).sum();
                col.iter_mut()
                    .zip(&v)
                    .for_each(|(a, vi)| *a -= 2.0 * dot * vi);
            }
        }
        diag.push(m[j * rows + j]);
        vs.push(v);
    }
    let max = diag.iter().map(|v| v.abs()).fold(0.0, f64::max);
    if max == 0.0 || diag.iter().any(|v| v.abs() <= 1e-13 * max) {
        return None;
    }
    Some((diag, vs))
}

/// `pinv(W) b` by QR when `W` has full rank `min(c, d)` (see [`pinv_apply`]).
fn qr_solve(w: &[f32], c: usize, d: usize, b: &[f32]) -> Option<Vec<f64>> {
    let b: Vec<f64> = b.iter().map(|&v| f64::from(v)).collect();
    if c <= d {
        // W^T = Q R (d x c): W x = b is R^T Q^T x = b; the least-norm x is Q y, R^T y = b.
        let mut m: Vec<f64> = w.iter().map(|&v| f64::from(v)).collect();
        let (_, vs) = householder(&mut m, d, c)?;
        let r = |i: usize, j: usize| m[j * d + i];
        let mut y = vec![0f64; c];
        for i in 0..c {
            let s: f64 = (0..i).map(|k| r(k, i) * y[k]).sum();
            y[i] = (b[i] - s) / r(i, i);
        }
        let mut x = vec![0f64; d];
        x[..c].copy_from_slice(&y);
        for j in (0..c).rev() {
            let v = &vs[j];
            let dot: f64 = v.iter().zip(&x[j..]).map(|(a, b)| a * b).sum();
            x[j..]
                .iter_mut()
                .zip(v)
                .for_each(|(a, vi)| *a -= 2.0 * dot * vi);
        }
        Some(x)
    } else {
        // W = Q R (c x d), full column rank: x = R^-1 Q^T b.
        let mut m = vec![0f64; c * d];
        for i in 0..c {
            for j in 0..d {
                m[j * c + i] = f64::from(w[i * d + j]);
            }
        }
        let (_, vs) = householder(&mut m, c, d)?;
        let mut z = b;
        for (j, v) in vs.iter().enumerate() {
            let dot: f64 = v.iter().zip(&z[j..]).map(|(a, b)| a * b).sum();
            z[j..]
                .iter_mut()
                .zip(v)
                .for_each(|(a, vi)| *a -= 2.0 * dot * vi);
        }
        let r = |i: usize, j: usize| m[j * c + i];
        let mut x = vec![0f64; d];
        for i in (0..d).rev() {
            let s: f64 = (i + 1..d).map(|k| r(i, k) * x[k]).sum();
            x[i] = (z[i] - s) / r(i, i);
        }
        Some(x)
    }
}

/// `pinv(W) b` by one-sided Jacobi on the rows of `W` (see [`pinv_apply`]): any rank.
fn pinv_apply_jacobi(w: &[f32], c: usize, d: usize, b: &[f32]) -> Vec<f64> {
    // Columns of A = W^T (the rows of W), rotated until orthogonal: A V = U S.
    let mut a: Vec<f64> = w.iter().map(|&v| f64::from(v)).collect();
    let mut v = vec![0f64; c * c];
    for i in 0..c {
        v[i * c + i] = 1.0;
    }
    let rotate = |m: &mut [f64], len: usize, p: usize, q: usize, cs: f64, sn: f64| {
        for k in 0..len {
            let (x, y) = (m[p * len + k], m[q * len + k]);
            m[p * len + k] = cs * x - sn * y;
            m[q * len + k] = sn * x + cs * y;
        }
    };
    for _sweep in 0..60 {
        let mut rotated = false;
        for p in 0..c {
            for q in p + 1..c {
                let (ap, aq) = (&a[p * d..(p + 1) * d], &a[q * d..(q + 1) * d]);
                let alpha: f64 = ap.iter().map(|x| x * x).sum();
                let beta: f64 = aq.iter().map(|x| x * x).sum();
                let gamma: f64 = ap.iter().zip(aq).map(|(x, y)| x * y).sum();
                if gamma == 0.0 || gamma.abs() <= f64::EPSILON * (alpha * beta).sqrt() {
                    continue;
                }
                rotated = true;
                let zeta = (beta - alpha) / (2.0 * gamma);
                let t = zeta.signum() / (zeta.abs() + (1.0 + zeta * zeta).sqrt());
                let cs = 1.0 / (1.0 + t * t).sqrt();
                let sn = cs * t;
                rotate(&mut a, d, p, q, cs, sn);
                rotate(&mut v, c, p, q, cs, sn);
            }
        }
        if !rotated {
            break;
        }
    }
    let sigma: Vec<f64> = (0..c)
        .map(|k| {
            a[k * d..(k + 1) * d]
                .iter()
                .map(|x| x * x)
                .sum::<f64>()
                .sqrt()
        })
        .collect();
    let cutoff = 1e-15 * sigma.iter().copied().fold(0.0, f64::max);
    let mut x = vec![0f64; d];
    for k in 0..c {
        if sigma[k] > cutoff {
            let vb: f64 = (0..c).map(|i| v[k * c + i] * f64::from(b[i])).sum();
            let scale = vb / (sigma[k] * sigma[k]);
            for (xj, aj) in x.iter_mut().zip(&a[k * d..(k + 1) * d]) {
                *xj += scale * aj;
            }
        }
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn pinv_apply_by_qr_equals_jacobi_on_tall_and_wide_layers() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(4);
        for (c, d) in [(3, 7), (7, 3), (10, 10), (40, 12)] {
            let w: Vec<f32> = (0..c * d).map(|_| rng.random_range(-1.0..1.0)).collect();
            let b: Vec<f32> = (0..c).map(|_| rng.random_range(-1.0..1.0)).collect();
            let qr = qr_solve(&w, c, d, &b).expect("a random layer has full rank");
            let jac = pinv_apply_jacobi(&w, c, d, &b);
            for (a, j) in qr.iter().zip(&jac) {
                assert!(
                    (a - j).abs() < 1e-9 * (1.0 + j.abs()),
                    "({c}, {d}): {a} vs {j}"
                );
            }
        }
        // A wide layer's least squares: the normal equations W^T W x = W^T b hold.
        let (c, d) = (40, 12);
        let w: Vec<f32> = (0..c * d).map(|_| rng.random_range(-1.0..1.0)).collect();
        let b: Vec<f32> = (0..c).map(|_| rng.random_range(-1.0..1.0)).collect();
        let x = pinv_apply(&w, c, d, &b);
        let r: Vec<f64> = (0..c)
            .map(|i| (0..d).map(|k| f64::from(w[i * d + k]) * x[k]).sum::<f64>() - f64::from(b[i]))
            .collect();
        for k in 0..d {
            let g: f64 = (0..c).map(|i| f64::from(w[i * d + k]) * r[i]).sum();
            assert!(g.abs() < 1e-9, "column {k}: {g}");
        }
    }

    #[test]
    fn pinv_apply_solves_ill_conditioned_and_rank_deficient_layers() {
        // W = diag(1, 1e-8) padded to (2, 3): W x = b exactly, x in the row space (x_2 = 0).
        let w = [1.0f32, 0.0, 0.0, 0.0, 1e-8, 0.0];
        let x = pinv_apply(&w, 2, 3, &[2.0, 3e-8]);
        assert!((x[0] - 2.0).abs() < 1e-12 && (x[1] - 3.0).abs() < 1e-6 && x[2] == 0.0);
        // Two equal rows: rank 1, least squares of least norm: x = (b1 + b2) / 4 * (1, 1).
        let x = pinv_apply(&[1.0, 1.0, 1.0, 1.0], 2, 2, &[1.0, 3.0]);
        assert!((x[0] - 1.0).abs() < 1e-12 && (x[1] - 1.0).abs() < 1e-12);
        // Random rows rotated to be nearly dependent: W x reproduces b.
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
        let (c, d) = (10, 32);
        let mut w: Vec<f32> = (0..c * d).map(|_| rng.random_range(-1.0..1.0)).collect();
        for k in 0..d {
            w[9 * d + k] = w[8 * d + k] + 1e-5 * w[9 * d + k];
        }
        let b: Vec<f32> = (0..c).map(|_| rng.random_range(-1.0..1.0)).collect();
        let x = pinv_apply(&w, c, d, &b);
        for i in 0..c {
            let wx: f64 = (0..d).map(|k| f64::from(w[i * d + k]) * x[k]).sum();
            assert!(
                (wx - f64::from(b[i])).abs() < 1e-6,
                "row {i}: {wx} vs {}",
                b[i]
            );
        }
    }

    #[test]
    fn eigenpairs_reconstruct_random_symmetric_matrices() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        for n in [1, 2, 3, 10, 41] {
            let mut a = vec![0f64; n * n];
            for i in 0..n {
                for j in 0..=i {
                    let x: f64 = rng.random_range(-1.0..1.0);
                    a[i * n + j] = x;
                    a[j * n + i] = x;
                }
            }
            let (vals, vecs) = eigh(&a, n).unwrap();
            assert!(vals.windows(2).all(|w| w[0] >= w[1]));
            for k in 0..n {
                let v = &vecs[k * n..(k + 1) * n];
                for i in 0..n {
                    let av: f64 = (0..n).map(|j| a[i * n + j] * v[j]).sum();
                    assert!((av - vals[k] * v[i]).abs() < 1e-10, "n {n} pair {k}");
                }
                for l in 0..n {
                    let dot: f64 = (0..n).map(|j| v[j] * vecs[l * n + j]).sum();
                    let want = if l == k { 1.0 } else { 0.0 };
                    assert!((dot - want).abs() < 1e-10);
                }
            }
        }
        assert!(eigh(&[f64::NAN], 1).is_err());
    }

    #[test]
    fn pseudo_inverse_drops_the_null_space() {
        // diag(4, 0): pinv = diag(1/4, 0), one direction kept with 1/sqrt(4).
        let (u, s) = pinvh_factor(&[4.0, 0.0, 0.0, 0.0], 2).unwrap();
        assert_eq!(s, vec![0.5]);
        assert!((u[0].abs() - 1.0).abs() < 1e-12 && u[1].abs() < 1e-12);
    }

    #[test]
    fn percentiles_follow_numpy() {
        // np.percentile([3, 1, 4, 1, 5], [0, 25, 90, 100]) = 1, 1, 4.6, 5.
        let v = [3.0, 1.0, 4.0, 1.0, 5.0];
        assert_eq!(percentile(&v, 0.0), 1.0);
        assert_eq!(percentile(&v, 25.0), 1.0);
        assert!((percentile(&v, 90.0) - 4.6).abs() < 1e-12);
        assert_eq!(percentile(&v, 100.0), 5.0);
    }

    #[test]
    fn logsumexp_is_shift_stable() {
        assert!((logsumexp(&[1000.0, 1000.0]) - (1000.0 + 2f64.ln())).abs() < 1e-9);
    }
}
