//! Models: the [`Classifier`] trait every model implements, the deep [`Ensemble`], and the
//! built-in softmax networks ([`Cnn`], [`Mlp`], the Bayes-by-backprop [`BayesMlp`]), the Gaussian regression heads ([`GaussMlp`],
//! [`Regressor`]) with their layers and seeded initialisation.
//!
//! Models follow candle's pattern: plain structs of layers built by `new(&cfg, vb)` from a
//! [`candle_nn::VarBuilder`]. For training, [`init::seeded`] supplies a builder whose
//! parameters come from the run's seeded RNG; for checkpoints, a builder over loaded tensors.
//! How a model is trained lives a layer up (`train::ModelBuilder`), and the closed set of
//! built-in architectures, DUQ included, in `models`.

mod bayes_mlp;
mod classifier;
mod cnn;
mod ensemble;
pub mod gauss;
pub mod grad_features;
pub mod gradnorm;
pub mod init;
pub mod input_grad;
pub mod layers;
mod mlp;
pub mod net;
pub mod resnet;

pub use bayes_mlp::{BayesMlp, BayesMlpConfig};
pub use classifier::{
    grad_norms, kernel_values, last_layer, mc_dropout_logits, member_logits, Ask, Classifier,
    LastLayer, Mode, Offer,
};
pub use cnn::{Cnn, CnnConfig};
pub use ensemble::Ensemble;
pub use gauss::{GaussLoss, GaussMlp, GaussMlpConfig, Regressor};
pub use grad_features::{factor_widths, grad_features, GradSketch, MAX_EXACT_FEATURES};
pub use mlp::{Mlp, MlpConfig};
