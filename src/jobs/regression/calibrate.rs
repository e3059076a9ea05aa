//! `alkit calibrate` for regression: Gaussian heads trained on every row of the train table,
//! measured on the test table (every metric of [`crate::metrics::regression`], per output),
//! and, with a miscoverage `alpha`, split-conformal intervals calibrated on a seeded random
//! half of the test table with their coverage and width on the other half.
//!
//! Writes `metrics.json`, `predictions.csv` (per test item: `id`, `part` (`calibration` or
//! `evaluation`: the conformal split), and per output `NAME`, `NAME_mean`, `NAME_std` in the
//! target's units) and `calibration.svg`/`.png` (the observed against the nominal quantile
//! levels, and the sparsification curve beside its oracle).

use super::data::RegressionData;
use super::fit::Heads;
use super::settings::RegressionSettings;
use crate::data::{Standardizer, Task};
use crate::error::{Error, Result};
use crate::fsutil::write_json;
use crate::metrics::regression::DEFAULT_LEVELS;
use crate::metrics::regression::{quantile_levels, regression_metrics, RegressionMetrics};
use crate::models::GaussKind;
use crate::observe::Observer;
use crate::plot::{Figure, Panel, Series};
use crate::rng::{stream, Purpose};
use crate::round::pick_random;
use crate::train::TrainConfig;
use alkit_acquisition::{ConformalIntervals, IntervalScore, Prediction};
use candle_core::Device;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// What a regression calibration is told.
#[derive(Debug, Clone, PartialEq)]
pub struct RegressionCalibrate {
    /// The train table.
    pub data: PathBuf,
    /// Targets, test table, loss.
    pub settings: RegressionSettings,
    /// The Gaussian head. [default: mlp-gauss]
    pub model: Option<GaussKind>,
    /// Members of a deep ensemble (none: one head).
    pub ensemble: Option<usize>,
    /// Adam steps. [default: 2000]
    pub steps: Option<usize>,
    /// Mini-batch size. [default: 32]
    pub batch_size: Option<usize>,
    /// Adam learning rate. [default: 0.001]
    pub lr: Option<f64>,
    /// Seed of the training, the dropout masks and the conformal split.
    pub seed: u64,
    /// MC-dropout passes of a single head with dropout.
    pub mc_samples: usize,
    /// Miscoverage of the conformal intervals, in `(0, 1)`.
    pub conformal: Option<f64>,
}

/// One output's conformal intervals of one score.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IntervalReport {
    /// The output (target column).
    pub output: String,
    /// `absolute` or `normalized`.
    pub score: &'static str,
    /// The miscoverage level.
    pub alpha: f64,
    /// The calibrated threshold (`null` in JSON when infinite).
    pub threshold: f64,
    /// Test items that calibrated.
    pub calibration_items: usize,
    /// Test items the coverage is measured on.
    pub evaluation_items: usize,
    /// Fraction of the evaluation items inside their interval.
    pub coverage: f64,
    /// Mean interval width, in the target's units.
    pub width: f64,
}

/// What a regression calibration measured, as `metrics.json` holds it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RegressionCalibration {
    /// Per output: its name and every metric on the whole test table.
    pub outputs: Vec<(String, RegressionMetrics)>,
    /// The conformal intervals, when asked for.
    pub conformal: Vec<IntervalReport>,
}

