//! A regression curve's records and what is written from them: `curve.csv`, `summary.csv`
//! and the RMSE/NLL figure.

use crate::error::Result;
use crate::fsutil::write_csv;
use crate::jobs::curve::mean_std;
use crate::plot::{Figure, Panel, Series};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The files a regression curve writes into its folder: what `force` replaces.
pub const OUTPUTS: [&str; 5] = [
    "run.json",
    "curve.csv",
    "summary.csv",
    "curve.svg",
    "curve.png",
];

/// One cycle of one run, measured on the test split in the targets' units (with several
/// outputs, each figure is the mean over outputs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Strategy name.
    pub strategy: String,
    /// The run's seed.
    pub seed: u64,
    /// Cycle (0 = trained on the seed set).
    pub cycle: usize,
    /// Labeled items the cycle's model was trained on.
    pub labeled: usize,
    /// Root mean squared error.
    pub rmse: f64,
    /// Mean absolute error.
    pub mae: f64,
    /// Mean Gaussian negative log-likelihood (nats).
    pub nll: f64,
    /// Mean CRPS.
    pub crps: f64,
    /// Coverage of the central 90% intervals.
    pub coverage90: f64,
    /// Mean width of the central 90% intervals.
    pub width90: f64,
    /// Seconds spent training.
    pub train_s: f64,
    /// Seconds spent scoring and selecting the items this cycle added (0 for cycle 0).
    pub score_s: f64,
}

/// Writes `curve.csv`.
pub(super) fn write_curve_csv(path: &Path, records: &[Record]) -> Result<()> {
    let header = [
        "scorer",
        "seed",
        "cycle",
        "labeled",
        "rmse",
        "mae",
        "nll",
        "crps",
        "coverage90",
        "width90",
        "train_s",
        "score_s",
    ];
    let rows = records.iter().map(|r| {
        vec![
            r.strategy.clone(),
            r.seed.to_string(),
            r.cycle.to_string(),
            r.labeled.to_string(),
            format!("{:.6}", r.rmse),
            format!("{:.6}", r.mae),
            format!("{:.6}", r.nll),
            format!("{:.6}", r.crps),
            format!("{:.6}", r.coverage90),
            format!("{:.6}", r.width90),
            format!("{:.3}", r.train_s),
            format!("{:.3}", r.score_s),
        ]
    });
    write_csv(path, &header, rows)
}

/// Per strategy: mean and sample std over seeds of RMSE and NLL averaged over cycles
/// `1..=cycles` (cycle 0 alone without acquisition cycles), and the last cycle's mean RMSE.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SummaryRow {
    /// Strategy name.
    pub strategy: String,
    /// Seeds.
    pub seeds: usize,
    /// Mean over seeds of the cycle-averaged RMSE.
    pub rmse_mean: f64,
    /// Its sample standard deviation.
    pub rmse_std: f64,
    /// Mean over seeds of the cycle-averaged NLL.
    pub nll_mean: f64,
    /// Its sample standard deviation.
    pub nll_std: f64,
    /// Mean RMSE of the last cycle.
    pub final_rmse: f64,
}

/// The strategies in first-seen order, each with its runs' records by seed.
fn by_strategy(records: &[Record]) -> Vec<(String, Vec<Vec<&Record>>)> {
    crate::jobs::curve::by_strategy(records, |r| (r.strategy.as_str(), r.seed))
}

/// The summary of every strategy (see [`SummaryRow`]).
pub fn summarize(records: &[Record]) -> Vec<SummaryRow> {
    by_strategy(records)
        .into_iter()
        .map(|(strategy, runs)| {
            let avg = |run: &[&Record], f: fn(&Record) -> f64| {
                let later: Vec<f64> = run.iter().filter(|r| r.cycle >= 1).map(|r| f(r)).collect();
                if later.is_empty() {
                    f(run[0])
                } else {
                    later.iter().sum::<f64>() / later.len() as f64
                }
            };
            let rmse: Vec<f64> = runs.iter().map(|r| avg(r, |r| r.rmse)).collect();
            let nll: Vec<f64> = runs.iter().map(|r| avg(r, |r| r.nll)).collect();
            let last: Vec<f64> = runs
                .iter()
                .filter_map(|r| r.last().map(|r| r.rmse))
                .collect();
            let ((rmse_mean, rmse_std), (nll_mean, nll_std)) = (mean_std(&rmse), mean_std(&nll));
            SummaryRow {
                strategy,
                seeds: runs.len(),
                rmse_mean,
                rmse_std,
                nll_mean,
                nll_std,
                final_rmse: mean_std(&last).0,
            }
        })
        .collect()
}

/// Writes `summary.csv`.
pub(super) fn write_summary_csv(path: &Path, rows: &[SummaryRow]) -> Result<()> {
    let header = [
        "scorer",
        "seeds",
        "rmse_mean",
        "rmse_std",
        "nll_mean",
        "nll_std",
        "final_rmse",
    ];
    let rows = rows.iter().map(|r| {
        vec![
            r.strategy.clone(),
            r.seeds.to_string(),
            format!("{:.6}", r.rmse_mean),
            format!("{:.6}", r.rmse_std),
            format!("{:.6}", r.nll_mean),
            format!("{:.6}", r.nll_std),
            format!("{:.6}", r.final_rmse),
        ]
    });
    write_csv(path, &header, rows)
}

/// Two panels (RMSE, NLL against the labeled count), a line per strategy with a ± std band.
pub(super) fn curve_figure(records: &[Record]) -> Figure {
    let groups = by_strategy(records);
    let seeds = groups.iter().map(|(_, runs)| runs.len()).max().unwrap_or(0);
    let over = match seeds {
        1 => " (1 seed)".to_string(),
        n => format!(" (mean ± std over {n} seeds)"),
    };
    let panel = |title: &str, y_label: &str| Panel {
        log_y: false,
        title: format!("{title}{over}"),
        x_label: "labeled items".into(),
        y_label: y_label.into(),
        series: Vec::new(),
    };
    let mut panels = [panel("Test RMSE", "RMSE"), panel("Test NLL", "NLL (nats)")];
    for (strategy, runs) in &groups {
        let cycles = runs.iter().map(Vec::len).min().unwrap_or(0);
        let fields: [fn(&Record) -> f64; 2] = [|r| r.rmse, |r| r.nll];
        for (panel, f) in panels.iter_mut().zip(fields) {
            let (mut points, mut band) = (Vec::new(), Vec::new());
            for c in 0..cycles {
                let vals: Vec<f64> = runs.iter().map(|run| f(run[c])).collect();
                let (m, sd) = mean_std(&vals);
                let x = runs[0][c].labeled as f64;
                points.push((x, m));
                band.push((x, m - sd, m + sd));
            }
            panel.series.push(Series {
                name: strategy.clone(),
                points,
                band,
            });
        }
    }
    Figure {
        panels: panels.into(),
        panel_width: 480,
        height: 360,
        columns: 0,
    }
}
