//! The built-in `duq`: DUQ on the Fashion-MNIST CNN with batch norm ([`DuqCnn`]), trained
//! with DUQ's own loss (BCE + gradient penalty) and SGD schedule; the `duq` scorer reads its
//! kernel values.

use super::builtin::{check_duq_batch, mul, sum, BuiltinModel, KindInfo, ModelKind};
use crate::data::Dataset;
use crate::duq::cnn::{train_duq, DuqCnn, DuqCnnArch, DuqCnnConfig};
use crate::duq::DuqSettings;
use crate::error::Result;
use crate::nn::Classifier;
use crate::observe::Observer;
use crate::train::{ModelBuilder, TrainParams, TrainRngs, Trained};
use candle_core::Device;
use candle_nn::VarBuilder;

static KINDS: [KindInfo; 1] = [KindInfo {
    name: "duq",
    about: "DUQ (van Amersfoort et al. 2020) on the paper's Fashion-MNIST CNN with batch norm: \
            RBF head, BCE + gradient penalty (lambda 0.05), SGD lr 0.05 momentum 0.9, dropping \
            x0.2 at 1/3 and 2/3 of the steps; score it with `duq`",
    duq: true,
    resnet: false,
    default_batch: || DuqCnnConfig::default().settings.batch,
}];

impl ModelBuilder for DuqCnnArch {
    fn build(&self, vb: VarBuilder) -> candle_core::Result<Box<dyn Classifier>> {
        Ok(Box::new(
            DuqCnn::new(self, vb).map_err(|e| candle_core::Error::Msg(e.to_string()))?,
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
        check_duq_batch(params, &self.duq.settings)?;
        let cfg = params.config();
        let (model, params) = train_duq(
            self,
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

impl BuiltinModel for DuqCnnArch {
    fn kinds() -> &'static [KindInfo] {
        &KINDS
    }

    fn for_shape(_: ModelKind, item_shape: &[usize], classes: usize) -> Self {
        // Other shapes get a 1x28x28 model, which then refuses them with a clear error.
        let shape = match item_shape {
            [c, h, w] => [*c, *h, *w],
            _ => [1, 28, 28],
        };
        DuqCnnArch {
            item_shape: shape,
            classes,
            duq: Default::default(),
        }
    }

    fn refuses_items(&self, item_shape: &[usize]) -> Option<String> {
        super::builtin::refuses_non_images(self.kind(), item_shape, 16)
    }

    fn kind(&self) -> ModelKind {
        ModelKind::new(&KINDS[0])
    }

    fn classes(&self) -> usize {
        self.classes
    }

    fn weights_bound(&self) -> Option<u128> {
        let [c1, c2, c3] = self.duq.channels;
        let [c0, h, w] = self.item_shape;
        let f = self.duq.features;
        let d = self.duq.settings.centroid_dims;
        sum([
            mul(c0, c1).and_then(|x| x.checked_mul(9)),
            mul(c1, c2).and_then(|x| x.checked_mul(9)),
            mul(c2, c3).and_then(|x| x.checked_mul(9)),
            mul(h, w).and_then(|x| x.checked_mul(c3 as u128)?.checked_mul(f as u128)),
            mul(d, self.classes).and_then(|x| x.checked_mul(f as u128 + 1)),
        ])
    }

    fn duq_settings(&self) -> Option<&DuqSettings> {
        Some(&self.duq.settings)
    }

    fn set_batch(&mut self, batch: usize) {
        self.duq.settings.batch = batch;
    }
}
