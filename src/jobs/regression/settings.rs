//! What a regression run is told beside a curve's common settings, declared once: the CLI's
//! flags derive from these fields.

use crate::data::Task;
use crate::error::{Error, Result};
use crate::nn::GaussLoss;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// beta of beta-NLL when none is given (Seitzer et al. 2022's recommendation).
pub const DEFAULT_NLL_BETA: f64 = 0.5;

/// The loss of the Gaussian heads, by the name users type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum LossKind {
    /// The Gaussian negative log-likelihood.
    Nll,
    /// beta-NLL (the default).
    #[default]
    BetaNll,
}

impl std::str::FromStr for LossKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<LossKind> {
        match s {
            "nll" => Ok(LossKind::Nll),
            "beta-nll" => Ok(LossKind::BetaNll),
            other => Err(Error::config(
                "loss",
                format!("unknown loss `{other}`; expected nll or beta-nll"),
            )),
        }
    }
}

/// A regression run's own settings.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[serde(default, deny_unknown_fields)]
pub struct RegressionSettings {
    /// What the targets are: classification (class labels), regression (numbers) or multi-label (label sets, named with --labels). [default: taken from the data: a target holding a non-integer, or a float tensor, array or Parquet column, is regression; integers only are refused without it]
    #[cfg_attr(feature = "cli", arg(long))]
    pub task: Option<Task>,
    /// The target(s), comma-separated: the numbers a regression run predicts. Columns of a CSV table (every other column but `id` is a feature), or of an embedding file: tensors of a safetensors file (beside `x` or `features`) or arrays of an .npz (beside `features`), each (n,) or (n, k), or number columns of a Parquet table (beside its list column).
    #[cfg_attr(feature = "cli", arg(long, value_delimiter = ','))]
    pub target: Vec<String>,
    /// The labeled test split of a regression or multi-label run: a table of the pool's kind with its columns (a CSV table, or an embedding file with the same targets or label sets).
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE"))]
    pub test: Option<PathBuf>,
    /// Loss of the Gaussian heads: nll, or beta-nll (Seitzer et al. 2022: the NLL weighted by the predicted variance to the power beta, which keeps the mean from under-fitting). [default: beta-nll]
    #[cfg_attr(feature = "cli", arg(long))]
    pub loss: Option<LossKind>,
    /// beta of beta-NLL, in [0, 1]. [default: 0.5]
    #[cfg_attr(feature = "cli", arg(long))]
    pub nll_beta: Option<f64>,
}

impl RegressionSettings {
    /// Whether these settings ask for a regression run.
    pub fn is_regression(&self) -> bool {
        self.task == Some(Task::Regression) || !self.target.is_empty()
    }

    /// Refuses, for a run that is not regression, a setting only regression reads (it would be
    /// ignored).
    pub fn check_unread(&self) -> Result<()> {
        if self.task == Some(Task::MultiLabel) {
            return Err(Error::config(
                "task",
                "a multi-label run reads label sets: name them (setting `labels`)",
            ));
        }
        let given = [
            ("test", self.test.is_some()),
            ("loss", self.loss.is_some()),
            ("nll_beta", self.nll_beta.is_some()),
        ];
        match given.iter().find(|(_, g)| *g) {
            Some((name, _)) => Err(Error::config(
                name,
                "is read by a regression run only: name its target column(s) (setting `target`)",
            )),
            None => Ok(()),
        }
    }

    /// The loss, checked.
    pub fn gauss_loss(&self) -> Result<GaussLoss> {
        let beta = self.nll_beta.unwrap_or(DEFAULT_NLL_BETA);
        match self.loss.unwrap_or_default() {
            LossKind::Nll if self.nll_beta.is_some() => Err(Error::config(
                "nll_beta",
                "beta is a setting of the beta-nll loss; drop it or choose that loss",
            )),
            LossKind::Nll => Ok(GaussLoss::Nll),
            LossKind::BetaNll if (0.0..=1.0).contains(&beta) => Ok(GaussLoss::BetaNll { beta }),
            LossKind::BetaNll => Err(Error::config(
                "nll_beta",
                format!("{beta}; expected a value in [0, 1]"),
            )),
        }
    }
}
