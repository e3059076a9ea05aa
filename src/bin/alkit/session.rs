//! `alkit init / query / teach / label / status`: a labeling session kept in a state folder.
//!
//! Each command locks the folder, loads `DIR/session.json`, reloads the pool from the source
//! recorded there, does one thing through [`alkit::session::Learner`] and saves the state
//! atomically; `label` serves the page of [`alkit::serve`] until it is stopped.

use super::Bars;
use alkit::hub::Hub;
use alkit::observe::Observer;
use alkit::serve::{LabelServer, Limits, ServeEvent, ServeSettings};
use alkit::session::{Learner, QueryRequest, SessionLock, SessionOptions};
use alkit::strategies::{ScorerSettings, StrategyKind};
use anyhow::{bail, Result};
use candle_core::Device;
use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(clap::Args)]
pub struct InitArgs {
    /// The pool: a folder of PNG/JPEG images (labeled ones in CLASS/ subfolders), an IDX folder, FILE.safetensors, FILE.npy, FILE.npz, FILE.csv, FILE.parquet or hf:OWNER/NAME.
    #[arg(long)]
    pool: String,
    /// Seed labels: a CSV with columns id,label (label = class name).
    #[arg(long)]
    labels: Option<PathBuf>,
    /// Class names, comma-separated [default: the source's classes].
    #[arg(long, value_delimiter = ',')]
    classes: Option<Vec<String>>,
    /// Session folder to create.
    #[arg(long)]
    state: PathBuf,
    /// Model trained each round [default: cnn for images of at least 10x10, else mlp].
    #[arg(long, value_parser = super::model_kind())]
    model: Option<alkit::models::ModelKind>,
    /// Adam steps per training (from scratch each round).
    #[arg(long, default_value_t = 500)]
    steps: usize,
    /// Mini-batch size. [default: 32; 128 for the DUQ models]
    #[arg(long)]
    batch_size: Option<usize>,
    /// Adam learning rate (softmax models; DUQ trains with SGD at its own schedule). [default: 0.001]
    #[arg(long)]
    lr: Option<f64>,
    /// Seed of every random choice in the session.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Train a deep ensemble of K members every round; sample scorers (bald, ...) and batchbald then read the members' draws.
    #[arg(long, value_name = "K")]
    ensemble: Option<usize>,
    #[command(flatten)]
    stop: super::flags::StopFlag,
    /// Replace an existing session in --state.
    #[arg(long)]
    force: bool,
    /// Read the pool from its source a chunk at a time instead of decoding it into memory (one
    /// pass for the normaliser, the fingerprint and the ids). The classes come from --classes
    /// or an image folder's subfolders; a CSV pool is refused (its label cells need the whole
    /// file).
    #[arg(long)]
    stream: bool,
    /// A frozen backbone (an alkit checkpoint, a weights file with its config.json, or hf:OWNER/NAME): the pool is embedded once through its penultimate layer into --embed-cache (reused while the backbone and the pool's files are unchanged, resumed after a kill), and the session's rounds train only a head on the features (--model, default linear); query and label then read the embedded pool, and the page shows an image folder's own images.
    #[arg(long, value_name = "SRC")]
    backbone: Option<String>,
    /// Folder of the backbone embeddings' cache. [default: $ALKIT_CACHE/embeddings, else $XDG_CACHE_HOME/alkit/embeddings, else ~/.cache/alkit/embeddings]
    #[arg(long, value_name = "DIR", requires = "backbone")]
    embed_cache: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct QueryArgs {
    /// Session folder.
    #[arg(long)]
    state: PathBuf,
    /// Strategy choosing the batch: any of `alkit scorers` (entropy, regrad-star, bald, batchbald, random, ...).
    #[arg(long, default_value = "entropy")]
    scorer: StrategyKind,
    #[command(flatten)]
    scorer_settings: ScorerSettings,
    /// Read the pool from its source a chunk at a time instead of decoding it into memory:
    /// memory then follows the labeled items and one chunk, not the pool. Each command reads
    /// the pool once to check it; a query reads it once more to score (BatchBALD: its
    /// candidates at once, bounded by --subsample).
    #[arg(long)]
    stream: bool,
    /// Items to ask for.
    #[arg(long, default_value_t = 50)]
    n: usize,
    /// Also offer items queried before and not answered yet.
    #[arg(long)]
    include_pending: bool,
    /// Score a seeded random M of the candidates instead of all of them (baal's max_sample); the batch is chosen among those M.
    #[arg(long, value_name = "M")]
    subsample: Option<usize>,
    /// File to write, best first: CSV `id,index,path,score`, or with `--format label-studio`
    /// Label Studio tasks (JSON) plus the matching labeling configuration as OUT.xml.
    #[arg(long)]
    out: PathBuf,
    /// What to write: `csv`, or `label-studio` (a task file to import, with the model's
    /// predictions as pre-annotations; answer there, export JSON, and `teach` it).
    #[arg(long, value_enum, default_value_t = BatchFormat::Csv)]
    format: BatchFormat,
}

/// The format of a query's batch file.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BatchFormat {
    /// `id,index,path,score` rows.
    Csv,
    /// Label Studio's task JSON.
    LabelStudio,
}

