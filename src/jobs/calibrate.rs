//! Calibration: how well the model's probabilities and each scorer's ranking match its
//! mistakes on a test split: ECE/MCE (15 bins), NLL and Brier of the (optionally
//! temperature-scaled) probabilities, and per scorer the rAULC and the misclassification AUROC,
//! with reliability and rejection curves. With a miscoverage level, split conformal prediction
//! ([`alkit_acquisition::Conformal`]): the test split is cut at random (seeded) into a
//! calibration half and an evaluation half, and for LAC, APS and RAPS the empirical coverage
//! and mean set size on the evaluation half are reported, overall and per class, with one
//! threshold for every class and with Mondrian (class-conditional) thresholds, one per class
//! ([`alkit_acquisition::ClassConformal`]).
//!
//! Files written to the output folder: `metrics.json`, `reliability.svg/png`,
//! `rejection.svg/png`.

use super::create_out;
use super::model::{scoring, training_reference, ModelSource};
use crate::checkpoint::Checkpoint;
use crate::data::Dataset;
use crate::error::{Error, Result, ResultExt};
use crate::fsutil::{check_output_dir, write_json};
use crate::hub::Hub;
use crate::metrics::{
    auroc, fit_temperature, raulc, rejection_curve, reliability, temperature_scale, Bin,
    CalibrationMetrics,
};
use crate::observe::Observer;
use crate::observe::Silent;
use crate::plot::{Figure, Panel, Series};
use crate::predict::{log_probs_of, probs_from_log};
use crate::rng::{stream, uniform, Purpose};
use alkit_acquisition::{
    ApsForm, ClassConformal, Conformal, ConformalScore, Evidence, Needs, Probs, Reference, Scorer,
};
use candle_core::Device;
use serde::Serialize;
use std::path::Path;
use std::sync::Arc;

/// `alkit calibrate`: the model of `source` (its checkpoint, or one trained on `data`'s train
/// split and saved to `out/model`, less the last tenth with `temperature`), `data`'s test split
/// normalised with its statistics, and [`measure`] into `out`; with `temperature` the
/// temperature is fitted on the last tenth of the train split, which a model trained here
/// never saw. Refuses an `out` that would overwrite an input before anything is read;
/// downloads and training report to `observer`.
#[allow(clippy::too_many_arguments)]
pub fn run(
    source: &ModelSource,
    data: &str,
    temperature: bool,
    conformal: Option<f64>,
    scorers: &[Arc<dyn Scorer>],
    out: &Path,
    hub: &Hub,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<CalibrationReport> {
    let mut inputs = vec![Path::new(data)];
    inputs.extend(source.checkpoint.as_deref().map(Path::new));
    check_output_dir("out", out, &inputs, false)?;
    let holdout_of = |n: usize| if temperature { n / 10 } else { 0 };
    let e = source.model_and_data(
        data,
        &[],
        scorers,
        |n| Some(n - holdout_of(n)),
        &out.join("model"),
        hub,
        device,
        observer,
    )?;
    if let Some(why) = e.foreign_labels {
        return Err(Error::config(
            "checkpoint",
            format!(
                "{why}. Calibration measures the model's confidence against the labels, so \
                 they must name its classes"
            ),
        ));
    }
    let (ck, splits, scorers) = (e.ck, e.splits, e.served);
    let n_train = splits.train.len();
    let test = ck.config.normalizer.apply(&splits.test)?;
    let train = ck.config.normalizer.apply(&splits.train)?;
    let val: Vec<usize> = (n_train - holdout_of(n_train)..n_train).collect();
    let holdout = temperature.then_some(Holdout {
        data: &train,
        val: &val,
    });
    let trained: Vec<usize> = (0..n_train - holdout_of(n_train)).collect();
    let reference = training_reference(
        source,
        &ck,
        data,
        &splits.train,
        &trained,
        &scorers,
        hub,
        device,
        observer,
    )?;
    let options = Options {
        conformal,
        seed: source.seed,
    };
    measure(
        &ck, &test, holdout, &scorers, reference, options, out, device,
    )
    .context_with(|| "calibration")
}

/// Temperature scaling: the held-out items `data[val]` (normalised) the temperature is
/// fitted on by NLL.
pub struct Holdout<'a> {
    /// Normalised data holding the held-out items.
    pub data: &'a Dataset,
    /// Their indices (never trained on).
    pub val: &'a [usize],
}

