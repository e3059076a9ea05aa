//! Batched inference: log-probabilities, evidence for scorers, and test metrics.

use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::nn::layers::log_probs;
use crate::nn::Classifier;
use crate::observe::{Control, Event, Observer};
use alkit_acquisition::{Evidence, Needs, Probs};
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

/// The evidence `needs` asks for, for `data[indices]`.
pub fn evidence(
    model: &dyn Classifier,
    data: &Dataset,
    indices: &[usize],
    needs: Needs,
    batch: usize,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<Evidence> {
    let mut ev = Evidence::default();
    if needs.probs {
        let lp = log_probs_of(model, data, indices, batch, device, observer)?;
        ev.probs = Some(probs_from_log(&lp, model.classes())?);
    }
    Ok(ev)
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
