//! A 2-D convolution with stride, zero padding and groups, as im2col plus one matmul per group
//! on NHWC activations (the crate's im2col kernel on the CPU, shifted slices elsewhere), so its
//! backward is a matmul plus col2im and its gradient-evidence site is the unfolded input.

use super::layer::{Ctx, Layer};
use super::tape::Tape;
use crate::kernels;
use crate::nn::gradnorm::SiteKind;
use crate::nn::layers::{col2im_strided, im2col_strided};
use candle_core::{Result, Tensor};
use candle_nn::{Init, VarBuilder};

/// The shape of a [`Conv2d`] beyond its channel counts.
#[derive(Debug, Clone, Copy)]
pub struct Conv2dConfig {
    /// Square kernel size.
    pub kernel: usize,
    /// Step between output positions.
    pub stride: usize,
    /// Zero padding on each side.
    pub padding: usize,
    /// Channel groups: input and output channels split into this many independent parts.
    pub groups: usize,
    /// Whether the layer has a bias.
    pub bias: bool,
    /// The weight's initialisation; `None`: PyTorch's default `U(-1/sqrt(fan_in), ..)`.
    pub init: Option<Init>,
}

impl Default for Conv2dConfig {
    fn default() -> Self {
        Self {
            kernel: 3,
            stride: 1,
            padding: 0,
            groups: 1,
            bias: true,
            init: None,
        }
    }
}

/// `(b, h, w, in)` -> `(b, oh, ow, out)`, `oh = (h + 2 padding - kernel) / stride + 1`.
/// Tensors `weight (out, in/groups, k, k)`, `bias (out,)` when it has one.
pub struct Conv2d {
    weight: Tensor,
    bias: Option<Tensor>,
    cfg: Conv2dConfig,
}

impl Conv2d {
    /// A convolution from `inputs` to `outputs` channels.
    pub fn new(inputs: usize, outputs: usize, cfg: Conv2dConfig, vb: VarBuilder) -> Result<Self> {
        let g = cfg.groups;
        if cfg.kernel == 0
            || cfg.stride == 0
            || g == 0
            || !inputs.is_multiple_of(g)
            || !outputs.is_multiple_of(g)
        {
            candle_core::bail!(
                "a convolution of {inputs} -> {outputs} channels cannot have kernel {}, stride {} \
                 and {g} groups",
                cfg.kernel,
                cfg.stride
            );
        }
        let k = cfg.kernel;
        let fan_in = (inputs / g * k * k) as f64;
        let default = Init::Uniform {
            lo: -1.0 / fan_in.sqrt(),
            up: 1.0 / fan_in.sqrt(),
        };
        let weight = vb.get_with_hints(
            (outputs, inputs / g, k, k),
            "weight",
            cfg.init.unwrap_or(default),
        )?;
        let bias = if cfg.bias {
            Some(vb.get_with_hints(outputs, "bias", default)?)
        } else {
            None
        };
        Ok(Self { weight, bias, cfg })
    }

    /// Weight `(out, in/groups, k, k)`.
    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    /// The unfolded input `(b, oh, ow, k*k*in)`, columns `(ki, kj, c)`.
    fn unfold(&self, x: &Tensor) -> Result<Tensor> {
        let Conv2dConfig {
            kernel: k,
            stride: s,
            padding: p,
            ..
        } = self.cfg;
        if k == 1 && p == 0 {
            return if s == 1 {
                Ok(x.clone())
            } else {
                im2col_strided(x, 1, 0, s)
            };
        }
        im2col_strided(x, k, p, s)
    }
}

