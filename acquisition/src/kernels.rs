//! The crate's one call into the `gemm` crate (the matrix multiply candle runs on the CPU, so
//! it is already in every alkit build): pairwise products of feature rows for the
//! feature-space detectors and selectors (KNN, k-means, core-set, ProbCover, in `f32`; the
//! regression kernel selectors' transforms, in `f64`), split over the
//! machine's cores in fixed tiles of rows of the left operand. gemm chooses its blocking from
//! the shape of each call, so the calls' shapes never depend on the core count: every product
//! is made of the same [`TILE`]-row calls, whichever thread runs them, and results are the
//! same bytes on any number of cores.

/// The element types [`matmul_nt`] multiplies: `f32` and `f64`, both native to `gemm`.
pub(crate) trait Real: Copy + Send + Sync + Default + 'static {
    /// The multiplicative identity (`gemm`'s scale of the product).
    const ONE: Self;
}

impl Real for f32 {
    const ONE: Self = 1.0;
}

impl Real for f64 {
    const ONE: Self = 1.0;
}

/// `c (m, n) = a (m, k) b (n, k)^T`, all row-major `f32` or all `f64`.
///
/// # Panics
/// Never on well-formed input; a length that does not match its shape is a bug in this crate
/// and is caught by the assertion before any unsafe call.
pub(crate) fn matmul_nt<T: Real>(a: &[T], b: &[T], (m, n, k): (usize, usize, usize)) -> Vec<T> {
    assert!(
        Some(a.len()) == m.checked_mul(k) && Some(b.len()) == n.checked_mul(k),
        "matmul_nt: operands do not match ({m}, {n}, {k})"
    );
    let mut c = vec![T::default(); m * n];
    if m == 0 || n == 0 || k == 0 {
        return c;
    }
    // Whole tiles per thread; one thread below about a million multiply-adds.
    let tiles = m.div_ceil(TILE);
    let threads = crate::kernels::cores();
    let parts = if m * n * k < 1 << 20 {
        1
    } else {
        threads.min(tiles)
    };
    let rows = tiles.div_ceil(parts) * TILE;
    if parts == 1 {
        // A thread per call would cost more than the product (k-means calls this per step).
        for (at, ct) in a.chunks(TILE * k).zip(c.chunks_mut(TILE * n)) {
            matmul_nt_serial(at, b, ct, (at.len() / k, n, k));
        }
        return c;
    }
    std::thread::scope(|s| {
        for (ai, ci) in a.chunks(rows * k).zip(c.chunks_mut(rows * n)) {
            s.spawn(move || {
                for (at, ct) in ai.chunks(TILE * k).zip(ci.chunks_mut(TILE * n)) {
                    matmul_nt_serial(at, b, ct, (at.len() / k, n, k));
                }
            });
        }
    });
    c
}

/// The cores this process may use, read once: the standard library reads the cgroup's quota
/// files on every call, which costs more than a small product (k-means calls per step).
pub(crate) fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |t| t.get()))
}

/// Rows of the left operand per gemm call in [`matmul_nt`].
pub(crate) const TILE: usize = 256;

/// [`matmul_nt`] on the current thread, into `c (m, n)` (for callers that split the work
/// themselves).
#[allow(unsafe_code)]
pub(crate) fn matmul_nt_serial<T: Real>(
    a: &[T],
    b: &[T],
    c: &mut [T],
    (m, n, k): (usize, usize, usize),
) {
    assert!(
        Some(a.len()) == m.checked_mul(k)
            && Some(b.len()) == n.checked_mul(k)
            && Some(c.len()) == m.checked_mul(n)
    );
    // SAFETY: the assertion above bounds every access: `c` is (m, n) with row stride n and
    // column stride 1; `a` is (m, k) with row stride k; `b` is read as the (k, n) matrix
    // `b^T`, element (p, j) at `j * k + p`, inside its n * k values. The slices are borrowed
    // for the whole call and `c` is not aliased by `a` or `b`.
    unsafe {
        ::gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.as_ptr(),
            1,
            k as isize,
            b.as_ptr(),
            k as isize,
            1,
            T::default(),
            T::ONE,
            false,
            false,
            false,
            ::gemm::Parallelism::None,
        );
    }
}

/// Runs `f(first_row, rows_of_out)` over `out` split into contiguous runs of whole rows of
/// `width` values, one run per core, on scoped threads (one run below 1024 rows). `f` must
/// only depend on the row numbers it is given, so the result does not depend on the split.
pub(crate) fn par_rows<T: Send>(out: &mut [T], width: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    par_rows_min(out, width, 512, f)
}

