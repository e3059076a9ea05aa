//! The [`Classifier`] trait every model implements, the forward [`Mode`], and the one
//! capability mechanism for evidence beyond logits ([`Ask`], [`Offer`]) with the typed helpers
//! callers use ([`grad_norms`], [`mc_dropout_logits`], [`member_logits`], [`kernel_values`],
//! [`last_layer`]).

use crate::rng::Rng;
use candle_core::{Device, Result, Tensor};

/// Whether a forward pass trains (dropout on, masks from the given RNG) or evaluates.
pub enum Mode<'a> {
    /// Inference: dropout off, batch norm (if any) in eval mode.
    Eval,
    /// Training: dropout masks drawn from `rng`.
    Train(&'a mut Rng),
}

/// A classifier: inputs `(b, *item_shape)` to logits `(b, c)`.
///
/// This is the one trait a user's own candle model implements to be trained in the loop and
/// scored by every probability-based scorer.
pub trait Classifier: Send + Sync {
    /// Logits `(b, c)` for inputs `(b, *item_shape)`, differentiable w.r.t. the parameters.
    fn forward(&self, x: &Tensor, mode: &mut Mode<'_>) -> Result<Tensor>;
    /// Inference-only logits `(b, c)`: no autograd graph, free to take fused fast paths. The
    /// default is `forward` in eval mode, detached.
    fn predict(&self, x: &Tensor) -> Result<Tensor> {
        Ok(self.forward(x, &mut Mode::Eval)?.detach())
    }
    /// Evidence beyond logits that this model can give (see [`Ask`]): `None` (the default)
    /// when it has no such capability or no fast path for it. Callers go through the typed
    /// helpers ([`grad_norms`], [`mc_dropout_logits`], [`member_logits`], [`kernel_values`]),
    /// which supply the generic fallbacks; a model answers only what it does better or only
    /// it can do.
    fn offer(&self, ask: Ask<'_>) -> Result<Option<Offer>> {
        let _ = ask;
        Ok(None)
    }
    /// A term the training loss adds once per step, divided by the number of training items
    /// (so that the loss is the negative evidence lower bound per item when it is a prior's
    /// KL divergence, as for [`BayesMlp`](super::BayesMlp)). `None` (the default): nothing.
    fn penalty(&self) -> Result<Option<Tensor>> {
        Ok(None)
    }
    /// Number of classes `c`.
    fn classes(&self) -> usize;
    /// Whether, on `device`, row `i` of [`Classifier::predict`] (and of the features the
    /// model offers for [`Ask::LastLayer`]) depends on row `i` of the input alone, bit for bit:
    /// not on how many rows the input has nor on what the others hold. Callers then run a
    /// partial batch as it is; otherwise they fill it up to the batch size, so that an item's
    /// result never depends on which items share its batch. The default is `false`.
    fn independent_rows(&self, device: &Device) -> bool {
        let _ = device;
        false
    }
}

/// Evidence a scorer may ask a model for beyond its logits: the one capability mechanism of
/// the [`Classifier`] boundary (the trait itself carries nothing model-specific).
#[non_exhaustive]
pub enum Ask<'a> {
    /// Per-candidate gradient norms (see [`gradnorm`](super::gradnorm)): `x` is `(n * copies, *item_shape)`
    /// with each candidate's copies adjacent (copy 0 unperturbed); class gradients are
    /// averaged over copies before taking norms; `expected` adds the expected-gradient row.
    GradNorms {
        /// Inputs `(n * copies, *item_shape)`.
        x: &'a Tensor,
        /// Copies per candidate.
        copies: usize,
        /// Whether to add the expected-gradient row.
        expected: bool,
    },
    /// `samples` MC-dropout logits, each `(b, c)`, detached: dropout on with masks from
    /// `rng`, everything else in eval mode.
    McDropout {
        /// Inputs `(b, *item_shape)`.
        x: &'a Tensor,
        /// Forward passes.
        samples: usize,
        /// Source of the dropout masks.
        rng: &'a mut Rng,
    },
    /// One inference-only logits tensor `(b, c)` per ensemble member.
    Members {
        /// Inputs `(b, *item_shape)`.
        x: &'a Tensor,
    },
    /// RBF kernel values `K (b, c)` in `[0, 1]` (DUQ models; the `duq` scorer reads them).
    KernelValues {
        /// Inputs `(b, *item_shape)`.
        x: &'a Tensor,
    },
    /// Inference-only penultimate features and the last linear layer ([`LastLayer`]): what
    /// feature-space selectors and last-layer gradient scores read. Models whose logits are
    /// not one linear map of features (DUQ's RBF head) answer `None`.
    LastLayer {
        /// Inputs `(b, *item_shape)`.
        x: &'a Tensor,
    },
}

