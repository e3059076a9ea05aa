//! The registry of built-in models: the closed set [`Arch`] (what a checkpoint's
//! `config.json` records), the [`ModelKind`] a user names on the command line, and how each
//! kind is sized for a data set.
//!
//! It sits above `nn` (the softmax networks), `duq` (the DUQ CNN) and `train` (the training
//! entry), because it is the one place that ties each built-in architecture to the way it is
//! built and trained: `Arch` is a [`ModelBuilder`] whose `fit` is softmax cross-entropy with
//! Adam for the CNN and MLP, and DUQ's own loss, penalty and SGD schedule for DUQ. Adding a
//! built-in model is one config type (with its `new(&cfg, vb)`), one `Arch` variant and one
//! `ModelKind` entry.

use crate::data::Dataset;
use crate::duq::cnn::{train_duq, DuqCnn, DuqCnnArch};
use crate::error::Result;
use crate::nn::{Classifier, Cnn, CnnConfig, Mlp, MlpConfig};
use crate::observe::Observer;
use crate::train::{fit_softmax, ModelBuilder, TrainParams, TrainRngs, Trained};
use candle_core::Device;
use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

/// The built-in architectures: a closed set, serialised into checkpoints' `config.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Arch {
    /// [`Cnn`].
    Cnn(CnnConfig),
    /// [`Mlp`].
    Mlp(MlpConfig),
    /// DUQ on the Fashion-MNIST CNN ([`DuqCnn`]): trained with its own loss (BCE + gradient
    /// penalty) and SGD; the `duq` scorer reads its kernel values.
    Duq(DuqCnnArch),
}

impl Arch {
    /// Number of classes (outputs).
    pub fn classes(&self) -> usize {
        match self {
            Arch::Cnn(c) => c.classes,
            Arch::Mlp(c) => c.classes,
            Arch::Duq(a) => a.classes,
        }
    }

    /// The kind of this architecture.
    pub fn kind(&self) -> ModelKind {
        match self {
            Arch::Cnn(_) => ModelKind::Cnn,
            Arch::Mlp(_) => ModelKind::Mlp,
            Arch::Duq(_) => ModelKind::Duq,
        }
    }

    /// `kind` sized for items of `item_shape` and `classes` classes, with its default
    /// settings (see [`ModelKind`]).
    pub fn for_shape(kind: ModelKind, item_shape: &[usize], classes: usize) -> Self {
        match kind {
            ModelKind::Cnn => Arch::Cnn(CnnConfig::standard(item_shape, classes)),
            ModelKind::Mlp => Arch::Mlp(MlpConfig {
                inputs: item_shape.iter().product(),
                hidden: vec![256, 128],
                classes,
                dropout: 0.0,
            }),
            ModelKind::Duq => {
                // Other shapes get a 1x28x28 model, which then refuses them with a clear error.
                let shape = match item_shape {
                    [c, h, w] => [*c, *h, *w],
                    _ => [1, 28, 28],
                };
                Arch::Duq(DuqCnnArch {
                    item_shape: shape,
                    classes,
                    duq: Default::default(),
                })
            }
        }
    }

    /// `kind` sized for `data` (its item shape and class count).
    pub fn for_data(kind: ModelKind, data: &Dataset) -> Self {
        Self::for_shape(kind, data.item_shape(), data.classes())
    }

    /// The architecture a labeling session uses by default: the REGrad CNN for images at
    /// least 10x10, an MLP 256-128 for everything else.
    pub fn default_for(item_shape: &[usize], classes: usize) -> Self {
        let kind = match item_shape {
            [_, h, w] if *h >= 10 && *w >= 10 => ModelKind::Cnn,
            _ => ModelKind::Mlp,
        };
        Self::for_shape(kind, item_shape, classes)
    }
}

impl ModelBuilder for Arch {
    fn build(&self, vb: VarBuilder) -> candle_core::Result<Box<dyn Classifier>> {
        Ok(match self {
            Arch::Cnn(c) => Box::new(Cnn::new(c, vb)?),
            Arch::Mlp(c) => Box::new(Mlp::new(c, vb)?),
            Arch::Duq(a) => {
                Box::new(DuqCnn::new(a, vb).map_err(|e| candle_core::Error::Msg(e.to_string()))?)
            }
        })
    }

    fn fit(
        &self,
        data: &Dataset,
        indices: &[usize],
        params: &TrainParams,
        rngs: TrainRngs,
        device: &Device,
        observer: &mut dyn Observer,
    ) -> Result<Trained> {
        match self {
            Arch::Cnn(_) | Arch::Mlp(_) => fit_softmax(
                &|vb| self.build(vb),
                data,
                indices,
                params,
                rngs,
                device,
                observer,
            ),
            Arch::Duq(arch) => {
                let cfg = params.config();
                let (model, params) = train_duq(
                    arch,
                    data,
                    indices,
                    cfg.steps,
                    cfg.batch_size,
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
        }
    }
}

/// The built-in models a user can name (`--model`): the registry's entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelKind {
    /// The REGrad paper's small CNN (image inputs).
    Cnn,
    /// A ReLU MLP 256-128 (any input, flattened), no dropout.
    Mlp,
    /// DUQ (van Amersfoort et al. 2020) on the paper's Fashion-MNIST CNN with batch norm.
    Duq,
}

impl ModelKind {
    /// Every built-in model, in the order commands list them.
    pub const ALL: [ModelKind; 3] = [ModelKind::Cnn, ModelKind::Mlp, ModelKind::Duq];

    /// The name users type.
    pub fn name(self) -> &'static str {
        match self {
            ModelKind::Cnn => "cnn",
            ModelKind::Mlp => "mlp",
            ModelKind::Duq => "duq",
        }
    }

    /// The kind named `name`, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }
}
