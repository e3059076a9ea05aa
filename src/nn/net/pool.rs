//! Pooling: max-pooling with any window, stride and padding (the gradient to each window's
//! first maximum, PyTorch's rule, on every device), and global average pooling.

use super::{Ctx, Layer};
use crate::nn::layers::{im2col_strided, max_pool2x2, sum_rows};
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
}

impl Layer for MaxPool2d {
    fn forward(&self, x: &Tensor, _: &mut Ctx<'_>) -> Result<Tensor> {
        let (k, s, p) = (self.kernel, self.stride, self.padding);
        if (k, s, p) == (2, 2, 0) {
            return max_pool2x2(x);
        }
        let (b, _, _, c) = x.dims4()?;
        // Padding lowered far below every value: exact for the real entries, never a maximum.
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
        // The first maximum times one, the others times zero: the value exactly, the gradient
        // to the first maximum only.
        let mut taken = max.zeros_like()?;
        let mut firsts = Vec::with_capacity(k * k);
        for t in 0..k * k {
            let hit = taps
                .narrow(3, t, 1)?
                .detach()
                .eq(&max)?
                .to_dtype(x.dtype())?;
            let first = (&hit * (1.0 - &taken)?)?;
            taken = (taken + &first)?;
            firsts.push(first);
        }
        let mask = Tensor::cat(&firsts, 3)?;
        (taps * mask)?.sum(3)
    }
}

/// `(b, h, w, c)` -> `(b, c)`: the mean over positions.
pub struct GlobalAvgPool;

impl Layer for GlobalAvgPool {
    fn forward(&self, x: &Tensor, _: &mut Ctx<'_>) -> Result<Tensor> {
        let (b, h, w, c) = x.dims4()?;
        sum_rows(&x.reshape((b, h * w, c))?)? / (h * w) as f64
    }
}
