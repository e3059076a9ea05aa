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
//! This module covers the ReLU-MLP feature extractor (the two-moons setting); the
//! Fashion-MNIST CNN with batch norm is not implemented yet.

use crate::error::{Error, Result};
use crate::nn::init::{seeded, Params};
use crate::nn::layers::linear;
use crate::rng::{normal, shuffle, Rng};
use candle_core::{DType, Device, Module, Tensor, Var, D};
use serde::{Deserialize, Serialize};

/// The gradient-penalty form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Penalty {
    /// `(||g|| - 1)^2`, the reference code's form.
    TwoSided,
    /// `(||g||^2 - 1)^2`, the paper's written form.
    Squared,
    /// `max(0, ||g|| - 1)^2`.
    OneSided,
    /// No penalty.
    None,
}

/// DUQ settings (defaults: the two-moons experiment of the paper).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DuqConfig {
    /// Hidden widths of the ReLU MLP feature extractor (its last width is `d`).
    pub hidden: Vec<usize>,
    /// Centroid size `n`.
    pub centroid_dims: usize,
    /// RBF length scale `sigma`.
    pub sigma: f64,
    /// Centroid EMA momentum `g` in `[0.99, 0.999]`.
    pub gamma: f64,
    /// Penalty weight `lambda`.
    pub lambda: f64,
    /// Penalty form.
    pub penalty: Penalty,
    /// SGD learning rate.
    pub lr: f64,
    /// SGD momentum.
    pub momentum: f64,
    /// L2 weight decay.
    pub weight_decay: f64,
    /// Mini-batch size.
    pub batch: usize,
    /// Epochs.
    pub epochs: usize,
    /// Standard deviation of the initial `W_c` entries.
    pub w_std: f64,
    /// Initial `N_c`.
    pub n_init: f64,
}

impl Default for DuqConfig {
    fn default() -> Self {
        Self {
            hidden: vec![20, 20, 20],
            centroid_dims: 10,
            sigma: 0.3,
            gamma: 0.99,
            lambda: 1.0,
            penalty: Penalty::TwoSided,
            lr: 0.01,
            momentum: 0.9,
            weight_decay: 1e-4,
            batch: 64,
            epochs: 30,
            w_std: 1.0,
            n_init: 20.0,
        }
    }
}

/// A DUQ model with a ReLU-MLP feature extractor.
pub struct DuqMlp {
    layers: Vec<candle_nn::Linear>,
    /// `W (c * n, d)`: class `c`'s matrix is rows `c*n .. (c+1)*n`.
    w: Var,
    /// EMA sums `m (c, n)` and counts `N (c,)`.
    m: Tensor,
    counts: Tensor,
    classes: usize,
    cfg: DuqConfig,
    params: Params,
}

/// What a DUQ forward returns.
pub struct DuqOutput {
    /// `K (b, c)`.
    pub kernel: Tensor,
    /// `ln K (b, c)`, exact.
    pub log_kernel: Tensor,
    /// `z - e (b, c, n)`.
    pub diff: Tensor,
    /// Pre-activations of each hidden layer `(b, width)`.
    pub pre: Vec<Tensor>,
}

