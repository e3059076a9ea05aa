//! The jobs of the commands that score a model's data, one file (or folder) each, each entered
//! by its `run`: [`train`] (`alkit train`), [`embed`] (`alkit embed`: a frozen backbone's
//! embeddings of a source, cached), [`score`] (`alkit score`: a pool or a split, whole, in
//! chunks or sharded), [`merge`] (`alkit merge`: shards merged exactly), [`ood`] (`alkit ood`)
//! and [`calibrate`] (`alkit calibrate`), each a library experiment like `curve`: it takes a
//! model and data, writes its tables and plots into a folder and returns what it measured, and
//! the binary only prints. Beside them: [`model`] (where a job's model comes from), [`shard`]
//! (which items a shard holds, the keys and manifests it writes), [`scores_file`] (`alkit
//! metrics`: metrics of scores computed elsewhere).

pub mod calibrate;
pub mod embed;
pub mod merge;
pub mod model;
pub mod ood;
pub mod score;
pub mod scores_file;
pub mod shard;
pub mod train;

pub use model::{check_fits, scoring, ModelSource};
pub use score::score_all;

use crate::error::{Error, Result};
use std::path::Path;

/// Creates the output folder `out`.
fn create_out(out: &Path) -> Result<()> {
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))
}
