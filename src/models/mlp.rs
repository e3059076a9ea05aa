//! The built-in `mlp` (a ReLU MLP 256-128 on flattened items, [`Mlp`]) and the heads for
//! embeddings: `linear` (softmax regression, no hidden layer) and `mlp-dropout` (one hidden
//! layer of 256 with dropout 0.5, so MC-dropout scorers run on the head); all trained with
//! the softmax recipe.

use super::builtin::{mul, sum, BuiltinModel, KindInfo, ModelKind};
use crate::nn::{Classifier, Mlp, MlpConfig};
use crate::train::{ModelBuilder, TrainConfig};
use candle_nn::VarBuilder;

static KINDS: [KindInfo; 3] = [
    KindInfo {
        name: "mlp",
        about: "A ReLU MLP 256-128 (any input, flattened)",
        duq: false,
        resnet: false,
        default_batch: || TrainConfig::default().batch_size,
    },
    KindInfo {
        name: "linear",
        about: "Softmax regression (any input, flattened): a linear head on embeddings",
        duq: false,
        resnet: false,
        default_batch: || TrainConfig::default().batch_size,
    },
    KindInfo {
        name: "mlp-dropout",
        about: "A ReLU MLP 256 with dropout 0.5: a head on embeddings for MC-dropout scorers",
        duq: false,
        resnet: false,
        default_batch: || TrainConfig::default().batch_size,
    },
];

impl ModelBuilder for MlpConfig {
    fn build(&self, vb: VarBuilder) -> candle_core::Result<Box<dyn Classifier>> {
        Ok(Box::new(Mlp::new(self, vb)?))
    }
}

impl BuiltinModel for MlpConfig {
    fn kinds() -> &'static [KindInfo] {
        &KINDS
    }

    fn for_shape(kind: ModelKind, item_shape: &[usize], classes: usize) -> Self {
        let (hidden, dropout) = match kind.name() {
            "linear" => (vec![], 0.0),
            "mlp-dropout" => (vec![256], 0.5),
            _ => (vec![256, 128], 0.0),
        };
        MlpConfig {
            inputs: item_shape.iter().product(),
            hidden,
            classes,
            dropout,
        }
    }

    fn kind(&self) -> ModelKind {
        ModelKind::new(if self.hidden.is_empty() {
            &KINDS[1]
        } else if self.dropout > 0.0 {
            &KINDS[2]
        } else {
            &KINDS[0]
        })
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
