//! DUQ on any feature extractor: the [`Extractor`] trait a network implements to get DUQ's RBF
//! head, loss, gradient penalty, centroid updates and training as a [`Duq`] model, and two
//! checks that its hand-written input gradient is right.
//!
//! The penalty `lambda * mean_i p(||grad_x sum_c K_c(x_i)||)` is differentiated w.r.t. the
//! parameters, and candle's double backward is silently wrong (see [`crate::duq`]), so an
//! extractor writes its input gradient itself, with ordinary differentiable candle ops: for
//! `v (b, d)`, the gradient of `sum(f(x) * v)` w.r.t. `x` (a linear layer as `v @ W`, ReLU as a
//! multiplication by its `> 0` mask, `tanh` as `v * (1 - t^2)`, ...). [`Duq`] chains it after
//! the head's own gradient ([`RbfHead::feature_gradient`]), so one first-order backward of
//! `BCE + penalty` gives exact parameter gradients, provided the input gradient keeps its
//! dependence on the parameters (no `detach`, no op without a backward on that path).
//!
//! Because a mistake there does not fail but trains a different model, two checks come with
//! the trait: [`check_input_gradient`] compares the hand-written gradient with candle's
//! first-order autodiff (which is reliable), and [`Duq::check_parameter_gradients`] compares the
//! parameter gradients of the whole loss with central finite differences (run it in `f64`).
//! The built-in extractors, [`ReluMlp`](super::ReluMlp) and the Fashion-MNIST CNN, are tested
//! the same way.

use super::head::{bce, penalty, DuqSettings, HeadOutput, Penalty, RbfHead, Sgd};
use crate::error::{Error, Result};
use crate::nn::{Ask, Offer};
use crate::observe::{check, Event, Observer};
use crate::rng::{shuffle, Rng};
use candle_core::{DType, Device, Tensor, Var};

/// A feature extractor `f: (b, ...) -> (b, d)` DUQ can train with its gradient penalty.
///
/// Implement it for your own candle network to train it as [`Duq`]; check the input gradient
/// with [`check_input_gradient`] and the whole loss with [`Duq::check_parameter_gradients`].
pub trait Extractor {
    /// What [`Extractor::input_gradient`] needs from the forward pass (pre-activations,
    /// masks, batch statistics, ...).
    type Cache;

    /// Width `d` of the features.
    fn features(&self) -> usize;

    /// Features `(b, d)` for inputs `x (b, ...)`, differentiable w.r.t. the parameters, and
    /// what the input gradient needs. `train` selects training behaviour (batch statistics
    /// for batch norm); DUQ computes its loss and penalty in training mode.
    fn forward(&self, x: &Tensor, train: bool) -> Result<(Tensor, Self::Cache)>;

    /// [`Extractor::forward`] in training mode for a loss that takes no input gradient (DUQ
    /// with [`Penalty::None`]): an extractor may build a cheaper graph here, whose cache then
    /// serves [`Extractor::after_step`] but not [`Extractor::input_gradient`]. The default is
    /// `forward(x, true)`.
    fn forward_without_input_gradient(&self, x: &Tensor) -> Result<(Tensor, Self::Cache)> {
        self.forward(x, true)
    }

    /// For `v (b, d)`: the gradient of `sum(f(x) * v)` w.r.t. the inputs, in `x`'s shape,
    /// written with differentiable candle ops (see the module docs) from the `cache` of the
    /// forward pass that produced `f(x)`.
    fn input_gradient(&self, v: &Tensor, cache: &Self::Cache) -> Result<Tensor>;

    /// Features `(b, d)` in eval mode for inference (the centroid update after each step, and
    /// scoring). The default is [`Extractor::forward`] with `train = false`, detached;
    /// override it with a faster inference path.
    fn embed(&self, x: &Tensor) -> Result<Tensor> {
        Ok(self.forward(x, false)?.0.detach())
    }

    /// The trainable variables.
    fn vars(&self) -> Vec<Var>;

    /// Called after each optimiser step with the cache of the step's training forward (to
    /// update running statistics, say). The default does nothing.
    fn after_step(&mut self, cache: &Self::Cache) -> Result<()> {
        let _ = cache;
        Ok(())
    }
}

/// A DUQ forward pass: the head's kernel values and the extractor's cache.
pub struct DuqOutput<C> {
    /// Kernel values `K (b, c)`, `ln K` and `z - e`.
    pub head: HeadOutput,
    /// What the extractor's input gradient needs.
    pub cache: C,
}

