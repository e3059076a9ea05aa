//! The `alkit` command line: a thin layer over the library.
//!
//! Parses flags (clap), turns them into the library's validated configs, draws progress with
//! indicatif through the library's `Observer` trait, prints tables, and maps errors to exit
//! codes: 0 success, 1 failure (data, IO, state), 2 bad usage or settings, 130 interrupted.

use alkit::acquire::LoopConfig;
use alkit::acquisition::Scorer;
use alkit::curve::{run_curve, summarize, CurveSpec, SummaryRow};
use alkit::data::stream::Chunk;
use alkit::data::{Dataset, Normalizer, Source, Splits};
use alkit::hub::Hub;
use alkit::models::Arch;
use alkit::predict::Scoring;
use alkit::strategies::{ScorerSettings, SelectKind, StrategyKind};
use alkit::train::TrainConfig;
use anyhow::{bail, Context, Result};
use candle_core::Device;
use clap::Parser;

#[path = "alkit/flags.rs"]
mod flags;
#[path = "alkit/session.rs"]
mod session;
#[path = "alkit/ui.rs"]
mod ui;

use flags::*;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use ui::{Bars, DownloadBar};

fn main() {
    alkit::tune_allocator();
    // A third-party decoder's panic on a malformed file is turned into an error naming the
    // file (alkit::error::contain); only other panics print.
    alkit::error::quiet_contained_panics();
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
        Command::Merge(a) => merge_cmd(a),
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
        Command::Label(a) => session::label(a, &device),
        Command::Status(a) => session::status(a),
        Command::Scorers => {
            let mut so = std::io::stdout().lock();
            for k in StrategyKind::all() {
                writeln!(so, "{:<18} {}", k.name(), k.about())?;
            }
            Ok(())
        }
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
    load_for(dir, None)
}

/// [`load`], read through a checkpoint's preprocessing when it has one (a timm model's resize,
/// crop and channels): what its model takes.
fn load_for(dir: &Path, pre: Option<&alkit::data::image::Preprocess>) -> Result<Splits> {
    let name = dir.to_string_lossy();
    let (source, loaded) = load_source_for(&name, pre)?;
    loaded
        .splits(&source)
        .with_context(|| format!("loading the data {name}"))
}

/// Parses and loads any data source (Hub files through the environment's cache, with a
/// download bar).
fn load_source(name: &str) -> Result<(Source, alkit::data::Loaded)> {
    load_source_for(name, None)
}

/// [`load_source`], read through a checkpoint's preprocessing when one is given.
fn load_source_for(
    name: &str,
    pre: Option<&alkit::data::image::Preprocess>,
) -> Result<(Source, alkit::data::Loaded)> {
    let source = Source::parse(name).with_context(|| format!("data source {name}"))?;
    let (hub, mut bar) = (Hub::from_env(), DownloadBar::default());
    let loaded = match pre {
        Some(p) => alkit::data::stream::load_prepared(&source, &hub, &mut bar, p),
        None => alkit::data::source::load(&source, &hub, &mut bar),
    }
    .with_context(|| format!("loading the data {name}"))?;
    Ok((source, loaded))
}

/// Opens one checkpoint (folder or `hf:` name), or several as an ensemble, with a download
/// bar for Hub files.
fn open_checkpoints(names: &[PathBuf], device: &Device) -> Result<alkit::checkpoint::Checkpoint> {
    let names: Vec<String> = names
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    alkit::checkpoint::open_ensemble(
        &names,
        &Hub::from_env(),
        device,
        &mut DownloadBar::default(),
    )
    .with_context(|| format!("loading the checkpoint {}", names.join(",")))
}

