//! What every built-in model says about itself: the [`BuiltinModel`] trait its settings type
//! implements (how it is sized for data, built, trained, what evidence it can give), and
//! [`ModelKind`], a name users type (`--model`) with what that name means.
//!
//! Each built-in model is one file beside this one (`cnn.rs`, `mlp.rs`, `duq.rs`, `resnet.rs`,
//! `duq_resnet.rs`) implementing the trait for its settings type, and one line in the registry
//! (`models/mod.rs`).

use crate::data::Dataset;
use crate::duq::net::{train_duq_net, DuqResNet};
use crate::duq::DuqSettings;
use crate::error::{Error, Result};
use crate::nn::init::Weights;
use crate::observe::Observer;
use crate::train::{ModelBuilder, TrainConfig, TrainParams, TrainRngs, Trained};
use candle_core::Device;

/// One name of the model registry: what users type and what the binary's help says of it.
#[derive(Debug)]
pub struct KindInfo {
    /// The name users type (`--model`).
    pub name: &'static str,
    /// One line on what it is (the command line's help).
    pub about: &'static str,
    /// DUQ: trained with its own loss and SGD schedule, scored by `duq`.
    pub duq: bool,
    /// One of the ResNets, DUQ's included (timed on colour 32x32 items by `alkit bench`).
    pub resnet: bool,
    /// The training batch size when none is given.
    pub default_batch: fn() -> usize,
}

/// A built-in model a user can name (`--model`): an entry of the registry, parsed from its
/// name ([`std::str::FromStr`]) and listed by [`ModelKind::all`].
#[derive(Clone, Copy)]
pub struct ModelKind(&'static KindInfo);

impl PartialEq for ModelKind {
    fn eq(&self, other: &Self) -> bool {
        self.0.name == other.0.name
    }
}

impl Eq for ModelKind {}

impl std::fmt::Debug for ModelKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.name)
    }
}

impl std::fmt::Display for ModelKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.name)
    }
}

impl ModelKind {
    /// The kind `info` describes (an entry of a built-in model's file).
    pub(super) const fn new(info: &'static KindInfo) -> Self {
        Self(info)
    }

    /// The name users type.
    pub fn name(self) -> &'static str {
        self.0.name
    }

    /// One line on what it is.
    pub fn about(self) -> &'static str {
        self.0.about
    }

    /// Whether this is one of the ResNets, DUQ's included (timed on colour 32x32 items by
    /// `alkit bench`).
    pub fn is_resnet(self) -> bool {
        self.0.resnet
    }

    /// Whether this model is DUQ (trained with its own loss and SGD schedule, scored by `duq`).
    pub fn is_duq(self) -> bool {
        self.0.duq
    }

    /// The training batch size when none is given: DUQ's paper settings (128), else
    /// [`TrainConfig`]'s (32).
    pub fn default_batch_size(self) -> usize {
        (self.0.default_batch)()
    }

    /// The settings this model trains with: `steps`, `batch_size` or the model's own default,
    /// and Adam's `lr` and `anchor` for the softmax models. DUQ trains with SGD at its own
    /// schedule and its own loss, so a rate or an anchor given for it is refused, not ignored.
    pub fn train_config(
        self,
        steps: usize,
        batch_size: Option<usize>,
        lr: Option<f64>,
        anchor: Option<f64>,
    ) -> Result<TrainConfig> {
        if self.is_duq() && lr.is_some() {
            return Err(Error::config(
                "lr",
                "the learning rate sets Adam's rate of the softmax models; DUQ trains with SGD at its own schedule",
            ));
        }
        if self.is_duq() && anchor.is_some() {
            return Err(Error::config(
                "anchor",
                "the anchor regularises the softmax models' Adam training; DUQ trains with its own loss",
            ));
        }
        Ok(TrainConfig {
            steps,
            batch_size: batch_size.unwrap_or(self.default_batch_size()),
            lr: lr.unwrap_or(TrainConfig::default().lr),
            anchor,
        })
    }
}

/// What a model can do beyond inference, which decides the evidence it can give: each
/// architecture answers for itself ([`BuiltinModel::capabilities`]), so that no caller asks
/// which architecture it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Gradients through the whole network (autograd, or a model's own fast path): whole-
    /// network and perturbed-input gradient scores. Without it, gradient scores are taken
    /// over the last layer in closed form.
    pub autograd: bool,
    /// Rebuilt with other weights: weight-noise draws.
    pub rebuild: bool,
    /// The model in words, and what runs it, for the errors that name a missing capability.
    pub what: &'static str,
    /// What runs it.
    pub runtime: &'static str,
}

impl Capabilities {
    /// A model alkit builds from candle tensors: every capability.
    pub const CANDLE: Capabilities = Capabilities {
        autograd: true,
        rebuild: true,
        what: "the model",
        runtime: "candle",
    };

    /// Whether nothing is missing.
    pub fn complete(&self) -> bool {
        self.autograd && self.rebuild
    }
}