#[derive(clap::Args)]
pub struct TeachArgs {
    /// Session folder.
    #[arg(long)]
    state: PathBuf,
    /// Read the pool from its source a chunk at a time instead of decoding it into memory:
    /// memory then follows the labeled items and one chunk, not the pool. Each command reads
    /// the pool once to check it; a query reads it once more to score (BatchBALD: its
    /// candidates at once, bounded by --subsample).
    #[arg(long)]
    stream: bool,
    /// Answers: a CSV (or TSV) with columns id,label (label = class name), or any Label Studio export with choices (JSON, JSON_MIN, CSV, TSV) of tasks `query --format label-studio` wrote, matched by their alkit_id. Checked whole; one bad row changes nothing; an answer an item already has is skipped and counted.
    #[arg(long)]
    labels: PathBuf,
}

/// What a server over a session reads: the session, its strategy and where it listens.
#[derive(clap::Args)]
pub struct ServedFlags {
    /// Session folder (from `alkit init`).
    #[arg(long)]
    state: PathBuf,
    /// Strategy ranking the pool each round: any of `alkit scorers` (`serve-label-studio`: one that scores items one at a time, not batchbald, badge, coreset, typiclust or probcover, which choose a batch jointly).
    #[arg(long, default_value = "entropy")]
    scorer: StrategyKind,
    #[command(flatten)]
    scorer_settings: ScorerSettings,
    /// Read the pool from its source a chunk at a time instead of decoding it into memory:
    /// memory then follows the labeled items and one chunk, not the pool.
    #[arg(long)]
    stream: bool,
    /// Score a seeded random M of the candidates each round instead of all of them.
    #[arg(long, value_name = "M")]
    subsample: Option<usize>,
    /// Address to listen on. Another than the loopback address needs --allow-remote: anyone who can reach it and has the printed URL can label.
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,
    /// Allow --host to be an address other machines can reach.
    #[arg(long)]
    allow_remote: bool,
}

#[derive(clap::Args)]
pub struct LabelArgs {
    #[command(flatten)]
    served: ServedFlags,
    /// Items per batch: the model retrains after each batch.
    #[arg(long, default_value_t = 20)]
    n: usize,
    /// Port [default: a free one].
    #[arg(long, default_value_t = 0, hide_default_value = true)]
    port: u16,
}

#[derive(clap::Args)]
pub struct BackendArgs {
    #[command(flatten)]
    served: ServedFlags,
    /// Retrain after this many new labels (Label Studio's "Start Training" retrains at once).
    #[arg(long, default_value_t = 20)]
    retrain_every: usize,
    /// Top-ranked items recorded as pending in the session after each retraining (`alkit status`).
    #[arg(long, default_value_t = 20)]
    n: usize,
    /// Port (Label Studio's ML backends use 9090 by convention).
    #[arg(long, default_value_t = 9090)]
    port: u16,
    /// Label Studio's address (http://HOST:PORT; else $LABEL_STUDIO_URL), with a user's API token in $LABEL_STUDIO_API_KEY: the backend then reads back, when it starts and on Start Training, the answers given while it was down (Label Studio sends each webhook once).
    #[arg(long, value_name = "URL")]
    label_studio_url: Option<String>,
    /// The Label Studio project to read answers back from [default: the one Label Studio last named in a request].
    #[arg(long)]
    project: Option<u64>,
}

