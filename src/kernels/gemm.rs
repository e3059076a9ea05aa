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
