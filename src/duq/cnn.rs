//! DUQ with the paper's Fashion-MNIST CNN: three 3x3 convolutions (1->64 pad 1, 64->128 pad
//! 1, 128->128 no pad), each followed by batch norm, ReLU and 2x2 max-pool, then fc 512->256 +
//! ReLU as the feature extractor ([`CnnFeatures`], an [`Extractor`]), and the shared
//! [`RbfHead`]: [`DuqCnn`] is [`Duq`] on it, so loss, penalty, training steps and scoring are the
//! generic model's; this module adds the blocks, their fused CPU path and checkpoint names.
//!
//! Tensors are NHWC inside (images arrive NCHW `(b, 1, 28, 28)`); the flatten before `fc1`
//! uses PyTorch's NCHW order, so parameter names and shapes match the reference code's
//! `state_dict` (`conv1.weight (64, 1, 3, 3)`, `bn1.weight (64)`, ..., `fc1.weight (256, 512)`,
//! plus the head's `W (c * n, 256)`).
//!
//! **Batch norm.** In training mode it normalises with the batch's statistics (per channel,
//! over `b, h, w`, biased variance) and updates running statistics with momentum 0.1
//! (unbiased variance, as PyTorch); in eval mode it uses the running statistics. Training
//! computes the penalty in training mode, like the reference code, so the input gradient
//! includes the cross-sample terms through the batch statistics:
//! `dL/dy = (1/s) (g - mean(g) - x_hat mean(g x_hat))`, `g = gamma dL/du`.
//!
//! **Input gradient.** Written with differentiable ops, layer by layer in reverse (fc as
//! `g @ W`, ReLU as its mask, max-pool by `MaxPoolRoute` to each window's argmax, batch
//! norm as above, a convolution as `col2im(g @ W_mat)`), so one first-order backward of
//! `BCE + penalty` gives exact parameter gradients; tests check them against central finite
//! differences in `f64`.

use super::extractor::{Duq, Extractor};
use super::head::{DuqSettings, Penalty, RbfHead};
use crate::error::{Error, Result};
use crate::kernels::conv::{Conv, ConvT};
use crate::nn::init::{seeded, Weights};
use crate::nn::layers::{flatten_nchw_order, im2col, linear, max_pool2x2, nchw_to_nhwc};
use crate::observe::Observer;
use crate::rng::Rng;
use candle_core::{DType, Device, Module, Tensor, Var};
use candle_nn::Init;
use serde::{Deserialize, Serialize};

/// Settings of the Fashion-MNIST DUQ model (defaults: the paper's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DuqCnnConfig {
    /// Output channels of the three convolutions.
    pub channels: [usize; 3],
    /// Width `d` of the feature layer.
    pub features: usize,
    /// Head, loss, optimiser and schedule (weight decay applies to every parameter, batch norm
    /// included, as PyTorch's SGD).
    #[serde(flatten)]
    pub settings: DuqSettings,
}

impl Default for DuqCnnConfig {
    fn default() -> Self {
        Self {
            channels: [64, 128, 128],
            features: 256,
            settings: DuqSettings {
                centroid_dims: 256,
                sigma: 0.1,
                gamma: 0.999,
                lambda: 0.05,
                penalty: Penalty::TwoSided,
                lr: 0.05,
                momentum: 0.9,
                weight_decay: 1e-4,
                batch: 128,
                epochs: 30,
                milestones: vec![10, 20],
                lr_factor: 0.2,
                w_std: 0.05,
                n_init: 12.0,
            },
        }
    }
}

const BN_EPS: f64 = 1e-5;

/// `(start, len)` chunks of `b` images, each chunk's `per_image` floats at most ~16 MB.
fn chunks(b: usize, per_image: usize) -> impl Iterator<Item = (usize, usize)> {
    let size = ((4 << 20) / per_image.max(1)).max(1);
    (0..b).step_by(size).map(move |at| (at, size.min(b - at)))
}
const BN_MOMENTUM: f64 = 0.1;

