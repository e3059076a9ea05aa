//! A dense layer, `y = x W^T + b`, PyTorch's `nn.Linear` (layout and default initialisation).

use super::{Ctx, Layer, Tape};
use crate::nn::gradnorm::SiteKind;
use candle_core::{Result, Tensor};
use candle_nn::{Init, VarBuilder};

/// `(b, in)` -> `(b, out)`. Tensors `weight (out, in)`, `bias (out,)` when it has one.
pub struct Linear {
    weight: Tensor,
    bias: Option<Tensor>,
}

impl Linear {
    /// PyTorch's default: weight and bias `U(-1/sqrt(in), 1/sqrt(in))`.
    pub fn new(inputs: usize, outputs: usize, bias: bool, vb: VarBuilder) -> Result<Self> {
        let b = 1.0 / (inputs as f64).sqrt();
        let init = Init::Uniform { lo: -b, up: b };
        Ok(Self {
            weight: vb.get_with_hints((outputs, inputs), "weight", init)?,
            bias: if bias {
                Some(vb.get_with_hints(outputs, "bias", init)?)
            } else {
                None
            },
        })
    }

    /// Weight `(out, in)`.
    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    /// Bias `(out,)`, if the layer has one.
    pub fn bias(&self) -> Option<&Tensor> {
        self.bias.as_ref()
    }
}

impl Layer for Linear {
    fn forward(&self, x: &Tensor, ctx: &mut Ctx<'_>) -> Result<Tensor> {
        let (inputs, w) = (x.dim(1)?, self.weight.dim(1)?);
        if x.rank() != 2 || inputs != w {
            candle_core::bail!(
                "a linear layer of {w} inputs got activations {:?}",
                x.dims()
            );
        }
        let mut z = ctx.matmul_t(x, &ctx.param(&self.weight))?;
        if let Some(b) = &self.bias {
            z = z.broadcast_add(&ctx.param(b))?;
        }
        ctx.site(SiteKind::Dense, x, z, self.bias.is_some())
    }
    fn backward(&self, d: &Tensor, tape: &mut Tape) -> Result<Tensor> {
        tape.site(d)?;
        d.matmul(&tape.param(&self.weight))
    }
    fn as_linear(&self) -> Option<&Linear> {
        Some(self)
    }
    fn independent_rows(&self) -> bool {
        true
    }
}
