//! The two entries of `alkit score`: [`run`] writes the plan's output file, [`table`] keeps
//! every item's scores in memory; both score the split through one pass.

use super::super::shard;
use super::chunks::{score_chunks, table_header, ChunkPlan};
use super::job::{ScoreJob, ScoreReport, ScoreTable};
use super::joint::select_jointly;
use super::plan::{Output, Plan, Scores};
use super::read::{batch, chunks, open_checkpoint, served, source, Chunks};
use super::sink::{finish, Pass};
use crate::error::{Result, ResultExt};
use crate::fsutil::CsvFile;
use crate::hub::Hub;
use crate::observe::Observer;
use crate::predict::Scoring;
use candle_core::Device;

/// Runs `job`: checks it whole (its plan) before anything is read, fetches Hub files through
/// `hub` (reporting downloads to `observer`), scores on `device` and writes `job.out`
/// atomically.
pub fn run(
    job: &ScoreJob,
    hub: &Hub,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<ScoreReport> {
    match Plan::new(job, hub)? {
        Plan::Joint { selector, top } => {
            select_jointly(job, (selector.as_ref(), top), hub, device, observer)
        }
        Plan::Scores(plan) => {
            let pass = score_split(job, &plan, hub, device, observer)?;
            finish(job, &plan, pass)
        }
    }
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
    let plan = Plan::in_memory(job)?;
    let pass = score_split(job, &plan, hub, device, observer)?;
    Ok(ScoreTable {
        indices: pass.scored.indices,
        ids: pass.scored.ids,
        names: pass.scorers.iter().map(|s| s.name().to_string()).collect(),
        cols: pass.scored.cols,
    })
}

/// Opens `job`'s checkpoint and data and scores the split as `plan` says: read as its input
/// says, ranked by its selection, keeping what its output needs. A table written as scored
/// gets every item's row as its chunk is scored, and none is kept.
fn score_split(
    job: &ScoreJob,
    plan: &Scores,
    hub: &Hub,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<Pass> {
    let ck = open_checkpoint(job, hub, device, observer)?;
    let scorers = served(&ck, &plan.scorers)?;
    let source = source(job)?;
    let batch = batch(job, &ck, &scorers)?;
    let Chunks {
        item_shape,
        pool,
        mut next,
    } = chunks(
        job,
        plan.input,
        &ck,
        (&scorers, batch),
        (&source, hub),
        observer,
    )?;
    let scoring = Scoring {
        model: ck.model.as_ref(),
        params: Some(&ck.params),
        builder: (job.checkpoints.len() == 1).then_some(&ck.config.arch),
        input_std: &ck.config.normalizer.std,
        batch,
        device,
        reference: None,
    };
    let chunk_plan = ChunkPlan {
        scorers: &scorers,
        seed: job.seed,
        normalizer: &ck.config.normalizer,
        item_shape: &item_shape,
        shard: job.shard,
        selection: plan.selection,
        top: plan.output.kept(),
        draws: plan.output.draws(),
    };
    let checkpoint_hash = shard_hash(job, hub, observer)?;
    let mut table = match plan.output {
        Output::Table => {
            let names: Vec<&str> = scorers.iter().map(|s| s.name()).collect();
            Some(CsvFile::create(&job.out, &table_header(&names))?)
        }
        _ => None,
    };
    let scored = score_chunks(&scoring, &chunk_plan, &mut next, table.as_mut())
        .context_with(|| format!("scoring {}", job.data))?;
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

/// A sharded job's checkpoint content hash (its weights' files; the split's items are
/// fingerprinted as scored: see `shard::Manifest`), with the shard's old manifest removed:
/// from here the old result is void, so a run killed before it writes leaves the shard
/// unfinished (no manifest), never a stale result that looks finished.
fn shard_hash(job: &ScoreJob, hub: &Hub, observer: &mut dyn Observer) -> Result<Option<u64>> {
    if job.shard.is_none() {
        return Ok(None);
    }
    let hash =
        crate::checkpoint::content_hash(&job.checkpoints, &job.checkpoint_options, hub, observer)
            .context_with(|| format!("hashing the checkpoint {}", job.checkpoints.join(",")))?;
    let _ = std::fs::remove_file(shard::manifest_path(&job.out));
    Ok(Some(hash))
}
