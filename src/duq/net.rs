//! DUQ on any stack of library layers ([`crate::nn::net`]), ResNets included (the DUQ paper's
//! CIFAR-10 model is a ResNet-18).
//!
//! [`NetExtractor`] runs the stack with a differentiable [`Tape`]: the forward keeps what each
//! layer's backward needs without detaching it, and [`Extractor::input_gradient`] goes back
//! through the layers' own vector-Jacobian products (convolutions as their transposes, max-pools
//! routed to each window's first maximum, ReLU masks, batch norm through its batch statistics
//! in training mode), all ordinary differentiable candle ops or custom ops with a backward, so
//! the gradient penalty's parameter gradient comes from a first-order backward, exactly. No
//! extractor-specific code: a layer that implements [`crate::nn::net::Layer`] is covered.

use super::extractor::{Duq, Extractor};
use super::head::{DuqSettings, Penalty, RbfHead};
use crate::error::{Error, Result};
use crate::nn::init::{seeded, Weights};
use crate::nn::layers::nchw_to_nhwc;
use crate::nn::net::{Ctx, Flatten, Layer, Linear, Relu, Sequential, Tape};
use crate::nn::resnet::{resnet_trunk_of_width, ResNetConfig};
use crate::observe::Observer;
use crate::rng::Rng;
use candle_core::{DType, Device, Tensor, Var};
use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

/// A layer stack from `(b, c, h, w)` images (or `(b, f)` vectors) to features `(b, d)`.
pub struct NetExtractor {
    body: Sequential,
    features: usize,
    vars: Vec<Var>,
}

impl NetExtractor {
    /// `body` giving `features` features; its trainable variables are those of `params` (the
    /// builder's parameters, batch-norm buffers left out). A stack with dropout is refused:
    /// DUQ's passes draw no masks, so the dropout would silently do nothing.
    pub fn new(body: Sequential, features: usize, params: &Weights) -> Result<Self> {
        if body.first_stochastic().is_some() {
            return Err(Error::config(
                "duq",
                "a DUQ feature extractor takes no dropout layer (DUQ's passes draw no masks)",
            ));
        }
        Ok(Self {
            body,
            features,
            vars: params.trainable(),
        })
    }

    fn input(x: &Tensor) -> Result<Tensor> {
        Ok(match x.rank() {
            4 => nchw_to_nhwc(x)?,
            _ => x.clone(),
        })
    }
}

/// The forward's tape and the input's shape.
pub struct NetCache {
    tape: Tape,
    dims: Vec<usize>,
}

impl Extractor for NetExtractor {
    type Cache = NetCache;

    fn features(&self) -> usize {
        self.features
    }

    fn forward(&self, x: &Tensor, train: bool) -> Result<(Tensor, NetCache)> {
        let mut ctx = Ctx::differentiable(train);
        let f = self.body.forward(&Self::input(x)?, &mut ctx)?;
        if f.dims() != [x.dim(0)?, self.features] {
            return Err(Error::config(
                "duq",
                format!(
                    "the feature extractor gives {:?}, not ({}, {}) features",
                    f.dims(),
                    x.dim(0)?,
                    self.features
                ),
            ));
        }
        let tape = ctx
            .take_tape()
            .ok_or_else(|| Error::config("duq", "a differentiable pass lost its tape"))?;
        Ok((
            f,
            NetCache {
                tape,
                dims: x.dims().to_vec(),
            },
        ))
    }

    /// The layers' own backward from `v`, on the forward's tape.
    fn input_gradient(&self, v: &Tensor, cache: &NetCache) -> Result<Tensor> {
        let mut tape = cache.tape.clone();
        tape.rewind();
        let g = self.body.backward(v, &mut tape)?;
        Ok(match cache.dims[..] {
            [b, c, h, w] => g
                .reshape((b, h, w, c))?
                .permute((0, 3, 1, 2))?
                .contiguous()?,
            _ => g,
        })
    }

    fn embed(&self, x: &Tensor) -> Result<Tensor> {
        Ok(self
            .body
            .forward(&Self::input(&x.detach())?, &mut Ctx::inference())?
            .detach())
    }

