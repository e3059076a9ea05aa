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
//! [`DuqMlp`] has a ReLU-MLP feature extractor (the two-moons setting); [`cnn::DuqCnn`] the
//! paper's Fashion-MNIST CNN with batch norm. Both share the RBF head ([`RbfHead`]), the loss
//! and the optimiser defined here.

pub mod cnn;
pub(crate) mod fused;

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

/// The RBF head: per-class matrices `W (c * n, d)` (class `c`'s rows `c*n .. (c+1)*n`) and
/// centroids kept as EMA sums `m (c, n)` over counts `N (c,)`.
pub struct RbfHead {
    w: Tensor,
    m: Tensor,
    counts: Tensor,
    classes: usize,
    n: usize,
    sigma: f64,
    gamma: f64,
}

/// Kernel values and what the input gradient needs.
pub struct HeadOutput {
    /// `K (b, c)`.
    pub kernel: Tensor,
    /// `ln K (b, c)`, exact.
    pub log_kernel: Tensor,
    /// `z - e (b, c, n)`.
    pub diff: Tensor,
}

impl RbfHead {
    /// The head with its tensors requested from `vb` (`weight (c * n, d)`, `m (c, n)`,
    /// `counts (c,)`; a seeded builder draws `W_c ~ N(0, w_std^2)`, `m_c ~ N(0, n_init^2)`,
    /// i.e. `n_init` times standard normal draws, and `N_c = n_init`).
    pub fn from_vb(
        features: usize,
        classes: usize,
        n: usize,
        (sigma, gamma): (f64, f64),
        (w_std, n_init): (f64, f64),
        vb: candle_nn::VarBuilder,
    ) -> Result<Self> {
        use candle_nn::Init;
        Ok(Self {
            w: vb.get_with_hints(
                (classes * n, features),
                "weight",
                Init::Randn {
                    mean: 0.0,
                    stdev: w_std,
                },
            )?,
            m: vb.get_with_hints(
                (classes, n),
                "m",
                Init::Randn {
                    mean: 0.0,
                    stdev: n_init,
                },
            )?,
            counts: vb.get_with_hints(classes, "counts", Init::Const(n_init))?,
            classes,
            n,
            sigma,
            gamma,
        })
    }

    /// `W (c * n, d)`.
    pub fn weight(&self) -> &Tensor {
        &self.w
    }

    /// The centroid EMA state `(m (c, n), N (c,))`.
    pub fn buffers(&self) -> (&Tensor, &Tensor) {
        (&self.m, &self.counts)
    }