impl Layer for Conv2d {
    fn forward(&self, x: &Tensor, ctx: &mut Ctx<'_>) -> Result<Tensor> {
        let (out, cg, k, _) = self.weight.dims4()?;
        let g = self.cfg.groups;
        let (b, _, _, cin) = x.dims4()?;
        if cin != cg * g {
            candle_core::bail!(
                "a convolution of {} input channels got activations {:?}",
                cg * g,
                x.dims()
            );
        }
        let padding = self.cfg.padding;
        if self.uses_kernel(x) {
            // The crate's convolution kernels: no stored patches, Winograd for wide 3x3
            // layers, and a gradient-evidence site formed per candidate from the input.
            let wmat = ctx
                .param(&self.weight)
                .permute((0, 2, 3, 1))?
                .reshape((out, k * k * cin))?;
            let conv = kernels::conv::Conv { k, pad: padding };
            let mut z = x.contiguous()?.apply_op2(&wmat, conv)?;
            if let Some(bias) = &self.bias {
                z = z.broadcast_add(&ctx.param(bias))?;
            }
            let kind = SiteKind::ConvImage { kernel: k, padding };
            return ctx.site(kind, x, z, self.bias.is_some());
        }
        ctx.save_dims(x.dims());
        let cols = self.unfold(x)?;
        let (_, oh, ow, width) = cols.dims4()?;
        let rows = b * oh * ow;
        // (out, in/g, k, k) -> (out, k, k, in/g): im2col's (ki, kj, c) column order.
        let w = ctx.param(&self.weight).permute((0, 2, 3, 1))?;
        let z = if g == 1 {
            let wmat = w.reshape((out, width))?;
            ctx.matmul_t(&cols.reshape((rows, width))?, &wmat)?
        } else {
            let og = out / g;
            let a = cols
                .reshape((rows, k * k, g, cg))?
                .permute((2, 0, 1, 3))?
                .reshape((g, rows, k * k * cg))?;
            let wg = w.reshape((g, og, k * k * cg))?;
            a.matmul(&wg.transpose(1, 2)?)?
                .permute((1, 0, 2))?
                .reshape((rows, out))?
        };
        let mut z = z.reshape((b, oh, ow, out))?;
        if let Some(bias) = &self.bias {
            z = z.broadcast_add(&ctx.param(bias))?;
        }
        let kind = SiteKind::Conv {
            taps: k * k,
            groups: g,
        };
        ctx.site(kind, &cols, z, self.bias.is_some())
    }

    fn backward(&self, d: &Tensor, tape: &mut Tape) -> Result<Tensor> {
        tape.site(d)?;
        let (out, cg, k, _) = self.weight.dims4()?;
        let Conv2dConfig {
            stride,
            padding,
            groups: g,
            ..
        } = self.cfg;
        let cin = cg * g;
        // (out, in/g, k, k) -> (out, k, k, in/g): im2col's (ki, kj, c) column order.
        let w = tape.param(&self.weight).permute((0, 2, 3, 1))?;
        if self.uses_kernel(d) {
            let wmat = w.reshape((out, k * k * cin))?;
            let conv_t = kernels::conv::ConvT { k, pad: padding };
            return d.contiguous()?.apply_op2(&wmat, conv_t);
        }
        let &[b, h, wd, _] = tape.dims()?.as_slice() else {
            candle_core::bail!("convolution: the saved input shape is not NHWC");
        };
        let (_, oh, ow, _) = d.dims4()?;
        let rows = b * oh * ow;
        let d = d.reshape((rows, out))?;
        let cols = if g == 1 {
            d.matmul(&w.reshape((out, k * k * cin))?)?
        } else {
            let og = out / g;
            let dg = d.reshape((rows, g, og))?.permute((1, 0, 2))?.contiguous()?;
            dg.matmul(&w.reshape((g, og, k * k * cg))?)? // (g, rows, k*k*cg)
                .reshape((g, rows, k * k, cg))?
                .permute((1, 2, 0, 3))?
                .reshape((rows, k * k * cin))?
        };
        let cols = cols.reshape((b, oh, ow, k * k * cin))?;
        if k == 1 && padding == 0 && stride == 1 {
            return Ok(cols);
        }
        col2im_strided(&cols, k, padding, stride, Some((h, wd)))
    }
    fn independent_rows(&self) -> bool {
        // A grouped convolution's products are candle's, batched over groups.
        self.cfg.groups == 1
    }
}

impl Conv2d {
    /// Whether this layer runs as the crate's CPU convolution kernels on `x`'s device.
    fn uses_kernel(&self, x: &Tensor) -> bool {
        kernels::supported(x) && self.cfg.groups == 1 && self.cfg.stride == 1 && self.cfg.kernel > 1
    }
}