/// What [`measure`] does besides the metrics every calibration reports.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Options {
    /// Split conformal prediction at this miscoverage level `alpha` in `(0, 1)`.
    pub conformal: Option<f64>,
    /// Keys the scorers' noise and the conformal split.
    pub seed: u64,
}

/// One conformal score's sets on the evaluation half of the test split.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConformalRow {
    /// `lac`, `aps` or `raps`.
    pub score: String,
    /// The miscoverage level.
    pub alpha: f64,
    /// Mondrian (class-conditional): one threshold per class, each calibrated on that
    /// class's calibration items ([`ClassConformal`]); else one for every class.
    pub mondrian: bool,
    /// The calibrated threshold of a marginal row (`null` in JSON when infinite: every class,
    /// and for a Mondrian row).
    pub threshold: Option<f64>,
    /// A Mondrian row's threshold per class (`null` for an infinite one); absent from a
    /// marginal row.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thresholds: Option<Vec<Option<f64>>>,
    /// Calibration items.
    pub calibration_items: usize,
    /// Evaluation items.
    pub evaluation_items: usize,
    /// Fraction of evaluation items whose set holds their label.
    pub coverage: f64,
    /// Mean set size.
    pub mean_size: f64,
    /// Per class (by label): evaluation items, coverage and mean set size.
    pub per_class: Vec<ClassCoverage>,
}

/// Coverage and set size of one class's evaluation items.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassCoverage {
    /// The class index.
    pub class: usize,
    /// Its evaluation items.
    pub items: usize,
    /// Fraction whose set holds the label (`null` in JSON without items).
    pub coverage: Option<f64>,
    /// Mean set size (`null` without items).
    pub mean_size: Option<f64>,
}

/// RAPS with Angelopoulos et al. 2021's ImageNet penalty and free ranks, in `form`.
pub const fn raps(form: ApsForm) -> ConformalScore {
    ConformalScore::Raps {
        lambda: 0.01,
        k_reg: 5,
        form,
    }
}

/// The scores `calibrate` reports, in its table's order: LAC, APS and RAPS ([`raps`]) by
/// Romano's non-randomised rule, then APS and RAPS randomised.
pub const REPORTED: [ConformalScore; 5] = [
    ConformalScore::Lac,
    ConformalScore::Aps {
        form: ApsForm::Romano,
    },
    raps(ApsForm::Romano),
    ConformalScore::Aps {
        form: ApsForm::Randomized,
    },
    raps(ApsForm::Randomized),
];

