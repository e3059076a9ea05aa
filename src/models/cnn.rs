//! The built-in `cnn`: the REGrad paper's small softmax CNN ([`Cnn`]), trained with the
//! softmax recipe.

use super::builtin::{mul, sum, BuiltinModel, KindInfo, ModelKind};
use crate::nn::{Classifier, Cnn, CnnConfig};
use crate::train::{ModelBuilder, TrainConfig};
use candle_nn::VarBuilder;

static KINDS: [KindInfo; 1] = [KindInfo {
    name: "cnn",
    about: "The REGrad paper's small CNN (image inputs)",
    duq: false,
    resnet: false,
    default_batch: || TrainConfig::default().batch_size,
}];

impl ModelBuilder for CnnConfig {
    fn build(&self, vb: VarBuilder) -> candle_core::Result<Box<dyn Classifier>> {
        Ok(Box::new(Cnn::new(self, vb)?))
    }
}

impl BuiltinModel for CnnConfig {
    fn kinds() -> &'static [KindInfo] {
        &KINDS
    }

    fn for_shape(_: ModelKind, item_shape: &[usize], classes: usize) -> Self {
        CnnConfig::standard(item_shape, classes)
    }

    fn refuses_items(&self, item_shape: &[usize]) -> Option<String> {
        super::builtin::refuses_non_images(self.kind(), item_shape, 10)
    }

    fn kind(&self) -> ModelKind {
        ModelKind::new(&KINDS[0])
    }

    fn classes(&self) -> usize {
        self.classes
    }

    fn weights_bound(&self) -> Option<u128> {
        sum([
            mul(32 * 9, self.in_channels),
            mul(64 * 32, 9),
            mul(self.height, self.width).and_then(|x| x.checked_mul(64 * 128)),
            mul(self.classes, 129),
        ])
    }

    fn has_dropout(&self) -> bool {
        self.dropout > 0.0
    }
}