fn curve(a: CurveArgs, device: &Device, quiet: bool) -> Result<()> {
    let (spec, out, resume, cd) = if let Some(dir) = &a.resume {
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
            ("--subsample", a.subsample.is_some()),
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
        (spec, dir.clone(), true, None)
    } else {
        let data = a.data.clone().unwrap_or_else(|| PathBuf::from("data"));
        let out = a.out.clone().unwrap_or_else(|| PathBuf::from("out/curve"));
        alkit::fsutil::check_output_dir("out", &out, &[&data], true)?;
        let cd = curve_data(&data, a.stream)?;
        let seed = a.seed.unwrap_or(0);
        let seeds = a.seeds.unwrap_or(1);
        if seeds == 0 || seeds > alkit::curve::MAX_SEEDS {
            return Err(alkit::Error::config(
                "seeds",
                format!("{seeds} is not in 1..={}", alkit::curve::MAX_SEEDS),
            )
            .into());
        }
        if seed.checked_add(seeds - 1).is_none() {
            return Err(alkit::Error::config(
                "seed",
                format!(
                    "seeds {seed}, {seed}+1, ... would pass the largest seed, {}",
                    u64::MAX
                ),
            )
            .into());
        }
        let defaults = LoopConfig::default();
        let model = Arch::for_shape(
            a.model.unwrap_or(ModelArg::Cnn).kind(),
            &cd.item_shape,
            cd.classes,
        );
        if model.kind().is_duq() && a.anchor.is_some() {
            return Err(alkit::Error::config(
                "anchor",
                "--anchor regularises the softmax models' Adam training; DUQ trains with its own loss",
            )
            .into());
        }
        let lr = lr_for(model.kind(), a.lr)?;
        let batch_size = a.batch_size.unwrap_or(model.kind().default_batch_size());
        let spec = CurveSpec {
            data,
            model: model.with_batch(batch_size),
            strategies: a.scorer.clone().unwrap_or_else(StrategyKind::defaults),
            seeds: (0..seeds).map(|k| seed + k).collect(),
            config: LoopConfig {
                initial: a.initial.unwrap_or(defaults.initial),
                query: a.query.unwrap_or(defaults.query),
                cycles: a.cycles.unwrap_or(defaults.cycles),
                train: TrainConfig {
                    steps: a.steps.unwrap_or(defaults.train.steps),
                    batch_size,
                    lr,
                    anchor: a.anchor,
                },
                batch: alkit::predict::default_batch(cd.item_shape.iter().product()),
                ensemble: a.ensemble.map(|k| k as usize),
                subsample: a.subsample,
            },
            scorers: ScorerSettings {
                members: a.ensemble.is_some(),
                ..a.scorer_flags.settings()?
            },
        };
        if a.force && out.join("run.json").exists() {
            alkit::curve::remove_outputs(&out)
                .with_context(|| format!("--force: clearing {}", out.display()))?;
        }
        (spec, out, false, Some(cd))
    };
    let cd = match cd {
        Some(cd) => cd,
        None => curve_data(&spec.data, a.stream)?,
    };
    let (train, test, norm) = (cd.train.as_ref(), &cd.test, &cd.norm);
    let mut bars = Bars::new(
        quiet,
        spec.seeds.len() * spec.strategies.len() * (spec.config.cycles + 1),
    );
    let result = if a.save_scores {
        let mut saver = alkit::curve::SaveScores::new(out.join("scores"), &mut bars);
        let r = run_curve(
            &spec, train, test, &norm.std, &out, resume, device, &mut saver,
        );
        if let Some(e) = saver.error.take() {
            bars.finish();
            return Err(anyhow::Error::from(e).context("--save-scores"));
        }
        r
    } else {
        run_curve(
            &spec, train, test, &norm.std, &out, resume, device, &mut bars,
        )
    };
    bars.finish();
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

/// What a curve runs on: the normalised splits, the pool in memory or streamed.
struct CurveData {
    train: Box<dyn alkit::data::PoolReader>,
    test: Dataset,
    norm: Normalizer,
    item_shape: Vec<usize>,
    classes: usize,
}

/// Loads `data` for a curve, or with `stream` reads its training split once (labels from the
/// label files or listing, the normaliser from one pass) to stream it during the run.
fn curve_data(data: &Path, stream: bool) -> Result<CurveData> {
    if !stream {
        let splits = load(data)?;
        let norm = Normalizer::fit(&splits.train);
        return Ok(CurveData {
            item_shape: splits.train.item_shape().to_vec(),
            classes: splits.train.classes(),
            train: Box::new(norm.apply(&splits.train)?),
            test: norm.apply(&splits.test)?,
            norm,
        });
    }
    let name = data.to_string_lossy().into_owned();
    let source = Source::parse(&name).with_context(|| format!("data source {name}"))?;
    let s =
        alkit::data::reader::stream_splits(&source, &Hub::from_env(), &mut DownloadBar::default())
            .with_context(|| format!("reading the data {name}"))?;
    Ok(CurveData {
        item_shape: s.train.item_shape().to_vec(),
        classes: s.classes,
        train: Box::new(s.train),
        test: s.test,
        norm: s.normalizer,
    })
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
    let mut inputs = vec![a.data.as_path()];
    inputs.extend(a.indices.as_deref());
    alkit::fsutil::check_output("out", &a.out, &inputs)?;
    let splits = load(&a.data)?;
    let params = TrainConfig {
        steps: a.steps,
        batch_size: a.batch_size.unwrap_or(a.model.kind().default_batch_size()),
        lr: lr_for(a.model.kind(), a.lr)?,
        anchor: None,
    }
    .validate()?;
    let ids = match &a.indices {
        Some(p) => Some(alkit::data::source::read_indices(p, splits.train.len())?),
        None => None,
    };
    let mut bars = Bars::new(quiet, 1);
    let m = alkit::eval::train_checkpoint(
        a.model.kind(),
        &splits,
        ids.as_deref(),
        &params,
        a.seed,
        &a.out,
        device,
        &mut bars,
    );
    bars.finish();
    let m = m.with_context(|| format!("training the checkpoint {}", a.out.display()))?;
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
                    format!("`{k}` picks a whole batch (a strategy for `alkit curve`), it gives no per-item score"),
                ))
            })
        })
        .collect()
}

