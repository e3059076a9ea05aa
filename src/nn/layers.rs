//! Layers built with candle ops, with the workarounds for candle's CPU pitfalls (measured on
//! 0.11.1, see the project notes) baked in.
//!
//! - [`Conv2d`] runs on NHWC activations as im2col + one matmul, so its backward is candle's
//!   fast matmul backward plus col2im, and second-order gradients are exact.
//! - [`max_pool2x2`] replaces `Tensor::max_pool2d`, whose backward was measured wrong (candle
//!   0.11.1); this one is exact whatever the version.
//! - On CPU (`f32`/`f64`) im2col and max-pool run as the custom kernels of
//!   the crate's `kernels`; elsewhere as generic compositions (shifted `narrow` slices + `cat`;
//!   `reshape` + two `max`), so every device gives the same results up to float rounding.
//! - [`dropout`] draws its mask from alkit's seeded RNG, not candle's unseeded one.
//!
//! Weights keep PyTorch's layouts (`conv: (out, in, kh, kw)`, `linear: (out, in)`) and
//! PyTorch's default initialisation, so PyTorch state dicts map one to one.

use crate::kernels;
use crate::rng::{uniform, Rng};
use candle_core::{DType, Result, Tensor, D};
use candle_nn::{Init, VarBuilder};

/// PyTorch's default `nn.Linear`: weight and bias `U(-1/sqrt(in), 1/sqrt(in))`.
pub fn linear(inputs: usize, outputs: usize, vb: VarBuilder) -> Result<candle_nn::Linear> {
    let b = 1.0 / (inputs as f64).sqrt();
    let init = Init::Uniform { lo: -b, up: b };
    let w = vb.get_with_hints((outputs, inputs), "weight", init)?;
    let bias = vb.get_with_hints(outputs, "bias", init)?;
    Ok(candle_nn::Linear::new(w, Some(bias)))
}

/// A 2-D convolution, stride 1, square kernel, zero padding, on NHWC activations.
#[derive(Debug, Clone)]
pub struct Conv2d {
    /// Weight `(out, in, k, k)`, PyTorch layout.
    weight: Tensor,
    /// Bias `(out,)`.
    bias: Tensor,
    kernel: usize,
    padding: usize,
}

impl Conv2d {
    /// PyTorch's default `nn.Conv2d` init: `U(-1/sqrt(fan_in), 1/sqrt(fan_in))` for weight and
    /// bias, `fan_in = in * k * k`.
    pub fn new(
        inputs: usize,
        outputs: usize,
        kernel: usize,
        padding: usize,
        vb: VarBuilder,
    ) -> Result<Self> {
        let b = 1.0 / ((inputs * kernel * kernel) as f64).sqrt();
        let init = Init::Uniform { lo: -b, up: b };
        let weight = vb.get_with_hints((outputs, inputs, kernel, kernel), "weight", init)?;
        let bias = vb.get_with_hints(outputs, "bias", init)?;
        Ok(Self {
            weight,
            bias,
            kernel,
            padding,
        })
    }

    /// Weight `(out, in, k, k)`.
    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    /// `(b, h, w, in)` -> `(b, h', w', out)` with `h' = h + 2 pad - k + 1`.
    pub fn forward_nhwc(&self, x: &Tensor) -> Result<Tensor> {
        self.linear_part(x)?.broadcast_add(&self.bias)
    }

    /// `maxpool2x2(relu(conv(x)))`: `(b, h, w, in)` -> `(b, h'/2, w'/2, out)`. On CPU the bias,
    /// ReLU and pooling run as one fused kernel with an exact backward.
    pub fn forward_relu_pool_nhwc(&self, x: &Tensor) -> Result<Tensor> {
        if kernels::supported(x) {
            return self
                .linear_part(x)?
                .apply_op2(&self.bias, kernels::BiasReluPool);
        }
        max_pool2x2(&self.forward_nhwc(x)?.relu()?)
    }

    /// The convolution without bias, `(b, h', w', out)`.
    fn linear_part(&self, x: &Tensor) -> Result<Tensor> {
        let (out, cin, k, _) = self.weight.dims4()?;
        let (b, h, w, c) = x.dims4()?;
        if c != cin {
            candle_core::bail!("conv expects {cin} input channels, got {c}");
        }
        let cols = im2col(x, k, self.padding)?; // (b, oh, ow, k*k*cin)
        let (oh, ow) = (h + 2 * self.padding + 1 - k, w + 2 * self.padding + 1 - k);
        // (out, in, k, k) -> (out, k, k, in) -> (out, k*k*in): matches im2col's column order.
        let wmat = self
            .weight
            .permute((0, 2, 3, 1))?
            .reshape((out, k * k * cin))?;
        let y = cols
            .reshape((b * oh * ow, k * k * cin))?
            .matmul(&wmat.t()?)?;
        y.reshape((b, oh, ow, out))
    }

