//! `alkit score` as a library call: one or several checkpoints score a data source's split
//! with per-item scorers and the table (or a shard of it) is written to a file.
//!
//! [`ScoreJob`] holds the settings; [`run`] checks them all before anything is read (the
//! selection, BatchBALD's plan, a shard with noisy scorers, the output against the inputs),
//! opens the model and the data, streams a train split a chunk at a time when the scorers
//! draw no noise (otherwise reads the split whole: their noise depends on the batches), and
//! writes `index,id,<scorer>...` rows, BatchBALD's picks, or a shard and its manifest for
//! [`super::shard::merge`]. Every error says which checkpoint or data source it is about.

use super::shard::{self, Shard};
use crate::data::stream::{Chunk, ItemStream};
use crate::data::Source;
use crate::data::{Dataset, Normalizer};
use crate::error::{Error, Result, ResultExt};
use crate::fsutil::write_csv;
use crate::hub::Hub;
use crate::observe::Observer;
use crate::observe::Silent;
use crate::predict::Scoring;
use crate::rng::{stream, Purpose};
use crate::strategies::{per_item_scorers, ScorerSettings, SelectKind, StrategyKind};
use alkit_acquisition::Scorer;
use alkit_acquisition::Selection;
use candle_core::Device;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Which split of a data source is scored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// The training split: the pool.
    Train,
    /// The test split.
    Test,
}

/// What to score, with what, and where the table goes.
#[derive(Debug, Clone)]
pub struct ScoreJob {
    /// Checkpoint folders, files or `hf:OWNER/NAME[@REV]`; several form an ensemble.
    pub checkpoints: Vec<String>,
    /// How the checkpoints are opened (an ONNX model's features output).
    pub checkpoint_options: crate::checkpoint::OpenOptions,
    /// The data source (a folder, a file or `hf:OWNER/NAME`).
    pub data: String,
    /// Its split to score.
    pub split: Split,
    /// The scorers, one column each; the first ranks.
    pub scorers: Vec<StrategyKind>,
    /// Their settings (`members` is set here from the number of checkpoints).
    pub settings: ScorerSettings,
    /// Keep only the best `top` items (a batch's size for stochastic selections and
    /// BatchBALD).
    pub top: Option<usize>,
    /// BatchBALD's candidates (default ten times `top`).
    pub candidates: Option<usize>,
    /// Inference batch (default [`crate::predict::default_batch`] of the items).
    pub batch: Option<usize>,
    /// At most this many items held at a time from a streamed split (rounded up to whole
    /// batches; read a few batches ahead of the scoring).
    pub chunk: usize,
    /// Seed of the scorers' noise and of the selection's.
    pub seed: u64,
    /// Score only this shard's items (by id) and write a shard file with its manifest.
    pub shard: Option<Shard>,
    /// The CSV file to write.
    pub out: PathBuf,
}

/// Batches read ahead at a time from a streamed pool while the previous ones are scored (at
/// most: a piece is also at most half the chunk).
const READ_AHEAD_BATCHES: usize = 4;

pub use crate::data::stream::DEFAULT_CHUNK;

/// What a [`run`] scored and wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScoreReport {
    /// Items scored (this shard's when sharded).
    pub scored: usize,
    /// Rows written.
    pub rows: usize,
}

/// REGrad*'s perturbed copies of one gradient batch (at most 256 rows, `perturbations + 1`
/// copies each) hold at most [`crate::limits::MAX_BATCH_VALUES`] input values.
fn check_perturbed_batch(
    scorers: &[std::sync::Arc<dyn Scorer>],
    batch: usize,
    item_values: usize,
) -> Result<()> {
    let copies = scorers
        .iter()
        .filter_map(|s| s.needs().grads)
        .map(|g| g.perturbations)
        .max()
        .unwrap_or(0);
    if copies == 0 {
        return Ok(());
    }
    let rows = batch.clamp(1, 256);
    let values = crate::limits::product(&[rows, copies + 1, item_values.max(1)]);
    match values {
        Some(v) if v <= crate::limits::MAX_BATCH_VALUES as u64 => Ok(()),
        _ => Err(Error::config(
            "perturbations",
            format!(
                "{copies} perturbed copies of {rows} items of {item_values} values are more \
                 than the limit of {} input values per batch: at most {} copies at this batch \
                 (a smaller setting `batch` allows more)",
                crate::limits::MAX_BATCH_VALUES,
                (crate::limits::MAX_BATCH_VALUES / rows.saturating_mul(item_values.max(1)))
                    .saturating_sub(1)
            ),
        )),
    }
}

/// The evidence of `items` candidates at once fits in the machine's memory
/// ([`crate::limits::evidence`]); `field` names what sets `items`.
fn check_chunk_evidence(
    scorers: &[std::sync::Arc<dyn Scorer>],
    items: usize,
    classes: usize,
    field: &'static str,
) -> Result<()> {
    let from = format!("setting `{field}`");
    for s in scorers {
        let who = format!("`{}`", s.name());
        crate::limits::evidence(&who, &s.needs(), items, classes, None, None, &from)?;
    }
    Ok(())
}

