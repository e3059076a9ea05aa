//! Throughput measurement of pool scoring (the `alkit bench` command).
//!
//! One warm-up pass, then `repeats` timed passes over the same items; the result is the median
//! samples/s. A pass is everything a cycle's scoring does: batches gathered, inference, evidence
//! built, scores computed.

use crate::data::Dataset;
use crate::error::Result;
use crate::observe::Silent;
use crate::predict::Scoring;
use crate::rng::{stream, Purpose};
use alkit_acquisition::Scorer;
use std::time::Instant;

/// Throughput of one scorer.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchResult {
    /// Scorer name.
    pub scorer: String,
    /// Median samples per second.
    pub samples_per_s: f64,
    /// Every timed pass, seconds.
    pub passes_s: Vec<f64>,
}

/// Runs `pass` once to warm up, then `repeats` (at least 1) timed times; returns every timed
/// pass's seconds and their median.
fn timed(repeats: usize, mut pass: impl FnMut() -> Result<()>) -> Result<(Vec<f64>, f64)> {
    pass()?;
    let passes_s = (0..repeats.max(1))
        .map(|_| {
            let t = Instant::now();
            pass()?;
            Ok(t.elapsed().as_secs_f64())
        })
        .collect::<Result<Vec<_>>>()?;
    let median = median(&passes_s);
    Ok((passes_s, median))
}

/// The median of timed seconds (the upper one of an even count); `passes_s` is not empty.
fn median(passes_s: &[f64]) -> f64 {
    let mut sorted = passes_s.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}

/// Training throughput of the Fashion-MNIST DUQ model: images/s of full optimiser steps
/// (forward in training mode, explicit input gradient and penalty when `lambda > 0`,
/// backward, SGD, running statistics, centroid update) on batches of `batch` images `x (N, 1,
/// 28, 28)` (cycled), median of `repeats` timed runs of `steps` steps after one warm-up step.
pub fn bench_duq_training(
    x: &candle_core::Tensor,
    y: &candle_core::Tensor,
    cfg: &crate::duq::cnn::DuqCnnConfig,
    steps: usize,
    repeats: usize,
) -> Result<f64> {
    use crate::duq::cnn::DuqCnn;
    let classes = y.max(0)?.to_scalar::<u32>()? as usize + 1;
    let dims = x.dims();
    let mut model = DuqCnn::seeded(
        &dims[1..],
        classes.max(2),
        cfg,
        x.dtype(),
        x.device(),
        stream(0, Purpose::Init, 0),
    )?;
    let mut sgd = model.optimizer();
    let n = x.dim(0)?;
    let b = cfg.settings.batch.min(n).max(1);
    let mut at = 0;
    let mut step = || -> Result<()> {
        if at + b > n {
            at = 0;
        }
        model.step(&mut sgd, &x.narrow(0, at, b)?, &y.narrow(0, at, b)?)?;
        at += b;
        Ok(())
    };
    // One warm-up step, then `repeats` timed runs of `steps` steps.
    step()?;
    let (_, median) = timed(repeats, || (0..steps.max(1)).try_for_each(|_| step()))?;
    Ok((steps.max(1) * b) as f64 / median)
}

/// Times choosing a batch of `k` from `data[indices]` with a joint criterion (BatchBALD):
/// evidence plus selection, median of `repeats` passes after a warm-up; reported as
/// candidates per second.
pub fn bench_batch_selection(
    scoring: &Scoring<'_>,
    data: &Dataset,
    indices: &[usize],
    selector: &dyn alkit_acquisition::BatchSelector,
    k: usize,
    repeats: usize,
) -> Result<BenchResult> {
    let (passes_s, median) = timed(repeats, || {
        let mut rng = stream(0, Purpose::Tool, 0);
        let ev = scoring.evidence(data, indices, selector.needs(), &mut rng, &mut Silent)?;
        let picks = selector.select(&ev, k, &mut rng)?;
        debug_assert_eq!(picks.len(), k);
        Ok(())
    })?;
    Ok(BenchResult {
        scorer: format!("{} (pick {k})", selector.name()),
        samples_per_s: indices.len() as f64 / median,
        passes_s,
    })
}

