//! Where a scored split's rows go once scoring ends, by the plan's output: the best `top`
//! rows, BatchBALD's picks, or a shard file with its manifest (a table written as scored is
//! done already); each file written atomically.

use super::super::shard;
use super::chunks::{table_header, table_row, Scored};
use super::job::{ScoreJob, ScoreReport};
use super::joint::joint_rows;
use super::plan::{Output, Scores};
use crate::error::{Error, Result};
use crate::fsutil::write_csv;
use alkit_acquisition::Scorer;
use std::path::Path;
use std::sync::Arc;

/// What scoring the split gave, with what it learned on the way.
pub(super) struct Pass {
    pub scored: Scored,
    /// The scorers as the model serves them (`<name>@last` for an ONNX model's gradients).
    pub scorers: Vec<Arc<dyn Scorer>>,
    pub classes: usize,
    pub batch: usize,
    /// Items in the split.
    pub pool: usize,
    /// The checkpoint's content hash, for a shard's manifest.
    pub checkpoint_hash: Option<u64>,
}

/// Writes what `pass` kept as `plan`'s output says, and reports it.
pub(super) fn finish(job: &ScoreJob, plan: &Scores, pass: Pass) -> Result<ScoreReport> {
    let scored = &pass.scored;
    let names: Vec<&str> = pass.scorers.iter().map(|s| s.name()).collect();
    // Rows of the table or shard: the kept best (BatchBALD's candidates), else every item.
    let kept = plan
        .output
        .kept()
        .map_or(scored.ids.len(), |k| k.min(scored.ids.len()));
    let rows = match plan.output {
        Output::Table | Output::Memory => scored.count,
        Output::Top(top) => {
            write_scores(
                &job.out,
                (&scored.indices, &scored.ids),
                (&names, &scored.cols),
                top,
                scored.keys.as_deref(),
            )?;
            kept
        }
        Output::Picks(j) => {
            let joint = j.resolve(scored, job.checkpoints.len(), pass.classes, job.seed);
            let rows = joint_rows(scored, &joint, j.top)?;
            let n = rows.len();
            write_csv(&job.out, &table_header(&names), rows)?;
            n
        }
        Output::Shard { shard, top, joint } => {
            let joint =
                joint.map(|j| j.resolve(scored, job.checkpoints.len(), pass.classes, job.seed));
            let manifest = manifest(job, plan, &pass, &names, (shard, top, joint))?;
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
            kept
        }
    };
    Ok(ScoreReport {
        scored: scored.count,
        rows,
    })
}

/// A shard's manifest: the run that wrote it (what the merge compares; the settings as their
/// JSON, which leaves out an optional setting not given, so that a setting added later does
/// not set apart the shards of one run), what it kept, and the content hashes of the
/// checkpoint and the split.
fn manifest(
    job: &ScoreJob,
    plan: &Scores,
    pass: &Pass,
    names: &[&str],
    (shard, top, joint): (shard::Shard, Option<usize>, Option<shard::Joint>),
) -> Result<shard::Manifest> {
    let settings = serde_json::to_string(&plan.settings)
        .map_err(|e| Error::config("settings", e.to_string()))?;
    let run = [
        ("data", job.data.clone()),
        ("split", format!("{:?}", job.split)),
        ("checkpoint", job.checkpoints.join(",")),
        ("scorers", names.join(",")),
        ("settings", settings),
        ("seed", job.seed.to_string()),
        ("batch", pass.batch.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    Ok(shard::Manifest {
        format: shard::FORMAT,
        shard,
        top,
        items: pass.scored.count,
        pool: pass.pool,
        run,
        checkpoint_hash: format!("{:016x}", pass.checkpoint_hash.unwrap_or_default()),
        pool_fingerprint: format!("{:016x}", pass.scored.fingerprint.unwrap_or_default()),
        joint,
    })
}

/// Writes a score table to `out` atomically: header `index,id,<name>...`, one row per item
/// (`indices[i]` its position in the pool, `cols[k][i]` scorer `k`'s score), the `top` items
/// with the highest `keys` (the first scorer's scores when `None`; ties by index). Fields are quoted as RFC 4180 requires,
/// so an id with a comma reads back.
fn write_scores(
    out: &Path,
    (indices, ids): (&[usize], &[String]),
    (names, cols): (&[&str], &[Vec<f32>]),
    top: usize,
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
    if let Some(first) = cols.first() {
        let by: Vec<f64> = match keys {
            Some(k) if k.len() == ids.len() => k.to_vec(),
            Some(_) => return Err(Error::config("keys", "one key per item")),
            None => first.iter().map(|&v| f64::from(v)).collect(),
        };
        order.sort_by(|&x, &y| by[y].total_cmp(&by[x]).then(x.cmp(&y)));
        order.truncate(top);
    }
    let rows = order
        .into_iter()
        .map(|i| table_row(indices[i], &ids[i], cols.iter().map(|c| c[i])));
    write_csv(out, &table_header(names), rows)
}
