//! Fused CPU kernels for the training-mode blocks of [`crate::duq::cnn::DuqCnn`]: batch norm with
//! the batch's statistics, the affine `gamma x_hat + beta`, ReLU and 2x2 max-pool as one candle
//! custom op ([`BnReluPool`]), and that op's vector-Jacobian product - the block's share of
//! the input gradient `grad_x sum_c K_c` - as a second ([`BnReluPoolGrad`]). Both have exact
//! hand-written backward passes, so one first-order backward of `BCE + penalty` through them
//! gives the penalty's parameter gradients. Tests compare them with the composition of candle
//! ops in `f64` (and the model's gradients with finite differences).
//!
//! Why: written as separate candle ops, the statistics, masks and broadcasts of one block are
//! about thirty full passes (forward, input gradient and the backward of both) over
//! `(b*h*w, c)` tensors of 12-26 MB per step, which dominated training time; each op here makes
//! two to four passes. With a gradient penalty a block trains as [`TrainBlock`] (the convolution
//! and [`BnReluPool`]) and [`BlockInputGrad`] ([`BnReluPoolGrad`] and the transposed
//! convolution), which keep the convolution output out of candle's graph (see [`BlockLink`]);
//! without one, all blocks are one [`BlockChain`]. Each kernel works on the batch's two halves
//! in parallel (a fixed split, so results do not depend on the thread count) and is compiled
//! per SIMD level through `pulp` (the `Half` trait), so its loops vectorise for the CPU at
//! hand.
//!
//! Notation, per channel over the `N = b*h*w` rows of the convolution output `y (b, h, w, c)`:
//! mean `mu`, biased variance `v`, `s = 1/sqrt(v + eps)`, `x_hat = (y - mu) s`,
//! `u = gamma x_hat + beta`. Each 2x2 window's first maximum of `u` is its argmax, *active* when
//! that maximum is `> 0` (the ReLU passes it). For a pooled gradient `gp`, `q` is `gp` routed to
//! the active argmaxes (zero elsewhere); the op's vector-Jacobian product is then
//! `gy = s gamma (q - mean(q) - x_hat mean(q x_hat))`.
//!
//! The ops take the block's parameters as one `(3, c)` tensor: rows `gamma`, `beta` and the
//! convolution's bias. The bias cancels in training-mode batch norm, so its gradient is exactly
//! zero (it still gets one, so weight decay treats it as PyTorch does); it matters only for the
//! running mean.
//!
//! Files, each importing only those before it: `dims` (shapes and windows), `split` (the
//! batch split and SIMD dispatch), `rows` (vectorised row helpers), `prep` (batch statistics
//! and argmax map), `vjp` (the input-gradient kernels), `bn_relu_pool` (the op pair),
//! `block` (packed parameters and one block's backward), `chain` ([`BlockChain`]) and `train`
//! ([`TrainBlock`], [`BlockInputGrad`], [`BlockLink`]).

mod block;
mod bn_relu_pool;
mod chain;
mod dims;
mod prep;
mod rows;
mod split;
mod train;
mod vjp;

pub(crate) use bn_relu_pool::pair;
pub(crate) use chain::{BlockChain, ChainBlock};
pub(crate) use train::{train_block, BlockLink};

use candle_core::Tensor;

/// True when the fused ops can run on `x` (CPU, `f32` or `f64`).
pub fn supported(x: &Tensor) -> bool {
    super::enabled::supported(x)
}