#[derive(clap::Args)]
pub struct StatusArgs {
    /// Session folder.
    #[arg(long)]
    state: PathBuf,
    /// Print session.json's summary as one JSON object.
    #[arg(long)]
    json: bool,
}

/// Locks the session folder `dir` and loads its session (see [`alkit::session::open`]).
fn open(dir: &Path, stream: bool, observer: &mut dyn Observer) -> Result<(SessionLock, Learner)> {
    Ok(alkit::session::open(
        dir,
        stream,
        &Hub::from_env(),
        observer,
    )?)
}

pub fn init(a: InitArgs, device: &Device, quiet: bool) -> Result<()> {
    let hub = Hub::from_env();
    let (pool, embedded_from, model) = match &a.backbone {
        Some(backbone) => {
            let on = super::on_backbone(
                backbone,
                &a.pool,
                a.embed_cache.as_deref(),
                a.model,
                device,
                quiet,
            )?;
            let pool = on.data.to_string_lossy().into_owned();
            (pool, Some(a.pool.clone()), Some(on.model))
        }
        None => (a.pool.clone(), None, a.model),
    };
    let options = SessionOptions {
        pool,
        labels: a.labels,
        classes: a.classes,
        model,
        steps: a.steps,
        batch_size: a.batch_size,
        lr: a.lr,
        seed: a.seed,
        ensemble: a.ensemble,
        stream: a.stream,
        embedded_from,
        stop: a.stop.stop,
    };
    let mut bars = Bars::new(quiet, 0);
    let learner = options.start(&a.state, a.force, &hub, &mut bars);
    bars.finish();
    let st = learner?.state().clone();
    writeln!(
        std::io::stdout().lock(),
        "session in {}: {} items, {} classes, {} labeled",
        a.state.display(),
        st.pool_size,
        st.classes.len(),
        st.labeled.len()
    )?;
    Ok(())
}

pub fn query(a: QueryArgs, device: &Device, observer: &mut dyn Observer) -> Result<()> {
    let format = match a.format {
        BatchFormat::Csv => alkit::session::BatchFormat::Csv,
        BatchFormat::LabelStudio => alkit::session::BatchFormat::LabelStudio,
    };
    alkit::session::check_batch_out(&a.state, &a.out, format)?;
    let (_held, mut learner) = open(&a.state, a.stream, observer)?;
    let settings = ScorerSettings {
        members: learner.state().config.ensemble.is_some(),
        ..a.scorer_settings.checked()?
    };
    let request = QueryRequest {
        strategy: a.scorer.strategy(&settings)?,
        n: a.n,
        include_pending: a.include_pending,
        subsample: a.subsample,
    };
    let batch = learner.query(&request, device, observer)?;
    // The batch file first: if saving the state fails, the same query gives the same batch.
    alkit::label_studio::write_batch(&learner, format, &a.out, &batch, device)?;
    learner.save(&a.state)?;
    let r = learner.state().rounds.last().expect("just queried");
    let mut so = std::io::stdout().lock();
    write!(
        so,
        "round {}: {} items by {} (model trained on {} labels",
        r.round, r.queried, r.scorer, r.labeled
    )?;
    if let Some(acc) = r.test_acc {
        write!(so, ", test accuracy {:.2}%", 100.0 * acc)?;
    }
    writeln!(so, "); wrote {}", a.out.display())?;
    Ok(())
}

pub fn teach(a: TeachArgs, quiet: bool) -> Result<()> {
    let mut bars = Bars::new(quiet, 0);
    let opened = open(&a.state, a.stream, &mut bars);
    bars.finish();
    let (_held, mut learner) = opened?;
    let t = alkit::label_studio::teach_file(&mut learner, &a.labels)?;
    learner.save(&a.state)?;
    let st = learner.state();
    let mut so = std::io::stdout().lock();
    write!(
        so,
        "taught {} labels from {} ({}): {} labeled, {} pending",
        t.taught.taught,
        a.labels.display(),
        t.format.name(),
        st.labeled.len(),
        st.pending.len()
    )?;
    if t.taught.repeated > 0 {
        let r = t.taught.repeated;
        let (noun, verb) = if r == 1 {
            ("answer", "repeats")
        } else {
            ("answers", "repeat")
        };
        write!(so, "; {r} {noun} {verb} a label already taught")?;
    }
    if t.unanswered > 0 {
        let u = t.unanswered;
        let noun = if u == 1 { "task" } else { "tasks" };
        write!(so, "; {u} {noun} of the export had no answer")?;
    }
    writeln!(so)?;
    Ok(())
}

