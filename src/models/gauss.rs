//! The regression models: the closed set of Gaussian heads ([`GaussKind`]) a regression run
//! trains, with the names users type and how each is sized for its data.

use crate::error::{Error, Result};
use crate::nn::GaussMlpConfig;
use serde::{Deserialize, Serialize};

/// A Gaussian head, by the name users type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GaussKind {
    /// A linear map to a mean and a variance per output (heteroscedastic linear regression).
    LinearGauss,
    /// Two hidden ReLU layers of 128 with dropout 0.1 (MC dropout draws), then the Gaussian
    /// head.
    MlpGauss,
}

impl GaussKind {
    /// Every regression model.
    pub const ALL: [GaussKind; 2] = [GaussKind::LinearGauss, GaussKind::MlpGauss];

    /// The name users type.
    pub fn name(self) -> &'static str {
        match self {
            GaussKind::LinearGauss => "linear-gauss",
            GaussKind::MlpGauss => "mlp-gauss",
        }
    }

    /// One line for help texts.
    pub fn about(self) -> &'static str {
        match self {
            GaussKind::LinearGauss => {
                "regression: a linear Gaussian head (mean and variance per output)"
            }
            GaussKind::MlpGauss => {
                "regression: an MLP (2 x 128, ReLU, dropout 0.1) with a Gaussian head"
            }
        }
    }

    /// The network for `inputs` features and `outputs` targets.
    pub fn config(self, inputs: usize, outputs: usize) -> GaussMlpConfig {
        let (hidden, dropout) = match self {
            GaussKind::LinearGauss => (Vec::new(), 0.0),
            GaussKind::MlpGauss => (vec![128, 128], 0.1),
        };
        GaussMlpConfig {
            inputs,
            hidden,
            outputs,
            dropout,
        }
    }
}

impl std::str::FromStr for GaussKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<GaussKind> {
        GaussKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                Error::config(
                    "model",
                    format!("unknown regression model `{s}`; expected linear-gauss or mlp-gauss"),
                )
            })
    }
}