/// The model's shape and settings: what a checkpoint's `config.json` records for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DuqCnnArch {
    /// Input `(c, h, w)`.
    pub item_shape: [usize; 3],
    /// Number of classes.
    pub classes: usize,
    /// Settings.
    pub duq: DuqCnnConfig,
}

/// A 3x3 convolution with bias, batch norm, ReLU and 2x2 max-pool, NHWC.
struct Block {
    /// `(out, in, 3, 3)`, PyTorch layout.
    weight: Tensor,
    bias: Tensor,
    gamma: Tensor,
    beta: Tensor,
    pad: usize,
    running_mean: Tensor,
    running_var: Tensor,
    /// Training mode on the CPU through [`crate::kernels::duq`] (else the candle-op composition).
    fused: bool,
}

/// What a training forward keeps for later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    /// The graph the input gradient differentiates through (the penalty's path).
    Full,
    /// Only what the loss's backward and the running statistics need.
    LossOnly,
}

/// A training batch's per-channel mean and biased variance, for the running statistics.
type BatchStats = (Tensor, Tensor);

/// What the input gradient needs from one block's forward.
enum BlockCache {
    /// The composition of candle ops (any device, either mode).
    Ops {
        /// Normalised pre-activations `x_hat (b*h*w, c)`.
        x_hat: Tensor,
        /// `1 / sqrt(var + eps) (c,)`.
        inv_std: Tensor,
        /// Batch-norm output before ReLU `(b*h*w, c)`.
        u: Tensor,
        /// ReLU output before pooling `(b, h, w, c)`.
        r: Tensor,
        /// Training mode (batch statistics) or eval mode (running statistics).
        train: bool,
    },
    /// The block inside one fused CPU training op of all blocks, for a loss without input
    /// gradient: nothing for the input gradient, only the rows `b*h*w` of the batch
    /// statistics.
    LossOnly { rows: usize },
    /// The fused CPU training op ([`crate::kernels::duq::TrainBlock`]): the packed weight
    /// matrix and `(3, c)` parameters `[gamma; beta; bias]` it ran with (see `packed_parts`),
    /// the link to its convolution output, and the rows `b*h*w` of its batch statistics.
    Fused {
        packed: Tensor,
        link: crate::kernels::duq::BlockLink,
        rows: usize,
    },
}

impl BlockCache {
    /// Rows `b*h*w` the batch statistics were taken over.
    fn rows(&self) -> Result<usize> {
        Ok(match self {
            Self::Ops { u, .. } => u.dim(0)?,
            Self::LossOnly { rows } => *rows,
            Self::Fused { rows, .. } => *rows,
        })
    }
}

impl Block {
    fn new(inputs: usize, outputs: usize, pad: usize, vb: candle_nn::VarBuilder) -> Result<Self> {
        let b = 1.0 / ((inputs * 9) as f64).sqrt();
        let init = Init::Uniform { lo: -b, up: b };
        let conv = vb.pp("conv");
        let bn = vb.pp("bn");
        Ok(Self {
            weight: conv.get_with_hints((outputs, inputs, 3, 3), "weight", init)?,
            bias: conv.get_with_hints(outputs, "bias", init)?,
            gamma: bn.get_with_hints(outputs, "weight", Init::Const(1.0))?,
            beta: bn.get_with_hints(outputs, "bias", Init::Const(0.0))?,
            pad,
            running_mean: bn.get_with_hints(outputs, "running_mean", Init::Const(0.0))?,
            running_var: bn.get_with_hints(outputs, "running_var", Init::Const(1.0))?,
            fused: true,
        })
    }

    /// `(out, 9 * in)` in im2col's `(ki, kj, c)` column order.
    fn wmat(&self) -> Result<Tensor> {
        wmat_of(&self.weight)
    }

    /// The convolution (kernel size and padding) and its output size for an `h x w` input.
    fn conv(&self, (h, w): (usize, usize)) -> Result<(Conv, (usize, usize))> {
        let k = self.weight.dim(2)?;
        let out = (h + 2 * self.pad + 1 - k, w + 2 * self.pad + 1 - k);
        Ok((Conv { k, pad: self.pad }, out))
    }