/// Split conformal on `probs (n, c)` with `labels`: a seeded random half calibrates, the other
/// half is evaluated, for each of [`REPORTED`], marginal then Mondrian. The randomised forms draw one uniform per test
/// item from the seed's tool stream (key 1), the same draw for every score.
pub fn conformal_rows(
    probs: &Probs,
    labels: &[u32],
    alpha: f64,
    seed: u64,
) -> Result<Vec<ConformalRow>> {
    let n = probs.n();
    if n < 2 {
        return Err(Error::config(
            "conformal",
            format!("the test split has {n} items; a calibration and an evaluation half need 2"),
        ));
    }
    let mut rng = stream(seed, Purpose::Tool, 0);
    let mut order = rand::seq::index::sample(&mut rng, n, n).into_vec();
    let (cal, eval) = order.split_at_mut(n / 2);
    cal.sort_unstable();
    eval.sort_unstable();
    let c = probs.classes();
    let rows_of = |idx: &[usize]| -> Result<Probs> {
        let data = idx
            .iter()
            .flat_map(|&i| probs.row(i).iter().copied())
            .collect();
        Ok(Probs::new(data, idx.len(), c)?)
    };
    let cal_probs = rows_of(cal)?;
    let cal_labels: Vec<usize> = cal.iter().map(|&i| labels[i] as usize).collect();
    let mut draw_rng = stream(seed, Purpose::Tool, 1);
    let draws: Vec<f64> = (0..n).map(|_| uniform(&mut draw_rng)).collect();
    let cal_draws: Vec<f64> = cal.iter().map(|&i| draws[i]).collect();
    let mut out = Vec::new();
    for score in REPORTED {
        let given = if score.randomized() {
            &cal_draws[..]
        } else {
            &[]
        };
        let conf = Conformal::calibrate(score, &cal_probs, &cal_labels, alpha, given)?;
        let finite = |t: f64| t.is_finite().then_some(t);
        let mut row = evaluated(|p, u| conf.set(p, u), eval, probs, labels, &draws);
        row.threshold = finite(conf.threshold);
        out.push(ConformalRow {
            score: score.name().into(),
            alpha,
            calibration_items: cal.len(),
            ..row
        });
        let per = ClassConformal::calibrate(score, &cal_probs, &cal_labels, alpha, given)?;
        let mut row = evaluated(|p, u| per.set(p, u), eval, probs, labels, &draws);
        row.thresholds = Some(per.thresholds.iter().map(|&t| finite(t)).collect());
        out.push(ConformalRow {
            score: score.name().into(),
            alpha,
            calibration_items: cal.len(),
            mondrian: true,
            ..row
        });
    }
    Ok(out)
}

/// Coverage and set sizes over the evaluation items `eval` of sets made by `set` (a row and
/// its item's draw in, ascending classes out), overall and per class; the row's score,
/// level, calibration count and thresholds are the caller's to fill.
fn evaluated(
    set: impl Fn(&[f32], f64) -> Vec<usize>,
    eval: &[usize],
    probs: &Probs,
    labels: &[u32],
    draws: &[f64],
) -> ConformalRow {
    let c = probs.classes();
    let mut per = vec![(0usize, 0usize, 0usize); c];
    for &i in eval {
        let got = set(probs.row(i), draws[i]);
        let y = labels[i] as usize;
        let slot = &mut per[y.min(c - 1)];
        slot.0 += 1;
        slot.1 += usize::from(got.contains(&y));
        slot.2 += got.len();
    }
    let total = eval.len() as f64;
    ConformalRow {
        score: String::new(),
        alpha: f64::NAN,
        mondrian: false,
        threshold: None,
        thresholds: None,
        calibration_items: 0,
        evaluation_items: eval.len(),
        coverage: per.iter().map(|p| p.1).sum::<usize>() as f64 / total,
        mean_size: per.iter().map(|p| p.2).sum::<usize>() as f64 / total,
        per_class: per
            .iter()
            .enumerate()
            .map(|(class, &(items, hit, size))| ClassCoverage {
                class,
                items,
                coverage: (items > 0).then(|| hit as f64 / items as f64),
                mean_size: (items > 0).then(|| size as f64 / items as f64),
            })
            .collect(),
    }
}

/// What [`measure`] measured.
#[derive(Debug, Clone, PartialEq)]
pub struct CalibrationReport {
    /// Test accuracy.
    pub accuracy: f64,
    /// The fitted temperature (`None` without temperature scaling).
    pub temperature: Option<f64>,
    /// Expected calibration error (15 bins).
    pub ece: f64,
    /// Maximum calibration error.
    pub mce: f64,
    /// Mean negative log-likelihood (nats).
    pub nll: f64,
    /// Brier score.
    pub brier: f64,
    /// One row per scorer, in the order given.
    pub rows: Vec<(String, CalibrationMetrics)>,
    /// Conformal sets per score, when asked for.
    pub conformal: Vec<ConformalRow>,
}