/// DUQ's training loss for one batch.
pub struct DuqLoss {
    /// `bce + penalty`, the minimised scalar.
    pub total: Tensor,
    /// Binary cross-entropy of the kernel values against the one-hot labels.
    pub bce: Tensor,
    /// `lambda * mean_i p(||grad_x sum_c K_c(x_i)||)` (zero for [`Penalty::None`]).
    pub penalty: Tensor,
}

/// DUQ: an [`Extractor`] with the RBF head, trained with BCE + gradient penalty and SGD, the
/// centroids updated after each step from the batch re-embedded with the updated weights.
pub struct Duq<E> {
    extractor: E,
    head: RbfHead,
    w: Var,
    classes: usize,
    cfg: DuqSettings,
}

impl<E: Extractor> Duq<E> {
    /// Inputs per chunk of [`Duq::kernel_tensor`] and [`Duq::kernel_values`].
    pub const EVAL_CHUNK: usize = 256;

    /// DUQ on `extractor` for `classes` classes; the head (`W_c ~ N(0, w_std^2)`, centroids
    /// `n_init` times `N(0, 1)` draws, `N_c = n_init`) is drawn from `rng` in `dtype` on
    /// `device` (those of the extractor's parameters).
    pub fn from_extractor(
        extractor: E,
        classes: usize,
        cfg: &DuqSettings,
        (dtype, device): (DType, &Device),
        rng: &mut Rng,
    ) -> Result<Self> {
        cfg.validate()?;
        if classes < 2 || extractor.features() == 0 {
            return Err(Error::config(
                "duq",
                format!(
                    "needs at least 2 classes and features (got {classes} classes, {} features)",
                    extractor.features()
                ),
            ));
        }
        let (head, w) = RbfHead::new(
            extractor.features(),
            classes,
            cfg.centroid_dims,
            (cfg.sigma, cfg.gamma),
            (cfg.w_std, cfg.n_init),
            dtype,
            device,
            rng,
        )?;
        Ok(Self {
            extractor,
            head,
            w,
            classes,
            cfg: cfg.clone(),
        })
    }

    /// DUQ from an extractor and a head built elsewhere (from a `VarBuilder`, say, to load a
    /// checkpoint); the head's `W` becomes a trainable variable if it is not one already.
    pub fn from_parts(
        extractor: E,
        mut head: RbfHead,
        classes: usize,
        cfg: &DuqSettings,
    ) -> Result<Self> {
        cfg.validate()?;
        if (head.n, head.sigma, head.gamma) != (cfg.centroid_dims, cfg.sigma, cfg.gamma) {
            return Err(Error::config(
                "duq",
                format!(
                    "the head has centroid size {}, sigma {}, gamma {}; the settings {}, {}, {}",
                    head.n, head.sigma, head.gamma, cfg.centroid_dims, cfg.sigma, cfg.gamma
                ),
            ));
        }
        let (rows, d) = head.w.dims2()?;
        if head.classes != classes || rows != classes * head.n || d != extractor.features() {
            return Err(Error::config(
                "duq",
                format!(
                    "head W ({rows}, {d}) for {} classes does not fit {classes} classes and {} features",
                    head.classes,
                    extractor.features()
                ),
            ));
        }
        let w = Var::from_tensor(&head.w)?;
        head.w = w.as_tensor().clone();
        Ok(Self {
            extractor,
            head,
            w,
            classes,
            cfg: cfg.clone(),
        })
    }

    /// The feature extractor.
    pub fn extractor(&self) -> &E {
        &self.extractor
    }

    /// The feature extractor, mutable (its settings; its variables stay the ones
    /// [`Duq::vars`] lists).
    pub fn extractor_mut(&mut self) -> &mut E {
        &mut self.extractor
    }

    /// The RBF head.
    pub fn head(&self) -> &RbfHead {
        &self.head
    }

    /// The settings the model was built with.
    pub fn settings(&self) -> &DuqSettings {
        &self.cfg
    }

    /// SGD over [`Duq::vars`] with the settings' learning rate, momentum and weight decay.
    pub fn optimizer(&self) -> Sgd {
        Sgd::new(
            self.vars(),
            self.cfg.lr,
            self.cfg.momentum,
            self.cfg.weight_decay,
        )
    }

    /// All trainable variables: the extractor's, then the head's `W`.
    pub fn vars(&self) -> Vec<Var> {
        let mut v = self.extractor.vars();
        v.push(self.w.clone());
        v
    }

    /// Number of classes.
    pub fn classes(&self) -> usize {
        self.classes
    }

    /// The centroids `e (c, n)`.
    pub fn centroids(&self) -> Result<Tensor> {
        self.head.centroids()
    }