    /// The fused ops' `(3, out)` parameters `[gamma; beta; bias]`. The bias cancels in the
    /// batch statistics: it only shifts the running mean.
    fn params(&self) -> Result<Tensor> {
        Ok(Tensor::stack(&[&self.gamma, &self.beta, &self.bias], 0)?)
    }

    /// The running statistics' batch mean and variance from a fused forward op's `moments`
    /// (`None` when it has not run).
    fn batch_stats(&self, moments: Option<(Tensor, Tensor)>) -> Result<BatchStats> {
        let (mean, var) = moments
            .ok_or_else(|| Error::config("duq", "batch statistics missing after the forward"))?;
        Ok(((mean + self.bias.detach())?, var))
    }

    /// The convolution without bias as candle ops (other devices): `(b*oh*ow, out)`.
    fn conv_composed(&self, x: &Tensor) -> Result<Tensor> {
        let (b, h, w, c) = x.dims4()?;
        let k = self.weight.dim(2)?;
        let (oh, ow) = (h + 2 * self.pad + 1 - k, w + 2 * self.pad + 1 - k);
        let wt = self.wmat()?.t()?;
        // In chunks of images whose im2col buffer stays under glibc's mmap threshold, so
        // that buffers are reused from the heap instead of page-faulted in every step.
        Ok(Tensor::cat(
            &chunks(b, oh * ow * k * k * c)
                .map(|(at, len)| {
                    let cols = im2col(&x.narrow(0, at, len)?, k, self.pad)?
                        .reshape((len * oh * ow, k * k * c))?;
                    Ok(cols.matmul(&wt)?)
                })
                .collect::<Result<Vec<_>>>()?,
            0,
        )?)
    }

    /// `(b, h, w, in)` -> pooled `(b, h'/2, w'/2, out)`; in training mode also returns the
    /// batch mean and biased variance for the running statistics.
    fn forward(&self, x: &Tensor, train: bool) -> Result<(Tensor, BlockCache, Option<BatchStats>)> {
        let (b, h, w, _) = x.dims4()?;
        let out = self.weight.dim(0)?;
        let (conv, (oh, ow)) = self.conv((h, w))?;
        let cpu = self.fused && crate::kernels::duq::supported(x);
        if cpu && train {
            let (params, wmat) = (self.params()?, self.wmat()?);
            let (op, link) = crate::kernels::duq::train_block(conv, wmat.dims2()?);
            // The convolution and the block's batch norm, ReLU and pool as one op: the
            // convolution output stays out of candle's graph (see `kernels::duq::BlockLink`).
            let packed = Tensor::cat(&packed_parts(&wmat, &params)?, 0)?;
            let pooled = x.contiguous()?.apply_op2(&packed, op)?;
            let stats = self.batch_stats(link.batch_moments(&pooled)?)?;
            let cache = BlockCache::Fused {
                packed,
                link,
                rows: b * oh * ow,
            };
            return Ok((pooled, cache, Some(stats)));
        }
        // (b, oh, ow, out), no bias yet.
        let y = if cpu {
            x.contiguous()?.apply_op2(&self.wmat()?, conv)?
        } else {
            self.conv_composed(x)?.reshape((b, oh, ow, out))?
        };
        let y = y.reshape((b * oh * ow, out))?.broadcast_add(&self.bias)?;
        let (x_hat, inv_std, stats) = if train {
            let mean = y.mean(0)?;
            let centred = y.broadcast_sub(&mean)?;
            let var = centred.sqr()?.mean(0)?;
            let inv_std = (var.clone() + BN_EPS)?.sqrt()?.recip()?;
            (centred.broadcast_mul(&inv_std)?, inv_std, Some((mean, var)))
        } else {
            let inv_std = (self.running_var.detach() + BN_EPS)?.sqrt()?.recip()?;
            (
                y.broadcast_sub(&self.running_mean.detach())?
                    .broadcast_mul(&inv_std)?,
                inv_std,
                None,
            )
        };
        let u = x_hat
            .broadcast_mul(&self.gamma)?
            .broadcast_add(&self.beta)?;
        let r = u.relu()?.reshape((b, oh, ow, out))?;
        let pooled = max_pool2x2(&r)?;
        let cache = BlockCache::Ops {
            x_hat,
            inv_std,
            u,
            r,
            train,
        };
        Ok((pooled, cache, stats))
    }

