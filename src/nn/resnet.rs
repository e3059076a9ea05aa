//! ResNet-18, -34 and -50 (He et al. 2016) from the layer library, with torchvision's tensor
//! names (`conv1`, `bn1`, `layer{1..4}.{block}.…`, `fc`), so a torchvision `state_dict` or a
//! timm ResNet checkpoint loads by name.
//!
//! Two stems: ImageNet's (7x7 stride-2 convolution, batch norm, ReLU, 3x3 stride-2 max-pool)
//! and the CIFAR stem of the DUQ and REGrad experiments (3x3 stride-1 convolution, no
//! max-pool), for 32x32 inputs.

use super::net::{
    BasicBlock, BatchNorm2d, Bottleneck, Conv2d, Conv2dConfig, Flatten, GlobalAvgPool, Layer,
    Linear, MaxPool2d, Net, Relu, Sequential,
};
use candle_core::Result;
use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

/// The first layers of a ResNet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stem {
    /// 7x7 stride-2 convolution and a 3x3 stride-2 max-pool (224x224 inputs).
    Imagenet,
    /// One 3x3 stride-1 convolution, no max-pool (32x32 inputs).
    Cifar,
}

/// Configuration of a ResNet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResNetConfig {
    /// 18, 34 or 50.
    pub depth: usize,
    /// The stem.
    pub stem: Stem,
    /// Input channels.
    pub in_channels: usize,
    /// Number of classes.
    pub classes: usize,
}

impl ResNetConfig {
    /// Blocks per stage and whether they are bottlenecks, `None` for an unknown depth.
    pub fn blocks(&self) -> Option<([usize; 4], bool)> {
        match self.depth {
            18 => Some(([2, 2, 2, 2], false)),
            34 => Some(([3, 4, 6, 3], false)),
            50 => Some(([3, 4, 6, 3], true)),
            _ => None,
        }
    }

    /// The stem a `h x w` input wants: CIFAR's below 64 pixels a side, ImageNet's from there.
    pub fn stem_for(h: usize, w: usize) -> Stem {
        if h.min(w) < 64 {
            Stem::Cifar
        } else {
            Stem::Imagenet
        }
    }

    /// An upper bound on the number of weights.
    pub fn weights_bound(&self) -> Option<u128> {
        let (blocks, bottleneck) = self.blocks()?;
        let expansion = if bottleneck { 4 } else { 1 };
        let mut total: u128 = 64 * 49 * self.in_channels as u128 + 4 * 64;
        let mut inputs: u128 = 64;
        for (stage, &n) in blocks.iter().enumerate() {
            let width: u128 = 64 << stage;
            let out = width * expansion;
            for _ in 0..n {
                let convs = if bottleneck {
                    inputs * width + 9 * width * width + width * out
                } else {
                    9 * inputs * width + 9 * width * width
                };
                total = total.checked_add(convs + inputs * out + 12 * out)?;
                inputs = out;
            }
        }
        total.checked_add((inputs + 1) * self.classes as u128)
    }
}

/// A ResNet as a [`Net`].
pub fn resnet(cfg: &ResNetConfig, vb: VarBuilder) -> Result<Net> {
    let (trunk, features) = resnet_trunk(cfg, vb.clone())?;
    let body = trunk.with(Linear::new(features, cfg.classes, true, vb.pp("fc"))?);
    Ok(Net::new(body, cfg.classes))
}

/// A ResNet without its classifier: the stem, the four stages, global average pooling and
/// flattening, `(b, c, h, w)` to `(b, d)`; returns the stack and `d` (512, or 2048 for
/// ResNet-50). `cfg.classes` is not used. DUQ's feature extractor on a ResNet.
pub fn resnet_trunk(cfg: &ResNetConfig, vb: VarBuilder) -> Result<(Sequential, usize)> {
    resnet_trunk_of_width(cfg, 64, vb)
}

/// [`resnet_trunk`] with `base` channels in the stem and the first stage (64 in every
/// ResNet; the stages double it): the same layers, blocks and strides at another width, as
/// the tests' f64 gradient checks build them narrow to stay fast.
pub fn resnet_trunk_of_width(
    cfg: &ResNetConfig,
    base: usize,
    vb: VarBuilder,
) -> Result<(Sequential, usize)> {
    if !(1..=1024).contains(&base) {
        candle_core::bail!("a ResNet's base width is 1 to 1024 channels, not {base}");
    }
    let Some((blocks, bottleneck)) = cfg.blocks() else {
        candle_core::bail!("ResNet-{} is not built in (18, 34 or 50)", cfg.depth);
    };
    if cfg.in_channels == 0 || cfg.classes == 0 {
        candle_core::bail!("a ResNet needs input channels and classes");
    }
    let (kernel, stride) = match cfg.stem {
        Stem::Imagenet => (7, 2),
        Stem::Cifar => (3, 1),
    };
    let stem = Conv2dConfig {
        kernel,
        stride,
        padding: kernel / 2,
        groups: 1,
        bias: false,
        init: Some(super::net::residual_init()),
    };
    let mut body = Sequential::new()
        .with(Conv2d::new(cfg.in_channels, base, stem, vb.pp("conv1"))?)
        .with(BatchNorm2d::new(base, vb.pp("bn1"))?)
        .with(Relu);
    if cfg.stem == Stem::Imagenet {
        body = body.with(MaxPool2d::new(3, 2, 1)?);
    }
    let mut inputs = base;
    for (stage, &n) in blocks.iter().enumerate() {
        let width = base << stage;
        let vb = vb.pp(format!("layer{}", stage + 1));
        for b in 0..n {
            let stride = if stage > 0 && b == 0 { 2 } else { 1 };
            let block: Box<dyn Layer> = if bottleneck {
                Box::new(Bottleneck::new(
                    inputs,
                    width,
                    stride,
                    vb.pp(b.to_string()),
                )?)
            } else {
                Box::new(BasicBlock::new(
                    inputs,
                    width,
                    stride,
                    vb.pp(b.to_string()),
                )?)
            };
            body.push(block);
            inputs = width
                * if bottleneck {
                    Bottleneck::EXPANSION
                } else {
                    BasicBlock::EXPANSION
                };
        }
    }
    Ok((body.with(GlobalAvgPool).with(Flatten), inputs))
}
