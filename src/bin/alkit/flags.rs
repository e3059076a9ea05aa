//! The command line's flags: every subcommand's arguments as clap derives, and their mapping
//! to the library's names. Nothing here computes; `main` turns these into library calls.

use crate::session;
use alkit::models::{GaussKind, ModelKind, SigmoidKind};
use alkit::strategies::{ScorerSettings, StrategyKind};
use anyhow::Result;
use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "alkit",
    version,
    about = "Active learning and uncertainty: pick which points to label next, and say when a model does not know.",
    long_about = None
)]
pub(crate) struct Cli {
    /// Where tensors live: cpu, cuda, metal, or auto (the first accelerator compiled in and present, else cpu).
    #[arg(long, global = true, value_enum, default_value_t = DeviceArg::Cpu)]
    pub(crate) device: DeviceArg,
    /// No progress bars.
    #[arg(long, short, global = true)]
    pub(crate) quiet: bool,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum DeviceArg {
    Cpu,
    Cuda,
    Metal,
    Auto,
}

/// `--model`: the library's registry of built-in models, its names and help as the choices.
pub(crate) fn model_kind() -> impl clap::builder::TypedValueParser<Value = ModelKind> {
    let names = ModelKind::all().map(|k| PossibleValue::new(k.name()).help(k.about()));
    PossibleValuesParser::new(names).map(|name| {
        name.parse::<ModelKind>()
            .expect("the parser admits registry names only")
    })
}

/// A curve's model: a classifier of the registry, a regression run's Gaussian head, or a
/// multi-label run's sigmoid head.
#[derive(Clone, Copy, Debug)]
pub(crate) enum CurveModel {
    Classifier(ModelKind),
    Gauss(GaussKind),
    Sigmoid(SigmoidKind),
}

impl CurveModel {
    /// The name users typed.
    pub(crate) fn name(self) -> &'static str {
        match self {
            CurveModel::Classifier(k) => k.name(),
            CurveModel::Gauss(k) => k.name(),
            CurveModel::Sigmoid(k) => k.name(),
        }
    }
}

/// The classifiers', the Gaussian heads' and the sigmoid heads' names, each with its help line.
pub(crate) fn curve_model() -> impl clap::builder::TypedValueParser<Value = CurveModel> {
    let names = ModelKind::all()
        .map(|k| PossibleValue::new(k.name()).help(k.about()))
        .chain(GaussKind::ALL.map(|k| PossibleValue::new(k.name()).help(k.about())))
        .chain(SigmoidKind::ALL.map(|k| PossibleValue::new(k.name()).help(k.about())));
    PossibleValuesParser::new(names).map(|name| {
        if let Ok(k) = name.parse::<ModelKind>() {
            return CurveModel::Classifier(k);
        }
        match name.parse::<GaussKind>() {
            Ok(k) => CurveModel::Gauss(k),
            Err(_) => {
                CurveModel::Sigmoid(name.parse().expect("the parser admits these names only"))
            }
        }
    })
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub(crate) enum SplitArg {
    Train,
    Test,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Acquisition curves: ACC/NLL per labeling cycle for each scorer and seed, as CSV, a table and plots.
    Curve(CurveArgs),
    /// Train a model on a whole training split and save a checkpoint.
    Train(TrainArgs),
    /// Score every item of any data source with a checkpoint (local, hf:, or several as an ensemble); one CSV row per item.
    Score(ScoreArgs),
    /// Embed a data source through a frozen backbone's penultimate layer into an embedding file (features, labels, the test split, ids), resumable after a kill.
    Embed(EmbedArgs),
    /// Merge the results of `alkit score --shard I/N` into exactly the unsharded `score --top K` result.
    Merge(MergeArgs),
    /// Rank the strategies of several curve folders (one per data set) by AUBC: mean ranks, Friedman's test and Nemenyi's critical difference.
    Compare(CompareArgs),
    /// Pool-scoring throughput (samples/s) per scorer with the standard CNN (or an ensemble); `--train duq-fm`: DUQ training images/s.
    Bench(BenchArgs),
    /// OOD detection: score an in-distribution and an OOD test split; AUROC, AUPR-in/out, FPR@95.
    Ood(OodArgs),
    /// Calibration of a model and its uncertainty scores: rAULC, ECE, NLL, Brier, misclassification AUROC.
    Calibrate(CalibrateArgs),
    /// All metrics from externally computed scores in a CSV file.
    Metrics(MetricsArgs),
    /// Uncertainty over the plane on two moons (DUQ, softmax, Platt, MC dropout, Bayes-by-backprop, ensembles; `--beside` draws several side by side): surface.png + metrics.json.
    Surface(SurfaceArgs),
    /// Start a labeling session on a pool (optionally with seed labels) in a state folder.
    Init(session::InitArgs),
    /// Train on the session's labels, score the pool and write the next batch to label.
    Query(session::QueryArgs),
    /// Add a person's answers (id,label CSV) to the session; one bad row changes nothing.
    Teach(session::TeachArgs),
    /// Label in the browser: a local page shows the pending batch, one key per class; answers are saved at once, and the model retrains and asks for the next batch in the background.
    Label(session::LabelArgs),
    /// Serve the session as a Label Studio ML backend: Label Studio's "Model" connection gets alkit's pre-annotations and order, and its new annotations are taught and retrain the model in the background.
    ServeLabelStudio(session::BackendArgs),
    /// Labeled items per class, rounds, pending items and the last round's metrics.
    Status(session::StatusArgs),
    /// Every strategy `--scorer` accepts, with what it is (the registry).
    Scorers,
}

#[derive(clap::Args)]
pub(crate) struct SurfaceArgs {
    /// The dataset (two moons).
    #[arg(long, default_value = "moons")]
    pub(crate) dataset: String,
    #[command(flatten)]
    pub(crate) settings: alkit::jobs::surface::SurfaceSettings,
    /// Also train these models (comma-separated) on the same moons, each scored by its default, and draw them all side by side in beside.png; each one's files go to OUT/beside/MODEL/. One seed.
    #[arg(long, value_delimiter = ',')]
    pub(crate) beside: Vec<alkit::jobs::surface::SurfaceModelKind>,
    /// Repeat with seeds seed, seed+1, ...: one folder per seed (`seedS/`), `seeds.csv`, and
    /// the median and range of the metrics (how robust a method is matters here as much as
    /// one run's picture).
    #[arg(long, default_value_t = 1)]
    pub(crate) seeds: u64,
    /// Output folder: surface.png, gradient.png, metrics.json (with --seeds: per seed).
    #[arg(long)]
    pub(crate) out: PathBuf,
}

/// An ONNX model's normalisation when no config.json gives it.
#[derive(clap::Args)]
pub(crate) struct InputNorm {
    /// With an ONNX checkpoint and no config.json: the mean subtracted from its input pixels in [0, 1], one value or one per channel (comma-separated); with --input-std. [default: timm's (ImageNet's), for 3-channel models only]
    #[arg(
        long,
        value_delimiter = ',',
        allow_negative_numbers = true,
        value_name = "M"
    )]
    pub(crate) input_mean: Option<Vec<f32>>,
    /// With --input-mean: the standard deviation the input is divided by, one value or one per channel.
    #[arg(long, value_delimiter = ',', value_name = "S")]
    pub(crate) input_std: Option<Vec<f32>>,
}

