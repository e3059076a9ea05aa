//! Gaussian heads for regression ([`GaussMlp`]): inputs to a mean and a variance per output,
//! the [`Regressor`] trait a regression model implements, and the Gaussian negative
//! log-likelihood it is trained by ([`GaussLoss`]).
//!
//! The last linear layer gives `2k` values per item: `k` means and `k` raw variances, mapped
//! to `softplus(raw) + 1e-6` (Lakshminarayanan et al. 2017's parametrisation: positive, and
//! linear rather than exponential for large raw values, which keeps early training stable).

use super::classifier::Mode;
use super::layers::{dropout, linear};
use alkit_acquisition::BaseKernel;
use candle_core::{Module, Result, Tensor, D};
use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

/// The smallest variance a head predicts, in standardised units.
pub const MIN_VARIANCE: f64 = 1e-6;

/// A regression model: inputs `(b, *item_shape)` to Gaussian means and variances.
pub trait Regressor: Send + Sync {
    /// Means `(b, k)` and variances `(b, k)`, differentiable w.r.t. the parameters.
    fn forward(&self, x: &Tensor, mode: &mut Mode<'_>) -> Result<(Tensor, Tensor)>;
    /// Outputs `k`.
    fn outputs(&self) -> usize;
    /// Whether the model has dropout to draw MC-dropout passes with.
    fn has_dropout(&self) -> bool;
    /// The factors of the gradient of the summed means w.r.t. each linear layer's weights and
    /// bias, first layer first (only the last layer for [`BaseKernel::LastLayer`]), in eval
    /// mode: the layer's inputs with a 1 appended `(b, in + 1)` and the gradient w.r.t. its
    /// outputs `(b, out)`; an item's gradient for the layer is their outer product. The
    /// kernel selectors' features are built from them (see
    /// [`grad_features`](fn@crate::nn::grad_features)).
    fn mean_grad_factors(&self, x: &Tensor, base: BaseKernel) -> Result<Vec<(Tensor, Tensor)>>;
}

/// Configuration of [`GaussMlp`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GaussMlpConfig {
    /// Input features.
    pub inputs: usize,
    /// Hidden layer widths (none: a linear head).
    pub hidden: Vec<usize>,
    /// Outputs `k`.
    pub outputs: usize,
    /// Dropout after each hidden layer (0 = none).
    pub dropout: f32,
}

/// A ReLU MLP with a Gaussian head: tensor names `fc{i}.weight (out, in)` and
/// `fc{i}.bias (out)`, `i` from 1; the last layer has `2k` outputs (means, raw variances).
pub struct GaussMlp {
    layers: Vec<candle_nn::Linear>,
    dropout: f32,
    outputs: usize,
}

impl GaussMlp {
    /// Builds the network, requesting parameters from `vb`.
    pub fn new(cfg: &GaussMlpConfig, vb: VarBuilder) -> Result<Self> {
        let mut widths = vec![cfg.inputs];
        widths.extend(&cfg.hidden);
        widths.push(2 * cfg.outputs);
        let layers = widths
            .windows(2)
            .enumerate()
            .map(|(i, w)| linear(w[0], w[1], vb.pp(format!("fc{}", i + 1))))
            .collect::<Result<_>>()?;
        Ok(Self {
            layers,
            dropout: cfg.dropout,
            outputs: cfg.outputs,
        })
    }
}

impl Regressor for GaussMlp {
    fn forward(&self, x: &Tensor, mode: &mut Mode<'_>) -> Result<(Tensor, Tensor)> {
        let mut h = x.flatten_from(1)?;
        let last = self.layers.len() - 1;
        for (i, layer) in self.layers.iter().enumerate() {
            h = layer.forward(&h)?;
            if i < last {
                h = h.relu()?;
                if let Mode::Train(rng) = mode {
                    h = dropout(&h, self.dropout, rng)?;
                }
            }
        }
        let k = self.outputs;
        let mean = h.narrow(1, 0, k)?;
        let var = (softplus(&h.narrow(1, k, k)?)? + MIN_VARIANCE)?;
        Ok((mean, var))
    }
    fn outputs(&self) -> usize {
        self.outputs
    }
    fn has_dropout(&self) -> bool {
        self.dropout > 0.0 && self.layers.len() > 1
    }

    fn mean_grad_factors(&self, x: &Tensor, base: BaseKernel) -> Result<Vec<(Tensor, Tensor)>> {
        let last = self.layers.len() - 1;
        let (mut inputs, mut pre) = (Vec::new(), Vec::new());
        let mut h = x.flatten_from(1)?;
        for (i, layer) in self.layers.iter().enumerate() {
            let z = layer.forward(&h)?;
            inputs.push(h);
            h = if i < last { z.relu()? } else { z.clone() };
            pre.push(z);
        }
        // Only the mean outputs reach the summed means: the variance rows' gradient is zero.
        let k = self.outputs;
        let mut delta = Tensor::ones((x.dim(0)?, k), x.dtype(), x.device())?;
        let mut weight = self.layers[last].weight().narrow(0, 0, k)?;
        let first = match base {
            BaseKernel::LastLayer => last,
            BaseKernel::Grad => 0,
        };
        let mut factors = vec![(with_one(&inputs[last])?, delta.clone())];
        for l in (first..last).rev() {
            let active = pre[l].gt(0.0)?.to_dtype(delta.dtype())?;
            delta = delta.matmul(&weight)?.mul(&active)?;
            factors.push((with_one(&inputs[l])?, delta.clone()));
            weight = self.layers[l].weight().clone();
        }
        factors.reverse();
        Ok(factors)
    }
}

/// `x (b, n)` with a column of ones appended `(b, n + 1)`: a layer's input as its bias sees it.
fn with_one(x: &Tensor) -> Result<Tensor> {
    let ones = Tensor::ones((x.dim(0)?, 1), x.dtype(), x.device())?;
    Tensor::cat(&[x, &ones], D::Minus1)
}

/// `ln(1 + e^x)`, computed as `max(x, 0) + ln(1 + e^-|x|)` so that neither side overflows.
fn softplus(x: &Tensor) -> Result<Tensor> {
    let pos = x.relu()?;
    let tail = (x.abs()?.neg()?.exp()? + 1.0)?.log()?;
    pos + tail
}

/// The loss a Gaussian head is trained by.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GaussLoss {
    /// Mean Gaussian negative log-likelihood `0.5 (ln s^2 + (y - mu)^2 / s^2)` (constant
    /// dropped).
    Nll,
    /// beta-NLL (Seitzer et al. 2022): each item's NLL weighted by its own variance to the
    /// power `beta`, the weight held constant in the gradient. `beta = 0.5` is the paper's
    /// recommendation; it stops the NLL from giving up on the mean where the variance is large.
    BetaNll {
        /// The exponent, in `[0, 1]` (0 is the NLL, 1 weighs the mean's gradient as MSE does).
        beta: f64,
    },
}

impl GaussLoss {
    /// The loss of means and variances `(b, k)` at standardised targets `(b, k)`.
    pub fn loss(&self, mean: &Tensor, var: &Tensor, y: &Tensor) -> Result<Tensor> {
        let per = ((var.log()? + (y - mean)?.sqr()?.div(var)?)? * 0.5)?;
        match *self {
            GaussLoss::Nll => per.mean_all(),
            GaussLoss::BetaNll { beta } => per.mul(&var.detach().powf(beta)?)?.mean_all(),
        }
    }
}
