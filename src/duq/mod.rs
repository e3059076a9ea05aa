//! DUQ, Deterministic Uncertainty Quantification (van Amersfoort et al., ICML 2020): an RBF
//! head on a feature extractor, certain only near the training data, in one forward pass.
//!
//! Per class `c`: a matrix `W_c (n, d)` and a centroid `e_c (n,)`. For features `f = f(x)`,
//! `K_c = exp(-mean_j((W_c f - e_c)_j^2) / (2 sigma^2))` (mean over the `n` centroid dimensions,
//! as the reference code). Prediction `argmax_c K_c`, certainty `max_c K_c`, scorer `1 - max K`.
//!
//! Training minimises the binary cross-entropy between each `K_c` and the one-hot label (in log
//! space: `ln K_c` is exact, `ln(1 - K_c)` clamped at `1e-12`) plus the gradient penalty
//! `lambda * mean_i(||grad_x sum_c K_c(x_i)||_2 - 1)^2` (or the variants of [`Penalty`]), with
//! SGD + momentum + L2 weight decay. Centroids are not trained by gradient: after each step the
//! batch is re-embedded and `N_c <- g N_c + (1-g) n_c`, `m_c <- g m_c + (1-g) sum_{i in c} W_c
//! f(x_i)`, `e_c = m_c / N_c`.
//!
//! **Second-order gradients.** The penalty needs `d/d theta` of an input gradient. Candle's
//! double backward is silently wrong unless an environment flag is set (see the project notes),
//! so the input gradient is written explicitly with ordinary differentiable ops (ReLU as a
//! multiplication by its constant `> 0` mask, a linear layer as `g @ W`, the RBF head as
//! `-K_c (z_c - e_c) / (n sigma^2)` then `@ W_c`); a normal first-order backward of
//! `loss + penalty` is then exact. Tests check it against finite differences in `f64`.
//!
//! Any feature extractor implementing [`Extractor`] (its forward pass and its input gradient
//! written that way) becomes a DUQ model [`Duq`], with checks of that gradient against
//! autodiff and finite differences. [`DuqMlp`] is `Duq` on a ReLU MLP ([`ReluMlp`], the
//! two-moons setting); [`cnn::DuqCnn`] the paper's Fashion-MNIST CNN with batch norm, which has
//! its own fused CPU training path. All share the RBF head ([`RbfHead`]), the loss and the
//! optimiser defined here.

pub mod cnn;
mod extractor;
mod head;
mod mlp;
pub mod net;

pub use extractor::{check_input_gradient, Duq, DuqLoss, DuqOutput, Extractor};
pub use head::{bce, penalty, DuqConfig, DuqSettings, HeadOutput, Penalty, RbfHead, Sgd};
pub use mlp::{DuqMlp, ReluMlp};
