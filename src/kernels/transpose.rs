//! Transpositions that keep candle's strided views out of the training graph: [`MatmulT`],
//! `x w^T` whose backward hands `w` its gradient in `w`'s own layout, and [`Transpose`], each
//! item's matrix transposed (the NCHW flatten of an NHWC batch, a convolution weight as its
//! `(out, kh kw in)` matrix).
//!
//! Why: `x.matmul(&w.t())`, `permute` and the copies after them put strided views in the
//! graph, and candle's backward adds each transposed gradient into a zero-filled buffer
//! through its per-element strided index, on one thread: for DUQ's head weight `(c n, d)`,
//! the Fashion-MNIST CNN's fc weight (about 600,000 elements each), its flatten and its conv
//! weights a few milliseconds of every training step. [`MatmulT`] computes the product with
//! candle's own matmul on the same transposed layout, so its values are candle's, and in the
//! backward takes `dz w` and `x^T dz` as candle does and transposes the latter in parallel
//! tiles; [`Transpose`] moves values the same way. Both add zero to each gradient element as
//! candle's zero-filled accumulator does (which turns `-0` into `+0`): values and gradients
//! keep every bit, and candle is left contiguous adds.

use super::dispatch::with_float;
use super::elem::Elem;
use super::enabled::{entry, supported};
use super::storage::{into_storage, storage_slice};
use candle_core::{
    backend::BackendStorage, CpuStorage, CustomOp1, CustomOp2, Layout, Result, Shape, Tensor,
};

/// Side of the square tiles copied at a time: both matrices' rows stay in cache.
const TILE: usize = 32;

/// `(x (m, k), w (n, k)) -> x w^T (m, n)`, as `x.matmul(&w.t())`.
#[derive(Debug, Clone, Copy)]
pub struct MatmulT;

/// Each item's `(rows, cols)` matrix transposed, `(n, rows, cols) -> (n, cols, rows)`,
/// contiguous, viewed as `shape`; with `plus_zero` every value gets zero added as candle's
/// zero-filled gradient accumulator adds it (`-0` becomes `+0`). Its backward is the
/// transposition back, with zero added. (A gradient reaches a custom op already summed by
/// candle from zero, so the added zero changes nothing there today; it keeps the op equal to
/// candle's composition for any input.)
#[derive(Debug, Clone)]
pub struct Transpose {
    rows: usize,
    cols: usize,
    plus_zero: bool,
    shape: Vec<usize>,
    back: Vec<usize>,
}

fn transpose_k<T: Elem>(src: &[T], rows: usize, cols: usize, plus_zero: bool) -> Vec<T> {
    let mut out = vec![T::ZERO; src.len()];
    let item = rows * cols;
    if item == 0 {
        return out;
    }
    let add = |v: T| if plus_zero { T::ZERO + v } else { v };
    // Each piece is `TILE` rows of one item's output (columns `j0..` of its source).
    let per_item = cols.div_ceil(TILE);
    let mut pieces: Vec<&mut [T]> = Vec::with_capacity(per_item * (src.len() / item));
    for o in out.chunks_exact_mut(item) {
        pieces.extend(o.chunks_mut(TILE * rows));
    }
    use rayon::prelude::*;
    pieces.into_par_iter().enumerate().for_each(|(p, o)| {
        let (n, j0) = (p / per_item, (p % per_item) * TILE);
        let src = &src[n * item..(n + 1) * item];
        for i0 in (0..rows).step_by(TILE) {
            let i1 = (i0 + TILE).min(rows);
            for (jj, orow) in o.chunks_exact_mut(rows).enumerate() {
                let j = j0 + jj;
                for (i, v) in orow[i0..i1].iter_mut().enumerate() {
                    *v = add(src[(i0 + i) * cols + j]);
                }
            }
        }
    });
    out
}

impl CustomOp2 for MatmulT {
    fn name(&self) -> &'static str {
        "alkit-matmul-t"
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
                "{}: needs two matrices, got {:?} and {:?}",
                self.name(),
                l1.dims(),
                l2.dims()
            );
        };
        if k != k2 {
            candle_core::bail!(
                "{}: {:?} times the transpose of {:?}",
                self.name(),
                l1.dims(),
                l2.dims()
            );
        }
        if m * n == 0 || k == 0 {
            let zeros = with_float!(self.name(), [s1], |T| into_storage::<T>(vec![0.0; m * n]));
            return Ok((zeros, Shape::from((m, n))));
        }
        // The layout `w.t()` has, for the product candle computes with it.
        let wt = l2.transpose(0, 1)?;
        Ok((s1.matmul(s2, (1, m, n, k), l1, &wt)?, Shape::from((m, n))))
    }
    /// `dx = dz w`, `dw = 0 + (x^T dz)^T`, each as candle's backward of `x.matmul(&w.t())`.
    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let dx = grad.matmul(w)?;
        let (n, k) = w.dims2()?;
        let dw = x.t()?.matmul(grad)?.apply_op1(Transpose {
            rows: k,
            cols: n,
            plus_zero: true,
            shape: vec![n, k],
            back: vec![k, n],
        })?;
        Ok((Some(dx), Some(dw)))
    }
}