/// Evaluates `model` on `test` (normalised with its statistics), temperature-scaled on
/// `holdout` when given, writes the files of the module docs into `out` and returns the
/// metrics. Probability scorers then score the scaled probabilities; scorers with other
/// evidence (gradients, samples, features) score the model itself. `reference` holds the
/// training features the detectors that need them read; conformal sets are made from the
/// (scaled) probabilities.
#[allow(clippy::too_many_arguments)]
pub fn measure(
    model: &Checkpoint,
    test: &Dataset,
    holdout: Option<Holdout<'_>>,
    scorers: &[Arc<dyn Scorer>],
    reference: Option<Arc<Reference>>,
    options: Options,
    out: &Path,
    device: &Device,
) -> Result<CalibrationReport> {
    let seed = options.seed;
    let c = model.model.classes();
    let (lp, temperature) = scaled_log_probs(model, test, holdout, device)?;
    let probs = probs_from_log(&lp, c)?;
    let labels = test.labels();
    let metrics = crate::metrics::probability_metrics(&probs, labels)?;
    let conformal = match options.conformal {
        Some(alpha) => conformal_rows(&probs, labels, alpha, seed)?,
        None => Vec::new(),
    };
    let mut scoring = scoring(model, device);
    scoring.reference = reference;
    // Probability scorers score the scaled probabilities where a temperature was fitted.
    let scaled = temperature.map(|_| &probs);
    let (rows, rejection) = score_rows(&scoring, test, scorers, scaled, &metrics, seed)?;
    let bins = reliability(&metrics.confidence, &metrics.correct, 15)?;
    let report = CalibrationReport {
        accuracy: metrics.accuracy,
        temperature,
        ece: metrics.ece,
        mce: metrics.mce,
        nll: metrics.nll,
        brier: metrics.brier,
        rows,
        conformal,
    };
    write_files(out, &report, &bins, metrics.confidence.len(), rejection)?;
    Ok(report)
}

/// The model's log-probabilities of `test`, temperature-scaled on `holdout` when given (with
/// the temperature fitted).
fn scaled_log_probs(
    model: &Checkpoint,
    test: &Dataset,
    holdout: Option<Holdout<'_>>,
    device: &Device,
) -> Result<(Vec<f32>, Option<f64>)> {
    let m = model.model.as_ref();
    let c = m.classes();
    let all: Vec<usize> = (0..test.len()).collect();
    let batch = crate::predict::default_batch(test.item_len());
    let mut lp = log_probs_of(m, test, &all, batch, device, &mut Silent)?;
    let Some(h) = holdout else {
        return Ok((lp, None));
    };
    let vlp = log_probs_of(m, h.data, h.val, batch, device, &mut Silent)?;
    let labels: Vec<u32> = h.val.iter().map(|&i| h.data.labels()[i]).collect();
    let t = fit_temperature(&vlp, c, &labels)?;
    temperature_scale(&mut lp, c, t)?;
    Ok((lp, Some(t)))
}

/// Each scorer's row (probability scorers read `scaled` where given, the others the model
/// itself), and the rejection-classification panel of every scorer with the oracle's curve.
fn score_rows(
    scoring: &crate::predict::Scoring<'_>,
    test: &Dataset,
    scorers: &[Arc<dyn Scorer>],
    scaled: Option<&Probs>,
    metrics: &crate::metrics::ProbabilityMetrics,
    seed: u64,
) -> Result<(Vec<(String, CalibrationMetrics)>, Panel)> {
    let all: Vec<usize> = (0..test.len()).collect();
    let correct = &metrics.correct;
    let wrong: Vec<bool> = correct.iter().map(|k| !k).collect();
    let mut rows = Vec::with_capacity(scorers.len());
    let mut rejection = Panel {
        log_y: false,
        title: "Rejection-classification".into(),
        x_label: "fraction rejected".into(),
        y_label: "accuracy on retained".into(),
        series: Vec::new(),
    };
    let mut oracle = Vec::new();
    for s in scorers {
        let scores = match scaled.filter(|_| s.needs() == Needs::PROBS) {
            Some(p) => s.score(&Evidence::from_probs(p.clone()))?,
            None => {
                let mut rng = stream(seed, Purpose::Perturb, 0);
                s.score(&scoring.evidence(test, &all, s.needs(), &mut rng, &mut Silent)?)?
            }
        };
        let row = CalibrationMetrics {
            raulc: raulc(&scores, correct)?,
            ece: metrics.ece,
            mce: metrics.mce,
            nll: metrics.nll,
            brier: metrics.brier,
            misclassification_auroc: auroc(&scores, &wrong)?,
        };
        rows.push((s.name().to_string(), row));
        let curve = rejection_curve(&scores, correct)?;
        rejection.series.push(Series {
            name: s.name().into(),
            points: curve.iter().map(|p| (p.0, p.1)).collect(),
            band: Vec::new(),
        });
        oracle = curve.iter().map(|p| (p.0, p.2)).collect();
    }
    rejection.series.push(Series {
        name: "theoretical max".into(),
        points: oracle,
        band: Vec::new(),
    });
    Ok((rows, rejection))
}