impl DuqMlp {
    /// A fresh model for `inputs`-dimensional points and `classes` classes, all parameters and
    /// initial centroids from `rng`.
    pub fn new(
        inputs: usize,
        classes: usize,
        cfg: &DuqConfig,
        dtype: DType,
        device: &Device,
        mut rng: Rng,
    ) -> Result<Self> {
        if cfg.hidden.is_empty() || cfg.centroid_dims == 0 || cfg.sigma <= 0.0 {
            return Err(Error::config(
                "duq",
                "needs hidden layers, centroid_dims > 0 and sigma > 0",
            ));
        }
        let init = <Rng as rand::SeedableRng>::seed_from_u64(rand::RngCore::next_u64(&mut rng));
        let (vb, params) = seeded(init, dtype, device);
        let mut widths = vec![inputs];
        widths.extend(&cfg.hidden);
        let layers = widths
            .windows(2)
            .enumerate()
            .map(|(i, w)| linear(w[0], w[1], vb.pp(format!("fc{}", i + 1))))
            .collect::<candle_core::Result<Vec<_>>>()?;
        let d = *widths.last().expect("non-empty");
        let n = cfg.centroid_dims;
        let draw = |rng: &mut Rng, k: usize, s: f64| -> Vec<f64> {
            (0..k).map(|_| s * normal(rng)).collect()
        };
        let w = Var::from_tensor(
            &Tensor::from_vec(
                draw(&mut rng, classes * n * d, cfg.w_std),
                (classes * n, d),
                device,
            )?
            .to_dtype(dtype)?,
        )?;
        let m = (Tensor::from_vec(draw(&mut rng, classes * n, 1.0), (classes, n), device)?
            .to_dtype(dtype)?
            * cfg.n_init)?;
        let counts = (Tensor::ones(classes, dtype, device)? * cfg.n_init)?;
        Ok(Self {
            layers,
            w,
            m,
            counts,
            classes,
            cfg: cfg.clone(),
            params,
        })
    }

    /// All trainable variables: the feature extractor's and `W`.
    pub fn vars(&self) -> Vec<Var> {
        let mut v = self.params.vars();
        v.push(self.w.clone());
        v
    }

    /// Number of classes.
    pub fn classes(&self) -> usize {
        self.classes
    }

    /// Features `f(x) (b, d)` and the hidden pre-activations.
    fn features(&self, x: &Tensor) -> Result<(Tensor, Vec<Tensor>)> {
        let mut h = x.clone();
        let mut pre = Vec::with_capacity(self.layers.len());
        for l in &self.layers {
            let z = l.forward(&h)?;
            h = z.relu()?;
            pre.push(z);
        }
        Ok((h, pre))
    }

    /// The centroids `e (c, n)`.
    pub fn centroids(&self) -> Result<Tensor> {
        Ok(self.m.broadcast_div(&self.counts.unsqueeze(1)?)?)
    }

    /// Kernel values and what the penalty needs, for points `x (b, inputs)`.
    pub fn forward(&self, x: &Tensor) -> Result<DuqOutput> {
        let (f, pre) = self.features(x)?;
        let (b, n) = (x.dim(0)?, self.cfg.centroid_dims);
        let z = f
            .matmul(&self.w.as_tensor().t()?)?
            .reshape((b, self.classes, n))?;
        let diff = z.broadcast_sub(&self.centroids()?.unsqueeze(0)?)?;
        let log_kernel =
            (diff.sqr()?.mean(D::Minus1)? * (-1.0 / (2.0 * self.cfg.sigma * self.cfg.sigma)))?;
        Ok(DuqOutput {
            kernel: log_kernel.exp()?,
            log_kernel,
            diff,
            pre,
        })
    }

    /// `grad_x sum_c K_c (b, inputs)`, written with differentiable ops (no double backward).
    pub fn input_gradient(&self, out: &DuqOutput) -> Result<Tensor> {
        let (b, c, n) = out.diff.dims3()?;
        // d K_c / d z_c = -K_c (z_c - e_c) / (n sigma^2); then through W: (b, c*n) @ (c*n, d).
        let coef =
            (out.kernel.unsqueeze(2)? * (-1.0 / (n as f64 * self.cfg.sigma * self.cfg.sigma)))?;
        let mut g = out
            .diff
            .broadcast_mul(&coef)?
            .reshape((b, c * n))?
            .matmul(self.w.as_tensor())?;
        for (l, z) in self.layers.iter().zip(&out.pre).rev() {
            let mask = z.gt(0.0)?.to_dtype(g.dtype())?;
            g = g.mul(&mask)?.matmul(l.weight())?;
        }
        Ok(g)
    }

