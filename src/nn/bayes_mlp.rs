//! Bayes-by-backprop (Blundell et al. 2015): a ReLU MLP whose weights and biases are
//! independent Gaussians `N(mu, softplus(rho)^2)` fitted by the evidence lower bound, and
//! its prior's KL divergence as the [`Classifier::penalty`] the training loss adds.
//!
//! A training forward draws one set of weights per call by the reparameterisation trick
//! (`w = mu + softplus(rho) * eps`, `eps` from the caller's seeded RNG), so the gradient
//! reaches `mu` and `rho`; so does every MC pass (`Mode::Train`), each a sample of the
//! network. An eval forward uses the means. The prior is `N(0, prior_sigma^2)` on every
//! weight and bias, whose KL divergence from the posterior has a closed form: no Monte Carlo
//! estimate of it adds noise to the gradient (Blundell et al.'s scale mixture has none).

use super::classifier::{Classifier, Mode};
use crate::rng::{normal, Rng};
use candle_core::{Result, Tensor};
use candle_nn::{Init, VarBuilder};

/// Configuration of [`BayesMlp`].
#[derive(Debug, Clone, PartialEq)]
pub struct BayesMlpConfig {
    /// Input features.
    pub inputs: usize,
    /// Hidden layer widths.
    pub hidden: Vec<usize>,
    /// Number of classes.
    pub classes: usize,
    /// Standard deviation of the Gaussian prior on every weight and bias.
    pub prior_sigma: f64,
    /// Initial `rho` of every posterior standard deviation (`softplus(rho)`).
    pub rho_init: f64,
}

/// One mean-field Gaussian linear layer: `mu`, `rho` for the weight `(out, in)` and the bias
/// `(out,)`.
struct BayesLinear {
    weight_mu: Tensor,
    weight_rho: Tensor,
    bias_mu: Tensor,
    bias_rho: Tensor,
}

/// Below this `rho`, `softplus(rho)` comes from the series of `ln(1 + x)` in `x = e^rho`:
/// `1 + e^rho` loses `e^rho`'s digits in `f32` (and rounds to 1 past `rho = -16.6`, a
/// standard deviation of exactly 0, whose log is `-inf`).
const SOFTPLUS_TAIL: f64 = -3.0;

/// `softplus(rho) = ln(1 + e^rho)`: `relu(rho) + ln(1 + e^-|rho|)` (a large `rho` does not
/// overflow), and below [`SOFTPLUS_TAIL`] `x - x^2/2 + ... - x^6/6`, `x = e^rho <= 0.05`
/// (truncation below `1e-9` of the value), positive however small.
fn softplus(rho: &Tensor) -> Result<Tensor> {
    let body = (rho.relu()? + ((rho.abs()?.neg()?.exp()? + 1.0)?.log()?))?;
    // The series is taken of rho capped at the tail's edge, so that the branch not chosen
    // stays finite and passes a zero gradient.
    let x = rho.minimum(SOFTPLUS_TAIL)?.exp()?;
    let mut series = x.affine(-1.0 / 6.0, 1.0 / 5.0)?;
    for k in [4.0, 3.0, 2.0] {
        series = (series * &x)?.affine(-1.0, 1.0 / k)?;
    }
    let tail = (&x * (series * &x)?.affine(-1.0, 1.0)?)?;
    rho.lt(SOFTPLUS_TAIL)?.where_cond(&tail, &body)
}

/// The range of a starting `rho`: `softplus` spans standard deviations from `e^-30` to 30.
const RHO_INIT: std::ops::RangeInclusive<f64> = -30.0..=30.0;

/// `mu + softplus(rho) * eps`, `eps ~ N(0, 1)` of `mu`'s shape from `rng`.
fn sample(mu: &Tensor, rho: &Tensor, rng: &mut Rng) -> Result<Tensor> {
    let eps: Vec<f32> = (0..mu.elem_count()).map(|_| normal(rng) as f32).collect();
    let eps = Tensor::from_vec(eps, mu.shape(), mu.device())?.to_dtype(mu.dtype())?;
    mu + softplus(rho)?.mul(&eps)?
}

/// `KL(N(mu, sigma^2) || N(0, prior^2))` summed over the elements:
/// `ln(prior / sigma) + (sigma^2 + mu^2) / (2 prior^2) - 1/2` each.
fn kl(mu: &Tensor, rho: &Tensor, prior: f64) -> Result<Tensor> {
    let sigma = softplus(rho)?;
    let log_ratio = sigma.log()?.neg()?.affine(1.0, prior.ln())?;
    let quad = (sigma.sqr()? + mu.sqr()?)?.affine(0.5 / (prior * prior), -0.5)?;
    (log_ratio + quad)?.sum_all()
}

