//! [`Net`]: a [`Sequential`] of layers as a [`Classifier`], with gradient evidence from one
//! recording pass and MC dropout that computes everything before the first dropout once.

use super::{Ctx, Layer, Sequential};
use crate::nn::gradnorm::{site_grad_norms, GradOut};
use crate::nn::layers::nchw_to_nhwc;
use crate::nn::{Ask, Classifier, Mode, Offer};
use crate::rng::Rng;
use candle_core::{Result, Tensor};

/// Recorded layer inputs and probes per gradient-evidence pass, in elements (2^26: 256 MiB
/// of f32); a pass's backward needs a few times that.
pub const SITE_BUDGET: usize = 1 << 26;

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

    /// Per-candidate gradient norms of `x (n * copies, ...)` from recording passes (see
    /// [`site_grad_norms`]); layers are the parameterised layers in forward order.
    ///
    /// A pass keeps every layer's input for the whole batch (a ResNet-18 on 32x32 images:
    /// about 14 MB per row), so candidates go in groups whose recorded inputs stay near
    /// `SITE_BUDGET` elements, sized from the first candidate's pass. Candidates do not
    /// interact, so the grouping changes nothing but memory.
    pub fn grad_norms(&self, x: &Tensor, copies: usize, expected: bool) -> Result<GradOut> {
        let m = x.dim(0)?;
        if copies == 0 || m % copies != 0 {
            candle_core::bail!("{m} inputs are not whole candidates of {copies} copies");
        }
        let n = m / copies;
        let (mut out, per_candidate) =
            self.grad_norms_pass(&x.narrow(0, 0, copies.min(m))?, copies, expected)?;
        let group = (SITE_BUDGET / per_candidate.max(1)).max(1);
        let mut at = 1;
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

    /// One recording pass; also returns the elements it recorded per candidate.
    fn grad_norms_pass(
        &self,
        x: &Tensor,
        copies: usize,
        expected: bool,
    ) -> Result<(GradOut, usize)> {
        if x.dim(0)? == 0 {
            candle_core::bail!("no candidates to take gradients of");
        }
        let mut ctx = Ctx::recording();
        let logits = self.run(&x.detach(), &mut ctx)?;
        let sites = ctx.take_sites();
        if sites.is_empty() {
            candle_core::bail!("the model has no parameterised layer to take gradients of");
        }
        let recorded: usize = sites
            .iter()
            .map(|s| s.input.elem_count() + s.probe.elem_count())
            .sum();
        let per_candidate = recorded / (x.dim(0)? / copies).max(1);
        Ok((
            site_grad_norms(&logits, &sites, copies, expected)?,
            per_candidate,
        ))
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
            _ => Ok(None),
        }
    }

    fn classes(&self) -> usize {
        self.classes
    }
}
