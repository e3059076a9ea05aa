//! The `alkit` command line: a thin layer over the library.
//!
//! Parses flags (clap), turns them into the library's validated configs, draws progress with
//! indicatif through the library's `Observer` trait, prints tables, and maps errors to exit
//! codes: 0 success, 1 failure (data, IO, state), 2 bad usage or settings, 130 interrupted.

use alkit::acquire::LoopConfig;
use alkit::acquisition::Scorer;
use alkit::bench::bench_scoring;
use alkit::curve::{run_curve, summarize, CurveSpec, ScorerSettings, StrategyKind, SummaryRow};
use alkit::data::{load_idx_dir, Dataset, Normalizer, Splits};
use alkit::nn::{Arch, CnnConfig, MlpConfig};
use alkit::observe::{Control, Event, Observer, Silent};
use alkit::predict::{evaluate, Scoring};
use alkit::rng::{stream, Purpose};
use alkit::train::{train, TrainConfig, TrainRngs};
use anyhow::{bail, Context, Result};
use candle_core::Device;
use clap::{Parser, Subcommand, ValueEnum};
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
    /// Score every item of a split with a checkpoint; one CSV row per item.
    Score(ScoreArgs),
    /// Pool-scoring throughput (samples/s) per scorer with the standard CNN.
    Bench(BenchArgs),
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
        };
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
    /// Comma-separated strategies: entropy, margin, least-confidence, random, regrad-star, regrad, exgrad, negrad, ungrad, gradnorm, exgrad-v, perturb-x, perturb-theta. [default: entropy,margin,least-confidence,random]
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
    /// Output folder. [default: out/curve]
    #[arg(long)]
    out: Option<PathBuf>,
    /// Continue the interrupted run in this folder (settings come from its run.json).
    #[arg(long, conflicts_with = "out")]
    resume: Option<PathBuf>,
    /// Replace an existing run in --out instead of refusing.
    #[arg(long)]
    force: bool,
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
    /// Checkpoint folder to write (model.safetensors + config.json).
    #[arg(long)]
    out: PathBuf,
}

#[derive(clap::Args)]
struct ScoreArgs {
    /// Checkpoint folder (from `alkit train`).
    #[arg(long)]
    checkpoint: PathBuf,
    /// Folder with the four IDX files.
    #[arg(long, default_value = "data")]
    data: PathBuf,
    /// Which split to score.
    #[arg(long, value_enum, default_value_t = SplitArg::Train)]
    split: SplitArg,
    /// Comma-separated scorers: entropy, margin, least-confidence, regrad-star, regrad, exgrad, negrad, ungrad, gradnorm, exgrad-v, perturb-x, perturb-theta.
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
    /// CSV file to write: `index` and one column per scorer.
    #[arg(long)]
    out: PathBuf,
}

#[derive(clap::Args)]
struct BenchArgs {
    /// Folder with the four IDX files (the pool is the train split).
    #[arg(long, default_value = "data")]
    data: PathBuf,
    /// Comma-separated scorers: entropy, margin, least-confidence.
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
}

fn main() {
    tune_allocator();
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

/// Candle allocates and frees large buffers every step; glibc would serve each with a fresh
/// mmap (page faults were ~30% of training time). Keep them in the heap instead.
fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code)]
    // SAFETY: mallopt only changes two allocator thresholds; it is called before any other
    // thread exists and takes no pointers.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}

