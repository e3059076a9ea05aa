//! The `alkit` command line: a thin layer over the library.
//!
//! Parses flags (clap), turns them into the library's validated configs, draws progress with
//! indicatif through the library's `Observer` trait, prints tables, and maps errors to exit
//! codes: 0 success, 1 failure (data, IO, state), 2 bad usage or settings, 130 interrupted.

use alkit::hub::Hub;
use alkit::jobs::curve::{summarize, SummaryRow};
use alkit::strategies::{per_item_scorers, ScorerSettings, StrategyKind};
use anyhow::{bail, Context, Result};
use candle_core::Device;
use clap::Parser;

#[path = "alkit/flags.rs"]
mod flags;
#[path = "alkit/session.rs"]
mod session;
#[path = "alkit/settings.rs"]
mod settings;
#[path = "alkit/ui.rs"]
mod ui;

use flags::*;
use std::io::Write;
use std::path::Path;
use ui::Bars;

fn main() {
    alkit::tune_allocator();
    // A third-party decoder's panic on a malformed file is turned into an error naming the
    // file (alkit::error::contain); only other panics print.
    alkit::error::quiet_contained_panics();
    let cli = Cli::parse();
    ui::catch_ctrl_c();
    let code = match alkit::limits::check_thread_env()
        .map_err(anyhow::Error::from)
        .and_then(|()| dispatch(cli))
    {
        Ok(()) => 0,
        Err(e) if exit_code(&e) == 130 => {
            let _ = writeln!(
                std::io::stderr().lock(),
                "interrupted: {}",
                ui::interrupted_note()
            );
            130
        }
        Err(e) => {
            let _ = writeln!(
                std::io::stderr().lock(),
                "error: {}",
                settings::in_flags(&format!("{e:#}"))
            );
            exit_code(&e)
        }
    };
    std::process::exit(code);
}

/// Refuses `--data data` (every command's default) where no `data` is: the default is the
/// MNIST subset in the repository's data/ folder, which a person outside the clone does not
/// have, and the bare "no such file" would not say so.
fn default_data_is_here(data: &Path) -> Result<()> {
    if data == Path::new("data") && !data.exists() {
        let here = std::env::current_dir().map_or_else(|_| ".".into(), |d| d.display().to_string());
        bail!(
            "--data is `data`, its default: the MNIST subset in the data/ folder of alkit's \
             repository, and {here} has no `data`; run from the repository's root, or give \
             --data DIR (an IDX folder, a folder of images, an embedding file, CSV, Parquet or \
             hf:OWNER/NAME)"
        );
    }
    Ok(())
}

/// 2 for bad settings, 130 when interrupted, 1 otherwise.
fn exit_code(e: &anyhow::Error) -> i32 {
    match e
        .chain()
        .find_map(|c| c.downcast_ref::<alkit::Error>())
        .map(alkit::Error::kind)
    {
        Some(alkit::Error::Config { .. } | alkit::Error::Env { .. }) => 2,
        Some(alkit::Error::Interrupted) => 130,
        _ => 1,
    }
}

fn dispatch(cli: Cli) -> Result<()> {
    let data = match &cli.command {
        Command::Curve(a) if a.resume.is_none() => {
            Some(a.data.as_deref().unwrap_or(Path::new("data")))
        }
        Command::Calibrate(a) => Some(a.data.as_path()),
        Command::Embed(a) => Some(a.data.as_path()),
        Command::Train(a) => Some(a.data.as_path()),
        Command::Score(a) => Some(a.data.as_path()),
        Command::Bench(a) => Some(a.data.as_path()),
        _ => None,
    };
    if let Some(data) = data {
        default_data_is_here(data)?;
    }
    let device = make_device(cli.device)?;
    match cli.command {
        Command::Curve(a) => curve(a, &device, cli.quiet),
        Command::Train(a) => train_cmd(a, &device, cli.quiet),
        Command::Score(a) => score_cmd(a, &device, cli.quiet),
        Command::Embed(a) => embed_cmd(a, &device, cli.quiet),
        Command::Merge(a) => merge_cmd(a),
        Command::Compare(a) => compare_cmd(a),
        Command::Bench(a) => bench_cmd(a, &device, cli.quiet),
        Command::Ood(a) => ood_cmd(a, &device, cli.quiet),
        Command::Calibrate(a) => calibrate_cmd(a, &device, cli.quiet),
        Command::Metrics(a) => metrics_cmd(a),
        Command::Surface(a) => surface_cmd(a, &device),
        Command::Init(a) => session::init(a, &device, cli.quiet),
        Command::Query(a) => {
            let mut bars = Bars::new(cli.quiet, 1);
            let r = session::query(a, &device, &mut bars);
            bars.finish();
            r
        }
        Command::Teach(a) => session::teach(a, cli.quiet),
        Command::Label(a) => session::label(a, &device, cli.quiet),
        Command::ServeLabelStudio(a) => session::serve_label_studio(a, &device, cli.quiet),
        Command::Status(a) => session::status(a),
        Command::Scorers => {
            let mut so = std::io::stdout().lock();
            let last_layer = alkit::strategies::ScorerSettings {
                layers: alkit::strategies::Layers::Last,
                ..Default::default()
            };
            for k in StrategyKind::all() {
                let last = if k.reads_gradients(&last_layer) && k.check_layers(&last_layer).is_ok()
                {
                    format!(
                        " (with --layers last: `{}@last`, over the last layer)",
                        k.name()
                    )
                } else {
                    String::new()
                };
                writeln!(
                    so,
                    "{:<18} {}{last}",
                    k.name(),
                    settings::in_flags(k.about())
                )?;
            }
            Ok(())
        }
    }
}