    /// Kernel values and what the penalty needs, for inputs `x (b, ...)`.
    pub fn forward(&self, x: &Tensor, train: bool) -> Result<DuqOutput<E::Cache>> {
        let (f, cache) = self.extractor.forward(x, train)?;
        Ok(DuqOutput {
            head: self.head.forward(&f)?,
            cache,
        })
    }

    /// `grad_x sum_c K_c` in `x`'s shape, with differentiable ops (no double backward).
    pub fn input_gradient(&self, out: &DuqOutput<E::Cache>) -> Result<Tensor> {
        let v = self.head.feature_gradient(&out.head)?;
        self.extractor.input_gradient(&v, &out.cache)
    }

    /// BCE + penalty for a batch `x (b, ...)`, labels `y (b,)` in training mode, and the
    /// forward pass it was computed from (without a penalty, from
    /// [`Extractor::forward_without_input_gradient`]: its cache has no input gradient).
    pub fn loss(&self, x: &Tensor, y: &Tensor) -> Result<(DuqLoss, DuqOutput<E::Cache>)> {
        let (f, cache) = match self.cfg.penalty {
            Penalty::None => self.extractor.forward_without_input_gradient(x)?,
            _ => self.extractor.forward(x, true)?,
        };
        let out = DuqOutput {
            head: self.head.forward(&f)?,
            cache,
        };
        let bce = bce(&out.head, y, self.classes)?;
        let penalty = match self.cfg.penalty {
            Penalty::None => Tensor::zeros((), bce.dtype(), bce.device())?,
            p => penalty(&self.input_gradient(&out)?, p, self.cfg.lambda)?,
        };
        let total = (&bce + &penalty)?;
        Ok((
            DuqLoss {
                total,
                bce,
                penalty,
            },
            out,
        ))
    }

    /// The EMA centroid update for a batch, with the current weights, in eval mode.
    pub fn update_centroids(&mut self, x: &Tensor, y: &Tensor) -> Result<()> {
        let f = self.extractor.embed(&x.detach())?;
        self.head.update(&f, y)
    }

    /// One optimiser step on a batch: loss, SGD, the extractor's [`Extractor::after_step`],
    /// then the centroid update from the batch re-embedded with the updated weights. Returns
    /// the batch's loss.
    pub fn step(&mut self, sgd: &mut Sgd, x: &Tensor, y: &Tensor) -> Result<f64> {
        let (loss, out) = self.loss(x, y)?;
        sgd.backward_step(&loss.total)?;
        self.extractor.after_step(&out.cache)?;
        self.update_centroids(x, y)?;
        Ok(loss.total.to_dtype(DType::F64)?.to_scalar::<f64>()?)
    }

    /// Trains for `steps` SGD steps of `batch` items of `data[indices]` (the last batch of a
    /// pass over `indices` dropped when it is short; one batch of all of them when there are
    /// fewer than `batch`), batch order from `batches`, the learning rate multiplied by
    /// `lr_factor` at the same fractions of the run as the configured epoch milestones; reports
    /// [`Event::TrainStep`] with the loss every 50 steps and at the last. The one training loop
    /// of the built-in DUQ models.
    pub fn fit_steps(
        &mut self,
        data: &crate::data::Dataset,
        indices: &[usize],
        (steps, batch): (usize, usize),
        batches: &mut Rng,
        device: &Device,
        observer: &mut dyn Observer,
    ) -> Result<()> {
        if indices.is_empty() {
            return Err(Error::config(
                "labeled",
                "cannot train on an empty labeled set",
            ));
        }
        let cfg = self.cfg.clone();
        let mut sgd = self.optimizer();
        let b = batch.min(indices.len()).max(1);
        let mut order = indices.to_vec();
        let mut cursor = order.len();
        for step in 1..=steps {
            let done = (step - 1) as f64 / steps as f64;
            let drops = cfg
                .milestones
                .iter()
                .filter(|&&m| done >= m as f64 / cfg.epochs.max(1) as f64)
                .count();
            sgd.lr = cfg.lr * cfg.lr_factor.powi(drops as i32);
            if cursor + b > order.len() {
                shuffle(batches, &mut order);
                cursor = 0;
            }
            let ids = &order[cursor..cursor + b];
            cursor += b;
            let l = self.step(
                &mut sgd,
                &data.batch(ids, device)?,
                &data.batch_labels(ids, device)?,
            )?;
            let ev = Event::TrainStep {
                step,
                steps,
                loss: (step % 50 == 0 || step == steps).then_some(l as f32),
            };
            check(observer, &ev)?;
        }
        Ok(())
    }