/// A model to evaluate: loaded from a checkpoint, or trained here on a training split.
#[derive(clap::Args)]
pub(crate) struct ModelSource {
    /// Evaluate this checkpoint (from `alkit train`, or `OUT/model` of an earlier run) instead
    /// of training a model; a model trained here is saved to `OUT/model`.
    #[arg(long)]
    pub(crate) checkpoint: Option<PathBuf>,
    /// With an ONNX --checkpoint: the output holding the features its last layer multiplies. [default: that layer's input, found in the graph]
    #[arg(long, value_name = "NAME")]
    pub(crate) onnx_features: Option<String>,
    /// With an ONNX --checkpoint: a timm config.json giving its preprocessing (input size, resize and crop, interpolation, mean, std, class names). [default: the config.json beside the model, else timm's defaults for its input]
    #[arg(long, value_name = "FILE")]
    pub(crate) onnx_config: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) input_norm: InputNorm,
    /// Architecture to train when no checkpoint is given: a classifier, or a Gaussian head with --target (calibrate). [default: cnn; mlp-gauss for regression; mlp-sigmoid for multi-label]
    #[arg(long, value_parser = curve_model())]
    pub(crate) model: Option<CurveModel>,
    /// Optimiser steps when training here (Adam; SGD for duq). [default: 2000]
    #[arg(long)]
    pub(crate) steps: Option<usize>,
    /// Mini-batch size when training here [default: 32; 128 for the DUQ models].
    #[arg(long)]
    pub(crate) batch_size: Option<usize>,
    /// Seed of training and of the scorers' noise.
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// With --checkpoint: folder where the training split's features (what knn, mahalanobis, vim and react fit on) are cached, keyed by the checkpoint's content and the data's files. [default: $ALKIT_CACHE/embeddings, else $XDG_CACHE_HOME/alkit/embeddings, else ~/.cache/alkit/embeddings]
    #[arg(long)]
    pub(crate) embed_cache: Option<PathBuf>,
}

#[derive(clap::Args)]
pub(crate) struct OodArgs {
    /// In-distribution data (a source with a test split: an IDX folder, a folder with train/ and test/ image subfolders, or hf:OWNER/NAME): the model trains on its train split, its test split is scored.
    #[arg(long)]
    pub(crate) train_data: PathBuf,
    /// OOD data (any source: an IDX folder, a folder of images, an embedding file, CSV, Parquet or hf:OWNER/NAME): its test split is scored where it has one, else all its items (a plain folder of OOD images), normalised with the in-distribution statistics; labels are not read.
    #[arg(long)]
    pub(crate) ood_data: PathBuf,
    #[command(flatten)]
    pub(crate) source: ModelSource,
    /// Comma-separated scorers.
    #[arg(long, value_delimiter = ',', default_value = "entropy")]
    pub(crate) scorer: Vec<StrategyKind>,
    #[command(flatten)]
    pub(crate) scorer_settings: ScorerSettings,
    /// Output folder: ood.csv, metrics.json, scores.csv, roc.svg/png, hist.svg/png.
    #[arg(long)]
    pub(crate) out: PathBuf,
}