/// `data` read through the frozen `backbone` (the library's rule: embedded once into the
/// cache folder `cache`, else the default one; a `linear` head unless `model`).
pub(crate) fn on_backbone(
    backbone: &str,
    data: &str,
    cache: Option<&std::path::Path>,
    model: Option<alkit::models::ModelKind>,
    device: &Device,
    quiet: bool,
) -> Result<alkit::jobs::embed::OnBackbone> {
    let job = alkit::jobs::embed::EmbedJob::through(backbone, data);
    let mut bars = Bars::new(quiet, 1);
    let on =
        alkit::jobs::embed::on_backbone(&job, cache, model, &Hub::from_env(), device, &mut bars);
    bars.finish();
    on.with_context(|| format!("embedding {data} through --backbone {backbone}"))
}

fn embed_cmd(a: EmbedArgs, device: &Device, quiet: bool) -> Result<()> {
    let job = alkit::jobs::embed::EmbedJob {
        backbone: a.checkpoint.clone(),
        data: a.data.to_string_lossy().into_owned(),
        batch: a.batch,
        chunk: a.chunk,
    };
    ui::on_interrupt(format!(
        "the items embedded so far are kept beside {}; the same command continues",
        a.out.display()
    ));
    let mut bars = Bars::new(quiet, 1);
    let r = alkit::jobs::embed::run(&job, &a.out, &Hub::from_env(), device, &mut bars);
    bars.finish();
    let e = r?;
    writeln!(
        std::io::stdout().lock(),
        "embedded {} items ({} features each) into {}",
        e.items,
        e.dim,
        e.path.display()
    )?;
    Ok(())
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

/// The train and test splits of the data source `dir` (an IDX folder, an image folder with
/// train/ and test/, or `hf:OWNER/NAME`).
fn load(dir: &Path, quiet: bool) -> Result<alkit::data::Splits> {
    let name = dir.to_string_lossy();
    let mut bars = Bars::new(quiet, 0);
    let splits = alkit::data::source::load_splits(&name, None, &Hub::from_env(), &mut bars);
    bars.finish();
    Ok(splits?)
}

fn curve(a: CurveArgs, device: &Device, quiet: bool) -> Result<()> {
    let multi_label = a.regression.task == Some(alkit::data::Task::MultiLabel);
    if multi_label || a.multi_label.is_multi_label() {
        return multi_label_curve(&a, device, quiet);
    }
    a.multi_label.check_unread()?;
    if a.regression.is_regression() {
        return regression_curve(&a, device, quiet);
    }
    a.regression.check_unread()?;
    let (hub, mut downloads) = (Hub::from_env(), Bars::new(quiet, 0));
    let started = match &a.resume {
        Some(dir) => {
            // clap refuses --backbone beside --resume: the run holds the embedded data.
            alkit::jobs::curve::resume_with(dir, &a.options()?, &hub, &mut downloads)
                .map(|(spec, on)| (spec, on, dir.clone(), true))
        }
        None => {
            let out = a.out.clone().unwrap_or_else(|| "out/curve".into());
            let mut options = a.options()?;
            if let Some(backbone) = &a.backbone {
                let data = options.data.clone().unwrap_or_else(|| "data".into());
                let on = on_backbone(
                    backbone,
                    &data.to_string_lossy(),
                    a.embed_cache.as_deref(),
                    options.model,
                    device,
                    quiet,
                )?;
                options.data = Some(on.data);
                options.model = Some(on.model);
            }
            options
                .start(&out, a.force, &hub, &mut downloads)
                .map(|(spec, on)| (spec, on, out, false))
        }
    };
    downloads.finish();
    let (spec, on, out, resume) = started?;
    let runs = (spec.seeds.len() * spec.strategies.len())
        .saturating_mul(spec.config.cycles.saturating_add(1));
    ui::on_interrupt(format!(
        "every finished cycle is saved in {}; continue with: alkit curve --resume {}",
        out.display(),
        ui::shell_word(&out)
    ));
    let mut bars = Bars::new(quiet, runs);
    let how = alkit::jobs::curve::Execution {
        resume,
        save_scores: a.save_scores,
        jobs: a.jobs.map_or(0, |n| n as usize),
    };
    let states = alkit::jobs::curve::run(&spec, &on, &out, how, device, &mut bars);
    bars.finish();
    let rows = summarize(&states?);
    print_summary(&rows);
    if let Some(rule) = spec.config.stop {
        let budget = spec.config.initial + spec.config.cycles * spec.config.query;
        let spent: Vec<String> = rows
            .iter()
            .map(|r| format!("{} {:.1}", r.strategy, r.final_labels))
            .collect();
        let mut so = std::io::stdout().lock();
        writeln!(
            so,
            "--stop {rule}: labels when the runs ended, mean over seeds (budget {budget}): {}",
            spent.join(", ")
        )?;
    }
    // The outputs this run wrote, as the library names them (the paired plot needs random).
    let wrote: Vec<&str> = alkit::jobs::curve::OUTPUTS
        .into_iter()
        .filter(|f| *f != "run.json" && out.join(f).is_file())
        .collect();
    let mut so = std::io::stdout().lock();
    writeln!(so, "\nwrote {}/{}", out.display(), wrote.join(", "))?;
    Ok(())
}

fn multi_label_curve(a: &CurveArgs, device: &Device, quiet: bool) -> Result<()> {
    let opts = a.multi_label()?;
    let out = a.out.clone().unwrap_or_else(|| "out/curve".into());
    let mut bars = Bars::new(quiet, opts.cycles_total());
    let summary = alkit::jobs::multilabel::run(&opts, &out, a.force, device, &mut bars);
    bars.finish();
    let summary = summary.context("multi-label curve")?;
    let mut so = std::io::stdout().lock();
    writeln!(
        so,
        "{:<20} {:>5}  {:>18}  {:>18}  {:>9}",
        "scorer", "seeds", "mAP (cyc 1..)", "micro F1 (cyc 1..)", "final mAP"
    )?;
    for r in &summary {
        writeln!(
            so,
            "{:<20} {:>5}  {:>8.4} ± {:<7.4}  {:>8.4} ± {:<7.4}  {:>9.4}",
            r.strategy,
            r.seeds,
            r.map_mean,
            r.map_std,
            r.micro_f1_mean,
            r.micro_f1_std,
            r.final_map
        )?;
    }
    let wrote: Vec<&str> = alkit::jobs::multilabel::OUTPUTS
        .into_iter()
        .filter(|f| out.join(f).is_file())
        .collect();
    writeln!(so, "\nwrote {}/{}", out.display(), wrote.join(", "))?;
    Ok(())
}

fn regression_curve(a: &CurveArgs, device: &Device, quiet: bool) -> Result<()> {
    let opts = a.regression()?;
    let out = a.out.clone().unwrap_or_else(|| "out/curve".into());
    let mut bars = Bars::new(quiet, opts.cycles_total());
    let summary = alkit::jobs::regression::run(&opts, &out, a.force, device, &mut bars);
    bars.finish();
    let summary = summary.context("regression curve")?;
    let mut so = std::io::stdout().lock();
    writeln!(
        so,
        "{:<18} {:>5}  {:>20}  {:>18}  {:>10}",
        "scorer", "seeds", "RMSE (cyc 1..)", "NLL (cyc 1..)", "final RMSE"
    )?;
    for r in &summary {
        writeln!(
            so,
            "{:<18} {:>5}  {:>11.4} ± {:<6.4}  {:>10.4} ± {:<5.3}  {:>10.4}",
            r.strategy, r.seeds, r.rmse_mean, r.rmse_std, r.nll_mean, r.nll_std, r.final_rmse
        )?;
    }
    writeln!(
        so,
        "\nwrote {}/curve.csv, summary.csv, curve.svg, curve.png",
        out.display()
    )?;
    Ok(())
}

fn bench_gauss(a: &BenchArgs, device: &Device) -> Result<()> {
    if a.penalty_weight.is_some() {
        anyhow::bail!("--penalty-weight is DUQ's; --train mlp-gauss has none");
    }
    let passes = a.scorer_settings.checked()?.mc_samples;
    let batch = a.batch.map_or(256, |b| b as usize);
    let r = alkit::jobs::bench::gauss((a.n, 64), (batch, a.steps, passes), a.repeats, device)?;
    let mut so = std::io::stdout().lock();
    if a.json {
        writeln!(
            so,
            "{}",
            serde_json::json!({
                "mlp-gauss-train": (r.train_rows_per_s * 10.0).round() / 10.0,
                "mlp-gauss-score": (r.score_rows_per_s * 10.0).round() / 10.0,
            })
        )?;
    } else {
        writeln!(
            so,
            "mlp-gauss on {} x {} rows, {} thread(s): training {:.0} rows/s (batch {}, {} steps), scoring by variance over {} MC-dropout passes {:.0} rows/s (medians of {})",
            r.rows, r.dim, rayon::current_num_threads(), r.train_rows_per_s, r.batch, r.steps, r.passes, r.score_rows_per_s, a.repeats
        )?;
    }
    Ok(())
}

fn multi_label_calibrate(a: &CalibrateArgs, device: &Device, quiet: bool) -> Result<()> {
    let opts = a.multi_label()?;
    let mut bars = Bars::new(quiet, 1);
    let r = alkit::jobs::multilabel::calibrate(&opts, &a.out, device, &mut bars);
    bars.finish();
    let r = r.context("multi-label calibration")?;
    let m = &r.metrics;
    let mut so = std::io::stdout().lock();
    writeln!(
        so,
        "{} test items: mAP {:.4}, micro F1 {:.4}, macro F1 {:.4}, subset accuracy {:.4}, \
         Hamming loss {:.4}, per-label ECE {:.4}",
        r.test_items, m.map, m.micro_f1, m.macro_f1, m.subset_accuracy, m.hamming_loss, m.ece
    )?;
    writeln!(
        so,
        "{:<14} {:>10} {:>8} {:>8}",
        "label", "prevalence", "AP", "ECE"
    )?;
    for l in &r.labels {
        writeln!(
            so,
            "{:<14} {:>10.3} {:>8.4} {:>8.4}",
            l.label, l.prevalence, l.ap, l.ece
        )?;
    }
    if let Some(c) = &r.conformal {
        for l in &c.lac {
            writeln!(
                so,
                "conformal lac {} alpha {}: coverage {:.3}, both answers {:.3} on {} items",
                l.label, c.alpha, l.coverage, l.both, c.evaluation
            )?;
        }
        let rc = &c.recall;
        writeln!(
            so,
            "conformal recall alpha {}: threshold {:.2}, false-negative rate {:.4} on {} items \
             (calibration {:.4}, bound {:.4}), mean set size {:.3}",
            c.alpha,
            rc.lambda,
            rc.evaluation_fnr,
            c.evaluation,
            rc.calibration_fnr,
            rc.bound,
            rc.mean_size
        )?;
    }
    writeln!(so, "\nwrote {}", a.out.join("metrics.json").display())?;
    Ok(())
}

fn regression_calibrate(a: &CalibrateArgs, device: &Device, quiet: bool) -> Result<()> {
    let opts = a.regression()?;
    let mut bars = Bars::new(quiet, 1);
    let r = alkit::jobs::regression::calibrate(&opts, &a.out, device, &mut bars);
    bars.finish();
    let r = r.context("regression calibration")?;
    let mut so = std::io::stdout().lock();
    writeln!(
        so,
        "{:<14} {:>10} {:>10} {:>8} {:>10} {:>8} {:>8} {:>8}",
        "target", "RMSE", "MAE", "NLL", "CRPS", "cov90", "QCE", "AUSE"
    )?;
    for (name, m) in &r.outputs {
        let cov90 = m
            .intervals
            .iter()
            .find(|i| i.level == 0.9)
            .map_or(f64::NAN, |i| i.coverage);
        let ause = m.sparsification.as_ref().map_or(f64::NAN, |s| s.ause);
        writeln!(
            so,
            "{name:<14} {:>10.4} {:>10.4} {:>8.4} {:>10.4} {:>8.3} {:>8.4} {:>8.4}",
            m.rmse, m.mae, m.nll, m.crps, cov90, m.quantile_calibration_error, ause
        )?;
    }
    for c in &r.conformal {
        writeln!(
            so,
            "conformal {:<10} {} alpha {}: coverage {:.3} on {} items, mean width {:.4} (threshold {:.4}, {} calibration items)",
            c.score, c.output, c.alpha, c.coverage, c.evaluation_items, c.width, c.threshold, c.calibration_items
        )?;
    }
    writeln!(
        so,
        "\nwrote {}/metrics.json, calibration.svg, calibration.png",
        a.out.display()
    )?;
    Ok(())
}

fn print_summary(rows: &[SummaryRow]) {
    let mut so = std::io::stdout().lock();
    let _ = writeln!(
        so,
        "{:<18} {:>5}  {:>18}  {:>18}  {:>10}  {:>16}  against random",
        "scorer", "seeds", "ACC % (cyc 1..)", "NLL (cyc 1..)", "final ACC%", "AUBC % (95% CI)"
    );
    let interval = |i: alkit::metrics::stats::Interval| {
        if i.lo.is_nan() {
            String::new()
        } else {
            format!("[{:.1}, {:.1}]", 100.0 * i.lo, 100.0 * i.hi)
        }
    };
    for r in rows {
        let versus = match r.vs_random {
            Some(c) => format!(
                "{} ({:+.2} pts, p = {:.3})",
                r.verdict.words(),
                100.0 * c.diff,
                c.p
            ),
            None => r.verdict.words().to_string(),
        };
        let _ = writeln!(
            so,
            "{:<18} {:>5}  {:>10.2} ± {:<5.2}  {:>10.4} ± {:<5.3}  {:>10.2}  {:>6.2} {:<12}  {}",
            r.strategy,
            r.seeds,
            100.0 * r.acc_mean,
            100.0 * r.acc_std,
            r.nll_mean,
            r.nll_std,
            100.0 * r.final_acc,
            100.0 * r.aubc.mean,
            interval(r.aubc),
            versus
        );
    }
}

fn train_cmd(a: TrainArgs, device: &Device, quiet: bool) -> Result<()> {
    let mut inputs = vec![a.data.as_path()];
    inputs.extend(a.indices.as_deref());
    alkit::output::check_output("out", &a.out, &inputs)?;
    let kind = a.model;
    let params = kind
        .train_config(a.steps, a.batch_size, a.lr, None)?
        .validate()?;
    let splits = load(&a.data, quiet)?;
    let ids = match &a.indices {
        Some(p) => Some(alkit::data::source::read_indices(p, splits.train.len())?),
        None => None,
    };
    let mut bars = Bars::new(quiet, 1);
    let m = alkit::jobs::train::run(
        kind,
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

fn score_cmd(a: ScoreArgs, device: &Device, quiet: bool) -> Result<()> {
    let job = a.job()?;
    let mut bars = Bars::new(quiet, 0);
    let r = alkit::jobs::score::run(&job, &Hub::from_env(), device, &mut bars);
    bars.finish();
    r?;
    Ok(())
}

fn merge_cmd(a: MergeArgs) -> Result<()> {
    let inputs: Vec<std::path::PathBuf> = a
        .shards
        .iter()
        .flat_map(|p| [p.clone(), alkit::jobs::shard::manifest_path(p)])
        .collect();
    let refs: Vec<&Path> = inputs.iter().map(|p| p.as_path()).collect();
    alkit::output::check_output("out", &a.out, &refs)?;
    let (header, rows) = alkit::jobs::merge::run(&a.shards, a.top)?;
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    alkit::output::write_csv(&a.out, &header, rows)?;
    Ok(())
}

fn compare_cmd(a: CompareArgs) -> Result<()> {
    let inputs: Vec<&Path> = a.runs.iter().map(|p| p.as_path()).collect();
    alkit::output::check_output_dir("out", &a.out, &inputs, false)?;
    let c = alkit::jobs::compare::run(&a.runs)?;
    alkit::jobs::compare::write(&c, &a.out)?;
    let mut so = std::io::stdout().lock();
    let width = c
        .strategies
        .iter()
        .map(String::len)
        .max()
        .unwrap_or(8)
        .max(8);
    write!(so, "{:<width$} {:>9}", "strategy", "mean rank")?;
    for (name, _) in &c.datasets {
        write!(so, " {:>12}", name)?;
    }
    writeln!(so)?;
    let mut order: Vec<usize> = (0..c.strategies.len()).collect();
    order.sort_by(|&x, &y| c.friedman.mean_ranks[x].total_cmp(&c.friedman.mean_ranks[y]));
    for s in order {
        write!(
            so,
            "{:<width$} {:>9.2}",
            c.strategies[s], c.friedman.mean_ranks[s]
        )?;
        for d in &c.aubc {
            write!(so, " {:>12.4}", d[s])?;
        }
        writeln!(so, "{}", if c.near_best(s) { "  *" } else { "" })?;
    }
    writeln!(
        so,
        "\n{} strategies over {} data sets (AUBC per data set); Friedman chi2 = {:.3}, p = {:.4}; \
         Nemenyi critical difference (5%) = {:.3}: * marks a mean rank within it of the best",
        c.strategies.len(),
        c.datasets.len(),
        c.friedman.chi2,
        c.friedman.p,
        c.critical_difference
    )?;
    if !c.left_out.is_empty() {
        writeln!(
            so,
            "left out (not run on every data set): {}",
            c.left_out.join(", ")
        )?;
    }
    writeln!(
        so,
        "wrote {}/compare.csv, compare.json, compare-cd.svg, compare-cd.png",
        a.out.display()
    )?;
    Ok(())
}

fn bench_train(a: &BenchArgs, device: &Device, quiet: bool) -> Result<()> {
    if matches!(a.train, Some(flags::TrainBench::MlpGauss)) {
        return bench_gauss(a, device);
    }
    if let Some(setting) = a.scorer_settings.first_given() {
        return Err(alkit::Error::config(
            "train",
            format!("setting `{setting}` is a scorer's, which --train does not run (DUQ's penalty weight is --penalty-weight)"),
        )
        .into());
    }
    let lambda = a
        .penalty_weight
        .unwrap_or(alkit::duq::DuqSettings::default().lambda);
    let splits = load(&a.data, quiet)?;
    let (rate, cfg) =
        alkit::jobs::bench::duq_fm(&splits.train, lambda, a.steps, a.repeats, device)?;
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

/// `alkit bench --checkpoint`: whole `score` runs into a scratch folder of its own, timed.
fn bench_score(a: &BenchArgs, checkpoint: &str, device: &Device) -> Result<()> {
    // A folder made here, never one that was there: it is removed afterwards.
    let scratch = (0..100)
        .map(|k| std::env::temp_dir().join(format!("alkit-bench-{}-{k}", std::process::id())))
        .find(|p| std::fs::create_dir(p).is_ok())
        .with_context(|| {
            format!(
                "creating a scratch folder in {}",
                std::env::temp_dir().display()
            )
        })?;
    let job = alkit::jobs::score::ScoreJob {
        checkpoints: vec![checkpoint.to_string()],
        checkpoint_options: Default::default(),
        data: a.data.to_string_lossy().into_owned(),
        split: alkit::jobs::score::Split::Train,
        scorers: a.scorer.clone(),
        settings: a.scorer_settings.checked()?,
        top: None,
        candidates: None,
        batch: a.batch.map(|b| b as usize),
        chunk: alkit::jobs::score::DEFAULT_CHUNK,
        seed: 0,
        shard: None,
        out: scratch.join("scores.csv"),
    };
    let timed = alkit::jobs::bench::score_job(&job, a.repeats, &Hub::from_env(), device);
    let _ = std::fs::remove_dir_all(&scratch);
    let timed = timed?;
    let mut so = std::io::stdout().lock();
    let names: Vec<&str> = a.scorer.iter().map(|s| s.name()).collect();
    let names = names.join(",");
    if a.json {
        let round = |s: f64| (s * 1e4).round() / 1e4;
        writeln!(
            so,
            "{}",
            serde_json::json!({
                "scorers": names,
                "items": timed.items,
                "items_per_s": (timed.items_per_s * 10.0).round() / 10.0,
                "first_s": round(timed.first_s),
                "passes_s": timed.passes_s.iter().map(|&s| round(s)).collect::<Vec<_>>(),
            })
        )?;
    } else {
        writeln!(
            so,
            "alkit score end to end: {checkpoint} on {}, {} items, scorers {names}, median of {} runs after a first, {} thread(s)",
            a.data.display(),
            timed.items,
            a.repeats,
            rayon::current_num_threads()
        )?;
        writeln!(so, "{:<18} {:>10.3} s", "first run", timed.first_s)?;
        writeln!(
            so,
            "{:<18} {:>10.1} items/s",
            "median run", timed.items_per_s
        )?;
    }
    Ok(())
}

fn bench_cmd(a: BenchArgs, device: &Device, quiet: bool) -> Result<()> {
    if let Some(checkpoint) = &a.checkpoint {
        return bench_score(&a, checkpoint, device);
    }
    if a.train.is_some() {
        return bench_train(&a, device, quiet);
    }
    let batch = a.batch.unwrap_or(256);
    if batch < 256 {
        return Err(alkit::Error::config(
            "batch",
            "the built-in models are timed with batches of at least 256 (--batch); with --checkpoint any size goes",
        )
        .into());
    }
    let settings = ScorerSettings {
        members: a.ensemble.is_some(),
        ..a.scorer_settings.checked()?
    };
    let model = a.model;
    let cfg = alkit::jobs::bench::ScoringBench {
        items: a.n,
        batch: batch as usize,
        repeats: a.repeats,
        train_steps: a
            .train_steps
            .unwrap_or(if model.is_resnet() { 10 } else { 200 }),
        ensemble: a.ensemble.map(|k| k as usize),
        model,
    };
    let splits = load(&a.data, quiet)?;
    let timed = alkit::jobs::bench::strategies(&splits.train, &a.scorer, &settings, &cfg, device)?;
    let mut so = std::io::stdout().lock();
    if a.json {
        let obj: serde_json::Map<String, serde_json::Value> = timed
            .results
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
            timed.item_shape,
            batch,
            a.repeats,
            rayon::current_num_threads()
        )?;
        for r in &timed.results {
            writeln!(so, "{:<18} {:>10.0} samples/s", r.scorer, r.samples_per_s)?;
        }
    }
    Ok(())
}

fn ood_cmd(a: OodArgs, device: &Device, quiet: bool) -> Result<()> {
    let scorers = per_item_scorers(&a.scorer, &a.scorer_settings.checked()?)?;
    let source = a.source.to_lib()?.caching_statistics();
    let mut bars = Bars::new(quiet, 1);
    let r = alkit::jobs::ood::run(
        &source,
        &a.train_data.to_string_lossy(),
        &a.ood_data.to_string_lossy(),
        &scorers,
        &a.out,
        &Hub::from_env(),
        device,
        &mut bars,
    );
    bars.finish();
    let r = r?;
    let mut so = std::io::stdout().lock();
    let (id, ood) = (r.id_items, r.ood_items);
    match (r.id_accuracy, &r.accuracy_note) {
        (Some(acc), _) => writeln!(
            so,
            "in-distribution test accuracy {:.2}% ({id} ID, {ood} OOD items)",
            100.0 * acc
        )?,
        (None, note) => writeln!(
            so,
            "in-distribution test accuracy not measured ({id} ID, {ood} OOD items): {}",
            note.as_deref().unwrap_or("no labels")
        )?,
    }
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
    let multi_label = a.regression.task == Some(alkit::data::Task::MultiLabel);
    if multi_label || a.multi_label.is_multi_label() {
        return multi_label_calibrate(&a, device, quiet);
    }
    a.multi_label.check_unread()?;
    if a.regression.is_regression() {
        return regression_calibrate(&a, device, quiet);
    }
    if a.ensemble.is_some() {
        anyhow::bail!("--ensemble trains Gaussian heads of a regression calibration (--target)");
    }
    a.regression.check_unread()?;
    let scorers = per_item_scorers(&a.scorer, &a.scorer_settings.checked()?)?;
    let source = a.source.to_lib()?.caching_statistics();
    let mut bars = Bars::new(quiet, 1);
    let r = alkit::jobs::calibrate::run(
        &source,
        &a.data.to_string_lossy(),
        a.temperature,
        a.conformal,
        &scorers,
        &a.out,
        &Hub::from_env(),
        device,
        &mut bars,
    );
    bars.finish();
    let r = r?;
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
    if let Some(first) = r.conformal.first() {
        writeln!(
            so,
            "conformal sets at alpha {} ({} calibration, {} evaluation items of the test split)",
            first.alpha, first.calibration_items, first.evaluation_items
        )?;
        writeln!(
            so,
            "{:<22} {:>10} {:>9} {:>9} {:>16}",
            "score", "threshold", "coverage", "mean size", "worst class cov."
        )?;
        for c in &r.conformal {
            let worst = c
                .per_class
                .iter()
                .filter_map(|k| k.coverage.map(|v| (k.class, v)))
                .min_by(|a, b| a.1.total_cmp(&b.1));
            let (score, threshold) = match &c.thresholds {
                // Mondrian: one threshold per class, in metrics.json.
                Some(_) => (format!("{}/class", c.score), "per class".to_string()),
                None => (
                    c.score.clone(),
                    c.threshold.map_or("inf".to_string(), |t| format!("{t:.4}")),
                ),
            };
            writeln!(
                so,
                "{:<22} {:>10} {:>9.4} {:>9.3} {:>16}",
                score,
                threshold,
                c.coverage,
                c.mean_size,
                worst.map_or("-".to_string(), |(k, v)| format!("{v:.4} (class {k})"))
            )?;
        }
    }
    writeln!(
        so,
        "wrote {}/metrics.json, reliability.svg/png, rejection.svg/png",
        a.out.display()
    )?;
    Ok(())
}

fn metrics_cmd(a: MetricsArgs) -> Result<()> {
    let files = alkit::jobs::scores_file::ScoresFile::read_all(&a.scores)?;
    let mut named = Vec::with_capacity(files.len());
    for (name, file) in &files {
        named.push((name.as_str(), file.metrics()?));
    }
    let mut so = std::io::stdout().lock();
    match (named.as_slice(), a.json) {
        ([(_, one)], true) => writeln!(so, "{}", serde_json::json!(one))?,
        ([(_, one)], false) => {
            for (k, v) in one {
                writeln!(so, "{k:<24} {v:.6}")?;
            }
        }
        (many, true) => {
            let by_name: std::collections::BTreeMap<_, _> = many.iter().cloned().collect();
            writeln!(so, "{}", serde_json::json!(by_name))?;
        }
        (many, false) => {
            let keys: Vec<&str> = many[0].1.keys().copied().collect();
            let head: String = keys.iter().map(|k| format!(" {k:>9}")).collect();
            writeln!(so, "{:<16}{head}", "scorer")?;
            for (name, m) in many {
                let cells: String = keys.iter().map(|k| format!(" {:>9.4}", m[k])).collect();
                writeln!(so, "{name:<16}{cells}")?;
            }
        }
    }
    Ok(())
}

fn surface_cmd(a: SurfaceArgs, device: &Device) -> Result<()> {
    alkit::output::check_output_dir("out", &a.out, &[], false)?;
    let spec = a.spec()?;
    let line = |s: &alkit::jobs::surface::Surface, dir: &Path| {
        let _ = writeln!(
            std::io::stdout().lock(),
            "{}: accuracy {:.4}, auroc_far {:.4}; wrote {}/surface.png, gradient.png, metrics.json",
            s.scorer,
            s.accuracy,
            s.auroc_far,
            dir.display()
        );
    };
    let beside = a.beside_specs()?;
    if a.seeds == 1 {
        let (s, others) = alkit::jobs::surface::run(&spec, &beside, &a.out, device)?;
        line(&s, &a.out);
        for (b, spec) in others.iter().zip(&beside) {
            line(b, &alkit::jobs::surface::beside_dir(&a.out, spec));
        }
        if !others.is_empty() {
            writeln!(
                std::io::stdout().lock(),
                "wrote {}/beside.png",
                a.out.display()
            )?;
        }
        return Ok(());
    }
    let r = alkit::jobs::surface::run_seeds(
        &spec,
        a.settings.seed,
        a.seeds,
        &a.out,
        device,
        &mut |seed, s| line(s, &a.out.join(format!("seed{seed}"))),
    )?;
    let mut so = std::io::stdout().lock();
    let (acc, far) = (r.accuracy, r.auroc_far);
    writeln!(
        so,
        "{} seeds ({}..{}): accuracy median {:.4} (min {:.4}, max {:.4}), auroc_far median {:.4} (min {:.4}, max {:.4}); wrote {}/seeds.csv",
        a.seeds,
        a.settings.seed,
        a.settings.seed.saturating_add(a.seeds - 1),
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