/// What a server over a session starts from: `--host` checked against `--allow-remote`
/// (`what` the server is), the session locked and loaded, and its strategy.
struct Served {
    held: SessionLock,
    learner: Learner,
    strategy: alkit::round::Strategy,
}

fn open_served(f: &ServedFlags, quiet: bool, what: &str) -> Result<Served> {
    let host = f.host;
    if !host.is_loopback() && !f.allow_remote {
        bail!(
            "--host {host}: other machines could reach the {what}; pass --allow-remote to mean it"
        );
    }
    let mut bars = Bars::new(quiet, 0);
    let opened = open(&f.state, f.stream, &mut bars);
    bars.finish();
    let (held, learner) = opened?;
    let settings = ScorerSettings {
        members: learner.state().config.ensemble.is_some(),
        ..f.scorer_settings.checked()?
    };
    let strategy = f.scorer.strategy(&settings)?;
    Ok(Served {
        held,
        learner,
        strategy,
    })
}

pub fn label(a: LabelArgs, device: &Device, quiet: bool) -> Result<()> {
    let Served {
        held,
        learner,
        strategy,
    } = open_served(&a.served, quiet, "page")?;
    if a.n == 0 || a.served.subsample.is_some_and(|m| m < a.n) {
        return Err(alkit::Error::config(
            "n",
            format!(
                "--n {} (--subsample {:?}): a batch needs at least one item, and at most the subsample",
                a.n, a.served.subsample
            ),
        )
        .into());
    }
    let request = QueryRequest {
        strategy,
        n: a.n,
        include_pending: false,
        subsample: a.served.subsample,
    };
    let settings = ServeSettings {
        host: a.served.host,
        port: a.port,
        request,
        device: device.clone(),
        limits: Limits::default(),
    };
    let events: alkit::serve::Events = Arc::new(|e: &ServeEvent<'_>| {
        let mut se = std::io::stderr().lock();
        let _ = match e {
            ServeEvent::Answered { id, label, labeled } => {
                writeln!(se, "answered {id} = {label} ({labeled} labeled)")
            }
            ServeEvent::Queued { id, label, waiting } => writeln!(
                se,
                "answered {id} = {label} while the model trains ({waiting} waiting to be taught)"
            ),
            ServeEvent::TaughtWaiting { taught } => {
                writeln!(se, "taught the {taught} answers given while it trained")
            }
            ServeEvent::Undone { id } => writeln!(se, "took back the answer on {id}"),
            ServeEvent::RoundStarted { round, labeled } => {
                writeln!(se, "round {round}: training on {labeled} labels")
            }
            ServeEvent::RoundFinished {
                round,
                queried,
                test_acc,
                stopping,
            } => match test_acc {
                Some(acc) => writeln!(
                    se,
                    "round {round}: {queried} items to label (test accuracy {:.2}%)",
                    100.0 * acc
                ),
                None => writeln!(se, "round {round}: {queried} items to label"),
            }
            .and_then(|()| log_stopping(&mut se, *round, *stopping)),
            ServeEvent::Exhausted => writeln!(se, "every item is labeled or pending"),
            ServeEvent::Failed { problem } => writeln!(se, "error: {problem}"),
        };
    });
    let server = LabelServer::bind(&a.served.state, held, learner, settings, events)?;
    writeln!(
        std::io::stdout().lock(),
        "labeling page for {}: {}\n(answers are saved as you go; stop with Ctrl-C)",
        a.served.state.display(),
        server.url()
    )?;
    server.run()?;
    Ok(())
}