#[derive(clap::Args)]
pub(crate) struct CalibrateArgs {
    /// Data (a source with a test split: an IDX folder, a folder with train/ and test/ image subfolders, or hf:OWNER/NAME): the model trains on the train split, the test split is evaluated.
    #[arg(long, default_value = "data")]
    pub(crate) data: PathBuf,
    #[command(flatten)]
    pub(crate) source: ModelSource,
    /// Comma-separated scorers whose ranking of mistakes is evaluated (rAULC, misclassification AUROC).
    #[arg(long, value_delimiter = ',', default_value = "entropy")]
    pub(crate) scorer: Vec<StrategyKind>,
    #[command(flatten)]
    pub(crate) scorer_settings: ScorerSettings,
    /// Temperature-scale the probabilities first, fitting T by NLL on the last 10% of the train split (held out from training when alkit trains the model).
    #[arg(long)]
    pub(crate) temperature: bool,
    /// Split conformal prediction at miscoverage ALPHA (e.g. 0.1 for 90% sets): a seeded random half of the test split calibrates LAC, APS and RAPS (Romano's non-randomised rule: never empty) and the randomised APS and RAPS; coverage and mean set size are reported on the other half, overall and per class (multi-label: per-label LAC sets and the false-negative rate controlled at ALPHA by conformal risk control).
    #[arg(long, value_name = "ALPHA")]
    pub(crate) conformal: Option<f64>,
    /// Output folder: metrics.json, reliability.svg/png, rejection.svg/png (regression: metrics.json, calibration.svg/png; multi-label: metrics.json).
    #[arg(long)]
    pub(crate) out: PathBuf,
    /// Members of a deep ensemble of Gaussian heads (regression).
    #[arg(long, value_parser = clap::value_parser!(u64).range(2..), value_name = "K")]
    pub(crate) ensemble: Option<u64>,
    #[command(flatten)]
    pub(crate) regression: alkit::jobs::regression::RegressionSettings,
    #[command(flatten)]
    pub(crate) multi_label: alkit::jobs::multilabel::MultiLabelSettings,
}

/// What a multi-label `run` (curve or calibration) takes of the shared flags: refuses the
/// flags it does not read (`not_yet`: name and whether given), a task other than multi-label,
/// and a model that is not a sigmoid head; the sigmoid head named, if any.
fn multi_label_model(
    run: &str,
    not_yet: &[(&str, bool)],
    r: &alkit::jobs::regression::RegressionSettings,
    model: Option<CurveModel>,
) -> Result<Option<SigmoidKind>> {
    if let Some((flag, _)) = not_yet.iter().find(|(_, given)| *given) {
        anyhow::bail!("{flag} is not available for a multi-label {run}; drop it");
    }
    if r.task.is_some_and(|t| t != alkit::data::Task::MultiLabel) {
        anyhow::bail!("--labels names label sets: drop --task, or give --task multi-label");
    }
    match model {
        Some(CurveModel::Sigmoid(k)) => Ok(Some(k)),
        Some(other) => anyhow::bail!(
            "--model {} is not a sigmoid head; a multi-label run trains linear-sigmoid or \
             mlp-sigmoid",
            other.name()
        ),
        None => Ok(None),
    }
}

impl CalibrateArgs {
    /// The settings of a multi-label calibration; the flags it does not take are refused.
    pub(crate) fn multi_label(&self) -> Result<alkit::jobs::multilabel::MultiLabelCalibrate> {
        let (s, r) = (&self.source, &self.regression);
        let not_yet = [
            ("--checkpoint", s.checkpoint.is_some()),
            ("--temperature", self.temperature),
            ("--onnx-features", s.onnx_features.is_some()),
            ("--onnx-config", s.onnx_config.is_some()),
            ("--embed-cache", s.embed_cache.is_some()),
            ("--target", !r.target.is_empty()),
            ("--loss", r.loss.is_some()),
            ("--nll-beta", r.nll_beta.is_some()),
        ];
        let model = multi_label_model("calibration", &not_yet, r, s.model)?;
        Ok(alkit::jobs::multilabel::MultiLabelCalibrate {
            data: self.data.clone(),
            test: r.test.clone(),
            settings: self.multi_label.clone(),
            model,
            ensemble: self.ensemble.map(|k| k as usize),
            steps: s.steps,
            batch_size: s.batch_size,
            seed: s.seed,
            mc_samples: self.scorer_settings.checked()?.mc_samples,
            conformal: self.conformal,
        })
    }

    /// The settings of a regression calibration; the flags it does not take are refused.
    pub(crate) fn regression(&self) -> Result<alkit::jobs::regression::RegressionCalibrate> {
        let s = &self.source;
        let not_yet = [
            ("--checkpoint", s.checkpoint.is_some()),
            ("--temperature", self.temperature),
            ("--onnx-features", s.onnx_features.is_some()),
            ("--onnx-config", s.onnx_config.is_some()),
            ("--embed-cache", s.embed_cache.is_some()),
        ];
        if let Some((flag, _)) = not_yet.iter().find(|(_, given)| *given) {
            anyhow::bail!("{flag} is not available for a regression calibration yet; drop it");
        }
        let model = match s.model {
            Some(CurveModel::Gauss(k)) => Some(k),
            Some(other) => anyhow::bail!(
                "--model {} is not a Gaussian head; a regression run trains linear-gauss or \
                 mlp-gauss",
                other.name()
            ),
            None => None,
        };
        Ok(alkit::jobs::regression::RegressionCalibrate {
            data: self.data.clone(),
            settings: self.regression.clone(),
            model,
            ensemble: self.ensemble.map(|k| k as usize),
            steps: s.steps,
            batch_size: s.batch_size,
            lr: None,
            seed: s.seed,
            mc_samples: self.scorer_settings.checked()?.mc_samples,
            conformal: self.conformal,
        })
    }
}

