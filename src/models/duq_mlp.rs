//! The built-in `duq-mlp`: DUQ on a ReLU MLP over flattened items ([`DuqMlpArch`]), the DUQ
//! head for features computed elsewhere (an embedding file, a frozen backbone's cache),
//! trained with DUQ's loss, penalty and SGD schedule; the `duq` scorer reads its kernel
//! values.

use super::builtin::{fit_duq_net, mul, sum, BuiltinModel, KindInfo, ModelKind};
use crate::data::Dataset;
use crate::duq::cnn::DuqCnnConfig;
use crate::duq::net::{DuqMlpArch, DuqResNet};
use crate::error::Result;
use crate::nn::init::Weights;
use crate::nn::Classifier;
use crate::observe::Observer;
use crate::train::{ModelBuilder, TrainParams, TrainRngs, Trained};
use candle_core::Device;
use candle_nn::VarBuilder;

/// The hidden layer's width, which is also the features' and the centroids' size.
const WIDTH: usize = 256;

static KINDS: [KindInfo; 1] = [KindInfo {
    name: "duq-mlp",
    about: "DUQ on a ReLU MLP 256 over flattened items, the DUQ head for embedding files and \
            frozen backbones: centroids of size 256 and the DUQ paper's Fashion-MNIST recipe \
            (length scale 0.1, BCE + two-sided penalty lambda 0.05, SGD lr 0.05 momentum 0.9, \
            dropping x0.2 at 1/3 and 2/3 of the steps); score it with `duq`",
    duq: true,
    resnet: false,
    default_batch: || DuqCnnConfig::default().settings.batch,
}];

impl ModelBuilder for DuqMlpArch {
    fn build(&self, vb: VarBuilder) -> candle_core::Result<Box<dyn Classifier>> {
        Ok(Box::new(
            DuqResNet::mlp(self, vb, &Weights::from_named(Vec::new()))
                .map_err(|e| candle_core::Error::Msg(e.to_string()))?,
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
            |vb, params| DuqResNet::mlp(self, vb, params),
            data,
            indices,
            params,
            rngs,
            device,
            observer,
        )
    }
}

impl BuiltinModel for DuqMlpArch {
    fn kinds() -> &'static [KindInfo] {
        &KINDS
    }

    fn for_shape(_kind: ModelKind, item_shape: &[usize], classes: usize) -> Self {
        let mut duq = DuqCnnConfig::default().settings;
        duq.centroid_dims = WIDTH;
        DuqMlpArch {
            inputs: item_shape.iter().product(),
            hidden: vec![WIDTH],
            classes,
            duq,
        }
    }

    fn kind(&self) -> ModelKind {
        ModelKind::new(&KINDS[0])
    }

    fn classes(&self) -> usize {
        self.classes
    }

    fn weights_bound(&self) -> Option<u128> {
        let mut terms = Vec::new();
        let mut inputs = self.inputs;
        for &w in &self.hidden {
            terms.push(mul(inputs.checked_add(1)?, w));
            inputs = w;
        }
        terms.push(
            mul(self.duq.centroid_dims, self.classes)
                .and_then(|x| x.checked_mul(inputs as u128 + 1)),
        );
        sum(terms)
    }

    fn duq_settings(&self) -> Option<&crate::duq::DuqSettings> {
        Some(&self.duq)
    }

    fn set_batch(&mut self, batch: usize) {
        self.duq.batch = batch;
    }
}
