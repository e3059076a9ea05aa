//! Batched inference: log-probabilities, evidence for scorers (probabilities and gradient
//! norms), a regression model's Gaussian predictions, a multi-label model's label
//! probabilities, and test metrics.

use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::nn::gradnorm::autograd_grad_norms;
use crate::nn::init::Weights;
use crate::nn::layers::log_probs;
use crate::nn::{
    grad_features, grad_norms, kernel_values, last_layer, mc_dropout_logits, member_logits,
    Classifier, GradSketch, Mode, Regressor, MAX_EXACT_FEATURES,
};
use crate::observe::{check, Event, Observer};
use crate::rng::{normal, Rng};
use crate::train::{ModelBuilder, Trained};
use alkit_acquisition::{
    Evidence, FeatureRequest, Features, Gaussian, GradLayers, GradNorms, GradRequest, Kernel,
    KernelFeatures, LabelProbs, Needs, Probs, Reference, SampleRequest, Samples,
};
use candle_core::{DType, Device};
use std::sync::Arc;

/// `chunk` filled up to exactly `batch` rows with copies of its last item. Every batch runs at
/// `batch` rows and the extra rows are dropped, because candle's CPU matmul picks its kernel
/// by the number of rows, and small batches round differently: an item's scores then never
/// depend on which items share its batch, so streamed, sharded and subsampled runs agree with
/// a whole-pool run to the bit. Costs at most one batch per call.
pub(crate) fn full_batch(chunk: &[usize], batch: usize) -> std::borrow::Cow<'_, [usize]> {
    match chunk.last() {
        Some(&last) if chunk.len() < batch => {
            let mut v = chunk.to_vec();
            v.resize(batch, last);
            std::borrow::Cow::Owned(v)
        }
        _ => std::borrow::Cow::Borrowed(chunk),
    }
}

/// The inference batch when none is asked for: 512 items, fewer for large items (the largest
/// power of two with at most 2^22 input values per batch: 16 photos of 3x224x224), because
/// a batch may run at its full size (a partial one padded, see [`log_probs_of`]) and a
/// ResNet's activations grow with the batch's values.
pub fn default_batch(item_len: usize) -> usize {
    let fit = (1usize << 22) / item_len.max(1);
    let pow2 = if fit == 0 { 1 } else { 1 << fit.ilog2() };
    pow2.clamp(1, 512)
}

/// The rows `rows_of` gives for `data[indices]`, row-major `f32`, run in batches of `batch`
/// rows; with `pad`, a partial batch is filled with copies of its last item by
/// [`full_batch`] (the extra rows dropped), so that an item's result never depends on which
/// items share its batch (a model whose rows are independent, see
/// [`Classifier::independent_rows`], needs no filling). Progress is reported after each
/// batch.
fn full_batch_rows(
    data: &Dataset,
    indices: &[usize],
    (batch, pad): (usize, bool),
    device: &Device,
    observer: &mut dyn Observer,
    mut rows_of: impl FnMut(&candle_core::Tensor) -> Result<candle_core::Tensor>,
) -> Result<Vec<f32>> {
    let batch = batch.max(1);
    let mut out = Vec::new();
    let mut done = 0;
    for chunk in indices.chunks(batch) {
        let rows = if pad {
            full_batch(chunk, batch)
        } else {
            std::borrow::Cow::Borrowed(chunk)
        };
        let v = rows_of(&data.batch(&rows, device)?)?
            .to_dtype(DType::F32)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        let width = v.len() / rows.len();
        out.extend_from_slice(&v[..chunk.len() * width]);
        done += chunk.len();
        scored(observer, done, indices.len())?;
    }
    Ok(out)
}

