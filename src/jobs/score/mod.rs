//! `alkit score` as a library call: one or several checkpoints score a data source's split
//! with per-item scorers and the table (or a shard of it) is written to a file.
//!
//! [`ScoreJob`] holds the settings; [`run`] resolves them once into a checked plan (`plan`:
//! the selection, BatchBALD's plan, a shard with noisy scorers, the output against the inputs)
//! before anything is read, opens the model and the data (`read`), streams a train split a
//! chunk at a time when the scorers draw no noise (otherwise reads the split whole: their
//! noise depends on the batches) and scores it (`chunks`), and writes `index,id,<scorer>...`
//! rows as scored, the best `top`, BatchBALD's picks (`joint`), or a shard and its manifest
//! for [`super::merge::run`] (`sink`). [`table`] keeps every item's scores in memory
//! instead. Every error says which checkpoint or data source it is about.

mod chunks;
mod job;
mod joint;
mod plan;
mod read;
mod run;
mod sink;

pub use chunks::score_all;
pub use job::{ScoreJob, ScoreReport, ScoreTable, Split, DEFAULT_CHUNK};
pub use run::{run, table};
