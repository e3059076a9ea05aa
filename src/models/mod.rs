//! The registry of built-in models: the closed set [`Arch`] (what a checkpoint's
//! `config.json` records), one file per architecture, and the names users type
//! ([`ModelKind`]).
//!
//! Each built-in architecture is a settings type implementing [`BuiltinModel`] in its own file
//! (`cnn`, `mlp`, `duq`, `resnet`, `duq_resnet`, `duq_mlp`): how it is sized for data, built from a
//! `VarBuilder` and trained (softmax cross-entropy with Adam for the CNN, MLP and ResNets;
//! DUQ's own loss, penalty and SGD schedule for the DUQ models), and what evidence it can give.
//! The module sits above `nn`, `duq` and `train` because it ties each of them to its recipe.
//! Adding a built-in model is its file and one line in the `registry!` below. The regression
//! models (Gaussian heads) are the closed set [`GaussKind`] (`gauss`), the multi-label models
//! (sigmoid heads) the closed set [`SigmoidKind`] (`sigmoid`).

mod builtin;
mod cnn;
mod duq;
mod duq_mlp;
mod duq_resnet;
mod gauss;
mod mlp;
mod onnx;
mod resnet;
mod sigmoid;

pub use builtin::{BuiltinModel, Capabilities, KindInfo, ModelKind};
pub use gauss::GaussKind;
pub use onnx::OnnxArch;
pub use sigmoid::SigmoidKind;

use crate::data::Dataset;
use crate::duq::cnn::DuqCnnArch;
use crate::duq::net::{DuqMlpArch, DuqResNetArch};
use crate::duq::DuqSettings;
use crate::error::{Error, Result};
use crate::nn::resnet::ResNetConfig;
use crate::nn::{Classifier, CnnConfig, MlpConfig};
use crate::observe::Observer;
use crate::train::{ModelBuilder, TrainParams, TrainRngs, Trained};
use candle_core::Device;
use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

