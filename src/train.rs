//! The training entries: [`train`] makes a fresh model (or an ensemble's members) from a
//! [`ModelBuilder`] and fits it on a labeled subset with the model's own loss and optimiser
//! ([`ModelBuilder::fit`]); [`train_gauss`] does the same for regression's Gaussian heads,
//! [`train_sigmoid`] for multi-label sigmoid heads (both through one Adam loop).
//!
//! The default recipe ([`fit_softmax`]): softmax cross-entropy and Adam, fixed number of optimiser steps whatever the labeled-set size (so a 20-item seed set
//! is trained as much as a 220-item one), mini-batches drawn epoch by epoch from a seeded
//! shuffle, dropout masks from the same seeded stream. [`TrainConfig`] is validated once into
//! [`TrainParams`].

use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::nn::init::{seeded, Weights};
use crate::nn::layers::log_probs;
use crate::nn::{
    Classifier, Ensemble, GaussLoss, GaussMlp, GaussMlpConfig, Mlp, MlpConfig, Mode, Regressor,
};
use crate::observe::{check, Event, Observer};
use crate::rng::{shuffle, stream, Purpose, Rng};
use candle_core::{DType, Device, Tensor};
use candle_nn::{AdamW, Optimizer, ParamsAdamW, VarBuilder};
use serde::{Deserialize, Serialize};

/// Training settings, as written in configs and run states.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    /// Optimiser steps per training run.
    pub steps: usize,
    /// Mini-batch size (capped at the labeled-set size).
    pub batch_size: usize,
    /// Adam learning rate.
    pub lr: f64,
    /// Anchored training (Pearce et al. 2020): adds `tau / n * ||theta - theta_0||^2` to the
    /// loss, `theta_0` the (prior-drawn) initial parameters, `n` the training-set size.
    /// `None`: plain maximum likelihood.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anchor: Option<f64>,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            steps: 500,
            batch_size: 32,
            lr: 1e-3,
            anchor: None,
        }
    }
}

/// Validated [`TrainConfig`].
#[derive(Debug, Clone, PartialEq)]
pub struct TrainParams(TrainConfig);

impl TrainConfig {
    /// Checks ranges: `steps` in `1..=`[`crate::limits::MAX_STEPS`], `batch_size >= 1`, `lr`
    /// finite and positive.
    pub fn validate(&self) -> Result<TrainParams> {
        crate::limits::count(
            "steps",
            self.steps,
            crate::limits::MAX_STEPS,
            "training steps",
        )?;
        if self.batch_size == 0 {
            return Err(Error::config("batch_size", "must be at least 1"));
        }
        if let Some(tau) = self.anchor {
            if !(tau.is_finite() && tau >= 0.0) {
                return Err(Error::config(
                    "anchor",
                    format!("{tau} is not a number >= 0"),
                ));
            }
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return Err(Error::config(
                "lr",
                format!("{} is not a positive number", self.lr),
            ));
        }
        Ok(TrainParams(self.clone()))
    }
}

impl TrainParams {
    /// The validated settings.
    pub fn config(&self) -> &TrainConfig {
        &self.0
    }
}

/// A trained model with its parameters.
pub struct Trained {
    /// The model.
    pub model: Box<dyn Classifier>,
    /// Its parameters by name (for checkpoints).
    pub params: Weights,
    /// Loss of the last mini-batch.
    pub final_loss: f32,
}

/// The two random streams a training run draws from.
pub struct TrainRngs {
    /// Initialises the weights.
    pub init: Rng,
    /// Orders mini-batches and draws dropout masks.
    pub batches: Rng,
}

impl TrainRngs {
    /// The streams of ensemble member `member` in `(seed, cycle)`.
    pub fn for_member(seed: u64, cycle: u64, member: u64) -> Self {
        Self::for_cycle(member_seed(seed, member), cycle)
    }

    /// The streams of `(seed, cycle)` (see [`crate::rng::stream`]).
    pub fn for_cycle(seed: u64, cycle: u64) -> Self {
        Self {
            init: stream(seed, Purpose::Init, cycle),
            batches: stream(seed, Purpose::Train, cycle),
        }
    }
}

