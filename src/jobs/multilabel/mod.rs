//! Multi-label curves: sigmoid heads trained on a labeled subset of a table's items, the pool
//! scored by their label probabilities, the picks labeled from the known label sets, and the
//! test split's mAP, F1, subset accuracy, Hamming loss and per-label ECE recorded every
//! cycle, for several strategies x seeds (`alkit curve --task multi-label`).
//!
//! Files: `settings` (what a multi-label run is told, declared once: the CLI's flags derive
//! from it), `data` (the pool and test tables, features standardised), `fit` (the sigmoid
//! heads trained and predicting), `run` (the loop), `output` (the records and the files written
//! from them), `calibrate` (`alkit calibrate` for label sets: metrics per label and conformal
//! guarantees of heads trained on the whole train table).
//!
//! Layout of an output folder: `run.json` (the settings), `curve.csv`
//! (`scorer,seed,cycle,labeled,map,micro_f1,macro_f1,subset_acc,hamming,ece,train_s,score_s`,
//! rewritten after every finished run), `summary.csv` (per strategy, mean and sample std over
//! seeds of mAP and micro F1 averaged over cycles `1..=cycles`) and `curve.svg`/`curve.png`
//! (mAP and micro F1 against the labeled count).

mod calibrate;
mod data;
mod fit;
mod output;
mod run;
mod settings;

pub use calibrate::{calibrate, MultiLabelCalibrate, MultiLabelCalibration};
pub use data::MultiLabelData;
pub use output::{summarize, Record, SummaryRow, OUTPUTS};
pub use run::{run, MultiLabelCurve};
pub use settings::{MultiLabelSettings, DEFAULT_THRESHOLD};
