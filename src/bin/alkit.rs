//! The `alkit` command line: a thin layer over the library.
//!
//! Parses flags (clap), turns them into the library's validated configs, draws progress with
//! indicatif through the library's `Observer` trait, prints tables, and maps errors to exit
//! codes: 0 success, 1 failure (data, IO, state), 2 bad usage or settings, 130 interrupted.

use alkit::acquire::LoopConfig;
use alkit::acquisition::Scorer;
use alkit::bench::bench_scoring;
use alkit::curve::{
    run_curve, summarize, CurveSpec, ScorerSettings, SelectKind, StrategyKind, SummaryRow,
};
use alkit::data::{Dataset, Normalizer, Source, Splits};
use alkit::hub::{Hub, HubRepo, RepoKind};
use alkit::nn::{Arch, CnnConfig, MlpConfig};
use alkit::observe::{Control, Event, Observer, Silent};
use alkit::predict::{evaluate, Scoring};
use alkit::rng::{stream, Purpose};
use alkit::train::{train, train_ensemble, TrainConfig, TrainRngs};
use anyhow::{bail, Context, Result};
use candle_core::Device;
use clap::{Parser, Subcommand, ValueEnum};

#[path = "alkit/session.rs"]
mod session;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Parser)]
#[command(
    name = "alkit",
    version,
    about = "Active learning and uncertainty: pick which points to label next, and say when a model does not know.",
    long_about = None
)]
struct Cli {
    /// Where tensors live: cpu, cuda, metal, or auto (the first accelerator compiled in and present, else cpu).
    #[arg(long, global = true, value_enum, default_value_t = DeviceArg::Cpu)]
    device: DeviceArg,
    /// No progress bars.
    #[arg(long, short, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum DeviceArg {
    Cpu,
    Cuda,
    Metal,
    Auto,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum ModelArg {
    /// The REGrad paper's small CNN (image inputs).
    Cnn,
    /// A ReLU MLP 256-128 (any input, flattened).
    Mlp,
    /// DUQ (van Amersfoort et al. 2020) on the paper's Fashion-MNIST CNN with batch norm: RBF head, BCE + gradient penalty (lambda 0.05), SGD lr 0.05 momentum 0.9, dropping x0.2 at 1/3 and 2/3 of the steps; score it with `duq`.
    Duq,
}

#[derive(Clone, Copy, ValueEnum)]
enum SplitArg {
    Train,
    Test,
}

#[derive(Subcommand)]
enum Command {
    /// Acquisition curves: ACC/NLL per labeling cycle for each scorer and seed, as CSV, a table and plots.
    Curve(CurveArgs),
    /// Train a model on a whole training split and save a checkpoint.
    Train(TrainArgs),
    /// Score every item of any data source with a checkpoint (local, hf:, or several as an ensemble); one CSV row per item.
    Score(ScoreArgs),
    /// Pool-scoring throughput (samples/s) per scorer with the standard CNN (or an ensemble); `--train duq-fm`: DUQ training images/s.
    Bench(BenchArgs),
    /// OOD detection: score an in-distribution and an OOD test split; AUROC, AUPR-in/out, FPR@95.
    Ood(OodArgs),
    /// Calibration of a model and its uncertainty scores: rAULC, ECE, NLL, Brier, misclassification AUROC.
    Calibrate(CalibrateArgs),
    /// All metrics from externally computed scores in a CSV file.
    Metrics(MetricsArgs),
    /// Uncertainty over the plane on two moons (DUQ vs a softmax MLP): surface.png + metrics.json.
    Surface(SurfaceArgs),
    /// Start a labeling session on a pool (optionally with seed labels) in a state folder.
    Init(session::InitArgs),
    /// Train on the session's labels, score the pool and write the next batch to label.
    Query(session::QueryArgs),
    /// Add a person's answers (id,label CSV) to the session; one bad row changes nothing.
    Teach(session::TeachArgs),
    /// Labeled items per class, rounds, pending items and the last round's metrics.
    Status(session::StatusArgs),
}

#[derive(Clone, Copy, ValueEnum)]
enum SurfaceModelArg {
    /// DUQ with a 2-20-20-20 ReLU MLP feature extractor (score 1 - max K).
    Duq,
    /// One softmax ReLU MLP (hidden 25-25-25).
    Mlp,
    /// MC dropout: ReLU MLP 25-25-25-25 with dropout 0.205, --mc-samples passes.
    McDropout,
    /// Deep ensemble of --members MLPs (25-25-25) from different seeds and batch orders.
    Ensemble,
    /// Anchored ensemble (Pearce et al. 2020): members regularised towards their own random initialisation, strength --anchor.
    AnchoredEnsemble,
}

#[derive(Clone, Copy, ValueEnum)]
enum PenaltyArg {
    TwoSided,
    Squared,
    OneSided,
    None,
}

#[derive(Clone, Copy, ValueEnum)]
enum SurfaceScorerArg {
    /// 1 - max of the mean probability.
    MaxProb,
    /// Entropy of the mean probability.
    Entropy,
    /// Mean over classes of the variance across samples.
    ClassVariance,
    /// Mutual information across samples.
    Bald,
    /// DUQ's 1 - max K (only with --model duq).
    Duq,
}

#[derive(clap::Args)]
struct SurfaceArgs {
    /// The dataset (two moons: 1,000 training points, noise 0.1).
    #[arg(long, default_value = "moons")]
    dataset: String,
    /// The model.
    #[arg(long, value_enum, default_value_t = SurfaceModelArg::Duq)]
    model: SurfaceModelArg,
    /// DUQ's gradient-penalty form (lambda 1.0).
    #[arg(long, value_enum, default_value_t = PenaltyArg::TwoSided)]
    penalty: PenaltyArg,
    /// The uncertainty score: duq for --model duq; max-prob, entropy, class-variance or bald otherwise. [default: duq for DUQ, entropy otherwise]
    #[arg(long, value_enum)]
    scorer: Option<SurfaceScorerArg>,
    /// Training points (DUQ's setting: 1000; Ulmer & Cina's: 500).
    #[arg(long, default_value_t = 1000)]
    points: usize,
    /// Moon noise (DUQ's setting: 0.1; Ulmer & Cina's: 0.125).
    #[arg(long, default_value_t = 0.1)]
    noise: f64,
    /// MC-dropout passes.
    #[arg(long, default_value_t = 20)]
    mc_samples: usize,
    /// Ensemble members.
    #[arg(long, default_value_t = 5)]
    members: usize,
    /// Anchoring strength tau of anchored ensembles.
    #[arg(long, default_value_t = 1.0)]
    anchor: f64,
    /// Adam steps (batch 64, lr 1e-3) of the softmax models.
    #[arg(long, default_value_t = 2000)]
    steps: usize,
    /// Seed of the data, initialisation and batch order.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Repeat with seeds seed, seed+1, ...: one folder per seed (`seedS/`), `seeds.csv`, and
    /// the median and range of the metrics (how robust a method is matters here as much as
    /// one run's picture).
    #[arg(long, default_value_t = 1)]
    seeds: u64,
    /// Output folder: surface.png, gradient.png, metrics.json (with --seeds: per seed).
    #[arg(long)]
    out: PathBuf,
}

/// A model to evaluate: loaded from a checkpoint, or trained here on a training split.
#[derive(clap::Args)]
struct ModelSource {
    /// Evaluate this checkpoint (from `alkit train`, or `OUT/model` of an earlier run) instead
    /// of training a model; a model trained here is saved to `OUT/model`.
    #[arg(long)]
    checkpoint: Option<PathBuf>,
    /// Architecture to train when no checkpoint is given.
    #[arg(long, value_enum, default_value_t = ModelArg::Cnn)]
    model: ModelArg,
    /// Optimiser steps when training here (Adam; SGD for duq).
    #[arg(long, default_value_t = 2000)]
    steps: usize,
    /// Mini-batch size when training here [default: 32; 128 for duq].
    #[arg(long)]
    batch_size: Option<usize>,
    /// Seed of training and of the scorers' noise.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

#[derive(clap::Args)]
struct OodArgs {
    /// In-distribution data (four IDX files): the model trains on its train split, its test split is scored.
    #[arg(long)]
    train_data: PathBuf,
    /// OOD data (four IDX files): its test split is scored, normalised with the in-distribution statistics.
    #[arg(long)]
    ood_data: PathBuf,
    #[command(flatten)]
    source: ModelSource,
    /// Comma-separated scorers.
    #[arg(long, value_delimiter = ',', default_value = "entropy")]
    scorer: Vec<StrategyKind>,
    #[command(flatten)]
    scorer_flags: ScorerFlags,
    /// Output folder: ood.csv, metrics.json, scores.csv, roc.svg/png, hist.svg/png.
    #[arg(long)]
    out: PathBuf,
}

#[derive(clap::Args)]
struct CalibrateArgs {
    /// Data (four IDX files): the model trains on the train split, the test split is evaluated.
    #[arg(long, default_value = "data")]
    data: PathBuf,
    #[command(flatten)]
    source: ModelSource,
    /// Comma-separated scorers whose ranking of mistakes is evaluated (rAULC, misclassification AUROC).
    #[arg(long, value_delimiter = ',', default_value = "entropy")]
    scorer: Vec<StrategyKind>,
    #[command(flatten)]
    scorer_flags: ScorerFlags,
    /// Temperature-scale the probabilities first, fitting T by NLL on the last 10% of the train split (held out from training when alkit trains the model).
    #[arg(long)]
    temperature: bool,
    /// Output folder: metrics.json, reliability.svg/png, rejection.svg/png.
    #[arg(long)]
    out: PathBuf,
}

#[derive(clap::Args)]
struct MetricsArgs {
    /// CSV with a header: `score` (higher = more uncertain) plus `is_ood` (0/1) for OOD metrics and/or `correct` (0/1) for calibration metrics; optional `confidence` (max probability) for ECE/MCE.
    #[arg(long)]
    scores: PathBuf,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

/// Settings of the parameterised scorers.
#[derive(clap::Args, Clone, Copy)]
struct ScorerFlags {
    /// REGrad layer-selection strength lambda (a_l = exp(lambda * l)). [default: 0.3]
    #[arg(long)]
    lambda: Option<f32>,
    /// REGrad* input-noise standard deviation on the [0, 1] pixel scale. [default: 0.02]
    #[arg(long)]
    sigma: Option<f32>,
    /// REGrad*'s number of perturbed copies N. [default: 8]
    #[arg(long)]
    perturbations: Option<usize>,
    /// Perturb-x input-noise standard deviation on the [0, 1] pixel scale. [default: 0.05]
    #[arg(long)]
    perturb_x_sigma: Option<f32>,
    /// Perturb-theta weight-noise standard deviation (absolute, every parameter). [default: 0.01]
    #[arg(long)]
    perturb_theta_sigma: Option<f32>,
    /// Draws of Perturb-x and Perturb-theta. [default: 8]
    #[arg(long)]
    perturb_samples: Option<usize>,
    /// MC-dropout forward passes of bald, mc-entropy, class-variance, variation-ratio, mc-max-prob. [default: 20]
    #[arg(long)]
    mc_samples: Option<usize>,
    /// Selection of every scored strategy: top-k, power, softmax, softrank (Kirsch et al. 2023), or batchbald (Kirsch et al. 2019; bald only, which then runs as batchbald). [default: top-k]
    #[arg(long)]
    select: Option<SelectKind>,
    /// Inverse temperature of the stochastic selection modes. [default: 1]
    #[arg(long)]
    beta: Option<f32>,
}

impl ScorerFlags {
    fn given(&self) -> Option<&'static str> {
        [
            ("--lambda", self.lambda.is_some()),
            ("--sigma", self.sigma.is_some()),
            ("--perturbations", self.perturbations.is_some()),
        ]
        .into_iter()
        .find(|g| g.1)
        .map(|g| g.0)
    }

