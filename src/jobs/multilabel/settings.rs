//! What a multi-label run is told beside a curve's common settings, declared once: the CLI's
//! flags derive from these fields.

use crate::data::LabelFormat;
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

/// The probability at which a label is predicted present when none is given.
pub const DEFAULT_THRESHOLD: f64 = 0.5;

/// A multi-label run's own settings (the task and the test split are the regression
/// settings' `task` and `test`, shared by every run on a table).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[serde(default, deny_unknown_fields)]
pub struct MultiLabelSettings {
    /// The label sets of a multi-label run, comma-separated: one CSV column of label names joined by --label-sep (`cat|dog`), or two or more 0/1 CSV columns (one per label, named by its header), or an (n, L) 0/1 tensor of a safetensors file or array of an .npz (its labels named after the tensor and each column's index; a file's array or tensor named `labels` is read as classes, so name it otherwise, e.g. `y`).
    #[cfg_attr(feature = "cli", arg(long, value_delimiter = ','))]
    pub labels: Vec<String>,
    /// The text between two label names in one cell of a label-set column. [default: |]
    #[cfg_attr(feature = "cli", arg(long, value_name = "SEP"))]
    pub label_sep: Option<String>,
    /// Items may have no label (an empty cell, or 0 in every label column); without it such an item is refused by line, as a row someone forgot.
    #[cfg_attr(feature = "cli", arg(long))]
    pub empty_sets: bool,
    /// The probability at which a label is predicted present, for F1, subset accuracy and Hamming loss (entropy-cardinality counts predicted labels at 0.5 whatever this is). [default: 0.5]
    #[cfg_attr(feature = "cli", arg(long, value_name = "P"))]
    pub label_threshold: Option<f64>,
}

impl MultiLabelSettings {
    /// Whether these settings name label sets.
    pub fn is_multi_label(&self) -> bool {
        !self.labels.is_empty()
    }

    /// Refuses, for a run that is not multi-label, a setting only multi-label reads.
    pub fn check_unread(&self) -> Result<()> {
        let given = [
            ("label_sep", self.label_sep.is_some()),
            ("empty_sets", self.empty_sets),
            ("label_threshold", self.label_threshold.is_some()),
        ];
        match given.iter().find(|(_, g)| *g) {
            Some((name, _)) => Err(Error::config(
                name,
                "is read by a multi-label run only: name its label sets (setting `labels`)",
            )),
            None => Ok(()),
        }
    }

    /// How the label sets are written.
    pub fn format(&self) -> LabelFormat {
        LabelFormat {
            sep: self.label_sep.clone().unwrap_or_else(|| "|".into()),
            empty_sets: self.empty_sets,
        }
    }

    /// The threshold, checked.
    pub fn threshold(&self) -> Result<f64> {
        match self.label_threshold.unwrap_or(DEFAULT_THRESHOLD) {
            t if t > 0.0 && t < 1.0 => Ok(t),
            t => Err(Error::config(
                "label_threshold",
                format!("{t}; expected a probability in (0, 1)"),
            )),
        }
    }
}
