//! What every DUQ model shares: its settings ([`DuqSettings`], [`Penalty`], [`DuqConfig`]),
//! the RBF head ([`RbfHead`]), the loss ([`bce`], [`penalty`]) and the optimiser ([`Sgd`]).

use crate::error::{Error, Result};
use crate::rng::{normal, Rng};
use candle_core::{DType, Device, Tensor, Var, D};
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

impl Penalty {
    /// Every form, in the order users are told them.
    pub const ALL: [Penalty; 4] = [
        Penalty::TwoSided,
        Penalty::Squared,
        Penalty::OneSided,
        Penalty::None,
    ];

    /// The name users type.
    pub fn name(self) -> &'static str {
        match self {
            Penalty::TwoSided => "two-sided",
            Penalty::Squared => "squared",
            Penalty::OneSided => "one-sided",
            Penalty::None => "none",
        }
    }
}

impl std::str::FromStr for Penalty {
    type Err = Error;
    fn from_str(s: &str) -> Result<Penalty> {
        Penalty::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                Error::config(
                    "penalty",
                    format!(
                        "unknown penalty `{s}`; expected two-sided, squared, one-sided or none"
                    ),
                )
            })
    }
}

impl std::fmt::Display for Penalty {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// DUQ's settings apart from the feature extractor: head, loss, optimiser and schedule
/// (defaults: the two-moons experiment of the paper).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DuqSettings {
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
    /// Epochs after which the learning rate is multiplied by `lr_factor` (none by default).
    #[serde(default)]
    pub milestones: Vec<usize>,
    /// Learning-rate factor at each milestone.
    #[serde(default = "default_lr_factor")]
    pub lr_factor: f64,
    /// Standard deviation of the initial `W_c` entries.
    pub w_std: f64,
    /// Initial `N_c`.
    pub n_init: f64,
}

fn default_lr_factor() -> f64 {
    0.2
}

impl Default for DuqSettings {
    fn default() -> Self {
        Self {
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
            milestones: Vec::new(),
            lr_factor: default_lr_factor(),
            w_std: 1.0,
            n_init: 20.0,
        }
    }
}

impl DuqSettings {
    /// Checks the settings once, before any training: a positive centroid size, length
    /// scale, batch, learning rate and `n_init`; `gamma` in `[0, 1)`; non-negative `lambda`,
    /// momentum and weight decay.
    pub fn validate(&self) -> Result<()> {
        let bad = |field: &'static str, problem: String| Err(Error::config(field, problem));
        if self.centroid_dims == 0 || self.batch == 0 {
            return bad(
                "duq",
                format!(
                    "centroid_dims ({}) and batch ({}) must be positive",
                    self.centroid_dims, self.batch
                ),
            );
        }
        for (field, v) in [
            ("sigma", self.sigma),
            ("lr", self.lr),
            ("n_init", self.n_init),
            ("w_std", self.w_std),
        ] {
            if !(v > 0.0 && v.is_finite()) {
                return bad(field, format!("must be positive and finite, got {v}"));
            }
        }
        for (field, v) in [
            ("lambda", self.lambda),
            ("momentum", self.momentum),
            ("weight_decay", self.weight_decay),
        ] {
            if !(v >= 0.0 && v.is_finite()) {
                return bad(field, format!("must be non-negative and finite, got {v}"));
            }
        }
        if !(0.0..1.0).contains(&self.gamma) {
            return bad("gamma", format!("must be in [0, 1), got {}", self.gamma));
        }
        Ok(())
    }
}

/// DUQ with the ReLU-MLP feature extractor (defaults: the two-moons experiment of the paper).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DuqConfig {
    /// Hidden widths of the ReLU MLP feature extractor (its last width is `d`).
    pub hidden: Vec<usize>,
    /// Head, loss, optimiser and schedule.
    #[serde(flatten)]
    pub settings: DuqSettings,
}

impl Default for DuqConfig {
    fn default() -> Self {
        Self {
            hidden: vec![20, 20, 20],
            settings: DuqSettings::default(),
        }
    }
}

/// The RBF head: per-class matrices `W (c * n, d)` (class `c`'s rows `c*n .. (c+1)*n`) and
/// centroids kept as EMA sums `m (c, n)` over counts `N (c,)`.
pub struct RbfHead {
    pub(super) w: Tensor,
    m: Tensor,
    counts: Tensor,
    pub(super) classes: usize,
    pub(super) n: usize,
    pub(super) sigma: f64,
    pub(super) gamma: f64,
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
        // `f W^T`; on the CPU W's gradient comes back in W's layout (no strided add).
        let z =
            crate::kernels::transpose::matmul_t(f, &self.w)?.reshape((b, self.classes, self.n))?;
        let diff = z.broadcast_sub(&self.centroids()?.unsqueeze(0)?)?;
        // The mean of squares over the embedding: on the CPU one op each way (candle's
        // backward of `sqr` + `sum` makes four single-threaded passes over `(b, c, n)`), with
        // the same values as the composition.
        let sq_sum = if crate::kernels::supported(&diff) {
            diff.contiguous()?
                .apply_op1(crate::kernels::rbf::SumSquares)?
        } else {
            diff.sqr()?.sum(D::Minus1)?
        };
        let mean = (sq_sum * (1.0 / self.n as f64))?;
        let log_kernel = (mean * (-1.0 / (2.0 * self.sigma * self.sigma)))?;
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
        let d = f.dim(1)?;
        let onehot = candle_nn::encoding::one_hot(y.clone(), self.classes, 1.0f64, 0.0f64)?
            .to_dtype(f.dtype())?;
        let g = self.gamma;
        let n_c = onehot.sum(0)?;
        // sum_{i in c} W_c f_i = W_c (sum_{i in c} f_i): the class sums of the features
        // `(c, d)` first, then one `(n, d)` product per class, instead of every class's
        // embedding of every item (`(b, c n)`, ~80x the multiplies at batch 128).
        let f_c = onehot.t()?.matmul(&f.detach())?;
        let sum_c = self
            .w
            .detach()
            .reshape((self.classes, self.n, d))?
            .matmul(&f_c.unsqueeze(2)?)?
            .squeeze(2)?;
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
        let hyper = (self.lr, self.momentum, self.weight_decay);
        for (v, buf) in self.vars.iter().zip(self.bufs.iter_mut()) {
            let Some(g) = grads.get(v) else { continue };
            // Detached throughout: ops on a variable's tensor are recorded, and a momentum
            // buffer that remembered its history would keep every past gradient alive.
            let theta = v.as_tensor().detach();
            let (theta, b) = if crate::kernels::supported(&theta) {
                sgd_cpu(&theta, &g.detach().contiguous()?, buf.take(), hyper)?
            } else {
                let g = (g.detach() + (&theta * self.weight_decay)?)?;
                let b = match buf.take() {
                    Some(b) => ((b * self.momentum)? + &g)?,
                    None => g,
                };
                ((&theta - (&b * self.lr)?)?, b)
            };
            v.set(&theta)?;
            *buf = Some(b);
        }
        Ok(())
    }
}