/// Times scoring `data[indices]` with `scorer`.
pub fn bench_scoring(
    scoring: &Scoring<'_>,
    data: &Dataset,
    indices: &[usize],
    scorer: &dyn Scorer,
    repeats: usize,
) -> Result<BenchResult> {
    let (passes_s, median) = timed(repeats, || {
        let mut rng = stream(0, Purpose::Tool, 0);
        let ev = scoring.evidence(data, indices, scorer.needs(), &mut rng, &mut Silent)?;
        let scores = scorer.score(&ev)?;
        debug_assert_eq!(scores.len(), indices.len());
        Ok(())
    })?;
    Ok(BenchResult {
        scorer: scorer.name().to_string(),
        samples_per_s: indices.len() as f64 / median,
        passes_s,
    })
}

/// What `alkit bench` times for scoring.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoringBench {
    /// Scored items per pass (the first `items` of the split, cycled).
    pub items: usize,
    /// Inference batch size.
    pub batch: usize,
    /// Timed passes (the median is reported).
    pub repeats: usize,
    /// Adam steps of the brief training on the first 1,000 items before timing.
    pub train_steps: usize,
    /// Score with a deep ensemble of this many briefly trained models.
    pub ensemble: Option<usize>,
    /// The built-in model timed.
    pub model: crate::models::ModelKind,
}

/// The items a model kind is timed on: `ds` and its per-channel std, or for a ResNet on a
/// source that is not colour images, `n` synthetic 3x32x32 standard-normal images (seeded)
/// with labels cycling through `ds`'s classes (the CIFAR-10 shape of the ResNet experiments).
pub fn bench_data(
    kind: crate::models::ModelKind,
    ds: &Dataset,
    input_std: &[f32],
    n: usize,
) -> Result<(Dataset, Vec<f32>)> {
    if !kind.is_resnet() || matches!(ds.item_shape(), [3, _, _]) {
        return Ok((ds.clone(), input_std.to_vec()));
    }
    let n = n.clamp(1, 1 << 16);
    let mut rng = stream(0, Purpose::Tool, 0);
    let x: Vec<f32> = (0..n * 3 * 32 * 32)
        .map(|_| crate::rng::normal(&mut rng) as f32)
        .collect();
    let classes = ds.classes();
    let y: Vec<u32> = (0..n).map(|i| (i % classes) as u32).collect();
    Ok((Dataset::new(x, y, vec![3, 32, 32], classes)?, vec![1.0; 3]))
}

/// What [`strategies`] timed.
#[derive(Debug, Clone, PartialEq)]
pub struct StrategyBench {
    /// Shape of the items timed (see [`bench_data`]).
    pub item_shape: Vec<usize>,
    /// One result per strategy: per-item scorers first, then joint batch criteria.
    pub results: Vec<BenchResult>,
}

/// [`strategies`]' settings against its bounds, before anything is allocated: the items
/// timed and their evidence (probabilities, sample draws) grow with `items`.
fn check_strategy_bench(
    train_raw: &Dataset,
    settings: &crate::strategies::ScorerSettings,
    cfg: &ScoringBench,
) -> Result<()> {
    use crate::limits;
    settings.refuse_class_balance("the benchmark times the scoring alone")?;
    if cfg.items == 0 {
        return Err(crate::Error::config("n", "must be at least 1"));
    }
    limits::count(
        "repeats",
        cfg.repeats,
        limits::MAX_REPEATS,
        "timed passes; the median of more says nothing new",
    )?;
    limits::count(
        "train_steps",
        cfg.train_steps.max(1),
        limits::MAX_BENCH_TRAIN_STEPS,
        "the brief training before timing; train a checkpoint separately for longer",
    )?;
    settings.validate()?;
    if train_raw.is_empty() {
        return Err(crate::Error::config("data", "the data is empty"));
    }
    let classes = train_raw.classes();
    let samples = settings.mc_samples.max(settings.perturb_samples);
    let per_item = limits::product(&[4, classes, samples + 1]).and_then(|b| b.checked_add(8));
    let bytes = per_item.and_then(|b| b.checked_mul(cfg.items as u64));
    limits::fits(
        "n",
        &format!(
            "{} items with their evidence ({classes} classes, up to {samples} draws)",
            cfg.items
        ),
        bytes,
    )
}

