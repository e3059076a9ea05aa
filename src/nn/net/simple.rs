//! The parameter-free layers: ReLU, dropout (masks from alkit's seeded RNG), and flattening in
//! PyTorch's NCHW order.

use super::layer::{relu_backward, Ctx, Layer};
use super::tape::Tape;
use crate::nn::layers::{dropout, flatten_nchw_order};
use candle_core::{Result, Tensor};

/// `max(x, 0)`.
pub struct Relu;

impl Layer for Relu {
    fn forward(&self, x: &Tensor, ctx: &mut Ctx<'_>) -> Result<Tensor> {
        ctx.relu(x)
    }
    fn backward(&self, d: &Tensor, tape: &mut Tape) -> Result<Tensor> {
        relu_backward(d, tape)
    }
    fn independent_rows(&self) -> bool {
        true
    }
}

/// Inverted dropout with probability `p`, on when the pass draws masks (training, MC dropout).
pub struct Dropout {
    p: f32,
}

impl Dropout {
    /// Dropout with probability `p` in `[0, 1)`.
    pub fn new(p: f32) -> Result<Self> {
        if !(0.0..1.0).contains(&p) {
            candle_core::bail!("dropout probability {p} is not in [0, 1)");
        }
        Ok(Self { p })
    }
}

impl Layer for Dropout {
    fn forward(&self, x: &Tensor, ctx: &mut Ctx<'_>) -> Result<Tensor> {
        match ctx.dropout_rng() {
            Some(rng) => dropout(x, self.p, rng),
            None => Ok(x.clone()),
        }
    }
    /// Evaluation-mode dropout is the identity.
    fn backward(&self, d: &Tensor, _: &mut Tape) -> Result<Tensor> {
        Ok(d.clone())
    }
    fn stochastic(&self) -> bool {
        self.p > 0.0
    }
    fn independent_rows(&self) -> bool {
        true
    }
}

/// `(b, h, w, c)` -> `(b, c*h*w)` in NCHW order (PyTorch's `flatten(1)` after a convolution),
/// other ranks flattened as they are.
pub struct Flatten;

impl Layer for Flatten {
    fn forward(&self, x: &Tensor, ctx: &mut Ctx<'_>) -> Result<Tensor> {
        ctx.save_dims(x.dims());
        match x.rank() {
            4 => flatten_nchw_order(x),
            _ => x.flatten_from(1),
        }
    }
    fn backward(&self, d: &Tensor, tape: &mut Tape) -> Result<Tensor> {
        match tape.dims()?.as_slice() {
            &[b, h, w, c] => d.reshape((b, c, h, w))?.permute((0, 2, 3, 1))?.contiguous(),
            dims => d.reshape(dims),
        }
    }
    fn independent_rows(&self) -> bool {
        true
    }
}
