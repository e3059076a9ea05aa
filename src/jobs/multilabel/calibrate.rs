//! `alkit calibrate` for label sets: sigmoid heads trained on every row of the train table,
//! measured on the test table (the metrics of [`crate::metrics::multilabel`], and each label's
//! average precision, F1 and ECE), and, with a level `alpha`, per-label LAC sets and the
//! conformal control of the false-negative rate calibrated on a seeded random half of the test
//! table, with their coverage, risk and sizes on the other half.
//!
//! Writes `metrics.json`.

use super::data::MultiLabelData;
use super::fit::Heads;
use super::settings::MultiLabelSettings;
use crate::error::{Error, Result};
use crate::fsutil::write_json;
use crate::metrics::ece_mce;
use crate::metrics::multilabel::{average_precision, label_metrics, LabelMetrics};
use crate::models::SigmoidKind;
use crate::observe::Observer;
use crate::rng::{stream, Purpose};
use crate::round::pick_random;
use crate::train::TrainConfig;
use alkit_acquisition::{control_recall, default_lambdas, LabelLac};
use candle_core::Device;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// What a multi-label calibration is told.
#[derive(Debug, Clone, PartialEq)]
pub struct MultiLabelCalibrate {
    /// The train table.
    pub data: PathBuf,
    /// The labeled test table (the pool's kind and columns).
    pub test: Option<PathBuf>,
    /// Label sets, separator, threshold.
    pub settings: MultiLabelSettings,
    /// The sigmoid head. [default: mlp-sigmoid]
    pub model: Option<SigmoidKind>,
    /// Members of a deep ensemble (none: one head).
    pub ensemble: Option<usize>,
    /// Adam steps. [default: 2000]
    pub steps: Option<usize>,
    /// Mini-batch size. [default: 32]
    pub batch_size: Option<usize>,
    /// Seed of the training, the dropout masks and the conformal split.
    pub seed: u64,
    /// MC-dropout passes of a single head with dropout.
    pub mc_samples: usize,
    /// Level of the conformal guarantees, in `(0, 1)`: miscoverage of each label's LAC set,
    /// and the false-negative rate controlled.
    pub conformal: Option<f64>,
}

/// One label's figures on the test table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LabelReport {
    /// The label.
    pub label: String,
    /// Its share of the test items.
    pub prevalence: f64,
    /// Average precision (0 when no test item carries it).
    pub ap: f64,
    /// ECE of its probability (15 bins).
    pub ece: f64,
}

/// One label's conformal LAC sets on the evaluation half.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LacReport {
    /// The label.
    pub label: String,
    /// The calibrated threshold on `1 - p(answer)` (infinite: both answers always).
    pub threshold: f64,
    /// Share of evaluation items whose set holds the true answer.
    pub coverage: f64,
    /// Share of evaluation items whose set holds both answers (the label left open).
    pub both: f64,
}

/// The false-negative rate controlled by conformal risk control.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecallReport {
    /// The chosen threshold: sets hold the labels with `p > lambda`.
    pub lambda: f64,
    /// The calibration half's false-negative rate at it.
    pub calibration_fnr: f64,
    /// Its conformal bound, below `alpha`.
    pub bound: f64,
    /// The evaluation half's false-negative rate.
    pub evaluation_fnr: f64,
    /// The evaluation half's mean set size.
    pub mean_size: f64,
}

/// The conformal guarantees of one calibration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConformalReport {
    /// The level.
    pub alpha: f64,
    /// Calibration items.
    pub calibration: usize,
    /// Evaluation items.
    pub evaluation: usize,
    /// Per-label LAC sets.
    pub lac: Vec<LacReport>,
    /// The controlled false-negative rate.
    pub recall: RecallReport,
}

/// What `metrics.json` holds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MultiLabelCalibration {
    /// Test items.
    pub test_items: usize,
    /// The whole test table's figures.
    pub metrics: LabelMetrics,
    /// Per label.
    pub labels: Vec<LabelReport>,
    /// With a level given.
    pub conformal: Option<ConformalReport>,
}