    fn settings(&self) -> Result<ScorerSettings> {
        let d = ScorerSettings::default();
        let s = ScorerSettings {
            lambda: self.lambda.unwrap_or(d.lambda),
            sigma: self.sigma.unwrap_or(d.sigma),
            perturbations: self.perturbations.unwrap_or(d.perturbations),
            perturb_x_sigma: self.perturb_x_sigma.unwrap_or(d.perturb_x_sigma),
            perturb_theta_sigma: self.perturb_theta_sigma.unwrap_or(d.perturb_theta_sigma),
            perturb_samples: self.perturb_samples.unwrap_or(d.perturb_samples),
            mc_samples: self.mc_samples.unwrap_or(d.mc_samples),
            select: self.select.unwrap_or(d.select),
            beta: self.beta.unwrap_or(d.beta),
            members: false,
        };
        if s.mc_samples == 0 || s.perturb_samples == 0 {
            return Err(
                alkit::Error::config("mc_samples", "sample counts must be at least 1").into(),
            );
        }
        if !s.lambda.is_finite() {
            return Err(alkit::Error::config("lambda", "must be a finite number").into());
        }
        for (name, v) in [
            ("sigma", s.sigma),
            ("perturb_x_sigma", s.perturb_x_sigma),
            ("perturb_theta_sigma", s.perturb_theta_sigma),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(alkit::Error::config(name, "must be a finite number >= 0").into());
            }
        }
        Ok(s)
    }
}

#[derive(clap::Args)]
struct CurveArgs {
    /// Folder with the four IDX files (train-/t10k-images-idx3-ubyte, train-/t10k-labels-idx1-ubyte, plain or .gz). [default: data]
    #[arg(long)]
    data: Option<PathBuf>,
    /// Comma-separated strategies: entropy, margin, least-confidence, random, regrad-star, regrad, exgrad, negrad, ungrad, gradnorm, exgrad-v, perturb-x, perturb-theta, bald, batchbald, mc-entropy, class-variance, variation-ratio, mc-max-prob. [default: entropy,margin,least-confidence,random]
    #[arg(long, value_delimiter = ',')]
    scorer: Option<Vec<StrategyKind>>,
    #[command(flatten)]
    scorer_flags: ScorerFlags,
    /// Number of seeds; runs use seeds SEED, SEED+1, ... [default: 1]
    #[arg(long)]
    seeds: Option<u64>,
    /// First seed. [default: 0]
    #[arg(long)]
    seed: Option<u64>,
    /// Random seed labels before cycle 0 (m1). [default: 20]
    #[arg(long)]
    initial: Option<usize>,
    /// Items labeled per cycle (m2). [default: 20]
    #[arg(long)]
    query: Option<usize>,
    /// Acquisition cycles after cycle 0. [default: 10]
    #[arg(long)]
    cycles: Option<usize>,
    /// Adam steps per training (each cycle trains from scratch). [default: 500]
    #[arg(long)]
    steps: Option<usize>,
    /// Mini-batch size. [default: 32]
    #[arg(long)]
    batch_size: Option<usize>,
    /// Adam learning rate. [default: 0.001]
    #[arg(long)]
    lr: Option<f64>,
    /// Model trained each cycle. [default: cnn]
    #[arg(long, value_enum)]
    model: Option<ModelArg>,
    /// Train a deep ensemble of K members each cycle (different initialisations and batch orders); bald, batchbald, class-variance, ... then read one draw per member instead of MC dropout, and ACC/NLL are the ensemble's.
    #[arg(long, value_parser = clap::value_parser!(u64).range(2..), value_name = "K")]
    ensemble: Option<u64>,
    /// Anchored training (Pearce et al. 2020): add tau/n ||theta - theta_0||^2, theta_0 each model's own initialisation (with --ensemble: anchored ensembles).
    #[arg(long, value_name = "TAU")]
    anchor: Option<f64>,
    /// Output folder. [default: out/curve]
    #[arg(long)]
    out: Option<PathBuf>,
    /// Continue the interrupted run in this folder (settings come from its run.json).
    #[arg(long, conflicts_with = "out")]
    resume: Option<PathBuf>,
    /// Replace an existing run in --out instead of refusing.
    #[arg(long)]
    force: bool,
    /// Also write every pool scoring to OUT/scores/STRATEGY/seedS/cycleC.csv (index,score): the scores cycle C's model gave the candidates it picked cycle C+1's labels from.
    #[arg(long)]
    save_scores: bool,
}

#[derive(clap::Args)]
struct TrainArgs {
    /// Folder with the four IDX files.
    #[arg(long, default_value = "data")]
    data: PathBuf,
    /// Architecture.
    #[arg(long, value_enum, default_value_t = ModelArg::Cnn)]
    model: ModelArg,
    /// Adam steps.
    #[arg(long, default_value_t = 2000)]
    steps: usize,
    /// Mini-batch size.
    #[arg(long, default_value_t = 32)]
    batch_size: usize,
    /// Adam learning rate.
    #[arg(long, default_value_t = 1e-3)]
    lr: f64,
    /// Seed for initialisation, batch order and dropout.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Train only on these items of the train split: a file with one index per line, or a CSV whose header has an `index` column (e.g. a curve run's seed set). Initialisation and batch order then match a curve's cycle 0 with the same seed.
    #[arg(long)]
    indices: Option<PathBuf>,
    /// Checkpoint folder to write (model.safetensors + config.json).
    #[arg(long)]
    out: PathBuf,
}

#[derive(clap::Args)]
struct ScoreArgs {
    /// Checkpoint folder (from `alkit train`, a labeling session's `model/`, or converted weights), or hf:OWNER/NAME for a model repository on the Hub. Several, comma-separated, form a deep ensemble: its mean prediction is scored, and bald, class-variance, ... read one draw per member.
    #[arg(long, value_delimiter = ',', required = true)]
    checkpoint: Vec<PathBuf>,
    /// Items to score: an IDX folder, a folder of PNG/JPEG images, FILE.safetensors, FILE.csv, FILE.parquet, or hf:OWNER/NAME.
    #[arg(long, default_value = "data")]
    data: PathBuf,
    /// Which split to score (test: only sources with a test split).
    #[arg(long, value_enum, default_value_t = SplitArg::Train)]
    split: SplitArg,
    /// Inference batch size.
    #[arg(long, default_value_t = 512)]
    batch: usize,
    /// Comma-separated scorers: entropy, margin, least-confidence, regrad-star, regrad, exgrad, negrad, ungrad, gradnorm, exgrad-v, perturb-x, perturb-theta, bald, mc-entropy, class-variance, variation-ratio, mc-max-prob.
    #[arg(long, value_delimiter = ',', default_value = "entropy")]
    scorer: Vec<StrategyKind>,
    #[command(flatten)]
    scorer_flags: ScorerFlags,
    /// Seed of REGrad*'s input noise.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Write only the K highest-scoring items by the first scorer (all items when absent).
    #[arg(long)]
    top: Option<usize>,
    /// CSV file to write: `index`, `id` and one column per scorer.
    #[arg(long)]
    out: PathBuf,
}

#[derive(clap::Args)]
struct BenchArgs {
    /// Folder with the four IDX files (the pool is the train split).
    #[arg(long, default_value = "data")]
    data: PathBuf,
    /// Comma-separated scorers: entropy, margin, least-confidence, regrad-star, bald, ... (batchbald: the evidence plus the greedy choice of 20, in candidates/s).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "entropy,margin,least-confidence"
    )]
    scorer: Vec<StrategyKind>,
    #[command(flatten)]
    scorer_flags: ScorerFlags,
    /// Items scored per pass (the first N of the train split, cycled if fewer).
    #[arg(long, default_value_t = 4096)]
    n: usize,
    /// Inference batch size (at least 256).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(256..))]
    batch: u64,
    /// Timed passes; the median is reported.
    #[arg(long, default_value_t = 5)]
    repeats: usize,
    /// Adam steps of the brief training before timing.
    #[arg(long, default_value_t = 200)]
    train_steps: usize,
    /// Print one JSON object {"scorer": samples_per_s, ...} on stdout instead of a table.
    #[arg(long)]
    json: bool,
    /// Time training instead of scoring: duq-fm = the Fashion-MNIST DUQ CNN (batch 128, SGD), images/s of whole optimiser steps on --data's train split; --lambda is then DUQ's gradient-penalty weight [default: 0.05; 0 skips the input gradient].
    #[arg(long, value_enum)]
    train: Option<TrainBench>,
    /// Timed optimiser steps per repeat for --train.
    #[arg(long, default_value_t = 10)]
    steps: usize,
    /// Score with a deep ensemble of K briefly trained CNNs (sample scorers read one draw per member).
    #[arg(long, value_parser = clap::value_parser!(u64).range(2..), value_name = "K")]
    ensemble: Option<u64>,
}