/// [`par_rows`] for rows that each cost about `cost` multiply-adds: runs of at least 2^16
/// multiply-adds (and 512 rows), since a thread started for less costs more than it saves
/// (core-set and k-means update every row once per pick). Rows are computed independently, so
/// the split never changes a result.
pub(crate) fn par_rows_costing<T: Send>(
    out: &mut [T],
    width: usize,
    cost: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    par_rows_min(out, width, ((1 << 16) / cost.max(1)).max(512), f)
}

/// [`par_rows`] with at least `min_rows` rows per run (heavy rows split from `2 min_rows`),
/// each run starting at a multiple of `min_rows`: a caller that works in blocks of
/// `min_rows` rows gets the same blocks on any number of cores.
pub(crate) fn par_rows_min<T: Send>(
    out: &mut [T],
    width: usize,
    min_rows: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    let width = width.max(1);
    let min_rows = min_rows.max(1);
    let n = out.len() / width;
    let threads = crate::kernels::cores();
    let parts = threads.min(n / min_rows).max(1);
    let rows = n.div_ceil(parts).div_ceil(min_rows).max(1) * min_rows;
    if parts == 1 {
        return f(0, out);
    }
    let f = &f;
    std::thread::scope(|s| {
        for (i, chunk) in out.chunks_mut(rows * width).enumerate() {
            s.spawn(move || f(i * rows, chunk));
        }
    });
}

/// `a . b` in `f32` over eight lanes (summed in a fixed order), the vectorisable inner
/// product of the selectors' per-pick passes, which read every candidate's features once
/// per pick and are bound by memory, not arithmetic.
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    lanes(a, b, |x, y| x * y)
}

/// `|a - b|^2` in `f32` over eight lanes, like [`dot`].
pub(crate) fn sq_dist(a: &[f32], b: &[f32]) -> f32 {
    lanes(a, b, |x, y| (x - y) * (x - y))
}

/// `sum_i term(a_i, b_i)` over eight lane accumulators, then the lanes and the tail in a
/// fixed order: what [`dot`] and [`sq_dist`] sum.
#[inline(always)]
fn lanes(a: &[f32], b: &[f32], term: impl Fn(f32, f32) -> f32) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(&x, &y)| term(x, y))
        .sum();
    for (x, y) in ca.zip(cb) {
        for l in 0..8 {
            acc[l] += term(x[l], y[l]);
        }
    }
    acc.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn products_match_a_direct_sum_at_every_split() {
        for (m, n, k) in [(1, 1, 1), (3, 5, 7), (300, 70, 65), (2000, 33, 17)] {
            let a: Vec<f32> = (0..m * k)
                .map(|i| ((i * 7 % 13) as f32 - 6.0) / 5.0)
                .collect();
            let b: Vec<f32> = (0..n * k)
                .map(|i| ((i * 5 % 11) as f32 - 5.0) / 3.0)
                .collect();
            let c = matmul_nt(&a, &b, (m, n, k));
            for i in (0..m).step_by(37) {
                for j in 0..n {
                    let want: f64 = (0..k)
                        .map(|p| f64::from(a[i * k + p]) * f64::from(b[j * k + p]))
                        .sum();
                    assert!((f64::from(c[i * n + j]) - want).abs() < 1e-4 * (1.0 + want.abs()));
                }
            }
        }
        assert!(matmul_nt::<f32>(&[], &[], (0, 0, 3)).is_empty());
    }

    #[test]
    fn lane_sums_match_direct_sums() {
        for len in [0, 1, 7, 8, 9, 33] {
            let a: Vec<f32> = (0..len).map(|i| i as f32 * 0.5 - 3.0).collect();
            let b: Vec<f32> = (0..len).map(|i| 2.0 - i as f32 * 0.25).collect();
            let want: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            assert!((dot(&a, &b) - want).abs() < 1e-4);
            let want: f32 = a.iter().zip(&b).map(|(x, y)| (x - y) * (x - y)).sum();
            assert!((sq_dist(&a, &b) - want).abs() < 1e-3);
        }
    }

    #[test]
    fn row_runs_cover_every_row_once() {
        let mut out = vec![0usize; 5000 * 3];
        par_rows(&mut out, 3, |first, rows| {
            for (r, row) in rows.chunks_mut(3).enumerate() {
                row.fill(first + r);
            }
        });
        assert!(out
            .chunks(3)
            .enumerate()
            .all(|(i, r)| r.iter().all(|&v| v == i)));
    }
}
