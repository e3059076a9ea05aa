//! The registry of built-in models: the closed set [`Arch`] (what a checkpoint's
//! `config.json` records), the [`ModelKind`] a user names on the command line, and how each
//! kind is sized for a data set.
//!
//! It sits above `nn` (the softmax networks), `duq` (the DUQ CNN) and `train` (the training
//! entry), because it is the one place that ties each built-in architecture to the way it is
//! built and trained: `Arch` is a [`ModelBuilder`] whose `fit` is softmax cross-entropy with
//! Adam for the CNN, MLP and ResNets, and DUQ's own loss, penalty and SGD schedule for the DUQ
//! models (on the Fashion-MNIST CNN and on the ResNets' trunks). Adding a
//! built-in model is one config type (with its `new(&cfg, vb)`), one `Arch` variant and one
//! `ModelKind` entry.

use crate::data::Dataset;
use crate::duq::cnn::{train_duq, DuqCnn, DuqCnnArch};
use crate::duq::net::{train_duq_resnet, DuqResNet, DuqResNetArch};
use crate::duq::DuqSettings;
use crate::error::{Error, Result};
use crate::nn::resnet::{resnet, ResNetConfig};
use crate::nn::{Classifier, Cnn, CnnConfig, Mlp, MlpConfig};
use crate::observe::Observer;
use crate::train::{fit_softmax, ModelBuilder, TrainConfig, TrainParams, TrainRngs, Trained};
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
    /// A ResNet ([`crate::nn::resnet`]) from the layer library, softmax-trained.
    Resnet(ResNetConfig),
    /// DUQ on a ResNet's trunk ([`DuqResNet`]): the DUQ paper's CIFAR-10 model, trained with
    /// DUQ's loss, penalty and SGD; the `duq` scorer reads its kernel values.
    DuqResnet(DuqResNetArch),
}

/// The most weights [`Arch::check_input`] lets a model have (2^28, 1 GiB of f32): far above
/// every built-in model, and a bound on what a settings file can make alkit allocate.
pub const MAX_WEIGHTS: u128 = 1 << 28;

impl Arch {
    /// An upper bound on the number of weights, from the settings alone (nothing is
    /// allocated); `None` when it overflows.
    pub fn weights_bound(&self) -> Option<u128> {
        let m = |a: usize, b: usize| (a as u128).checked_mul(b as u128);
        let add = |acc: Option<u128>, x: Option<u128>| acc?.checked_add(x?);
        match self {
            Arch::Mlp(c) => {
                let mut widths = vec![c.inputs];
                widths.extend(&c.hidden);
                widths.push(c.classes);
                widths
                    .windows(2)
                    .map(|w| m(w[0], w[1]).and_then(|x| x.checked_add(w[1] as u128)))
                    .fold(Some(0), add)
            }
            Arch::Cnn(c) => [
                m(32 * 9, c.in_channels),
                m(64 * 32, 9),
                m(c.height, c.width).and_then(|x| x.checked_mul(64 * 128)),
                m(c.classes, 129),
            ]
            .into_iter()
            .fold(Some(0), add),
            Arch::Duq(a) => {
                let [c1, c2, c3] = a.duq.channels;
                let [c0, h, w] = a.item_shape;
                let f = a.duq.features;
                let d = a.duq.settings.centroid_dims;
                [
                    m(c0, c1).and_then(|x| x.checked_mul(9)),
                    m(c1, c2).and_then(|x| x.checked_mul(9)),
                    m(c2, c3).and_then(|x| x.checked_mul(9)),
                    m(h, w).and_then(|x| x.checked_mul(c3 as u128)?.checked_mul(f as u128)),
                    m(d, a.classes).and_then(|x| x.checked_mul(f as u128 + 1)),
                ]
                .into_iter()
                .fold(Some(0), add)
            }
            Arch::Resnet(c) => c.weights_bound(),
            Arch::DuqResnet(a) => {
                let trunk = ResNetConfig {
                    classes: 0,
                    ..a.resnet.clone()
                }
                .weights_bound()?;
                let features: usize = if a.resnet.depth == 50 { 2048 } else { 512 };
                add(
                    Some(trunk),
                    m(a.duq.centroid_dims, a.resnet.classes)
                        .and_then(|x| x.checked_mul(features as u128 + 1)),
                )
            }
        }
    }

