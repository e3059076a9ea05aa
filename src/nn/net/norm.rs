//! Batch normalisation over the channels (the last dimension of NHWC or `(b, f)` activations),
//! PyTorch's `BatchNorm2d`: batch statistics in training (biased variance), running statistics
//! updated with momentum 0.1 from the unbiased variance, running statistics in evaluation.

use super::layer::{Ctx, Layer};
use super::tape::Tape;
use crate::nn::gradnorm::SiteKind;
use crate::nn::layers::sum_rows;
use candle_core::{Result, Tensor, Var};
use candle_nn::{Init, VarBuilder};

/// PyTorch's default epsilon.
const EPS: f64 = 1e-5;
/// PyTorch's default momentum.
const MOMENTUM: f64 = 0.1;

/// Tensors `weight`, `bias`, `running_mean`, `running_var`, all `(channels,)`. The running
/// statistics are buffers: updated in place by training passes, never by the optimiser.
pub struct BatchNorm2d {
    weight: Tensor,
    bias: Tensor,
    running_mean: Var,
    running_var: Var,
}

impl BatchNorm2d {
    /// Weight 1, bias 0, running mean 0 and variance 1 (PyTorch's initialisation).
    pub fn new(channels: usize, vb: VarBuilder) -> Result<Self> {
        let mean = vb.get_with_hints(channels, "running_mean", Init::Const(0.0))?;
        let var = vb.get_with_hints(channels, "running_var", Init::Const(1.0))?;
        Ok(Self {
            weight: vb.get_with_hints(channels, "weight", Init::Const(1.0))?,
            bias: vb.get_with_hints(channels, "bias", Init::Const(0.0))?,
            // Shares the builder's storage for a seeded builder's variables, so a checkpoint
            // saves the updated statistics.
            running_mean: Var::from_tensor(&mean)?,
            running_var: Var::from_tensor(&var)?,
        })
    }

    /// `1 / sqrt(running_var + eps)` per channel, detached.
    fn inv_std(&self) -> Result<Tensor> {
        (self.running_var.as_tensor().detach() + EPS)?
            .sqrt()?
            .recip()
    }

    /// `(x - mean) / sqrt(var + eps)` with the batch's statistics (biased variance), the
    /// running statistics updated; `x (.., c)` flattened to `(rows, c)`. Also returns
    /// `sqrt(var + eps)` `(c,)`.
    fn normalise_batch(&self, x: &Tensor) -> Result<(Tensor, Tensor)> {
        let flat = x.reshape(((), x.dim(x.rank() - 1)?))?;
        let count = flat.dim(0)?;
        if count < 2 {
            candle_core::bail!("batch norm needs more than one value per channel to train");
        }
        let mean = (sum_rows(&flat)? / count as f64)?;
        let centred = flat.broadcast_sub(&mean)?;
        let var = (sum_rows(&centred.sqr()?)? / count as f64)?;
        let unbiased = (var.detach() * (count as f64 / (count - 1) as f64))?;
        let blend = |old: &Var, new: &Tensor| -> Result<()> {
            let v = ((old.as_tensor().detach() * (1.0 - MOMENTUM))?
                + (new.detach().to_dtype(old.dtype())? * MOMENTUM)?)?;
            old.set(&v)
        };
        blend(&self.running_mean, &mean)?;
        blend(&self.running_var, &unbiased)?;
        let std = (var + EPS)?.sqrt()?;
        Ok((centred.broadcast_div(&std)?.reshape(x.shape())?, std))
    }
}

impl Layer for BatchNorm2d {
    fn forward(&self, x: &Tensor, ctx: &mut Ctx<'_>) -> Result<Tensor> {
        let channels = self.weight.dim(0)?;
        if x.dim(x.rank() - 1)? != channels {
            candle_core::bail!(
                "a batch norm of {channels} channels got activations {:?}",
                x.dims()
            );
        }
        if ctx.training() {
            let (xhat, std) = self.normalise_batch(x)?;
            let z = xhat
                .broadcast_mul(&ctx.param(&self.weight))?
                .broadcast_add(&ctx.param(&self.bias))?;
            if !ctx.is_recording() {
                return Ok(z);
            }
            ctx.save(&xhat);
            ctx.save(&std);
            return ctx.site(SiteKind::Scale, &xhat, z, true);
        }
        // Evaluation folded into one scale and shift per channel: two passes over the
        // activations instead of four, and two graph nodes (each costs a zero fill and an add
        // in candle's backward). A recording pass also keeps the normalised input for its
        // site.
        let mean = self.running_mean.as_tensor().detach();
        let inv = self.inv_std()?;
        let scale = (ctx.param(&self.weight) * &inv)?;
        let shift = (ctx.param(&self.bias) - (&mean * &scale)?)?;
        if !ctx.is_recording() {
            if ctx.inference_kernels(&[x, &scale, &shift]) {
                return x.contiguous()?.apply_op3(
                    &scale.contiguous()?,
                    &shift.contiguous()?,
                    crate::kernels::relu::ChannelAffine,
                );
            }
            return x.broadcast_mul(&scale)?.broadcast_add(&shift);
        }
        let z = x.broadcast_mul(&scale)?.broadcast_add(&shift)?;
        let xhat = x.detach().broadcast_sub(&mean)?.broadcast_mul(&inv)?;
        ctx.site(SiteKind::Scale, &xhat, z, true)
    }
    /// Evaluation mode: `d` times the per-channel scale `weight / sqrt(running_var + eps)`.
    /// Training mode (a differentiable tape of a training pass): through the batch statistics
    /// too, `(g - mean g - x_hat mean(g x_hat)) / std` with `g = d * weight` and the means over
    /// the batch's rows, as autograd of the training forward gives it.
    fn backward(&self, d: &Tensor, tape: &mut Tape) -> Result<Tensor> {
        tape.site(d)?;
        if tape.training() {
            let std = tape.tensor()?;
            let xhat = tape.tensor()?;
            let c = std.dim(0)?;
            let g = d
                .broadcast_mul(&tape.param(&self.weight))?
                .reshape(((), c))?;
            let xhat = xhat.reshape(((), c))?;
            let rows = g.dim(0)? as f64;
            let mean_g = (sum_rows(&g)? / rows)?;
            let mean_gx = (sum_rows(&(&g * &xhat)?)? / rows)?;
            return g
                .broadcast_sub(&mean_g)?
                .sub(&xhat.broadcast_mul(&mean_gx)?)?
                .broadcast_div(&std)?
                .reshape(d.shape());
        }
        let scale = (tape.param(&self.weight) * self.inv_std()?)?;
        if crate::kernels::supported(d) && !d.track_op() && !scale.track_op() {
            return d
                .contiguous()?
                .apply_op2(&scale.contiguous()?, crate::kernels::relu::ChannelScale);
        }
        d.broadcast_mul(&scale)
    }
    fn independent_rows(&self) -> bool {
        true
    }
}