    /// Bias `(out,)`.
    pub fn bias(&self) -> &Tensor {
        &self.bias
    }

    /// Kernel size.
    pub fn kernel(&self) -> usize {
        self.kernel
    }

    /// Zero padding on each side.
    pub fn padding(&self) -> usize {
        self.padding
    }
}

/// im2col on NHWC with zero padding: `(b, h, w, c)` -> `(b, h+2p-k+1, w+2p-k+1, k*k*c)`,
/// columns ordered `(ki, kj, c)`. Differentiable to any order on every device.
pub fn im2col(x: &Tensor, k: usize, pad: usize) -> Result<Tensor> {
    im2col_strided(x, k, pad, 1)
}

/// [`im2col`] with patches `stride` apart: `(b, h, w, c)` -> `(b, oh, ow, k*k*c)`,
/// `oh = (h + 2 pad - k) / stride + 1`.
pub fn im2col_strided(x: &Tensor, k: usize, pad: usize, stride: usize) -> Result<Tensor> {
    let op = kernels::Im2col { k, pad, stride };
    let (_, h, w, _) = x.dims4()?;
    let Some((oh, ow)) = op.grid(h, w).filter(|_| stride > 0) else {
        candle_core::bail!(
            "im2col: a {k}x{k} kernel (stride {stride}) does not fit {h}x{w} with padding {pad}"
        );
    };
    if kernels::supported(x) {
        return x.contiguous()?.apply_op1(op);
    }
    let x = if pad > 0 {
        x.pad_with_zeros(1, pad, pad)?.pad_with_zeros(2, pad, pad)?
    } else {
        x.clone()
    };
    if k == 1 && stride == 1 {
        return Ok(x);
    }
    let mut slices = Vec::with_capacity(k * k);
    for i in 0..k {
        let rows = every(&x, 1, i, oh, stride)?;
        for j in 0..k {
            slices.push(every(&rows, 2, j, ow, stride)?);
        }
    }
    Tensor::cat(&slices, 3)?.contiguous()
}

/// `count` entries of dimension `dim` from `start`, `stride` apart (candle has no stepped
/// slice: a narrow, a pad to whole steps, a reshape that puts the step in its own dimension).
fn every(x: &Tensor, dim: usize, start: usize, count: usize, stride: usize) -> Result<Tensor> {
    if stride == 1 {
        return x.narrow(dim, start, count);
    }
    let span = (count - 1) * stride + 1;
    let t = x
        .narrow(dim, start, span)?
        .pad_with_zeros(dim, 0, stride - 1)?;
    let mut dims = t.dims().to_vec();
    dims[dim] = count;
    dims.insert(dim + 1, stride);
    t.reshape(dims)?.narrow(dim + 1, 0, 1)?.squeeze(dim + 1)
}

/// The adjoint of [`every`]: `x`'s entries along `dim` placed `stride` apart from `start` in a
/// dimension of `size`, zeros between.
fn spread(x: &Tensor, dim: usize, start: usize, size: usize, stride: usize) -> Result<Tensor> {
    let count = x.dim(dim)?;
    let t = if stride == 1 {
        x.clone()
    } else {
        let mut dims = x.dims().to_vec();
        dims.insert(dim + 1, 1);
        let spaced = x.reshape(dims)?.pad_with_zeros(dim + 1, 0, stride - 1)?;
        let mut flat = x.dims().to_vec();
        flat[dim] = count * stride;
        spaced
            .reshape(flat)?
            .narrow(dim, 0, (count - 1) * stride + 1)?
    };
    let span = t.dim(dim)?;
    t.pad_with_zeros(dim, start, size - start - span)
}

/// col2im, the adjoint of [`im2col`]: `(b, oh, ow, k*k*c)` columns ordered `(ki, kj, c)` ->
/// `(b, h, w, c)` with `h = oh + k - 1 - 2 pad`, each column added back where its patch came
/// from. Differentiable on every device (the generic form is `k*k` shifted adds).
pub fn col2im(g: &Tensor, k: usize, pad: usize) -> Result<Tensor> {
    col2im_strided(g, k, pad, 1, None)
}