/// Normalises `train_raw` (a raw train split) with its own statistics, takes the items
/// `cfg.model` is timed on ([`bench_data`]), trains the model (or an ensemble of them) briefly
/// on the first 1,000 and times each strategy's scoring of `cfg.items` items: per-item scorers
/// first, then joint batch criteria selecting 20 items. Random picks have nothing to time and
/// are refused.
pub fn strategies(
    train_raw: &Dataset,
    kinds: &[crate::strategies::StrategyKind],
    settings: &crate::strategies::ScorerSettings,
    cfg: &ScoringBench,
    device: &candle_core::Device,
) -> Result<StrategyBench> {
    use crate::limits;
    use crate::models::Arch;
    use crate::round::Pick;
    check_strategy_bench(train_raw, settings, cfg)?;
    let norm = crate::data::Normalizer::fit(train_raw);
    let (ds, input_std) = bench_data(cfg.model, &norm.apply(train_raw)?, &norm.std, cfg.items)?;
    let (ds, input_std) = (&ds, input_std.as_slice());
    limits::batch("batch", cfg.batch, ds.item_shape().iter().product())?;
    let built: Vec<(String, Pick)> = kinds
        .iter()
        .map(|k| (k.name().to_string(), k.build(settings)))
        .collect();
    if let Some((name, _)) = built.iter().find(|(_, b)| matches!(b, Pick::Random)) {
        return Err(crate::Error::config(
            "scorer",
            format!("`{name}` picks at random: there is no scoring to time"),
        ));
    }
    let params = cfg
        .model
        .train_config(cfg.train_steps.max(1), None, None, None)?
        .validate()?;
    let arch = Arch::for_data(cfg.model, ds).with_batch(params.config().batch_size);
    let seed_set: Vec<usize> = (0..ds.len().min(1000)).collect();
    let trained = crate::train::train(
        &arch,
        cfg.ensemble,
        ds,
        &seed_set,
        &params,
        (0, 0),
        device,
        &mut Silent,
    )?;
    let items: Vec<usize> = (0..cfg.items).map(|i| i % ds.len()).collect();
    let mut scoring =
        Scoring::of_trained(&trained, &arch, cfg.ensemble, input_std, cfg.batch, device);
    let needs_reference = built.iter().any(|(_, b)| match b {
        Pick::Scored { scorer, .. } => scorer.needs().reference,
        Pick::Batch(sel) => sel.needs().reference,
        Pick::Random => false,
    });
    if needs_reference {
        // What the model was trained on, as a round's labeled items (untimed, as training).
        let reference = crate::predict::reference_of(
            trained.model.as_ref(),
            ds,
            &seed_set,
            cfg.batch,
            device,
            &mut Silent,
        )?;
        scoring.reference = Some(std::sync::Arc::new(reference));
    }
    let mut results = Vec::new();
    for (_, b) in &built {
        if let Pick::Scored { scorer: s, .. } = b {
            results.push(bench_scoring(
                &scoring,
                ds,
                &items,
                s.as_ref(),
                cfg.repeats,
            )?);
        }
    }
    for (_, b) in &built {
        if let Pick::Batch(sel) = b {
            results.push(bench_batch_selection(
                &scoring,
                ds,
                &items,
                sel.as_ref(),
                20,
                cfg.repeats,
            )?);
        }
    }
    Ok(StrategyBench {
        item_shape: ds.item_shape().to_vec(),
        results,
    })
}