/// Refuses batch and chunk sizes of 0, and scorers that compare items with the training
/// items' features: scoring a pool reads none.
fn check_pool_scoring(job: &ScoreJob, scorers: &[Arc<dyn Scorer>]) -> Result<()> {
    if job.batch == Some(0) || job.chunk == 0 {
        return Err(Error::config(
            "batch",
            "setting `batch` and setting `chunk` must be at least 1",
        ));
    }
    if job.top == Some(0) {
        return Err(Error::config(
            "top",
            "0 items would be kept: give at least 1, or leave it out to write every item",
        ));
    }
    // Scoring a pool reads no training items, which these compare with.
    if let Some(s) = scorers.iter().find(|s| s.needs().reference) {
        return Err(Error::config(
            "scorer",
            format!(
                "`{}` compares each item with the features of the items the model was trained \
                 on, and scoring a pool reads none: evaluate it against a train split (OOD \
                 detection or calibration)",
                s.name()
            ),
        ));
    }
    Ok(())
}

/// Refuses an output file that would overwrite the job's checkpoint (any file it is read
/// from: an ONNX model's external data beside it too) or data.
fn check_out(job: &ScoreJob, hub: &Hub) -> Result<()> {
    let mut inputs: Vec<PathBuf> = job.checkpoints.iter().map(PathBuf::from).collect();
    for name in job.checkpoints.iter().filter(|n| !n.starts_with("hf:")) {
        // A checkpoint that cannot be listed is refused when it is opened, by name.
        if let Ok(files) = crate::checkpoint::files(name, hub, &mut Silent) {
            inputs.extend(files);
        }
    }
    inputs.push(PathBuf::from(&job.data));
    let inputs: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
    crate::fsutil::check_output("out", &job.out, &inputs)
}

