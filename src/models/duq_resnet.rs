//! The built-in `duq-resnet18`, `duq-resnet34` and `duq-resnet50`: DUQ on a ResNet's trunk
//! ([`DuqResNet`], the DUQ paper's CIFAR-10 model), trained with DUQ's loss, penalty and SGD;
//! the `duq` scorer reads its kernel values.

use super::builtin::{fit_duq_net, mul, sum, BuiltinModel, KindInfo, ModelKind};
use super::resnet::{depth, kind_of, sized};
use crate::data::Dataset;
use crate::duq::net::{DuqResNet, DuqResNetArch};
use crate::duq::DuqSettings;
use crate::error::Result;
use crate::nn::resnet::ResNetConfig;
use crate::nn::Classifier;
use crate::observe::Observer;
use crate::train::{ModelBuilder, TrainParams, TrainRngs, Trained};
use candle_core::Device;
use candle_nn::VarBuilder;

static KINDS: [KindInfo; 3] = [
    KindInfo {
        name: "duq-resnet18",
        about: "DUQ on ResNet-18's trunk (the DUQ paper's CIFAR-10 model): centroids of size \
                512, length scale 0.1, two-sided penalty lambda 0.75, SGD lr 0.05 momentum 0.9 \
                weight decay 5e-4, dropping x0.2 at 1/3 and 2/3 of the steps; score it with \
                `duq`",
        duq: true,
        resnet: true,
        default_batch: || DuqSettings::cifar().batch,
    },
    KindInfo {
        name: "duq-resnet34",
        about: "DUQ on ResNet-34's trunk",
        duq: true,
        resnet: true,
        default_batch: || DuqSettings::cifar().batch,
    },
    KindInfo {
        name: "duq-resnet50",
        about: "DUQ on ResNet-50's trunk (centroids of size 2048)",
        duq: true,
        resnet: true,
        default_batch: || DuqSettings::cifar().batch,
    },
];

/// The trunk's feature width: ResNet-50's Bottleneck ends at 2048, the others at 512.
fn features(depth: usize) -> usize {
    if depth == 50 {
        2048
    } else {
        512
    }
}

impl ModelBuilder for DuqResNetArch {
    fn build(&self, vb: VarBuilder) -> candle_core::Result<Box<dyn Classifier>> {
        Ok(Box::new(
            DuqResNet::resnet_from(self, vb).map_err(|e| candle_core::Error::Msg(e.to_string()))?,
        ))
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
        fit_duq_net(
            &self.duq,
            |vb, params| DuqResNet::resnet(&self.resnet, &self.duq, vb, params),
            data,
            indices,
            params,
            rngs,
            device,
            observer,
        )
    }
}

impl BuiltinModel for DuqResNetArch {
    fn kinds() -> &'static [KindInfo] {
        &KINDS
    }

    fn for_shape(kind: ModelKind, item_shape: &[usize], classes: usize) -> Self {
        let resnet = sized(depth(kind, &KINDS), item_shape, classes);
        let mut duq = DuqSettings::cifar();
        duq.centroid_dims = features(resnet.depth);
        DuqResNetArch { resnet, duq }
    }

    fn refuses_items(&self, item_shape: &[usize]) -> Option<String> {
        super::builtin::refuses_non_images(self.kind(), item_shape, 1)
    }

    fn kind(&self) -> ModelKind {
        kind_of(self.resnet.depth, &KINDS)
    }

    fn classes(&self) -> usize {
        self.resnet.classes
    }

    fn weights_bound(&self) -> Option<u128> {
        let trunk = ResNetConfig {
            classes: 0,
            ..self.resnet.clone()
        }
        .weights_bound()?;
        sum([
            Some(trunk),
            mul(self.duq.centroid_dims, self.resnet.classes)
                .and_then(|x| x.checked_mul(features(self.resnet.depth) as u128 + 1)),
        ])
    }

    fn duq_settings(&self) -> Option<&DuqSettings> {
        Some(&self.duq)
    }

    fn set_batch(&mut self, batch: usize) {
        self.duq.batch = batch;
    }
}
