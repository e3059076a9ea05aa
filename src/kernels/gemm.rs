//! The kernels' matrix products, the only places alkit calls the `gemm` crate:
//! [`gemm_nt`] (`a b^T`, contiguous) and [`gemm_strided`] (any strides, optionally
//! accumulating). Single-threaded: callers parallelise over independent chunks.

use super::elem::Elem;

/// `c (m, n) = a (m, k) @ b (n, k)^T`, all row-major and contiguous, single-threaded (callers
/// parallelise over independent chunks). With [`gemm_strided`], the only places alkit calls `gemm`.
pub fn gemm_nt<T: Elem>(m: usize, n: usize, k: usize, a: &[T], b: &[T], c: &mut [T]) {
    assert!(
        a.len() >= m * k && b.len() >= n * k && c.len() >= m * n,
        "gemm_nt: slices too short"
    );
    if m == 0 || n == 0 {
        return;
    }
    #[allow(unsafe_code)]
    // SAFETY: the assert above guarantees every element gemm reads or writes is inside the
    // slices: a is read at [i*k + p], b at [j*k + p] (b^T: column stride k, row stride 1), c is
    // written at [i*n + j], for i < m, j < n, p < k. `T` is f32 or f64 (sealed by `Elem`), both
    // of which gemm supports; `c` is an exclusive borrow, so nothing aliases it.
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
            T::ZERO,
            T::ONE,
            false,
            false,
            false,
            ::gemm::Parallelism::None,
        );
    }
}

/// `c (m, n) = a (m, k) b (k, n)` (or `c += a b` with `accumulate`), `c` row-major with row
/// stride `c_rs` (`c[i, j] = c[i * c_rs + j]`), `a` and `b` given by strides:
/// `a[i, p] = a[i * a_rs + p * a_cs]`, `b[p, j] = b[p * b_rs + j * b_cs]`.
/// Single-threaded (callers parallelise over independent chunks).
#[allow(clippy::too_many_arguments)]
pub fn gemm_strided<T: Elem>(
    (m, n, k): (usize, usize, usize),
    a: &[T],
    (a_rs, a_cs): (usize, usize),
    b: &[T],
    (b_rs, b_cs): (usize, usize),
    (c, c_rs): (&mut [T], usize),
    accumulate: bool,
) {
    if m == 0 || n == 0 {
        return;
    }
    let last = |rows: usize, rs: usize, cols: usize, cs: usize| (rows - 1) * rs + (cols - 1) * cs;
    assert!(
        c_rs >= n
            && c.len() > last(m, c_rs, n, 1)
            && (k == 0 || (a.len() > last(m, a_rs, k, a_cs) && b.len() > last(k, b_rs, n, b_cs))),
        "gemm_strided: slices too short"
    );
    let to_isize = |v: usize| isize::try_from(v).expect("stride fits isize");
    #[allow(unsafe_code)]
    // SAFETY: the assert above guarantees every element gemm reads or writes is inside the
    // slices: a is read at [i*a_rs + p*a_cs], b at [p*b_rs + j*b_cs], c is read/written at
    // [i*c_rs + j], for i < m, j < n, p < k; with c_rs >= n no two (i, j) share an element.
    // `T` is f32 or f64 (sealed by `Elem`), both of which gemm supports; `c` is an exclusive
    // borrow, so nothing aliases it.
    unsafe {
        ::gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            to_isize(c_rs),
            accumulate,
            a.as_ptr(),
            to_isize(a_cs),
            to_isize(a_rs),
            b.as_ptr(),
            to_isize(b_cs),
            to_isize(b_rs),
            T::ONE,
            T::ONE,
            false,
            false,
            false,
            ::gemm::Parallelism::None,
        );
    }
}

/// The fewest rows `m` for which `gemm` computes `c (m, n)` on its general blocked path, where
/// each output element is one fused multiply-add chain over `k` in blocks whose size depends
/// on `k` and the caches only. Fewer rows may take its small paths (a different depth block
/// when `m` and `n` are at most 64, horizontal sums when `m n <= 256`, matrix-vector products
/// for one row), whose roundings differ.
pub(crate) fn general_rows(n: usize) -> usize {
    let mut rows = 256 / n.max(1) + 1;
    if n <= 64 {
        rows = rows.max(65);
    }
    rows.max(2)
}

