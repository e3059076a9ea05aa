//! Pooling: max-pooling with any window, stride and padding (the gradient to each window's
//! first maximum, PyTorch's rule, on every device; the crate's kernels on the CPU), and global
//! average pooling.

use super::layer::{Ctx, Layer};
use super::tape::Tape;
use crate::kernels;
use crate::nn::layers::{
    col2im_strided, first_maxima, im2col_strided, max_pool2x2, max_pool2x2_route, sum_rows,
};
use candle_core::{Result, Tensor};

/// `(b, h, w, c)` -> `(b, oh, ow, c)`, `oh = (h + 2 padding - kernel) / stride + 1`; padding
/// never wins a window.
pub struct MaxPool2d {
    kernel: usize,
    stride: usize,
    padding: usize,
}

impl MaxPool2d {
    /// A max-pool of `kernel x kernel` windows `stride` apart, padded by `padding`.
    pub fn new(kernel: usize, stride: usize, padding: usize) -> Result<Self> {
        if kernel == 0 || stride == 0 || 2 * padding > kernel {
            candle_core::bail!(
                "max-pool kernel {kernel}, stride {stride}, padding {padding}: the padding must \
                 be at most half the kernel"
            );
        }
        Ok(Self {
            kernel,
            stride,
            padding,
        })
    }

    fn window(&self) -> kernels::Window {
        kernels::Window {
            k: self.kernel,
            s: self.stride,
            p: self.padding,
        }
    }

    fn is_2x2(&self) -> bool {
        (self.kernel, self.stride, self.padding) == (2, 2, 0)
    }

    /// `x` padded with values far below every entry (exact for the real entries, never a
    /// maximum), its windows `(b, oh, ow, k*k, c)`, and the one-hot first maximum of each
    /// (row-major within the window, PyTorch's rule), detached.
    fn windows(&self, x: &Tensor) -> Result<(Tensor, Tensor)> {
        let (k, s, p) = (self.kernel, self.stride, self.padding);
        let (b, _, _, c) = x.dims4()?;
        let x = if p > 0 {
            let lowered = x
                .ones_like()?
                .pad_with_zeros(1, p, p)?
                .pad_with_zeros(2, p, p)?;
            (x.pad_with_zeros(1, p, p)?.pad_with_zeros(2, p, p)? + ((lowered - 1.0)? * 1e30)?)?
        } else {
            x.clone()
        };
        let taps = im2col_strided(&x, k, 0, s)?; // (b, oh, ow, k*k*c), columns (ki, kj, c)
        let (_, oh, ow, _) = taps.dims4()?;
        let taps = taps.reshape((b, oh, ow, k * k, c))?;
        let max = taps.detach().max_keepdim(3)?;
        let each = (0..k * k).map(|t| Ok(taps.narrow(3, t, 1)?.detach()));
        let firsts = first_maxima(each, &max)?;
        Ok((taps, Tensor::cat(&firsts, 3)?))
    }
}

impl Layer for MaxPool2d {
    fn forward(&self, x: &Tensor, ctx: &mut Ctx<'_>) -> Result<Tensor> {
        ctx.save(x);
        if self.is_2x2() {
            return max_pool2x2(x);
        }
        if kernels::supported(x) {
            return x.contiguous()?.apply_op1(kernels::WindowMax(self.window()));
        }
        // The first maximum times one, the others times zero: the value exactly, the gradient
        // to the first maximum only.
        let (taps, mask) = self.windows(x)?;
        (taps * mask)?.sum(3)
    }
    fn backward(&self, d: &Tensor, tape: &mut Tape) -> Result<Tensor> {
        let x = tape.tensor()?;
        if self.is_2x2() {
            return max_pool2x2_route(&x, d);
        }
        if kernels::supported(&x) {
            return x
                .contiguous()?
                .apply_op2(&d.contiguous()?, kernels::WindowRoute(self.window()));
        }
        let (k, s, p) = (self.kernel, self.stride, self.padding);
        let (b, h, w, c) = x.dims4()?;
        let (_, mask) = self.windows(&x)?;
        let (_, oh, ow, _, _) = mask.dims5()?;
        let cols = mask
            .broadcast_mul(&d.unsqueeze(3)?)?
            .reshape((b, oh, ow, k * k * c))?;
        let padded = col2im_strided(&cols, k, 0, s, Some((h + 2 * p, w + 2 * p)))?;
        padded.narrow(1, p, h)?.narrow(2, p, w)?.contiguous()
    }
    fn independent_rows(&self) -> bool {
        true
    }
}

/// `(b, h, w, c)` -> `(b, c)`: the mean over positions.
pub struct GlobalAvgPool;

impl Layer for GlobalAvgPool {
    fn forward(&self, x: &Tensor, ctx: &mut Ctx<'_>) -> Result<Tensor> {
        let (b, h, w, c) = x.dims4()?;
        ctx.save_dims(x.dims());
        sum_rows(&x.reshape((b, h * w, c))?)? / (h * w) as f64
    }
    fn backward(&self, d: &Tensor, tape: &mut Tape) -> Result<Tensor> {
        let &[b, h, w, c] = tape.dims()?.as_slice() else {
            candle_core::bail!("global average pool: the saved shape is not NHWC");
        };
        (d / (h * w) as f64)?
            .reshape((b, 1, 1, c))?
            .broadcast_as((b, h, w, c))?
            .contiguous()
    }
    fn independent_rows(&self) -> bool {
        true
    }
}
