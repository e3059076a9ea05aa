//! im2col and col2im on NHWC tensors as custom ops, each the other's adjoint, so each one's
//! backward is the other and gradients are exact to any order: [`Im2col`] and [`Col2im`], with
//! any padding and stride; plus the tap iteration [`for_taps`] and the single-image
//! [`im2col_one`] that the convolution and gradient-norm kernels build on.

use super::dispatch::with_float;
use super::elem::Elem;
use super::enabled::entry;
use super::storage::{dims4, into_storage, storage_slice};
use super::threading::par_chunks;
use candle_core::{CpuStorage, CustomOp1, Layout, Result, Shape, Tensor};

/// im2col on NHWC with zero padding `pad` and stride `stride`: `(b, h, w, c)` ->
/// `(b, oh, ow, k*k*c)`, `oh = (h + 2 pad - k) / stride + 1`; columns ordered `(ki, kj, c)`.
#[derive(Debug, Clone, Copy)]
pub struct Im2col {
    /// Kernel size.
    pub k: usize,
    /// Zero padding on each side.
    pub pad: usize,
    /// Step between patches (1: every position).
    pub stride: usize,
}

/// The adjoint of [`Im2col`]: `(b, oh, ow, k*k*c)` -> `(b, h, w, c)`, summing overlapping
/// patches. With stride 1 the input size follows from the grid; with a larger stride several
/// sizes give the same grid, so it is given.
#[derive(Debug, Clone, Copy)]
pub struct Col2im {
    /// Kernel size.
    pub k: usize,
    /// Zero padding on each side.
    pub pad: usize,
    /// Step between patches.
    pub stride: usize,
    /// The input's `(h, w)`; `None` with stride 1 (then `oh + k - 1 - 2 pad`).
    pub input: Option<(usize, usize)>,
}

impl Im2col {
    /// The output grid `(oh, ow)` for an `h x w` input, `None` when the kernel does not fit.
    pub fn grid(&self, h: usize, w: usize) -> Option<(usize, usize)> {
        let s = self.stride.max(1);
        let (hp, wp) = (h + 2 * self.pad, w + 2 * self.pad);
        (self.k >= 1 && hp >= self.k && wp >= self.k)
            .then(|| ((hp - self.k) / s + 1, (wp - self.k) / s + 1))
    }
}

impl Col2im {
    /// The input size `(h, w)` this op writes for an `oh x ow` grid, `None` when the grid and
    /// the given size disagree.
    pub fn input_size(&self, oh: usize, ow: usize) -> Option<(usize, usize)> {
        let (h, w) = match self.input {
            Some(hw) => hw,
            None => {
                let (hp, wp) = (oh + self.k - 1, ow + self.k - 1);
                if hp < 2 * self.pad + 1 || wp < 2 * self.pad + 1 {
                    return None;
                }
                (hp - 2 * self.pad, wp - 2 * self.pad)
            }
        };
        let fwd = Im2col {
            k: self.k,
            pad: self.pad,
            stride: self.stride,
        };
        (h > 0 && w > 0 && fwd.grid(h, w) == Some((oh, ow))).then_some((h, w))
    }
}

/// Visits each (output pixel, tap) pair whose input pixel lies inside the image:
/// `f(out_pixel, tap, in_pixel)`.
#[inline(always)]
pub(crate) fn for_taps(
    h: usize,
    w: usize,
    k: usize,
    pad: usize,
    f: impl FnMut(usize, usize, usize),
) {
    for_taps_strided(h, w, k, pad, 1, f)
}

/// [`for_taps`] with patches `stride` apart.
#[inline(always)]
pub(crate) fn for_taps_strided(
    h: usize,
    w: usize,
    k: usize,
    pad: usize,
    stride: usize,
    mut f: impl FnMut(usize, usize, usize),
) {
    let (oh, ow) = (
        (h + 2 * pad - k) / stride + 1,
        (w + 2 * pad - k) / stride + 1,
    );
    for oy in 0..oh {
        for ox in 0..ow {
            for ki in 0..k {
                let iy = (oy * stride + ki) as isize - pad as isize;
                if iy < 0 || iy >= h as isize {
                    continue;
                }
                for kj in 0..k {
                    let ix = (ox * stride + kj) as isize - pad as isize;
                    if ix < 0 || ix >= w as isize {
                        continue;
                    }
                    f(oy * ow + ox, ki * k + kj, iy as usize * w + ix as usize);
                }
            }
        }
    }
}

