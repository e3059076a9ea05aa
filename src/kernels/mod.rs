//! Every hand-written CPU kernel of the crate, and its only `unsafe`: private to the crate,
//! reached by models through small safe functions and candle custom ops with exact backward
//! passes. Models never see a slice of a tensor's storage; kernels never build a model.
//!
//! Candle's CPU `conv2d` is slow, `Tensor::cat` along the last axis returns a strided
//! tensor (so im2col by `cat` costs a second copy), and `max_pool2d` has a wrong backward.
//! These kernels work on contiguous NHWC `f32`/`f64` tensors, parallel over the batch. Other
//! devices use the generic compositions in `nn::layers`, so CUDA/Metal builds stay correct.
//!
//! One concept per file, each importing only files listed before it:
//! - [`elem`], [`threading`], [`enabled`], [`storage`], [`dispatch`], [`output`]: the shared
//!   pieces (element trait, thread split, the per-thread switch, storage slices, the one
//!   `f32`/`f64` dispatch, outputs filled in parallel);
//! - [`gemm`], [`im2col`], [`pool`], [`window_pool`]: matrix products, im2col/col2im, 2x2
//!   max-pooling and max-pooling with any window (the last three as custom ops with exact
//!   backward passes);
//! - [`matmul`]: products whose rows are rounded independently of each other (inference);
//! - [`fused`]: inference-only fusions (convolution/bias + ReLU + pool);
//! - [`direct`], [`winograd`], [`conv`]: stride-1 convolutions for training (one-channel direct
//!   kernels, Winograd tiles, and the ops choosing between them and im2col);
//! - [`relu`], [`rbf`], [`transpose`]: the layer library's ReLU, the RBF head's sum of squares,
//!   transpositions that keep strided views out of the graph;
//! - [`gradnorm`]: the standard CNN's sparse per-candidate gradient norms (REGrad and kin);
//! - [`duq`]: the fused training-mode blocks of the DUQ CNN;
//! - [`sys`]: process-wide allocator tuning (`mallopt`).
//!
//! Files inside refer to each other by file (`super::pool::MaxPoolRoute`); the re-exports
//! below are the paths the rest of the crate uses.

mod dispatch;
mod elem;
mod enabled;
mod output;
mod storage;
mod threading;

mod fused;
mod gemm;
mod im2col;
mod matmul;
mod pool;
mod window_pool;

pub(crate) mod conv;
mod direct;
pub(crate) mod duq;
pub(crate) mod gradnorm;
pub(crate) mod rbf;
pub(crate) mod relu;
pub(crate) mod sys;
pub(crate) mod transpose;
mod winograd;

pub(crate) use elem::Elem;
pub(crate) use enabled::{supported, supported_on, without};
pub(crate) use fused::{BiasReluPool, ConvReluPool};
pub(crate) use im2col::{Col2im, Im2col};
pub(crate) use matmul::MatmulRows;
pub(crate) use pool::{MaxPool, MaxPoolRoute};
pub(crate) use storage::with_cpu_slices;
pub(crate) use window_pool::{Window, WindowMax, WindowRoute};