impl BayesLinear {
    fn new(inputs: usize, outputs: usize, rho_init: f64, vb: VarBuilder) -> Result<Self> {
        // The means start as a plain linear layer's weights would.
        let b = 1.0 / (inputs as f64).sqrt();
        let uniform = Init::Uniform { lo: -b, up: b };
        let rho = Init::Const(rho_init);
        Ok(Self {
            weight_mu: vb.get_with_hints((outputs, inputs), "weight_mu", uniform)?,
            weight_rho: vb.get_with_hints((outputs, inputs), "weight_rho", rho)?,
            bias_mu: vb.get_with_hints(outputs, "bias_mu", uniform)?,
            bias_rho: vb.get_with_hints(outputs, "bias_rho", rho)?,
        })
    }

    /// `x (b, in)` -> `(b, out)`: sampled weights in training mode, the means otherwise.
    fn forward(&self, x: &Tensor, mode: &mut Mode<'_>) -> Result<Tensor> {
        let (w, b) = match mode {
            Mode::Train(rng) => (
                sample(&self.weight_mu, &self.weight_rho, rng)?,
                sample(&self.bias_mu, &self.bias_rho, rng)?,
            ),
            Mode::Eval => (self.weight_mu.clone(), self.bias_mu.clone()),
        };
        x.matmul(&w.t()?)?.broadcast_add(&b)
    }

    fn kl(&self, prior: f64) -> Result<Tensor> {
        kl(&self.weight_mu, &self.weight_rho, prior)? + kl(&self.bias_mu, &self.bias_rho, prior)?
    }
}

/// A Bayes-by-backprop ReLU MLP. Tensor names `fc{i}.{weight,bias}_{mu,rho}`, `i` from 1.
pub struct BayesMlp {
    layers: Vec<BayesLinear>,
    classes: usize,
    prior_sigma: f64,
}

impl BayesMlp {
    /// Builds the network, requesting parameters from `vb`.
    pub fn new(cfg: &BayesMlpConfig, vb: VarBuilder) -> Result<Self> {
        if !(cfg.prior_sigma.is_finite() && cfg.prior_sigma > 0.0) {
            candle_core::bail!("prior_sigma {} is not a positive number", cfg.prior_sigma);
        }
        if !RHO_INIT.contains(&cfg.rho_init) {
            candle_core::bail!("rho_init {} is not in {RHO_INIT:?}", cfg.rho_init);
        }
        let mut widths = vec![cfg.inputs];
        widths.extend(&cfg.hidden);
        widths.push(cfg.classes);
        let layers = widths
            .windows(2)
            .enumerate()
            .map(|(i, w)| BayesLinear::new(w[0], w[1], cfg.rho_init, vb.pp(format!("fc{}", i + 1))))
            .collect::<Result<_>>()?;
        Ok(Self {
            layers,
            classes: cfg.classes,
            prior_sigma: cfg.prior_sigma,
        })
    }
}

impl Classifier for BayesMlp {
    fn forward(&self, x: &Tensor, mode: &mut Mode<'_>) -> Result<Tensor> {
        let mut x = x.flatten_from(1)?;
        let last = self.layers.len() - 1;
        for (i, layer) in self.layers.iter().enumerate() {
            x = layer.forward(&x, mode)?;
            if i < last {
                x = x.relu()?;
            }
        }
        Ok(x)
    }

    fn classes(&self) -> usize {
        self.classes
    }

