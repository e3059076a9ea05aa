//! What the commands that train, score and measure call: one file (or folder) per command,
//! each entered by its `run` (`alkit X` calls `jobs::X::run`): [`train`], [`embed`] (a frozen
//! backbone's embeddings of a source, cached), [`score`] (a pool or a split, whole, in chunks
//! or sharded), [`merge`] (shards merged exactly), [`ood`], [`calibrate`], [`scores_file`]
//! (`alkit metrics`: metrics of scores computed elsewhere), [`curve`] (strategies x seeds),
//! [`regression`] (the same for numeric targets: Gaussian heads, RMSE and NLL curves),
//! [`multilabel`] (the same for label sets: sigmoid heads, mAP and F1 curves),
//! [`bench`](mod@bench) (throughput) and [`surface`] (two-moons uncertainty surfaces). Each takes a
//! model and data, writes its files and returns what it measured; the binary only prints.
//! Beside them: [`model`] (where a job's model comes from) and [`shard`] (which items a shard
//! holds, the keys and manifests it writes).

pub mod bench;
pub mod calibrate;
pub mod compare;
pub mod curve;
pub mod embed;
pub mod merge;
pub mod model;
pub mod multilabel;
pub mod ood;
pub mod regression;
pub mod score;
pub mod scores_file;
pub mod shard;
pub mod surface;
pub mod train;

pub use model::{check_fits, scoring, ModelSource};
pub use score::score_all;

use crate::error::{Error, Result};
use std::path::Path;

/// Creates the output folder `out`.
fn create_out(out: &Path) -> Result<()> {
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))
}
