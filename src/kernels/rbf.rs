//! The RBF head's sum of squares over the last dimension as custom ops: [`SumSquares`],
//! `d (b, c, n) -> sum_i d_i^2 (b, c)`, and its backward [`SumSquaresGrad`],
//! `(d, g) -> 2 d g`, each one parallel pass over the rows.
//!
//! Why: DUQ's head measures each item's distance to every class centroid over `(b, c, n)`
//! tensors (327,680 elements for the Fashion-MNIST model at batch 128). Written as
//! `d.sqr()?.sum(D::Minus1)`, candle's backward of those two ops makes a zero-filled buffer, a
//! broadcast add that recomputes a strided index per element, a product and a scale, each on
//! one thread, in every training step. Both ops compute each element exactly as candle's
//! composition does (the squares summed in order from zero; the gradient as
//! `(d * (0 + g)) * 2 + 0`), so the head's values and gradients are bit-identical to it (a
//! test checks it). That holds for the builds this project makes: candle sums in SIMD lanes
//! when compiled with AVX2 enabled (`-C target-cpu`), and then differs from these ops by
//! rounding.

use super::dispatch::with_float;
use super::elem::Elem;
use super::enabled::entry;
use super::storage::{into_storage, storage_slice};
use super::threading::par_chunks;
use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Result, Shape, Tensor};

/// Rows of `n` per parallel piece.
const ROWS: usize = 64;

/// `d (.., n) -> sum_i d_i^2 (..)`: the sum of squares over the last dimension.
#[derive(Debug, Clone, Copy)]
pub struct SumSquares;

/// `(d (.., n), g (..)) -> 2 d g`: [`SumSquares`]'s backward, `g` broadcast over the last
/// dimension.
#[derive(Debug, Clone, Copy)]
pub struct SumSquaresGrad;

fn sum_squares_k<T: Elem>(d: &[T], n: usize) -> Vec<T> {
    let mut out = vec![T::ZERO; d.len() / n];
    par_chunks(&mut out, ROWS, |i, o| {
        for (r, s) in o.iter_mut().enumerate() {
            let at = (i * ROWS + r) * n;
            let mut acc = T::ZERO;
            for &v in &d[at..at + n] {
                acc += v * v;
            }
            *s = acc;
        }
    });
    out
}

fn grad_k<T: Elem>(d: &[T], g: &[T], n: usize) -> Vec<T> {
    let (two, zero) = (T::from_f64(2.0), T::from_f64(0.0));
    let mut out = vec![T::ZERO; d.len()];
    par_chunks(&mut out, ROWS * n, |i, o| {
        for (r, row) in o.chunks_exact_mut(n).enumerate() {
            let row_at = i * ROWS + r;
            let gr = T::ZERO + g[row_at];
            for (o, &v) in row.iter_mut().zip(&d[row_at * n..]) {
                *o = (v * gr) * two + zero;
            }
        }
    });
    out
}

/// The last dimension `n` of `l` and the shape without it, after checking `n > 0`.
fn split_last(l: &Layout, op: &str) -> Result<(usize, Shape)> {
    let dims = l.dims();
    match dims.split_last() {
        Some((&n, rest)) if n > 0 => Ok((n, Shape::from(rest.to_vec()))),
        _ => candle_core::bail!("{op}: needs a non-empty last dimension, got {dims:?}"),
    }
}

impl CustomOp1 for SumSquares {
    fn name(&self) -> &'static str {
        "alkit-sum-squares"
    }
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        entry(self.name())?;
        let (n, shape) = split_last(l, self.name())?;
        let out = with_float!(self.name(), [s], |T| into_storage(sum_squares_k(
            storage_slice::<T>(s, l, self.name())?,
            n
        )));
        Ok((out, shape))
    }
    fn bwd(&self, arg: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(
            arg.contiguous()?
                .apply_op2(&grad.contiguous()?, SumSquaresGrad)?,
        ))
    }
}

