//! ReLU as two custom ops whose backward is one pass (and, for passes that differentiate
//! nothing, [`AddRelu`], a residual block's sum and ReLU; [`ChannelScale`] and
//! [`ChannelAffine`], batch norm's backward and forward in evaluation): [`Relu`] (`max(x, 0)`) and its backward
//! [`ReluMask`] (`g` where the output is positive, else 0), which is its own backward in `g`,
//! so gradients through it are exact to any order. Candle's own ReLU backward builds a
//! comparison, a conversion and a product (three passes and three graph nodes) per layer and
//! backward, which in a gradient-evidence pass (one backward per class) is a large part of the
//! cost of a residual network.

use super::dispatch::with_float;
use super::elem::Elem;
use super::enabled::entry;
use super::storage::{into_storage, storage_slice};
use super::threading::par_chunks;
use candle_core::{CpuStorage, CustomOp1, CustomOp2, CustomOp3, Layout, Result, Shape, Tensor};

/// Elements per parallel piece (small tensors stay on one thread).
const PIECE: usize = 1 << 16;

/// `max(x, 0)` elementwise.
#[derive(Debug, Clone, Copy)]
pub struct Relu;

/// `(y, g) -> g * (y > 0)`: ReLU's backward from its output `y`.
#[derive(Debug, Clone, Copy)]
pub struct ReluMask;

fn relu_k<T: Elem>(x: &[T]) -> Vec<T> {
    let mut out = vec![T::ZERO; x.len()];
    par_chunks(&mut out, PIECE, |i, o| {
        let src = &x[i * PIECE..i * PIECE + o.len()];
        for (d, &s) in o.iter_mut().zip(src) {
            *d = if s > T::ZERO { s } else { T::ZERO };
        }
    });
    out
}

/// `f(a[i], b[i])` for every element of two same-sized slices, in parallel pieces.
fn zip_k<T: Elem>(a: &[T], b: &[T], f: impl Fn(T, T) -> T + Sync) -> Vec<T> {
    let mut out = vec![T::ZERO; a.len()];
    par_chunks(&mut out, PIECE, |i, o| {
        let at = i * PIECE;
        for ((d, &x), &y) in o.iter_mut().zip(&a[at..]).zip(&b[at..]) {
            *d = f(x, y);
        }
    });
    out
}

/// `f(out_row, x_row)` for every row of `c` channels of channel-last `x`, in parallel pieces
/// of whole rows.
fn rows_k<T: Elem>(x: &[T], c: usize, f: impl Fn(&mut [T], &[T]) + Sync) -> Vec<T> {
    let mut out = vec![T::ZERO; x.len()];
    let piece = (PIECE / c.max(1)).max(1) * c;
    par_chunks(&mut out, piece, |i, o| {
        let src = &x[i * piece..i * piece + o.len()];
        for (row_o, row_x) in o.chunks_exact_mut(c).zip(src.chunks_exact(c)) {
            f(row_o, row_x);
        }
    });
    out
}

fn mask_k<T: Elem>(y: &[T], g: &[T]) -> Vec<T> {
    zip_k(y, g, |yv, gv| if yv > T::ZERO { gv } else { T::ZERO })
}

impl CustomOp1 for Relu {
    fn name(&self) -> &'static str {
        "alkit-relu"
    }
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        entry(self.name())?;
        let out = with_float!(self.name(), [s], |T| into_storage(relu_k(storage_slice::<
            T,
        >(
            s,
            l,
            self.name()
        )?)));
        Ok((out, l.shape().clone()))
    }
    fn bwd(&self, _arg: &Tensor, res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(
            res.contiguous()?.apply_op2(&grad.contiguous()?, ReluMask)?,
        ))
    }
}

impl CustomOp2 for ReluMask {
    fn name(&self) -> &'static str {
        "alkit-relu-mask"
    }
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        entry(self.name())?;
        if l1.shape() != l2.shape() {
            candle_core::bail!(
                "relu mask: output {:?} and gradient {:?} differ",
                l1.dims(),
                l2.dims()
            );
        }
        let name = self.name();
        let out = with_float!(name, [s1, s2], |T| into_storage(mask_k(
            storage_slice::<T>(s1, l1, name)?,
            storage_slice::<T>(s2, l2, name)?
        )));
        Ok((out, l1.shape().clone()))
    }
    fn bwd(
        &self,
        y: &Tensor,
        _g: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        // Linear in `g` with the same mask; `y` only chooses where.
        Ok((
            None,
            Some(y.contiguous()?.apply_op2(&grad.contiguous()?, ReluMask)?),
        ))
    }
}

