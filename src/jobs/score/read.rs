//! The model and the split a score job reads: the checkpoint opened (its scorers as it serves
//! them, its batch checked against the items' size), then the split handed out chunk by chunk,
//! streamed with the next piece read ahead, or read whole as one chunk. What depends on the
//! model or the items' shape is checked here, before any item is read.

use super::job::{ScoreJob, Split};
use crate::checkpoint::Checkpoint;
use crate::data::image::Preprocess;
use crate::data::stream::{Chunk, ItemStream};
use crate::data::Source;
use crate::error::{Error, Result, ResultExt};
use crate::hub::Hub;
use crate::observe::Observer;
use alkit_acquisition::Scorer;
use candle_core::Device;
use std::sync::Arc;

/// Batches read ahead at a time from a streamed pool while the previous ones are scored (at
/// most: a piece is also at most half the chunk).
const READ_AHEAD_BATCHES: usize = 4;

/// How the split is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Input {
    /// A chunk at a time (a train split, scorers that draw no noise): the scores equal the
    /// whole split's.
    Streamed,
    /// Whole, as one chunk: a test split, or scorers whose scores depend on the batches
    /// (noise drawn per batch, or a joint scorer comparing the items).
    Whole,
}

/// Hands out a split's chunks in order (`None` at the end).
pub(super) type NextChunk = Box<dyn FnMut() -> Result<Option<Chunk>>>;

/// The job's data source, parsed.
pub(super) fn source(job: &ScoreJob) -> Result<Source> {
    let name = job.data.as_str();
    Source::parse(name).context_with(|| format!("data source {name}"))
}

/// The job's checkpoint (several: an ensemble), opened as its options say.
pub(super) fn open_checkpoint(
    job: &ScoreJob,
    hub: &Hub,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<Checkpoint> {
    crate::checkpoint::open_ensemble_with(
        &job.checkpoints,
        &job.checkpoint_options,
        hub,
        device,
        observer,
    )
    .context_with(|| format!("loading the checkpoint {}", job.checkpoints.join(",")))
}

/// The scorers as the model `ck` serves them: a model without autograd (an ONNX model) is
/// known by its features and last layer, so its gradient scores are the last layer's (named
/// `<scorer>@last`), and what needs autograd through the network or rebuilding
/// (perturbed-input gradients, weight noise) is refused before any item is read.
pub(super) fn served(ck: &Checkpoint, scorers: &[Arc<dyn Scorer>]) -> Result<Vec<Arc<dyn Scorer>>> {
    let scorers = super::super::model::served_scorers(&ck.config.arch, scorers);
    if !ck.config.arch.capabilities().complete() {
        for s in &scorers {
            ck.config.arch.check_needs(s.name(), &s.needs())?;
        }
    }
    Ok(scorers)
}

/// The inference batch: the job's, or the default for items of the checkpoint's size; a batch
/// runs at exactly its size, so one too large is refused, never capped, and so is one whose
/// perturbed copies would not fit.
pub(super) fn batch(job: &ScoreJob, ck: &Checkpoint, scorers: &[Arc<dyn Scorer>]) -> Result<usize> {
    let item_values: usize = ck.config.item_shape.iter().product();
    let batch = job
        .batch
        .unwrap_or_else(|| crate::predict::default_batch(item_values));
    crate::limits::batch("batch", batch, item_values)?;
    check_perturbed_batch(scorers, batch, item_values)?;
    Ok(batch)
}

/// A split opened for scoring: its items' shape, its size and its chunks.
pub(super) struct Chunks {
    pub item_shape: Vec<usize>,
    pub pool: usize,
    pub next: NextChunk,
}

/// The job's split (`source`, as parsed), read as `input` says, in chunks of whole batches of `batch`; the
/// evidence of a chunk must fit in memory, and its items must be the checkpoint's.
pub(super) fn chunks(
    job: &ScoreJob,
    input: Input,
    ck: &Checkpoint,
    (scorers, batch): (&[Arc<dyn Scorer>], usize),
    (source, hub): (&Source, &Hub),
    observer: &mut dyn Observer,
) -> Result<Chunks> {
    let name = job.data.as_str();
    let loading = || format!("loading the data {name}");
    // A checkpoint that prepares its own inputs (a timm model) has every item resized and
    // cropped as it says.
    let pre = ck.config.preprocess;
    let classes = ck.model.classes();
    if input == Input::Whole {
        let mut st = read_whole(job, source, pre.as_ref(), hub, observer)?;
        let (item_shape, pool) = (st.item_shape().to_vec(), st.len());
        check_chunk_evidence(scorers, pool, classes, "data")?;
        check_item_shape(ck, name, &item_shape)?;
        let mut whole = crate::data::stream::drain(st.as_mut()).context_with(loading)?;
        let next: NextChunk = Box::new(move || Ok(whole.take()));
        return Ok(Chunks {
            item_shape,
            pool,
            next,
        });
    }
    let st =
        crate::data::source::open(source, hub, observer, pre.as_ref()).context_with(loading)?;
    // Whole batches per chunk: the batches are then the whole-pool run's. A chunk past the
    // pool is the pool (one chunk either way).
    let chunk = job.chunk.min(st.len().max(1)).div_ceil(batch) * batch;
    check_chunk_evidence(scorers, chunk.min(st.len()), classes, "chunk")?;
    let (item_shape, pool) = (st.item_shape().to_vec(), st.len());
    check_item_shape(ck, name, &item_shape)?;
    Ok(Chunks {
        item_shape,
        pool,
        next: streamed(st, chunk, batch)?,
    })
}

/// A streamed split's chunks, read in pieces of whole batches, at most half a chunk each, the
/// next piece decoded on a reading thread while this one is scored: the batches stay the
/// whole-pool run's, even a pool of one chunk has its reading overlapped with its scoring,
/// and the two pieces held at once stay within the chunk. A chunk of one batch is read in
/// place, and so is any pool when this runs on one of rayon's threads (the reader's parallel
/// decoding would wait for the thread it blocks).
fn streamed(mut st: Box<dyn ItemStream>, chunk: usize, batch: usize) -> Result<NextChunk> {
    let piece = (chunk / 2 / batch * batch).min(READ_AHEAD_BATCHES * batch);
    if piece > 0 && rayon::current_thread_index().is_none() {
        let mut ahead = crate::data::stream::ReadAhead::new(st, piece)?;
        return Ok(Box::new(move || ahead.next_chunk()));
    }
    Ok(Box::new(move || st.next_chunk(chunk)))
}

/// The job's split read whole: a train split through the checkpoint's preprocessing chunk by
/// chunk when it has one, otherwise decoded straight through it (never resampled twice).
pub(super) fn read_whole(
    job: &ScoreJob,
    source: &Source,
    pre: Option<&Preprocess>,
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
pub(super) fn check_item_shape(ck: &Checkpoint, name: &str, shape: &[usize]) -> Result<()> {
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

/// REGrad*'s perturbed copies of one gradient batch (at most 256 rows, `perturbations + 1`
/// copies each) hold at most [`crate::limits::MAX_BATCH_VALUES`] input values.
fn check_perturbed_batch(
    scorers: &[Arc<dyn Scorer>],
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
    scorers: &[Arc<dyn Scorer>],
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
