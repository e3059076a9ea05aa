//! The built-in `mlp`: a ReLU MLP 256-128 on flattened items ([`Mlp`]), trained with the
//! softmax recipe.

use super::builtin::{mul, sum, BuiltinModel, KindInfo, ModelKind};
use crate::nn::{Classifier, Mlp, MlpConfig};
use crate::train::{ModelBuilder, TrainConfig};
use candle_nn::VarBuilder;

static KINDS: [KindInfo; 1] = [KindInfo {
    name: "mlp",
    about: "A ReLU MLP 256-128 (any input, flattened)",
    duq: false,
    resnet: false,
    default_batch: || TrainConfig::default().batch_size,
}];

impl ModelBuilder for MlpConfig {
    fn build(&self, vb: VarBuilder) -> candle_core::Result<Box<dyn Classifier>> {
        Ok(Box::new(Mlp::new(self, vb)?))
    }
}

impl BuiltinModel for MlpConfig {
    fn kinds() -> &'static [KindInfo] {
        &KINDS
    }

    fn for_shape(_: ModelKind, item_shape: &[usize], classes: usize) -> Self {
        MlpConfig {
            inputs: item_shape.iter().product(),
            hidden: vec![256, 128],
            classes,
            dropout: 0.0,
        }
    }

    fn kind(&self) -> ModelKind {
        ModelKind::new(&KINDS[0])
    }

    fn classes(&self) -> usize {
        self.classes
    }

    fn weights_bound(&self) -> Option<u128> {
        let mut widths = vec![self.inputs];
        widths.extend(&self.hidden);
        widths.push(self.classes);
        sum(widths
            .windows(2)
            .map(|w| mul(w[0], w[1]).and_then(|x| x.checked_add(w[1] as u128))))
    }

    fn has_dropout(&self) -> bool {
        self.dropout > 0.0
    }
}