    /// Checks that this architecture takes items of `item_shape`, by building it (seeded, on
    /// the CPU) and running one zero item through it: a CNN given tabular rows, or an MLP
    /// sized for other items, is refused when a session or run starts, not at its first query.
    pub fn check_input(&self, item_shape: &[usize]) -> Result<()> {
        let refuse = |e: String| {
            crate::Error::config(
                "model",
                format!(
                    "a {} cannot take items of shape {item_shape:?}: {e}",
                    self.kind().name()
                ),
            )
        };
        let n: usize = item_shape.iter().product();
        if item_shape.is_empty() || n == 0 || n > 1 << 26 {
            return Err(refuse("the shape is empty or too large".into()));
        }
        match self.weights_bound() {
            Some(w) if w <= MAX_WEIGHTS => {}
            w => {
                return Err(refuse(format!(
                    "its settings ask for {} weights; alkit builds at most {MAX_WEIGHTS}",
                    w.map_or("more than 2^128".into(), |w| w.to_string())
                )))
            }
        }
        let (vb, _) = crate::nn::init::seeded(
            crate::rng::stream(0, crate::rng::Purpose::Tool, 0),
            candle_core::DType::F32,
            &Device::Cpu,
        );
        let model = self.build(vb).map_err(|e| refuse(e.to_string()))?;
        let mut dims = vec![1];
        dims.extend_from_slice(item_shape);
        let x = candle_core::Tensor::zeros(dims, candle_core::DType::F32, &Device::Cpu)?;
        let logits = model.predict(&x).map_err(|e| refuse(e.to_string()))?;
        if logits.dims() != [1, self.classes()] {
            return Err(refuse(format!(
                "it gives logits of shape {:?}, expected [1, {}]",
                logits.dims(),
                self.classes()
            )));
        }
        Ok(())
    }

    /// This architecture trained at `batch` items per step: DUQ's settings record it (the
    /// one batch size its training reads); the softmax models carry none.
    pub fn with_batch(self, batch: usize) -> Arch {
        match self {
            Arch::Duq(mut a) => {
                a.duq.settings.batch = batch;
                Arch::Duq(a)
            }
            Arch::DuqResnet(mut a) => {
                a.duq.batch = batch;
                Arch::DuqResnet(a)
            }
            other => other,
        }
    }

    /// DUQ's settings, for the DUQ models.
    pub fn duq_settings(&self) -> Option<&DuqSettings> {
        match self {
            Arch::Duq(a) => Some(&a.duq.settings),
            Arch::DuqResnet(a) => Some(&a.duq),
            _ => None,
        }
    }

    /// Whether the model has a dropout layer with a positive rate (what MC-dropout draws need).
    pub fn has_dropout(&self) -> bool {
        match self {
            Arch::Cnn(c) => c.dropout > 0.0,
            Arch::Mlp(c) => c.dropout > 0.0,
            Arch::Duq(_) | Arch::Resnet(_) | Arch::DuqResnet(_) => false,
        }
    }