fn main() {
    alkit::tune_allocator();
    let cli = Cli::parse();
    let code = match dispatch(cli) {
        Ok(()) => 0,
        Err(e) => {
            let _ = writeln!(std::io::stderr().lock(), "error: {e:#}");
            exit_code(&e)
        }
    };
    std::process::exit(code);
}

/// 2 for bad settings, 130 when interrupted, 1 otherwise.
fn exit_code(e: &anyhow::Error) -> i32 {
    match e.chain().find_map(|c| c.downcast_ref::<alkit::Error>()) {
        Some(alkit::Error::Config { .. }) => 2,
        Some(alkit::Error::Interrupted) => 130,
        _ => 1,
    }
}

fn dispatch(cli: Cli) -> Result<()> {
    let device = make_device(cli.device)?;
    match cli.command {
        Command::Curve(a) => curve(a, &device, cli.quiet),
        Command::Train(a) => train_cmd(a, &device, cli.quiet),
        Command::Score(a) => score_cmd(a, &device),
        Command::Bench(a) => bench_cmd(a, &device),
        Command::Ood(a) => ood_cmd(a, &device, cli.quiet),
        Command::Calibrate(a) => calibrate_cmd(a, &device, cli.quiet),
        Command::Metrics(a) => metrics_cmd(a),
        Command::Surface(a) => surface_cmd(a, &device),
        Command::Init(a) => session::init(a),
        Command::Query(a) => {
            let mut bars = Bars::new(cli.quiet, 1);
            let r = session::query(a, &device, &mut bars);
            bars.finish();
            r
        }
        Command::Teach(a) => session::teach(a),
        Command::Status(a) => session::status(a),
    }
}

fn make_device(d: DeviceArg) -> Result<Device> {
    Ok(match d {
        DeviceArg::Cpu => Device::Cpu,
        DeviceArg::Cuda => {
            Device::new_cuda(0).context("--device cuda (build with `--features cuda`)")?
        }
        DeviceArg::Metal => {
            Device::new_metal(0).context("--device metal (build with `--features metal`)")?
        }
        DeviceArg::Auto => {
            if candle_core::utils::cuda_is_available() {
                Device::new_cuda(0)?
            } else if candle_core::utils::metal_is_available() {
                Device::new_metal(0)?
            } else {
                Device::Cpu
            }
        }
    })
}

/// Loads a data source with a train and a test split: an IDX folder or `hf:OWNER/NAME`.
fn load(dir: &Path) -> Result<Splits> {
    let name = dir.to_string_lossy();
    let (source, loaded) = load_source(&name)?;
    loaded
        .splits(&source)
        .with_context(|| format!("loading the data {name}"))
}

/// Parses and loads any data source (Hub files through the environment's cache, with a
/// download bar).
fn load_source(name: &str) -> Result<(Source, alkit::data::Loaded)> {
    let source = Source::parse(name).with_context(|| format!("data source {name}"))?;
    let loaded = alkit::data::source::load(&source, &Hub::from_env(), &mut DownloadBar::default())
        .with_context(|| format!("loading the data {name}"))?;
    Ok((source, loaded))
}

/// A checkpoint folder, fetched from the Hub first when written `hf:OWNER/NAME[@REV]`.
fn checkpoint_dir(ck: &Path) -> Result<PathBuf> {
    let name = ck.to_string_lossy();
    let Some(repo) = name.strip_prefix("hf:") else {
        return Ok(ck.to_path_buf());
    };
    let repo = HubRepo::parse(repo)?;
    let hub = Hub::from_env();
    let mut bar = DownloadBar::default();
    let mut dir = None;
    for file in ["config.json", "model.safetensors"] {
        let p = hub
            .get(&repo, RepoKind::Model, file, &mut bar)
            .with_context(|| format!("fetching the checkpoint {name}"))?;
        dir = p.parent().map(Path::to_path_buf);
    }
    Ok(dir.expect("two files"))
}

/// Loads a checkpoint folder or `hf:` model repository.
fn load_checkpoint(ck: &Path, device: &Device) -> Result<alkit::checkpoint::Checkpoint> {
    let dir = checkpoint_dir(ck)?;
    alkit::checkpoint::load(&dir, device)
        .with_context(|| format!("loading the checkpoint {}", ck.display()))
}

/// One checkpoint, or several of the same architecture and normalisation as an ensemble
/// (parameters renamed `m{k}.{name}`).
fn load_checkpoints(paths: &[PathBuf], device: &Device) -> Result<alkit::checkpoint::Checkpoint> {
    if paths.len() == 1 {
        return load_checkpoint(&paths[0], device);
    }
    let mut members = Vec::new();
    let mut named = Vec::new();
    let mut config: Option<alkit::checkpoint::CheckpointConfig> = None;
    for (k, p) in paths.iter().enumerate() {
        let c = load_checkpoint(p, device)?;
        if let Some(first) = &config {
            if first.arch != c.config.arch || first.normalizer != c.config.normalizer {
                bail!(
                    "{}: an ensemble's checkpoints must share the architecture and normalisation of {}",
                    p.display(),
                    paths[0].display()
                );
            }
        }
        named.extend(
            c.params
                .named()
                .into_iter()
                .map(|(n, v)| (format!("m{k}.{n}"), v)),
        );
        members.push(c.model);
        config.get_or_insert(c.config);
    }
    Ok(alkit::checkpoint::Checkpoint {
        config: config.expect("at least two"),
        model: Box::new(alkit::nn::Ensemble::new(members)?),
        params: alkit::nn::init::Params::from_named(named),
    })
}

/// A byte progress bar for Hub downloads (hidden until a download starts).
#[derive(Default)]
struct DownloadBar {
    bar: Option<ProgressBar>,
}