    /// Trains on `x (N, ...)`, `y (N,)` for the configured epochs: full batches only (the
    /// reference's `drop_last`; one batch of all `N` items when `N < batch`), batch order from
    /// `rng`, the learning rate multiplied by `lr_factor` at each milestone epoch; reports
    /// [`Event::TrainStep`]. Returns the mean loss of the last epoch.
    pub fn fit(
        &mut self,
        x: &Tensor,
        y: &Tensor,
        rng: &mut Rng,
        observer: &mut dyn Observer,
    ) -> Result<f64> {
        let cfg = self.cfg.clone();
        let mut sgd = self.optimizer();
        let n = x.dim(0)?;
        if n == 0 || y.dim(0)? != n {
            return Err(Error::config(
                "duq",
                format!(
                    "fit needs as many labels as items (got {n} items, {})",
                    y.dim(0)?
                ),
            ));
        }
        let batch = cfg.batch.min(n);
        let per_epoch = n / batch;
        let steps = per_epoch * cfg.epochs;
        let mut order: Vec<usize> = (0..n).collect();
        let mut last = f64::NAN;
        for epoch in 0..cfg.epochs {
            let drops = cfg.milestones.iter().filter(|&&m| epoch >= m).count();
            sgd.lr = cfg.lr * cfg.lr_factor.powi(drops as i32);
            shuffle(rng, &mut order);
            let mut sum = 0.0;
            for (j, chunk) in order.chunks_exact(batch).enumerate() {
                let ids = Tensor::from_vec(
                    chunk.iter().map(|&i| i as u32).collect::<Vec<_>>(),
                    chunk.len(),
                    x.device(),
                )?;
                let l = self.step(
                    &mut sgd,
                    &x.index_select(&ids, 0)?,
                    &y.index_select(&ids, 0)?,
                )?;
                sum += l;
                let ev = Event::TrainStep {
                    step: epoch * per_epoch + j + 1,
                    steps,
                    loss: Some(l as f32),
                };
                check(observer, &ev)?;
            }
            last = sum / per_epoch as f64;
        }
        Ok(last)
    }

