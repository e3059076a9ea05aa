//! Answers that arrived while a session's model trained (the Label Studio ML backend takes
//! them while its training thread holds the learner): `DIR/label-studio-queue.json`, written
//! atomically before the answer is acknowledged, and taught by whatever opens the session
//! next ([`super::open`]) or when the training ends, so that a kill loses none of them.

use super::learner::Learner;
use super::state::Answer;
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The journal's file in a session folder.
pub const JOURNAL_FILE: &str = "label-studio-queue.json";

/// One answer waiting: Label Studio's task, the item and its class.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Queued {
    /// Label Studio's task.
    pub task: u64,
    /// The item.
    pub id: String,
    /// Its class name.
    pub label: String,
}

/// Writes the waiting answers to `dir`'s journal atomically.
pub fn write(dir: &Path, queue: &[Queued]) -> Result<()> {
    crate::fsutil::write_json(&dir.join(JOURNAL_FILE), &queue)
}

/// Removes `dir`'s journal (its answers are in `session.json`).
pub fn clear(dir: &Path) -> Result<()> {
    let path = dir.join(JOURNAL_FILE);
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(&path, e)),
    }
}

/// Teaches `learner` the answers of `dir`'s journal, if there is one, checked as a file's
/// rows are (an answer the item already has is a no-op; errors name the journal and the
/// answer's position), saves the state and removes the journal. Returns how many it taught.
pub fn replay(learner: &mut Learner, dir: &Path) -> Result<usize> {
    let path = dir.join(JOURNAL_FILE);
    if !path.exists() {
        return Ok(0);
    }
    let queued: Vec<Queued> = crate::fsutil::read_json(&path)?;
    let answers: Vec<Answer> = queued
        .iter()
        .enumerate()
        .map(|(k, q)| Answer::new(k + 1, q.id.clone(), q.label.clone()))
        .collect();
    let taught = learner.teach_file_answers(&answers, &path)?;
    learner.save_state(dir)?;
    clear(dir)?;
    Ok(taught.taught)
}
