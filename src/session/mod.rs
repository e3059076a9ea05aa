//! Labeling sessions: active learning with a person as the oracle.
//!
//! A [`Learner`] holds a pool of [`Items`](crate::data::Items) (each with a stable id) in memory, or reads it from
//! its source whenever a round needs items ([`Learner::new_streamed`],
//! [`Learner::resume_streamed`]: ids and labels held, features never all at once), and a
//! [`SessionState`]:
//! which ids are labeled (and with which class, in which round), which were queried and await
//! an answer, and one record per query round. [`Learner::query`] trains a fresh model on the
//! labeled items, scores every other item and returns the next batch; [`Learner::teach`]
//! checks a whole batch of answers first and applies it only when every row is valid.
//!
//! Everything random comes from the session's seed and the round number (the same
//! [`crate::rng::stream`]s as the simulated loop), so a session driven through the CLI, one
//! process per command, ends in exactly the state of the same session driven in one process
//! through this API. [`Learner::save`] writes `session.json` atomically after every change;
//! the model of the last query is saved beside it as a checkpoint.
//!
//! One concept per file: `lock` (the folder's lock), `state` (`session.json`: the state and
//! its records), `pool` (the pool's items as shown and as trained on), `learner` (starting,
//! resuming and saving a session), `query` (a round), `teach` (answers in, checked first),
//! `setup` (a session from a source and settings, or from its folder), `journal` (answers that
//! arrived while the model trained, taught by the next opening).

mod batch_file;
mod index;
pub mod journal;
mod learner;
mod lock;
mod pool;
mod query;
mod setup;
mod state;
mod teach;

pub use batch_file::{check_batch_out, BatchFormat};
pub use index::INDEX_FILE;
pub use learner::Learner;
pub use lock::{lock, SessionLock, LOCK_FILE};
pub use pool::PoolItems;
pub use query::{Query, QueryRequest};
pub use setup::{open, SessionOptions};
pub(crate) use state::check_note;
pub use state::{
    Answer, GuessMatch, Labeled, Pending, Round, SessionConfig, SessionState, Stopping, Undo,
    MAX_NOTE, STATE_FILE,
};
pub(crate) use teach::read_answers_from;
pub use teach::{read_answer_csv, read_answers, Taught};