/// Hands out a pool's chunks in order (`None` at the end).
type NextChunk = Box<dyn FnMut() -> alkit::Result<Option<Chunk>>>;

fn score_cmd(a: ScoreArgs, device: &Device) -> Result<()> {
    use alkit::eval::shard::{self, Shard};
    let settings = ScorerSettings {
        members: a.checkpoint.len() > 1,
        ..a.scorer_flags.settings()?
    };
    // BatchBALD chooses among the best `--candidates` by BALD, which is scored as usual.
    let joint = (settings.select == SelectKind::BatchBald)
        .then(|| alkit::eval::JointPlan::new(&a.scorer, a.top, a.candidates))
        .transpose()?;
    let scorers = match joint {
        Some(_) => scorers_of(
            &a.scorer,
            &ScorerSettings {
                select: SelectKind::TopK,
                ..settings
            },
        )?,
        None => scorers_of(&a.scorer, &settings)?,
    };
    if a.batch == Some(0) || a.chunk == 0 {
        return Err(alkit::Error::config("batch", "--batch and --chunk must be at least 1").into());
    }
    let mut inputs: Vec<&Path> = a.checkpoint.iter().map(PathBuf::as_path).collect();
    inputs.push(&a.data);
    alkit::fsutil::check_output("out", &a.out, &inputs)?;
    let shard = match &a.shard {
        Some(s) => Some(Shard::parse(s)?),
        None => Shard::from_env(&|k| std::env::var(k).ok(), a.shards)?,
    };
    if a.shards.is_some() && a.shard.is_none() && shard.is_none() {
        return Err(alkit::Error::config(
            "shards",
            "--shards N is read with JOB_COMPLETION_INDEX, which is not set; use --shard I/N",
        )
        .into());
    }
    let selection = match joint {
        Some(_) => alkit::acquisition::Selection::TopK,
        None => settings
            .select
            .selection(settings.beta)
            .expect("only batchbald has no per-item selection"),
    };
    if selection.is_stochastic() && a.top.is_none() {
        return Err(alkit::Error::config(
            "select",
            format!(
                "--select {} draws a batch: give its size with --top",
                settings.select.name()
            ),
        )
        .into());
    }
    let noisy = scorers
        .iter()
        .find(|s| alkit::eval::draws_noise(s.as_ref()));
    if let (Some(s), Some(_)) = (noisy, shard) {
        return Err(alkit::Error::config(
            "shard",
            format!(
                "`{}` draws noise per batch, so its scores would depend on the split; shard \
                 deterministic scorers (entropy, margin, regrad, exgrad, an ensemble's bald, ...)",
                s.name()
            ),
        )
        .into());
    }
    let ck = open_checkpoints(&a.checkpoint, device)?;
    let name = a.data.to_string_lossy().into_owned();
    let source = Source::parse(&name).with_context(|| format!("data source {name}"))?;
    // A train split is read in chunks (for scorers that draw no noise); others are loaded
    // whole and scored as one chunk. A checkpoint that prepares its own inputs (a timm
    // model) has every item resized and cropped as it says.
    let pre = ck.config.preprocess;
    let open = |bar: &mut DownloadBar| match &pre {
        Some(p) => alkit::data::stream::open_preprocessed(&source, &Hub::from_env(), bar, p),
        None => alkit::data::stream::open(&source, &Hub::from_env(), bar),
    };
    let streamed = match a.split {
        SplitArg::Train if noisy.is_none() => Some(
            open(&mut DownloadBar::default())
                .with_context(|| format!("loading the data {name}"))?,
        ),
        _ => None,
    };
    let batch = a
        .batch
        .unwrap_or_else(|| alkit::predict::default_batch(ck.config.item_shape.iter().product()));
    let (item_shape, pool, mut next): (Vec<usize>, usize, NextChunk) = match streamed {
        Some(mut st) => {
            // Whole batches per chunk: the batches are then the whole-pool run's.
            let chunk = a.chunk.div_ceil(batch) * batch;
            (
                st.item_shape().to_vec(),
                st.len(),
                Box::new(move || st.next_chunk(chunk)),
            )
        }
        None => {
            let mut st = match a.split {
                SplitArg::Train if pre.is_some() => open(&mut DownloadBar::default())
                    .with_context(|| format!("loading the data {name}"))?,
                _ => {
                    // The split decoded straight through the checkpoint's preprocessing (never
                    // resampled twice).
                    let (_, loaded) = load_source_for(&name, pre.as_ref())?;
                    let items = match a.split {
                        SplitArg::Train => loaded.pool,
                        SplitArg::Test => loaded.test.with_context(|| {
                            format!("{name} has no test split; drop --split test")
                        })?,
                    };
                    alkit::data::stream::in_memory(items)
                }
            };
            let (shape, n) = (st.item_shape().to_vec(), st.len());
            let mut whole = alkit::data::stream::drain(st.as_mut())
                .with_context(|| format!("loading the data {name}"))?;
            (shape, n, Box::new(move || Ok(whole.take())))
        }
    };
    if item_shape != ck.config.item_shape {
        bail!(
            "{name}: items are {:?}, the checkpoint expects {:?}",
            item_shape,
            ck.config.item_shape
        );
    }
    let scoring = Scoring {
        model: ck.model.as_ref(),
        params: Some(&ck.params),
        builder: (a.checkpoint.len() == 1).then_some(&ck.config.arch),
        input_std: &ck.config.normalizer.std,
        batch,
        device,
    };
    let plan = alkit::eval::ChunkPlan {
        scorers: &scorers,
        seed: a.seed,
        normalizer: &ck.config.normalizer,
        item_shape: &item_shape,
        shard,
        selection,
        top: joint.map_or(a.top, |j| Some(j.candidates)),
        draws: joint.is_some(),
    };
    let scored = alkit::eval::score_chunks(&scoring, &plan, &mut next)
        .with_context(|| format!("scoring {name}"))?;
    let names: Vec<&str> = scorers.iter().map(|s| s.name()).collect();
    let joint = joint.map(|j| j.resolve(&scored, a.checkpoint.len(), ck.model.classes(), a.seed));
    let Some(shard) = shard else {
        if let (Some(j), Some(top)) = (joint, a.top) {
            let mut header = vec!["index", "id"];
            header.extend(&names);
            let rows = alkit::eval::joint_rows(&scored, &j, top)?;
            alkit::fsutil::write_csv(&a.out, &header, rows)?;
            return Ok(());
        }
        alkit::eval::write_scores(
            &a.out,
            &scored.indices,
            &scored.ids,
            &names,
            &scored.cols,
            a.top,
            scored.keys.as_deref(),
        )?;
        return Ok(());
    };
    let run = [
        ("data", name.clone()),
        ("split", format!("{:?}", a.split)),
        (
            "checkpoint",
            a.checkpoint
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(","),
        ),
        ("scorers", names.join(",")),
        ("settings", format!("{settings:?}")),
        ("seed", a.seed.to_string()),
        ("batch", batch.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let manifest = shard::Manifest {
        format: 1,
        shard,
        top: plan.top,
        items: scored.count,
        pool,
        run,
        joint,
    };
    shard::write_shard(
        &a.out,
        &manifest,
        &names,
        &scored.indices,
        &scored.ids,
        &scored.cols,
        scored.keys.as_deref().unwrap_or_default(),
        scored.draws.as_ref().map(|d| d.values.as_slice()),
    )?;
    Ok(())
}

fn merge_cmd(a: MergeArgs) -> Result<()> {
    let inputs: Vec<PathBuf> = a
        .shards
        .iter()
        .flat_map(|p| [p.clone(), alkit::eval::shard::manifest_path(p)])
        .collect();
    let refs: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
    alkit::fsutil::check_output("out", &a.out, &refs)?;
    let (header, rows) = alkit::eval::shard::merge(&a.shards, a.top)?;
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    alkit::fsutil::write_csv(&a.out, &header, rows)?;
    Ok(())
}

fn bench_train(a: &BenchArgs, device: &Device) -> Result<()> {
    let splits = load(&a.data)?;
    let norm = Normalizer::fit(&splits.train);
    let ds = norm.apply(&splits.train)?;
    if let Some(flag) = a.scorer_flags.given() {
        return Err(alkit::Error::config(
            "train",
            format!("{flag} sets a scorer, which --train does not run (DUQ's penalty weight is --penalty-weight)"),
        )
        .into());
    }
    let lambda = a.penalty_weight.unwrap_or(0.05);
    let (rate, cfg) = alkit::bench::bench_duq_fm(&ds, lambda, a.steps, a.repeats, device)?;
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
    let splits = load(&a.data)?;
    let norm = Normalizer::fit(&splits.train);
    let model = a.model.kind();
    let (ds, std) = alkit::bench::bench_data(model, &norm.apply(&splits.train)?, &norm.std, a.n)?;
    let cfg = alkit::bench::ScoringBench {
        items: a.n,
        batch: a.batch as usize,
        repeats: a.repeats,
        train_steps: a
            .train_steps
            .unwrap_or(if model.is_resnet() { 10 } else { 200 }),
        ensemble: a.ensemble.map(|k| k as usize),
        model,
    };
    let results = alkit::bench::bench_strategies(&ds, &std, &a.scorer, &settings, &cfg, device)?;
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
            "{}, {} items {:?}, batch {}, median of {} passes, {} thread(s)",
            model.name(),
            a.n,
            ds.item_shape(),
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

impl ModelSource {
    /// The model and the data sets `data` (each with a test split) read for it. A checkpoint is
    /// opened first and the data read through its preprocessing (a timm model's resize and
    /// crop); without one the data are read as stored and a model is trained on the first
    /// one's `train[..limit(n)]` and saved to `save_to`.
    /// Scorers the model cannot serve (`duq` without DUQ, MC dropout without dropout) are
    /// refused before anything trains.
    fn model_and_data(
        &self,
        data: &[&Path],
        scorers: &[Arc<dyn Scorer>],
        limit: impl Fn(usize) -> Option<usize>,
        save_to: &Path,
        device: &Device,
        quiet: bool,
    ) -> Result<(alkit::checkpoint::Checkpoint, Vec<Splits>)> {
        let check = |arch: &Arch| -> Result<()> {
            for s in scorers {
                arch.check_needs(s.name(), &s.needs())?;
            }
            Ok(())
        };
        let Some(c) = &self.checkpoint else {
            let splits = data.iter().map(|d| load(d)).collect::<Result<Vec<_>>>()?;
            check(&Arch::for_data(self.to_lib()?.model, &splits[0].train))?;
            let limit = limit(splits[0].train.len());
            let ck = self.prepare(&splits[0].train, limit, save_to, device, quiet)?;
            return Ok((ck, splits));
        };
        self.to_lib()?;
        let ck = open_checkpoints(std::slice::from_ref(c), device)?;
        check(&ck.config.arch)?;
        let pre = ck.config.preprocess;
        let splits = data
            .iter()
            .map(|d| load_for(d, pre.as_ref()))
            .collect::<Result<Vec<_>>>()?;
        // The first data set's labels are scored against the model's classes; the others
        // (OOD data) only need its item shape, which their evaluation checks.
        for split in [&splits[0].train, &splits[0].test] {
            alkit::eval::check_fits(&ck, &c.to_string_lossy(), split)
                .with_context(|| format!("evaluating on {}", data[0].display()))?;
        }
        Ok((ck, splits))
    }

    /// The checkpoint, or a model trained on `train[..limit]` and saved to `save_to`.
    fn prepare(
        &self,
        train: &Dataset,
        limit: Option<usize>,
        save_to: &Path,
        device: &Device,
        quiet: bool,
    ) -> Result<alkit::checkpoint::Checkpoint> {
        let source = self.to_lib()?;
        let mut bars = Bars::new(quiet, 1);
        let ck = alkit::eval::prepare(
            &source,
            train,
            limit,
            save_to,
            &Hub::from_env(),
            device,
            &mut bars,
        );
        bars.finish();
        ck.with_context(|| match &self.checkpoint {
            Some(c) => format!("loading the checkpoint {}", c.display()),
            None => format!("training the model saved to {}", save_to.display()),
        })
    }
}

fn ood_cmd(a: OodArgs, device: &Device, quiet: bool) -> Result<()> {
    let scorers = scorers_of(&a.scorer, &a.scorer_flags.settings()?)?;
    let mut inputs = vec![a.train_data.as_path(), a.ood_data.as_path()];
    inputs.extend(a.source.checkpoint.as_deref());
    alkit::fsutil::check_output_dir("out", &a.out, &inputs, false)?;
    let (ck, splits) = a.source.model_and_data(
        &[&a.train_data, &a.ood_data],
        &scorers,
        |_| None,
        &a.out.join("model"),
        device,
        quiet,
    )?;
    let (id, ood) = (&splits[0], &splits[1]);
    let norm = &ck.config.normalizer;
    let (id_test, ood_test) = (norm.apply(&id.test)?, norm.apply(&ood.test)?);
    let r = alkit::eval::ood::run(
        &ck,
        &id_test,
        &ood_test,
        &scorers,
        a.source.seed,
        &a.out,
        device,
    )
    .with_context(|| format!("OOD evaluation against {}", a.ood_data.display()))?;
    let mut so = std::io::stdout().lock();
    writeln!(
        so,
        "in-distribution test accuracy {:.2}% ({} ID, {} OOD items)",
        100.0 * r.id_accuracy,
        r.id_items,
        r.ood_items
    )?;
    writeln!(
        so,
        "{:<16} {:>8} {:>8} {:>8} {:>8}",
        "scorer", "AUROC", "AUPR-in", "AUPR-out", "FPR@95"
    )?;
    for (name, m) in &r.rows {
        writeln!(
            so,
            "{name:<16} {:>8.4} {:>8.4} {:>8.4} {:>8.4}",
            m.auroc, m.aupr_in, m.aupr_out, m.fpr95
        )?;
    }
    writeln!(
        so,
        "wrote {}/ood.csv, metrics.json, scores.csv, roc.svg/png, hist.svg/png",
        a.out.display()
    )?;
    Ok(())
}

fn calibrate_cmd(a: CalibrateArgs, device: &Device, quiet: bool) -> Result<()> {
    let scorers = scorers_of(&a.scorer, &a.scorer_flags.settings()?)?;
    let mut inputs = vec![a.data.as_path()];
    inputs.extend(a.source.checkpoint.as_deref());
    alkit::fsutil::check_output_dir("out", &a.out, &inputs, false)?;
    let temperature = a.temperature;
    let holdout_of = |n: usize| if temperature { n / 10 } else { 0 };
    let (ck, splits) = a.source.model_and_data(
        &[&a.data],
        &scorers,
        |n| Some(n - holdout_of(n)),
        &a.out.join("model"),
        device,
        quiet,
    )?;
    let splits = &splits[0];
    let n_train = splits.train.len();
    let holdout = holdout_of(n_train);
    let test = ck.config.normalizer.apply(&splits.test)?;
    let train = ck.config.normalizer.apply(&splits.train)?;
    let val: Vec<usize> = (n_train - holdout..n_train).collect();
    let holdout = a.temperature.then_some(alkit::eval::calibrate::Holdout {
        data: &train,
        val: &val,
    });
    let r =
        alkit::eval::calibrate::run(&ck, &test, holdout, &scorers, a.source.seed, &a.out, device)
            .context("calibration")?;
    let mut so = std::io::stdout().lock();
    writeln!(
        so,
        "test accuracy {:.2}%, ECE {:.4}, MCE {:.4}, NLL {:.4}, Brier {:.4}{}",
        100.0 * r.accuracy,
        r.ece,
        r.mce,
        r.nll,
        r.brier,
        r.temperature
            .map(|t| format!(", temperature {t:.3}"))
            .unwrap_or_default()
    )?;
    writeln!(
        so,
        "{:<16} {:>8} {:>8} {:>8} {:>8} {:>10}",
        "scorer", "rAULC", "ECE", "NLL", "Brier", "misc.AUROC"
    )?;
    for (name, m) in &r.rows {
        writeln!(
            so,
            "{name:<16} {:>8.4} {:>8.4} {:>8.4} {:>8.4} {:>10.4}",
            m.raulc, m.ece, m.nll, m.brier, m.misclassification_auroc
        )?;
    }
    writeln!(
        so,
        "wrote {}/metrics.json, reliability.svg/png, rejection.svg/png",
        a.out.display()
    )?;
    Ok(())
}

fn metrics_cmd(a: MetricsArgs) -> Result<()> {
    let file = alkit::eval::scores_file::ScoresFile::read(&a.scores)?;
    let out = file.metrics()?;
    let mut so = std::io::stdout().lock();
    if a.json {
        writeln!(so, "{}", serde_json::json!(out))?;
    } else {
        for (k, v) in &out {
            writeln!(so, "{k:<24} {v:.6}")?;
        }
    }
    Ok(())
}

fn surface_cmd(a: SurfaceArgs, device: &Device) -> Result<()> {
    use alkit::surface::{moons_surface, SurfaceModel, SurfaceScore, SurfaceSpec};
    alkit::fsutil::check_output_dir("out", &a.out, &[], false)?;
    if a.dataset != "moons" {
        return Err(alkit::Error::config(
            "dataset",
            format!("`{}` is not available; only `moons`", a.dataset),
        )
        .into());
    }
    for (field, v) in [
        ("mc_samples", a.mc_samples as u64),
        ("members", a.members as u64),
        ("seeds", a.seeds),
    ] {
        if v == 0 {
            return Err(alkit::Error::config(field, "must be at least 1").into());
        }
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
            samples: a.mc_samples,
        },
        SurfaceModelArg::Ensemble => SurfaceModel::Ensemble {
            hidden,
            members: a.members,
            anchor: None,
        },
        SurfaceModelArg::AnchoredEnsemble => SurfaceModel::Ensemble {
            hidden,
            members: a.members,
            anchor: Some(a.anchor),
        },
    };
    let spec = SurfaceSpec {
        model,
        score,
        points: a.points,
        noise: a.noise,
        steps: a.steps,
        seed: a.seed,
    };
    spec.validate()?;
    let line = |s: &alkit::surface::Surface, dir: &Path| {
        let _ = writeln!(
            std::io::stdout().lock(),
            "{}: accuracy {:.4}, auroc_far {:.4}; wrote {}/surface.png, gradient.png, metrics.json",
            s.scorer,
            s.accuracy,
            s.auroc_far,
            dir.display()
        );
    };
    if a.seeds == 1 {
        let s = moons_surface(&spec, device)?;
        alkit::surface::write(&s, &a.out)?;
        line(&s, &a.out);
        return Ok(());
    }
    let r = alkit::surface::run_seeds(&spec, a.seed, a.seeds, &a.out, device, &mut |seed, s| {
        line(s, &a.out.join(format!("seed{seed}")))
    })?;
    let mut so = std::io::stdout().lock();
    let (acc, far) = (r.accuracy, r.auroc_far);
    writeln!(
        so,
        "{} seeds ({}..{}): accuracy median {:.4} (min {:.4}, max {:.4}), auroc_far median {:.4} (min {:.4}, max {:.4}); wrote {}/seeds.csv",
        a.seeds,
        a.seed,
        a.seed + a.seeds - 1,
        acc.median,
        acc.min,
        acc.max,
        far.median,
        far.min,
        far.max,
        a.out.display()
    )?;
    Ok(())
}