impl Observer for DownloadBar {
    fn on(&mut self, event: &Event<'_>) -> Control {
        if let Event::Download { file, done, total } = event {
            let bar = self.bar.get_or_insert_with(|| {
                let b = ProgressBar::new(*total);
                b.set_style(
                    ProgressStyle::with_template(
                        "{msg:>30} [{bar:30.cyan/blue}] {bytes}/{total_bytes} {bytes_per_sec} (eta {eta})",
                    )
                    .expect("valid template")
                    .progress_chars("=> "),
                );
                b
            });
            bar.set_message(file.to_string());
            bar.set_length(*total);
            bar.set_position(*done);
            if *done >= *total && *total > 0 {
                bar.finish_and_clear();
                self.bar = None;
            }
        }
        Control::Continue
    }
}

fn arch_for(model: ModelArg, ds: &Dataset) -> Arch {
    match model {
        ModelArg::Cnn => Arch::Cnn(CnnConfig::standard(ds.item_shape(), ds.classes())),
        ModelArg::Mlp => Arch::Mlp(MlpConfig {
            inputs: ds.item_len(),
            hidden: vec![256, 128],
            classes: ds.classes(),
            dropout: 0.0,
        }),
        ModelArg::Duq => duq_arch(ds.item_shape(), ds.classes()),
    }
}

/// The paper's Fashion-MNIST DUQ model for `(c, h, w)` items (other shapes get a 1x28x28
/// model, which then refuses them with a clear error).
fn duq_arch(item_shape: &[usize], classes: usize) -> Arch {
    let shape = match item_shape {
        [c, h, w] => [*c, *h, *w],
        _ => [1, 28, 28],
    };
    Arch::Duq(alkit::duq::cnn::DuqCnnArch {
        item_shape: shape,
        classes,
        duq: Default::default(),
    })
}

fn curve(a: CurveArgs, device: &Device, quiet: bool) -> Result<()> {
    let (spec, out, resume) = if let Some(dir) = &a.resume {
        let given = [
            ("--data", a.data.is_some()),
            ("--scorer", a.scorer.is_some()),
            ("--seeds", a.seeds.is_some()),
            ("--seed", a.seed.is_some()),
            ("--initial", a.initial.is_some()),
            ("--query", a.query.is_some()),
            ("--cycles", a.cycles.is_some()),
            ("--steps", a.steps.is_some()),
            ("--batch-size", a.batch_size.is_some()),
            ("--lr", a.lr.is_some()),
            ("--model", a.model.is_some()),
            ("--ensemble", a.ensemble.is_some()),
            ("--anchor", a.anchor.is_some()),
        ];
        if let Some(flag) = given
            .iter()
            .find(|g| g.1)
            .map(|g| g.0)
            .or(a.scorer_flags.given())
        {
            bail!(
                "--resume takes every setting from {}/run.json; drop {flag}",
                dir.display()
            );
        }
        let spec: CurveSpec = alkit::fsutil::read_json(&dir.join("run.json"))
            .with_context(|| format!("--resume {}: not a run folder", dir.display()))?;
        (spec, dir.clone(), true)
    } else {
        let data = a.data.clone().unwrap_or_else(|| PathBuf::from("data"));
        let splits = load(&data)?;
        let seed = a.seed.unwrap_or(0);
        let seeds = a.seeds.unwrap_or(1);
        if seeds == 0 {
            return Err(alkit::Error::config("seeds", "must be at least 1").into());
        }
        let defaults = LoopConfig::default();
        let spec = CurveSpec {
            data,
            model: arch_for(a.model.unwrap_or(ModelArg::Cnn), &splits.train),
            strategies: a
                .scorer
                .clone()
                .unwrap_or_else(|| StrategyKind::DEFAULT.to_vec()),
            seeds: (seed..seed + seeds).collect(),
            config: LoopConfig {
                initial: a.initial.unwrap_or(defaults.initial),
                query: a.query.unwrap_or(defaults.query),
                cycles: a.cycles.unwrap_or(defaults.cycles),
                train: TrainConfig {
                    steps: a.steps.unwrap_or(defaults.train.steps),
                    batch_size: a.batch_size.unwrap_or(defaults.train.batch_size),
                    lr: a.lr.unwrap_or(defaults.train.lr),
                    anchor: a.anchor,
                },
                batch: defaults.batch,
                ensemble: a.ensemble.map(|k| k as usize),
            },
            scorers: ScorerSettings {
                members: a.ensemble.is_some(),
                ..a.scorer_flags.settings()?
            },
        };
        let out = a.out.clone().unwrap_or_else(|| PathBuf::from("out/curve"));
        if a.force && out.join("run.json").exists() {
            for p in [
                "run.json",
                "curve.csv",
                "summary.csv",
                "curve.svg",
                "curve.png",
            ] {
                let _ = std::fs::remove_file(out.join(p));
            }
            let _ = std::fs::remove_dir_all(out.join("runs"));
        }
        (spec, out, false)
    };
    let splits = load(&spec.data)?;
    let norm = Normalizer::fit(&splits.train);
    let train = norm.apply(&splits.train)?;
    let test = norm.apply(&splits.test)?;
    let mut bars = Bars::new(
        quiet,
        spec.seeds.len() * spec.strategies.len() * (spec.config.cycles + 1),
    );
    if a.save_scores {
        bars.scores_dir = Some(out.join("scores"));
    }
    let result = run_curve(
        &spec, &train, &test, &norm.std, &out, resume, device, &mut bars,
    );
    bars.finish();
    if let Some(e) = bars.scores_error.take() {
        return Err(e.context("--save-scores"));
    }
    let states = result.with_context(|| format!("curve run in {}", out.display()))?;
    print_summary(&summarize(&states));
    let mut so = std::io::stdout().lock();
    writeln!(
        so,
        "\nwrote {}/curve.csv, summary.csv, curve.svg, curve.png",
        out.display()
    )?;
    Ok(())
}

fn print_summary(rows: &[SummaryRow]) {
    let mut so = std::io::stdout().lock();
    let _ = writeln!(
        so,
        "{:<18} {:>5}  {:>18}  {:>18}  {:>10}",
        "scorer", "seeds", "ACC % (cyc 1..)", "NLL (cyc 1..)", "final ACC%"
    );
    for r in rows {
        let _ = writeln!(
            so,
            "{:<18} {:>5}  {:>10.2} ± {:<5.2}  {:>10.4} ± {:<5.3}  {:>10.2}",
            r.strategy,
            r.seeds,
            100.0 * r.acc_mean,
            100.0 * r.acc_std,
            r.nll_mean,
            r.nll_std,
            100.0 * r.final_acc
        );
    }
}

fn train_cmd(a: TrainArgs, device: &Device, quiet: bool) -> Result<()> {
    let splits = load(&a.data)?;
    let norm = Normalizer::fit(&splits.train);
    let train_ds = norm.apply(&splits.train)?;
    let test = norm.apply(&splits.test)?;
    let arch = arch_for(a.model, &train_ds);
    let params = TrainConfig {
        steps: a.steps,
        batch_size: a.batch_size,
        lr: a.lr,
        anchor: None,
    }
    .validate()?;
    let ids: Vec<usize> = match &a.indices {
        Some(p) => read_indices(p, train_ds.len())?,
        None => (0..train_ds.len()).collect(),
    };
    let mut bars = Bars::new(quiet, 1);
    let trained = train(
        &arch,
        &train_ds,
        &ids,
        &params,
        TrainRngs::for_cycle(a.seed, 0),
        device,
        &mut bars,
    )?;
    bars.finish();
    let m = evaluate(trained.model.as_ref(), &test, 512, device, &mut Silent)?;
    let classes = (0..train_ds.classes()).map(|c| c.to_string()).collect();
    alkit::checkpoint::save(
        &a.out,
        &arch,
        &trained.params,
        &norm,
        train_ds.item_shape(),
        classes,
    )
    .with_context(|| format!("writing the checkpoint {}", a.out.display()))?;
    let mut so = std::io::stdout().lock();
    writeln!(
        so,
        "test accuracy {:.2}%, NLL {:.4}; wrote {}",
        100.0 * m.acc,
        m.nll,
        a.out.display()
    )?;
    Ok(())
}

/// Reads item indices: one per line, or the `index` column of a CSV with a header.
fn read_indices(path: &Path, n: usize) -> Result<Vec<usize>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .peekable();
    let col = match lines.peek() {
        Some((_, h)) if h.trim().parse::<usize>().is_err() => {
            let c = h
                .split(',')
                .position(|f| f.trim() == "index")
                .with_context(|| format!("{}: the header has no `index` column", path.display()))?;
            lines.next();
            c
        }
        _ => 0,
    };
    let mut out = Vec::new();
    for (ln, l) in lines {
        let f = l.split(',').nth(col).unwrap_or("").trim();
        let i: usize = f.parse().map_err(|_| alkit::Error::Row {
            path: path.to_path_buf(),
            row: ln + 1,
            problem: format!("`{f}` is not an item index"),
        })?;
        if i >= n {
            return Err(alkit::Error::Row {
                path: path.to_path_buf(),
                row: ln + 1,
                problem: format!("index {i} is outside the train split of {n} items"),
            }
            .into());
        }
        out.push(i);
    }
    if out.is_empty() {
        bail!("{}: no indices", path.display());
    }
    Ok(out)
}

