//! [`Net`]: a [`Sequential`] of layers as a [`Classifier`], with gradient evidence from one
//! recording pass and MC dropout that computes everything before the first dropout once.

use super::layer::{Ctx, Layer};
use super::sequential::Sequential;
use crate::nn::gradnorm::GradOut;
use crate::nn::layers::nchw_to_nhwc;
use crate::nn::{Ask, Classifier, LastLayer, Mode, Offer};
use crate::rng::Rng;
use candle_core::{Result, Tensor};

/// Activations a gradient-evidence pass saves for its backward, in elements (2^27: 512 MiB
/// of f32); a pass's backward needs a few times that.
pub const SITE_BUDGET: usize = 1 << 27;

/// A classifier built from layers: NCHW images (converted to NHWC once) or `(b, f)` vectors
/// in, logits `(b, classes)` out.
pub struct Net {
    body: Sequential,
    classes: usize,
}

impl Net {
    /// `body` ending in `classes` logits.
    pub fn new(body: Sequential, classes: usize) -> Self {
        Self { body, classes }
    }

    fn input(x: &Tensor) -> Result<Tensor> {
        match x.rank() {
            4 => nchw_to_nhwc(x),
            _ => Ok(x.clone()),
        }
    }

    /// Logits `(b, c)` for the pass `ctx` describes.
    pub fn run(&self, x: &Tensor, ctx: &mut Ctx<'_>) -> Result<Tensor> {
        self.body.forward(&Self::input(x)?, ctx)
    }

    /// Per-candidate gradient norms of `x (n * copies, ...)` (the quantities of
    /// [`crate::nn::gradnorm::autograd_grad_norms`]): a recording forward, then one backward
    /// of the whole batch per class row through the layers' own vector-Jacobian products
    /// (see [`super::Tape`]); layers are the parameterised layers in forward order.
    ///
    /// A pass keeps what every layer's backward needs for the whole batch, so candidates go
    /// in groups whose saved activations stay near [`SITE_BUDGET`] elements, sized from a
    /// first group of up to 8. Candidates do not
    /// interact, so the grouping changes nothing but memory.
    pub fn grad_norms(&self, x: &Tensor, copies: usize, expected: bool) -> Result<GradOut> {
        let m = x.dim(0)?;
        if copies == 0 || m == 0 || m % copies != 0 {
            candle_core::bail!("{m} inputs are not whole candidates of {copies} copies");
        }
        let n = m / copies;
        // A first group of up to 8 candidates sizes the rest.
        let first = n.min(8);
        let (mut out, per_candidate) =
            self.grad_norms_pass(&x.narrow(0, 0, first * copies)?, copies, expected)?;
        let group = (SITE_BUDGET / per_candidate.max(1)).max(1);
        let mut at = first;
        while at < n {
            let len = group.min(n - at);
            let (more, _) =
                self.grad_norms_pass(&x.narrow(0, at * copies, len * copies)?, copies, expected)?;
            out.sq.extend(more.sq);
            out.kl_l1.extend(more.kl_l1);
            at += len;
        }
        Ok(out)
    }