/// The adjoint of [`im2col_strided`]: `(b, oh, ow, k*k*c)` -> `(b, h, w, c)`, the input's
/// `(h, w)` given (needed when `stride > 1`, where several sizes give one grid).
pub fn col2im_strided(
    g: &Tensor,
    k: usize,
    pad: usize,
    stride: usize,
    input: Option<(usize, usize)>,
) -> Result<Tensor> {
    let op = kernels::Col2im {
        k,
        pad,
        stride,
        input,
    };
    let (_, oh, ow, kkc) = g.dims4()?;
    if k == 0 || stride == 0 || kkc % (k * k) != 0 {
        candle_core::bail!("col2im: {kkc} columns are not {k}x{k} patches (stride {stride})");
    }
    let Some((h, w)) = op.input_size(oh, ow) else {
        candle_core::bail!(
            "col2im: a {oh}x{ow} grid does not come from {input:?} with padding {pad} and stride {stride}"
        );
    };
    if kernels::supported(g) {
        return g.contiguous()?.apply_op1(op);
    }
    let c = kkc / (k * k);
    let (hp, wp) = (h + 2 * pad, w + 2 * pad);
    let mut acc: Option<Tensor> = None;
    for i in 0..k {
        for j in 0..k {
            let placed = spread(&g.narrow(3, (i * k + j) * c, c)?, 1, i, hp, stride)?;
            let placed = spread(&placed, 2, j, wp, stride)?;
            acc = Some(match acc {
                None => placed,
                Some(a) => (a + placed)?,
            });
        }
    }
    let acc = acc.expect("k >= 1");
    acc.narrow(1, pad, h)?.narrow(2, pad, w)?.contiguous()
}

/// The backward of [`max_pool2x2`]: `g (b, h/2, w/2, c)` sent to each window's first maximum
/// of `x (b, h, w, c)` (row-major within the window, PyTorch's rule), zeros elsewhere.
/// Differentiable in `g` on every device; `x` only chooses where.
pub fn max_pool2x2_route(x: &Tensor, g: &Tensor) -> Result<Tensor> {
    if kernels::supported(x) {
        return x
            .contiguous()?
            .apply_op2(&g.contiguous()?, kernels::MaxPoolRoute);
    }
    let (b, h, w, c) = x.dims4()?;
    let (h2, w2) = (h / 2, w / 2);
    let mask = first_max_mask(&windows(&x.detach())?)?.to_dtype(g.dtype())?;
    let routed = g
        .reshape((b, h2, 1, w2, 1, c))?
        .broadcast_mul(&mask)?
        .reshape((b, 2 * h2, 2 * w2, c))?;
    routed
        .pad_with_zeros(1, 0, h - 2 * h2)?
        .pad_with_zeros(2, 0, w - 2 * w2)
}

/// 2x2 max-pool, stride 2, floor semantics, on NHWC: `(b, h, w, c)` -> `(b, h/2, w/2, c)`.
/// Gradients go to the window's first maximum (PyTorch's rule) on every device, ties included
/// (a constant background ties every window); exact to any order.
pub fn max_pool2x2(x: &Tensor) -> Result<Tensor> {
    if kernels::supported(x) {
        return x.contiguous()?.apply_op1(kernels::MaxPool);
    }
    let (b, h, w, c) = x.dims4()?;
    let (h2, w2) = (h / 2, w / 2);
    let win = windows(x)?;
    // The first maximum times one, the others times zero: the value is the maximum exactly,
    // and the gradient reaches the first maximum only (candle's `max` would split it among
    // ties).
    let mask = first_max_mask(&win.detach())?;
    (win * mask)?.sum(4)?.sum(2)?.reshape((b, h2, w2, c))
}

/// `x (b, h, w, c)` cut to even sizes as 2x2 windows `(b, h/2, 2, w/2, 2, c)`.
fn windows(x: &Tensor) -> Result<Tensor> {
    let (b, h, w, c) = x.dims4()?;
    let (h2, w2) = (h / 2, w / 2);
    x.narrow(1, 0, 2 * h2)?
        .narrow(2, 0, 2 * w2)?
        .reshape((b, h2, 2, w2, 2, c))
}

/// One at each window's first maximum (row-major within the window, PyTorch's rule), zero
/// elsewhere, for windows `(b, h2, 2, w2, 2, c)`.
fn first_max_mask(win: &Tensor) -> Result<Tensor> {
    let max = win.max_keepdim(4)?.max_keepdim(2)?;
    let taps = (0..4).map(|t| win.narrow(2, t / 2, 1)?.narrow(4, t % 2, 1));
    let firsts = first_maxima(taps, &max)?;
    Tensor::cat(
        &[
            Tensor::cat(&[&firsts[0], &firsts[1]], 4)?,
            Tensor::cat(&[&firsts[2], &firsts[3]], 4)?,
        ],
        2,
    )
}