    /// BCE + penalty for a batch; returns `(total, bce, penalty)`.
    pub fn loss(&self, x: &Tensor, y: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
        let out = self.forward(x)?;
        let onehot = candle_nn::encoding::one_hot(y.clone(), self.classes, 1.0f64, 0.0f64)?
            .to_dtype(out.kernel.dtype())?;
        let log_1mk = (1.0 - &out.kernel)?.clamp(1e-12, 1.0)?.log()?;
        let bce = ((&onehot * &out.log_kernel)? + ((1.0 - &onehot)? * log_1mk)?)?
            .mean_all()?
            .neg()?;
        let penalty = match self.cfg.penalty {
            Penalty::None => Tensor::zeros((), bce.dtype(), bce.device())?,
            p => {
                let g = self.input_gradient(&out)?;
                let sq = g.sqr()?.sum(D::Minus1)?;
                let per = match p {
                    Penalty::Squared => (sq - 1.0)?.sqr()?,
                    Penalty::TwoSided => ((sq + 1e-12)?.sqrt()? - 1.0)?.sqr()?,
                    Penalty::OneSided => ((sq + 1e-12)?.sqrt()? - 1.0)?.relu()?.sqr()?,
                    Penalty::None => unreachable!("handled above"),
                };
                (per.mean_all()? * self.cfg.lambda)?
            }
        };
        Ok(((&bce + &penalty)?, bce, penalty))
    }

    /// The EMA centroid update for a batch, with the current (updated) weights, no gradient.
    pub fn update_centroids(&mut self, x: &Tensor, y: &Tensor) -> Result<()> {
        let out = self.forward(&x.detach())?;
        let z = out
            .diff
            .detach()
            .broadcast_add(&self.centroids()?.unsqueeze(0)?)?; // W_c f(x) (b, c, n)
        let onehot = candle_nn::encoding::one_hot(y.clone(), self.classes, 1.0f64, 0.0f64)?
            .to_dtype(z.dtype())?;
        let g = self.cfg.gamma;
        let n_c = onehot.sum(0)?;
        let sum_c = z.broadcast_mul(&onehot.unsqueeze(2)?)?.sum(0)?;
        self.counts = ((&self.counts * g)? + (n_c * (1.0 - g))?)?;
        self.m = ((&self.m * g)? + (sum_c * (1.0 - g))?)?;
        Ok(())
    }

    /// Trains on `x (N, inputs)`, `y (N,)` for `cfg.epochs` epochs with batch order from `rng`.
    pub fn fit(&mut self, x: &Tensor, y: &Tensor, rng: &mut Rng) -> Result<f64> {
        let vars = self.vars();
        let mut bufs: Vec<Option<Tensor>> = vec![None; vars.len()];
        let n = x.dim(0)?;
        let mut order: Vec<usize> = (0..n).collect();
        let mut last = f64::NAN;
        for _ in 0..self.cfg.epochs {
            shuffle(rng, &mut order);
            for chunk in order.chunks(self.cfg.batch.max(1)) {
                let ids = Tensor::from_vec(
                    chunk.iter().map(|&i| i as u32).collect::<Vec<_>>(),
                    chunk.len(),
                    x.device(),
                )?;
                let (xb, yb) = (x.index_select(&ids, 0)?, y.index_select(&ids, 0)?);
                let (loss, _, _) = self.loss(&xb, &yb)?;
                let grads = loss.backward()?;
                // SGD with momentum and L2 weight decay (PyTorch's `SGD(momentum, weight_decay)`).
                for (v, buf) in vars.iter().zip(bufs.iter_mut()) {
                    let Some(g) = grads.get(v) else { continue };
                    let g = (g + (v.as_tensor() * self.cfg.weight_decay)?)?;
                    let b = match buf.take() {
                        Some(b) => ((b * self.cfg.momentum)? + &g)?,
                        None => g,
                    };
                    v.set(&(v.as_tensor() - (&b * self.cfg.lr)?)?)?;
                    *buf = Some(b);
                }
                self.update_centroids(&xb, &yb)?;
                last = loss.to_dtype(DType::F64)?.to_scalar::<f64>()?;
            }
        }
        Ok(last)
    }

    /// `K (b, c)` as row-major `f32`, inference only.
    pub fn kernel_values(&self, x: &Tensor) -> Result<Vec<f32>> {
        Ok(self
            .forward(&x.detach())?
            .kernel
            .to_dtype(DType::F32)?
            .flatten_all()?
            .to_vec1()?)
    }
}