    /// Refuses, before anything trains, strategy `name` reading evidence this model cannot
    /// give: DUQ's kernel values from a model that is not DUQ, MC-dropout draws from one
    /// without dropout (an ensemble's members give sample scorers their draws instead).
    pub fn check_needs(&self, name: &str, needs: &alkit_acquisition::Needs) -> Result<()> {
        let model = self.kind().name();
        if needs.kernel && !self.kind().is_duq() {
            return Err(crate::Error::config(
                "scorer",
                format!(
                    "`{name}` reads DUQ's kernel values; --model {model} is not a DUQ model \
                     (duq, duq-resnet18, ...)"
                ),
            ));
        }
        let mc = matches!(
            needs.samples,
            Some(alkit_acquisition::SampleRequest::McDropout { .. })
        );
        if mc && !self.has_dropout() {
            return Err(crate::Error::config(
                "scorer",
                format!(
                    "`{name}` needs MC-dropout draws; --model {model} has no dropout layer, so \
                     every draw would be the same: use --ensemble K for its draws, or a model \
                     with dropout (cnn)"
                ),
            ));
        }
        Ok(())
    }

    /// Number of classes (outputs).
    pub fn classes(&self) -> usize {
        match self {
            Arch::Cnn(c) => c.classes,
            Arch::Mlp(c) => c.classes,
            Arch::Duq(a) => a.classes,
            Arch::Resnet(c) => c.classes,
            Arch::DuqResnet(a) => a.resnet.classes,
        }
    }

    /// The kind of this architecture.
    pub fn kind(&self) -> ModelKind {
        match self {
            Arch::Cnn(_) => ModelKind::Cnn,
            Arch::Mlp(_) => ModelKind::Mlp,
            Arch::Duq(_) => ModelKind::Duq,
            Arch::Resnet(c) => match c.depth {
                34 => ModelKind::Resnet34,
                50 => ModelKind::Resnet50,
                _ => ModelKind::Resnet18,
            },
            Arch::DuqResnet(a) => match a.resnet.depth {
                34 => ModelKind::DuqResnet34,
                50 => ModelKind::DuqResnet50,
                _ => ModelKind::DuqResnet18,
            },
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
            ModelKind::Resnet18
            | ModelKind::Resnet34
            | ModelKind::Resnet50
            | ModelKind::DuqResnet18
            | ModelKind::DuqResnet34
            | ModelKind::DuqResnet50 => {
                let (c, h, w) = match item_shape {
                    [c, h, w] => (*c, *h, *w),
                    [h, w] => (1, *h, *w),
                    _ => (1, 32, 32),
                };
                let resnet = ResNetConfig {
                    depth: match kind {
                        ModelKind::Resnet34 | ModelKind::DuqResnet34 => 34,
                        ModelKind::Resnet50 | ModelKind::DuqResnet50 => 50,
                        _ => 18,
                    },
                    stem: ResNetConfig::stem_for(h, w),
                    in_channels: c,
                    classes,
                };
                if kind.is_duq() {
                    let mut duq = DuqSettings::cifar();
                    duq.centroid_dims = if resnet.depth == 50 { 2048 } else { 512 };
                    Arch::DuqResnet(DuqResNetArch { resnet, duq })
                } else {
                    Arch::Resnet(resnet)
                }
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
            Arch::Resnet(c) => Box::new(resnet(c, vb)?),
            Arch::DuqResnet(a) => Box::new(
                DuqResNet::resnet_from(a, vb)
                    .map_err(|e| candle_core::Error::Msg(e.to_string()))?,
            ),
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
            Arch::Cnn(_) | Arch::Mlp(_) | Arch::Resnet(_) => fit_softmax(
                &|vb| self.build(vb),
                data,
                indices,
                params,
                rngs,
                device,
                observer,
            ),
            Arch::Duq(_) | Arch::DuqResnet(_) => {
                let cfg = params.config();
                let settings = self.duq_settings().expect("a DUQ architecture");
                // One batch size: the architecture records the one it trains with (so that a
                // checkpoint's config says how it was trained); a training asking for another
                // is a caller's mistake, not something to pick between silently.
                if cfg.batch_size != settings.batch {
                    return Err(crate::Error::config(
                        "batch_size",
                        format!(
                            "{} for a DUQ model whose settings say {}; build it with \
                             Arch::with_batch",
                            cfg.batch_size, settings.batch
                        ),
                    ));
                }
                if let Arch::DuqResnet(arch) = self {
                    let (model, params) = train_duq_resnet(
                        arch,
                        data,
                        indices,
                        (cfg.steps, cfg.batch_size),
                        (rngs.init, rngs.batches),
                        device,
                        observer,
                    )?;
                    return Ok(Trained {
                        model: Box::new(model),
                        params,
                        final_loss: f32::NAN,
                    });
                }
                let Arch::Duq(arch) = self else {
                    unreachable!("matched above")
                };
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
    /// ResNet-18 (BasicBlock), the CIFAR stem below 64 pixels a side, else ImageNet's.
    Resnet18,
    /// ResNet-34 (BasicBlock).
    Resnet34,
    /// ResNet-50 (Bottleneck).
    Resnet50,
    /// DUQ on ResNet-18's trunk (the DUQ paper's CIFAR-10 model; its settings:
    /// [`DuqSettings::cifar`]).
    DuqResnet18,
    /// DUQ on ResNet-34's trunk.
    DuqResnet34,
    /// DUQ on ResNet-50's trunk (2048 features and centroid size).
    DuqResnet50,
}

impl ModelKind {
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
                "--lr sets Adam's rate of the softmax models; DUQ trains with SGD at its own schedule",
            ));
        }
        if self.is_duq() && anchor.is_some() {
            return Err(Error::config(
                "anchor",
                "--anchor regularises the softmax models' Adam training; DUQ trains with its own loss",
            ));
        }
        Ok(TrainConfig {
            steps,
            batch_size: batch_size.unwrap_or(self.default_batch_size()),
            lr: lr.unwrap_or(TrainConfig::default().lr),
            anchor,
        })
    }