/// For each window, one at its first tap equal to the window's maximum `max` and zero at the
/// others (PyTorch's rule for ties), `taps` in row-major window order, each of `max`'s shape.
pub(crate) fn first_maxima(
    taps: impl Iterator<Item = Result<Tensor>>,
    max: &Tensor,
) -> Result<Vec<Tensor>> {
    let mut taken = max.zeros_like()?;
    let mut firsts = Vec::new();
    for tap in taps {
        let hit = tap?.eq(max)?.to_dtype(max.dtype())?;
        let first = (&hit * (1.0 - &taken)?)?;
        taken = (taken + &first)?;
        firsts.push(first);
    }
    Ok(firsts)
}

/// Inverted dropout with a mask from `rng`: keeps each entry with probability `1 - p` and
/// scales kept entries by `1 / (1 - p)`.
pub fn dropout(x: &Tensor, p: f32, rng: &mut Rng) -> Result<Tensor> {
    if p <= 0.0 {
        return Ok(x.clone());
    }
    let keep = 1.0 - f64::from(p);
    let scale = (1.0 / keep) as f32;
    let mask: Vec<f32> = (0..x.elem_count())
        .map(|_| if uniform(rng) < keep { scale } else { 0.0 })
        .collect();
    let mask = Tensor::from_vec(mask, x.shape(), x.device())?.to_dtype(x.dtype())?;
    x.mul(&mask)
}

/// `(b, c, h, w)` -> `(b, h, w, c)`, contiguous (free for one channel).
pub fn nchw_to_nhwc(x: &Tensor) -> Result<Tensor> {
    let (b, c, h, w) = x.dims4()?;
    if c == 1 {
        x.reshape((b, h, w, 1))
    } else {
        x.permute((0, 2, 3, 1))?.contiguous()
    }
}

/// `(b, h, w, c)` -> `(b, c*h*w)` in PyTorch's NCHW flatten order, so `fc` weights trained in
/// PyTorch after `x.flatten(1)` load unchanged.
pub fn flatten_nchw_order(x: &Tensor) -> Result<Tensor> {
    // On the CPU one parallel pass each way, with the values and gradients of the composition
    // below (its backward adds a strided permutation on one thread).
    if let Some(flat) = kernels::transpose::flatten_nchw(x)? {
        return Ok(flat);
    }
    let (b, h, w, c) = x.dims4()?;
    x.permute((0, 3, 1, 2))?
        .contiguous()?
        .reshape((b, c * h * w))
}

/// `max(x, 0)`, differentiable to any order; on the CPU one pass forward and one backward
/// (the crate's kernel), elsewhere candle's `relu`.
pub fn relu(x: &Tensor) -> Result<Tensor> {
    if kernels::supported(x) {
        return x.contiguous()?.apply_op1(kernels::relu::Relu);
    }
    x.relu()
}

/// ReLU's backward from its output: `g` where `y > 0`, else 0 (one pass on the CPU).
pub fn relu_mask(y: &Tensor, g: &Tensor) -> Result<Tensor> {
    if kernels::supported(y) {
        return y
            .contiguous()?
            .apply_op2(&g.contiguous()?, kernels::relu::ReluMask);
    }
    g * y.gt(0.0)?.to_dtype(g.dtype())?
}

/// `t (q, c)` or `(n, q, c)` summed over `q`: `(c,)` or `(n, c)`, as a product with ones
/// (candle's CPU sum over a dimension other than the last walks memory with a stride, about
/// twenty times slower than a matmul that reads it once, in order). Differentiable.
pub fn sum_rows(t: &Tensor) -> Result<Tensor> {
    match t.rank() {
        2 => {
            let q = t.dim(0)?;
            Tensor::ones((1, q), t.dtype(), t.device())?
                .matmul(&t.contiguous()?)?
                .squeeze(0)
        }
        3 => {
            let (n, q, _) = t.dims3()?;
            Tensor::ones((n, 1, q), t.dtype(), t.device())?
                .matmul(&t.contiguous()?)?
                .squeeze(1)
        }
        r => candle_core::bail!("sum_rows takes rank 2 or 3, got rank {r}"),
    }
}

/// Log-probabilities `(b, c)` from logits `(b, c)` (candle's `log_softmax`, which has a correct
/// backward, unlike `softmax_last_dim`).
pub fn log_probs(logits: &Tensor) -> Result<Tensor> {
    candle_nn::ops::log_softmax(logits, D::Minus1)
}

/// Casts to `f32` and returns the values of a rank-2 tensor row-major.
pub fn to_vec2_f32(x: &Tensor) -> Result<Vec<f32>> {
    x.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()
}