    /// The KL divergence of the posterior from the prior, summed over every weight and bias.
    fn penalty(&self) -> Result<Option<Tensor>> {
        let mut total = self.layers[0].kl(self.prior_sigma)?;
        for layer in &self.layers[1..] {
            total = (total + layer.kl(self.prior_sigma)?)?;
        }
        Ok(Some(total))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::init::seeded;
    use crate::rng::{stream, Purpose};
    use candle_core::{DType, Device};

    #[test]
    fn kl_matches_the_gaussian_formula_worked_in_f64() {
        // KL(N(mu, s^2) || N(0, p^2)) = ln(p/s) + (s^2 + mu^2)/(2p^2) - 1/2, s = ln(1 + e^rho).
        let mu = [0.3f64, -1.2, 0.0, 2.5];
        let rho = [-3.0f64, 0.5, 40.0, -0.1];
        let p = 0.7;
        let want: f64 = mu
            .iter()
            .zip(&rho)
            .map(|(m, r)| {
                let s = (1.0 + r.exp()).ln();
                (p / s).ln() + (s * s + m * m) / (2.0 * p * p) - 0.5
            })
            .sum();
        let t = |v: &[f64]| Tensor::from_vec(v.to_vec(), 4, &Device::Cpu).unwrap();
        let got = kl(&t(&mu), &t(&rho), p)
            .unwrap()
            .to_scalar::<f64>()
            .unwrap();
        assert!((got - want).abs() < 1e-9 * want.abs(), "{got} vs {want}");
        // At the prior itself the divergence is zero.
        let rho_p = (p.exp_m1()).ln();
        let zero = kl(&t(&[0.0; 4]), &t(&[rho_p; 4]), p).unwrap();
        assert!(zero.to_scalar::<f64>().unwrap().abs() < 1e-12);
    }

    #[test]
    fn training_passes_sample_the_weights_and_eval_uses_their_means() {
        let cfg = BayesMlpConfig {
            inputs: 2,
            hidden: vec![5],
            classes: 3,
            prior_sigma: 1.0,
            rho_init: -1.0,
        };
        let (vb, _) = seeded(stream(1, Purpose::Init, 0), DType::F32, &Device::Cpu);
        let m = BayesMlp::new(&cfg, vb).unwrap();
        let x = Tensor::new(&[[0.5f32, -1.0], [2.0, 0.25]], &Device::Cpu).unwrap();
        let eval = m.forward(&x, &mut Mode::Eval).unwrap();
        // By hand from the means: relu(x W1^T + b1) W2^T + b2.
        let v2 = |t: &Tensor| t.to_vec2::<f32>().unwrap();
        let v1 = |t: &Tensor| t.to_vec1::<f32>().unwrap();
        let (w1, b1) = (v2(&m.layers[0].weight_mu), v1(&m.layers[0].bias_mu));
        let (w2, b2) = (v2(&m.layers[1].weight_mu), v1(&m.layers[1].bias_mu));
        for (row, got) in v2(&x).iter().zip(v2(&eval)) {
            let h: Vec<f32> = (0..5)
                .map(|j| (b1[j] + w1[j][0] * row[0] + w1[j][1] * row[1]).max(0.0))
                .collect();
            for k in 0..3 {
                let want = b2[k] + (0..5).map(|j| w2[k][j] * h[j]).sum::<f32>();
                assert!((got[k] - want).abs() < 1e-5, "{} vs {want}", got[k]);
            }
        }
        let mut rng = stream(2, Purpose::Train, 0);
        let a = m.forward(&x, &mut Mode::Train(&mut rng)).unwrap();
        let b = m.forward(&x, &mut Mode::Train(&mut rng)).unwrap();
        assert_ne!(a.to_vec2::<f32>().unwrap(), b.to_vec2::<f32>().unwrap());
        // The same stream, the same draws.
        let mut again = stream(2, Purpose::Train, 0);
        let a2 = m.forward(&x, &mut Mode::Train(&mut again)).unwrap();
        assert_eq!(a.to_vec2::<f32>().unwrap(), a2.to_vec2::<f32>().unwrap());
        for bad in [
            BayesMlpConfig {
                prior_sigma: 0.0,
                ..cfg.clone()
            },
            BayesMlpConfig {
                rho_init: f64::NAN,
                ..cfg.clone()
            },
            BayesMlpConfig {
                rho_init: -40.0,
                ..cfg
            },
        ] {
            let vb = seeded(stream(1, Purpose::Init, 0), DType::F32, &Device::Cpu).0;
            assert!(BayesMlp::new(&bad, vb).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn tiny_standard_deviations_stay_positive_in_f32() {
        // At rho = -20, 1 + e^rho rounds to 1 in f32: the tail form keeps sigma = e^-20 and
        // the KL divergence finite.
        let rho = Tensor::new(&[-20f32, -3.5, -2.5, 0.0, 30.0], &Device::Cpu).unwrap();
        let s = softplus(&rho).unwrap().to_vec1::<f32>().unwrap();
        for (got, r) in s.iter().zip([-20f64, -3.5, -2.5, 0.0, 30.0]) {
            let want = r.exp().ln_1p();
            assert!(
                ((f64::from(*got) - want) / want).abs() < 1e-5,
                "rho {r}: {got} vs {want}"
            );
        }
        let mu = Tensor::zeros(5, DType::F32, &Device::Cpu).unwrap();
        let k = kl(&mu, &rho, 1.0).unwrap().to_scalar::<f32>().unwrap();
        assert!(k.is_finite(), "{k}");
    }
}