#[derive(clap::Args)]
pub(crate) struct MetricsArgs {
    /// CSV with a header: `score` (higher = more uncertain) plus `is_ood` (0/1) for OOD metrics and/or `correct` (0/1) for calibration metrics; optional `confidence` (max probability) for ECE/MCE.
    #[arg(long)]
    pub(crate) scores: PathBuf,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// The stopping rule a curve ends its runs by, or a session passes on to its person.
#[derive(clap::Args, Clone, Copy, Default)]
pub(crate) struct StopFlag {
    /// Stopping rule (kappa-average, classification-change, overall-uncertainty, delta-f; small-text's definitions and defaults): a curve ends each run after the first cycle it says stop, its model kept to the end of the budget in the AUBC; a session's `status`, labeling page and Label Studio backend say when it does. Every rule is measured either way (stopping.csv).
    #[arg(long, value_name = "RULE")]
    pub(crate) stop: Option<alkit::metrics::stopping::StopRule>,
}

#[derive(clap::Args)]
pub(crate) struct CurveArgs {
    /// Data with a test split: a folder with the four IDX files (train-/t10k-images-idx3-ubyte, train-/t10k-labels-idx1-ubyte, plain or .gz), a folder with train/CLASS/ and test/CLASS/ images, an embedding file with a test split (FILE.safetensors, FILE.npz, FILE.parquet: docs/data.md), or hf:OWNER/NAME (its train and test Parquet shards). [default: data]
    #[arg(long)]
    pub(crate) data: Option<PathBuf>,
    /// Comma-separated strategies (`alkit scorers` lists them). [default: entropy,margin,least-confidence,random]
    #[arg(long, value_delimiter = ',')]
    pub(crate) scorer: Option<Vec<StrategyKind>>,
    #[command(flatten)]
    pub(crate) scorer_settings: ScorerSettings,
    /// Number of seeds; runs use seeds SEED, SEED+1, ... [default: 1]
    #[arg(long)]
    pub(crate) seeds: Option<u64>,
    /// First seed. [default: 0]
    #[arg(long)]
    pub(crate) seed: Option<u64>,
    /// Random seed labels before cycle 0 (m1). [default: 20]
    #[arg(long)]
    pub(crate) initial: Option<usize>,
    /// Cold start: strategies that choose from the items alone (coreset, typiclust, probcover) pick the --initial items too, from the items' own vectors (an embedding file's embeddings, a --backbone's features); the others start from the random seed set.
    #[arg(long)]
    pub(crate) cold_start: bool,
    /// Draw the random seed set class by class: an equal share of the --initial items from each class, the lowest classes taking one more each while a remainder is left (CDALBench's initial_points_per_class); strategies that start cold (--cold-start) still choose their own.
    #[arg(long)]
    pub(crate) balanced_start: bool,
    /// The hidden layers' widths of an mlp or mlp-dropout model, comma-separated (e.g. 24,24,2). [default: 256,128 for mlp, 256 for mlp-dropout]
    #[arg(long, value_delimiter = ',', value_name = "WIDTHS")]
    pub(crate) hidden: Option<Vec<usize>>,
    #[command(flatten)]
    pub(crate) stop: StopFlag,
    /// Items labeled per cycle (m2). [default: 20]
    #[arg(long)]
    pub(crate) query: Option<usize>,
    /// Acquisition cycles after cycle 0. [default: 10]
    #[arg(long)]
    pub(crate) cycles: Option<usize>,
    /// Adam steps per training (each cycle trains from scratch). [default: 500]
    #[arg(long)]
    pub(crate) steps: Option<usize>,
    /// Mini-batch size. [default: 32; 128 for the DUQ models]
    #[arg(long)]
    pub(crate) batch_size: Option<usize>,
    /// Adam learning rate. [default: 0.001]
    #[arg(long)]
    pub(crate) lr: Option<f64>,
    /// Model trained each cycle: a classifier, or a Gaussian head of a regression run. [default: cnn; mlp-gauss for regression; mlp-sigmoid for multi-label]
    #[arg(long, value_parser = curve_model())]
    pub(crate) model: Option<CurveModel>,
    /// Train a deep ensemble of K members each cycle (different initialisations and batch orders); bald, batchbald, class-variance, ... then read one draw per member instead of MC dropout, and ACC/NLL are the ensemble's.
    #[arg(long, value_parser = clap::value_parser!(u64).range(2..), value_name = "K")]
    pub(crate) ensemble: Option<u64>,
    /// Score a seeded random M of the unlabeled items each cycle instead of all of them (baal's max_sample); the batch is chosen among those M.
    #[arg(long, value_name = "M")]
    pub(crate) subsample: Option<usize>,
    /// Anchored training (Pearce et al. 2020): add tau/n ||theta - theta_0||^2, theta_0 each model's own initialisation (with --ensemble: anchored ensembles).
    #[arg(long, value_name = "TAU")]
    pub(crate) anchor: Option<f64>,
    /// Output folder. [default: out/curve]
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
    /// Continue the interrupted run in this folder (settings come from its run.json).
    #[arg(long, conflicts_with = "out")]
    pub(crate) resume: Option<PathBuf>,
    /// Replace an existing run in --out instead of refusing.
    #[arg(long)]
    pub(crate) force: bool,
    /// Runs (one scorer, one seed) carried out at once, each on its own thread; every run's results are the same whatever the number. [default: one per core for the heads on feature vectors (linear, mlp, mlp-dropout, duq-mlp) on the CPU, else 1]
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..1025), value_name = "N")]
    pub(crate) jobs: Option<u64>,
    /// Also write every pool scoring to OUT/scores/STRATEGY/seedS/cycleC.csv (index,score): the scores cycle C's model gave the candidates it picked cycle C+1's labels from.
    #[arg(long)]
    pub(crate) save_scores: bool,
    /// Read the training split from its source a chunk at a time instead of decoding it into memory (IDX, image folders, Hub data sets): memory then follows the labeled items and one chunk, not the pool; each cycle reads the pool twice (to gather the labeled items, to score). The test split is held. Same results as without.
    #[arg(long)]
    pub(crate) stream: bool,
    /// A frozen backbone (an alkit checkpoint, a weights file with its config.json, or hf:OWNER/NAME): the pool and test split are embedded once through its penultimate layer into --embed-cache (reused while the backbone and the data files are unchanged, resumed after a kill), and each cycle trains only a head on the features (--model, default linear).
    #[arg(long, value_name = "SRC", conflicts_with = "resume")]
    pub(crate) backbone: Option<String>,
    /// Folder of the backbone embeddings' cache. [default: $ALKIT_CACHE/embeddings, else $XDG_CACHE_HOME/alkit/embeddings, else ~/.cache/alkit/embeddings]
    #[arg(long, value_name = "DIR", requires = "backbone")]
    pub(crate) embed_cache: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) regression: alkit::jobs::regression::RegressionSettings,
    #[command(flatten)]
    pub(crate) multi_label: alkit::jobs::multilabel::MultiLabelSettings,
}

