//! The multi-label models: the closed set of sigmoid heads ([`SigmoidKind`]) a multi-label
//! run trains, one logit per label (the labels independent given the item), with the names
//! users type and how each is sized for its data.

use crate::error::{Error, Result};
use crate::nn::MlpConfig;
use serde::{Deserialize, Serialize};

/// A sigmoid head, by the name users type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SigmoidKind {
    /// A linear map to one logit per label (one logistic regression per label).
    LinearSigmoid,
    /// Two hidden ReLU layers of 128 with dropout 0.1 (MC-dropout draws), then one logit per
    /// label.
    MlpSigmoid,
}

impl SigmoidKind {
    /// Every multi-label model.
    pub const ALL: [SigmoidKind; 2] = [SigmoidKind::LinearSigmoid, SigmoidKind::MlpSigmoid];

    /// The name users type.
    pub fn name(self) -> &'static str {
        match self {
            SigmoidKind::LinearSigmoid => "linear-sigmoid",
            SigmoidKind::MlpSigmoid => "mlp-sigmoid",
        }
    }

    /// One line for help texts.
    pub fn about(self) -> &'static str {
        match self {
            SigmoidKind::LinearSigmoid => {
                "multi-label: a linear sigmoid head (one logistic regression per label)"
            }
            SigmoidKind::MlpSigmoid => {
                "multi-label: an MLP (2 x 128, ReLU, dropout 0.1) with a sigmoid per label"
            }
        }
    }

    /// Whether the model has dropout (its MC-dropout passes are draws).
    pub fn has_dropout(self) -> bool {
        self == SigmoidKind::MlpSigmoid
    }

    /// The network for `inputs` features and `labels` labels.
    pub fn config(self, inputs: usize, labels: usize) -> MlpConfig {
        let (hidden, dropout) = match self {
            SigmoidKind::LinearSigmoid => (Vec::new(), 0.0),
            SigmoidKind::MlpSigmoid => (vec![128, 128], 0.1),
        };
        MlpConfig {
            inputs,
            hidden,
            classes: labels,
            dropout,
        }
    }
}

impl std::str::FromStr for SigmoidKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<SigmoidKind> {
        SigmoidKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                Error::config(
                    "model",
                    format!(
                        "unknown multi-label model `{s}`; expected linear-sigmoid or mlp-sigmoid"
                    ),
                )
            })
    }
}