fn scorers_of(kinds: &[StrategyKind], settings: &ScorerSettings) -> Result<Vec<Arc<dyn Scorer>>> {
    kinds
        .iter()
        .map(|k| {
            k.scorer(settings).ok_or_else(|| {
                anyhow::Error::from(alkit::Error::config(
                    "scorer",
                    format!("`{k}` picks a whole batch (a strategy for `alkit curve`), it gives no per-item score"),
                ))
            })
        })
        .collect()
}

fn score_cmd(a: ScoreArgs, device: &Device) -> Result<()> {
    let settings = ScorerSettings {
        members: a.checkpoint.len() > 1,
        ..a.scorer_flags.settings()?
    };
    let scorers = scorers_of(&a.scorer, &settings)?;
    if a.batch == 0 {
        return Err(alkit::Error::config("batch", "must be at least 1").into());
    }
    let ck = load_checkpoints(&a.checkpoint, device)?;
    let name = a.data.to_string_lossy();
    let (_, loaded) = load_source(&name)?;
    let items = match a.split {
        SplitArg::Train => loaded.pool,
        SplitArg::Test => loaded
            .test
            .with_context(|| format!("{name} has no test split; drop --split test"))?,
    };
    if items.item_shape != ck.config.item_shape {
        bail!(
            "{name}: items are {:?}, the checkpoint expects {:?}",
            items.item_shape,
            ck.config.item_shape
        );
    }
    let ds = ck.config.normalizer.apply(&items.dataset()?)?;
    let scoring = Scoring {
        model: ck.model.as_ref(),
        params: Some(&ck.params),
        builder: (a.checkpoint.len() == 1).then_some(&ck.config.arch),
        input_std: &ck.config.normalizer.std,
        batch: a.batch,
        device,
    };
    let cols = score_all(&scoring, &ds, &scorers, a.seed)?;
    let mut order: Vec<usize> = (0..ds.len()).collect();
    if let Some(k) = a.top {
        order.sort_by(|&x, &y| cols[0][y].total_cmp(&cols[0][x]).then(x.cmp(&y)));
        order.truncate(k);
    }
    let mut s = String::from("index,id");
    for sc in &scorers {
        s.push(',');
        s.push_str(sc.name());
    }
    s.push('\n');
    for i in order {
        s.push_str(&format!("{i},{}", csv_field(&items.ids[i])));
        for c in &cols {
            s.push_str(&format!(",{}", c[i]));
        }
        s.push('\n');
    }
    alkit::fsutil::write_atomic(&a.out, s.as_bytes())?;
    Ok(())
}