#[derive(clap::Args)]
pub(crate) struct EmbedArgs {
    /// The backbone: an alkit checkpoint folder, a weights file with its config.json, or hf:OWNER/NAME.
    #[arg(long)]
    pub(crate) checkpoint: String,
    /// Items to embed (any source; its test split, if any, too). [default: data]
    #[arg(long, default_value = "data")]
    pub(crate) data: PathBuf,
    /// Inference batch size [default: as for score].
    #[arg(long)]
    pub(crate) batch: Option<usize>,
    /// Items embedded between two saves of the progress (rounded up to whole --batch): a kill loses at most this much work.
    #[arg(long, default_value_t = alkit::jobs::score::DEFAULT_CHUNK)]
    pub(crate) chunk: usize,
    /// The embedding file to write (never over an existing file; a killed run resumes from OUT.partial/).
    #[arg(long)]
    pub(crate) out: PathBuf,
}

#[derive(clap::Args)]
pub(crate) struct TrainArgs {
    /// Data with a test split (an IDX folder, a folder with train/ and test/ image subfolders, or hf:OWNER/NAME).
    #[arg(long, default_value = "data")]
    pub(crate) data: PathBuf,
    /// Architecture.
    #[arg(long, value_parser = model_kind(), default_value = "cnn")]
    pub(crate) model: ModelKind,
    /// Adam steps.
    #[arg(long, default_value_t = 2000)]
    pub(crate) steps: usize,
    /// Mini-batch size. [default: 32; 128 for the DUQ models]
    #[arg(long)]
    pub(crate) batch_size: Option<usize>,
    /// Adam learning rate (softmax models; DUQ trains with SGD at its own schedule). [default: 0.001]
    #[arg(long)]
    pub(crate) lr: Option<f64>,
    /// Seed for initialisation, batch order and dropout.
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// Train only on these items of the train split: a file with one index per line, or a CSV whose header has an `index` column (e.g. a curve run's seed set). Initialisation and batch order then match a curve's cycle 0 with the same seed.
    #[arg(long)]
    pub(crate) indices: Option<PathBuf>,
    /// Checkpoint folder to write (model.safetensors + config.json).
    #[arg(long)]
    pub(crate) out: PathBuf,
}

#[derive(clap::Args)]
pub(crate) struct ScoreArgs {
    /// Checkpoint folder (from `alkit train`, a labeling session's `model/`, or converted weights), hf:OWNER/NAME for a model repository on the Hub, or an ONNX model (FILE.onnx, a timm config.json beside it for the preprocessing; built with the cargo feature `onnx`). Several (comma-separated, or the flag repeated) form a deep ensemble: its mean prediction is scored, and bald, class-variance, ... read one draw per member. A path that exists is taken whole, commas in it included.
    #[arg(long, required = true, action = clap::ArgAction::Append)]
    pub(crate) checkpoint: Vec<PathBuf>,
    /// With ONNX checkpoints (FILE.onnx, or a folder holding model.onnx; built with the cargo feature `onnx`): the output holding the features the last layer multiplies. [default: that layer's input, found in the graph]
    #[arg(long, value_name = "NAME")]
    pub(crate) onnx_features: Option<String>,
    /// With ONNX checkpoints: a timm config.json giving their preprocessing (input size, resize and crop, interpolation, mean, std, class names). [default: the config.json beside each model, else timm's defaults for its input]
    #[arg(long, value_name = "FILE")]
    pub(crate) onnx_config: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) input_norm: InputNorm,
    /// Items to score: an IDX folder, a folder of PNG/JPEG images (of a train/test folder: train/), FILE.safetensors, FILE.npy, FILE.npz, FILE.csv, FILE.parquet, or hf:OWNER/NAME.
    #[arg(long, default_value = "data")]
    pub(crate) data: PathBuf,
    /// Which split to score (test: only sources with a test split).
    #[arg(long, value_enum, default_value_t = SplitArg::Train)]
    pub(crate) split: SplitArg,
    /// Inference batch size [default: 512; for items of more than 8,192 values, the largest power of two with at most 2^22 values per batch, e.g. 16 for 3x224x224].
    #[arg(long)]
    pub(crate) batch: Option<usize>,
    /// At most this many items held at a time from a pool that can be streamed (image folders, safetensors, ...), rounded up to whole --batch: peak memory follows this, not the pool (a few batches are read ahead while the previous ones are scored). Scorers that draw noise read the pool whole.
    #[arg(long, default_value_t = alkit::jobs::score::DEFAULT_CHUNK)]
    pub(crate) chunk: usize,
    /// Comma-separated scorers (`alkit scorers` lists them; random and batchbald pick whole batches and give no per-item score).
    #[arg(long, value_delimiter = ',', default_value = "entropy")]
    pub(crate) scorer: Vec<StrategyKind>,
    #[command(flatten)]
    pub(crate) scorer_settings: ScorerSettings,
    /// Seed of REGrad*'s input noise.
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// Write only the K items picked first: the K highest scores of the first scorer, or with --select power/softmax/softrank K items drawn by the stochastic selection (each item's noise keyed by --seed and its id), or with --select batchbald (--scorer bald) the K chosen jointly, in the order chosen (all items when absent).
    #[arg(long)]
    pub(crate) top: Option<usize>,
    /// With --select batchbald: the greedy choice runs over the pool's best M items by BALD (sharded or not, the same M). [default: 10 x --top]
    #[arg(long, value_name = "M")]
    pub(crate) candidates: Option<usize>,
    /// Score only shard I of N (items whose id hashes to I) and write that shard's result for `alkit merge`: FILE with a `key` column, then FILE.shard.json. Default: SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN of SLURM_ARRAY_TASK_COUNT, or JOB_COMPLETION_INDEX of --shards.
    #[arg(long, value_name = "I/N")]
    pub(crate) shard: Option<String>,
    /// Number of shards of a Kubernetes Indexed Job (its completions), read with JOB_COMPLETION_INDEX.
    #[arg(long, value_name = "N")]
    pub(crate) shards: Option<usize>,
    /// CSV file to write: `index`, `id` and one column per scorer.
    #[arg(long)]
    pub(crate) out: PathBuf,
}