    fn vars(&self) -> Vec<Var> {
        self.vars.clone()
    }
}

/// DUQ on a ResNet trunk (stem, four stages, global average pooling): tensors by torchvision's
/// names for the trunk, the RBF head's as [`RbfHead::from_vb`] names them.
pub type DuqResNet = Duq<NetExtractor>;

impl Duq<NetExtractor> {
    /// DUQ on the ResNet `cfg` describes (`cfg.classes` classes), every tensor from `vb`
    /// (seeded for training, loaded for a checkpoint); `params` are `vb`'s variables.
    pub fn resnet(
        cfg: &ResNetConfig,
        duq: &DuqSettings,
        vb: VarBuilder,
        params: &Weights,
    ) -> Result<Self> {
        Self::resnet_of_width(cfg, 64, duq, vb, params)
    }

    /// [`Duq::resnet`] on a trunk of `base` channels
    /// ([`crate::nn::resnet::resnet_trunk_of_width`]; every ResNet's is 64).
    pub fn resnet_of_width(
        cfg: &ResNetConfig,
        base: usize,
        duq: &DuqSettings,
        vb: VarBuilder,
        params: &Weights,
    ) -> Result<Self> {
        let (trunk, features) = resnet_trunk_of_width(cfg, base, vb.clone())?;
        // Before the head exists in `params`: the extractor's variables are the trunk's, and
        // the head's `W` is added once by `Duq` (its centroid state is never optimised).
        let extractor = NetExtractor::new(trunk, features, params)?;
        let head = RbfHead::from_vb(
            features,
            cfg.classes,
            duq.centroid_dims,
            (duq.sigma, duq.gamma),
            (duq.w_std, duq.n_init),
            vb.pp("duq"),
        )?;
        Duq::from_parts(extractor, head, cfg.classes, duq)
    }
}

impl DuqSettings {
    /// The DUQ paper's CIFAR-10 ResNet-18 settings (its reference `train_duq_cifar.py`):
    /// centroids of the 512 features' size, length scale 0.1, `gamma` 0.999, two-sided
    /// penalty with `lambda` 0.75, SGD lr 0.05, momentum 0.9, weight decay 5e-4, batch 128,
    /// 75 epochs dropping x0.2 after 25 and 50. `w_std` and `n_init` are those of the
    /// Fashion-MNIST model.
    pub fn cifar() -> Self {
        Self {
            centroid_dims: 512,
            sigma: 0.1,
            gamma: 0.999,
            lambda: 0.75,
            penalty: Penalty::TwoSided,
            lr: 0.05,
            momentum: 0.9,
            weight_decay: 5e-4,
            batch: 128,
            epochs: 75,
            milestones: vec![25, 50],
            lr_factor: 0.2,
            w_std: 0.05,
            n_init: 12.0,
        }
    }
}

/// DUQ on a ResNet: what a checkpoint's `config.json` records for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DuqResNetArch {
    /// The ResNet whose trunk extracts the features; its `classes` are DUQ's classes.
    pub resnet: ResNetConfig,
    /// Head, loss, optimiser and schedule.
    pub duq: DuqSettings,
}

impl Duq<NetExtractor> {
    /// The model `arch` describes with every tensor from `vb` (loaded from a checkpoint): the
    /// trunk by torchvision's names, the head as `duq.{weight,m,counts}`.
    pub fn resnet_from(arch: &DuqResNetArch, vb: VarBuilder) -> Result<Self> {
        Self::resnet(
            &arch.resnet,
            &arch.duq,
            vb,
            &Weights::from_named(Vec::new()),
        )
    }

    /// Every tensor by name with its current value, the centroid state included: what a
    /// checkpoint saves. `params` are the variables the model was built from (a seeded
    /// builder's): the trunk's running statistics and the head's `W` share their storage, the
    /// centroid sums and counts are replaced at each update and are taken from the head.
    pub fn state(&self, params: &Weights) -> Result<Weights> {
        let (m, counts) = self.head().buffers();
        let mut named = Vec::new();
        for (name, var) in params.named() {
            let t = match name.as_str() {
                "duq.m" => m.clone(),
                "duq.counts" => counts.clone(),
                _ => var.as_tensor().clone(),
            };
            named.push((name, Var::from_tensor(&t.detach().copy()?)?));
        }
        Ok(Weights::from_named(named))
    }
}

