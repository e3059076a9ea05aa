//! What a caller asks of `alkit score` ([`ScoreJob`]) and what it gets back ([`ScoreReport`]
//! for a written table, [`ScoreTable`] for the numbers kept in memory).

use super::super::shard::Shard;
use crate::strategies::{ScorerSettings, StrategyKind};
use std::path::PathBuf;

pub use crate::data::stream::DEFAULT_CHUNK;

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

impl ScoreJob {
    /// The job's scorer settings as they are read: validated, with `members` set from the
    /// number of checkpoints.
    pub(super) fn settings(&self) -> crate::error::Result<ScorerSettings> {
        self.settings.validate()?;
        Ok(ScorerSettings {
            members: self.checkpoints.len() > 1,
            ..self.settings
        })
    }
}

/// What a [`run`](super::run) scored and wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScoreReport {
    /// Items scored (this shard's when sharded).
    pub scored: usize,
    /// Rows written.
    pub rows: usize,
}

/// Every item's scores, kept in memory rather than written: what [`table`](super::table)
/// returns.
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