    /// `W_c ~ N(0, w_std^2)`, `N_c = n_init`, `m_c = n_init * N(0, 1)` draws, all from `rng`;
    /// also returns `W` as the trainable variable.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        features: usize,
        classes: usize,
        n: usize,
        (sigma, gamma): (f64, f64),
        (w_std, n_init): (f64, f64),
        dtype: DType,
        device: &Device,
        rng: &mut Rng,
    ) -> Result<(Self, Var)> {
        let draw = |rng: &mut Rng, k: usize, s: f64| -> Vec<f64> {
            (0..k).map(|_| s * normal(rng)).collect()
        };
        let w = Var::from_tensor(
            &Tensor::from_vec(
                draw(rng, classes * n * features, w_std),
                (classes * n, features),
                device,
            )?
            .to_dtype(dtype)?,
        )?;
        let m = (Tensor::from_vec(draw(rng, classes * n, 1.0), (classes, n), device)?
            .to_dtype(dtype)?
            * n_init)?;
        let counts = (Tensor::ones(classes, dtype, device)? * n_init)?;
        Ok((
            Self {
                w: w.as_tensor().clone(),
                m,
                counts,
                classes,
                n,
                sigma,
                gamma,
            },
            w,
        ))
    }

    /// The centroids `e (c, n)`: state, not parameters (detached, so no gradient reaches
    /// them even when they are backed by variables).
    pub fn centroids(&self) -> Result<Tensor> {
        Ok(self
            .m
            .detach()
            .broadcast_div(&self.counts.detach().unsqueeze(1)?)?)
    }

    /// Kernel values for features `f (b, d)`.
    pub fn forward(&self, f: &Tensor) -> Result<HeadOutput> {
        let b = f.dim(0)?;
        let z = f.matmul(&self.w.t()?)?.reshape((b, self.classes, self.n))?;
        let diff = z.broadcast_sub(&self.centroids()?.unsqueeze(0)?)?;
        let log_kernel = (diff.sqr()?.mean(D::Minus1)? * (-1.0 / (2.0 * self.sigma * self.sigma)))?;
        Ok(HeadOutput {
            kernel: log_kernel.exp()?,
            log_kernel,
            diff,
        })
    }

    /// `d sum_c K_c / d f (b, d)`: `-K_c (z_c - e_c) / (n sigma^2)` through `W_c`.
    pub fn feature_gradient(&self, out: &HeadOutput) -> Result<Tensor> {
        let (b, c, n) = out.diff.dims3()?;
        let coef = (out.kernel.unsqueeze(2)? * (-1.0 / (n as f64 * self.sigma * self.sigma)))?;
        Ok(out
            .diff
            .broadcast_mul(&coef)?
            .reshape((b, c * n))?
            .matmul(&self.w)?)
    }

    /// The EMA update from features `f (b, d)` (computed without gradient) and labels `y (b,)`.
    pub fn update(&mut self, f: &Tensor, y: &Tensor) -> Result<()> {
        let b = f.dim(0)?;
        let z = f
            .detach()
            .matmul(&self.w.detach().t()?)?
            .reshape((b, self.classes, self.n))?;
        let onehot = candle_nn::encoding::one_hot(y.clone(), self.classes, 1.0f64, 0.0f64)?
            .to_dtype(z.dtype())?;
        let g = self.gamma;
        let n_c = onehot.sum(0)?;
        let sum_c = z.broadcast_mul(&onehot.unsqueeze(2)?)?.sum(0)?;
        // Clamped at 1, as the reference code (`torch.max(..., ones)`).
        self.counts = ((self.counts.detach() * g)? + (n_c * (1.0 - g))?)?.maximum(1.0)?;
        self.m = ((self.m.detach() * g)? + (sum_c * (1.0 - g))?)?;
        Ok(())
    }
}

/// Binary cross-entropy between each `K_c` and the one-hot label, mean over batch and classes
/// (`ln K` exact, `ln(1 - K)` clamped at `1e-12`).
pub fn bce(out: &HeadOutput, y: &Tensor, classes: usize) -> Result<Tensor> {
    let onehot = candle_nn::encoding::one_hot(y.clone(), classes, 1.0f64, 0.0f64)?
        .to_dtype(out.kernel.dtype())?;
    let log_1mk = (1.0 - &out.kernel)?.clamp(1e-12, 1.0)?.log()?;
    Ok(
        ((&onehot * &out.log_kernel)? + ((1.0 - &onehot)? * log_1mk)?)?
            .mean_all()?
            .neg()?,
    )
}

/// `lambda * mean_i p(||g_i||)` for input gradients `g (b, ...)`, `p` the [`Penalty`] form.
pub fn penalty(g: &Tensor, form: Penalty, lambda: f64) -> Result<Tensor> {
    let b = g.dim(0)?;
    let sq = g.reshape((b, ()))?.sqr()?.sum(D::Minus1)?;
    let per = match form {
        Penalty::None => return Ok(Tensor::zeros((), g.dtype(), g.device())?),
        Penalty::Squared => (sq - 1.0)?.sqr()?,
        Penalty::TwoSided => ((sq + 1e-12)?.sqrt()? - 1.0)?.sqr()?,
        Penalty::OneSided => ((sq + 1e-12)?.sqrt()? - 1.0)?.relu()?.sqr()?,
    };
    Ok((per.mean_all()? * lambda)?)
}

/// PyTorch's `SGD(lr, momentum, weight_decay)`: `b <- momentum b + (g + wd theta)`,
/// `theta <- theta - lr b`.
pub struct Sgd {
    vars: Vec<Var>,
    bufs: Vec<Option<Tensor>>,
    /// Learning rate (a schedule may change it between steps).
    pub lr: f64,
    momentum: f64,
    weight_decay: f64,
}

impl Sgd {
    /// An optimiser over `vars`.
    pub fn new(vars: Vec<Var>, lr: f64, momentum: f64, weight_decay: f64) -> Self {
        let bufs = vec![None; vars.len()];
        Self {
            vars,
            bufs,
            lr,
            momentum,
            weight_decay,
        }
    }

