//! The built-in `resnet18`, `resnet34` and `resnet50`: ResNets from the layer library
//! ([`crate::nn::resnet`]), trained with the softmax recipe.

use super::builtin::{BuiltinModel, KindInfo, ModelKind};
use crate::nn::resnet::{resnet, ResNetConfig};
use crate::nn::Classifier;
use crate::train::{ModelBuilder, TrainConfig};
use candle_nn::VarBuilder;

/// The depths of [`KINDS`], entry by entry.
const DEPTHS: [usize; 3] = [18, 34, 50];

static KINDS: [KindInfo; 3] = [
    KindInfo {
        name: "resnet18",
        about: "ResNet-18 (BasicBlock, torchvision's names): the CIFAR stem (3x3, no max-pool) \
                below 64 pixels a side, ImageNet's above; softmax, Adam",
        duq: false,
        resnet: true,
        default_batch: || TrainConfig::default().batch_size,
    },
    KindInfo {
        name: "resnet34",
        about: "ResNet-34 (BasicBlock)",
        duq: false,
        resnet: true,
        default_batch: || TrainConfig::default().batch_size,
    },
    KindInfo {
        name: "resnet50",
        about: "ResNet-50 (Bottleneck)",
        duq: false,
        resnet: true,
        default_batch: || TrainConfig::default().batch_size,
    },
];

/// The depth `kind` names (18, 34 or 50), for this file's and DUQ's ResNets.
pub(super) fn depth(kind: ModelKind, kinds: &[KindInfo]) -> usize {
    let at = kinds.iter().position(|k| k.name == kind.name());
    DEPTHS[at.unwrap_or(0)]
}

/// The entry of `kinds` for `depth` (ResNet-18's for a depth not built in).
pub(super) fn kind_of(depth: usize, kinds: &'static [KindInfo]) -> ModelKind {
    let at = DEPTHS.iter().position(|d| *d == depth).unwrap_or(0);
    ModelKind::new(&kinds[at])
}

/// ResNet settings of `depth` for items of `item_shape` (`(c, h, w)`, `(h, w)`, else a
/// 1x32x32 stand-in) and `classes` classes: the CIFAR stem below 64 pixels a side.
pub(super) fn sized(depth: usize, item_shape: &[usize], classes: usize) -> ResNetConfig {
    let (c, h, w) = match item_shape {
        [c, h, w] => (*c, *h, *w),
        [h, w] => (1, *h, *w),
        _ => (1, 32, 32),
    };
    ResNetConfig {
        depth,
        stem: ResNetConfig::stem_for(h, w),
        in_channels: c,
        classes,
    }
}

impl ModelBuilder for ResNetConfig {
    fn build(&self, vb: VarBuilder) -> candle_core::Result<Box<dyn Classifier>> {
        Ok(Box::new(resnet(self, vb)?))
    }
}

impl BuiltinModel for ResNetConfig {
    fn kinds() -> &'static [KindInfo] {
        &KINDS
    }

    fn for_shape(kind: ModelKind, item_shape: &[usize], classes: usize) -> Self {
        sized(depth(kind, &KINDS), item_shape, classes)
    }

    fn refuses_items(&self, item_shape: &[usize]) -> Option<String> {
        super::builtin::refuses_non_images(self.kind(), item_shape, 1)
    }

    fn kind(&self) -> ModelKind {
        kind_of(self.depth, &KINDS)
    }

    fn classes(&self) -> usize {
        self.classes
    }

    fn weights_bound(&self) -> Option<u128> {
        ResNetConfig::weights_bound(self)
    }
}
