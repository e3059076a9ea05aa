//! Batched inference: log-probabilities, evidence for scorers (probabilities and gradient
//! norms), and test metrics.

use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::nn::gradnorm::autograd_grad_norms;
use crate::nn::init::Params;
use crate::nn::layers::log_probs;
use crate::nn::Classifier;
use crate::observe::{Control, Event, Observer};
use crate::rng::{normal, Rng};
use alkit_acquisition::{Evidence, GradNorms, GradRequest, Needs, Probs};
use candle_core::{DType, Device};

/// Log-probabilities `(n, c)` row-major for `data[indices]`, in batches of `batch`.
pub fn log_probs_of(
    model: &dyn Classifier,
    data: &Dataset,
    indices: &[usize],
    batch: usize,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<Vec<f32>> {
    let mut out = Vec::with_capacity(indices.len() * model.classes());
    for chunk in indices.chunks(batch.max(1)) {
        let x = data.batch(chunk, device)?;
        let lp = log_probs(&model.predict(&x)?)?;
        out.extend(lp.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?);
        let ev = Event::Scoring {
            done: out.len() / model.classes(),
            total: indices.len(),
        };
        if observer.on(&ev) == Control::Stop {
            return Err(Error::Interrupted);
        }
    }
    Ok(out)
}

/// Probabilities from log-probabilities, each row renormalised in `f64` so that it sums to 1
/// to float precision.
pub fn probs_from_log(log_probs: &[f32], classes: usize) -> Result<Probs> {
    let n = log_probs.len() / classes;
    let mut p = Vec::with_capacity(log_probs.len());
    for row in log_probs.chunks_exact(classes) {
        let e: Vec<f64> = row.iter().map(|&l| f64::from(l).exp()).collect();
        let s: f64 = e.iter().sum();
        p.extend(e.iter().map(|v| (v / s) as f32));
    }
    Ok(Probs::new(p, n, classes)?)
}

/// What producing evidence needs besides the data: the model, its parameters (for the
/// autograd fallback of gradient evidence), the inputs' per-channel standard deviation (so
/// that perturbation noise is applied on the `[0, 1]` scale of the raw inputs), batch size and
/// device.
pub struct Scoring<'a> {
    /// The trained model.
    pub model: &'a dyn Classifier,
    /// Its `Var`-backed parameters, for models without a gradient fast path.
    pub params: Option<&'a Params>,
    /// Per-channel standard deviation of the normaliser (`(c,)`).
    pub input_std: &'a [f32],
    /// Candidates per batch.
    pub batch: usize,
    /// Where tensors live.
    pub device: &'a Device,
}

impl Scoring<'_> {
    /// The evidence `needs` asks for, for `data[indices]` (features normalised). `rng` draws
    /// the perturbation noise of gradient requests with `perturbations > 0`.
    pub fn evidence(
        &self,
        data: &Dataset,
        indices: &[usize],
        needs: Needs,
        rng: &mut Rng,
        observer: &mut dyn Observer,
    ) -> Result<Evidence> {
        let mut ev = Evidence::default();
        if needs.probs || needs.grads.is_some() {
            let lp = log_probs_of(self.model, data, indices, self.batch, self.device, observer)?;
            ev.probs = Some(probs_from_log(&lp, self.model.classes())?);
        }
        if let Some(req) = needs.grads {
            ev.grads = Some(self.grad_norms(data, indices, req, rng, observer)?);
        }
        Ok(ev)
    }

    fn grad_norms(
        &self,
        data: &Dataset,
        indices: &[usize],
        req: GradRequest,
        rng: &mut Rng,
        observer: &mut dyn Observer,
    ) -> Result<GradNorms> {
        let copies = req.perturbations + 1;
        let d = data.item_len();
        let ch = data.item_shape()[0];
        let per_ch = d / ch;
        if self.input_std.len() != ch {
            return Err(Error::config(
                "input_std",
                format!("{} values for {ch} channels", self.input_std.len()),
            ));
        }
        let fallback: Option<Vec<(String, candle_core::Tensor)>> = self.params.map(|p| {
            p.named()
                .into_iter()
                .map(|(n, v)| (n, v.as_tensor().clone()))
                .collect()
        });
        let (mut sq, mut kl, mut shape) = (Vec::new(), Vec::new(), (0, 0));
        let mut done = 0;
        for chunk in indices.chunks(self.batch.clamp(1, 256)) {
            let mut buf = Vec::with_capacity(chunk.len() * copies * d);
            for &i in chunk {
                let x = data.item(i);
                buf.extend_from_slice(x);
                for _ in 1..copies {
                    for (j, &v) in x.iter().enumerate() {
                        let s = f64::from(req.sigma) / f64::from(self.input_std[j / per_ch]);
                        buf.push(v + (s * normal(rng)) as f32);
                    }
                }
            }
            let mut shp = vec![chunk.len() * copies];
            shp.extend_from_slice(data.item_shape());
            let x = candle_core::Tensor::from_vec(buf, shp, self.device)?;
            let out = match self.model.grad_norms(&x, copies, req.expected)? {
                Some(o) => o,
                None => match &fallback {
                    Some(p) => autograd_grad_norms(self.model, p, &x, copies, req.expected)?,
                    None => {
                        return Err(Error::config(
                            "model",
                            "gradient scorers need a model with a gradient fast path or Var-backed parameters",
                        ))
                    }
                },
            };
            shape = (out.rows, out.layers);
            sq.extend(out.sq.iter().map(|&v| v as f32));
            kl.extend(out.kl_l1.iter().map(|&v| v as f32));
            done += chunk.len();
            if observer.on(&Event::Scoring {
                done,
                total: indices.len(),
            }) == Control::Stop
            {
                return Err(Error::Interrupted);
            }
        }
        Ok(GradNorms::new(
            sq,
            indices.len(),
            self.model.classes(),
            shape.0,
            shape.1,
            kl,
        )?)
    }
}

/// Test accuracy and NLL (mean `-log p(true class)`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TestMetrics {
    /// Fraction of items whose argmax is the true class.
    pub acc: f64,
    /// Mean negative log-likelihood of the true class, nats.
    pub nll: f64,
}

/// Accuracy and NLL of `model` on all of `data`.
pub fn evaluate(
    model: &dyn Classifier,
    data: &Dataset,
    batch: usize,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<TestMetrics> {
    let all: Vec<usize> = (0..data.len()).collect();
    let lp = log_probs_of(model, data, &all, batch, device, observer)?;
    Ok(metrics_from_log_probs(&lp, data.labels(), model.classes()))
}

/// Accuracy and NLL from log-probabilities `(n, c)` and labels `(n,)`. Ties in the argmax go to
/// the lowest class.
pub fn metrics_from_log_probs(log_probs: &[f32], labels: &[u32], classes: usize) -> TestMetrics {
    let mut correct = 0usize;
    let mut nll = 0f64;
    for (row, &y) in log_probs.chunks_exact(classes).zip(labels) {
        let arg = row
            .iter()
            .enumerate()
            .fold(0, |best, (i, &v)| if v > row[best] { i } else { best });
        correct += usize::from(arg == y as usize);
        nll -= f64::from(row[y as usize]);
    }
    let n = labels.len().max(1) as f64;
    TestMetrics {
        acc: correct as f64 / n,
        nll: nll / n,
    }
}