/// The reliability diagram as the calibration papers draw it: each bin's accuracy as a bar,
/// the diagonal, and below it how many of the `items` each bin holds (a bar of few items
/// says little).
fn reliability_panels(bins: &[Bin], items: usize) -> Vec<Panel> {
    let used: Vec<&Bin> = bins.iter().filter(|b| b.count > 0).collect();
    let line = |name: &str, points: Vec<(f64, f64)>| Series {
        name: name.into(),
        points,
        band: Vec::new(),
    };
    let rel = Panel {
        log_y: false,
        title: "Reliability (15 bins)".into(),
        x_label: "confidence".into(),
        y_label: "accuracy".into(),
        series: vec![
            line("accuracy per bin", bars(bins, |b| b.accuracy)),
            line(
                "accuracy at mean confidence",
                used.iter().map(|b| (b.confidence, b.accuracy)).collect(),
            ),
            line("perfect", vec![(0.0, 0.0), (1.0, 1.0)]),
        ],
    };
    let counts = Panel {
        log_y: false,
        title: format!("Confidence histogram ({items} items)"),
        x_label: "confidence".into(),
        y_label: "items".into(),
        series: vec![line("items per bin", bars(bins, |b| b.count as f64))],
    };
    vec![rel, counts]
}

/// `metrics.json` (each scorer's row, the reliability bins, the temperature and conformal
/// sets where there are some) and the two figures, into `out`.
fn write_files(
    out: &Path,
    report: &CalibrationReport,
    bins: &[Bin],
    items: usize,
    rejection: Panel,
) -> Result<()> {
    create_out(out)?;
    let json_err = |e: serde_json::Error| Error::config("metrics", e.to_string());
    let mut json = serde_json::Map::new();
    for (name, row) in &report.rows {
        json.insert(name.clone(), serde_json::to_value(row).map_err(json_err)?);
    }
    json.insert(
        "reliability".into(),
        serde_json::to_value(bins).map_err(json_err)?,
    );
    if let Some(t) = report.temperature {
        json.insert("temperature".into(), serde_json::json!(t));
    }
    if !report.conformal.is_empty() {
        json.insert(
            "conformal".into(),
            serde_json::to_value(&report.conformal).map_err(json_err)?,
        );
    }
    write_json(&out.join("metrics.json"), &serde_json::Value::Object(json))?;
    Figure {
        panels: reliability_panels(bins, items),
        panel_width: 420,
        height: 400,
        columns: 0,
    }
    .save(out, "reliability")?;
    Figure {
        panels: vec![rejection],
        panel_width: 520,
        height: 400,
        columns: 0,
    }
    .save(out, "rejection")
}

/// The outline of a bar chart over `bins`: each bin a bar of height `f(bin)` from its lower
/// to its upper edge, all on the x axis at 0.
fn bars(bins: &[Bin], f: impl Fn(&Bin) -> f64) -> Vec<(f64, f64)> {
    let mut pts = Vec::with_capacity(4 * bins.len());
    for b in bins {
        let h = f(b);
        pts.extend([(b.lo, 0.0), (b.lo, h), (b.hi, h), (b.hi, 0.0)]);
    }
    pts
}
