//! The scorers evaluated standalone: out-of-distribution detection ([`ood`]) and calibration
//! ([`calibrate`]), each a library experiment like `curve`: it takes a model and data, writes
//! its tables and plots into a folder and returns what it measured, and the binary only prints.
//!
//! One file each: [`model`] (where the model comes from), [`train`] (`alkit train`), [`embed`]
//! (a frozen backbone's embeddings of a source, cached), [`score`]
//! (scoring a pool or a split, whole, in chunks or sharded), [`shard`], [`ood`],
//! [`calibrate`], [`scores_file`].

pub mod calibrate;
pub mod embed;
pub mod model;
pub mod ood;
pub mod score;
pub mod scores_file;
pub mod shard;
pub mod train;

pub use model::{check_fits, scoring, ModelSource};
pub use score::{
    draws_noise, joint_rows, score_all, score_chunks, write_scores, ChunkPlan, Draws, JointPlan,
    Scored,
};
pub use train::train_checkpoint;

use crate::error::{Error, Result};
use std::path::Path;

/// Creates the output folder `out`.
fn create_out(out: &Path) -> Result<()> {
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))
}