/// [`gemm_strided`] whose every row of `c` is rounded the same whatever `m` is: a product of
/// fewer than [`general_rows`] rows runs on copies padded with zero rows, so that a row's
/// result depends on its own inputs only (what lets a batch run without filling it up). Costs
/// at most [`general_rows`] rows of work per call, and nothing for larger products.
pub fn gemm_rows<T: Elem>(
    (m, n, k): (usize, usize, usize),
    a: &[T],
    (a_rs, a_cs): (usize, usize),
    b: &[T],
    b_strides: (usize, usize),
    (c, c_rs): (&mut [T], usize),
    accumulate: bool,
) {
    let rows = general_rows(n);
    if m == 0 || n == 0 || m >= rows || k == 0 {
        return gemm_strided(
            (m, n, k),
            a,
            (a_rs, a_cs),
            b,
            b_strides,
            (c, c_rs),
            accumulate,
        );
    }
    let mut pa = vec![T::ZERO; rows * k];
    for (i, row) in pa.chunks_exact_mut(k).take(m).enumerate() {
        for (p, v) in row.iter_mut().enumerate() {
            *v = a[i * a_rs + p * a_cs];
        }
    }
    let mut pc = vec![T::ZERO; rows * n];
    if accumulate {
        for (i, row) in pc.chunks_exact_mut(n).take(m).enumerate() {
            row.copy_from_slice(&c[i * c_rs..i * c_rs + n]);
        }
    }
    gemm_strided(
        (rows, n, k),
        &pa,
        (k, 1),
        b,
        b_strides,
        (&mut pc, n),
        accumulate,
    );
    for (i, row) in pc.chunks_exact(n).take(m).enumerate() {
        c[i * c_rs..i * c_rs + n].copy_from_slice(row);
    }
}

/// [`gemm_nt`] rounded row by row as [`gemm_rows`] rounds.
pub fn gemm_nt_rows<T: Elem>(m: usize, n: usize, k: usize, a: &[T], b: &[T], c: &mut [T]) {
    gemm_rows((m, n, k), a, (k, 1), b, (1, k), (c, n), false);
}

#[cfg(test)]
mod tests {
    use super::{gemm_nt_rows, gemm_rows};

    fn values(len: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..len)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
            })
            .collect()
    }

    #[test]
    fn a_row_is_rounded_the_same_in_products_of_any_height() {
        // The rows of a 300-row product against the same rows computed in products of 1 to
        // 100 rows, bit for bit, across widths on both sides of gemm's small-path bounds and
        // depths on both sides of its depth blocks.
        fn check<T: super::Elem>(cast: impl Fn(f32) -> T) {
            for &n in &[1, 3, 10, 64, 65, 128, 512, 1000] {
                for &k in &[3, 9, 100, 513, 1200, 4608] {
                    let a: Vec<T> = values(300 * k, 1).into_iter().map(&cast).collect();
                    let b: Vec<T> = values(n * k, 2).into_iter().map(&cast).collect();
                    let mut whole = vec![T::ZERO; 300 * n];
                    gemm_nt_rows(300, n, k, &a, &b, &mut whole);
                    for &m in &[1, 2, 3, 5, 17, 64, 65, 100] {
                        for &at in &[0, 7, 300 - m] {
                            let mut part = vec![T::ZERO; m * n];
                            gemm_nt_rows(m, n, k, &a[at * k..], &b, &mut part);
                            assert!(
                                part == whole[at * n..(at + m) * n],
                                "n {n}, k {k}: {m} rows from row {at} differ"
                            );
                        }
                    }
                }
            }
        }
        check(|v| v);
        check(f64::from);
    }

    #[test]
    fn padded_products_accumulate_into_strided_rows() {
        // c (2 rows, stride 5) += a b, against the sums worked out one term at a time in f64.
        let (m, n, k) = (2, 3, 4);
        let a = values(m * k, 3);
        let b = values(k * n, 4);
        let mut c = values(2 * 5, 5);
        let before = c.clone();
        gemm_rows((m, n, k), &a, (k, 1), &b, (n, 1), (&mut c, 5), true);
        for i in 0..m {
            for j in 0..5 {
                let want = if j < n {
                    f64::from(before[i * 5 + j])
                        + (0..k)
                            .map(|p| f64::from(a[i * k + p]) * f64::from(b[p * n + j]))
                            .sum::<f64>()
                } else {
                    f64::from(before[i * 5 + j])
                };
                assert!((f64::from(c[i * 5 + j]) - want).abs() < 1e-5, "({i}, {j})");
            }
        }
    }
}
