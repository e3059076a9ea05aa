//! Out-of-distribution detection: score an in-distribution test split and an OOD test split
//! with each scorer (OOD = positive, higher score = more OOD) and report AUROC, AUPR (in and
//! out) and FPR at 95% TPR.
//!
//! Files written to the output folder: `ood.csv` (one row per scorer), `metrics.json`,
//! `scores.csv` (`split,index,<scorer>...`), `roc.svg/png` and `hist.svg/png`.

use super::create_out;
use super::model::{scoring, training_reference, ModelSource};
use super::score::score_all;
use crate::checkpoint::Checkpoint;
use crate::data::Dataset;
use crate::error::{Error, Result, ResultExt};
use crate::fsutil::{check_output_dir, write_csv, write_json};
use crate::hub::Hub;
use crate::metrics::{ood_metrics, roc_curve, OodMetrics};
use crate::observe::Observer;
use crate::observe::Silent;
use crate::plot::{Figure, Panel, Series};
use crate::predict;
use alkit_acquisition::Scorer;
use candle_core::Device;
use std::path::Path;
use std::sync::Arc;

/// What [`run`] measured.
#[derive(Debug, Clone, PartialEq)]
pub struct OodReport {
    /// Accuracy on the in-distribution test split; `None` when its labels are not the
    /// model's classes ([`accuracy_note`](Self::accuracy_note) says why).
    pub id_accuracy: Option<f64>,
    /// Why the accuracy was not measured.
    pub accuracy_note: Option<String>,
    /// In-distribution items scored.
    pub id_items: usize,
    /// OOD items scored.
    pub ood_items: usize,
    /// One row per scorer, in the order given.
    pub rows: Vec<(String, OodMetrics)>,
}

