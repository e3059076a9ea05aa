//! Regression curves: Gaussian heads trained on a labeled subset of a table's items, the
//! pool scored by their predictive uncertainty, the picks labeled from the known targets, and
//! the test split's RMSE, NLL, CRPS and interval coverage recorded every cycle, for several
//! strategies x seeds (`alkit curve --task regression`).
//!
//! Files: `settings` (what a regression run is told, declared once: the CLI's flags derive
//! from it), `data` (the pool and test tables, standardised), `fit` (the heads trained and
//! predicting in the targets' units), `output` (the records and the files written from them),
//! `run` (the loop), `calibrate` (`alkit calibrate` for regression: metrics and conformal
//! intervals of heads trained on the whole train table).
//!
//! Layout of an output folder: `run.json` (the settings), `curve.csv`
//! (`scorer,seed,cycle,labeled,rmse,mae,nll,crps,coverage90,width90,train_s,score_s`, in the
//! targets' units, rewritten after every finished run), `summary.csv` (per strategy, mean and
//! sample std over seeds of RMSE and NLL averaged over cycles `1..=cycles`) and
//! `curve.svg`/`curve.png` (RMSE and NLL against the labeled count).

mod calibrate;
mod data;
mod fit;
mod output;
mod run;
mod settings;

pub use calibrate::{calibrate, IntervalReport, RegressionCalibrate, RegressionCalibration};
pub use data::RegressionData;
pub use output::{summarize, Record, SummaryRow, OUTPUTS};
pub use run::{run, RegressionCurve};
pub use settings::{LossKind, RegressionSettings, DEFAULT_NLL_BETA};
