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
use super::{draws_noise, joint_rows, score_chunks, write_scores, ChunkPlan, JointPlan};
use crate::data::stream::{Chunk, ItemStream};
use crate::data::Source;
use crate::error::{Error, Result, ResultExt};
use crate::hub::Hub;
use crate::observe::Observer;
use crate::predict::Scoring;
use crate::strategies::{per_item_scorers, ScorerSettings, SelectKind, StrategyKind};
use alkit_acquisition::Selection;
use candle_core::Device;
use std::path::{Path, PathBuf};

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
    /// Checkpoint folders or `hf:OWNER/NAME[@REV]`; several form an ensemble.
    pub checkpoints: Vec<String>,
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
    /// Items read at a time from a streamed split (rounded up to whole batches).
    pub chunk: usize,
    /// Seed of the scorers' noise and of the selection's.
    pub seed: u64,
    /// Score only this shard's items (by id) and write a shard file with its manifest.
    pub shard: Option<Shard>,
    /// The CSV file to write.
    pub out: PathBuf,
}

/// What a [`run`] scored and wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScoreReport {
    /// Items scored (this shard's when sharded).
    pub scored: usize,
    /// Rows written.
    pub rows: usize,
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
    let settings = ScorerSettings {
        members: job.checkpoints.len() > 1,
        ..job.settings
    };
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
    if job.batch == Some(0) || job.chunk == 0 {
        return Err(Error::config(
            "batch",
            "--batch and --chunk must be at least 1",
        ));
    }
    let mut inputs: Vec<&Path> = job.checkpoints.iter().map(Path::new).collect();
    inputs.push(Path::new(&job.data));
    crate::fsutil::check_output("out", &job.out, &inputs)?;
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
                "--select {} draws a batch: give its size with --top",
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
    let ck = crate::checkpoint::open_ensemble(&job.checkpoints, hub, device, observer)
        .context_with(|| format!("loading the checkpoint {}", job.checkpoints.join(",")))?;
    let name = job.data.as_str();
    let source = Source::parse(name).context_with(|| format!("data source {name}"))?;
    let loading = || format!("loading the data {name}");
    // A train split is read in chunks (for scorers that draw no noise); others are loaded
    // whole and scored as one chunk. A checkpoint that prepares its own inputs (a timm
    // model) has every item resized and cropped as it says.
    let pre = ck.config.preprocess;
    let open = |observer: &mut dyn Observer| -> Result<Box<dyn ItemStream>> {
        crate::data::source::open(&source, hub, observer, pre.as_ref()).context_with(loading)
    };
    let streamed = match job.split {
        Split::Train if noisy.is_none() => Some(open(observer)?),
        _ => None,
    };
    let batch = job
        .batch
        .unwrap_or_else(|| crate::predict::default_batch(ck.config.item_shape.iter().product()));
    let (item_shape, pool, mut next): (Vec<usize>, usize, NextChunk) = match streamed {
        Some(mut st) => {
            // Whole batches per chunk: the batches are then the whole-pool run's.
            let chunk = job.chunk.div_ceil(batch) * batch;
            (
                st.item_shape().to_vec(),
                st.len(),
                Box::new(move || st.next_chunk(chunk)),
            )
        }
        None => {
            let mut st = match job.split {
                Split::Train if pre.is_some() => open(observer)?,
                _ => {
                    // The split decoded straight through the checkpoint's preprocessing (never
                    // resampled twice).
                    let (_, loaded) =
                        crate::data::source::load_named(name, pre.as_ref(), hub, observer)?;
                    let items = match job.split {
                        Split::Train => loaded.pool,
                        Split::Test => loaded.test.ok_or_else(|| {
                            Error::config(
                                "split",
                                format!("{name} has no test split; drop --split test"),
                            )
                        })?,
                    };
                    crate::data::stream::in_memory(items)
                }
            };
            let (shape, n) = (st.item_shape().to_vec(), st.len());
            let mut whole = crate::data::stream::drain(st.as_mut()).context_with(loading)?;
            (shape, n, Box::new(move || Ok(whole.take())))
        }
    };
    if item_shape != ck.config.item_shape {
        return Err(Error::config(
            "checkpoint",
            format!(
                "{name}: items are {item_shape:?}, the checkpoint expects {:?}",
                ck.config.item_shape
            ),
        ));
    }
    let scoring = Scoring {
        model: ck.model.as_ref(),
        params: Some(&ck.params),
        builder: (job.checkpoints.len() == 1).then_some(&ck.config.arch),
        input_std: &ck.config.normalizer.std,
        batch,
        device,
    };
    let plan = ChunkPlan {
        scorers: &scorers,
        seed: job.seed,
        normalizer: &ck.config.normalizer,
        item_shape: &item_shape,
        shard: job.shard,
        selection,
        top: joint.map_or(job.top, |j| Some(j.candidates)),
        draws: joint.is_some(),
    };
    let scored =
        score_chunks(&scoring, &plan, &mut next).context_with(|| format!("scoring {name}"))?;
    let names: Vec<&str> = scorers.iter().map(|s| s.name()).collect();
    let joint =
        joint.map(|j| j.resolve(&scored, job.checkpoints.len(), ck.model.classes(), job.seed));
    // Rows of the table or shard: the kept best `top` (BatchBALD's candidates), else every item.
    let kept = plan
        .top
        .map_or(scored.ids.len(), |k| k.min(scored.ids.len()));
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
        ("data", name.to_string()),
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
        format: 1,
        shard,
        top: plan.top,
        items: scored.count,
        pool,
        run,
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