    /// From `dL/d(pooled) (b, h'/2, w'/2, out)` to `dL/dx (b, h, w, in)`.
    fn input_gradient(
        &self,
        g: &Tensor,
        cache: &BlockCache,
        in_hw: (usize, usize),
    ) -> Result<Tensor> {
        // (b, oh, ow, out)
        let gy = match cache {
            BlockCache::Fused { packed, link, .. } => {
                // Batch norm's vector-Jacobian product and the transposed convolution as one
                // op, on the forward's packed weight matrix and parameters.
                let (k, pad) = (self.weight.dim(2)?, self.pad);
                let gx = g
                    .contiguous()?
                    .apply_op2(packed, link.input_grad(ConvT { k, pad }))?;
                debug_assert_eq!(gx.dims()[1..3], [in_hw.0, in_hw.1]);
                return Ok(gx);
            }
            BlockCache::Ops {
                x_hat,
                inv_std,
                u,
                r,
                train,
            } => {
                let (b, oh, ow, out) = r.dims4()?;
                let g = crate::nn::layers::max_pool2x2_route(r, g)?;
                let mask = u.gt(0.0)?.to_dtype(g.dtype())?;
                let gu = g.reshape((b * oh * ow, out))?.mul(&mask)?;
                let gx_hat = gu.broadcast_mul(&self.gamma)?;
                let gy = if *train {
                    let m1 = gx_hat.mean(0)?;
                    let m2 = (&gx_hat * x_hat)?.mean(0)?;
                    gx_hat
                        .broadcast_sub(&m1)?
                        .sub(&x_hat.broadcast_mul(&m2)?)?
                        .broadcast_mul(inv_std)?
                } else {
                    gx_hat.broadcast_mul(inv_std)?
                };
                gy.reshape((b, oh, ow, out))?
            }
            BlockCache::LossOnly { .. } => return Err(Error::config(
                "duq",
                "input gradient of a forward pass that kept none (forward_without_input_gradient)",
            )),
        };
        let (b, oh, ow, _) = gy.dims4()?;
        let (_, cin, k, _) = self.weight.dims4()?;
        let wmat = self.wmat()?;
        if self.fused && crate::kernels::duq::supported(&gy) {
            let gx = gy
                .contiguous()?
                .apply_op2(&wmat, ConvT { k, pad: self.pad })?;
            debug_assert_eq!(gx.dims4()?, (b, in_hw.0, in_hw.1, cin));
            return Ok(gx);
        }
        let per = oh * ow;
        let gy = gy.reshape((b * per, ()))?;
        let gx = Tensor::cat(
            &chunks(b, per * k * k * cin)
                .map(|(at, len)| {
                    let gcols = gy.narrow(0, at * per, len * per)?.matmul(&wmat)?.reshape((
                        len,
                        oh,
                        ow,
                        k * k * cin,
                    ))?;
                    Ok(crate::nn::layers::col2im(&gcols, k, self.pad)?)
                })
                .collect::<Result<Vec<_>>>()?,
            0,
        )?;
        debug_assert_eq!(gx.dims4()?, (b, in_hw.0, in_hw.1, cin));
        Ok(gx)
    }