/// One parameter's SGD update on the CPU in one pass, `(theta', b')`: the same operations, in
/// the same order and precision, as the candle ops of the other devices (`x * c` is candle's
/// affine `x * c + 0`), so results are bit-identical; three passes where the candle ops make
/// six (per-op timers: 1.55 -> 1.25 ms of a Fashion-MNIST DUQ step).
fn sgd_cpu(
    theta: &Tensor,
    g: &Tensor,
    b: Option<Tensor>,
    (lr, momentum, wd): (f64, f64, f64),
) -> Result<(Tensor, Tensor)> {
    fn run<T: crate::kernels::Elem + candle_core::WithDType>(
        theta: &Tensor,
        g: &Tensor,
        b: Option<&Tensor>,
        (lr, momentum, wd): (f64, f64, f64),
    ) -> Result<(Tensor, Tensor)> {
        let c = |v: f64| <T as crate::kernels::Elem>::from_f64(v);
        let (lr, momentum, wd, zero) = (c(lr), c(momentum), c(wd), T::ZERO);
        let mut ts = vec![theta, g];
        ts.extend(b);
        let (new_theta, new_b) = crate::kernels::with_cpu_slices::<T, _>(&ts, "sgd", |s| {
            let (th, g) = (s[0], s[1]);
            let g: Vec<T> = th
                .iter()
                .zip(g)
                .map(|(&t, &g)| g + (t * wd + zero))
                .collect();
            let b = match s.get(2) {
                Some(b) => b
                    .iter()
                    .zip(&g)
                    .map(|(&b, &g)| (b * momentum + zero) + g)
                    .collect(),
                None => g,
            };
            let theta: Vec<T> = th
                .iter()
                .zip(&b)
                .map(|(&t, &b)| t - (b * lr + zero))
                .collect();
            (theta, b)
        })?;
        Ok((
            Tensor::from_vec(new_theta, theta.shape(), theta.device())?,
            Tensor::from_vec(new_b, theta.shape(), theta.device())?,
        ))
    }
    let b = b.map(|b| b.contiguous()).transpose()?;
    let hyper = (lr, momentum, wd);
    Ok(match theta.dtype() {
        DType::F64 => run::<f64>(theta, g, b.as_ref(), hyper)?,
        DType::F32 => run::<f32>(theta, g, b.as_ref(), hyper)?,
        dt => {
            return Err(Error::config(
                "sgd",
                format!("f32 or f64 on the CPU, got {dt:?}"),
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sgd_on_the_cpu_matches_the_candle_ops_bit_for_bit() {
        // Reference: the candle-op update of the other devices, written out here (PyTorch's
        // SGD: b = m b + (g + wd theta), theta -= lr b), on f32 values of mixed magnitudes and
        // signs, without and with a momentum buffer; hyperparameters large enough that every
        // product's rounding shows in the sums (a fused multiply-add would not pass).
        let dev = Device::Cpu;
        let vals = |k: f32| -> Tensor {
            let v: Vec<f32> = (0..1000)
                .map(|i| ((i as f32) * k).sin() * 10f32.powi(i % 7 - 3))
                .collect();
            Tensor::from_vec(v, (10, 100), &dev).unwrap()
        };
        let (theta, g, b) = (vals(0.37), vals(1.91), vals(0.05));
        let hyper = (0.7, 0.9, 0.3);
        let reference = |b: Option<&Tensor>| {
            let g = (&g + (&theta * hyper.2).unwrap()).unwrap();
            let b = match b {
                Some(b) => ((b * hyper.1).unwrap() + &g).unwrap(),
                None => g,
            };
            ((&theta - (&b * hyper.0).unwrap()).unwrap(), b)
        };
        for old in [None, Some(&b)] {
            let (t1, b1) = sgd_cpu(&theta, &g, old.cloned(), hyper).unwrap();
            let (t2, b2) = reference(old);
            for (x, y) in [(t1, t2), (b1, b2)] {
                let (x, y) = (x.flatten_all().unwrap(), y.flatten_all().unwrap());
                let bits = |t: Tensor| -> Vec<u32> {
                    t.to_vec1::<f32>()
                        .unwrap()
                        .iter()
                        .map(|v| v.to_bits())
                        .collect()
                };
                assert_eq!(bits(x), bits(y));
            }
        }
    }
}