impl CustomOp1 for Transpose {
    fn name(&self) -> &'static str {
        "alkit-transpose"
    }
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        entry(self.name())?;
        let count = l.shape().elem_count();
        if l.dims() != self.back.as_slice()
            || self.shape.iter().product::<usize>() != count
            || !count.is_multiple_of((self.rows * self.cols).max(1))
        {
            candle_core::bail!(
                "{}: {:?} is not {:?} as items of {}x{}",
                self.name(),
                l.dims(),
                self.back,
                self.rows,
                self.cols
            );
        }
        let out = with_float!(self.name(), [s], |T| into_storage(transpose_k(
            storage_slice::<T>(s, l, self.name())?,
            self.rows,
            self.cols,
            self.plus_zero
        )));
        Ok((out, Shape::from(self.shape.clone())))
    }
    fn bwd(&self, _arg: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        let back = Transpose {
            rows: self.cols,
            cols: self.rows,
            plus_zero: true,
            shape: self.back.clone(),
            back: self.shape.clone(),
        };
        Ok(Some(grad.contiguous()?.apply_op1(back)?))
    }
}

/// `(b, h, w, c) -> (b, c h w)` in PyTorch's NCHW flatten order: [`Transpose`] of each item's
/// `(h w, c)` on the CPU, which moves the values as candle's permute and copy do and hands the
/// gradient back as candle's backward of them does (zero added), without its strided add.
pub(crate) fn flatten_nchw(x: &Tensor) -> Result<Option<Tensor>> {
    if !supported(x) {
        return Ok(None);
    }
    let (b, h, w, c) = x.dims4()?;
    let op = Transpose {
        rows: h * w,
        cols: c,
        plus_zero: false,
        shape: vec![b, c * h * w],
        back: vec![b, h, w, c],
    };
    x.contiguous()?.apply_op1(op).map(Some)
}

/// A convolution weight `(out, in, kh, kw)` as the matrix `(out, kh kw in)` with columns in
/// `(ki, kj, c)` order (candle's `permute((0, 2, 3, 1))` and reshape): [`Transpose`] of each
/// output channel's `(in, kh kw)` on the CPU, without the strided add in its backward.
pub(crate) fn weight_matrix(w: &Tensor) -> Result<Option<Tensor>> {
    if !supported(w) {
        return Ok(None);
    }
    let (out, cin, kh, kw) = w.dims4()?;
    let op = Transpose {
        rows: cin,
        cols: kh * kw,
        plus_zero: false,
        shape: vec![out, kh * kw * cin],
        back: vec![out, cin, kh, kw],
    };
    w.contiguous()?.apply_op1(op).map(Some)
}