    /// One step on the gradients of `loss`.
    pub fn backward_step(&mut self, loss: &Tensor) -> Result<()> {
        let grads = loss.backward()?;
        for (v, buf) in self.vars.iter().zip(self.bufs.iter_mut()) {
            let Some(g) = grads.get(v) else { continue };
            // Detached throughout: ops on a variable's tensor are recorded, and a momentum
            // buffer that remembered its history would keep every past gradient alive.
            let theta = v.as_tensor().detach();
            let g = (g.detach() + (&theta * self.weight_decay)?)?;
            let b = match buf.take() {
                Some(b) => ((b * self.momentum)? + &g)?,
                None => g,
            };
            v.set(&(&theta - (&b * self.lr)?)?)?;
            *buf = Some(b);
        }
        Ok(())
    }
}

/// A DUQ model with a ReLU-MLP feature extractor.
pub struct DuqMlp {
    layers: Vec<candle_nn::Linear>,
    head: RbfHead,
    w: Var,
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
        let (head, w) = RbfHead::new(
            d,
            classes,
            cfg.centroid_dims,
            (cfg.sigma, cfg.gamma),
            (cfg.w_std, cfg.n_init),
            dtype,
            device,
            &mut rng,
        )?;
        Ok(Self {
            layers,
            head,
            w,
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
        self.head.centroids()
    }

    /// Kernel values and what the penalty needs, for points `x (b, inputs)`.
    pub fn forward(&self, x: &Tensor) -> Result<DuqOutput> {
        let (f, pre) = self.features(x)?;
        let HeadOutput {
            kernel,
            log_kernel,
            diff,
        } = self.head.forward(&f)?;
        Ok(DuqOutput {
            kernel,
            log_kernel,
            diff,
            pre,
        })
    }

    /// `grad_x sum_c K_c (b, inputs)`, written with differentiable ops (no double backward).
    pub fn input_gradient(&self, out: &DuqOutput) -> Result<Tensor> {
        let head = HeadOutput {
            kernel: out.kernel.clone(),
            log_kernel: out.log_kernel.clone(),
            diff: out.diff.clone(),
        };
        let mut g = self.head.feature_gradient(&head)?;
        for (l, z) in self.layers.iter().zip(&out.pre).rev() {
            let mask = z.gt(0.0)?.to_dtype(g.dtype())?;
            g = g.mul(&mask)?.matmul(l.weight())?;
        }
        Ok(g)
    }

    /// BCE + penalty for a batch; returns `(total, bce, penalty)`.
    pub fn loss(&self, x: &Tensor, y: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
        let out = self.forward(x)?;
        let head = HeadOutput {
            kernel: out.kernel.clone(),
            log_kernel: out.log_kernel.clone(),
            diff: out.diff.clone(),
        };
        let bce = bce(&head, y, self.classes)?;
        let penalty = match self.cfg.penalty {
            Penalty::None => Tensor::zeros((), bce.dtype(), bce.device())?,
            p => penalty(&self.input_gradient(&out)?, p, self.cfg.lambda)?,
        };
        Ok(((&bce + &penalty)?, bce, penalty))
    }

    /// The EMA centroid update for a batch, with the current (updated) weights, no gradient.
    pub fn update_centroids(&mut self, x: &Tensor, y: &Tensor) -> Result<()> {
        let (f, _) = self.features(&x.detach())?;
        self.head.update(&f, y)
    }

    /// Trains on `x (N, inputs)`, `y (N,)` for `cfg.epochs` epochs with batch order from `rng`.
    pub fn fit(&mut self, x: &Tensor, y: &Tensor, rng: &mut Rng) -> Result<f64> {
        let mut sgd = Sgd::new(
            self.vars(),
            self.cfg.lr,
            self.cfg.momentum,
            self.cfg.weight_decay,
        );
        let n = x.dim(0)?;
        let mut order: Vec<usize> = (0..n).collect();
        let mut last = f64::NAN;
        for _ in 0..self.cfg.epochs {
            shuffle(rng, &mut order);
            // Full batches only (the reference's `drop_last=True`): a short last batch
            // would take a full-size step from a few points.
            for chunk in order.chunks_exact(self.cfg.batch.max(1).min(n)) {
                let ids = Tensor::from_vec(
                    chunk.iter().map(|&i| i as u32).collect::<Vec<_>>(),
                    chunk.len(),
                    x.device(),
                )?;
                let (xb, yb) = (x.index_select(&ids, 0)?, y.index_select(&ids, 0)?);
                let (loss, _, _) = self.loss(&xb, &yb)?;
                sgd.backward_step(&loss)?;
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