/// A built-in architecture's settings type: everything the registry asks of a model besides
/// building and training it ([`ModelBuilder`], whose default `fit` is the softmax recipe).
pub trait BuiltinModel: ModelBuilder {
    /// The names this type serves, in the order commands list them.
    fn kinds() -> &'static [KindInfo]
    where
        Self: Sized;

    /// `kind` (one of [`BuiltinModel::kinds`]) sized for items of `item_shape` and `classes`
    /// classes, with its default settings.
    fn for_shape(kind: ModelKind, item_shape: &[usize], classes: usize) -> Self
    where
        Self: Sized;

    /// The name of these settings.
    fn kind(&self) -> ModelKind;

    /// Number of classes (outputs).
    fn classes(&self) -> usize;

    /// An upper bound on the number of weights, from the settings alone (nothing is
    /// allocated); `None` when it overflows.
    fn weights_bound(&self) -> Option<u128>;

    /// Why items of `item_shape` cannot go through this model, if they cannot: the
    /// convolutional models take images `(c, h, w)`, not feature vectors. `None` for models
    /// that flatten whatever they are given.
    fn refuses_items(&self, _item_shape: &[usize]) -> Option<String> {
        None
    }

    /// Whether the model has a dropout layer with a positive rate (what MC-dropout draws need).
    fn has_dropout(&self) -> bool {
        false
    }

    /// DUQ's settings, for the DUQ models.
    fn duq_settings(&self) -> Option<&DuqSettings> {
        None
    }

    /// Records `batch` as the batch size it trains at, for models whose settings carry one
    /// (DUQ's); the softmax models carry none.
    fn set_batch(&mut self, _batch: usize) {}

    /// What the model can do beyond inference ([`Capabilities::CANDLE`]: everything).
    fn capabilities(&self) -> Capabilities {
        Capabilities::CANDLE
    }

    /// The model's own check of the items it takes, for a model alkit cannot build to try
    /// (`None`: build it and run one zero item through it).
    fn check_own_input(&self, _item_shape: &[usize]) -> Option<Result<()>> {
        None
    }
}

/// Refuses a DUQ training whose batch size is not the one its settings record: the
/// architecture records the one it trains with (so that a checkpoint's config says how it was
/// trained); a training asking for another is a caller's mistake, not something to pick
/// between silently.
pub(super) fn check_duq_batch(params: &TrainParams, settings: &DuqSettings) -> Result<()> {
    let cfg = params.config();
    if cfg.batch_size != settings.batch {
        return Err(Error::config(
            "batch_size",
            format!(
                "{} for a DUQ model whose settings say {}; build it with \
                 Arch::with_batch",
                cfg.batch_size, settings.batch
            ),
        ));
    }
    Ok(())
}

/// DUQ's recipe for a model on library layers that `make` builds from a seeded builder and
/// its variables (a DUQ ResNet, the DUQ MLP): the batch its `settings` record checked, then
/// [`train_duq_net`] over `data[indices]`; the model and its state as [`Trained`] (DUQ's loss
/// is not one softmax loss, so no final loss is reported).
#[allow(clippy::too_many_arguments)]
pub(super) fn fit_duq_net(
    settings: &DuqSettings,
    make: impl FnOnce(candle_nn::VarBuilder, &Weights) -> Result<DuqResNet>,
    data: &Dataset,
    indices: &[usize],
    params: &TrainParams,
    rngs: TrainRngs,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<Trained> {
    check_duq_batch(params, settings)?;
    let cfg = params.config();
    let (model, params) = train_duq_net(
        make,
        data,
        indices,
        (cfg.steps, cfg.batch_size),
        (rngs.init, rngs.batches),
        device,
        observer,
    )?;
    Ok(Trained {
        model: Box::new(model),
        params,
        final_loss: f32::NAN,
    })
}

/// `a * b` in `u128`, `None` on overflow (for [`BuiltinModel::weights_bound`]).
pub(super) fn mul(a: usize, b: usize) -> Option<u128> {
    (a as u128).checked_mul(b as u128)
}

/// The sum of the terms, `None` when one is `None` or the sum overflows.
pub(super) fn sum(terms: impl IntoIterator<Item = Option<u128>>) -> Option<u128> {
    terms
        .into_iter()
        .try_fold(0u128, |acc, x| acc.checked_add(x?))
}

/// Why a convolutional model refuses items of `item_shape` (see
/// [`BuiltinModel::refuses_items`]): not an image `(c, h, w)` or `(h, w)` of at least
/// `min` x `min` pixels.
pub(super) fn refuses_non_images(
    kind: ModelKind,
    item_shape: &[usize],
    min: usize,
) -> Option<String> {
    let fits = match item_shape {
        [_, h, w] | [h, w] => *h >= min && *w >= min,
        _ => false,
    };
    (!fits).then(|| {
        format!(
            "model `{kind}` is convolutional and takes images of at least {min}x{min} pixels; \
             the data's items have the shape {item_shape:?}: for feature vectors \
             (embeddings, tables) use `linear`, `mlp` or `duq-mlp`"
        )
    })
}