pub fn serve_label_studio(a: BackendArgs, device: &Device, quiet: bool) -> Result<()> {
    use alkit::serve::backend::{BackendEvent, BackendSettings, LabelStudioBackend};
    let Served {
        held,
        learner,
        strategy,
    } = open_served(&a.served, quiet, "backend")?;
    let request = QueryRequest {
        strategy,
        n: a.n,
        include_pending: true,
        subsample: a.served.subsample,
    };
    let label_studio = label_studio_api(a.label_studio_url.as_deref())?;
    let settings = BackendSettings {
        host: a.served.host,
        port: a.port,
        request,
        retrain_every: a.retrain_every,
        device: device.clone(),
        limits: BackendSettings::limits(),
        label_studio: label_studio.clone(),
        project: a.project,
    };
    let events: alkit::serve::backend::BackendEvents = Arc::new(|e: &BackendEvent<'_>| {
        let mut se = std::io::stderr().lock();
        let _ = match e {
            BackendEvent::Taught {
                task,
                id,
                label,
                repeated: false,
                labeled,
            } => writeln!(se, "task {task}: {id} = {label} ({labeled} labeled)"),
            BackendEvent::Taught {
                task, id, label, ..
            } => writeln!(se, "task {task}: {id} = {label} (already taught)"),
            BackendEvent::Queued { task, waiting } => writeln!(
                se,
                "task {task}: saved, taught when the training ends ({waiting} waiting)"
            ),
            BackendEvent::Refused { problem } => writeln!(se, "refused: {problem}"),
            BackendEvent::RoundStarted { round, labeled } => {
                writeln!(se, "round {round}: training on {labeled} labels")
            }
            BackendEvent::RoundFinished {
                round,
                ranked,
                test_acc,
                stopping,
            } => match test_acc {
                Some(acc) => writeln!(
                    se,
                    "round {round}: the new model ranks {ranked} items (test accuracy {:.2}%)",
                    100.0 * acc
                ),
                None => writeln!(se, "round {round}: the new model ranks {ranked} items"),
            }
            .and_then(|()| log_stopping(&mut se, *round, *stopping)),
            BackendEvent::Failed { problem } => writeln!(se, "error: {problem}"),
            BackendEvent::Reconciled {
                project,
                answers,
                taught,
            } => writeln!(
                se,
                "Label Studio project {project}: {answers} answers read back, {taught} of them new"
            ),
            BackendEvent::Predicted {
                tasks,
                predicted,
                seconds,
            } => writeln!(
                se,
                "predicted {predicted} of {tasks} tasks in {:.1} ms",
                seconds * 1e3
            ),
        };
    });
    let backend = LabelStudioBackend::bind(&a.served.state, held, learner, settings, events)?;
    writeln!(
        std::io::stdout().lock(),
        "Label Studio ML backend for {}\n  model URL: {}\n  (or Basic authentication with the secret in {} as password)\n  model version: {}\nstop with Ctrl-C; every answer is saved as it arrives",
        a.served.state.display(),
        backend.url(),
        a.served.state.join(alkit::serve::backend::SECRET_FILE).display(),
        backend.model_version(),
    )?;
    if label_studio.is_none() {
        writeln!(
            std::io::stderr().lock(),
            "note: without Label Studio's address and an API token (--label-studio-url or \
             LABEL_STUDIO_URL, and LABEL_STUDIO_API_KEY), answers given while this backend is \
             down are not read back; teach them from an export (alkit teach)"
        )?;
    }
    backend.run()?;
    Ok(())
}

/// Label Studio's API from `--label-studio-url` (else `LABEL_STUDIO_URL`) and
/// `LABEL_STUDIO_API_KEY`: both or neither.
fn label_studio_api(url: Option<&str>) -> Result<Option<alkit::serve::backend::LabelStudioApi>> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let url = url.map(str::to_string).or_else(|| var("LABEL_STUDIO_URL"));
    match (url, var("LABEL_STUDIO_API_KEY")) {
        (None, None) => Ok(None),
        (Some(u), Some(t)) => Ok(Some(alkit::serve::backend::LabelStudioApi::new(&u, &t)?)),
        (Some(_), None) => bail!(
            "Label Studio's address is given but no API token: set LABEL_STUDIO_API_KEY to a \
             user's token (Label Studio: Account & Settings)"
        ),
        (None, Some(_)) => bail!(
            "LABEL_STUDIO_API_KEY is set but not Label Studio's address: give \
             --label-studio-url http://HOST:PORT (or set LABEL_STUDIO_URL)"
        ),
    }
}