    /// Every built-in model, in the order commands list them.
    pub const ALL: [ModelKind; 9] = [
        ModelKind::Cnn,
        ModelKind::Mlp,
        ModelKind::Duq,
        ModelKind::Resnet18,
        ModelKind::Resnet34,
        ModelKind::Resnet50,
        ModelKind::DuqResnet18,
        ModelKind::DuqResnet34,
        ModelKind::DuqResnet50,
    ];

    /// The training batch size when none is given: DUQ's paper settings (128, from
    /// [`crate::duq::cnn::DuqCnnConfig`]'s defaults and [`DuqSettings::cifar`]), else
    /// [`crate::train::TrainConfig`]'s (32).
    pub fn default_batch_size(self) -> usize {
        match self {
            ModelKind::Duq => crate::duq::cnn::DuqCnnConfig::default().settings.batch,
            k if k.is_duq() => DuqSettings::cifar().batch,
            _ => crate::train::TrainConfig::default().batch_size,
        }
    }

    /// Whether this is one of the ResNets, DUQ's included (timed on colour 32x32 items by
    /// `alkit bench`).
    pub fn is_resnet(self) -> bool {
        !matches!(self, ModelKind::Cnn | ModelKind::Mlp | ModelKind::Duq)
    }

    /// Whether this model is DUQ (trained with its own loss and SGD schedule, scored by `duq`).
    pub fn is_duq(self) -> bool {
        matches!(
            self,
            ModelKind::Duq
                | ModelKind::DuqResnet18
                | ModelKind::DuqResnet34
                | ModelKind::DuqResnet50
        )
    }

    /// The name users type.
    pub fn name(self) -> &'static str {
        match self {
            ModelKind::Cnn => "cnn",
            ModelKind::Mlp => "mlp",
            ModelKind::Duq => "duq",
            ModelKind::Resnet18 => "resnet18",
            ModelKind::Resnet34 => "resnet34",
            ModelKind::Resnet50 => "resnet50",
            ModelKind::DuqResnet18 => "duq-resnet18",
            ModelKind::DuqResnet34 => "duq-resnet34",
            ModelKind::DuqResnet50 => "duq-resnet50",
        }
    }

    /// The kind named `name`, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }
}