impl CustomOp2 for SumSquaresGrad {
    fn name(&self) -> &'static str {
        "alkit-sum-squares-grad"
    }
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        entry(self.name())?;
        let (n, rows) = split_last(l1, self.name())?;
        if l2.shape() != &rows {
            candle_core::bail!(
                "{}: input {:?} and gradient {:?} do not match",
                self.name(),
                l1.dims(),
                l2.dims()
            );
        }
        let name = self.name();
        let out = with_float!(name, [s1, s2], |T| into_storage(grad_k(
            storage_slice::<T>(s1, l1, name)?,
            storage_slice::<T>(s2, l2, name)?,
            n
        )));
        Ok((out, l1.shape().clone()))
    }
    /// Exact at second order: `2 g grad` for `d`, `sum_i 2 d_i grad_i` for `g` (candle ops).
    fn bwd(
        &self,
        d: &Tensor,
        g: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let gb = g.unsqueeze(g.rank())?.broadcast_as(d.shape())?;
        let dd = ((grad * gb)? * 2.0)?;
        let dg = ((grad * d)?.sum(d.rank() - 1)? * 2.0)?;
        Ok((Some(dd), Some(dg)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device, Var, D};

    /// Values and gradients bit for bit against candle's `sqr` + `sum` in `f32` (the head's
    /// shapes, scaled down, with an odd row length and zero gradients), and the backward's own
    /// gradients against candle's at second order in `f64`.
    #[test]
    fn sum_squares_matches_candles_sqr_and_sum_bit_for_bit() -> Result<()> {
        let bits = |t: &Tensor| -> Result<Vec<u32>> {
            Ok(t.flatten_all()?
                .to_vec1::<f32>()?
                .iter()
                .map(|v| v.to_bits())
                .collect())
        };
        let (b, c, n) = (37, 10, 33);
        let d = Var::from_tensor(&crate::rng::randn_f64(&[b, c, n], 5).to_dtype(DType::F32)?)?;
        let mut w = crate::rng::randn_f64(&[b, c], 6).to_vec2::<f64>()?;
        w[3][4] = 0.0;
        w[5][0] = -0.0;
        let w = Tensor::new(w, &Device::Cpu)?.to_dtype(DType::F32)?;
        let fused = d.as_tensor().apply_op1(SumSquares)?;
        let reference = d.as_tensor().sqr()?.sum(D::Minus1)?;
        assert_eq!(bits(&fused)?, bits(&reference)?, "values");
        let gf = (&fused * &w)?.sum_all()?.backward()?;
        let gr = (&reference * &w)?.sum_all()?.backward()?;
        let (gf, gr) = (
            gf.get(d.as_tensor()).unwrap(),
            gr.get(d.as_tensor()).unwrap(),
        );
        assert_eq!(bits(gf)?, bits(gr)?, "gradients");

        // Second order, f64: gradients of sum(SumSquaresGrad(d, g) * r) in d and g.
        let d = Var::from_tensor(&crate::rng::randn_f64(&[4, 3, 5], 7))?;
        let g = Var::from_tensor(&crate::rng::randn_f64(&[4, 3], 8))?;
        let r = crate::rng::randn_f64(&[4, 3, 5], 9);
        let fused = d
            .as_tensor()
            .apply_op2(g.as_tensor(), SumSquaresGrad)?
            .mul(&r)?
            .sum_all()?
            .backward()?;
        let composed = ((d.as_tensor().broadcast_mul(&g.as_tensor().unsqueeze(2)?)? * 2.0)?
            .mul(&r)?
            .sum_all()?)
        .backward()?;
        for v in [d.as_tensor(), g.as_tensor()] {
            let e = (fused.get(v).unwrap() - composed.get(v).unwrap())?
                .abs()?
                .max_all()?
                .to_scalar::<f64>()?;
            assert!(e < 1e-12, "second order differs by {e}");
        }
        Ok(())
    }
}
