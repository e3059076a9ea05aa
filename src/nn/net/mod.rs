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
mod layer;
mod model;
mod norm;
mod pool;
mod residual;
mod sequential;
mod simple;
mod tape;

pub use conv::{Conv2d, Conv2dConfig};
pub use layer::{relu_backward, Ctx, Layer, Linear};
pub use model::{Net, SITE_BUDGET};
pub use norm::BatchNorm2d;
pub use pool::{GlobalAvgPool, MaxPool2d};
pub use residual::{BasicBlock, Bottleneck};
pub use sequential::Sequential;

/// torchvision's ResNet convolution initialisation (Kaiming normal, fan-out, ReLU gain).
pub fn residual_init() -> candle_nn::Init {
    residual::KAIMING_OUT
}
pub use simple::{Dropout, Flatten, Relu};
pub use tape::Tape;