/// DUQ on a ReLU MLP over flattened items: a DUQ head for features computed elsewhere (an
/// embedding file, a frozen backbone's cache), what a checkpoint's `config.json` records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DuqMlpArch {
    /// Input values per item (the item shape's product).
    pub inputs: usize,
    /// Hidden widths, each a linear layer and a ReLU; the last is the features' size.
    pub hidden: Vec<usize>,
    /// Number of classes.
    pub classes: usize,
    /// Head, loss, optimiser and schedule.
    pub duq: DuqSettings,
}

impl Duq<NetExtractor> {
    /// The model `arch` describes, every tensor from `vb` (seeded for training, loaded for a
    /// checkpoint): the layers as `fc{i}.{weight,bias}`, the head as `duq.{weight,m,counts}`;
    /// `params` are `vb`'s variables.
    pub fn mlp(arch: &DuqMlpArch, vb: VarBuilder, params: &Weights) -> Result<Self> {
        if arch.inputs == 0 || arch.hidden.is_empty() || arch.hidden.contains(&0) {
            return Err(Error::config(
                "hidden",
                format!(
                    "a DUQ MLP needs inputs and at least one hidden layer, all widths positive                      (inputs {}, hidden {:?})",
                    arch.inputs, arch.hidden
                ),
            ));
        }
        let mut body = Sequential::new().with(Flatten);
        let mut inputs = arch.inputs;
        for (i, &width) in arch.hidden.iter().enumerate() {
            body = body
                .with(Linear::new(
                    inputs,
                    width,
                    true,
                    vb.pp(format!("fc{}", i + 1)),
                )?)
                .with(Relu);
            inputs = width;
        }
        let extractor = NetExtractor::new(body, inputs, params)?;
        let d = &arch.duq;
        let head = RbfHead::from_vb(
            inputs,
            arch.classes,
            d.centroid_dims,
            (d.sigma, d.gamma),
            (d.w_std, d.n_init),
            vb.pp("duq"),
        )?;
        Duq::from_parts(extractor, head, arch.classes, d)
    }
}

/// Trains a fresh DUQ ResNet `arch` describes for `steps` SGD steps of `batch` items of
/// `data[indices]` ([`Duq::fit_steps`]), every parameter drawn from `init` (the trunk as
/// [`crate::nn::resnet`] initialises it, the head as [`RbfHead::from_vb`]); returns the model
/// and its state by name.
#[allow(clippy::too_many_arguments)]
pub fn train_duq_resnet(
    arch: &DuqResNetArch,
    data: &crate::data::Dataset,
    indices: &[usize],
    steps: (usize, usize),
    rngs: (Rng, Rng),
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<(DuqResNet, Weights)> {
    train_duq_net(
        |vb, params| Duq::resnet(&arch.resnet, &arch.duq, vb, params),
        data,
        indices,
        steps,
        rngs,
        device,
        observer,
    )
}

/// Trains a fresh DUQ model on library layers that `make` builds from a seeded builder and its
/// variables, for `steps` SGD steps of `batch` items of `data[indices]` ([`Duq::fit_steps`]),
/// every parameter drawn from `init`; returns the model and its state by name.
#[allow(clippy::too_many_arguments)]
pub fn train_duq_net(
    make: impl FnOnce(VarBuilder, &Weights) -> Result<DuqResNet>,
    data: &crate::data::Dataset,
    indices: &[usize],
    (steps, batch): (usize, usize),
    (init, mut batches): (Rng, Rng),
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<(DuqResNet, Weights)> {
    let (vb, params) = seeded(init, DType::F32, device);
    let mut model = make(vb, &params)?;
    model.fit_steps(
        data,
        indices,
        (steps, batch),
        &mut batches,
        device,
        observer,
    )?;
    let state = model.state(&params)?;
    Ok((model, state))
}