/// Quotes a CSV field when it holds a comma, quote or newline.
fn csv_field(v: &str) -> String {
    if v.contains([',', '"', '\n']) {
        format!("\"{}\"", v.replace('"', "\"\""))
    } else {
        v.to_string()
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum TrainBench {
    /// DUQ on the Fashion-MNIST CNN with batch norm.
    DuqFm,
}

fn bench_train(a: &BenchArgs, device: &Device) -> Result<()> {
    let splits = load(&a.data)?;
    let norm = Normalizer::fit(&splits.train);
    let ds = norm.apply(&splits.train)?;
    let n = ds.len().min(2048);
    let ids: Vec<usize> = (0..n).collect();
    let x = ds.batch(&ids, device)?;
    let y = ds.batch_labels(&ids, device)?;
    let lambda = a.scorer_flags.lambda.map_or(0.05, f64::from);
    let mut cfg = alkit::duq::cnn::DuqCnnConfig::default();
    cfg.settings.lambda = lambda;
    cfg.settings.penalty = if lambda > 0.0 {
        alkit::duq::Penalty::TwoSided
    } else {
        alkit::duq::Penalty::None
    };
    let rate = alkit::bench::bench_duq_training(&x, &y, &cfg, a.steps, a.repeats)?;
    let mut so = std::io::stdout().lock();
    if a.json {
        writeln!(
            so,
            "{}",
            serde_json::json!({"duq-fm": (rate * 10.0).round() / 10.0, "lambda": lambda})
        )?;
    } else {
        writeln!(
            so,
            "duq-fm training, batch {}, lambda {}, median of {} x {} steps, {} thread(s): {:.0} images/s",
            cfg.settings.batch,
            lambda,
            a.repeats,
            a.steps,
            rayon::current_num_threads(),
            rate
        )?;
    }
    Ok(())
}

fn bench_cmd(a: BenchArgs, device: &Device) -> Result<()> {
    if a.train.is_some() {
        return bench_train(&a, device);
    }
    let settings = ScorerSettings {
        members: a.ensemble.is_some(),
        ..a.scorer_flags.settings()?
    };
    let per_item: Vec<StrategyKind> = a
        .scorer
        .iter()
        .copied()
        .filter(|k| *k != StrategyKind::BatchBald)
        .collect();
    let scorers = scorers_of(&per_item, &settings)?;
    let splits = load(&a.data)?;
    let norm = Normalizer::fit(&splits.train);
    let ds = norm.apply(&splits.train)?;
    let arch = Arch::Cnn(CnnConfig::standard(ds.item_shape(), ds.classes()));
    let params = TrainConfig {
        steps: a.train_steps.max(1),
        ..TrainConfig::default()
    }
    .validate()?;
    let seed_set: Vec<usize> = (0..ds.len().min(1000)).collect();
    let trained = match a.ensemble {
        None => train(
            &arch,
            &ds,
            &seed_set,
            &params,
            TrainRngs::for_cycle(0, 0),
            device,
            &mut Silent,
        )?,
        Some(k) => train_ensemble(
            &arch,
            k as usize,
            &ds,
            &seed_set,
            &params,
            (0, 0),
            device,
            &mut Silent,
        )?,
    };
    let items: Vec<usize> = (0..a.n).map(|i| i % ds.len()).collect();
    let scoring = Scoring {
        model: trained.model.as_ref(),
        params: Some(&trained.params),
        builder: a
            .ensemble
            .is_none()
            .then_some(&arch as &dyn alkit::nn::ModelBuilder),
        input_std: &norm.std,
        batch: a.batch as usize,
        device,
    };
    let mut results = Vec::new();
    for s in &scorers {
        results.push(bench_scoring(&scoring, &ds, &items, s.as_ref(), a.repeats)?);
    }
    if a.scorer.contains(&StrategyKind::BatchBald) {
        let sel = if a.ensemble.is_some() {
            alkit::acquisition::BatchBald::members()
        } else {
            alkit::acquisition::BatchBald::mc_dropout(settings.mc_samples)
        };
        results.push(alkit::bench::bench_batch_selection(
            &scoring, &ds, &items, &sel, 20, a.repeats,
        )?);
    }
    let mut so = std::io::stdout().lock();
    if a.json {
        let obj: serde_json::Map<String, serde_json::Value> = results
            .iter()
            .map(|r| {
                (
                    r.scorer.clone(),
                    serde_json::json!((r.samples_per_s * 10.0).round() / 10.0),
                )
            })
            .collect();
        writeln!(so, "{}", serde_json::Value::Object(obj))?;
    } else {
        writeln!(
            so,
            "{} items, batch {}, median of {} passes, {} thread(s)",
            a.n,
            a.batch,
            a.repeats,
            rayon::current_num_threads()
        )?;
        for r in &results {
            writeln!(so, "{:<18} {:>10.0} samples/s", r.scorer, r.samples_per_s)?;
        }
    }
    Ok(())
}

/// indicatif progress bars fed by library events.
struct Bars {
    multi: MultiProgress,
    overall: ProgressBar,
    step: ProgressBar,
    label: String,
    /// Strategy and seed of the run in progress.
    run: (String, u64),
    /// Where `--save-scores` writes pool scorings.
    scores_dir: Option<PathBuf>,
    /// The first failure to write them (the run is stopped).
    scores_error: Option<anyhow::Error>,
}

impl Bars {
    fn new(quiet: bool, total_cycles: usize) -> Self {
        let multi = MultiProgress::new();
        if quiet {
            multi.set_draw_target(indicatif::ProgressDrawTarget::hidden());
        }
        let overall = multi.add(ProgressBar::new(total_cycles as u64));
        overall.set_style(
            ProgressStyle::with_template("{prefix:>24} [{bar:30.cyan/blue}] {pos}/{len} cycles  {elapsed_precise} (eta {eta})")
                .expect("valid template")
                .progress_chars("=> "),
        );
        overall.set_prefix("total");
        let step = multi.add(ProgressBar::new(1));
        step.set_style(
            ProgressStyle::with_template("{prefix:>24} [{bar:30.green/white}] {pos}/{len} {msg}")
                .expect("valid template")
                .progress_chars("=> "),
        );
        Self {
            multi,
            overall,
            step,
            label: String::new(),
            run: (String::new(), 0),
            scores_dir: None,
            scores_error: None,
        }
    }

    fn finish(&self) {
        self.step.finish_and_clear();
        self.overall.finish_and_clear();
        let _ = self.multi.clear();
    }
}

impl Observer for Bars {
    fn on(&mut self, event: &Event<'_>) -> Control {
        match event {
            Event::RunStarted {
                strategy,
                seed,
                from_cycle,
                ..
            } => {
                self.label = format!("{strategy} seed {seed}");
                self.run = (strategy.to_string(), *seed);
                self.overall.inc(*from_cycle as u64);
            }
            Event::CycleStarted { cycle, labeled } => {
                self.step
                    .set_prefix(format!("{} c{cycle} ({labeled} lab.)", self.label));
                self.step.set_position(0);
                self.step.set_message("training");
            }
            Event::TrainStep { step, steps, loss } => {
                self.step.set_length(*steps as u64);
                self.step.set_position(*step as u64);
                if let Some(l) = loss {
                    self.step.set_message(format!("training, loss {l:.3}"));
                }
            }
            Event::Scoring { done, total } => {
                self.step.set_length(*total as u64);
                self.step.set_position(*done as u64);
                self.step.set_message("scoring");
            }
            Event::Scored {
                cycle,
                indices,
                scores,
            } => {
                if let Some(dir) = &self.scores_dir {
                    let path = dir
                        .join(&self.run.0)
                        .join(format!("seed{}", self.run.1))
                        .join(format!("cycle{cycle}.csv"));
                    let mut s = String::from("index,score\n");
                    for (i, v) in indices.iter().zip(scores.iter()) {
                        s.push_str(&format!("{i},{v}\n"));
                    }
                    if let Err(e) = alkit::fsutil::write_atomic(&path, s.as_bytes()) {
                        self.scores_error = Some(e.into());
                        return Control::Stop;
                    }
                }
            }
            Event::CycleFinished { record } => {
                self.overall.inc(1);
                self.overall.set_message(format!("acc {:.3}", record.acc));
            }
            _ => {}
        }
        Control::Continue
    }
}

/// A model ready to score, with what scoring needs.
struct Evaluated {
    model: Box<dyn alkit::nn::Classifier>,
    params: alkit::nn::init::Params,
    arch: Arch,
    norm: Normalizer,
}

/// Loads `source.checkpoint`, or trains `source.model` on `train[..limit]` (all of it when
/// `limit` is `None`).
/// The checkpoint's model, or one trained here; a trained model is saved as a checkpoint in
/// `save_to` at once, so a long training is not lost if what follows fails or is stopped.
fn model_from(
    source: &ModelSource,
    train_raw: &Dataset,
    limit: Option<usize>,
    save_to: &Path,
    device: &Device,
    quiet: bool,
) -> Result<Evaluated> {
    if let Some(ck) = &source.checkpoint {
        let c = load_checkpoint(ck, device)?;
        if c.config.item_shape != train_raw.item_shape() {
            bail!(
                "{}: the checkpoint expects items {:?}, the data has {:?}",
                ck.display(),
                c.config.item_shape,
                train_raw.item_shape()
            );
        }
        return Ok(Evaluated {
            model: c.model,
            params: c.params,
            arch: c.config.arch,
            norm: c.config.normalizer,
        });
    }
    let norm = Normalizer::fit(train_raw);
    let train_ds = norm.apply(train_raw)?;
    let arch = arch_for(source.model, &train_ds);
    let params = TrainConfig {
        steps: source.steps,
        batch_size: source
            .batch_size
            .unwrap_or(if source.model == ModelArg::Duq {
                128
            } else {
                32
            }),
        ..TrainConfig::default()
    }
    .validate()?;
    let ids: Vec<usize> = (0..limit.unwrap_or(train_ds.len()).min(train_ds.len())).collect();
    let mut bars = Bars::new(quiet, 1);
    let trained = train(
        &arch,
        &train_ds,
        &ids,
        &params,
        TrainRngs::for_cycle(source.seed, 0),
        device,
        &mut bars,
    )?;
    bars.finish();
    let classes = (0..train_ds.classes()).map(|c| c.to_string()).collect();
    alkit::checkpoint::save(
        save_to,
        &arch,
        &trained.params,
        &norm,
        train_ds.item_shape(),
        classes,
    )
    .with_context(|| format!("writing the checkpoint {}", save_to.display()))?;
    Ok(Evaluated {
        model: trained.model,
        params: trained.params,
        arch,
        norm,
    })
}

impl Evaluated {
    fn scoring<'a>(&'a self, device: &'a Device) -> Scoring<'a> {
        Scoring {
            model: self.model.as_ref(),
            params: Some(&self.params),
            builder: Some(&self.arch),
            input_std: &self.norm.std,
            batch: 512,
            device,
        }
    }
}

fn score_all(
    scoring: &Scoring<'_>,
    ds: &Dataset,
    scorers: &[Arc<dyn Scorer>],
    seed: u64,
) -> Result<Vec<Vec<f32>>> {
    let all: Vec<usize> = (0..ds.len()).collect();
    scorers
        .iter()
        .map(|s| {
            let mut rng = stream(seed, Purpose::Perturb, 0);
            let ev = scoring.evidence(ds, &all, s.needs(), &mut rng, &mut Silent)?;
            Ok(s.score(&ev)?)
        })
        .collect()
}

fn write_figure(out: &Path, stem: &str, fig: &alkit::plot::Figure) -> Result<()> {
    alkit::fsutil::write_atomic(&out.join(format!("{stem}.svg")), fig.to_svg().as_bytes())?;
    alkit::fsutil::write_atomic(&out.join(format!("{stem}.png")), &fig.to_png())?;
    Ok(())
}

fn ood_cmd(a: OodArgs, device: &Device, quiet: bool) -> Result<()> {
    use alkit::plot::{Figure, Panel, Series};
    let scorers = scorers_of(&a.scorer, &a.scorer_flags.settings()?)?;
    let id = load(&a.train_data)?;
    let ood = load(&a.ood_data)?;
    if ood.test.item_shape() != id.test.item_shape() {
        bail!(
            "{}: OOD items are {:?}, in-distribution items {:?}",
            a.ood_data.display(),
            ood.test.item_shape(),
            id.test.item_shape()
        );
    }
    let ev = model_from(
        &a.source,
        &id.train,
        None,
        &a.out.join("model"),
        device,
        quiet,
    )?;
    let (id_test, ood_test) = (ev.norm.apply(&id.test)?, ev.norm.apply(&ood.test)?);
    let scoring = ev.scoring(device);
    let id_scores = score_all(&scoring, &id_test, &scorers, a.source.seed)?;
    let ood_scores = score_all(&scoring, &ood_test, &scorers, a.source.seed)?;
    let acc = evaluate(ev.model.as_ref(), &id_test, 512, device, &mut Silent)?.acc;
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let mut json = serde_json::Map::new();
    let mut csv = String::from("scorer,auroc,aupr_in,aupr_out,fpr95\n");
    let mut roc = Panel {
        title: "ROC (OOD positive)".into(),
        x_label: "false positive rate".into(),
        y_label: "true positive rate".into(),
        series: Vec::new(),
    };
    let mut hists = Vec::new();
    let mut so = std::io::stdout().lock();
    writeln!(
        so,
        "in-distribution test accuracy {:.2}% ({} ID, {} OOD items)",
        100.0 * acc,
        id_test.len(),
        ood_test.len()
    )?;
    writeln!(
        so,
        "{:<16} {:>8} {:>8} {:>8} {:>8}",
        "scorer", "AUROC", "AUPR-in", "AUPR-out", "FPR@95"
    )?;
    for (i, s) in scorers.iter().enumerate() {
        let m = alkit::metrics::ood_metrics(&id_scores[i], &ood_scores[i])
            .with_context(|| format!("scorer {}", s.name()))?;
        writeln!(
            so,
            "{:<16} {:>8.4} {:>8.4} {:>8.4} {:>8.4}",
            s.name(),
            m.auroc,
            m.aupr_in,
            m.aupr_out,
            m.fpr95
        )?;
        csv.push_str(&format!(
            "{},{:.6},{:.6},{:.6},{:.6}\n",
            s.name(),
            m.auroc,
            m.aupr_in,
            m.aupr_out,
            m.fpr95
        ));
        json.insert(s.name().to_string(), serde_json::to_value(m)?);
        let all: Vec<f32> = id_scores[i].iter().chain(&ood_scores[i]).copied().collect();
        let is_ood: Vec<bool> = (0..all.len()).map(|k| k >= id_scores[i].len()).collect();
        let pts = alkit::metrics::roc_curve(&all, &is_ood)?;
        roc.series.push(Series {
            name: s.name().into(),
            points: pts,
            band: Vec::new(),
        });
        hists.push(histogram_panel(s.name(), &id_scores[i], &ood_scores[i]));
    }
    alkit::fsutil::write_atomic(&a.out.join("ood.csv"), csv.as_bytes())?;
    alkit::fsutil::write_json(
        &a.out.join("metrics.json"),
        &serde_json::Value::Object(json),
    )?;
    let mut scores_csv = String::from("split,index");
    for s in &scorers {
        scores_csv.push_str(&format!(",{}", s.name()));
    }
    scores_csv.push('\n');
    for (split, cols) in [("id", &id_scores), ("ood", &ood_scores)] {
        for k in 0..cols[0].len() {
            scores_csv.push_str(&format!("{split},{k}"));
            for c in cols.iter() {
                scores_csv.push_str(&format!(",{}", c[k]));
            }
            scores_csv.push('\n');
        }
    }
    alkit::fsutil::write_atomic(&a.out.join("scores.csv"), scores_csv.as_bytes())?;
    write_figure(
        &a.out,
        "roc",
        &Figure {
            panels: vec![roc],
            panel_width: 520,
            height: 420,
        },
    )?;
    write_figure(
        &a.out,
        "hist",
        &Figure {
            panels: hists,
            panel_width: 360,
            height: 300,
        },
    )?;
    writeln!(
        so,
        "wrote {}/ood.csv, metrics.json, scores.csv, roc.svg/png, hist.svg/png",
        a.out.display()
    )?;
    Ok(())
}

/// Score histograms (fraction of items per bin) of in-distribution vs OOD, drawn as steps.
fn histogram_panel(name: &str, id: &[f32], ood: &[f32]) -> alkit::plot::Panel {
    let lo = id.iter().chain(ood).copied().fold(f32::INFINITY, f32::min);
    let hi = id
        .iter()
        .chain(ood)
        .copied()
        .fold(f32::NEG_INFINITY, f32::max);
    let bins = 30;
    let width = f64::from((hi - lo).max(1e-12)) / bins as f64;
    let steps = |v: &[f32]| {
        let mut counts = vec![0usize; bins];
        for &x in v {
            let b = ((f64::from(x - lo) / width) as usize).min(bins - 1);
            counts[b] += 1;
        }
        let mut pts = Vec::new();
        for (b, &c) in counts.iter().enumerate() {
            let y = c as f64 / v.len() as f64;
            pts.push((f64::from(lo) + b as f64 * width, y));
            pts.push((f64::from(lo) + (b + 1) as f64 * width, y));
        }
        pts
    };
    alkit::plot::Panel {
        title: name.into(),
        x_label: "score".into(),
        y_label: "fraction of items".into(),
        series: vec![
            alkit::plot::Series {
                name: "in-dist.".into(),
                points: steps(id),
                band: Vec::new(),
            },
            alkit::plot::Series {
                name: "OOD".into(),
                points: steps(ood),
                band: Vec::new(),
            },
        ],
    }
}

fn calibrate_cmd(a: CalibrateArgs, device: &Device, quiet: bool) -> Result<()> {
    use alkit::metrics::*;
    use alkit::plot::{Figure, Panel, Series};
    let scorers = scorers_of(&a.scorer, &a.scorer_flags.settings()?)?;
    let splits = load(&a.data)?;
    let n_train = splits.train.len();
    let holdout = if a.temperature { n_train / 10 } else { 0 };
    let ev = model_from(
        &a.source,
        &splits.train,
        Some(n_train - holdout),
        &a.out.join("model"),
        device,
        quiet,
    )?;
    let test = ev.norm.apply(&splits.test)?;
    let all: Vec<usize> = (0..test.len()).collect();
    let c = ev.model.classes();
    let mut lp =
        alkit::predict::log_probs_of(ev.model.as_ref(), &test, &all, 512, device, &mut Silent)?;
    let mut temperature = 1.0;
    if a.temperature {
        let train = ev.norm.apply(&splits.train)?;
        let val: Vec<usize> = (n_train - holdout..n_train).collect();
        let vlp = alkit::predict::log_probs_of(
            ev.model.as_ref(),
            &train,
            &val,
            512,
            device,
            &mut Silent,
        )?;
        let labels: Vec<u32> = val.iter().map(|&i| train.labels()[i]).collect();
        temperature = fit_temperature(&vlp, c, &labels)?;
        for row in lp.chunks_exact_mut(c) {
            let scaled: Vec<f64> = row.iter().map(|&v| f64::from(v) / temperature).collect();
            let m = scaled.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let lse = m + scaled.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
            for (r, v) in row.iter_mut().zip(scaled) {
                *r = (v - lse) as f32;
            }
        }
    }
    let probs = alkit::predict::probs_from_log(&lp, c)?;
    let labels = test.labels();
    let correct: Vec<bool> = probs
        .rows()
        .zip(labels)
        .map(|(r, &y)| {
            r.iter()
                .enumerate()
                .fold(0, |b, (i, &v)| if v > r[b] { i } else { b })
                == y as usize
        })
        .collect();
    let confidence: Vec<f32> = probs
        .rows()
        .map(|r| r.iter().cloned().fold(0.0, f32::max))
        .collect();
    let (ece, mce) = ece_mce(&confidence, &correct)?;
    let (nll, brier) = nll_brier(probs.as_slice(), c, labels)?;
    // Scorers see the (possibly temperature-scaled) model through their own evidence; the
    // probability scorers are recomputed from the scaled probabilities so the two agree.
    let scoring = ev.scoring(device);
    let mut json = serde_json::Map::new();
    let mut so = std::io::stdout().lock();
    let acc = correct.iter().filter(|&&k| k).count() as f64 / correct.len() as f64;
    writeln!(
        so,
        "test accuracy {:.2}%, ECE {ece:.4}, MCE {mce:.4}, NLL {nll:.4}, Brier {brier:.4}{}",
        100.0 * acc,
        if a.temperature {
            format!(", temperature {temperature:.3}")
        } else {
            String::new()
        }
    )?;
    writeln!(
        so,
        "{:<16} {:>8} {:>8} {:>8} {:>8} {:>10}",
        "scorer", "rAULC", "ECE", "NLL", "Brier", "misc.AUROC"
    )?;
    let mut rejection = Panel {
        title: "Rejection-classification".into(),
        x_label: "fraction rejected".into(),
        y_label: "accuracy on retained".into(),
        series: Vec::new(),
    };
    let mut oracle = Vec::new();
    for s in &scorers {
        let scores = if s.needs().grads.is_none() && s.needs().samples.is_none() && a.temperature {
            s.score(&alkit::acquisition::Evidence::from_probs(probs.clone()))?
        } else {
            let mut rng = stream(a.source.seed, Purpose::Perturb, 0);
            s.score(&scoring.evidence(&test, &all, s.needs(), &mut rng, &mut Silent)?)?
        };
        let wrong: Vec<bool> = correct.iter().map(|k| !k).collect();
        let m = CalibrationMetrics {
            raulc: raulc(&scores, &correct).with_context(|| format!("scorer {}", s.name()))?,
            ece,
            mce,
            nll,
            brier,
            misclassification_auroc: auroc(&scores, &wrong)?,
        };
        writeln!(
            so,
            "{:<16} {:>8.4} {:>8.4} {:>8.4} {:>8.4} {:>10.4}",
            s.name(),
            m.raulc,
            m.ece,
            m.nll,
            m.brier,
            m.misclassification_auroc
        )?;
        json.insert(s.name().to_string(), serde_json::to_value(m)?);
        let curve = rejection_curve(&scores, &correct)?;
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
    let bins = reliability(&confidence, &correct, 15)?;
    let used: Vec<&Bin> = bins.iter().filter(|b| b.count > 0).collect();
    let rel = Panel {
        title: "Reliability (15 bins)".into(),
        x_label: "confidence".into(),
        y_label: "accuracy".into(),
        series: vec![
            Series {
                name: "model".into(),
                points: used.iter().map(|b| (b.confidence, b.accuracy)).collect(),
                band: Vec::new(),
            },
            Series {
                name: "perfect".into(),
                points: vec![(0.0, 0.0), (1.0, 1.0)],
                band: Vec::new(),
            },
        ],
    };
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    json.insert("reliability".into(), serde_json::to_value(&bins)?);
    if a.temperature {
        json.insert("temperature".into(), serde_json::json!(temperature));
    }
    alkit::fsutil::write_json(
        &a.out.join("metrics.json"),
        &serde_json::Value::Object(json),
    )?;
    write_figure(
        &a.out,
        "reliability",
        &Figure {
            panels: vec![rel],
            panel_width: 420,
            height: 400,
        },
    )?;
    write_figure(
        &a.out,
        "rejection",
        &Figure {
            panels: vec![rejection],
            panel_width: 520,
            height: 400,
        },
    )?;
    writeln!(
        so,
        "wrote {}/metrics.json, reliability.svg/png, rejection.svg/png",
        a.out.display()
    )?;
    Ok(())
}

fn metrics_cmd(a: MetricsArgs) -> Result<()> {
    let text = std::fs::read_to_string(&a.scores)
        .with_context(|| format!("reading {}", a.scores.display()))?;
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let (_, header) = lines
        .next()
        .with_context(|| format!("{}: empty file", a.scores.display()))?;
    let cols: Vec<&str> = header.split(',').map(str::trim).collect();
    let col = |name: &str| cols.iter().position(|c| *c == name);
    let score_col = col("score")
        .with_context(|| format!("{}: no `score` column in the header", a.scores.display()))?;
    let (ood_col, correct_col, conf_col) = (col("is_ood"), col("correct"), col("confidence"));
    if ood_col.is_none() && correct_col.is_none() {
        bail!(
            "{}: needs an `is_ood` and/or a `correct` column",
            a.scores.display()
        );
    }
    let (mut score, mut is_ood, mut correct, mut conf) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (ln, line) in lines {
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        let get = |c: usize| {
            f.get(c).copied().with_context(|| {
                format!(
                    "{} line {}: missing column {}",
                    a.scores.display(),
                    ln + 1,
                    cols[c]
                )
            })
        };
        let num = |c: usize| -> Result<f32> {
            get(c)?.parse::<f32>().with_context(|| {
                format!(
                    "{} line {}: `{}` is not a number",
                    a.scores.display(),
                    ln + 1,
                    f[c]
                )
            })
        };
        let flag = |c: usize| -> Result<bool> {
            match get(c)? {
                "0" => Ok(false),
                "1" => Ok(true),
                v => bail!(
                    "{} line {}: `{v}` in column {} must be 0 or 1",
                    a.scores.display(),
                    ln + 1,
                    cols[c]
                ),
            }
        };
        score.push(num(score_col)?);
        if let Some(c) = ood_col {
            is_ood.push(flag(c)?);
        }
        if let Some(c) = correct_col {
            correct.push(flag(c)?);
        }
        if let Some(c) = conf_col {
            conf.push(num(c)?);
        }
    }
    let mut out = serde_json::Map::new();
    if ood_col.is_some() {
        let id: Vec<f32> = score
            .iter()
            .zip(&is_ood)
            .filter(|p| !*p.1)
            .map(|p| *p.0)
            .collect();
        let od: Vec<f32> = score
            .iter()
            .zip(&is_ood)
            .filter(|p| *p.1)
            .map(|p| *p.0)
            .collect();
        let m = alkit::metrics::ood_metrics(&id, &od)
            .with_context(|| format!("{}: OOD metrics", a.scores.display()))?;
        out.insert("auroc".into(), serde_json::json!(m.auroc));
        out.insert("aupr_in".into(), serde_json::json!(m.aupr_in));
        out.insert("aupr_out".into(), serde_json::json!(m.aupr_out));
        out.insert("fpr95".into(), serde_json::json!(m.fpr95));
    }
    if correct_col.is_some() {
        let wrong: Vec<bool> = correct.iter().map(|c| !c).collect();
        out.insert(
            "raulc".into(),
            serde_json::json!(alkit::metrics::raulc(&score, &correct)
                .with_context(|| format!("{}: rAULC", a.scores.display()))?),
        );
        out.insert(
            "misclassification_auroc".into(),
            serde_json::json!(alkit::metrics::auroc(&score, &wrong)?),
        );
        if conf_col.is_some() {
            let (ece, mce) = alkit::metrics::ece_mce(&conf, &correct)?;
            out.insert("ece".into(), serde_json::json!(ece));
            out.insert("mce".into(), serde_json::json!(mce));
        }
    }
    let mut so = std::io::stdout().lock();
    if a.json {
        writeln!(so, "{}", serde_json::Value::Object(out))?;
    } else {
        for (k, v) in &out {
            writeln!(so, "{k:<24} {:.6}", v.as_f64().unwrap_or(f64::NAN))?;
        }
    }
    Ok(())
}

fn surface_cmd(a: SurfaceArgs, device: &Device) -> Result<()> {
    use alkit::surface::{moons_surface, SurfaceModel, SurfaceScore, SurfaceSpec};
    if a.dataset != "moons" {
        return Err(alkit::Error::config(
            "dataset",
            format!("`{}` is not available; only `moons`", a.dataset),
        )
        .into());
    }
    let is_duq = matches!(a.model, SurfaceModelArg::Duq);
    let score = match (a.scorer, is_duq) {
        (None | Some(SurfaceScorerArg::Duq), true) => SurfaceScore::MaxProb,
        (Some(SurfaceScorerArg::Duq), false) => {
            return Err(alkit::Error::config("scorer", "duq needs --model duq").into())
        }
        (Some(_), true) => {
            return Err(alkit::Error::config("scorer", "--model duq is scored by duq").into())
        }
        (None | Some(SurfaceScorerArg::Entropy), false) => SurfaceScore::Entropy,
        (Some(SurfaceScorerArg::MaxProb), false) => SurfaceScore::MaxProb,
        (Some(SurfaceScorerArg::ClassVariance), false) => SurfaceScore::ClassVariance,
        (Some(SurfaceScorerArg::Bald), false) => SurfaceScore::Bald,
    };
    let hidden = vec![25, 25, 25];
    let model = match a.model {
        SurfaceModelArg::Duq => SurfaceModel::Duq(alkit::duq::DuqConfig {
            settings: alkit::duq::DuqSettings {
                penalty: match a.penalty {
                    PenaltyArg::TwoSided => alkit::duq::Penalty::TwoSided,
                    PenaltyArg::Squared => alkit::duq::Penalty::Squared,
                    PenaltyArg::OneSided => alkit::duq::Penalty::OneSided,
                    PenaltyArg::None => alkit::duq::Penalty::None,
                },
                ..Default::default()
            },
            ..Default::default()
        }),
        SurfaceModelArg::Mlp => SurfaceModel::Mlp(hidden),
        SurfaceModelArg::McDropout => SurfaceModel::McDropout {
            hidden: vec![25, 25, 25, 25],
            p: 0.205,
            samples: a.mc_samples.max(1),
        },
        SurfaceModelArg::Ensemble => SurfaceModel::Ensemble {
            hidden,
            members: a.members.max(1),
            anchor: None,
        },
        SurfaceModelArg::AnchoredEnsemble => SurfaceModel::Ensemble {
            hidden,
            members: a.members.max(1),
            anchor: Some(a.anchor),
        },
    };
    let mut spec = SurfaceSpec {
        model,
        score,
        points: a.points,
        noise: a.noise,
        steps: a.steps,
        seed: a.seed,
    };
    if a.seeds <= 1 {
        return write_surface(&moons_surface(&spec, device)?, &a.out);
    }
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let mut csv = String::from("seed,accuracy,auroc_far\n");
    let (mut acc, mut far) = (Vec::new(), Vec::new());
    for seed in a.seed..a.seed + a.seeds {
        spec.seed = seed;
        let s = moons_surface(&spec, device)?;
        write_surface(&s, &a.out.join(format!("seed{seed}")))?;
        csv.push_str(&format!("{seed},{},{}\n", s.accuracy, s.auroc_far));
        alkit::fsutil::write_atomic(&a.out.join("seeds.csv"), csv.as_bytes())?;
        acc.push(s.accuracy);
        far.push(s.auroc_far);
    }
    let summary = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let mid = v.len() / 2;
        let median = if v.len() % 2 == 0 {
            (v[mid - 1] + v[mid]) / 2.0
        } else {
            v[mid]
        };
        (median, v[0], v[v.len() - 1])
    };
    let ((am, alo, ahi), (fm, flo, fhi)) = (summary(&mut acc), summary(&mut far));
    writeln!(
        std::io::stdout().lock(),
        "{} seeds ({}..{}): accuracy median {am:.4} (min {alo:.4}, max {ahi:.4}), auroc_far median {fm:.4} (min {flo:.4}, max {fhi:.4}); wrote {}/seeds.csv",
        a.seeds,
        a.seed,
        a.seed + a.seeds - 1,
        a.out.display()
    )?;
    Ok(())
}

/// `surface.png`, `gradient.png` and `metrics.json` of one surface into `out`, and its line.
fn write_surface(s: &alkit::surface::Surface, out: &Path) -> Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let title = format!("{}: uncertainty, auroc_far {:.3}", s.scorer, s.auroc_far);
    let png = alkit::plot::heatmap_png(&s.grid, s.n, s.n, s.extent, &s.train_points, &title);
    alkit::fsutil::write_atomic(&out.join("surface.png"), &png)?;
    let png = alkit::plot::heatmap_png(
        &s.gradient,
        s.n,
        s.n,
        s.extent,
        &s.train_points,
        &format!("{}: |d score / dx|", s.scorer),
    );
    alkit::fsutil::write_atomic(&out.join("gradient.png"), &png)?;
    alkit::fsutil::write_json(&out.join("metrics.json"), s)?;
    let mut so = std::io::stdout().lock();
    writeln!(
        so,
        "{}: accuracy {:.4}, auroc_far {:.4}; wrote {}/surface.png, gradient.png, metrics.json",
        s.scorer,
        s.accuracy,
        s.auroc_far,
        out.display()
    )?;
    Ok(())
}