pub(super) fn im2col_k<T: Elem>(
    x: &[T],
    (b, h, w, c): (usize, usize, usize, usize),
    op: Im2col,
    (oh, ow): (usize, usize),
) -> Vec<T> {
    let Im2col { k, pad, stride } = op;
    let kc = k * k * c;
    let mut out = vec![T::ZERO; b * oh * ow * kc];
    if out.is_empty() {
        return out;
    }
    par_chunks(&mut out, oh * ow * kc, |bi, ob| {
        let xb = &x[bi * h * w * c..(bi + 1) * h * w * c];
        for_taps_strided(h, w, k, pad, stride, |o, t, i| {
            ob[o * kc + t * c..o * kc + (t + 1) * c].copy_from_slice(&xb[i * c..(i + 1) * c]);
        });
    });
    out
}

/// im2col of one image `(h, w, c)`, no padding, single-threaded: `(oh * ow, k * k * c)`.
#[inline(always)]
pub(crate) fn im2col_one<T: Elem>(x: &[T], (h, w, c): (usize, usize, usize), k: usize) -> Vec<T> {
    let (oh, ow) = (h + 1 - k, w + 1 - k);
    let kc = k * k * c;
    let mut out = vec![T::ZERO; oh * ow * kc];
    for_taps(h, w, k, 0, |o, t, i| {
        out[o * kc + t * c..o * kc + (t + 1) * c].copy_from_slice(&x[i * c..(i + 1) * c]);
    });
    out
}

fn col2im_k<T: Elem>(
    cols: &[T],
    (b, oh, ow, kc): (usize, usize, usize, usize),
    op: Col2im,
    (h, w): (usize, usize),
) -> Vec<T> {
    let Col2im { k, pad, stride, .. } = op;
    let c = kc / (k * k);
    let mut out = vec![T::ZERO; b * h * w * c];
    if !out.is_empty() {
        par_chunks(&mut out, h * w * c, |bi, xb| {
            let cb = &cols[bi * oh * ow * kc..(bi + 1) * oh * ow * kc];
            for_taps_strided(h, w, k, pad, stride, |o, t, i| {
                let src = &cb[o * kc + t * c..o * kc + (t + 1) * c];
                for (d, &s) in xb[i * c..(i + 1) * c].iter_mut().zip(src) {
                    *d += s;
                }
            });
        });
    }
    out
}

impl CustomOp1 for Im2col {
    fn name(&self) -> &'static str {
        "alkit-im2col"
    }
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        entry(self.name())?;
        let (b, h, w, c) = dims4(l, self.name())?;
        if self.stride == 0 {
            candle_core::bail!("im2col: stride 0");
        }
        let Some((oh, ow)) = self.grid(h, w) else {
            candle_core::bail!(
                "im2col: {h}x{w} input is smaller than the {k}x{k} kernel",
                k = self.k
            );
        };
        let out = with_float!(self.name(), [s], |T| into_storage(im2col_k(
            storage_slice::<T>(s, l, "im2col")?,
            (b, h, w, c),
            *self,
            (oh, ow)
        )));
        Ok((out, Shape::from((b, oh, ow, self.k * self.k * c))))
    }
    fn bwd(&self, arg: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        let g = grad.contiguous()?;
        let (_, h, w, _) = arg.dims4()?;
        Ok(Some(g.apply_op1(Col2im {
            k: self.k,
            pad: self.pad,
            stride: self.stride,
            input: Some((h, w)),
        })?))
    }
}

impl CustomOp1 for Col2im {
    fn name(&self) -> &'static str {
        "alkit-col2im"
    }
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        entry(self.name())?;
        let d = dims4(l, self.name())?;
        let k = self.k;
        if k == 0 || self.stride == 0 || d.3 % (k * k) != 0 {
            candle_core::bail!(
                "col2im: {} columns are not {k}x{k} patches (stride {})",
                d.3,
                self.stride
            );
        }
        let Some((h, w)) = self.input_size(d.1, d.2) else {
            candle_core::bail!(
                "col2im: a {}x{} grid does not come from {:?} with padding {} and stride {}",
                d.1,
                d.2,
                self.input,
                self.pad,
                self.stride
            );
        };
        let out = with_float!(self.name(), [s], |T| into_storage(col2im_k(
            storage_slice::<T>(s, l, "col2im")?,
            d,
            *self,
            (h, w)
        )));
        Ok((out, Shape::from((d.0, h, w, d.3 / (k * k)))))
    }
    fn bwd(&self, _arg: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        let g = grad.contiguous()?;
        Ok(Some(g.apply_op1(Im2col {
            k: self.k,
            pad: self.pad,
            stride: self.stride,
        })?))
    }
}
