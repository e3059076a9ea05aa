//! [`MatmulRows`], `a (m, k) @ w (n, k)^T` for inference: the rows cut into blocks computed in
//! parallel, each block by [`gemm_nt_rows`](super::gemm::gemm_nt_rows), so that every row's
//! result depends on that row and `w` only, never on how many rows share the product. This is
//! what lets the layer library run a partial batch as it is instead of filling it up to the
//! batch size (candle's matmul rounds a row differently when the product is small). No
//! backward: for passes that differentiate nothing.

use super::dispatch::with_float;
use super::elem::Elem;
use super::enabled::entry;
use super::gemm::gemm_nt_rows;
use super::storage::{into_storage, storage_slice};
use super::threading::par_chunks;
use candle_core::{CpuStorage, CustomOp2, Layout, Result, Shape};

/// Rows per parallel block: enough for gemm's blocking to pay.
const BLOCK_ROWS: usize = 256;

/// `(a (m, k), w (n, k)) -> a w^T (m, n)`, each row rounded independently of the others.
#[derive(Debug, Clone, Copy)]
pub struct MatmulRows;

fn matmul_k<T: Elem>(a: &[T], w: &[T], (m, n, k): (usize, usize, usize)) -> Vec<T> {
    let mut out = vec![T::ZERO; m * n];
    if n > 0 {
        par_chunks(&mut out, BLOCK_ROWS * n, |i, c| {
            let rows = c.len() / n;
            let at = i * BLOCK_ROWS * k;
            gemm_nt_rows(rows, n, k, &a[at..at + rows * k], w, c);
        });
    }
    out
}

impl CustomOp2 for MatmulRows {
    fn name(&self) -> &'static str {
        "alkit-matmul-rows"
    }
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        entry(self.name())?;
        let (&[m, k], &[n, k2]) = (l1.dims(), l2.dims()) else {
            candle_core::bail!(
                "matmul rows: expects (m, k) and (n, k), got {:?} and {:?}",
                l1.dims(),
                l2.dims()
            );
        };
        if k != k2 {
            candle_core::bail!(
                "matmul rows: {:?} and {:?} differ in depth",
                l1.dims(),
                l2.dims()
            );
        }
        let name = self.name();
        let out = with_float!(name, [s1, s2], |T| into_storage(matmul_k(
            storage_slice::<T>(s1, l1, name)?,
            storage_slice::<T>(s2, l2, name)?,
            (m, n, k)
        )));
        Ok((out, Shape::from((m, n))))
    }
}