/// [`bench_duq_training`] of the paper's Fashion-MNIST DUQ CNN on the first 2,048 items of
/// `train_raw` (a raw train split, normalised here with its own statistics) with penalty
/// weight `lambda` (0 skips the input gradient); returns the images/s and the configuration
/// timed.
pub fn duq_fm(
    train_raw: &Dataset,
    lambda: f64,
    steps: usize,
    repeats: usize,
    device: &candle_core::Device,
) -> Result<(f64, crate::duq::cnn::DuqCnnConfig)> {
    if !(lambda.is_finite() && lambda >= 0.0) {
        return Err(crate::Error::config(
            "lambda",
            format!("{lambda} is not a number >= 0"),
        ));
    }
    crate::limits::count(
        "steps",
        steps,
        crate::limits::MAX_BENCH_TRAIN_STEPS,
        "steps per timed run; the benchmark times steps, it does not train",
    )?;
    crate::limits::count(
        "repeats",
        repeats,
        crate::limits::MAX_REPEATS,
        "timed passes; the median of more says nothing new",
    )?;
    if train_raw.is_empty() {
        return Err(crate::Error::config("data", "the data is empty"));
    }
    let ds = crate::data::Normalizer::fit(train_raw).apply(train_raw)?;
    let ids: Vec<usize> = (0..ds.len().min(2048)).collect();
    let x = ds.batch(&ids, device)?;
    let y = ds.batch_labels(&ids, device)?;
    let mut cfg = crate::duq::cnn::DuqCnnConfig::default();
    cfg.settings.lambda = lambda;
    cfg.settings.penalty = if lambda > 0.0 {
        crate::duq::Penalty::TwoSided
    } else {
        crate::duq::Penalty::None
    };
    let rate = bench_duq_training(&x, &y, &cfg, steps, repeats)?;
    Ok((rate, cfg))
}

/// What [`score_job`] measured: whole runs of a score job, as `alkit score` runs them.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoreJobBench {
    /// Items scored per run.
    pub items: usize,
    /// The first run, seconds (the weights' and images' files read from disk or the page
    /// cache for the first time in the process).
    pub first_s: f64,
    /// Every further run, seconds.
    pub passes_s: Vec<f64>,
    /// Items per second of the median further run.
    pub items_per_s: f64,
}

/// Times `job` end to end, as [`crate::jobs::score::run`] runs it: the checkpoint opened and
/// checked, the data listed, decoded and prepared as the checkpoint says, the model's forward,
/// the scores and the CSV written. One first run, then `repeats` (1 to
/// [`crate::limits::MAX_REPEATS`]) timed runs; each
/// writes `job.out` (replaced by every run, so it must be a file the caller may overwrite, such
/// as one in a temporary folder).
pub fn score_job(
    job: &crate::jobs::score::ScoreJob,
    repeats: usize,
    hub: &crate::hub::Hub,
    device: &candle_core::Device,
) -> Result<ScoreJobBench> {
    crate::limits::count(
        "repeats",
        repeats,
        crate::limits::MAX_REPEATS,
        "timed runs; the median of more says nothing new",
    )?;
    let mut items = 0;
    let mut run = || -> Result<f64> {
        let _ = std::fs::remove_file(&job.out);
        let t = Instant::now();
        items = crate::jobs::score::run(job, hub, device, &mut Silent)?.scored;
        Ok(t.elapsed().as_secs_f64())
    };
    let first_s = run()?;
    let passes_s = (0..repeats).map(|_| run()).collect::<Result<Vec<_>>>()?;
    Ok(ScoreJobBench {
        items,
        first_s,
        items_per_s: items as f64 / median(&passes_s),
        passes_s,
    })
}

/// What [`gauss`] measured: whole Adam steps of an `mlp-gauss` head and its scoring by total
/// variance over MC-dropout passes, on synthetic tabular rows.
#[derive(Debug, Clone, PartialEq)]
pub struct GaussBench {
    /// Rows `n` and features `d`.
    pub rows: usize,
    /// Features per row.
    pub dim: usize,
    /// Training batch.
    pub batch: usize,
    /// Timed Adam steps per repeat.
    pub steps: usize,
    /// MC-dropout passes when scoring.
    pub passes: usize,
    /// Median training throughput, rows (batch x steps) per second.
    pub train_rows_per_s: f64,
    /// Median scoring throughput, rows per second (every pass included).
    pub score_rows_per_s: f64,
}

