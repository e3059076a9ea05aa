//! A multi-label curve's records and what is written from them: `curve.csv`, `summary.csv`
//! and the mAP/micro-F1 figure.

use crate::error::Result;
use crate::fsutil::write_csv;
use crate::jobs::curve::{by_strategy, mean_std};
use crate::metrics::multilabel::LabelMetrics;
use crate::plot::{Figure, Panel, Series};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The files a multi-label curve writes into its folder: what `force` replaces.
pub const OUTPUTS: [&str; 5] = [
    "run.json",
    "curve.csv",
    "summary.csv",
    "curve.svg",
    "curve.png",
];

/// One cycle of one run, measured on the test split.
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
    /// The test split's figures.
    pub metrics: LabelMetrics,
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
        "map",
        "micro_f1",
        "macro_f1",
        "subset_acc",
        "hamming",
        "ece",
        "train_s",
        "score_s",
    ];
    let rows = records.iter().map(|r| {
        let m = &r.metrics;
        vec![
            r.strategy.clone(),
            r.seed.to_string(),
            r.cycle.to_string(),
            r.labeled.to_string(),
            format!("{:.6}", m.map),
            format!("{:.6}", m.micro_f1),
            format!("{:.6}", m.macro_f1),
            format!("{:.6}", m.subset_accuracy),
            format!("{:.6}", m.hamming_loss),
            format!("{:.6}", m.ece),
            format!("{:.3}", r.train_s),
            format!("{:.3}", r.score_s),
        ]
    });
    write_csv(path, &header, rows)
}

/// Per strategy: mean and sample std over seeds of mAP and micro F1 averaged over cycles
/// `1..=cycles` (cycle 0 alone without acquisition cycles), and the last cycle's mean mAP.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SummaryRow {
    /// Strategy name.
    pub strategy: String,
    /// Seeds.
    pub seeds: usize,
    /// Mean over seeds of the cycle-averaged mAP.
    pub map_mean: f64,
    /// Its sample standard deviation.
    pub map_std: f64,
    /// Mean over seeds of the cycle-averaged micro F1.
    pub micro_f1_mean: f64,
    /// Its sample standard deviation.
    pub micro_f1_std: f64,
    /// Mean mAP of the last cycle.
    pub final_map: f64,
}

/// The summary of every strategy (see [`SummaryRow`]).
pub fn summarize(records: &[Record]) -> Vec<SummaryRow> {
    by_strategy(records, |r| (r.strategy.as_str(), r.seed))
        .into_iter()
        .map(|(strategy, runs)| {
            let avg = |run: &[&Record], f: fn(&LabelMetrics) -> f64| {
                let later: Vec<f64> = run
                    .iter()
                    .filter(|r| r.cycle >= 1)
                    .map(|r| f(&r.metrics))
                    .collect();
                if later.is_empty() {
                    f(&run[0].metrics)
                } else {
                    later.iter().sum::<f64>() / later.len() as f64
                }
            };
            let map: Vec<f64> = runs.iter().map(|r| avg(r, |m| m.map)).collect();
            let f1: Vec<f64> = runs.iter().map(|r| avg(r, |m| m.micro_f1)).collect();
            let last: Vec<f64> = runs
                .iter()
                .filter_map(|r| r.last().map(|r| r.metrics.map))
                .collect();
            let ((map_mean, map_std), (micro_f1_mean, micro_f1_std)) =
                (mean_std(&map), mean_std(&f1));
            SummaryRow {
                strategy,
                seeds: runs.len(),
                map_mean,
                map_std,
                micro_f1_mean,
                micro_f1_std,
                final_map: mean_std(&last).0,
            }
        })
        .collect()
}

/// Writes `summary.csv`.
pub(super) fn write_summary_csv(path: &Path, rows: &[SummaryRow]) -> Result<()> {
    let header = [
        "scorer",
        "seeds",
        "map_mean",
        "map_std",
        "micro_f1_mean",
        "micro_f1_std",
        "final_map",
    ];
    let rows = rows.iter().map(|r| {
        vec![
            r.strategy.clone(),
            r.seeds.to_string(),
            format!("{:.6}", r.map_mean),
            format!("{:.6}", r.map_std),
            format!("{:.6}", r.micro_f1_mean),
            format!("{:.6}", r.micro_f1_std),
            format!("{:.6}", r.final_map),
        ]
    });
    write_csv(path, &header, rows)
}

/// Two panels (mAP, micro F1 against the labeled count), a line per strategy with a ± std
/// band.
pub(super) fn curve_figure(records: &[Record]) -> Figure {
    let groups = by_strategy(records, |r| (r.strategy.as_str(), r.seed));
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
    let mut panels = [panel("Test mAP", "mAP"), panel("Test micro F1", "micro F1")];
    for (strategy, runs) in &groups {
        let cycles = runs.iter().map(Vec::len).min().unwrap_or(0);
        let fields: [fn(&LabelMetrics) -> f64; 2] = [|m| m.map, |m| m.micro_f1];
        for (panel, f) in panels.iter_mut().zip(fields) {
            let (mut points, mut band) = (Vec::new(), Vec::new());
            for c in 0..cycles {
                let vals: Vec<f64> = runs.iter().map(|run| f(&run[c].metrics)).collect();
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