#[derive(clap::Args)]
pub(crate) struct MergeArgs {
    /// Rows of the merged result: the K picked first over all shards (at most what each shard kept).
    #[arg(long)]
    pub(crate) top: usize,
    /// CSV file to write, in `alkit score`'s unsharded format.
    #[arg(long)]
    pub(crate) out: PathBuf,
    /// The shards' result files (each with its FILE.shard.json beside it), every shard exactly once.
    #[arg(required = true)]
    pub(crate) shards: Vec<PathBuf>,
}

#[derive(clap::Args)]
pub(crate) struct CompareArgs {
    /// Output folder: compare.csv (mean ranks, per data set AUBC) and compare.json.
    #[arg(long)]
    pub(crate) out: PathBuf,
    /// The `alkit curve` output folders, one per data set, every run finished.
    #[arg(required = true, value_name = "RUN")]
    pub(crate) runs: Vec<PathBuf>,
}

#[derive(clap::Args)]
pub(crate) struct BenchArgs {
    /// Data (a source with a test split: an IDX folder, a folder with train/ and test/ image subfolders, or hf:OWNER/NAME; the pool is the train split).
    #[arg(long, default_value = "data")]
    pub(crate) data: PathBuf,
    /// Comma-separated strategies (`alkit scorers` lists them; batchbald: the evidence plus the greedy choice of 20, in candidates/s).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "entropy,margin,least-confidence"
    )]
    pub(crate) scorer: Vec<StrategyKind>,
    #[command(flatten)]
    pub(crate) scorer_settings: ScorerSettings,
    /// Items scored per pass (the first N of the train split, cycled if fewer).
    #[arg(long, default_value_t = 4096)]
    pub(crate) n: usize,
    /// Inference batch size (at least 256 for the built-in models). [default: 256; with --checkpoint, as for score]
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) batch: Option<u64>,
    /// Timed passes; the median is reported.
    #[arg(long, default_value_t = 5)]
    pub(crate) repeats: usize,
    /// Adam steps of the brief training before timing. [default: 200; 10 for the ResNets]
    #[arg(long)]
    pub(crate) train_steps: Option<usize>,
    /// The built-in model timed; the ResNets on 3x32x32 items (synthetic when --data is not colour images).
    #[arg(long, value_parser = model_kind(), default_value = "cnn")]
    pub(crate) model: ModelKind,
    /// Print one JSON object {"scorer": samples_per_s, ...} on stdout instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
    /// Time training instead of scoring: duq-fm = the Fashion-MNIST DUQ CNN (batch 128, SGD), images/s of whole optimiser steps on --data's train split.
    #[arg(long, value_enum)]
    pub(crate) train: Option<TrainBench>,
    /// DUQ's gradient-penalty weight for --train duq-fm (0 skips the input gradient). [default: 0.05]
    #[arg(long, requires = "train")]
    pub(crate) penalty_weight: Option<f64>,
    /// Timed optimiser steps per repeat for --train.
    #[arg(long, default_value_t = 10)]
    pub(crate) steps: usize,
    /// Score with a deep ensemble of K briefly trained models (sample scorers read one draw per member).
    #[arg(long, value_parser = clap::value_parser!(u64).range(2..), value_name = "K")]
    pub(crate) ensemble: Option<u64>,
    /// Time `alkit score` end to end instead: this checkpoint (a folder, a weights file or hf:OWNER/NAME) opened, --data's pool (an image folder, any source) read and prepared as it says, scored by the --scorer list (one column each); one first run, then the median of --repeats runs.
    #[arg(long, conflicts_with_all = ["n", "model", "train_steps", "ensemble", "train", "steps", "penalty_weight"])]
    pub(crate) checkpoint: Option<String>,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum TrainBench {
    /// DUQ on the Fashion-MNIST CNN with batch norm.
    DuqFm,
    /// A regression head: mlp-gauss (d -> 128 -> 128 -> 2, dropout 0.1, beta-NLL, batch 256) on --n synthetic rows of 64 features; also its scoring by variance over --mc-samples MC-dropout passes.
    MlpGauss,
}

