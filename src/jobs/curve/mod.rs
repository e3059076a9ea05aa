//! Acquisition curves: several strategies x several seeds, written as CSV tables and plots.
//!
//! Layout of an output folder:
//! - `run.json`: the [`CurveSpec`] (what `--resume` continues);
//! - `runs/<strategy>-seed<k>.json`: one [`RunState`](crate::acquire::RunState) per run, rewritten after every cycle;
//! - `curve.csv`: `scorer,seed,cycle,labeled,acc,nll,train_s,score_s,balanced_acc`,
//!   rewritten after every finished run;
//! - `summary.csv`: per strategy, mean and sample std over seeds of ACC and NLL averaged over
//!   cycles `1..=cycles` (the paper's Table 3 convention); the area under the ACC curve
//!   (AUBC) with its 95% interval over seeds, its paired difference to `random` and to the
//!   best strategy (bootstrap interval, Wilcoxon's p) and the verdict against random;
//! - `batches.csv`: per run and cycle, the class counts of the items that cycle's labeling
//!   added (cycle 0: the seed set);
//! - `recall.csv`: per run and cycle, the test balanced accuracy and each class's test recall;
//! - `stopping.csv`: per run and cycle, the measures of the cycle's predictions on the run's
//!   stop set and whether each stopping rule would end the labeling there;
//! - `curve.svg`, `curve.png`: mean ± std of ACC and NLL against the labeled count;
//! - `vs-random.svg`, `vs-random.png` (with `random` among the strategies): each strategy's
//!   ACC minus random's, paired by seed, with its 95% interval, against the labeled count.

mod parallel;
mod runs;
mod setup;
mod stopping;

pub use parallel::default_jobs;
pub use runs::{
    aubc_by_seed, curve_figure, remove_outputs, run_curve, state_path, summarize, vs_random_figure,
    write_batches_csv, write_curve_csv, write_recall_csv, write_summary_csv, CurveSpec, Execution,
    Paired, SaveScores, SummaryRow, Verdict, MAX_SEEDS, OUTPUTS,
};
pub(crate) use runs::{by_strategy, mean_std};
pub use setup::{resume, resume_with, run, CurveData, CurveOptions, ARRAYS_FILE};
pub use stopping::write_stopping_csv;