    /// Eval mode, inference only, CPU: batch norm folded into the convolution
    /// (`W' = a W`, `b' = a (b - mu_run) + beta`, `a = gamma / sqrt(var_run + eps)`), then the
    /// fused convolution + bias + ReLU + pool kernel over small chunks of images.
    fn eval_fused(&self, x: &Tensor) -> Result<Tensor> {
        let out = self.weight.dim(0)?;
        let a = (self.gamma.detach() * (self.running_var.detach() + BN_EPS)?.sqrt()?.recip()?)?;
        let w = self
            .weight
            .detach()
            .broadcast_mul(&a.reshape((out, 1, 1, 1))?)?
            .contiguous()?;
        let bias =
            (((self.bias.detach() - self.running_mean.detach())? * &a)? + self.beta.detach())?;
        let (_, cin, k, _) = w.dims4()?;
        if k == 3 && cin.min(out) >= crate::kernels::conv::WINOGRAD_MIN_CHANNELS {
            // Wide 3x3 layers: the Winograd convolution, then bias + ReLU + pool in one pass.
            let wmat = wmat_of(&w)?;
            return Ok(x
                .contiguous()?
                .apply_op2_no_bwd(&wmat, &Conv { k, pad: self.pad })?
                .apply_op2_no_bwd(&bias, &crate::kernels::BiasReluPool)?);
        }
        let x = if self.pad > 0 {
            x.pad_with_zeros(1, self.pad, self.pad)?
                .pad_with_zeros(2, self.pad, self.pad)?
        } else {
            x.clone()
        };
        Ok(x.contiguous()?
            .apply_op3_no_bwd(&w, &bias, &crate::kernels::ConvReluPool)?)
    }

    fn update_running(&mut self, mean: &Tensor, var: &Tensor, count: usize) -> Result<()> {
        let unbiased = (var.detach() * (count as f64 / (count.max(2) - 1) as f64))?;
        self.running_mean =
            ((self.running_mean.detach() * (1.0 - BN_MOMENTUM))? + (mean.detach() * BN_MOMENTUM)?)?;
        self.running_var =
            ((self.running_var.detach() * (1.0 - BN_MOMENTUM))? + (unbiased * BN_MOMENTUM)?)?;
        Ok(())
    }
}

/// A block's weight matrix and `(3, out)` parameters flattened, in the order of the fused ops'
/// packed parameters (`kernels::duq::{TrainBlock, BlockInputGrad, BlockChain}`).
fn packed_parts(wmat: &Tensor, params: &Tensor) -> Result<[Tensor; 2]> {
    Ok([wmat.flatten_all()?, params.flatten_all()?])
}

/// A `(cout, cin, k, k)` weight as the conv ops' `wmat (cout, k*k*cin)`, columns in im2col's
/// `(ki, kj, c)` order.
fn wmat_of(weight: &Tensor) -> Result<Tensor> {
    // On the CPU one parallel pass each way (candle's backward of the permute is a strided
    // add on one thread), with the same values and gradient.
    if let Some(m) = crate::kernels::transpose::weight_matrix(weight)? {
        return Ok(m);
    }
    let (out, cin, k, _) = weight.dims4()?;
    Ok(weight.permute((0, 2, 3, 1))?.reshape((out, k * k * cin))?)
}

/// The Fashion-MNIST CNN as a DUQ [`Extractor`]: the three blocks, then fc + ReLU. On the CPU
/// it trains through the fused ops of `kernels::duq` and embeds (eval mode) with batch norm
/// folded into the convolution; other devices compose candle ops.
pub struct CnnFeatures {
    blocks: Vec<Block>,
    fc: candle_nn::Linear,
    /// Every variable the model's `VarBuilder` created, by name, the head's included (empty
    /// for a model loaded from a checkpoint).
    params: Weights,
}

/// What the CNN's input gradient needs from a forward pass.
pub struct CnnCache {
    caches: Vec<(BlockCache, (usize, usize))>,
    fc_pre: Tensor,
    last_shape: (usize, usize, usize, usize),
    stats: Vec<Option<BatchStats>>,
    count: Vec<usize>,
}