/// The job's checkpoint (several: an ensemble), opened as its options say.
fn open_checkpoint(
    job: &ScoreJob,
    hub: &Hub,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<crate::checkpoint::Checkpoint> {
    crate::checkpoint::open_ensemble_with(
        &job.checkpoints,
        &job.checkpoint_options,
        hub,
        device,
        observer,
    )
    .context_with(|| format!("loading the checkpoint {}", job.checkpoints.join(",")))
}

/// The job's split read whole: a train split through the checkpoint's preprocessing chunk by
/// chunk when it has one, otherwise decoded straight through it (never resampled twice).
fn read_whole(
    job: &ScoreJob,
    source: &Source,
    pre: Option<&crate::data::image::Preprocess>,
    hub: &Hub,
    observer: &mut dyn Observer,
) -> Result<Box<dyn ItemStream>> {
    let name = job.data.as_str();
    if job.split == Split::Train && pre.is_some() {
        return crate::data::source::open(source, hub, observer, pre)
            .context_with(|| format!("loading the data {name}"));
    }
    let (_, loaded) = crate::data::source::load_named(name, pre, hub, observer)?;
    let items = match job.split {
        Split::Train => loaded.pool,
        Split::Test => loaded.test.ok_or_else(|| {
            Error::config(
                "split",
                format!("{name} has no test split; score its pool (split `train`)"),
            )
        })?,
    };
    Ok(crate::data::stream::in_memory(items))
}

/// Refuses items of another shape than the checkpoint takes, naming the data.
fn check_item_shape(ck: &crate::checkpoint::Checkpoint, name: &str, shape: &[usize]) -> Result<()> {
    if shape != ck.config.item_shape {
        return Err(Error::config(
            "checkpoint",
            format!(
                "{name}: items are {shape:?}, the checkpoint expects {:?}",
                ck.config.item_shape
            ),
        ));
    }
    Ok(())
}

/// Hands out a pool's chunks in order (`None` at the end).
type NextChunk = Box<dyn FnMut() -> Result<Option<Chunk>>>;

/// Runs `job`: fetches Hub files through `hub` (reporting downloads to `observer`), scores on
/// `device` and writes `job.out` atomically.
pub fn run(
    job: &ScoreJob,
    hub: &Hub,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<ScoreReport> {
    job.settings.validate()?;
    let settings = ScorerSettings {
        members: job.checkpoints.len() > 1,
        ..job.settings
    };
    // A selector over features (BADGE, core-set, TypiClust, ProbCover) chooses the batch
    // jointly from every item at once.
    if let [kind] = job.scorers.as_slice() {
        if let crate::round::Pick::Batch(b) = kind.build(&settings) {
            if b.needs().features {
                return select_jointly(job, b.as_ref(), hub, device, observer);
            }
        }
    }
    // BatchBALD chooses among the best `candidates` by BALD, which is scored as usual.
    let joint = (settings.select == SelectKind::BatchBald)
        .then(|| JointPlan::new(&job.scorers, job.top, job.candidates))
        .transpose()?;
    let scorers = match joint {
        Some(_) => per_item_scorers(
            &job.scorers,
            &ScorerSettings {
                select: SelectKind::TopK,
                ..settings
            },
        )?,
        None => per_item_scorers(&job.scorers, &settings)?,
    };
    check_pool_scoring(job, &scorers)?;
    check_out(job, hub)?;
    let selection = match (joint, settings.select.selection(settings.beta)) {
        (Some(_), _) => Selection::TopK,
        (None, Some(s)) => s,
        (None, None) => {
            return Err(Error::config(
                "select",
                "batchbald has no per-item selection",
            ))
        }
    };
    if selection.is_stochastic() && job.top.is_none() {
        return Err(Error::config(
            "select",
            format!(
                "selection `{}` draws a batch: give its size (setting `top`)",
                settings.select.name()
            ),
        ));
    }
    let noisy = scorers.iter().find(|s| draws_noise(s.as_ref()));
    if let (Some(s), Some(_)) = (noisy, job.shard) {
        return Err(Error::config(
            "shard",
            format!(
                "`{}` draws noise per batch, so its scores would depend on the split; shard \
                 deterministic scorers (entropy, margin, regrad, exgrad, an ensemble's bald, ...)",
                s.name()
            ),
        ));
    }
    let plan_top = joint.map_or(job.top, |j| Some(j.candidates));
    // Every item's row, unsharded, is written as its chunk is scored: nothing per item is
    // held, so memory stays the chunk's whatever the pool's size.
    let whole_table = plan_top.is_none() && job.shard.is_none();
    let pass = score_split(
        job,
        &scorers,
        noisy.is_some(),
        (selection, plan_top, joint.is_some()),
        whole_table,
        hub,
        device,
        observer,
    )?;
    if whole_table {
        return Ok(ScoreReport {
            scored: pass.scored.count,
            rows: pass.scored.count,
        });
    }
    let Pass {
        scored,
        scorers,
        classes,
        batch,
        pool,
        checkpoint_hash,
    } = pass;
    let names: Vec<&str> = scorers.iter().map(|s| s.name()).collect();
    let joint = joint.map(|j| j.resolve(&scored, job.checkpoints.len(), classes, job.seed));
    // Rows of the table or shard: the kept best `top` (BatchBALD's candidates), else every item.
    let kept = plan_top.map_or(scored.ids.len(), |k| k.min(scored.ids.len()));
    let Some(shard) = job.shard else {
        if let (Some(j), Some(top)) = (joint, job.top) {
            let mut header = vec!["index", "id"];
            header.extend(&names);
            let rows = joint_rows(&scored, &j, top)?;
            let n = rows.len();
            crate::fsutil::write_csv(&job.out, &header, rows)?;
            return Ok(ScoreReport {
                scored: scored.count,
                rows: n,
            });
        }
        write_scores(
            &job.out,
            &scored.indices,
            &scored.ids,
            &names,
            &scored.cols,
            job.top,
            scored.keys.as_deref(),
        )?;
        return Ok(ScoreReport {
            scored: scored.count,
            rows: kept,
        });
    };
    let run = [
        ("data", job.data.clone()),
        ("split", format!("{:?}", job.split)),
        ("checkpoint", job.checkpoints.join(",")),
        ("scorers", names.join(",")),
        ("settings", format!("{settings:?}")),
        ("seed", job.seed.to_string()),
        ("batch", batch.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let manifest = shard::Manifest {
        format: shard::FORMAT,
        shard,
        top: plan_top,
        items: scored.count,
        pool,
        run,
        checkpoint_hash: format!("{:016x}", checkpoint_hash.unwrap_or_default()),
        pool_fingerprint: format!("{:016x}", scored.fingerprint.unwrap_or_default()),
        joint,
    };
    shard::write_shard(
        &job.out,
        &manifest,
        &names,
        &scored.indices,
        &scored.ids,
        &scored.cols,
        scored.keys.as_deref().unwrap_or_default(),
        scored.draws.as_ref().map(|d| d.values.as_slice()),
    )?;
    Ok(ScoreReport {
        scored: scored.count,
        rows: kept,
    })
}

/// Every item's scores, kept in memory rather than written: what [`table`] returns.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScoreTable {
    /// The items' positions in the split, in the split's order.
    pub indices: Vec<usize>,
    /// Their ids.
    pub ids: Vec<String>,
    /// The scorers' names as a table's header gives them (`<name>@last` for last-layer
    /// gradient scores).
    pub names: Vec<String>,
    /// One column per scorer, one score per item: `cols[k][i]` is scorer `k`'s score of item
    /// `i`, the value `run` writes in that cell.
    pub cols: Vec<Vec<f32>>,
}

/// `job` scored as [`run`] scores it, every item of the split kept in memory in the split's
/// order, for a program that wants the numbers rather than a file (`job.out` is not written
/// nor read). A selection of a batch (`top`, a stochastic or BatchBALD selection, a joint
/// selector) and a shard are refused: they choose rows of a file; choose from the scores.
pub fn table(
    job: &ScoreJob,
    hub: &Hub,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<ScoreTable> {
    job.settings.validate()?;
    let settings = ScorerSettings {
        members: job.checkpoints.len() > 1,
        ..job.settings
    };
    let chooses = |what: &str| {
        Error::config(
            "scorer",
            format!("{what} chooses a batch; scoring every item keeps them all (select from the scores afterwards)"),
        )
    };
    if job.top.is_some() {
        return Err(chooses("setting `top`"));
    }
    if job.shard.is_some() {
        return Err(Error::config(
            "shard",
            "a shard is written for a merge; score every item in one call",
        ));
    }
    if settings.select != SelectKind::TopK {
        return Err(chooses(&format!("selection `{}`", settings.select.name())));
    }
    let scorers = per_item_scorers(&job.scorers, &settings)?;
    check_pool_scoring(job, &scorers)?;
    let noisy = scorers.iter().any(|s| draws_noise(s.as_ref()));
    let pass = score_split(
        job,
        &scorers,
        noisy,
        (Selection::TopK, None, false),
        false,
        hub,
        device,
        observer,
    )?;
    Ok(ScoreTable {
        indices: pass.scored.indices,
        ids: pass.scored.ids,
        names: pass.scorers.iter().map(|s| s.name().to_string()).collect(),
        cols: pass.scored.cols,
    })
}

/// What [`score_split`] scored, with what it learned on the way.
struct Pass {
    scored: Scored,
    /// The scorers as the model serves them (`<name>@last` for an ONNX model's gradients).
    scorers: Vec<Arc<dyn Scorer>>,
    classes: usize,
    batch: usize,
    /// Items in the split.
    pool: usize,
    /// The checkpoint's content hash, for a shard's manifest.
    checkpoint_hash: Option<u64>,
}

/// Opens `job`'s checkpoint and data and scores the split with `scorers` (checked by the
/// caller), streamed unless `noisy`, ranking by `selection` and keeping the best `top` (with
/// their draws when `draws`). With `write_table`, every item's row is written to `job.out` as
/// its chunk is scored and none is kept.
#[allow(clippy::too_many_arguments)]
fn score_split(
    job: &ScoreJob,
    scorers: &[Arc<dyn Scorer>],
    noisy: bool,
    (selection, top, draws): (Selection, Option<usize>, bool),
    write_table: bool,
    hub: &Hub,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<Pass> {
    let ck = open_checkpoint(job, hub, device, observer)?;
    // A model without autograd (an ONNX model) is known by its features and last layer: its
    // gradient scores are the last layer's (named `<scorer>@last`). What needs autograd
    // through the network or rebuilding (perturbed-input gradients, weight noise) is refused
    // before any item is read.
    let scorers = super::model::served_scorers(&ck.config.arch, scorers);
    if !ck.config.arch.capabilities().complete() {
        for s in &scorers {
            ck.config.arch.check_needs(s.name(), &s.needs())?;
        }
    }
    let name = job.data.as_str();
    let source = Source::parse(name).context_with(|| format!("data source {name}"))?;
    let loading = || format!("loading the data {name}");
    // A train split is read in chunks (for scorers that draw no noise); others are loaded
    // whole and scored as one chunk. A checkpoint that prepares its own inputs (a timm
    // model) has every item resized and cropped as it says.
    let pre = ck.config.preprocess;
    // Sizes checked before any item is read: a batch runs at exactly its size, so a batch
    // too large is refused, never capped.
    let item_values: usize = ck.config.item_shape.iter().product();
    let batch = job
        .batch
        .unwrap_or_else(|| crate::predict::default_batch(item_values));
    crate::limits::batch("batch", batch, item_values)?;
    check_perturbed_batch(&scorers, batch, item_values)?;
    let open = |observer: &mut dyn Observer| -> Result<Box<dyn ItemStream>> {
        crate::data::source::open(&source, hub, observer, pre.as_ref()).context_with(loading)
    };
    let streamed = match job.split {
        Split::Train if !noisy => Some(open(observer)?),
        _ => None,
    };
    let (item_shape, pool, mut next): (Vec<usize>, usize, NextChunk) = match streamed {
        Some(mut st) => {
            // Whole batches per chunk: the batches are then the whole-pool run's. A chunk
            // past the pool is the pool (one chunk either way).
            let chunk = job.chunk.min(st.len().max(1)).div_ceil(batch) * batch;
            check_chunk_evidence(&scorers, chunk.min(st.len()), ck.model.classes(), "chunk")?;
            let (shape, len) = (st.item_shape().to_vec(), st.len());
            check_item_shape(&ck, name, &shape)?;
            // Read in pieces of whole batches, at most half a chunk each, the next piece
            // decoded on a reading thread while this one is scored: the batches stay the
            // whole-pool run's, even a pool of one chunk has its reading overlapped with its
            // scoring, and the two pieces held at once stay within the chunk. A chunk of one
            // batch is read in place, and so is any pool when this runs on one of rayon's
            // threads (the reader's parallel decoding would wait for the thread it blocks).
            let piece = (chunk / 2 / batch * batch).min(READ_AHEAD_BATCHES * batch);
            let next: NextChunk = if piece > 0 && rayon::current_thread_index().is_none() {
                let mut ahead = crate::data::stream::ReadAhead::new(st, piece)?;
                Box::new(move || ahead.next_chunk())
            } else {
                Box::new(move || st.next_chunk(chunk))
            };
            (shape, len, next)
        }
        None => {
            let mut st = read_whole(job, &source, pre.as_ref(), hub, observer)?;
            let (shape, n) = (st.item_shape().to_vec(), st.len());
            check_chunk_evidence(&scorers, n, ck.model.classes(), "data")?;
            check_item_shape(&ck, name, &shape)?;
            let mut whole = crate::data::stream::drain(st.as_mut()).context_with(loading)?;
            (shape, n, Box::new(move || Ok(whole.take())))
        }
    };
    let scoring = Scoring {
        model: ck.model.as_ref(),
        params: Some(&ck.params),
        builder: (job.checkpoints.len() == 1).then_some(&ck.config.arch),
        input_std: &ck.config.normalizer.std,
        batch,
        device,
        reference: None,
    };
    let plan = ChunkPlan {
        scorers: &scorers,
        seed: job.seed,
        normalizer: &ck.config.normalizer,
        item_shape: &item_shape,
        shard: job.shard,
        selection,
        top,
        draws,
    };
    // A shard's content hashes: the weights' files and, inside `score_chunks`, every item
    // of the split (see `shard::Manifest`).
    let checkpoint_hash = match job.shard {
        Some(_) => Some(
            crate::checkpoint::content_hash(
                &job.checkpoints,
                &job.checkpoint_options,
                hub,
                observer,
            )
            .context_with(|| format!("hashing the checkpoint {}", job.checkpoints.join(",")))?,
        ),
        None => None,
    };
    if job.shard.is_some() {
        // From here the old result is void: a run killed before it writes leaves the shard
        // unfinished (no manifest), never a stale result that looks finished.
        let _ = std::fs::remove_file(shard::manifest_path(&job.out));
    }
    let mut table = match write_table {
        true => {
            let names: Vec<&str> = scorers.iter().map(|s| s.name()).collect();
            Some(crate::fsutil::CsvFile::create(
                &job.out,
                &table_header(&names),
            )?)
        }
        false => None,
    };
    let scored = score_chunks(&scoring, &plan, &mut next, table.as_mut())
        .context_with(|| format!("scoring {name}"))?;
    if let Some(t) = table {
        t.finish()?;
    }
    Ok(Pass {
        scored,
        classes: ck.model.classes(),
        batch,
        pool,
        checkpoint_hash,
        scorers,
    })
}

/// `job` with one feature-space batch selector: the split read whole through the checkpoint
/// (one model), the selector's `top` picks written as rows `index,id,<selector>` in the order
/// chosen, the last column the pick's rank (1 = first). Nothing of the pool is labeled here,
/// so core-set, TypiClust and ProbCover start cold (an empty labeled set); the selection draws
/// from `(seed, Select, 0)`. A joint choice among every item does not shard.
fn select_jointly(
    job: &ScoreJob,
    selector: &dyn alkit_acquisition::BatchSelector,
    hub: &Hub,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<ScoreReport> {
    let name = selector.name();
    let top = job.top.ok_or_else(|| {
        Error::config(
            "top",
            format!("`{name}` chooses a batch jointly: give its size (setting `top`)"),
        )
    })?;
    if job.shard.is_some() {
        return Err(Error::config(
            "shard",
            format!(
                "`{name}` chooses jointly among every item, which no shard sees: run it unsharded \
                 (the per-item scorers shard exactly)"
            ),
        ));
    }
    if job.checkpoints.len() != 1 {
        return Err(Error::config(
            "checkpoint",
            format!("`{name}` reads one model's features; an ensemble has one per member"),
        ));
    }
    if job.batch == Some(0) {
        return Err(Error::config("batch", "must be at least 1"));
    }
    check_out(job, hub)?;
    let ck = open_checkpoint(job, hub, device, observer)?;
    ck.config.arch.check_needs(name, &selector.needs())?;
    let data = job.data.as_str();
    let source = Source::parse(data).context_with(|| format!("data source {data}"))?;
    let pre = ck.config.preprocess;
    let mut st = read_whole(job, &source, pre.as_ref(), hub, observer)?;
    let shape = st.item_shape().to_vec();
    check_item_shape(&ck, data, &shape)?;
    let whole = crate::data::stream::drain(st.as_mut())
        .context_with(|| format!("loading the data {data}"))?
        .unwrap_or(Chunk {
            start: 0,
            ids: Vec::new(),
            x: Vec::new(),
        });
    let n = whole.ids.len();
    let raw = Dataset::new(whole.x, vec![0; n], shape.clone(), 1)?;
    let ds = ck.config.normalizer.apply(&raw)?;
    let item_values: usize = shape.iter().product();
    let batch = job
        .batch
        .unwrap_or_else(|| crate::predict::default_batch(item_values));
    crate::limits::batch("batch", batch, item_values)?;
    let mut scoring = super::model::scoring(&ck, device);
    scoring.batch = batch;
    let all: Vec<usize> = (0..n).collect();
    let nothing =
        crate::predict::reference_of(ck.model.as_ref(), &ds, &[], batch, device, observer)?;
    scoring.reference = Some(Arc::new(nothing));
    let mut noise = stream(job.seed, Purpose::Perturb, 0);
    let ev = scoring
        .evidence(&ds, &all, selector.needs(), &mut noise, observer)
        .context_with(|| format!("scoring {data}"))?;
    let mut rng = stream(job.seed, Purpose::Select, 0);
    let picks = selector.select(&ev, top.min(n), &mut rng)?;
    let rows = picks.iter().enumerate().map(|(rank, &p)| {
        vec![
            (whole.start + p).to_string(),
            whole.ids[p].clone(),
            (rank + 1).to_string(),
        ]
    });
    write_csv(&job.out, &["index", "id", name], rows)?;
    Ok(ScoreReport {
        scored: n,
        rows: picks.len(),
    })
}

/// Every item of `ds` scored by each scorer: `(scorer, item)`. Each scorer draws its noise
/// from the same stream `(seed, Perturb, 0)`, so a scorer's scores do not depend on which
/// others run beside it.
pub fn score_all(
    scoring: &Scoring<'_>,
    ds: &Dataset,
    scorers: &[Arc<dyn Scorer>],
    seed: u64,
) -> Result<Vec<Vec<f32>>> {
    Ok(score_keeping_draws(scoring, ds, scorers, seed, false)?.0)
}

/// Stochastic predictions of items, item by item: what BatchBALD chooses from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Draws {
    /// `(n, s, c)`: item `i`'s `s` draws of `c` class probabilities, contiguous.
    pub values: Vec<f32>,
    /// Draws per item.
    pub draws: usize,
    /// Classes per draw.
    pub classes: usize,
}

impl Draws {
    /// Values per item.
    pub fn width(&self) -> usize {
        self.draws * self.classes
    }
}

/// [`score_all`], and with `draws` the first scorer's stochastic predictions.
fn score_keeping_draws(
    scoring: &Scoring<'_>,
    ds: &Dataset,
    scorers: &[Arc<dyn Scorer>],
    seed: u64,
    draws: bool,
) -> Result<(Vec<Vec<f32>>, Option<Draws>)> {
    let all: Vec<usize> = (0..ds.len()).collect();
    let mut kept = None;
    let cols = scorers
        .iter()
        .enumerate()
        .map(|(k, s)| {
            let mut rng = stream(seed, Purpose::Perturb, 0);
            let ev = scoring.evidence(ds, &all, s.needs(), &mut rng, &mut Silent)?;
            if draws && k == 0 {
                let samples = ev.samples.as_ref().ok_or_else(|| {
                    Error::config(
                        "select",
                        format!("`{}` gives no draws to choose a batch from", s.name()),
                    )
                })?;
                let d = samples.draws();
                let (n, sd, c) = (samples.n(), d.len(), d.first().map_or(0, |p| p.classes()));
                let mut flat = Vec::with_capacity(n * sd * c);
                for i in 0..n {
                    for p in d {
                        flat.extend_from_slice(p.row(i));
                    }
                }
                kept = Some(Draws {
                    values: flat,
                    draws: sd,
                    classes: c,
                });
            }
            Ok(s.score(&ev)?)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((cols, kept))
}

/// True when a scorer's evidence draws noise over its whole batch (input or weight noise,
/// MC-dropout masks, REGrad*'s copies): its scores then depend on how the pool is cut into
/// batches, so such scorers see the pool whole and cannot be sharded.
pub fn draws_noise(scorer: &dyn Scorer) -> bool {
    let n = scorer.needs();
    n.grads.is_some_and(|g| g.perturbations > 0)
        || n.samples
            .is_some_and(|r| !matches!(r, alkit_acquisition::SampleRequest::Members))
}

/// What scoring a pool kept: the items' positions, ids, scores `(scorer, item)` and, when a
/// selection will rank them, their selection keys (see [`shard::selection_keys`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scored {
    /// Positions in the pool.
    pub indices: Vec<usize>,
    /// Ids.
    pub ids: Vec<String>,
    /// One column per scorer.
    pub cols: Vec<Vec<f32>>,
    /// Selection keys, when ranked.
    pub keys: Option<Vec<f64>>,
    /// Items scored (this shard's, all when unsharded), before any were dropped for `top`.
    pub count: usize,
    /// With [`ChunkPlan::draws`], each kept item's draws.
    pub draws: Option<Draws>,
    /// When sharded, the fingerprint of every item read (the whole split, not only the
    /// shard's: each item's id and values, as a streamed session fingerprints its pool).
    pub fingerprint: Option<u64>,
}

/// How [`score_chunks`] scores and what it keeps.
pub struct ChunkPlan<'a> {
    /// The scorers; the first ranks.
    pub scorers: &'a [Arc<dyn Scorer>],
    /// Seed of the scorers' noise and of the selection's.
    pub seed: u64,
    /// Normalisation of the model's inputs.
    pub normalizer: &'a Normalizer,
    /// Shape of one item.
    pub item_shape: &'a [usize],
    /// Only this shard's items (by id).
    pub shard: Option<shard::Shard>,
    /// How items are ranked when `top` is set or the run is sharded.
    pub selection: alkit_acquisition::Selection,
    /// Keep only the best `top` by key.
    pub top: Option<usize>,
    /// Keep the first scorer's draws of every kept item (for a joint choice).
    pub draws: bool,
}

/// Scores a pool read chunk by chunk from `next` (called with nothing; `None` ends it),
/// keeping per chunk only the plan's shard and, with `top`, a running best `top` by key:
/// memory is the chunk, the model and what is kept, not the pool. Scores equal those of
/// the whole pool in one chunk for scorers that draw no noise ([`draws_noise`]); the caller
/// passes such scorers one chunk holding everything. Given a `table` (its header written),
/// each chunk's rows `index,id,<scores>` are written to it as scored and none is kept (only
/// the count): a plan that ranks (`top`, a shard) or keeps draws has no such rows.
pub fn score_chunks(
    scoring: &Scoring<'_>,
    plan: &ChunkPlan<'_>,
    next: &mut dyn FnMut() -> Result<Option<crate::data::stream::Chunk>>,
    mut table: Option<&mut crate::fsutil::CsvFile>,
) -> Result<Scored> {
    let sharded = plan.shard.is_some();
    let ranked = plan.top.is_some() || sharded;
    if table.is_some() && (ranked || plan.draws) {
        return Err(Error::config(
            if sharded { "shard" } else { "top" },
            "a table written as it is scored holds every item: it keeps no best items, shard \
             nor draws",
        ));
    }
    // Keys of one item alone allow a running best-`top`; softrank's need every score.
    let running = plan
        .top
        .filter(|_| plan.selection.log_weight(0.5).is_some());
    let mut out = Scored {
        cols: vec![Vec::new(); plan.scorers.len()],
        keys: ranked.then(Vec::new),
        ..Scored::default()
    };
    let len: usize = plan.item_shape.iter().product();
    let mut fingerprint = sharded.then(crate::data::Fnv1a::default);
    while let Some(chunk) = next()? {
        if let Some(h) = fingerprint.as_mut() {
            for (id, x) in chunk.ids.iter().zip(chunk.x.chunks_exact(len.max(1))) {
                crate::data::reader::hash_item(h, id, x);
            }
        }
        let keep: Vec<usize> = (0..chunk.ids.len())
            .filter(|&i| plan.shard.is_none_or(|s| s.holds(&chunk.ids[i])))
            .collect();
        if keep.is_empty() {
            continue;
        }
        out.count += keep.len();
        let x: Vec<f32> = if keep.len() == chunk.ids.len() {
            chunk.x
        } else {
            keep.iter()
                .flat_map(|&i| chunk.x[i * len..(i + 1) * len].iter().copied())
                .collect()
        };
        let raw = Dataset::new(x, vec![0; keep.len()], plan.item_shape.to_vec(), 1)?;
        let ds = plan.normalizer.apply(&raw)?;
        drop(raw);
        let (cols, draws) = score_keeping_draws(scoring, &ds, plan.scorers, plan.seed, plan.draws)?;
        if let Some(d) = draws {
            let all = out.draws.get_or_insert(Draws {
                values: Vec::new(),
                ..d
            });
            all.values.extend(d.values);
        }
        if let Some(t) = table.as_mut() {
            for (r, &i) in keep.iter().enumerate() {
                t.row(table_row(
                    chunk.start + i,
                    &chunk.ids[i],
                    cols.iter().map(|c| c[r]),
                ))?;
            }
            continue;
        }
        let ids: Vec<String> = keep.iter().map(|&i| chunk.ids[i].clone()).collect();
        if let (Some(keys), Some(first)) = (out.keys.as_mut(), cols.first()) {
            if running.is_some() || sharded {
                keys.extend(shard::selection_keys(
                    first,
                    &ids,
                    &plan.selection,
                    plan.seed,
                    sharded,
                )?);
            }
        }
        out.indices.extend(keep.iter().map(|&i| chunk.start + i));
        out.ids.extend(ids);
        for (o, c) in out.cols.iter_mut().zip(cols) {
            o.extend(c);
        }
        if let (Some(k), Some(keys)) = (running, out.keys.as_ref()) {
            if out.ids.len() > k.saturating_mul(2).saturating_add(1024) {
                let mut order: Vec<usize> = (0..out.ids.len()).collect();
                order.sort_by(|&a, &b| {
                    keys[b]
                        .total_cmp(&keys[a])
                        .then(out.indices[a].cmp(&out.indices[b]))
                });
                order.truncate(k);
                order.sort_unstable();
                out = Scored {
                    indices: order.iter().map(|&i| out.indices[i]).collect(),
                    ids: order.iter().map(|&i| out.ids[i].clone()).collect(),
                    cols: out
                        .cols
                        .iter()
                        .map(|c| order.iter().map(|&i| c[i]).collect())
                        .collect(),
                    keys: Some(order.iter().map(|&i| keys[i]).collect()),
                    count: out.count,
                    fingerprint: None,
                    draws: out.draws.map(|d| {
                        let w = d.width();
                        Draws {
                            values: order
                                .iter()
                                .flat_map(|&i| d.values[i * w..(i + 1) * w].iter().copied())
                                .collect(),
                            ..d
                        }
                    }),
                };
            }
        }
    }
    out.fingerprint = fingerprint.map(|h| std::hash::Hasher::finish(&h));
    if ranked && running.is_none() && !sharded {
        // Softrank: every score is kept, the keys come from the ranks of all of them.
        if let Some(first) = out.cols.first() {
            out.keys = Some(shard::selection_keys(
                first,
                &out.ids,
                &plan.selection,
                plan.seed,
                false,
            )?);
        }
    }
    Ok(out)
}

/// `alkit score --select batchbald`: BALD scored per item, the best `candidates` kept with
/// their draws, then BatchBALD's greedy choice of `top` among them (see [`shard`]'s docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JointPlan {
    /// Items chosen.
    pub top: usize,
    /// Candidates of the greedy choice.
    pub candidates: usize,
}

impl JointPlan {
    /// Checks the settings: the one scorer `bald`, `top` given, `candidates` (default
    /// `10 top`) at least `top`.
    pub fn new(
        scorers: &[crate::strategies::StrategyKind],
        top: Option<usize>,
        candidates: Option<usize>,
    ) -> Result<JointPlan> {
        if scorers.len() != 1 || scorers[0].name() != "bald" {
            return Err(Error::config(
                "select",
                "selection `batchbald` chooses from BALD's draws: give the scorer `bald` alone (setting `scorer`)",
            ));
        }
        let top = top.filter(|&k| k > 0).ok_or_else(|| {
            Error::config(
                "select",
                "selection `batchbald` chooses a batch: give its size (setting `top`)",
            )
        })?;
        let candidates = candidates.unwrap_or(top.saturating_mul(10));
        if candidates < top {
            return Err(Error::config(
                "candidates",
                format!("{candidates} candidates cannot hold a batch of {top}"),
            ));
        }
        Ok(JointPlan { top, candidates })
    }

    /// The joint choice's record, from what scoring kept (`(members, classes)` when it kept
    /// no item, a shard of none).
    pub fn resolve(
        &self,
        scored: &Scored,
        members: usize,
        classes: usize,
        seed: u64,
    ) -> shard::Joint {
        let (draws, classes) = scored
            .draws
            .as_ref()
            .map_or((members, classes), |d| (d.draws, d.classes));
        shard::Joint {
            candidates: self.candidates,
            draws,
            classes,
            seed,
        }
    }
}

/// The unsharded joint choice from a [`score_chunks`] run that kept its best candidates with
/// their draws: rows `index,id,<scores>` of the `top` items picked, in the order picked, each
/// field as a shard file writes it (so the merge of shards gives the same bytes).
pub fn joint_rows(scored: &Scored, joint: &shard::Joint, top: usize) -> Result<Vec<Vec<String>>> {
    let (draws, keys) = match (&scored.draws, &scored.keys) {
        (Some(d), Some(k)) => (d, k),
        _ => {
            return Err(Error::config(
                "select",
                "scoring kept no draws to choose from",
            ))
        }
    };
    let w = draws.width();
    let cands = (0..scored.ids.len())
        .map(|i| shard::Candidate {
            index: scored.indices[i],
            key: keys[i],
            fields: [scored.indices[i].to_string(), scored.ids[i].clone()]
                .into_iter()
                .chain(scored.cols.iter().map(|c| c[i].to_string()))
                .collect(),
            draws: draws.values[i * w..(i + 1) * w].to_vec(),
        })
        .collect();
    Ok(shard::joint_pick(
        cands,
        joint,
        top,
        alkit_acquisition::BatchBald::DEFAULT_CONFIGS,
    )?
    .into_iter()
    .map(|c| c.fields)
    .collect())
}

/// Writes a score table to `out` atomically: header `index,id,<name>...`, one row per item
/// (`indices[i]` its position in the pool, `cols[k][i]` scorer `k`'s score), in the given
/// order (the pool's), or with `top = Some(k)` the
/// `k` items with the highest `keys` (the first scorer's scores when `None`; ties by index).
/// Fields are quoted as RFC 4180 requires, so an id with a comma reads back.
pub fn write_scores(
    out: &Path,
    indices: &[usize],
    ids: &[String],
    names: &[&str],
    cols: &[Vec<f32>],
    top: Option<usize>,
    keys: Option<&[f64]>,
) -> Result<()> {
    if cols.len() != names.len()
        || indices.len() != ids.len()
        || cols.iter().any(|c| c.len() != ids.len())
    {
        return Err(Error::config(
            "scores",
            "one column of one score per item per scorer",
        ));
    }
    let mut order: Vec<usize> = (0..ids.len()).collect();
    if let (Some(k), Some(first)) = (top, cols.first()) {
        let by: Vec<f64> = match keys {
            Some(k) if k.len() == ids.len() => k.to_vec(),
            Some(_) => return Err(Error::config("keys", "one key per item")),
            None => first.iter().map(|&v| f64::from(v)).collect(),
        };
        order.sort_by(|&x, &y| by[y].total_cmp(&by[x]).then(x.cmp(&y)));
        order.truncate(k);
    }
    let rows = order
        .into_iter()
        .map(|i| table_row(indices[i], &ids[i], cols.iter().map(|c| c[i])));
    write_csv(out, &table_header(names), rows)
}

/// A score table's header: `index,id,<name>...`.
fn table_header<'a>(names: &[&'a str]) -> Vec<&'a str> {
    let mut header = vec!["index", "id"];
    header.extend(names);
    header
}

/// One row of a score table: the item's position, its id, then its scores as `f32`'s
/// shortest round-trip text.
fn table_row(index: usize, id: &str, scores: impl Iterator<Item = f32>) -> Vec<String> {
    let mut row = vec![index.to_string(), id.to_string()];
    row.extend(scores.map(|v| v.to_string()));
    row
}