/// Log-probabilities `(n, c)` row-major for `data[indices]`, in batches of `batch` rows (a
/// partial batch filled with copies of its last item, the extra rows dropped, unless the
/// model's rows are independent), so that an item's result never depends on which items
/// share its batch.
pub fn log_probs_of(
    model: &dyn Classifier,
    data: &Dataset,
    indices: &[usize],
    batch: usize,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<Vec<f32>> {
    let pad = !model.independent_rows(device);
    full_batch_rows(data, indices, (batch, pad), device, observer, |x| {
        Ok(log_probs(&model.predict(x)?)?)
    })
}

/// Reports `done` of `total` items scored; `Err(Interrupted)` when the observer stops.
fn scored(observer: &mut dyn Observer, done: usize, total: usize) -> Result<()> {
    check(observer, &Event::Scoring { done, total })
}

/// Penultimate features `(n, d)` and the last layer of `data[indices]` (from the model's
/// [`crate::nn::last_layer`]), in batches of `batch` rows as [`log_probs_of`] runs them
/// (filled up unless the model's rows are independent), so an item's features never depend
/// on which items share its batch.
pub fn features_of(
    model: &dyn Classifier,
    data: &Dataset,
    indices: &[usize],
    batch: usize,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<Features> {
    let mut layer: Option<(usize, Vec<f32>, Vec<f32>)> = None;
    let flat = |t: &candle_core::Tensor| -> Result<Vec<f32>> {
        Ok(t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?)
    };
    let pad = !model.independent_rows(device);
    let h = full_batch_rows(data, indices, (batch, pad), device, observer, |x| {
        let got = last_layer(model, x)?.ok_or_else(|| {
            Error::config(
                "layers",
                "this model gives no penultimate features and last linear layer (a DUQ \
                 model, an ensemble, or a model that does not offer them); last-layer \
                 scores, embeddings and feature-space selectors need one",
            )
        })?;
        if layer.is_none() {
            layer = Some((got.h.dims2()?.1, flat(&got.w)?, flat(&got.b)?));
        }
        Ok(got.h)
    })?;
    let (d, w, b) = match layer {
        Some(l) => l,
        None => {
            // No candidate: a one-wide layer of the model's classes keeps the shapes valid.
            let c = model.classes();
            (1, vec![0.0; c], vec![0.0; c])
        }
    };
    Ok(Features::new(h, indices.len(), d, w, b)?)
}

/// The reference evidence of `data[indices]` through `model`: their penultimate features and
/// last layer ([`features_of`]) and their labels. A round passes its labeled items, an
/// evaluation the training split; with no index it is empty (a cold start).
pub fn reference_of(
    model: &dyn Classifier,
    data: &Dataset,
    indices: &[usize],
    batch: usize,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<Reference> {
    let features = features_of(model, data, indices, batch, device, observer)?;
    let features = if indices.is_empty() {
        // The feature dimension is unknown without a forward pass: ask with one item when
        // there is one, so that an empty reference still carries the right shapes.
        match data.len() {
            0 => features,
            _ => {
                let one = features_of(model, data, &[0], batch, device, observer)?;
                Features::new(
                    vec![],
                    0,
                    one.dim(),
                    one.weight().to_vec(),
                    one.bias().to_vec(),
                )?
            }
        }
    } else {
        features
    };
    let labels = indices.iter().map(|&i| data.labels()[i] as usize).collect();
    Ok(Reference::new(features, labels)?)
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
    /// Its `Var`-backed parameters, for models without a gradient fast path and for
    /// weight-noise samples.
    pub params: Option<&'a Weights>,
    /// What built the model, to rebuild it with perturbed weights (weight-noise samples).
    pub builder: Option<&'a dyn ModelBuilder>,
    /// Per-channel standard deviation of the normaliser (`(c,)`).
    pub input_std: &'a [f32],
    /// Candidates per batch.
    pub batch: usize,
    /// Where tensors live.
    pub device: &'a Device,
    /// The features and labels of what the model was trained on (the labeled set in a
    /// round, the training split in an evaluation), for the scores and selectors that ask
    /// for them ([`Needs::reference`]); [`reference_of`] makes one.
    pub reference: Option<Arc<Reference>>,
}

impl<'a> Scoring<'a> {
    /// Scoring through a model [`crate::train::train`] just trained from `builder`: its
    /// gradients through its parameters, perturbation scorers rebuilding it from `builder`,
    /// except for an ensemble (`ensemble = Some(_)`), whose members one builder cannot rebuild.
    pub fn of_trained(
        trained: &'a Trained,
        builder: &'a dyn ModelBuilder,
        ensemble: Option<usize>,
        input_std: &'a [f32],
        batch: usize,
        device: &'a Device,
    ) -> Self {
        Scoring {
            model: trained.model.as_ref(),
            params: Some(&trained.params),
            builder: ensemble.is_none().then_some(builder),
            input_std,
            batch,
            device,
            reference: None,
        }
    }
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
        let last = needs.grads.is_some_and(|g| g.layers == GradLayers::Last);
        if needs.features || last {
            ev.features = Some(features_of(
                self.model,
                data,
                indices,
                self.batch,
                self.device,
                observer,
            )?);
        }
        match (needs.grads, &ev.features, &ev.probs) {
            (Some(req), Some(f), Some(p)) if last => {
                if req.perturbations > 0 {
                    return Err(Error::config(
                        "layers",
                        "last-layer gradients are taken at the item itself; regrad-star \
                         perturbs the input and needs every layer (setting `layers` all)",
                    ));
                }
                ev.grads = Some(f.last_layer_grads(p, req.expected)?);
            }
            (Some(req), ..) => {
                ev.grads = Some(self.grad_norms(data, indices, req, rng, observer)?);
            }
            (None, ..) => {}
        }
        if !needs.features {
            ev.features = None;
        }
        if needs.reference {
            ev.reference = Some(self.reference.clone().ok_or_else(|| {
                Error::config(
                    "scorer",
                    "this score compares candidates with the items the model was trained on, \
                     and none were given here (an evaluation reads the data's train split, an \
                     acquisition round its labeled items)",
                )
            })?);
        }
        if let Some(req) = needs.samples {
            // Callers check their settings first, naming them; this catches every other
            // caller before the draws grow.
            crate::limits::evidence(
                "sample scorer",
                &needs,
                indices.len(),
                self.model.classes(),
                None,
                None,
                "the candidates scored at once",
            )?;
            ev.samples = Some(self.samples(data, indices, req, rng, observer)?);
        }
        if needs.kernel {
            let k = full_batch_rows(
                data,
                indices,
                (self.batch, true),
                self.device,
                observer,
                |x| {
                    kernel_values(self.model, x)?.ok_or_else(|| {
                        Error::config(
                            "scorer",
                            "`duq` needs a DUQ model (model `duq`, setting `model`)",
                        )
                    })
                },
            )?;
            ev.kernel = Some(Kernel::new(k, indices.len(), self.model.classes())?);
        }
        Ok(ev)
    }

    /// `x + eps`, `eps ~ N(0, sigma^2)` per value on the `[0, 1]` scale (divided by the
    /// channel's normalisation std), for `data[ids]` repeated `copies` times per item, copy 0
    /// unperturbed when `keep_first`.
    fn noisy_batch(
        &self,
        data: &Dataset,
        ids: &[usize],
        sigma: f32,
        copies: usize,
        keep_first: bool,
        rng: &mut Rng,
    ) -> Result<candle_core::Tensor> {
        let d = data.item_len();
        let per_ch = d / data.item_shape()[0];
        let mut buf = Vec::with_capacity(ids.len() * copies * d);
        for &i in ids {
            let x = data.item(i);
            for c in 0..copies {
                if c == 0 && keep_first {
                    buf.extend_from_slice(x);
                    continue;
                }
                for (j, &v) in x.iter().enumerate() {
                    let s = f64::from(sigma) / f64::from(self.input_std[j / per_ch]);
                    buf.push(v + (s * normal(rng)) as f32);
                }
            }
        }
        let mut shp = vec![ids.len() * copies];
        shp.extend_from_slice(data.item_shape());
        Ok(candle_core::Tensor::from_vec(buf, shp, self.device)?)
    }

    /// Runs `logits_of` on each chunk of `indices` (one logits tensor `(b, c)` per draw) and
    /// collects each draw's log-probabilities `(n, c)`, reporting progress. With `full`, each
    /// chunk runs as a [`full_batch`] (for draws that take nothing from the RNG, whose
    /// stream would otherwise shift with the extra rows).
    fn draw_chunks(
        &self,
        indices: &[usize],
        full: bool,
        observer: &mut dyn Observer,
        mut logits_of: impl FnMut(&[usize]) -> Result<Vec<candle_core::Tensor>>,
    ) -> Result<Vec<Vec<f32>>> {
        let mut draws: Vec<Vec<f32>> = Vec::new();
        let mut done = 0;
        let c = self.model.classes();
        for chunk in indices.chunks(self.batch.max(1)) {
            let rows = if full {
                full_batch(chunk, self.batch.max(1))
            } else {
                std::borrow::Cow::Borrowed(chunk)
            };
            let logits = logits_of(&rows)?;
            // Each draw's whole size at once (the caller checked it fits): growing by
            // doubling would briefly hold up to twice the draws.
            while draws.len() < logits.len() {
                draws.push(Vec::with_capacity(indices.len() * c));
            }
            for (draw, l) in draws.iter_mut().zip(logits) {
                let lp = log_probs(&l)?
                    .to_dtype(DType::F32)?
                    .flatten_all()?
                    .to_vec1::<f32>()?;
                draw.extend_from_slice(&lp[..chunk.len() * c]);
            }
            done += chunk.len();
            scored(observer, done, indices.len())?;
        }
        Ok(draws)
    }

    /// `samples` draws of log-probabilities, each from the model rebuilt with its weights
    /// perturbed by Gaussian noise of `sigma` (the model's parameters and builder needed).
    fn weight_noise_draws(
        &self,
        data: &Dataset,
        indices: &[usize],
        (sigma, samples): (f32, usize),
        rng: &mut Rng,
        observer: &mut dyn Observer,
    ) -> Result<Vec<Vec<f32>>> {
        let (Some(params), Some(builder)) = (self.params, self.builder) else {
            return Err(Error::config(
                "model",
                "weight-noise samples need the model's parameters and builder",
            ));
        };
        let mut draws = Vec::with_capacity(samples.max(1));
        for _ in 0..samples.max(1) {
            let mut noisy = std::collections::HashMap::new();
            for (name, var) in params.named() {
                let t = var.as_tensor();
                let eps: Vec<f32> = (0..t.elem_count())
                    .map(|_| (f64::from(sigma) * normal(rng)) as f32)
                    .collect();
                let eps = candle_core::Tensor::from_vec(eps, t.shape(), t.device())?
                    .to_dtype(t.dtype())?;
                noisy.insert(name, (t.detach() + eps)?);
            }
            let model = builder.build(candle_nn::VarBuilder::from_tensors(
                noisy,
                DType::F32,
                self.device,
            ))?;
            draws.push(log_probs_of(
                model.as_ref(),
                data,
                indices,
                self.batch,
                self.device,
                observer,
            )?);
        }
        Ok(draws)
    }

    fn samples(
        &self,
        data: &Dataset,
        indices: &[usize],
        req: SampleRequest,
        rng: &mut Rng,
        observer: &mut dyn Observer,
    ) -> Result<Samples> {
        let c = self.model.classes();
        let draws: Vec<Vec<f32>> = match req {
            SampleRequest::InputNoise { sigma, samples } => {
                self.draw_chunks(indices, false, observer, |chunk| {
                    (0..samples.max(1))
                        .map(|_| {
                            let x = self.noisy_batch(data, chunk, sigma, 1, false, rng)?;
                            Ok(self.model.predict(&x)?)
                        })
                        .collect()
                })?
            }
            SampleRequest::WeightNoise { sigma, samples } => {
                self.weight_noise_draws(data, indices, (sigma, samples), rng, observer)?
            }
            SampleRequest::McDropout { samples } => {
                let draws = self.draw_chunks(indices, false, observer, |chunk| {
                    Ok(mc_dropout_logits(
                        self.model,
                        &data.batch(chunk, self.device)?,
                        samples.max(1),
                        rng,
                    )?)
                })?;
                // Identical draws mean no dropout is active (a model without dropout, or at
                // p = 0): the sample scores would be 0 or rounding noise, and a selection on
                // them arbitrary.
                if samples > 1 && draws.windows(2).all(|w| w[0] == w[1]) {
                    return Err(Error::config(
                        "scorer",
                        "MC-dropout draws are all identical: this model has no active dropout; \
                         bald, batchbald, mc-entropy, class-variance, variation-ratio and \
                         mc-max-prob need a model with dropout (the standard CNN) or an \
                         ensemble (setting `ensemble`)",
                    ));
                }
                draws
            }
            SampleRequest::Members => {
                self.draw_chunks(indices, true, observer, |chunk| {
                    member_logits(self.model, &data.batch(chunk, self.device)?)?.ok_or_else(|| {
                        Error::config(
                            "ensemble",
                            "member samples need an ensemble model (setting `ensemble`, e.g. 5 members)",
                        )
                    })
                })?
            }
            SampleRequest::Adversarial { epsilon, samples } => {
                self.adversarial_draws(data, indices, (epsilon, samples), observer)?
            }
            SampleRequest::InsertedDropout { rate, samples } => {
                let f = features_of(self.model, data, indices, self.batch, self.device, observer)?;
                return Ok(alkit_acquisition::inserted_dropout_draws(
                    &f, rate, samples, rng,
                )?);
            }
            SampleRequest::Laplace { samples, laplace } => {
                return self.laplace_draws(data, indices, (samples, laplace), rng, observer);
            }
            other => {
                return Err(Error::config(
                    "samples",
                    format!("{other:?} is not supported by this model side"),
                ))
            }
        };
        // Each draw's log-probabilities are freed as its probabilities are made, so the
        // draws are held once, not twice.
        let probs = draws
            .into_iter()
            .map(|lp| probs_from_log(&lp, c))
            .collect::<Result<Vec<_>>>()?;
        Ok(Samples::new(probs)?)
    }

    /// MC-AA's draws: the logits at `x + eps_t sign(g) / std` for `eps_t` evenly spread over
    /// `[-epsilon, epsilon]` (`samples >= 2` of them), `g` the input gradient of the
    /// cross-entropy at the predicted class and `std` each channel's normalisation, so that
    /// `eps` is on the `[0, 1]` input scale. No randomness: full batches, so that an item's
    /// draws never depend on the others in its batch.
    fn adversarial_draws(
        &self,
        data: &Dataset,
        indices: &[usize],
        (epsilon, samples): (f32, usize),
        observer: &mut dyn Observer,
    ) -> Result<Vec<Vec<f32>>> {
        if samples < 2 {
            return Err(Error::config(
                "mcaa_samples",
                "MC-AA needs at least 2 perturbation sizes (one is the item itself)",
            ));
        }
        let shape = data.item_shape();
        let per_ch = data.item_len() / shape[0];
        let inv_std: Vec<f32> = (0..data.item_len())
            .map(|j| 1.0 / self.input_std[j / per_ch])
            .collect();
        let inv_std = candle_core::Tensor::from_vec(inv_std, shape, self.device)?.unsqueeze(0)?;
        self.draw_chunks(indices, true, observer, |chunk| {
            let x = data.batch(chunk, self.device)?;
            let step =
                crate::nn::input_grad::loss_grad_sign(self.model, &x)?.broadcast_mul(&inv_std)?;
            (0..samples)
                .map(|t| {
                    let eps = f64::from(epsilon) * (2.0 * t as f64 / (samples - 1) as f64 - 1.0);
                    Ok(self.model.predict(&(&x + (&step * eps)?)?)?)
                })
                .collect()
        })
    }

    /// `samples` weight draws of the last-layer Laplace posterior fitted on the reference
    /// (memoised there), each shared by every candidate.
    fn laplace_draws(
        &self,
        data: &Dataset,
        indices: &[usize],
        (samples, laplace): (usize, alkit_acquisition::LastLayerLaplace),
        rng: &mut Rng,
        observer: &mut dyn Observer,
    ) -> Result<Samples> {
        let reference = self.reference.as_deref().ok_or_else(|| {
            Error::config(
                "posterior",
                "Laplace draws need the items the model was trained on, and none were given \
                 here (an evaluation reads the data's train split, an acquisition round its \
                 labeled items)",
            )
        })?;
        let f = features_of(self.model, data, indices, self.batch, self.device, observer)?;
        let posterior = laplace.memo(reference)?;
        Ok(posterior.draws(&f, samples, rng)?)
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
        let ch = data.item_shape()[0];
        if self.input_std.len() != ch {
            return Err(Error::config(
                "input_std",
                format!("{} values for {ch} channels", self.input_std.len()),
            ));
        }
        // A model with no parameters to differentiate (an ONNX model's are ONNX Runtime's)
        // has no fallback: per-candidate autograd would find no layer and score nothing.
        let fallback: Option<Vec<(String, candle_core::Tensor)>> = self
            .params
            .map(|p| {
                p.named()
                    .into_iter()
                    .map(|(n, v)| (n, v.as_tensor().clone()))
                    .collect::<Vec<_>>()
            })
            .filter(|p| !p.is_empty());
        let (mut sq, mut kl, mut shape) = (Vec::new(), Vec::new(), (0, 0));
        let mut done = 0;
        let batch = self.batch.clamp(1, 256);
        for chunk in indices.chunks(batch) {
            // Noise-free gradients run as full batches; perturbed ones keep their RNG stream.
            let rows = if req.perturbations == 0 {
                full_batch(chunk, batch)
            } else {
                std::borrow::Cow::Borrowed(chunk)
            };
            let x = self.noisy_batch(data, &rows, req.sigma, copies, true, rng)?;
            let out = match grad_norms(self.model, &x, copies, req.expected)? {
                Some(o) => o,
                None => match &fallback {
                    Some(p) => autograd_grad_norms(self.model, p, &x, copies, req.expected)?,
                    None => {
                        return Err(Error::config(
                            "model",
                            "gradient scorers over the whole network need a model with a gradient fast path or Var-backed parameters (an ONNX model has neither: ONNX Runtime has no autograd); over its last layer they need neither (setting `layers` last)",
                        ))
                    }
                },
            };
            shape = (out.rows, out.layers);
            let per = out.rows * out.layers;
            if done == 0 {
                // The layer count is the model's, known from its first batch: the whole
                // evidence is checked before it grows past that batch.
                crate::limits::evidence(
                    "gradient scorer",
                    &Needs::grads(req),
                    indices.len(),
                    self.model.classes(),
                    None,
                    Some(out.layers),
                    "the candidates scored at once",
                )?;
                sq.reserve_exact(indices.len() * per);
                kl.reserve_exact(indices.len());
            }
            sq.extend(out.sq.iter().take(chunk.len() * per).map(|&v| v as f32));
            kl.extend(out.kl_l1.iter().take(chunk.len()).map(|&v| v as f32));
            done += chunk.len();
            scored(observer, done, indices.len())?;
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

/// Test accuracy, NLL (mean `-log p(true class)`) and recall per class.
#[derive(Debug, Clone, PartialEq)]
pub struct TestMetrics {
    /// Fraction of items whose argmax is the true class.
    pub acc: f64,
    /// Mean negative log-likelihood of the true class, nats.
    pub nll: f64,
    /// Per class, the fraction of its items whose argmax is that class (`None` for a class
    /// with no items).
    pub recall: Vec<Option<f64>>,
}

impl TestMetrics {
    /// Balanced accuracy: the mean recall over the classes that have items (`None` with none).
    pub fn balanced_acc(&self) -> Option<f64> {
        let present: Vec<f64> = self.recall.iter().flatten().copied().collect();
        (!present.is_empty()).then(|| present.iter().sum::<f64>() / present.len() as f64)
    }
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

/// Accuracy, NLL and recall per class from log-probabilities `(n, c)` and labels `(n,)`, each
/// below `c`. Ties in the argmax go to the lowest class.
pub fn metrics_from_log_probs(log_probs: &[f32], labels: &[u32], classes: usize) -> TestMetrics {
    let mut nll = 0f64;
    // Per class: its items, and those of them predicted as it.
    let mut counts = vec![(0usize, 0usize); classes];
    for (row, &y) in log_probs.chunks_exact(classes).zip(labels) {
        let arg = crate::metrics::argmax(row);
        let c = &mut counts[y as usize];
        c.0 += 1;
        c.1 += usize::from(arg == y as usize);
        nll -= f64::from(row[y as usize]);
    }
    let correct: usize = counts.iter().map(|c| c.1).sum();
    let n = labels.len().max(1) as f64;
    TestMetrics {
        acc: correct as f64 / n,
        nll: nll / n,
        recall: counts
            .iter()
            .map(|&(items, hit)| (items > 0).then(|| hit as f64 / items as f64))
            .collect(),
    }
}

/// Rows per forward pass of a regression model's predictions.
pub const GAUSS_BATCH: usize = 1024;

/// Gaussian predictions `(m, n, k)` of regression `models` on standardised features
/// `x (n, d)` in standardised target units: one draw per model for
/// [`SampleRequest::Members`] (an ensemble's members, or a single model's head), `samples`
/// dropout passes of the first model for [`SampleRequest::McDropout`] (masks from `rng`).
/// Every pass runs at [`GAUSS_BATCH`] rows (a short batch padded with its last row), so an item's prediction does not
/// depend on the items scored with it.
pub fn gaussian_evidence(
    models: &[&dyn Regressor],
    x: &[f32],
    d: usize,
    request: SampleRequest,
    rng: &mut Rng,
    device: &Device,
) -> Result<Gaussian> {
    let n = x.len() / d.max(1);
    let k = models.first().map_or(0, |m| m.outputs());
    let draws = match request {
        SampleRequest::Members => models.len(),
        SampleRequest::McDropout { samples } => {
            if !models.first().is_some_and(|m| m.has_dropout()) {
                return Err(Error::config(
                    "model",
                    "MC-dropout draws need a model with dropout (mlp-gauss); or train an \
                     ensemble, whose members are the draws",
                ));
            }
            samples
        }
        other => {
            return Err(Error::config(
                "scorer",
                format!("a regression model draws from members or MC dropout, not {other:?}"),
            ))
        }
    };
    let (mut means, mut vars) = (
        Vec::with_capacity(draws * n * k),
        Vec::with_capacity(draws * n * k),
    );
    let rows: Vec<usize> = (0..n).collect();
    for j in 0..draws {
        let (model, dropout) = match request {
            SampleRequest::McDropout { .. } => (models[0], true),
            _ => (models[j], false),
        };
        for chunk in rows.chunks(GAUSS_BATCH) {
            let xt = padded_rows(x, d, chunk, n, device)?;
            let mut mode = if dropout {
                Mode::Train(rng)
            } else {
                Mode::Eval
            };
            let (mu, var) = model.forward(&xt, &mut mode)?;
            let take = chunk.len() * k;
            let mu = mu.detach().flatten_all()?.to_vec1::<f32>()?;
            let var = var.detach().flatten_all()?.to_vec1::<f32>()?;
            means.extend_from_slice(&mu[..take]);
            vars.extend_from_slice(&var[..take]);
        }
    }
    Ok(Gaussian::new(means, vars, draws, n, k)?)
}

/// Label probabilities `(m, n, L)` of multi-label `models` (sigmoid heads: logits `(b, L)`)
/// on standardised features `x (n, d)`: one draw per model for [`SampleRequest::Members`] (an
/// ensemble's members, or a single model's one prediction), `samples` dropout passes of the
/// first model for [`SampleRequest::McDropout`] (masks from `rng`; the caller knows whether
/// the model has dropout). Rows run in padded batches of [`GAUSS_BATCH`] like
/// [`gaussian_evidence`].
pub fn label_evidence(
    models: &[&dyn Classifier],
    x: &[f32],
    d: usize,
    request: SampleRequest,
    rng: &mut Rng,
    device: &Device,
) -> Result<LabelProbs> {
    let n = x.len() / d.max(1);
    let (draws, dropout) = match request {
        SampleRequest::Members => (models.len(), false),
        SampleRequest::McDropout { samples } => (samples, true),
        other => {
            return Err(Error::config(
                "scorer",
                format!("a multi-label model draws from members or MC dropout, not {other:?}"),
            ))
        }
    };
    let mut probs = Vec::new();
    let mut labels = 0;
    let rows: Vec<usize> = (0..n).collect();
    for j in 0..draws {
        let model = if dropout { models[0] } else { models[j] };
        for chunk in rows.chunks(GAUSS_BATCH) {
            let xt = padded_rows(x, d, chunk, n, device)?;
            let mut mode = if dropout {
                Mode::Train(rng)
            } else {
                Mode::Eval
            };
            let p = candle_nn::ops::sigmoid(&model.forward(&xt, &mut mode)?.detach())?;
            labels = p.dim(1)?;
            let p = p.flatten_all()?.to_vec1::<f32>()?;
            probs.extend_from_slice(&p[..chunk.len() * labels]);
        }
    }
    Ok(LabelProbs::new(probs, draws, n, labels.max(1))?)
}

/// Rows `x[chunk]` of `d` values as a tensor of [`GAUSS_BATCH`] rows (fewer when the whole
/// set `n` is smaller), a short chunk filled by [`full_batch`].
fn padded_rows(
    x: &[f32],
    d: usize,
    chunk: &[usize],
    n: usize,
    device: &Device,
) -> Result<candle_core::Tensor> {
    let ids = full_batch(chunk, GAUSS_BATCH.min(n));
    let mut xs = Vec::with_capacity(ids.len() * d);
    for &i in ids.iter() {
        xs.extend_from_slice(&x[i * d..(i + 1) * d]);
    }
    Ok(candle_core::Tensor::from_vec(xs, (ids.len(), d), device)?)
}

/// Kernel features `(m, p)` of the labeled rows and `(n, p)` of the pool rows (standardised
/// inputs, row-major `(rows, d)`) under `models`, as `request` asks: gradients of the
/// predicted mean w.r.t. the last or every linear layer, summed over members as a sum of
/// kernels, exact or sketched (the sketch drawn once from `rng` and shared by both sets).
/// Rows run in padded batches of [`GAUSS_BATCH`] like [`gaussian_evidence`].
pub fn kernel_features(
    models: &[&dyn Regressor],
    (labeled, pool): (&[f32], &[f32]),
    d: usize,
    request: FeatureRequest,
    rng: &mut Rng,
    device: &Device,
) -> Result<KernelFeatures> {
    let first = *models
        .first()
        .ok_or_else(|| Error::config("model", "kernel features need a trained model"))?;
    let probe = candle_core::Tensor::from_vec(pool[..d.min(pool.len())].to_vec(), (1, d), device)?;
    let widths = crate::nn::factor_widths(first, &probe, request)?;
    let exact = models.len() * widths.iter().map(|(a, b)| a * b).sum::<usize>();
    let dim = request.sketch.unwrap_or(exact);
    let sketch = match request.sketch {
        Some(p) => Some(GradSketch::draw(&widths, models.len(), p, rng, device)?),
        None => {
            if exact > MAX_EXACT_FEATURES {
                return Err(Error::config(
                    "sketch",
                    format!(
                        "the exact gradient features have {exact} dimensions (at most \
                         {MAX_EXACT_FEATURES}); sketch them (setting `sketch`, 512 by default)"
                    ),
                ));
            }
            None
        }
    };
    let features_of = |x: &[f32]| -> Result<Vec<f32>> {
        let n = x.len() / d.max(1);
        let rows: Vec<usize> = (0..n).collect();
        let mut out = Vec::new();
        for chunk in rows.chunks(GAUSS_BATCH) {
            let xt = padded_rows(x, d, chunk, n, device)?;
            let f = grad_features(models, &xt, request, sketch.as_ref())?;
            let p = f.dim(1)?;
            let f = f.flatten_all()?.to_vec1::<f32>()?;
            out.extend_from_slice(&f[..chunk.len() * p]);
        }
        Ok(out)
    };
    Ok(KernelFeatures::new(
        features_of(pool)?,
        features_of(labeled)?,
        dim,
    )?)
}

#[cfg(test)]
mod tests {
    use super::{default_batch, metrics_from_log_probs};

    #[test]
    fn recall_and_balanced_accuracy_count_each_class_apart() {
        // Rows are log-probabilities over 3 classes; class 2 has no items. Worked by hand:
        // class 0 has items 1, 2, 3, predicted 0, 1, 0 (recall 2/3); class 1 has items 4, 5,
        // predicted 1 and (a tie, to the lowest class) 0 (recall 1/2). Balanced accuracy
        // (2/3 + 1/2) / 2 = 7/12; accuracy 3/5.
        let lp: Vec<f32> = [
            [-0.1, -3.0, -3.0],
            [-3.0, -0.1, -3.0],
            [-0.2, -2.0, -3.0],
            [-2.0, -0.2, -3.0],
            [-0.7, -0.7, -9.0],
        ]
        .concat();
        let m = metrics_from_log_probs(&lp, &[0, 0, 0, 1, 1], 3);
        assert_eq!(m.recall, vec![Some(2.0 / 3.0), Some(0.5), None]);
        assert!((m.balanced_acc().unwrap() - 7.0 / 12.0).abs() < 1e-15);
        assert!((m.acc - 0.6).abs() < 1e-15);
        assert_eq!(metrics_from_log_probs(&[], &[], 3).balanced_acc(), None);
    }

    #[test]
    fn the_default_batch_keeps_a_batch_under_four_million_values() {
        assert_eq!(default_batch(784), 512);
        assert_eq!(default_batch(3 * 32 * 32), 512);
        assert_eq!(default_batch(8192), 512);
        assert_eq!(default_batch(8193), 256);
        assert_eq!(default_batch(3 * 224 * 224), 16);
        assert_eq!(default_batch(3 * 4096 * 4096), 1);
        assert_eq!(default_batch(0), 512);
    }
}