impl CnnFeatures {
    /// [`Extractor::forward`] keeping what `path` asks for.
    fn forward_path(&self, x: &Tensor, train: bool, path: Path) -> Result<(Tensor, CnnCache)> {
        let mut a = nchw_to_nhwc(x)?;
        let mut caches = Vec::with_capacity(3);
        let mut stats = Vec::with_capacity(3);
        let mut count = Vec::with_capacity(3);
        let chain = train
            && path == Path::LossOnly
            && self.blocks.iter().all(|b| b.fused)
            && crate::kernels::duq::supported(&a);
        if chain {
            // All blocks as one op (`kernels::duq::BlockChain`), their parameters packed into its
            // second input; each block's pair still yields its batch statistics.
            let mut blocks = Vec::with_capacity(self.blocks.len());
            let mut packed = Vec::with_capacity(2 * self.blocks.len());
            let mut grad_ops = Vec::with_capacity(self.blocks.len());
            let (mut h, mut w) = (a.dim(1)?, a.dim(2)?);
            for bl in &self.blocks {
                let (op, grad_op) = crate::kernels::duq::pair();
                let ((conv, (oh, ow)), wmat) = (bl.conv((h, w))?, bl.wmat()?);
                blocks.push(crate::kernels::duq::ChainBlock {
                    conv,
                    bn: op,
                    wmat_dims: wmat.dims2()?,
                });
                packed.extend(packed_parts(&wmat, &bl.params()?)?);
                caches.push((
                    BlockCache::LossOnly {
                        rows: a.dim(0)? * oh * ow,
                    },
                    (h, w),
                ));
                count.push(a.dim(0)? * oh * ow);
                grad_ops.push(grad_op);
                (h, w) = (oh / 2, ow / 2);
            }
            let packed = Tensor::cat(&packed, 0)?;
            a = a
                .contiguous()?
                .apply_op2(&packed, crate::kernels::duq::BlockChain::new(blocks))?;
            for (bl, grad_op) in self.blocks.iter().zip(grad_ops) {
                stats.push(Some(bl.batch_stats(grad_op.batch_moments(&a)?)?));
            }
        } else {
            for bl in &self.blocks {
                let (_, h, w, _) = a.dims4()?;
                let (p, cache, st) = bl.forward(&a, train)?;
                count.push(cache.rows()?);
                caches.push((cache, (h, w)));
                stats.push(st);
                a = p;
            }
        }
        let last_shape = a.dims4()?;
        // candle_nn's `Linear::forward`, with the product as `kernels::transpose::matmul_t`
        // (the same values; the weight's gradient without candle's strided add).
        let fc_pre = match self.fc.bias() {
            Some(bias) => {
                crate::kernels::transpose::matmul_t(&flatten_nchw_order(&a)?, self.fc.weight())?
                    .broadcast_add(bias)?
            }
            None => self.fc.forward(&flatten_nchw_order(&a)?)?,
        };
        let f = fc_pre.relu()?;
        Ok((
            f,
            CnnCache {
                caches,
                fc_pre,
                last_shape,
                stats,
                count,
            },
        ))
    }
}

impl Extractor for CnnFeatures {
    type Cache = CnnCache;

    fn features(&self) -> usize {
        self.fc.weight().dims().first().copied().unwrap_or(0)
    }

    /// Images `x (b, c, h, w)` to features `(b, d)`; `train` selects batch statistics.
    fn forward(&self, x: &Tensor, train: bool) -> Result<(Tensor, CnnCache)> {
        self.forward_path(x, train, Path::Full)
    }

    /// Training mode, the blocks one fused op on the CPU (no convolution or block output in
    /// candle's graph); the cache serves [`Extractor::after_step`] only.
    fn forward_without_input_gradient(&self, x: &Tensor) -> Result<(Tensor, CnnCache)> {
        self.forward_path(x, true, Path::LossOnly)
    }