impl Ask<'_> {
    fn name(&self) -> &'static str {
        match self {
            Ask::GradNorms { .. } => "gradient norms",
            Ask::McDropout { .. } => "MC-dropout draws",
            Ask::Members { .. } => "member draws",
            Ask::KernelValues { .. } => "kernel values",
            Ask::LastLayer { .. } => "features and the last layer",
        }
    }
}

/// A model's answer to an [`Ask`], of the matching kind.
pub enum Offer {
    /// Answers [`Ask::GradNorms`].
    GradNorms(crate::kernels::gradnorm::GradOut),
    /// Answers [`Ask::McDropout`] and [`Ask::Members`]: one logits tensor `(b, c)` per draw.
    Draws(Vec<Tensor>),
    /// Answers [`Ask::KernelValues`]: `K (b, c)`.
    KernelValues(Tensor),
    /// Answers [`Ask::LastLayer`].
    LastLayer(LastLayer),
}

/// A model's penultimate features and its last linear layer, whose logits are
/// `h W^T + b` (up to the rounding of the model's own path).
#[derive(Debug, Clone)]
pub struct LastLayer {
    /// Features `(b, d)` the last layer multiplies, detached.
    pub h: Tensor,
    /// The last layer's weight `(c, d)`, detached.
    pub w: Tensor,
    /// Its bias `(c,)` (zeros when the layer has none), detached.
    pub b: Tensor,
}

impl LastLayer {
    /// Features `h (b, d)` with a last layer's weight `(c, d)` and bias (a bias-free layer
    /// gets zeros), all detached.
    pub fn new(h: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<Self> {
        let w = w.detach();
        let b = match b {
            Some(b) => b.detach(),
            None => Tensor::zeros(w.dim(0)?, w.dtype(), w.device())?,
        };
        Ok(LastLayer {
            h: h.detach(),
            w,
            b,
        })
    }
}

/// Asks `model`, and checks that an answer is of the kind `unpack` accepts.
fn ask<T>(
    model: &dyn Classifier,
    ask: Ask<'_>,
    unpack: fn(Offer) -> Option<T>,
) -> Result<Option<T>> {
    let asked = ask.name();
    model
        .offer(ask)?
        .map(|offer| {
            unpack(offer).ok_or_else(|| {
                candle_core::Error::Msg(format!(
                    "the model answered a request for {asked} with another kind"
                ))
            })
        })
        .transpose()
}

fn draws(offer: Offer) -> Option<Vec<Tensor>> {
    match offer {
        Offer::Draws(d) => Some(d),
        _ => None,
    }
}

/// The model's fast per-candidate gradient norms ([`Ask::GradNorms`]), or `None` when it has
/// none (callers then use [`gradnorm::autograd_grad_norms`](super::gradnorm::autograd_grad_norms)).
pub fn grad_norms(
    model: &dyn Classifier,
    x: &Tensor,
    copies: usize,
    expected: bool,
) -> Result<Option<crate::kernels::gradnorm::GradOut>> {
    let request = Ask::GradNorms {
        x,
        copies,
        expected,
    };
    ask(model, request, |offer| match offer {
        Offer::GradNorms(g) => Some(g),
        _ => None,
    })
}

/// `samples` MC-dropout logits `(b, c)`, detached ([`Ask::McDropout`]); models without a
/// faster way run `forward` in training mode `samples` times.
pub fn mc_dropout_logits(
    model: &dyn Classifier,
    x: &Tensor,
    samples: usize,
    rng: &mut Rng,
) -> Result<Vec<Tensor>> {
    let request = Ask::McDropout {
        x,
        samples,
        rng: &mut *rng,
    };
    match ask(model, request, draws)? {
        Some(d) => Ok(d),
        None => (0..samples)
            .map(|_| Ok(model.forward(x, &mut Mode::Train(rng))?.detach()))
            .collect(),
    }
}

/// One logits tensor `(b, c)` per ensemble member ([`Ask::Members`]), `None` for a single
/// model.
pub fn member_logits(model: &dyn Classifier, x: &Tensor) -> Result<Option<Vec<Tensor>>> {
    ask(model, Ask::Members { x }, draws)
}

/// RBF kernel values `K (b, c)` ([`Ask::KernelValues`]), `None` for models without them.
pub fn kernel_values(model: &dyn Classifier, x: &Tensor) -> Result<Option<Tensor>> {
    ask(model, Ask::KernelValues { x }, |offer| match offer {
        Offer::KernelValues(k) => Some(k),
        _ => None,
    })
}

/// The model's penultimate features and last layer ([`Ask::LastLayer`]), `None` for models
/// without one (DUQ, an ensemble, a user model that does not offer them).
pub fn last_layer(model: &dyn Classifier, x: &Tensor) -> Result<Option<LastLayer>> {
    ask(model, Ask::LastLayer { x }, |offer| match offer {
        Offer::LastLayer(l) => Some(l),
        _ => None,
    })
}