    /// One recording pass and a backward per class row through the layers' own
    /// vector-Jacobian products (see [`super::Tape`]); also returns the elements it saved per
    /// candidate.
    fn grad_norms_pass(
        &self,
        x: &Tensor,
        copies: usize,
        expected: bool,
    ) -> Result<(GradOut, usize)> {
        // Whole candidates: `grad_norms` checked the batch and cuts it at candidates.
        let n = x.dim(0)? / copies;
        let mut ctx = Ctx::recording();
        let logits = self.run(&x.detach(), &mut ctx)?;
        let mut tape = ctx
            .take_tape()
            .ok_or_else(|| candle_core::Error::Msg("a recording pass lost its tape".into()))?;
        let layers = tape.sites();
        if layers == 0 {
            candle_core::bail!("the model has no parameterised layer to take gradients of");
        }
        let per_candidate = tape.saved_elements() / n;
        let (m, c) = logits.dims2()?;
        let p = candle_nn::ops::softmax_last_dim(&logits)?;
        // Copy 0's probabilities beside every copy of its candidate `(m, c)`.
        let p0 = p
            .reshape((n, copies, c))?
            .narrow(1, 0, 1)?
            .broadcast_as((n, copies, c))?
            .reshape((m, c))?;
        let rows = c + usize::from(expected);
        tape.begin(n, copies, rows);
        let scale = 1.0 / copies as f64;
        for r in 0..rows {
            // d/dlogits of the copies' mean of log p_r: (e_r - p) / copies; of the expected
            // row's mean of sum_c p0_c log p_c: (p0 - p) / copies.
            let d = if r < c {
                let onehot = Tensor::zeros((1, c), p.dtype(), p.device())?.slice_assign(
                    &[0..1, r..r + 1],
                    &Tensor::ones((1, 1), p.dtype(), p.device())?,
                )?;
                (p.broadcast_sub(&onehot)? * -scale)?
            } else {
                ((&p0 - &p)? * scale)?
            };
            tape.start_row(Some(r));
            self.body.backward(&d, &mut tape)?;
        }
        // GradNorm: d KL(u || p0) / dlogits of copy 0 = p0 - 1/C; the last layer's L1.
        let first = Tensor::zeros((n, copies, 1), p.dtype(), p.device())?.slice_assign(
            &[0..n, 0..1, 0..1],
            &Tensor::ones((n, 1, 1), p.dtype(), p.device())?,
        )?;
        let d = (p0 - 1.0 / c as f64)?
            .reshape((n, copies, c))?
            .broadcast_mul(&first)?
            .reshape((m, c))?;
        tape.start_row(None);
        self.body.backward(&d, &mut tape)?;
        let (sq, kl_l1) = tape.finish();
        Ok((
            GradOut {
                sq,
                rows,
                layers,
                kl_l1,
            },
            per_candidate,
        ))
    }

    /// Inference-mode inputs of the last layer `(b, d)` with its weight and bias, when the
    /// stack ends in a [`super::Linear`]; `None` otherwise.
    pub fn last_layer(&self, x: &Tensor) -> Result<Option<LastLayer>> {
        let Some(linear) = self.body.last().and_then(|l| l.as_linear()) else {
            return Ok(None);
        };
        let h = self.body.forward_range(
            &Self::input(&x.detach())?,
            0..self.body.len() - 1,
            &mut Ctx::inference(),
        )?;
        LastLayer::new(&h, linear.weight(), linear.bias()).map(Some)
    }

    /// `samples` MC-dropout logits `(b, c)`: the layers before the first dropout once, the
    /// rest once per sample with masks from `rng`.
    pub fn mc_dropout(&self, x: &Tensor, samples: usize, rng: &mut Rng) -> Result<Vec<Tensor>> {
        let Some(split) = self.body.first_stochastic() else {
            candle_core::bail!(
                "the model has no dropout layer, so MC-dropout draws would all be the same: use \
                 an ensemble or a model with dropout"
            );
        };
        let h = self
            .body
            .forward_range(&Self::input(x)?, 0..split, &mut Ctx::inference())?;
        (0..samples)
            .map(|_| {
                let mut ctx = Ctx::mc_dropout(rng);
                Ok(self
                    .body
                    .forward_range(&h, split..self.body.len(), &mut ctx)?
                    .detach())
            })
            .collect()
    }
}

impl Classifier for Net {
    fn forward(&self, x: &Tensor, mode: &mut Mode<'_>) -> Result<Tensor> {
        let mut ctx = match mode {
            Mode::Train(rng) => Ctx::train(rng),
            Mode::Eval => Ctx::eval(),
        };
        self.run(x, &mut ctx)
    }

    fn predict(&self, x: &Tensor) -> Result<Tensor> {
        Ok(self.run(&x.detach(), &mut Ctx::inference())?.detach())
    }

    fn offer(&self, ask: Ask<'_>) -> Result<Option<Offer>> {
        match ask {
            Ask::GradNorms {
                x,
                copies,
                expected,
            } => Ok(Some(Offer::GradNorms(
                self.grad_norms(x, copies, expected)?,
            ))),
            Ask::McDropout { x, samples, rng } => {
                Ok(Some(Offer::Draws(self.mc_dropout(x, samples, rng)?)))
            }
            Ask::LastLayer { x } => self.last_layer(x).map(|l| l.map(Offer::LastLayer)),
            _ => Ok(None),
        }
    }

    fn classes(&self) -> usize {
        self.classes
    }

    /// On the CPU with the crate's kernels, when every layer says so ([`Layer::independent_rows`]):
    /// the library's layers round each row of their products on their own
    /// (`kernels::MatmulRows`, the convolution kernels' row-exact products) and work row by
    /// row otherwise.
    fn independent_rows(&self, device: &candle_core::Device) -> bool {
        crate::kernels::supported_on(device) && self.body.independent_rows()
    }
}