impl ModelSource {
    /// The library's model source; training flags beside `--checkpoint` are refused (they
    /// would be ignored).
    pub(crate) fn to_lib(&self) -> Result<alkit::jobs::ModelSource> {
        if self.checkpoint.is_some() {
            let given = [
                ("--model", self.model.is_some()),
                ("--steps", self.steps.is_some()),
                ("--batch-size", self.batch_size.is_some()),
            ];
            if let Some((flag, _)) = given.iter().find(|g| g.1) {
                return Err(alkit::Error::config(
                    "checkpoint",
                    format!(
                        "{flag} sets how a model is trained here; --checkpoint loads one instead"
                    ),
                )
                .into());
            }
        }
        if self.checkpoint.is_none() && self.onnx_features.is_some() {
            return Err(alkit::Error::config(
                "onnx_features",
                "names an output of an ONNX --checkpoint, and none is given",
            )
            .into());
        }
        if self.checkpoint.is_none() && self.onnx_config.is_some() {
            return Err(alkit::Error::config(
                "onnx_config",
                "gives the preprocessing of an ONNX --checkpoint, and none is given",
            )
            .into());
        }
        if self.checkpoint.is_none() && self.input_norm.input_mean.is_some() {
            return Err(alkit::Error::config(
                "input_mean",
                "gives the normalisation of an ONNX --checkpoint, and none is given",
            )
            .into());
        }
        Ok(alkit::jobs::ModelSource {
            checkpoint: self
                .checkpoint
                .as_ref()
                .map(|p| p.to_string_lossy().into_owned()),
            checkpoint_options: alkit::checkpoint::OpenOptions {
                onnx_features: self.onnx_features.clone(),
                onnx_config: self.onnx_config.clone(),
                input_mean: self.input_norm.input_mean.clone(),
                input_std: self.input_norm.input_std.clone(),
            },
            model: match self.model {
                Some(CurveModel::Classifier(k)) => k,
                Some(CurveModel::Gauss(k)) => anyhow::bail!(
                    "--model {} is a regression model: give the numbers to predict with \
                     --target COLUMN (calibrate)",
                    k.name()
                ),
                Some(CurveModel::Sigmoid(k)) => anyhow::bail!(
                    "--model {} is a multi-label model; calibrate does not train one yet (a \
                     multi-label curve does: --labels COLUMN)",
                    k.name()
                ),
                None => ModelKind::from_name("cnn").expect("cnn is built in"),
            },
            steps: self.steps.unwrap_or(2000),
            batch_size: self.batch_size,
            seed: self.seed,
            stats_cache: self.embed_cache.clone(),
        })
    }
}

impl CurveArgs {
    /// The settings of a new curve (`--resume` takes every setting from its folder instead).
    pub(crate) fn options(&self) -> Result<alkit::jobs::curve::CurveOptions> {
        let model = match self.model {
            Some(CurveModel::Gauss(k)) => anyhow::bail!(
                "--model {} is a regression model: give the numbers to predict with --target \
                 COLUMN (and --task regression where the data cannot tell)",
                k.name()
            ),
            Some(CurveModel::Sigmoid(k)) => anyhow::bail!(
                "--model {} is a multi-label model: name the label sets with --labels COLUMN",
                k.name()
            ),
            Some(CurveModel::Classifier(k)) => Some(k),
            None => None,
        };
        Ok(alkit::jobs::curve::CurveOptions {
            data: self.data.clone(),
            stream: self.stream,
            model,
            strategies: self.scorer.clone(),
            seed: self.seed,
            seeds: self.seeds,
            initial: self.initial,
            query: self.query,
            cycles: self.cycles,
            steps: self.steps,
            batch_size: self.batch_size,
            lr: self.lr,
            ensemble: self.ensemble.map(|k| k as usize),
            anchor: self.anchor,
            subsample: self.subsample,
            cold_start: self.cold_start,
            balanced_start: self.balanced_start,
            hidden: self.hidden.clone(),
            stop: self.stop.stop,
            scorers: self.scorer_settings.checked()?,
        })
    }
}

impl CurveArgs {
    /// The settings of a regression curve; the flags a regression run does not take yet are
    /// refused by name.
    pub(crate) fn regression(&self) -> Result<alkit::jobs::regression::RegressionCurve> {
        let not_yet = [
            ("--stream", self.stream),
            ("--backbone", self.backbone.is_some()),
            ("--anchor", self.anchor.is_some()),
            ("--subsample", self.subsample.is_some()),
            ("--cold-start", self.cold_start),
            ("--balanced-start", self.balanced_start),
            ("--hidden", self.hidden.is_some()),
            ("--stop", self.stop.stop.is_some()),
            ("--resume", self.resume.is_some()),
            ("--save-scores", self.save_scores),
            ("--jobs", self.jobs.is_some()),
        ];
        if let Some((flag, _)) = not_yet.iter().find(|(_, given)| *given) {
            anyhow::bail!("{flag} is not available for a regression curve yet; drop it");
        }
        let model = match self.model {
            Some(CurveModel::Gauss(k)) => Some(k),
            Some(other) => anyhow::bail!(
                "--model {} is not a Gaussian head; a regression run trains linear-gauss or \
                 mlp-gauss",
                other.name()
            ),
            None => None,
        };
        Ok(alkit::jobs::regression::RegressionCurve {
            data: self.data.clone().unwrap_or_else(|| "data".into()),
            settings: self.regression.clone(),
            model,
            strategies: self.scorer.clone(),
            scorers: self.scorer_settings.checked()?,
            seed: self.seed,
            seeds: self.seeds,
            initial: self.initial,
            query: self.query,
            cycles: self.cycles,
            steps: self.steps,
            batch_size: self.batch_size,
            lr: self.lr,
            ensemble: self.ensemble.map(|k| k as usize),
        })
    }
}