    /// `v (b, d)` back through fc + ReLU and the blocks, to `(b, c, h, w)`.
    fn input_gradient(&self, v: &Tensor, cache: &CnnCache) -> Result<Tensor> {
        let mask = cache.fc_pre.gt(0.0)?.to_dtype(v.dtype())?;
        let gflat = v.mul(&mask)?.matmul(self.fc.weight())?; // (b, c*h*w) in NCHW order
        let (b, h, w, c) = cache.last_shape;
        let mut g = gflat
            .reshape((b, c, h, w))?
            .permute((0, 2, 3, 1))?
            .contiguous()?;
        for (bl, (bc, hw)) in self.blocks.iter().zip(&cache.caches).rev() {
            g = bl.input_gradient(&g, bc, *hw)?;
        }
        // NHWC to NCHW: a view (no copy) for one channel.
        Ok(g.permute((0, 3, 1, 2))?)
    }

    /// Eval mode, detached; on the CPU through the fused inference kernels.
    fn embed(&self, x: &Tensor) -> Result<Tensor> {
        let mut a = nchw_to_nhwc(&x.detach())?;
        let fused = self.blocks.iter().all(|b| b.fused) && crate::kernels::duq::supported(&a);
        for bl in &self.blocks {
            a = if fused {
                bl.eval_fused(&a)?
            } else {
                bl.forward(&a, false)?.0
            };
        }
        Ok(self.fc.forward(&flatten_nchw_order(&a)?)?.relu()?.detach())
    }

    /// Everything but the head's variables (which belong to [`Duq`]).
    fn vars(&self) -> Vec<Var> {
        self.params
            .named()
            .into_iter()
            .filter(|(name, _)| !name.starts_with("head."))
            .map(|(_, v)| v)
            .collect()
    }

    /// The running statistics from the step's batch statistics (momentum 0.1, unbiased
    /// variance).
    fn after_step(&mut self, cache: &CnnCache) -> Result<()> {
        for (bl, (st, n)) in self
            .blocks
            .iter_mut()
            .zip(cache.stats.iter().zip(&cache.count))
        {
            if let Some((mean, var)) = st {
                bl.update_running(mean, var, *n)?;
            }
        }
        Ok(())
    }
}

/// DUQ on the Fashion-MNIST CNN (see the module docs).
pub type DuqCnn = Duq<CnnFeatures>;

impl Duq<CnnFeatures> {
    /// The model `arch` describes, every tensor requested from `vb` (seeded for training,
    /// loaded for a checkpoint). Names: `b{1,2,3}.conv.{weight,bias}`,
    /// `b{1,2,3}.bn.{weight,bias,running_mean,running_var}`, `fc1.{weight,bias}`,
    /// `head.{weight,m,counts}`.
    pub fn new(arch: &DuqCnnArch, vb: candle_nn::VarBuilder) -> Result<Self> {
        Self::build(arch, vb, Weights::from_named(Vec::new()))
    }

    /// `new` with the variables `params` lists (those `vb` created, for training).
    fn build(arch: &DuqCnnArch, vb: candle_nn::VarBuilder, params: Weights) -> Result<Self> {
        let cfg = &arch.duq;
        cfg.settings.validate()?;
        let [c, h, w] = arch.item_shape;
        let side = |s: usize| ((s / 2) / 2).saturating_sub(2) / 2;
        let (fh, fw) = (side(h), side(w));
        if fh == 0 || fw == 0 || arch.classes < 2 {
            return Err(Error::config(
                "duq",
                format!(
                    "images {h}x{w} are too small for three conv-pool blocks, or fewer than 2 classes ({})",
                    arch.classes
                ),
            ));
        }
        let [c1, c2, c3] = cfg.channels;
        let blocks = vec![
            Block::new(c, c1, 1, vb.pp("b1"))?,
            Block::new(c1, c2, 1, vb.pp("b2"))?,
            Block::new(c2, c3, 0, vb.pp("b3"))?,
        ];
        let fc = linear(c3 * fh * fw, cfg.features, vb.pp("fc1"))?;
        let head = RbfHead::from_vb(
            cfg.features,
            arch.classes,
            cfg.settings.centroid_dims,
            (cfg.settings.sigma, cfg.settings.gamma),
            (cfg.settings.w_std, cfg.settings.n_init),
            vb.pp("head"),
        )?;
        let features = CnnFeatures { blocks, fc, params };
        Duq::from_parts(features, head, arch.classes, &cfg.settings)
    }