fn dispatch(cli: Cli) -> Result<()> {
    let device = make_device(cli.device)?;
    match cli.command {
        Command::Curve(a) => curve(a, &device, cli.quiet),
        Command::Train(a) => train_cmd(a, &device, cli.quiet),
        Command::Score(a) => score_cmd(a, &device),
        Command::Bench(a) => bench_cmd(a, &device),
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

fn load(dir: &Path) -> Result<Splits> {
    load_idx_dir(dir).with_context(|| format!("loading the data folder {}", dir.display()))
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
    }
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
                .unwrap_or_else(|| StrategyKind::ALL.to_vec()),
            seeds: (seed..seed + seeds).collect(),
            config: LoopConfig {
                initial: a.initial.unwrap_or(defaults.initial),
                query: a.query.unwrap_or(defaults.query),
                cycles: a.cycles.unwrap_or(defaults.cycles),
                train: TrainConfig {
                    steps: a.steps.unwrap_or(defaults.train.steps),
                    batch_size: a.batch_size.unwrap_or(defaults.train.batch_size),
                    lr: a.lr.unwrap_or(defaults.train.lr),
                },
                batch: defaults.batch,
            },
            scorers: a.scorer_flags.settings()?,
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
    let states = run_curve(
        &spec, &train, &test, &norm.std, &out, resume, device, &mut bars,
    )
    .with_context(|| format!("curve run in {}", out.display()))?;
    bars.finish();
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
    }
    .validate()?;
    let all: Vec<usize> = (0..train_ds.len()).collect();
    let mut bars = Bars::new(quiet, 1);
    let trained = train(
        &arch,
        &train_ds,
        &all,
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

fn scorers_of(kinds: &[StrategyKind], settings: &ScorerSettings) -> Result<Vec<Arc<dyn Scorer>>> {
    kinds
        .iter()
        .map(|k| {
            k.scorer(settings).ok_or_else(|| {
                anyhow::Error::from(alkit::Error::config(
                    "scorer",
                    format!("`{k}` is a selection strategy, not a scorer"),
                ))
            })
        })
        .collect()
}

fn score_cmd(a: ScoreArgs, device: &Device) -> Result<()> {
    let settings = a.scorer_flags.settings()?;
    let scorers = scorers_of(&a.scorer, &settings)?;
    let ck = alkit::checkpoint::load(&a.checkpoint, device)
        .with_context(|| format!("loading the checkpoint {}", a.checkpoint.display()))?;
    let splits = load(&a.data)?;
    let raw = match a.split {
        SplitArg::Train => &splits.train,
        SplitArg::Test => &splits.test,
    };
    if raw.item_shape() != ck.config.item_shape.as_slice() {
        bail!(
            "{}: items are {:?}, the checkpoint expects {:?}",
            a.data.display(),
            raw.item_shape(),
            ck.config.item_shape
        );
    }
    let ds = ck.config.normalizer.apply(raw)?;
    let all: Vec<usize> = (0..ds.len()).collect();
    let scoring = Scoring {
        model: ck.model.as_ref(),
        params: Some(&ck.params),
        builder: Some(&ck.config.arch),
        input_std: &ck.config.normalizer.std,
        batch: 512,
        device,
    };
    let mut cols: Vec<Vec<f32>> = Vec::new();
    for s in &scorers {
        let mut rng = stream(a.seed, Purpose::Perturb, 0);
        let ev = scoring.evidence(&ds, &all, s.needs(), &mut rng, &mut Silent)?;
        cols.push(s.score(&ev)?);
    }
    let mut order = all.clone();
    if let Some(k) = a.top {
        order.sort_by(|&x, &y| cols[0][y].total_cmp(&cols[0][x]).then(x.cmp(&y)));
        order.truncate(k);
    }
    let mut s = String::from("index");
    for sc in &scorers {
        s.push(',');
        s.push_str(sc.name());
    }
    s.push('\n');
    for i in order {
        s.push_str(&i.to_string());
        for c in &cols {
            s.push_str(&format!(",{}", c[i]));
        }
        s.push('\n');
    }
    alkit::fsutil::write_atomic(&a.out, s.as_bytes())?;
    Ok(())
}

fn bench_cmd(a: BenchArgs, device: &Device) -> Result<()> {
    let scorers = scorers_of(&a.scorer, &a.scorer_flags.settings()?)?;
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
    let trained = train(
        &arch,
        &ds,
        &seed_set,
        &params,
        TrainRngs::for_cycle(0, 0),
        device,
        &mut Silent,
    )?;
    let items: Vec<usize> = (0..a.n).map(|i| i % ds.len()).collect();
    let scoring = Scoring {
        model: trained.model.as_ref(),
        params: Some(&trained.params),
        builder: Some(&arch),
        input_std: &norm.std,
        batch: a.batch as usize,
        device,
    };
    let mut results = Vec::new();
    for s in &scorers {
        results.push(bench_scoring(&scoring, &ds, &items, s.as_ref(), a.repeats)?);
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
            Event::CycleFinished { record } => {
                self.overall.inc(1);
                self.overall.set_message(format!("acc {:.3}", record.acc));
            }
            _ => {}
        }
        Control::Continue
    }
}
