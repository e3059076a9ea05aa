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

use super::{Duq, DuqSettings, Extractor, RbfHead};
use crate::error::{Error, Result};
use crate::nn::init::Params;
use crate::nn::layers::nchw_to_nhwc;
use crate::nn::net::{Ctx, Layer, Sequential, Tape};
use crate::nn::resnet::{resnet_trunk, ResNetConfig};
use candle_core::{Tensor, Var};
use candle_nn::VarBuilder;

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
    pub fn new(body: Sequential, features: usize, params: &Params) -> Result<Self> {
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
        params: &Params,
    ) -> Result<Self> {
        let (trunk, features) = resnet_trunk(cfg, vb.clone())?;
        let head = RbfHead::from_vb(
            features,
            cfg.classes,
            duq.centroid_dims,
            (duq.sigma, duq.gamma),
            (duq.w_std, duq.n_init),
            vb.pp("duq"),
        )?;
        Duq::from_parts(
            NetExtractor::new(trunk, features, params)?,
            head,
            cfg.classes,
            duq,
        )
    }
}