/// `x (m, k) w^T` for `w (n, k)`: [`MatmulT`] on the CPU, candle's `x.matmul(&w.t())`
/// elsewhere (and where the kernels are off). Same values and gradients either way.
pub(crate) fn matmul_t(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    if supported(x) && x.rank() == 2 && w.rank() == 2 && x.dtype() == w.dtype() {
        x.apply_op2(w, MatmulT)
    } else {
        x.matmul(&w.t()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device, Var};

    fn bits(t: &Tensor) -> Vec<u64> {
        t.flatten_all()
            .unwrap()
            .to_dtype(DType::F64)
            .unwrap()
            .to_vec1::<f64>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect()
    }

    /// `f(x)` and the gradient of `sum(f(x) * seed)` with respect to `x`, as bits.
    fn value_and_grad(
        x: &Var,
        seed: &Tensor,
        f: impl Fn(&Tensor) -> Tensor,
    ) -> (Vec<u64>, Vec<u64>) {
        let y = f(x.as_tensor());
        let g = (&y * seed).unwrap().sum_all().unwrap().backward().unwrap();
        (bits(&y), bits(g.get(x.as_tensor()).unwrap()))
    }

    /// The transposition adds zero as candle's zero-filled accumulator does: `-0` becomes `+0`,
    /// every other value is moved unchanged (a gradient of products summed by gemm holds no
    /// `-0`, so this case is built by hand).
    #[test]
    fn the_gradient_transposition_is_candles_zero_plus_transpose_bit_for_bit() {
        let dev = Device::Cpu;
        let v: Vec<f32> = (0..33 * 70)
            .map(|i| match i % 5 {
                0 => -0.0,
                1 => 0.0,
                _ => (i as f32).sin() * 1e-3,
            })
            .collect();
        let a = Tensor::from_vec(v, (33, 70), &dev).unwrap();
        let ours = a
            .apply_op1(Transpose {
                rows: 33,
                cols: 70,
                plus_zero: true,
                shape: vec![70, 33],
                back: vec![33, 70],
            })
            .unwrap();
        let candle = a
            .t()
            .unwrap()
            .zeros_like()
            .unwrap()
            .add(&a.t().unwrap())
            .unwrap();
        assert_eq!(bits(&ours), bits(&candle));
        assert!(
            bits(&a.t().unwrap()) != bits(&candle),
            "the case holds a -0"
        );
    }

    /// The NCHW flatten of an NHWC batch: values and the gradient (whose seed holds `-0`s)
    /// equal candle's permute, copy and reshape bit for bit.
    #[test]
    fn flatten_nchw_matches_candles_permute_bit_for_bit_with_its_gradient() {
        let dev = Device::Cpu;
        for (b, h, w, c) in [(1, 1, 1, 1), (3, 3, 3, 70), (2, 7, 5, 33)] {
            for dtype in [DType::F32, DType::F64] {
                let x = Var::from_tensor(
                    &Tensor::randn(0f32, 1.0, (b, h, w, c), &dev)
                        .unwrap()
                        .to_dtype(dtype)
                        .unwrap(),
                )
                .unwrap();
                let n = c * h * w;
                let seed: Vec<f32> = (0..b * n)
                    .map(|i| if i % 3 == 0 { -0.0 } else { (i as f32).cos() })
                    .collect();
                let seed = Tensor::from_vec(seed, (b, n), &dev)
                    .unwrap()
                    .to_dtype(dtype)
                    .unwrap();
                let ours = value_and_grad(&x, &seed, |t| flatten_nchw(t).unwrap().unwrap());
                let candle = value_and_grad(&x, &seed, |t| {
                    t.permute((0, 3, 1, 2))
                        .unwrap()
                        .contiguous()
                        .unwrap()
                        .reshape((b, n))
                        .unwrap()
                });
                assert_eq!(ours, candle, "({b}, {h}, {w}, {c}) {dtype:?}");
            }
        }
    }

    /// A convolution weight as its matrix: values and gradient equal candle's permute and
    /// reshape bit for bit.
    #[test]
    fn weight_matrix_matches_candles_permute_bit_for_bit_with_its_gradient() {
        let dev = Device::Cpu;
        for (o, i, k) in [(1, 1, 1), (64, 1, 3), (5, 70, 3), (3, 33, 5)] {
            for dtype in [DType::F32, DType::F64] {
                let w = Var::from_tensor(
                    &Tensor::randn(0f32, 1.0, (o, i, k, k), &dev)
                        .unwrap()
                        .to_dtype(dtype)
                        .unwrap(),
                )
                .unwrap();
                let seed = Tensor::randn(0f32, 1.0, (o, k * k * i), &dev)
                    .unwrap()
                    .to_dtype(dtype)
                    .unwrap();
                let ours = value_and_grad(&w, &seed, |t| weight_matrix(t).unwrap().unwrap());
                let candle = value_and_grad(&w, &seed, |t| {
                    t.permute((0, 2, 3, 1))
                        .unwrap()
                        .reshape((o, k * k * i))
                        .unwrap()
                });
                assert_eq!(ours, candle, "({o}, {i}, {k}, {k}) {dtype:?}");
            }
        }
    }

    /// Values and the gradients of both inputs equal candle's `x.matmul(&w.t())` bit for bit,
    /// for shapes that do and do not fill whole tiles, in f32 and f64.
    #[test]
    fn matmul_t_matches_candles_product_with_t_bit_for_bit() {
        let dev = Device::Cpu;
        for (m, k, n) in [(1, 1, 1), (5, 70, 3), (128, 33, 64), (7, 257, 100)] {
            for dtype in [DType::F32, DType::F64] {
                let draw = |shape: (usize, usize), seed: f32| {
                    Tensor::randn(seed, 1.0, shape, &dev)
                        .unwrap()
                        .to_dtype(dtype)
                        .unwrap()
                };
                let x = Var::from_tensor(&draw((m, k), 0.0)).unwrap();
                let w = Var::from_tensor(&draw((n, k), 0.1)).unwrap();
                let s = draw((m, n), -0.2);
                let run = |ours: bool| {
                    let z = if ours {
                        x.as_tensor().apply_op2(w.as_tensor(), MatmulT).unwrap()
                    } else {
                        x.as_tensor().matmul(&w.as_tensor().t().unwrap()).unwrap()
                    };
                    let loss = (z.relu().unwrap() * &s).unwrap().sum_all().unwrap();
                    let g = loss.backward().unwrap();
                    (
                        bits(&z),
                        bits(g.get(x.as_tensor()).unwrap()),
                        bits(g.get(w.as_tensor()).unwrap()),
                    )
                };
                assert_eq!(run(true), run(false), "{m}x{k} * ({n}x{k})^T {dtype:?}");
            }
        }
        assert_eq!(
            bits(
                &matmul_t(
                    &Tensor::zeros((0, 3), DType::F32, &dev).unwrap(),
                    &Tensor::zeros((2, 3), DType::F32, &dev).unwrap()
                )
                .unwrap()
            ),
            Vec::<u64>::new()
        );
    }
}