/// Trains, measures and (with `conformal`) calibrates intervals; writes `out/metrics.json`
/// and the calibration figure.
pub fn calibrate(
    opts: &RegressionCalibrate,
    out: &Path,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<RegressionCalibration> {
    let test = opts.settings.test.as_deref().ok_or_else(|| {
        Error::config(
            "test",
            "a regression calibration measures a labeled test split: name its table",
        )
    })?;
    if opts.settings.task.is_some_and(|t| t != Task::Regression) {
        return Err(Error::config(
            "task",
            "these settings are a regression run's; a classification table names its classes \
             in a `label` column",
        ));
    }
    if let Some(a) = opts.conformal.filter(|a| !(*a > 0.0 && *a < 1.0)) {
        return Err(Error::config(
            "conformal",
            format!("miscoverage {a}; expected a level in (0, 1), e.g. 0.1"),
        ));
    }
    crate::fsutil::check_output_dir("out", out, &[&opts.data, test], false)?;
    let data = RegressionData::load(&opts.data, test, &opts.settings.target, opts.settings.task)?;
    let heads = heads(opts, &data)?;
    let all: Vec<usize> = (0..data.pool.len()).collect();
    let scaler = Standardizer::fit(&data.pool.targets, &all)?;
    let models = heads.train(&data, &scaler, &all, (opts.seed, 0), device, observer)?;
    let mut masks = stream(opts.seed, Purpose::Tool, 0);
    let d = data.test.dim();
    let (mean, var) = heads.predict(&models, &data.test_x, d, &scaler, &mut masks, device)?;
    let cal = conformal_half(data.test.len(), opts.seed)?;
    let report = measure(opts, &data, &cal, &mean, &var)?;
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
    write_json(&out.join("metrics.json"), &report)?;
    write_predictions(&out.join("predictions.csv"), &data, &cal, &mean, &var)?;
    figure(&report).save(out, "calibration")?;
    Ok(report)
}

fn heads(opts: &RegressionCalibrate, data: &RegressionData) -> Result<Heads> {
    let model = opts.model.unwrap_or(GaussKind::MlpGauss);
    let members = opts.ensemble.unwrap_or(1);
    if !(1..=crate::train::MAX_MEMBERS).contains(&members) {
        return Err(Error::config(
            "ensemble",
            format!(
                "{members} members; expected 1 to {}",
                crate::train::MAX_MEMBERS
            ),
        ));
    }
    Ok(Heads {
        cfg: model.config(data.pool.dim(), data.pool.targets.outputs()),
        loss: opts.settings.gauss_loss()?,
        members,
        params: TrainConfig {
            steps: opts.steps.unwrap_or(2000),
            batch_size: opts.batch_size.unwrap_or(32),
            lr: opts.lr.unwrap_or(1e-3),
            anchor: None,
        }
        .validate()?,
        mc_samples: opts.mc_samples,
    })
}

/// Which of `n` test items calibrate the conformal intervals: a seeded random half.
fn conformal_half(n: usize, seed: u64) -> Result<Vec<bool>> {
    let all: Vec<usize> = (0..n).collect();
    let mut in_cal = vec![false; n];
    for i in pick_random(&all, n / 2, (seed, Purpose::Tool, 1))? {
        in_cal[i] = true;
    }
    Ok(in_cal)
}

/// `predictions.csv` (module docs).
fn write_predictions(
    path: &Path,
    data: &RegressionData,
    in_cal: &[bool],
    mean: &[f64],
    var: &[f64],
) -> Result<()> {
    let t = &data.test.targets;
    let k = t.outputs();
    let mut header = vec!["id".to_string(), "part".to_string()];
    for name in t.names() {
        header.extend([name.clone(), format!("{name}_mean"), format!("{name}_std")]);
    }
    let rows = (0..t.len()).map(|i| {
        let part = if in_cal[i] {
            "calibration"
        } else {
            "evaluation"
        };
        let mut row = vec![data.test.ids[i].clone(), part.to_string()];
        for o in 0..k {
            row.extend([
                t.row(i)[o].to_string(),
                mean[i * k + o].to_string(),
                var[i * k + o].sqrt().to_string(),
            ]);
        }
        row
    });
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    crate::fsutil::write_csv(path, &header, rows)
}

/// Every metric per output, and the conformal intervals of each output.
fn measure(
    opts: &RegressionCalibrate,
    data: &RegressionData,
    in_cal: &[bool],
    mean: &[f64],
    var: &[f64],
) -> Result<RegressionCalibration> {
    let t = &data.test.targets;
    let (n, k) = (t.len(), t.outputs());
    let cal: Vec<usize> = (0..n).filter(|&i| in_cal[i]).collect();
    let eval: Vec<usize> = (0..n).filter(|&i| !in_cal[i]).collect();
    let mut outputs = Vec::with_capacity(k);
    let mut conformal = Vec::new();
    for (o, name) in t.names().iter().enumerate() {
        let y: Vec<f64> = (0..n).map(|i| t.row(i)[o]).collect();
        let mu: Vec<f64> = (0..n).map(|i| mean[i * k + o]).collect();
        let sd: Vec<f64> = (0..n).map(|i| var[i * k + o].sqrt()).collect();
        outputs.push((
            name.clone(),
            regression_metrics(&y, &mu, &sd, &DEFAULT_LEVELS)?,
        ));
        if let Some(alpha) = opts.conformal {
            for score in [IntervalScore::Absolute, IntervalScore::Normalized] {
                let pred = |i: usize| Prediction::Gaussian {
                    mean: mu[i],
                    std: sd[i],
                };
                let cal_preds: Vec<Prediction> = cal.iter().map(|&i| pred(i)).collect();
                let cal_y: Vec<f64> = cal.iter().map(|&i| y[i]).collect();
                let c = ConformalIntervals::calibrate(score, &cal_preds, &cal_y, alpha, None)?;
                let (mut inside, mut width) = (0usize, 0f64);
                for &i in &eval {
                    let (lo, hi) = c.interval(&pred(i), None)?;
                    inside += usize::from(lo <= y[i] && y[i] <= hi);
                    width += hi - lo;
                }
                conformal.push(IntervalReport {
                    output: name.clone(),
                    score: score.name(),
                    alpha,
                    threshold: c.threshold(None),
                    calibration_items: cal.len(),
                    evaluation_items: eval.len(),
                    coverage: inside as f64 / eval.len().max(1) as f64,
                    width: width / eval.len().max(1) as f64,
                });
            }
        }
    }
    Ok(RegressionCalibration { outputs, conformal })
}

/// Observed against nominal quantile levels, and the sparsification curves, per output.
fn figure(report: &RegressionCalibration) -> Figure {
    let levels = quantile_levels();
    let mut quantiles = Panel {
        log_y: false,
        title: "Quantile calibration".into(),
        x_label: "nominal level".into(),
        y_label: "observed frequency".into(),
        series: vec![Series {
            name: "ideal".into(),
            points: levels.iter().map(|&p| (p, p)).collect(),
            band: Vec::new(),
        }],
    };
    let mut sparsification = Panel {
        log_y: false,
        title: "Sparsification (RMSE of the rest, relative)".into(),
        x_label: "fraction removed".into(),
        y_label: "relative RMSE".into(),
        series: Vec::new(),
    };
    for (name, m) in &report.outputs {
        quantiles.series.push(Series {
            name: name.clone(),
            points: levels
                .iter()
                .copied()
                .zip(m.quantile_observed.iter().copied())
                .collect(),
            band: Vec::new(),
        });
        if let Some(s) = &m.sparsification {
            for (what, curve) in [("by std", &s.model), ("oracle", &s.oracle)] {
                sparsification.series.push(Series {
                    name: format!("{name} {what}"),
                    points: s
                        .fractions
                        .iter()
                        .copied()
                        .zip(curve.iter().copied())
                        .collect(),
                    band: Vec::new(),
                });
            }
        }
    }
    Figure {
        panels: vec![quantiles, sparsification],
        panel_width: 480,
        height: 360,
        columns: 0,
    }
}