/// `(x (.., c), s (c,)) -> x * s`: a per-channel scale of channel-last activations in one
/// parallel pass (candle's broadcast product recomputes an index per element). No backward:
/// for the layer library's backward passes, which run outside autograd.
#[derive(Debug, Clone, Copy)]
pub struct ChannelScale;

fn scale_k<T: Elem>(x: &[T], s: &[T]) -> Vec<T> {
    rows_k(x, s.len(), |o, r| {
        for ((d, &v), &k) in o.iter_mut().zip(r).zip(s) {
            *d = v * k;
        }
    })
}

impl CustomOp2 for ChannelScale {
    fn name(&self) -> &'static str {
        "alkit-channel-scale"
    }
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        entry(self.name())?;
        let c = l2.shape().elem_count();
        if l2.dims().len() != 1 || l1.dims().last() != Some(&c) || c == 0 {
            candle_core::bail!(
                "channel scale: activations {:?} and scale {:?} do not match",
                l1.dims(),
                l2.dims()
            );
        }
        let name = self.name();
        let out = with_float!(name, [s1, s2], |T| into_storage(scale_k(
            storage_slice::<T>(s1, l1, name)?,
            storage_slice::<T>(s2, l2, name)?
        )));
        Ok((out, l1.shape().clone()))
    }
    fn bwd(
        &self,
        _: &Tensor,
        _: &Tensor,
        _: &Tensor,
        _: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        candle_core::bail!("channel scale has no backward: it serves backward passes only")
    }
}

/// `(x (.., c), s (c,), t (c,)) -> x * s + t`: a per-channel scale and shift of channel-last
/// activations in one parallel pass, rounded as candle's `broadcast_mul` then
/// `broadcast_add` round (a product, then a sum: no fused multiply-add), so its values are
/// theirs bit for bit. Batch norm's evaluation forward when nothing is differentiated; no
/// backward.
#[derive(Debug, Clone, Copy)]
pub struct ChannelAffine;

fn affine_k<T: Elem>(x: &[T], s: &[T], t: &[T]) -> Vec<T> {
    rows_k(x, s.len(), |o, r| {
        for (((d, &v), &k), &b) in o.iter_mut().zip(r).zip(s).zip(t) {
            *d = v * k + b;
        }
    })
}

impl CustomOp3 for ChannelAffine {
    fn name(&self) -> &'static str {
        "alkit-channel-affine"
    }
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        entry(self.name())?;
        let c = l2.shape().elem_count();
        if l2.dims().len() != 1 || l3.dims() != l2.dims() || l1.dims().last() != Some(&c) || c == 0
        {
            candle_core::bail!(
                "channel affine: activations {:?}, scale {:?} and shift {:?} do not match",
                l1.dims(),
                l2.dims(),
                l3.dims()
            );
        }
        let name = self.name();
        let out = with_float!(name, [s1, s2, s3], |T| into_storage(affine_k(
            storage_slice::<T>(s1, l1, name)?,
            storage_slice::<T>(s2, l2, name)?,
            storage_slice::<T>(s3, l3, name)?
        )));
        Ok((out, l1.shape().clone()))
    }
}

/// `(a, b) -> max(a + b, 0)` elementwise: a residual block's sum and its ReLU in one parallel
/// pass, equal to candle's sum followed by [`Relu`] bit for bit. No backward: for passes that
/// differentiate nothing.
#[derive(Debug, Clone, Copy)]
pub struct AddRelu;

fn add_relu_k<T: Elem>(a: &[T], b: &[T]) -> Vec<T> {
    zip_k(a, b, |x, y| {
        let s = x + y;
        if s > T::ZERO {
            s
        } else {
            T::ZERO
        }
    })
}

impl CustomOp2 for AddRelu {
    fn name(&self) -> &'static str {
        "alkit-add-relu"
    }
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        entry(self.name())?;
        if l1.shape() != l2.shape() {
            candle_core::bail!(
                "add relu: shapes {:?} and {:?} differ",
                l1.dims(),
                l2.dims()
            );
        }
        let name = self.name();
        let out = with_float!(name, [s1, s2], |T| into_storage(add_relu_k(
            storage_slice::<T>(s1, l1, name)?,
            storage_slice::<T>(s2, l2, name)?
        )));
        Ok((out, l1.shape().clone()))
    }
}