/// Trains on the whole train table, measures on the test table, writes `out/metrics.json`.
pub fn calibrate(
    opts: &MultiLabelCalibrate,
    out: &Path,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<MultiLabelCalibration> {
    let test = opts.test.as_deref().ok_or_else(|| {
        Error::config(
            "test",
            "a multi-label calibration measures a labeled test table: name it",
        )
    })?;
    if let Some(a) = opts.conformal.filter(|a| !(*a > 0.0 && *a < 1.0)) {
        return Err(Error::config(
            "conformal",
            format!("level {a}; expected a value in (0, 1), e.g. 0.1"),
        ));
    }
    crate::fsutil::check_output_dir("out", out, &[&opts.data, test], false)?;
    let s = &opts.settings;
    let data = MultiLabelData::load(&opts.data, test, &s.labels, &s.format())?;
    let threshold = s.threshold()?;
    let heads = Heads {
        cfg: opts
            .model
            .unwrap_or(SigmoidKind::MlpSigmoid)
            .config(data.pool.dim(), data.pool.sets.labels()),
        members: opts.ensemble.unwrap_or(1),
        params: TrainConfig {
            steps: opts.steps.unwrap_or(2000),
            batch_size: opts.batch_size.unwrap_or(32),
            lr: 1e-3,
            anchor: None,
        }
        .validate()?,
        mc_samples: opts.mc_samples,
    };
    let all: Vec<usize> = (0..data.pool.len()).collect();
    let models = heads.train(&data, &all, (opts.seed, 0), device, observer)?;
    let mut masks = stream(opts.seed, Purpose::Tool, 0);
    let probs = heads.predict(&models, &data.test_x, &mut masks, device)?;
    let sets = &data.test.sets;
    let l = sets.labels();
    let truth: Vec<u8> = (0..sets.len()).flat_map(|i| sets.row(i).to_vec()).collect();
    let report = MultiLabelCalibration {
        test_items: sets.len(),
        metrics: label_metrics(&truth, &probs, l, threshold)?,
        labels: per_label(sets.names(), &truth, &probs)?,
        conformal: match opts.conformal {
            Some(alpha) => Some(conformal(sets.names(), &truth, &probs, alpha, opts.seed)?),
            None => None,
        },
    };
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
    write_json(&out.join("metrics.json"), &report)?;
    Ok(report)
}

/// Each label's prevalence, average precision and ECE.
fn per_label(names: &[String], truth: &[u8], probs: &[f64]) -> Result<Vec<LabelReport>> {
    let l = names.len();
    let n = truth.len() / l;
    names
        .iter()
        .enumerate()
        .map(|(j, name)| {
            let y: Vec<u8> = (0..n).map(|i| truth[i * l + j]).collect();
            let p: Vec<f64> = (0..n).map(|i| probs[i * l + j]).collect();
            let conf: Vec<f32> = p.iter().map(|&v| v as f32).collect();
            let hit: Vec<bool> = y.iter().map(|&v| v == 1).collect();
            Ok(LabelReport {
                label: name.clone(),
                prevalence: hit.iter().filter(|&&h| h).count() as f64 / n as f64,
                ap: average_precision(&y, &p).unwrap_or(0.0),
                ece: ece_mce(&conf, &hit)?.0,
            })
        })
        .collect()
}

/// The rows of `(n, L)` arrays at `items`.
fn rows<T: Copy>(v: &[T], l: usize, items: &[usize]) -> Vec<T> {
    items
        .iter()
        .flat_map(|&i| v[i * l..(i + 1) * l].iter().copied())
        .collect()
}

/// Per-label LAC sets and the false-negative rate controlled at `alpha`, calibrated on a
/// seeded random half of the test items (`(seed, Tool, 1)`), measured on the rest.
fn conformal(
    names: &[String],
    truth: &[u8],
    probs: &[f64],
    alpha: f64,
    seed: u64,
) -> Result<ConformalReport> {
    let l = names.len();
    let n = truth.len() / l;
    let all: Vec<usize> = (0..n).collect();
    let mut in_cal = vec![false; n];
    for i in pick_random(&all, n / 2, (seed, Purpose::Tool, 1))? {
        in_cal[i] = true;
    }
    let (cal, eval): (Vec<usize>, Vec<usize>) = all.iter().partition(|&&i| in_cal[i]);
    if cal.is_empty() || eval.is_empty() {
        return Err(Error::config(
            "conformal",
            format!("{n} test items cannot be split into a calibration and an evaluation half"),
        ));
    }
    let (cal_y, cal_p) = (rows(truth, l, &cal), rows(probs, l, &cal));
    let (eval_y, eval_p) = (rows(truth, l, &eval), rows(probs, l, &eval));
    let lac = LabelLac::calibrate(&cal_y, &cal_p, l, alpha)?;
    let m = eval.len() as f64;
    let lac_reports = names
        .iter()
        .enumerate()
        .map(|(j, name)| {
            let (mut covered, mut both) = (0usize, 0usize);
            for i in 0..eval.len() {
                let set = lac.set(j, eval_p[i * l + j]);
                covered += usize::from(set.contains(&usize::from(eval_y[i * l + j])));
                both += usize::from(set.len() == 2);
            }
            LacReport {
                label: name.clone(),
                threshold: lac.labels[j].threshold,
                coverage: covered as f64 / m,
                both: both as f64 / m,
            }
        })
        .collect();
    let control = control_recall(&cal_y, &cal_p, l, alpha, &default_lambdas())?;
    let (mut fnr, mut size, mut counted) = (0.0, 0usize, 0usize);
    for i in 0..eval.len() {
        let (y, p) = (&eval_y[i * l..(i + 1) * l], &eval_p[i * l..(i + 1) * l]);
        let positives = y.iter().filter(|&&v| v == 1).count();
        size += p.iter().filter(|&&q| q > control.lambda).count();
        if positives > 0 {
            let hit = y
                .iter()
                .zip(p)
                .filter(|(&t, &q)| t == 1 && q > control.lambda)
                .count();
            fnr += 1.0 - hit as f64 / positives as f64;
            counted += 1;
        }
    }
    Ok(ConformalReport {
        alpha,
        calibration: cal.len(),
        evaluation: eval.len(),
        lac: lac_reports,
        recall: RecallReport {
            lambda: control.lambda,
            calibration_fnr: control.risk,
            bound: control.bound,
            evaluation_fnr: fnr / counted.max(1) as f64,
            mean_size: size as f64 / m,
        },
    })
}