    /// Kernel values `K (b, c)` in eval mode, inference only, in chunks of
    /// [`Duq::EVAL_CHUNK`] inputs (so that a large `x` does not need its activations all at
    /// once).
    pub fn kernel_tensor(&self, x: &Tensor) -> Result<Tensor> {
        let n = x.dim(0)?;
        let chunks = (0..n.max(1))
            .step_by(Self::EVAL_CHUNK)
            .map(|at| {
                let len = Self::EVAL_CHUNK.min(n - at);
                let f = self.extractor.embed(&x.narrow(0, at, len)?.detach())?;
                Ok(self.head.forward(&f)?.kernel.detach())
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Tensor::cat(&chunks, 0)?)
    }

    /// `K (b, c)` as row-major `f32`, inference only.
    pub fn kernel_values(&self, x: &Tensor) -> Result<Vec<f32>> {
        Ok(self
            .kernel_tensor(x)?
            .to_dtype(DType::F32)?
            .flatten_all()?
            .to_vec1()?)
    }

    /// The autodiff gradient of the loss (BCE + penalty) on `x`, `y` w.r.t. up to `per_var`
    /// entries of each variable (evenly spaced) against central finite differences with step
    /// `eps`; returns the worst error relative to `max(|fd|, |autodiff|, 1e-3)`. The
    /// variables are restored afterwards. Run it on an `f64` model (`eps ~ 1e-6`): a right
    /// input gradient gives ~1e-8, a broken one (a detached factor, a missing term) ~1.
    ///
    /// The penalty is piecewise smooth: it jumps where a ReLU's mask (or a max-pool's route)
    /// flips, and in a large network some pre-activation may lie within `eps` of its kink.
    /// Each difference is therefore also taken at `eps / 2`; where the two disagree (a jump
    /// between them), the step is divided by 8 and both are taken again, up to three times,
    /// and the last pair's smaller step is compared.
    pub fn check_parameter_gradients(
        &self,
        x: &Tensor,
        y: &Tensor,
        eps: f64,
        per_var: usize,
    ) -> Result<f64> {
        let loss = || -> Result<f64> {
            Ok(self
                .loss(x, y)?
                .0
                .total
                .to_dtype(DType::F64)?
                .to_scalar::<f64>()?)
        };
        let grads = self.loss(x, y)?.0.total.backward()?;
        let mut worst = 0f64;
        for var in self.vars() {
            let t = var.as_tensor();
            let (shape, dtype, device) = (t.shape().clone(), t.dtype(), t.device().clone());
            let original = t.copy()?;
            let base: Vec<f64> = t.to_dtype(DType::F64)?.flatten_all()?.to_vec1()?;
            let auto: Vec<f64> = match grads.get(&var) {
                Some(g) => g.to_dtype(DType::F64)?.flatten_all()?.to_vec1()?,
                None => vec![0.0; base.len()],
            };
            let k = per_var.min(base.len());
            let set = |v: &[f64]| -> Result<()> {
                let t = Tensor::from_slice(v, &shape, &device)?.to_dtype(dtype)?;
                Ok(var.set(&t)?)
            };
            let probe = || -> Result<f64> {
                let mut w = 0f64;
                let mut v = base.clone();
                for j in 0..k {
                    let i = j * base.len() / k;
                    let mut central = |h: f64| -> Result<f64> {
                        v[i] = base[i] + h;
                        set(&v)?;
                        let up = loss()?;
                        v[i] = base[i] - h;
                        set(&v)?;
                        let down = loss()?;
                        v[i] = base[i];
                        Ok((up - down) / (2.0 * h))
                    };
                    let mut h = eps;
                    let mut fd = central(h / 2.0)?;
                    for _ in 0..3 {
                        let wide = central(h)?;
                        // Central differences at h and h/2 differ by O(h^2) on a smooth
                        // stretch; a jump in between makes them differ by ~jump / h.
                        if (wide - fd).abs() <= 1e-4 * fd.abs().max(wide.abs()).max(1.0) {
                            break;
                        }
                        h /= 8.0;
                        fd = central(h / 2.0)?;
                    }
                    w = w.max((fd - auto[i]).abs() / fd.abs().max(auto[i].abs()).max(1e-3));
                }
                Ok(w)
            };
            let probed = probe();
            var.set(&original)?;
            worst = worst.max(probed?);
        }
        Ok(worst)
    }
}

/// The hand-written [`Extractor::input_gradient`] against candle's first-order autodiff of
/// `sum(f(x) * v)` w.r.t. `x`, for `v (b, d)`: the largest absolute difference relative to the
/// largest autodiff entry (or absolute, when that is below 1e-12). In `f64` a right gradient
/// gives ~1e-15.
pub fn check_input_gradient<E: Extractor>(
    extractor: &E,
    x: &Tensor,
    v: &Tensor,
    train: bool,
) -> Result<f64> {
    let xv = Var::from_tensor(&x.detach())?;
    let (f, cache) = extractor.forward(xv.as_tensor(), train)?;
    let grads = (f * v)?.sum_all()?.backward()?;
    let auto = grads
        .get(&xv)
        .ok_or_else(|| Error::config("duq", "the features do not depend on the inputs"))?
        .to_dtype(DType::F64)?;
    let mine = extractor.input_gradient(v, &cache)?.to_dtype(DType::F64)?;
    if mine.dims() != auto.dims() {
        return Err(Error::config(
            "duq",
            format!(
                "input_gradient has shape {:?}, the inputs {:?}",
                mine.dims(),
                auto.dims()
            ),
        ));
    }
    let diff = (mine - &auto)?
        .abs()?
        .flatten_all()?
        .max(0)?
        .to_scalar::<f64>()?;
    let scale = auto.abs()?.flatten_all()?.max(0)?.to_scalar::<f64>()?;
    Ok(if scale > 1e-12 { diff / scale } else { diff })
}

impl<E: Extractor + Send + Sync> crate::nn::Classifier for Duq<E> {
    /// `ln K (b, c)` in eval mode: the log-kernel values are the logits, so probability
    /// scorers see `K / sum_c K` and the argmax is DUQ's prediction.
    fn forward(&self, x: &Tensor, _mode: &mut crate::nn::Mode<'_>) -> candle_core::Result<Tensor> {
        Duq::forward(self, x, false)
            .map(|o| o.head.log_kernel)
            .map_err(|e| candle_core::Error::Msg(e.to_string()))
    }
    fn predict(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.extractor
            .embed(&x.detach())
            .and_then(|f| self.head.forward(&f))
            .map(|o| o.log_kernel.detach())
            .map_err(|e| candle_core::Error::Msg(e.to_string()))
    }
    fn offer(&self, ask: Ask<'_>) -> candle_core::Result<Option<Offer>> {
        match ask {
            Ask::KernelValues { x } => self
                .kernel_tensor(x)
                .map(|k| Some(Offer::KernelValues(k)))
                .map_err(|e| candle_core::Error::Msg(e.to_string())),
            _ => Ok(None),
        }
    }
    fn classes(&self) -> usize {
        self.classes
    }
}