/// Declares the built-in architectures: the [`Arch`] enum (serialised into checkpoints'
/// `config.json` by its variant names) and the dispatch from it to each settings type.
macro_rules! registry {
    ($($(#[$doc:meta])* $variant:ident($ty:ty),)*) => {
        /// The built-in architectures: a closed set, serialised into checkpoints' `config.json`.
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        #[serde(tag = "kind", rename_all = "kebab-case")]
        pub enum Arch {
            $($(#[$doc])* $variant($ty),)*
        }

        impl Arch {
            /// The settings as their built-in model's own type.
            pub fn spec(&self) -> &dyn BuiltinModel {
                match self {
                    $(Arch::$variant(a) => a,)*
                }
            }

            fn spec_mut(&mut self) -> &mut dyn BuiltinModel {
                match self {
                    $(Arch::$variant(a) => a,)*
                }
            }

            /// `kind` sized for items of `item_shape` and `classes` classes, with its default
            /// settings (see [`ModelKind`]).
            pub fn for_shape(kind: ModelKind, item_shape: &[usize], classes: usize) -> Self {
                $(
                    if <$ty as BuiltinModel>::kinds().iter().any(|k| k.name == kind.name()) {
                        return Arch::$variant(<$ty as BuiltinModel>::for_shape(
                            kind, item_shape, classes,
                        ));
                    }
                )*
                unreachable!("every kind is a registry entry's")
            }
        }

        impl ModelKind {
            /// Every built-in model, in the order commands list them.
            pub fn all() -> impl Iterator<Item = ModelKind> {
                [$(<$ty as BuiltinModel>::kinds(),)*]
                    .into_iter()
                    .flatten()
                    .map(ModelKind::new)
            }
        }
    };
}

registry! {
    /// [`crate::nn::Cnn`].
    Cnn(CnnConfig),
    /// [`crate::nn::Mlp`].
    Mlp(MlpConfig),
    /// DUQ on the Fashion-MNIST CNN ([`crate::duq::cnn::DuqCnn`]): trained with its own loss
    /// (BCE + gradient penalty) and SGD; the `duq` scorer reads its kernel values.
    Duq(DuqCnnArch),
    /// A ResNet ([`crate::nn::resnet`]) from the layer library, softmax-trained.
    Resnet(ResNetConfig),
    /// DUQ on a ResNet's trunk ([`crate::duq::net::DuqResNet`]): the DUQ paper's CIFAR-10
    /// model, trained with DUQ's loss, penalty and SGD; the `duq` scorer reads its kernel
    /// values.
    DuqResnet(DuqResNetArch),
    /// DUQ on a ReLU MLP over flattened items ([`crate::duq::net::DuqMlpArch`]): the DUQ head
    /// for embedding files and frozen backbones.
    DuqMlp(DuqMlpArch),
    /// An ONNX model ([`OnnxArch`]): opened from a `.onnx` file and run by ONNX Runtime,
    /// never built or trained here (it names no kind users can ask for).
    Onnx(OnnxArch),
}

/// The most weights [`Arch::check_input`] lets a model have (2^28, 1 GiB of f32): far above
/// every built-in model, and a bound on what a settings file can make alkit allocate.
pub const MAX_WEIGHTS: u128 = 1 << 28;

impl Arch {
    /// An upper bound on the number of weights, from the settings alone (nothing is
    /// allocated); `None` when it overflows.
    pub fn weights_bound(&self) -> Option<u128> {
        self.spec().weights_bound()
    }

    /// Checks that this architecture takes items of `item_shape`, by building it (all weights
    /// zero, on the CPU) and running one zero item through it: a CNN given tabular rows, or an MLP
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
        if let Some(own) = self.spec().check_own_input(item_shape) {
            return own;
        }
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
        let (vb, _) = crate::nn::init::shapes(candle_core::DType::F32, &Device::Cpu);
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
    pub fn with_batch(mut self, batch: usize) -> Arch {
        self.spec_mut().set_batch(batch);
        self
    }

    /// DUQ's settings, for the DUQ models.
    pub fn duq_settings(&self) -> Option<&DuqSettings> {
        self.spec().duq_settings()
    }

    /// Whether the model has a dropout layer with a positive rate (what MC-dropout draws need).
    pub fn has_dropout(&self) -> bool {
        self.spec().has_dropout()
    }

    /// What the model can do beyond inference.
    pub fn capabilities(&self) -> Capabilities {
        self.spec().capabilities()
    }

    /// Refuses, before anything trains, strategy `name` reading evidence this model cannot
    /// give: DUQ's kernel values from a model that is not DUQ, MC-dropout draws from one
    /// without dropout (an ensemble's members give sample scorers their draws instead),
    /// whole-network gradients and weight-noise draws from an ONNX model (no autograd, and
    /// alkit cannot rebuild it; its last layer's gradients are closed forms).
    pub fn check_needs(&self, name: &str, needs: &alkit_acquisition::Needs) -> Result<()> {
        let model = self.kind().name();
        if needs.is_regression() {
            return Err(crate::Error::config(
                "scorer",
                format!(
                    "`{name}` scores a regression model's Gaussian predictions, and a {model} \
                     is a classifier: run it with task regression on numeric targets"
                ),
            ));
        }
        if needs.is_multi_label() {
            return Err(crate::Error::config(
                "scorer",
                format!(
                    "`{name}` scores a multi-label model's label probabilities, and a {model} \
                     is a single-label classifier: run it with task multi-label on label sets"
                ),
            ));
        }
        let weight_noise = matches!(
            needs.samples,
            Some(alkit_acquisition::SampleRequest::WeightNoise { .. })
        );
        let whole_network = needs
            .grads
            .is_some_and(|g| g.layers == alkit_acquisition::GradLayers::All);
        let can = self.capabilities();
        let (what, runtime) = (can.what, can.runtime);
        if whole_network && !can.autograd {
            return Err(crate::Error::config(
                "scorer",
                format!(
                    "`{name}` reads gradients through the whole network; {what} runs in \
                     {runtime}, which has no autograd: take them over its last layer (setting \
                     `layers` last)"
                ),
            ));
        }
        let last = alkit_acquisition::GradLayers::Last;
        let laplace = matches!(
            needs.samples,
            Some(
                alkit_acquisition::SampleRequest::Laplace { .. }
                    | alkit_acquisition::SampleRequest::InsertedDropout { .. }
            )
        );
        let reads_last_layer =
            needs.features || laplace || needs.grads.is_some_and(|g| g.layers == last);
        if laplace && self.kind().is_duq() {
            return Err(crate::Error::config(
                "posterior",
                format!(
                    "`{name}` draws through the last linear layer (setting `posterior` laplace \
                     or inserted-dropout); a {model} ends in an RBF head (setting `posterior` \
                     mc-dropout, or the `duq` score)"
                ),
            ));
        }
        if reads_last_layer && self.kind().is_duq() {
            return Err(crate::Error::config(
                "layers",
                format!(
                    "`{name}` reads the penultimate features and the last linear layer; a \
                     {model} ends in an RBF head, not a linear layer (gradient scores: every \
                     layer, setting `layers` all)"
                ),
            ));
        }
        let perturbed = needs.grads.is_some_and(|g| g.perturbations > 0);
        if perturbed && !can.autograd {
            return Err(crate::Error::config(
                "scorer",
                format!(
                    "`{name}` averages gradients over perturbed copies of the input; {what} \
                     gives its last layer's gradients only, at the item itself"
                ),
            ));
        }
        let adversarial = matches!(
            needs.samples,
            Some(alkit_acquisition::SampleRequest::Adversarial { .. })
        );
        if adversarial && !can.autograd {
            return Err(crate::Error::config(
                "scorer",
                format!(
                    "`{name}` moves each input along the gradient of its loss; {what} runs in \
                     {runtime}, which has no autograd"
                ),
            ));
        }
        if weight_noise && !can.rebuild {
            return Err(crate::Error::config(
                "scorer",
                format!(
                    "`{name}` perturbs the model's weights; {what} runs in {runtime} and cannot \
                     be rebuilt with other weights"
                ),
            ));
        }
        if needs.kernel && !self.kind().is_duq() {
            return Err(crate::Error::config(
                "scorer",
                format!(
                    "`{name}` reads DUQ's kernel values; model `{model}` is not a DUQ model \
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
                    "`{name}` needs MC-dropout draws; model `{model}` has no dropout layer, so \
                     every draw would be the same: use a model with dropout (`cnn` for images, \
                     `mlp-dropout` for feature vectors), or where a run trains one (curve, \
                     init, bench), an ensemble (setting `ensemble`)"
                ),
            ));
        }
        Ok(())
    }

    /// Number of classes (outputs).
    pub fn classes(&self) -> usize {
        self.spec().classes()
    }

    /// The kind of this architecture.
    pub fn kind(&self) -> ModelKind {
        self.spec().kind()
    }

    /// `kind` sized for `data` (its item shape and class count).
    pub fn for_data(kind: ModelKind, data: &Dataset) -> Self {
        Self::for_shape(kind, data.item_shape(), data.classes())
    }

    /// The architecture a labeling session uses by default: the REGrad CNN for images at
    /// least 10x10, an MLP 256-128 for everything else.
    pub fn default_for(item_shape: &[usize], classes: usize) -> Self {
        let kind = match item_shape {
            [_, h, w] if *h >= 10 && *w >= 10 => ModelKind::named("cnn"),
            _ => ModelKind::named("mlp"),
        };
        Self::for_shape(kind, item_shape, classes)
    }
}

impl ModelBuilder for Arch {
    fn build(&self, vb: VarBuilder) -> candle_core::Result<Box<dyn Classifier>> {
        self.spec().build(vb)
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
        if let Some(why) = self.spec().refuses_items(data.item_shape()) {
            return Err(crate::Error::config("model", why));
        }
        self.spec()
            .fit(data, indices, params, rngs, device, observer)
    }
}

impl ModelKind {
    /// The kind named `name`, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::all().find(|k| k.name() == name)
    }

    /// The built-in kind `name`, which the library's own defaults name.
    pub(crate) fn named(name: &str) -> Self {
        Self::from_name(name).expect("a built-in model's name")
    }
}

impl std::str::FromStr for ModelKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        ModelKind::from_name(s).ok_or_else(|| {
            let names: Vec<_> = ModelKind::all().map(ModelKind::name).collect();
            Error::config(
                "model",
                format!("unknown model `{s}`; expected one of: {}", names.join(", ")),
            )
        })
    }
}