impl CurveArgs {
    /// The settings of a multi-label curve; the flags it does not take yet are refused by
    /// name.
    pub(crate) fn multi_label(&self) -> Result<alkit::jobs::multilabel::MultiLabelCurve> {
        let r = &self.regression;
        let not_yet = [
            ("--stream", self.stream),
            ("--backbone", self.backbone.is_some()),
            ("--anchor", self.anchor.is_some()),
            ("--subsample", self.subsample.is_some()),
            ("--cold-start", self.cold_start),
            ("--balanced-start", self.balanced_start),
            ("--hidden", self.hidden.is_some()),
            ("--stop", self.stop.stop.is_some()),
            ("--resume", self.resume.is_some()),
            ("--save-scores", self.save_scores),
            ("--jobs", self.jobs.is_some()),
            ("--target", !r.target.is_empty()),
            ("--loss", r.loss.is_some()),
            ("--nll-beta", r.nll_beta.is_some()),
        ];
        let model = multi_label_model("curve", &not_yet, r, self.model)?;
        Ok(alkit::jobs::multilabel::MultiLabelCurve {
            data: self.data.clone().unwrap_or_else(|| "data".into()),
            test: r.test.clone(),
            settings: self.multi_label.clone(),
            model,
            strategies: self.scorer.clone(),
            scorers: self.scorer_settings.checked()?,
            seed: self.seed,
            seeds: self.seeds,
            initial: self.initial,
            query: self.query,
            cycles: self.cycles,
            steps: self.steps,
            batch_size: self.batch_size,
            lr: self.lr,
            ensemble: self.ensemble.map(|k| k as usize),
        })
    }
}

impl ScoreArgs {
    /// The library's score job; the shard from `--shard`, or the scheduler's environment.
    /// The checkpoints named: each `--checkpoint` value split at its commas, neighbouring
    /// pieces joined back while together they name a path that exists (a folder may have a
    /// comma in its name), the longest such join first; a piece naming nothing stays as it is
    /// (an `hf:` id, or a missing path the loader reports by name).
    pub(crate) fn checkpoints(&self) -> Vec<String> {
        self.checkpoint
            .iter()
            .flat_map(|p| split_existing(&p.to_string_lossy()))
            .collect()
    }

    pub(crate) fn job(&self) -> Result<alkit::jobs::score::ScoreJob> {
        use alkit::jobs::score::Split;
        let shard = alkit::jobs::shard::Shard::resolve(self.shard.as_deref(), self.shards, &|k| {
            std::env::var(k).ok()
        })?;
        Ok(alkit::jobs::score::ScoreJob {
            checkpoints: self.checkpoints(),
            checkpoint_options: alkit::checkpoint::OpenOptions {
                onnx_features: self.onnx_features.clone(),
                onnx_config: self.onnx_config.clone(),
                input_mean: self.input_norm.input_mean.clone(),
                input_std: self.input_norm.input_std.clone(),
            },
            data: self.data.to_string_lossy().into_owned(),
            split: match self.split {
                SplitArg::Train => Split::Train,
                SplitArg::Test => Split::Test,
            },
            scorers: self.scorer.clone(),
            settings: self.scorer_settings.checked()?,
            top: self.top,
            candidates: self.candidates,
            batch: self.batch,
            chunk: self.chunk,
            seed: self.seed,
            shard,
            out: self.out.clone(),
        })
    }
}

impl SurfaceArgs {
    /// The surface's spec: the model the settings name, scored as they say.
    pub(crate) fn spec(&self) -> Result<alkit::jobs::surface::SurfaceSpec> {
        if self.dataset != "moons" {
            return Err(alkit::Error::config(
                "dataset",
                format!("`{}` is not available; only `moons`", self.dataset),
            )
            .into());
        }
        if self.seeds == 0 {
            return Err(alkit::Error::config("seeds", "must be at least 1").into());
        }
        Ok(self.settings.spec()?)
    }

    /// The specs of `--beside`'s models on the same moons, each scored by its default.
    pub(crate) fn beside_specs(&self) -> Result<Vec<alkit::jobs::surface::SurfaceSpec>> {
        if self.beside.is_empty() {
            return Ok(Vec::new());
        }
        if self.seeds != 1 {
            return Err(alkit::Error::config(
                "beside",
                "draws one seed's surfaces side by side; leave out --seeds, or --beside for the \
                 spread over seeds",
            )
            .into());
        }
        let specs = self.beside.iter().map(|&m| self.settings.spec_of(m, None));
        Ok(specs.collect::<alkit::error::Result<_>>()?)
    }
}

/// `text` split at commas, runs of pieces that together name an existing path kept whole.
fn split_existing(text: &str) -> Vec<String> {
    let pieces: Vec<&str> = text.split(',').collect();
    let mut out = Vec::new();
    let mut start = 0;
    while start < pieces.len() {
        let end = (start + 1..=pieces.len())
            .rev()
            .find(|&end| std::path::Path::new(&pieces[start..end].join(",")).exists())
            .unwrap_or(start + 1);
        out.push(pieces[start..end].join(","));
        start = end;
    }
    out
}