pub fn status(a: StatusArgs) -> Result<()> {
    let st = alkit::session::SessionState::read(&a.state)?;
    let mut so = std::io::stdout().lock();
    if a.json {
        writeln!(so, "{}", st.summary())?;
        return Ok(());
    }
    writeln!(so, "pool      {} ({} items)", st.source, st.pool_size)?;
    writeln!(
        so,
        "labeled   {} ({} pending, {} unlabeled)",
        st.labeled.len(),
        st.pending.len(),
        st.pool_size - st.labeled.len()
    )?;
    writeln!(so, "rounds    {}", st.rounds.len())?;
    match alkit::session::journal::waiting(&a.state) {
        Ok(w) if w.is_empty() => {}
        Ok(w) => writeln!(
            so,
            "waiting   {} answers given while a model trained (taught when the session \
             opens next: `label`, `query` or `teach`)",
            w.len()
        )?,
        // The one command that reads a session without opening it says what is wrong.
        Err(e) => writeln!(
            so,
            "waiting   unreadable: {e}; fix or delete {} (its answers are then lost)",
            alkit::session::journal::JOURNAL_FILE
        )?,
    }
    writeln!(so, "per class")?;
    for (c, n) in st.per_class() {
        writeln!(so, "  {c:<20} {n}")?;
    }
    writeln!(so, "per round (answers taught after it, by class)")?;
    for (round, counts) in st.per_round() {
        let cells: Vec<String> = counts.iter().map(|(c, n)| format!("{c} {n}")).collect();
        writeln!(so, "  round {round:<4} {}", cells.join(", "))?;
    }
    if let Some(r) = st.rounds.last() {
        let pct = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:.2}%", 100.0 * v));
        writeln!(
            so,
            "last round {}: {} by {}, trained on {} labels, fit accuracy {}, test accuracy {}, test NLL {}",
            r.round,
            r.queried,
            r.scorer,
            r.labeled,
            pct(r.fit_acc),
            pct(r.test_acc),
            r.test_nll.map_or("-".to_string(), |v| format!("{v:.4}"))
        )?;
    }
    if let Some(s) = st.stopping() {
        write_stopping(&mut so, &s)?;
    }
    Ok(())
}

/// The stopping rules' word after a served round, for the server's log: the measures and
/// the rules that say stop, and a line of its own when the session's rule (`init --stop`) does.
fn log_stopping(
    se: &mut impl Write,
    round: usize,
    stopping: Option<&alkit::session::Stopping>,
) -> std::io::Result<()> {
    let Some(s) = stopping.filter(|s| s.round == round) else {
        return Ok(());
    };
    let saying: Vec<&str> = s
        .since
        .iter()
        .filter(|(_, since)| since.is_some())
        .map(|(rule, _)| *rule)
        .collect();
    writeln!(
        se,
        "round {round}: stop set kappa {}, {} changed, uncertainty {:.3}; rules saying stop: {}",
        s.measure
            .kappa
            .map_or("-".to_string(), |k| format!("{k:.4}")),
        s.measure
            .changed
            .map_or("-".to_string(), |c| format!("{:.1}%", 100.0 * c)),
        s.measure.uncertainty,
        if saying.is_empty() {
            "none".to_string()
        } else {
            saying.join(", ")
        }
    )?;
    match (s.rule, s.stop) {
        (Some(rule), true) => writeln!(
            se,
            "round {round}: stop rule {rule} says labeling more has stopped paying"
        ),
        _ => Ok(()),
    }
}

/// The stopping rules' word on a session, for `status`.
fn write_stopping(so: &mut impl Write, s: &alkit::session::Stopping) -> Result<()> {
    let m = &s.measure;
    let pct = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:.1}%", 100.0 * v));
    writeln!(
        so,
        "stopping  round {}: kappa {}, {} of the stop set changed, uncertainty {:.3}",
        s.round,
        m.kappa.map_or("-".to_string(), |k| format!("{k:.4}")),
        pct(m.changed),
        m.uncertainty
    )?;
    for (rule, since) in &s.since {
        let word = since.map_or("go on".to_string(), |r| format!("stop (since round {r})"));
        writeln!(so, "  {rule:<22} {word}")?;
    }
    match (s.rule, s.stop) {
        (Some(rule), true) => writeln!(
            so,
            "stop rule {rule}: labeling more has stopped paying (it says stop since round {})",
            s.since
                .get(rule.name())
                .copied()
                .flatten()
                .unwrap_or(s.round)
        )?,
        (Some(rule), false) => writeln!(so, "stop rule {rule}: keep labeling")?,
        (None, _) => {}
    }
    Ok(())
}
