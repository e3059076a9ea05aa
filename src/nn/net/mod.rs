//! The layer library: models built from layers get training, inference, batched gradient
//! evidence, MC dropout and checkpoints with no code of their own.
//!
//! A [`Layer`] maps activations to activations under a [`Ctx`] that says what the pass is
//! for: training (batch statistics, dropout masks), evaluation (differentiable, for autograd),
//! inference (parameters detached), MC dropout (eval-mode statistics, dropout masks), or a
//! gradient-evidence pass, where every parameterised layer records a
//! [`Site`] and [`super::gradnorm::site_grad_norms`] turns the sites
//! into per-candidate, per-class, per-layer norms from one backward of the whole batch per
//! class row. [`Net`] wraps a [`Sequential`] as a [`super::Classifier`].
//!
//! Image activations are NHWC inside (the im2col kernels' layout); [`Net`] takes PyTorch's
//! NCHW inputs and [`Flatten`] flattens in NCHW order, so weights keep PyTorch's layouts and
//! names (`conv1.weight (out, in/groups, k, k)`, `bn1.running_mean`, `fc.weight (out, in)`)
//! and a torchvision or timm `state_dict` loads by name.

mod conv;
mod linear;
mod model;
mod norm;
mod pool;
mod residual;
mod simple;

pub use conv::{Conv2d, Conv2dConfig};
pub use linear::Linear;
pub use model::{Net, SITE_BUDGET};
pub use norm::BatchNorm2d;
pub use pool::{GlobalAvgPool, MaxPool2d};
pub use residual::{BasicBlock, Bottleneck};

/// torchvision's ResNet convolution initialisation (Kaiming normal, fan-out, ReLU gain).
pub fn residual_init() -> candle_nn::Init {
    residual::KAIMING_OUT
}
pub use simple::{Dropout, Flatten, Relu};

use super::gradnorm::{Site, SiteKind};
use crate::rng::Rng;
use candle_core::{Result, Tensor};

/// What a forward pass is for (see the module docs).
pub struct Ctx<'a> {
    train: bool,
    params_grad: bool,
    rng: Option<&'a mut Rng>,
    sites: Option<Vec<Site>>,
}

impl<'a> Ctx<'a> {
    /// Training: batch statistics (running statistics updated), dropout masks from `rng`.
    pub fn train(rng: &'a mut Rng) -> Self {
        Self {
            train: true,
            params_grad: true,
            rng: Some(rng),
            sites: None,
        }
    }

    /// Evaluation, differentiable in the parameters: running statistics, no dropout.
    pub fn eval() -> Self {
        Self {
            train: false,
            params_grad: true,
            rng: None,
            sites: None,
        }
    }

    /// Inference: as [`Ctx::eval`] with the parameters detached (no graph is built for them).
    pub fn inference() -> Self {
        Self {
            params_grad: false,
            ..Self::eval()
        }
    }

    /// MC dropout: inference with dropout masks from `rng`.
    pub fn mc_dropout(rng: &'a mut Rng) -> Self {
        Self {
            rng: Some(rng),
            ..Self::inference()
        }
    }

    /// A gradient-evidence pass: inference where every parameterised layer records a site.
    pub fn recording() -> Self {
        Self {
            sites: Some(Vec::new()),
            ..Self::inference()
        }
    }

    /// Whether batch statistics are used (and running statistics updated).
    pub fn training(&self) -> bool {
        self.train
    }

    /// Whether parameterised layers record sites in this pass.
    pub fn is_recording(&self) -> bool {
        self.sites.is_some()
    }

    /// `t` as a layer should use it: detached unless the pass differentiates the parameters.
    pub fn param(&self, t: &Tensor) -> Tensor {
        if self.params_grad {
            t.clone()
        } else {
            t.detach()
        }
    }

    /// The dropout masks' source, when this pass draws them.
    pub fn dropout_rng(&mut self) -> Option<&mut Rng> {
        self.rng.as_deref_mut()
    }

    /// A parameterised layer's output `z` (before any activation): unchanged, or in a
    /// recording pass `z` plus a probe, with the site recorded.
    pub fn site(
        &mut self,
        kind: SiteKind,
        input: &Tensor,
        z: Tensor,
        bias: bool,
    ) -> Result<Tensor> {
        match &mut self.sites {
            None => Ok(z),
            Some(sites) => {
                let (site, z) = Site::of(kind, input, &z, bias)?;
                sites.push(site);
                Ok(z)
            }
        }
    }

    /// The sites recorded so far, in forward order.
    pub fn take_sites(&mut self) -> Vec<Site> {
        self.sites.take().unwrap_or_default()
    }
}

/// One layer: activations in, activations out (images NHWC, vectors `(b, f)`).
pub trait Layer: Send + Sync {
    /// The layer applied to `x` for the pass `ctx` describes.
    fn forward(&self, x: &Tensor, ctx: &mut Ctx<'_>) -> Result<Tensor>;
    /// Whether the layer draws dropout masks (MC dropout recomputes from the first such
    /// layer on).
    fn stochastic(&self) -> bool {
        false
    }
}

/// Layers applied in order.
#[derive(Default)]
pub struct Sequential {
    layers: Vec<Box<dyn Layer>>,
}

impl Sequential {
    /// An empty stack.
    pub fn new() -> Self {
        Self::default()
    }

    /// This stack with `layer` appended.
    pub fn with(mut self, layer: impl Layer + 'static) -> Self {
        self.layers.push(Box::new(layer));
        self
    }

    /// Appends `layer`.
    pub fn push(&mut self, layer: Box<dyn Layer>) {
        self.layers.push(layer);
    }

    /// Number of layers.
    pub fn len(&self) -> usize {
        self.layers.len()
    }

    /// Whether the stack is empty.
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// Layers `range` applied to `x`.
    pub fn forward_range(
        &self,
        x: &Tensor,
        range: std::ops::Range<usize>,
        ctx: &mut Ctx<'_>,
    ) -> Result<Tensor> {
        let mut x = x.clone();
        for layer in &self.layers[range] {
            x = layer.forward(&x, ctx)?;
        }
        Ok(x)
    }

    /// The index of the first layer that draws dropout masks, if any.
    pub fn first_stochastic(&self) -> Option<usize> {
        self.layers.iter().position(|l| l.stochastic())
    }
}

impl Layer for Sequential {
    fn forward(&self, x: &Tensor, ctx: &mut Ctx<'_>) -> Result<Tensor> {
        self.forward_range(x, 0..self.layers.len(), ctx)
    }
    fn stochastic(&self) -> bool {
        self.first_stochastic().is_some()
    }
}