/// Seed of ensemble member `member` (member 0 keeps `seed`, so a one-member ensemble is the
/// single model).
pub fn member_seed(seed: u64, member: u64) -> u64 {
    seed.wrapping_add(member.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// The most members an ensemble may have (deep ensembles in the literature use 5 to 10; a
/// larger count read from a file or flag is a mistake, not a plan).
pub const MAX_MEMBERS: usize = 256;

/// The one training entry: trains a fresh model from `builder` on `data[indices]` (features
/// already normalised) with the model's own loss and optimiser ([`ModelBuilder::fit`]): one
/// model from the streams of [`TrainRngs::for_cycle`]`(seed, key)`, or, with
/// `ensemble = Some(k)`, `k` members, member `m` from the streams of
/// [`TrainRngs::for_member`]`(seed, key, m)` (its own initialisation, batch order and dropout
/// masks), into an [`Ensemble`] whose parameters are named `m{m}.{name}`.
#[allow(clippy::too_many_arguments)]
pub fn train(
    builder: &dyn ModelBuilder,
    ensemble: Option<usize>,
    data: &Dataset,
    indices: &[usize],
    params: &TrainParams,
    (seed, key): (u64, u64),
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<Trained> {
    let Some(members) = ensemble else {
        let rngs = TrainRngs::for_cycle(seed, key);
        return builder.fit(data, indices, params, rngs, device, observer);
    };
    if !(1..=MAX_MEMBERS).contains(&members) {
        return Err(Error::config(
            "ensemble",
            format!("{members} members; expected 1 to {MAX_MEMBERS}"),
        ));
    }
    let mut models = Vec::with_capacity(members);
    let mut member_params = Vec::with_capacity(members);
    let mut final_loss = 0f32;
    for k in 0..members {
        let rngs = TrainRngs::for_member(seed, key, k as u64);
        let t = builder.fit(data, indices, params, rngs, device, observer)?;
        final_loss += t.final_loss / members as f32;
        member_params.push(t.params);
        models.push(t.model);
    }
    Ok(Trained {
        model: Box::new(Ensemble::new(models)?),
        params: Weights::of_members(&member_params),
        final_loss,
    })
}

/// Makes a fresh classifier from a `VarBuilder` (seeded for training, loaded for checkpoints)
/// and says how to train it. The one trait a model brings to the loop besides
/// [`Classifier`].
pub trait ModelBuilder: Send + Sync {
    /// Builds the model, requesting its parameters from `vb`.
    fn build(&self, vb: VarBuilder) -> candle_core::Result<Box<dyn Classifier>>;

    /// Trains a fresh model on `data[indices]` (features already normalised) with the model's
    /// loss and optimiser. The default is [`fit_softmax`] (softmax cross-entropy, Adam); a
    /// model with its own objective (DUQ's BCE + gradient penalty with SGD) overrides it.
    fn fit(
        &self,
        data: &Dataset,
        indices: &[usize],
        params: &TrainParams,
        rngs: TrainRngs,
        device: &Device,
        observer: &mut dyn Observer,
    ) -> Result<Trained> {
        fit_softmax(
            &|vb| self.build(vb),
            data,
            indices,
            params,
            rngs,
            device,
            observer,
        )
    }
}

/// Builds a model with `build` from the seeded initialisation stream and trains it with
/// softmax cross-entropy and Adam for `params.steps` mini-batches (plus the model's
/// [`Classifier::penalty`] over the item count, and the anchor term when set), dropout masks
/// and weight draws from the batch stream.
pub fn fit_softmax(
    build: &dyn Fn(VarBuilder) -> candle_core::Result<Box<dyn Classifier>>,
    data: &Dataset,
    indices: &[usize],
    params: &TrainParams,
    rngs: TrainRngs,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<Trained> {
    let TrainRngs {
        init: init_rng,
        batches: mut train_rng,
    } = rngs;
    let cfg = params.config();
    if indices.is_empty() {
        return Err(Error::config(
            "labeled",
            "cannot train on an empty labeled set",
        ));
    }
    let (vb, vars) = seeded(init_rng, DType::F32, device);
    let model = build(vb)?;
    // A deep copy, detached: `detach` alone would share storage with the Vars the optimiser
    // updates in place, and `copy` alone records the copy in the graph, so that the gradient
    // of `||v - copy(v)||^2` reaching `v` through both sides cancels to zero.
    let anchors: Vec<Tensor> = vars
        .trainable()
        .iter()
        .map(|v| Ok(v.as_tensor().copy()?.detach()))
        .collect::<candle_core::Result<_>>()?;
    let mut opt = AdamW::new(
        vars.trainable(),
        ParamsAdamW {
            lr: cfg.lr,
            weight_decay: 0.0,
            ..ParamsAdamW::default()
        },
    )?;
    let batch = cfg.batch_size.min(indices.len());
    let mut order: Vec<usize> = indices.to_vec();
    let mut cursor = order.len(); // forces a shuffle before the first batch
    let mut final_loss = f32::NAN;
    for step in 1..=cfg.steps {
        if cursor + batch > order.len() {
            shuffle(&mut train_rng, &mut order);
            cursor = 0;
        }
        let ids = &order[cursor..cursor + batch];
        cursor += batch;
        let x = data.batch(ids, device)?;
        let y = data.batch_labels(ids, device)?;
        let logits = model.forward(&x, &mut Mode::Train(&mut train_rng))?;
        let mut loss = candle_nn::loss::nll(&log_probs(&logits)?, &y)?;
        if let Some(kl) = model.penalty()? {
            loss = (loss + (kl / indices.len() as f64)?)?;
        }
        if let Some(tau) = cfg.anchor {
            let mut reg = Tensor::zeros((), loss.dtype(), loss.device())?;
            for (v, a) in vars.trainable().iter().zip(&anchors) {
                reg = (reg + (v.as_tensor() - a)?.sqr()?.sum_all()?)?;
            }
            loss = (loss + (reg * (tau / indices.len() as f64))?)?;
        }
        opt.backward_step(&loss)?;
        let report = step == cfg.steps || step % 50 == 0;
        let loss_value = if report {
            let v = loss.to_dtype(DType::F32)?.to_scalar::<f32>()?;
            final_loss = v;
            Some(v)
        } else {
            None
        };
        let ev = Event::TrainStep {
            step,
            steps: cfg.steps,
            loss: loss_value,
        };
        check(observer, &ev)?;
    }
    Ok(Trained {
        model,
        params: vars,
        final_loss,
    })
}

/// Rows of a training set on features: features `(n, d)` and targets `(n, k)`, `f32` as the
/// model computes (standardised numbers for regression, 0/1 per label for multi-label).
pub struct Rows<'a> {
    /// Features `(n, d)`.
    pub x: &'a [f32],
    /// Feature count `d`.
    pub d: usize,
    /// Targets `(n, k)`.
    pub y: &'a [f32],
}

impl Rows<'_> {
    /// Features `(b, d)` and targets `(b, k)` of rows `ids`.
    fn batch(&self, ids: &[usize], k: usize, device: &Device) -> Result<(Tensor, Tensor)> {
        let mut x = Vec::with_capacity(ids.len() * self.d);
        let mut y = Vec::with_capacity(ids.len() * k);
        for &i in ids {
            x.extend_from_slice(&self.x[i * self.d..(i + 1) * self.d]);
            y.extend_from_slice(&self.y[i * k..(i + 1) * k]);
        }
        Ok((
            Tensor::from_vec(x, (ids.len(), self.d), device)?,
            Tensor::from_vec(y, (ids.len(), k), device)?,
        ))
    }
}

/// The regression training entry: `members` Gaussian heads of `cfg` (one for a single
/// model, several for a deep ensemble), member `m` from the streams of
/// [`TrainRngs::for_member`]`(seed, key, m)`, each trained by `loss` and Adam on `rows[indices]`
/// for `params.steps` mini-batches, as [`fit_softmax`] trains a classifier.
#[allow(clippy::too_many_arguments)]
pub fn train_gauss(
    cfg: &GaussMlpConfig,
    loss: GaussLoss,
    members: usize,
    rows: &Rows<'_>,
    indices: &[usize],
    params: &TrainParams,
    (seed, key): (u64, u64),
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<Vec<GaussMlp>> {
    check_members(members, indices)?;
    (0..members)
        .map(|m| {
            let rngs = TrainRngs::for_member(seed, key, m as u64);
            fit_gauss(cfg, loss, rows, indices, params, rngs, device, observer)
        })
        .collect()
}

/// Trains one Gaussian head (see [`train_gauss`]).
#[allow(clippy::too_many_arguments)]
fn fit_gauss(
    cfg: &GaussMlpConfig,
    loss: GaussLoss,
    rows: &Rows<'_>,
    indices: &[usize],
    params: &TrainParams,
    rngs: TrainRngs,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<GaussMlp> {
    let (vb, vars) = seeded(rngs.init, DType::F32, device);
    let model = GaussMlp::new(cfg, vb)?;
    let objective = |x: &Tensor, y: &Tensor, rng: &mut Rng| {
        let (mean, var) = model.forward(x, &mut Mode::Train(rng))?;
        loss.loss(&mean, &var, y)
    };
    let mut batches = rngs.batches;
    let run = (rows, cfg.outputs, indices, params);
    adam_steps(
        &vars,
        run,
        &objective,
        &mut batches,
        device,
        observer,
        "Gaussian",
    )?;
    Ok(model)
}

/// The multi-label training entry: `members` sigmoid heads of `cfg` (one logit per label;
/// several for a deep ensemble), member `m` from the streams of
/// [`TrainRngs::for_member`]`(seed, key, m)`, each trained by the mean binary cross-entropy
/// over labels and Adam on `rows[indices]` (targets 0/1 `(n, L)`) for `params.steps`
/// mini-batches, as [`train_gauss`] trains a regression head.
#[allow(clippy::too_many_arguments)]
pub fn train_sigmoid(
    cfg: &MlpConfig,
    members: usize,
    rows: &Rows<'_>,
    indices: &[usize],
    params: &TrainParams,
    (seed, key): (u64, u64),
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<Vec<Mlp>> {
    check_members(members, indices)?;
    (0..members)
        .map(|m| {
            let rngs = TrainRngs::for_member(seed, key, m as u64);
            let (vb, vars) = seeded(rngs.init, DType::F32, device);
            let model = Mlp::new(cfg, vb)?;
            let objective = |x: &Tensor, y: &Tensor, rng: &mut Rng| {
                binary_cross_entropy(&model.forward(x, &mut Mode::Train(rng))?, y)
            };
            let mut batches = rngs.batches;
            let run = (rows, cfg.classes, indices, params);
            adam_steps(
                &vars,
                run,
                &objective,
                &mut batches,
                device,
                observer,
                "sigmoid",
            )?;
            Ok(model)
        })
        .collect()
}

/// The mean over items and labels of the binary cross-entropy of `logits (b, L)` against
/// 0/1 targets `y (b, L)`: `max(z, 0) - z y + ln(1 + e^-|z|)`, which neither overflows nor
/// loses the tail.
pub fn binary_cross_entropy(logits: &Tensor, y: &Tensor) -> candle_core::Result<Tensor> {
    let tail = (logits.abs()?.neg()?.exp()? + 1.0)?.log()?;
    ((logits.relu()? - logits.mul(y)?)? + tail)?.mean_all()
}

/// Refuses an ensemble size out of range, or an empty labeled set.
fn check_members(members: usize, indices: &[usize]) -> Result<()> {
    if !(1..=MAX_MEMBERS).contains(&members) {
        return Err(Error::config(
            "ensemble",
            format!("{members} members; expected 1 to {MAX_MEMBERS}"),
        ));
    }
    if indices.is_empty() {
        return Err(Error::config(
            "labeled",
            "cannot train on an empty labeled set",
        ));
    }
    Ok(())
}

/// `params.steps` Adam steps on `vars`, each on a mini-batch of `rows[indices]` (`k` targets
/// per row) drawn epoch by epoch from a shuffle by `rng`, minimising `objective(x, y, rng)`
/// (which draws its dropout masks from `rng` too). `what` names the loss when it diverges.
fn adam_steps(
    vars: &Weights,
    (rows, k, indices, params): (&Rows<'_>, usize, &[usize], &TrainParams),
    objective: &dyn Fn(&Tensor, &Tensor, &mut Rng) -> candle_core::Result<Tensor>,
    rng: &mut Rng,
    device: &Device,
    observer: &mut dyn Observer,
    what: &str,
) -> Result<()> {
    let tc = params.config();
    let mut opt = AdamW::new(
        vars.trainable(),
        ParamsAdamW {
            lr: tc.lr,
            weight_decay: 0.0,
            ..ParamsAdamW::default()
        },
    )?;
    let batch = tc.batch_size.min(indices.len());
    let mut order = indices.to_vec();
    let mut cursor = order.len();
    for step in 1..=tc.steps {
        if cursor + batch > order.len() {
            shuffle(rng, &mut order);
            cursor = 0;
        }
        let (x, y) = rows.batch(&order[cursor..cursor + batch], k, device)?;
        cursor += batch;
        let l = objective(&x, &y, rng)?;
        opt.backward_step(&l)?;
        let report = step == tc.steps || step % 50 == 0;
        let value = if report {
            Some(l.to_dtype(DType::F32)?.to_scalar::<f32>()?)
        } else {
            None
        };
        if value.is_some_and(|v| !v.is_finite()) {
            return Err(Error::config(
                "lr",
                format!("the {what} loss is {value:?} at step {step}: lower the learning rate"),
            ));
        }
        check(
            observer,
            &Event::TrainStep {
                step,
                steps: tc.steps,
                loss: value,
            },
        )?;
    }
    Ok(())
}