    /// A fresh model for `(c, h, w)` images and `classes` classes, every parameter and the
    /// initial centroids drawn from `rng`.
    pub fn seeded(
        item_shape: &[usize],
        classes: usize,
        cfg: &DuqCnnConfig,
        dtype: DType,
        device: &Device,
        rng: Rng,
    ) -> Result<Self> {
        let [c, h, w] = item_shape else {
            return Err(Error::config(
                "item_shape",
                format!("{item_shape:?} is not (c, h, w)"),
            ));
        };
        let arch = DuqCnnArch {
            item_shape: [*c, *h, *w],
            classes,
            duq: cfg.clone(),
        };
        let (vb, params) = seeded(rng, dtype, device);
        Self::build(&arch, vb, params)
    }

    /// Every tensor by name with its current value (trained weights, running statistics,
    /// centroid state): what a checkpoint saves.
    pub fn state(&self) -> Result<Weights> {
        let mut named: Vec<(String, Tensor)> = Vec::new();
        for (i, bl) in self.extractor().blocks.iter().enumerate() {
            let p = format!("b{}", i + 1);
            named.push((format!("{p}.conv.weight"), bl.weight.clone()));
            named.push((format!("{p}.conv.bias"), bl.bias.clone()));
            named.push((format!("{p}.bn.weight"), bl.gamma.clone()));
            named.push((format!("{p}.bn.bias"), bl.beta.clone()));
            named.push((format!("{p}.bn.running_mean"), bl.running_mean.clone()));
            named.push((format!("{p}.bn.running_var"), bl.running_var.clone()));
        }
        let fc = &self.extractor().fc;
        named.push(("fc1.weight".into(), fc.weight().clone()));
        if let Some(b) = fc.bias() {
            named.push(("fc1.bias".into(), b.clone()));
        }
        let (m, counts) = self.head().buffers();
        named.push(("head.weight".into(), self.head().weight().clone()));
        named.push(("head.m".into(), m.clone()));
        named.push(("head.counts".into(), counts.clone()));
        Ok(Weights::from_named(
            named
                .into_iter()
                .map(|(n, t)| Ok((n, Var::from_tensor(&t.detach().copy()?)?)))
                .collect::<Result<_>>()?,
        ))
    }

    /// Whether the CPU runs the fused kernels (`kernels::duq` in training, batch norm
    /// folded into the convolution in eval mode; on by default) or the composition of candle
    /// ops that other devices use. The two agree up to rounding; tests compare them.
    pub fn set_fused(&mut self, on: bool) {
        for b in &mut self.extractor_mut().blocks {
            b.fused = on;
        }
    }

    /// Every variable by name (PyTorch-style `b1.conv.weight`, `b1.bn.weight`, ...,
    /// `head.weight`), running statistics and centroid state included.
    pub fn params(&self) -> &Weights {
        &self.extractor().params
    }
}

/// Trains a fresh DUQ CNN for `steps` SGD steps of `batch` items of `data[indices]` (batch
/// order from `batches`, initialisation from `init`), the learning rate dropping by
/// `lr_factor` at the same fractions of the run as the configured epoch milestones.
#[allow(clippy::too_many_arguments)]
pub fn train_duq(
    arch: &DuqCnnArch,
    data: &crate::data::Dataset,
    indices: &[usize],
    steps: usize,
    batch: usize,
    (init, mut batches): (Rng, Rng),
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<(DuqCnn, Weights)> {
    if indices.is_empty() {
        return Err(Error::config(
            "labeled",
            "cannot train on an empty labeled set",
        ));
    }
    let mut model = DuqCnn::seeded(
        &arch.item_shape,
        arch.classes,
        &arch.duq,
        DType::F32,
        device,
        init,
    )?;
    model.fit_steps(
        data,
        indices,
        (steps, batch),
        &mut batches,
        device,
        observer,
    )?;
    let state = model.state()?;
    Ok((model, state))
}