/// `alkit ood`: the model of `source` (its checkpoint, or one trained on `id_data`'s train split
/// and saved to `out/model`), both data sets' test splits normalised with its statistics, and
/// [`measure`] into `out`. Refuses an `out` that would overwrite an input before anything is read;
/// downloads and training report to `observer`.
#[allow(clippy::too_many_arguments)]
pub fn run(
    source: &ModelSource,
    id_data: &str,
    ood_data: &str,
    scorers: &[Arc<dyn Scorer>],
    out: &Path,
    hub: &Hub,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<OodReport> {
    let mut inputs = vec![Path::new(id_data), Path::new(ood_data)];
    inputs.extend(source.checkpoint.as_deref().map(Path::new));
    check_output_dir("out", out, &inputs, false)?;
    let e = source.model_and_data(
        id_data,
        &[ood_data],
        scorers,
        |_| None,
        &out.join("model"),
        hub,
        device,
        observer,
    )?;
    let (ck, splits, ood, scorers) = (&e.ck, &e.splits, &e.others, &e.served);
    let norm = &ck.config.normalizer;
    same_items(&splits.test, &ood[0])?;
    let (id_test, ood_test) = (norm.apply(&splits.test)?, norm.apply(&ood[0])?);
    let train = &splits.train;
    let all: Vec<usize> = (0..train.len()).collect();
    let reference = training_reference(
        source, ck, id_data, train, &all, scorers, hub, device, observer,
    )?;
    let mut report = measure(
        ck,
        &id_test,
        &ood_test,
        scorers,
        reference,
        source.seed,
        out,
        device,
    )
    .context_with(|| format!("OOD evaluation against {ood_data}"))?;
    if let Some(why) = &e.foreign_labels {
        report.id_accuracy = None;
        report.accuracy_note = Some(why.clone());
    }
    Ok(report)
}

/// Scores `id_test` and `ood_test` (both normalised with the model's statistics) with each
/// scorer through `model`, writes the files of the module docs into `out` and returns the
/// metrics. `reference` holds the training features the detectors that need them read
/// ([`training_reference`]); `seed` keys the scorers' noise.
#[allow(clippy::too_many_arguments)]
pub fn measure(
    model: &Checkpoint,
    id_test: &Dataset,
    ood_test: &Dataset,
    scorers: &[Arc<dyn Scorer>],
    reference: Option<Arc<alkit_acquisition::Reference>>,
    seed: u64,
    out: &Path,
    device: &Device,
) -> Result<OodReport> {
    same_items(id_test, ood_test)?;
    let mut scoring = scoring(model, device);
    scoring.reference = reference;
    let id_scores = score_all(&scoring, id_test, scorers, seed)?;
    let ood_scores = score_all(&scoring, ood_test, scorers, seed)?;
    let id_accuracy = predict::evaluate(
        model.model.as_ref(),
        id_test,
        scoring.batch,
        device,
        &mut Silent,
    )?
    .acc;
    let mut rows = Vec::with_capacity(scorers.len());
    let mut roc = Panel {
        log_y: false,
        title: "ROC (OOD positive)".into(),
        x_label: "false positive rate".into(),
        y_label: "true positive rate".into(),
        series: Vec::new(),
    };
    let mut hists = Vec::new();
    for (i, s) in scorers.iter().enumerate() {
        let m = ood_metrics(&id_scores[i], &ood_scores[i])?;
        rows.push((s.name().to_string(), m));
        let all: Vec<f32> = id_scores[i].iter().chain(&ood_scores[i]).copied().collect();
        let is_ood: Vec<bool> = (0..all.len()).map(|k| k >= id_scores[i].len()).collect();
        roc.series.push(Series {
            name: format!("{} (AUROC {:.3})", s.name(), m.auroc),
            points: roc_curve(&all, &is_ood)?,
            band: Vec::new(),
        });
        hists.push(histogram_panel(s.name(), &id_scores[i], &ood_scores[i]));
    }
    create_out(out)?;
    let mut json = serde_json::Map::new();
    for (name, m) in &rows {
        json.insert(
            name.clone(),
            serde_json::to_value(m).map_err(|e| Error::config("metrics", e.to_string()))?,
        );
    }
    let table = rows.iter().map(|(name, m)| {
        let cells = [m.auroc, m.aupr_in, m.aupr_out, m.fpr95].map(|v| format!("{v:.6}"));
        std::iter::once(name.clone())
            .chain(cells)
            .collect::<Vec<_>>()
    });
    let header = ["scorer", "auroc", "aupr_in", "aupr_out", "fpr95"];
    write_csv(&out.join("ood.csv"), &header, table)?;
    write_json(&out.join("metrics.json"), &serde_json::Value::Object(json))?;
    let header: Vec<&str> = ["split", "index"]
        .into_iter()
        .chain(scorers.iter().map(|s| s.name()))
        .collect();
    let score_rows = [("id", &id_scores), ("ood", &ood_scores)]
        .into_iter()
        .flat_map(|(split, cols)| {
            (0..cols.first().map_or(0, Vec::len)).map(move |k| {
                [split.to_string(), k.to_string()]
                    .into_iter()
                    .chain(cols.iter().map(|c| c[k].to_string()))
                    .collect::<Vec<_>>()
            })
        });
    write_csv(&out.join("scores.csv"), &header, score_rows)?;
    Figure {
        panels: vec![roc],
        panel_width: 520,
        height: 420,
        columns: 0,
    }
    .save(out, "roc")?;
    Figure {
        panels: hists,
        panel_width: 360,
        height: 300,
        columns: 4,
    }
    .save(out, "hist")?;
    Ok(OodReport {
        id_accuracy: Some(id_accuracy),
        accuracy_note: None,
        id_items: id_test.len(),
        ood_items: ood_test.len(),
        rows,
    })
}

/// Score histograms (fraction of items per bin, 30 bins over the joint range) of
/// in-distribution vs OOD, drawn as steps; on a log axis when one bin towers over the rest
/// ([`spiky`]).
fn histogram_panel(name: &str, id: &[f32], ood: &[f32]) -> Panel {
    let lo = id.iter().chain(ood).copied().fold(f32::INFINITY, f32::min);
    let hi = id
        .iter()
        .chain(ood)
        .copied()
        .fold(f32::NEG_INFINITY, f32::max);
    let bins = 30;
    let width = f64::from((hi - lo).max(1e-12)) / bins as f64;
    let fractions = |v: &[f32]| {
        let mut counts = vec![0usize; bins];
        for &x in v {
            let b = ((f64::from(x - lo) / width) as usize).min(bins - 1);
            counts[b] += 1;
        }
        counts
            .into_iter()
            .map(|c| c as f64 / v.len() as f64)
            .collect::<Vec<f64>>()
    };
    let steps = |f: &[f64]| {
        let mut pts = Vec::new();
        for (b, &y) in f.iter().enumerate() {
            pts.push((f64::from(lo) + b as f64 * width, y));
            pts.push((f64::from(lo) + (b + 1) as f64 * width, y));
        }
        pts
    };
    let (f_id, f_ood) = (fractions(id), fractions(ood));
    Panel {
        title: name.into(),
        x_label: "score".into(),
        y_label: "fraction of items".into(),
        log_y: spiky(f_id.iter().chain(&f_ood).copied()),
        series: vec![
            Series {
                name: "in-dist.".into(),
                points: steps(&f_id),
                band: Vec::new(),
            },
            Series {
                name: "OOD".into(),
                points: steps(&f_ood),
                band: Vec::new(),
            },
        ],
    }
}

/// Whether the tallest bin is over 20 times the median non-empty bin: then a linear axis
/// flattens every other bin to the floor (a confident model's scores pile up at one end).
fn spiky(fractions: impl Iterator<Item = f64>) -> bool {
    let mut f: Vec<f64> = fractions.filter(|&v| v > 0.0).collect();
    if f.len() < 3 {
        return false;
    }
    f.sort_by(f64::total_cmp);
    f[f.len() - 1] > 20.0 * f[f.len() / 2]
}

/// Refuses OOD items of another shape than the in-distribution ones (before either is
/// normalised with the model's statistics, which would fail less clearly).
fn same_items(id_test: &Dataset, ood_test: &Dataset) -> Result<()> {
    if ood_test.item_shape() == id_test.item_shape() {
        return Ok(());
    }
    Err(Error::config(
        "ood_data",
        format!(
            "OOD items are {:?}, in-distribution items {:?}: the model takes the latter; \
             give OOD data of the same kind (images of the same size and channels, or \
             features of the same width)",
            ood_test.item_shape(),
            id_test.item_shape()
        ),
    ))
}
