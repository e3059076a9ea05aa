//! Answers that arrived while a session's model trained (the labeling page and the Label
//! Studio ML backend take them while their training thread holds the learner):
//! `DIR/label-studio-queue.json` (the name of the first server that kept one), written
//! atomically before the answer is acknowledged, and taught by whatever opens the session
//! next ([`super::open`]) or when the training ends, so that a kill loses none of them.

use super::learner::Learner;
use super::state::Answer;
use super::teach::Taught;
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The journal's file in a session folder.
pub const JOURNAL_FILE: &str = "label-studio-queue.json";

/// One answer waiting: the item, its class and what the server knew when it was given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Queued {
    /// Label Studio's task, when the backend took it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<u64>,
    /// The item.
    pub id: String,
    /// Its class name.
    pub label: String,
    /// The round it was given after (the page's answers; `None`: taught in the round current
    /// when it is taught).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round: Option<usize>,
    /// The class that round's model predicted for the item, when the page showed one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guess: Option<String>,
    /// The person's note.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Queued {
    /// An answer waiting without a task, round, guess or note.
    pub fn new(id: impl Into<String>, label: impl Into<String>) -> Queued {
        Queued {
            task: None,
            id: id.into(),
            label: label.into(),
            round: None,
            guess: None,
            note: None,
        }
    }
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

/// Teaches `learner` the waiting answers `queue`, checked as a file's rows are (an answer
/// the item already has is a no-op; errors name `origin` and the answer's position), each in
/// the round it was given after. Nothing is saved.
pub fn teach(learner: &mut Learner, queue: &[Queued], origin: &Path) -> Result<Taught> {
    let answers: Vec<Answer> = queue
        .iter()
        .enumerate()
        .map(|(k, q)| Answer {
            row: k + 1,
            id: q.id.clone(),
            label: q.label.clone(),
            note: q.note.clone(),
            guess: q.guess.clone(),
            round: q.round,
        })
        .collect();
    learner.teach_file_answers(&answers, origin)
}

/// The answers waiting in `dir`'s journal (none without one).
pub fn waiting(dir: &Path) -> Result<Vec<Queued>> {
    let path = dir.join(JOURNAL_FILE);
    if !path.exists() {
        return Ok(Vec::new());
    }
    crate::fsutil::read_json(&path)
}

/// Teaches `learner` the answers of `dir`'s journal, if there is one ([`teach`]), saves the
/// state and removes the journal. Returns how many it taught.
pub fn replay(learner: &mut Learner, dir: &Path) -> Result<usize> {
    let path = dir.join(JOURNAL_FILE);
    if !path.exists() {
        return Ok(0);
    }
    let queued = waiting(dir)?;
    let taught = teach(learner, &queued, &path)?;
    learner.save_state(dir)?;
    clear(dir)?;
    Ok(taught.taught)
}