/// Times an `mlp-gauss` head (d -> 128 -> 128 -> 2, dropout 0.1, beta-NLL, Adam) on `rows`
/// seeded synthetic rows of `dim` features: `steps` optimiser steps of `batch` rows, and the
/// total-variance score of every row over `passes` MC-dropout passes; medians of `repeats`
/// runs. What `tests/reference/gauss_speed.py` times in PyTorch.
pub fn gauss(
    (rows, dim): (usize, usize),
    (batch, steps, passes): (usize, usize, usize),
    repeats: usize,
    device: &candle_core::Device,
) -> Result<GaussBench> {
    use crate::models::GaussKind;
    use crate::nn::{GaussLoss, Regressor};
    use crate::rng::{normal, stream, Purpose};
    use crate::train::{train_gauss, Rows};
    crate::limits::count(
        "steps",
        steps,
        crate::limits::MAX_BENCH_TRAIN_STEPS,
        "timed steps",
    )?;
    crate::limits::count(
        "repeats",
        repeats,
        crate::limits::MAX_REPEATS,
        "timed passes",
    )?;
    crate::limits::count(
        "passes",
        passes,
        crate::limits::MAX_SAMPLES,
        "MC-dropout passes",
    )?;
    if rows == 0 || dim == 0 || batch == 0 {
        return Err(crate::Error::config(
            "n",
            "rows, features and batch must be at least 1",
        ));
    }
    let values = crate::limits::product(&[rows, dim, 4]);
    crate::limits::fits("n", "the benchmark's synthetic rows", values)?;
    let mut rng = stream(0, Purpose::Tool, 0);
    let x: Vec<f32> = (0..rows * dim).map(|_| normal(&mut rng) as f32).collect();
    let y: Vec<f32> = x
        .chunks_exact(dim)
        .map(|r| r[0] + 0.5 * r[dim - 1] + 0.3 * normal(&mut rng) as f32)
        .collect();
    let cfg = GaussKind::MlpGauss.config(dim, 1);
    let params = crate::train::TrainConfig {
        steps,
        batch_size: batch,
        lr: 1e-3,
        anchor: None,
    }
    .validate()?;
    let all: Vec<usize> = (0..rows).collect();
    let loss = GaussLoss::BetaNll { beta: 0.5 };
    let rows_in = Rows {
        x: &x,
        d: dim,
        y: &y,
    };
    let mut train_s = Vec::with_capacity(repeats);
    let mut score_s = Vec::with_capacity(repeats);
    let mut silent = crate::observe::Silent;
    for r in 0..repeats {
        let t = std::time::Instant::now();
        let models = train_gauss(
            &cfg,
            loss,
            1,
            &rows_in,
            &all,
            &params,
            (0, r as u64),
            device,
            &mut silent,
        )?;
        train_s.push(t.elapsed().as_secs_f64());
        let refs: Vec<&dyn Regressor> = models.iter().map(|m| m as &dyn Regressor).collect();
        let t = std::time::Instant::now();
        let g = crate::predict::gaussian_evidence(
            &refs,
            &x,
            dim,
            alkit_acquisition::SampleRequest::McDropout { samples: passes },
            &mut rng,
            device,
        )?;
        let scores = alkit_acquisition::GaussScore::Variance.scores(&g)?;
        score_s.push(t.elapsed().as_secs_f64());
        std::hint::black_box(scores);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Ok(GaussBench {
        rows,
        dim,
        batch,
        steps,
        passes,
        train_rows_per_s: (batch.min(rows) * steps) as f64 / median(&mut train_s),
        score_rows_per_s: rows as f64 / median(&mut score_s),
    })
}
