//! The layer library: models built from layers get training, inference, batched gradient
//! evidence, MC dropout and checkpoints with no code of their own.
//!
//! A [`Layer`] maps activations to activations under a [`Ctx`] that says what the pass is
//! for: training (batch statistics, dropout masks), evaluation (differentiable, for autograd),
//! inference (parameters detached), MC dropout (eval-mode statistics, dropout masks), or a
//! gradient-evidence pass, where layers save what their own backward needs on a [`Tape`] and
//! every parameterised layer records what its weight multiplies; [`Layer::backward`] then
//! takes each class row's output gradient back through the layers (their vector-Jacobian
//! products, no autograd graph) and the tape turns each layer's output gradient into
//! per-candidate, per-class, per-layer norms: one backward of the whole batch per class row.
//! [`Net`] wraps a [`Sequential`] as a [`super::Classifier`].
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
mod tape;

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
pub use tape::Tape;

use super::gradnorm::SiteKind;
use crate::rng::Rng;
use candle_core::{Result, Tensor};

/// What a forward pass is for (see the module docs).
pub struct Ctx<'a> {
    train: bool,
    params_grad: bool,
    rng: Option<&'a mut Rng>,
    tape: Option<Tape>,
}

impl<'a> Ctx<'a> {
    /// Training: batch statistics (running statistics updated), dropout masks from `rng`.
    pub fn train(rng: &'a mut Rng) -> Self {
        Self {
            train: true,
            params_grad: true,
            rng: Some(rng),
            tape: None,
        }
    }

    /// Evaluation, differentiable in the parameters: running statistics, no dropout.
    pub fn eval() -> Self {
        Self {
            train: false,
            params_grad: true,
            rng: None,
            tape: None,
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
            tape: Some(Tape::new()),
            ..Self::inference()
        }
    }

    /// A pass whose tape gives a differentiable input gradient (DUQ's penalty, see
    /// [`Tape`]): parameters in the graph, batch statistics when `train`, no dropout.
    pub fn differentiable(train: bool) -> Self {
        Self {
            train,
            params_grad: true,
            rng: None,
            tape: Some(Tape::differentiable(train)),
        }
    }

    /// Whether batch statistics are used (and running statistics updated).
    pub fn training(&self) -> bool {
        self.train
    }

    /// Whether parameterised layers record sites in this pass.
    pub fn is_recording(&self) -> bool {
        self.tape.is_some()
    }

    /// Saves `t` for the layer's backward in a recording pass.
    pub fn save(&mut self, t: &Tensor) {
        if let Some(tape) = &mut self.tape {
            tape.save(t);
        }
    }

    /// Saves a shape for the layer's backward in a recording pass.
    pub fn save_dims(&mut self, dims: &[usize]) {
        if let Some(tape) = &mut self.tape {
            tape.save_dims(dims);
        }
    }

    /// `max(x, 0)`, its output saved for [`relu_backward`] in a recording pass.
    pub fn relu(&mut self, x: &Tensor) -> Result<Tensor> {
        let y = super::layers::relu(x)?;
        self.save(&y);
        Ok(y)
    }

    /// Whether this pass may compute on `ts` with the crate's inference-only kernels (which
    /// have no backward): it records nothing, they are on a device the kernels serve, and
    /// none is differentiated.
    pub(crate) fn inference_kernels(&self, ts: &[&Tensor]) -> bool {
        !self.is_recording()
            && ts
                .iter()
                .all(|t| crate::kernels::supported(t) && !t.track_op())
    }

    /// `max(a + b, 0)` (a residual block's output): one pass on the CPU when nothing is
    /// recorded or differentiated, else the sum and [`Ctx::relu`].
    pub fn add_relu(&mut self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        if self.inference_kernels(&[a, b]) && a.dtype() == b.dtype() && a.dims() == b.dims() {
            return a
                .contiguous()?
                .apply_op2(&b.contiguous()?, crate::kernels::relu::AddRelu);
        }
        self.relu(&(a + b)?)
    }

    /// `a (m, k) w (n, k)^T`: with the inference kernels, each row rounded on its own
    /// (`kernels::MatmulRows`), so that a partial batch needs no filling up; else candle's
    /// product.
    pub(crate) fn matmul_t(&self, a: &Tensor, w: &Tensor) -> Result<Tensor> {
        if self.inference_kernels(&[a, w]) {
            return a
                .contiguous()?
                .apply_op2(&w.contiguous()?, crate::kernels::MatmulRows);
        }
        a.matmul(&w.t()?)
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

    /// A parameterised layer's output `z`, returned as it is; a recording pass records the
    /// layer (what its weight multiplies, see [`SiteKind`]), and its backward must call
    /// [`Tape::site`] with `z`'s gradient.
    pub fn site(
        &mut self,
        kind: SiteKind,
        input: &Tensor,
        z: Tensor,
        bias: bool,
    ) -> Result<Tensor> {
        if let Some(tape) = &mut self.tape {
            tape.save_site(kind, bias, input);
        }
        Ok(z)
    }

    /// The tape of a recording pass.
    pub fn take_tape(&mut self) -> Option<Tape> {
        self.tape.take()
    }
}

/// The backward of [`Ctx::relu`]: `d` where the saved output is positive, else 0.
pub fn relu_backward(d: &Tensor, tape: &mut Tape) -> Result<Tensor> {
    let y = tape.tensor()?;
    super::layers::relu_mask(&y, d)
}

/// One layer: activations in, activations out (images NHWC, vectors `(b, f)`).
pub trait Layer: Send + Sync {
    /// The layer applied to `x` for the pass `ctx` describes.
    fn forward(&self, x: &Tensor, ctx: &mut Ctx<'_>) -> Result<Tensor>;
    /// The vector-Jacobian product of an evaluation-mode forward: the input gradient for the
    /// output gradient `d`, from what this layer's recording forward saved on `tape` (read
    /// back in reverse order); a parameterised layer passes its output gradient to
    /// [`Tape::site`] first.
    fn backward(&self, d: &Tensor, tape: &mut Tape) -> Result<Tensor>;
    /// Whether the layer draws dropout masks (MC dropout recomputes from the first such
    /// layer on).
    fn stochastic(&self) -> bool {
        false
    }
    /// Whether, in an inference pass ([`Ctx::inference`]) on the CPU with the crate's
    /// kernels, row `i` of the output depends on row `i` of the input alone, bit for bit:
    /// not on how many rows there are nor on what the others hold (see
    /// [`crate::nn::Classifier::independent_rows`]). The default is `false`, so a layer of
    /// one's own keeps its network's batches filled up unless it says otherwise.
    fn independent_rows(&self) -> bool {
        false
    }
    /// The layer as a dense [`Linear`] map (a network ending in one offers its features
    /// and last layer); `None` for every other layer.
    fn as_linear(&self) -> Option<&Linear> {
        None
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

    /// The last layer, if any.
    pub fn last(&self) -> Option<&dyn Layer> {
        self.layers.last().map(|l| l.as_ref())
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
    fn backward(&self, d: &Tensor, tape: &mut Tape) -> Result<Tensor> {
        let mut d = d.clone();
        for layer in self.layers.iter().rev() {
            if tape.done() {
                break;
            }
            d = layer.backward(&d, tape)?;
        }
        Ok(d)
    }
    fn stochastic(&self) -> bool {
        self.first_stochastic().is_some()
    }
    fn independent_rows(&self) -> bool {
        self.layers.iter().all(|l| l.independent_rows())
    }
}
