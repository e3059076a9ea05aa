//! The labeling page's state, at the bottom of the folder: the app ([`App`]) and what its
//! lock guards ([`Inner`]), the undo log, the training progress, the request bodies it reads,
//! the items served while a model trains ([`Spare`]) and the events it reports
//! ([`ServeEvent`]). The page's handlers (`page.rs`) and the waiting room (`waiting.rs`) both
//! build on it.

use crate::session::journal::Queued;
use crate::session::{Learner, PoolItems, QueryRequest, SessionLock, SessionState, Undo};
use candle_core::Device;
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// What the server reports as it goes (the binary prints these).
#[derive(Debug, Clone, PartialEq)]
pub enum ServeEvent<'a> {
    /// An answer was saved.
    Answered {
        /// The item.
        id: &'a str,
        /// Its class.
        label: &'a str,
        /// Labeled items now.
        labeled: usize,
    },
    /// An answer was saved to wait while the model trains.
    Queued {
        /// The item.
        id: &'a str,
        /// Its class.
        label: &'a str,
        /// Answers waiting now.
        waiting: usize,
    },
    /// The answers that waited while the model trained are taught.
    TaughtWaiting {
        /// How many.
        taught: usize,
    },
    /// The last answer was taken back.
    Undone {
        /// The item.
        id: &'a str,
    },
    /// Retraining for the next batch began.
    RoundStarted {
        /// The round being queried.
        round: usize,
        /// Labels it trains on.
        labeled: usize,
    },
    /// The next batch is ready and saved.
    RoundFinished {
        /// The round.
        round: usize,
        /// Items in the batch.
        queried: usize,
        /// Test accuracy of its model, when the pool has a test split.
        test_acc: Option<f64>,
        /// What the stopping rules say after it.
        stopping: Option<&'a crate::session::Stopping>,
    },
    /// Every item is labeled or pending: there is nothing left to ask for.
    Exhausted,
    /// A background round or a save failed; the page shows it too.
    Failed {
        /// What went wrong.
        problem: &'a str,
    },
}

/// Receives [`ServeEvent`]s, from the request thread or the training thread.
pub type Events = Arc<dyn Fn(&ServeEvent<'_>) + Send + Sync>;

/// An item served while the next model trains, after the batch's open items.
pub(super) struct Spare {
    pub(super) id: String,
    pub(super) index: usize,
    /// Its place in the last ranking (from 1), when there was one.
    pub(super) rank: Option<usize>,
    pub(super) score: Option<f32>,
}

pub(super) enum Action {
    Answer(Undo, String),
    /// An answer waiting while the model trains (the item).
    Queued(String),
    Skip(String),
}

pub(super) struct Inner {
    /// `None` while the training thread holds it.
    pub(super) learner: Option<Learner>,
    /// The state as last saved.
    pub(super) state: SessionState,
    pub(super) skipped: HashSet<String>,
    /// Spares skipped while the model trains; forgotten when the next batch swaps in (it may
    /// hold them).
    pub(super) spare_skips: HashSet<String>,
    pub(super) undo: Vec<Action>,
    /// The last round's model's `(class, probability)` for its batch.
    pub(super) predicted: HashMap<String, (usize, f32)>,
    /// `(rank from 1, batch size)` of each pending item in its round.
    pub(super) ranks: HashMap<String, (usize, usize)>,
    /// What the page serves after the batch's open items while the next model trains.
    pub(super) spares: Vec<Spare>,
    /// Answers given while the model trains, in the journal too.
    pub(super) queue: Vec<Queued>,
    pub(super) error: Option<String>,
    pub(super) exhausted: bool,
}

#[derive(Clone)]
pub(super) struct Progress {
    pub(super) round: usize,
    pub(super) labeled: usize,
    pub(super) phase: &'static str,
    pub(super) done: usize,
    pub(super) total: usize,
    pub(super) started: Instant,
}

pub(super) struct App {
    pub(super) dir: PathBuf,
    pub(super) items: PoolItems,
    pub(super) folder: Option<PathBuf>,
    pub(super) classes: Vec<String>,
    pub(super) token: String,
    /// `Host` header values accepted; `None`: any (the person bound a non-loopback address).
    pub(super) hosts: Option<Vec<String>>,
    pub(super) request: QueryRequest,
    pub(super) device: Device,
    pub(super) events: Events,
    pub(super) inner: Mutex<Inner>,
    pub(super) progress: Mutex<Option<Progress>>,
    pub(super) _lock: SessionLock,
}

impl Inner {
    /// Takes a skip back, of a batch item or a spare.
    pub(super) fn unskip(&mut self, id: &str) {
        self.skipped.remove(id);
        self.spare_skips.remove(id);
    }
}

pub(super) fn guard<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves plain data behind, never a half-written file.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub(super) fn ranks(state: &SessionState) -> HashMap<String, (usize, usize)> {
    let mut per_round: BTreeMap<usize, Vec<&str>> = BTreeMap::new();
    for p in &state.pending {
        per_round.entry(p.round).or_default().push(&p.id);
    }
    per_round
        .values()
        .flat_map(|ids| {
            let n = ids.len();
            ids.iter()
                .enumerate()
                .map(move |(k, id)| (id.to_string(), (k + 1, n)))
        })
        .collect()
}

/// A listener on `host:port`, its address, and the `Host` header values a loopback server
/// accepts (`None` for another address: the person chose to be reachable), so that a page
/// of another site cannot reach it by rebinding a name to 127.0.0.1.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AnswerBody {
    pub(super) id: String,
    pub(super) label: String,
    #[serde(default)]
    pub(super) note: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct IdBody {
    pub(super) id: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Empty {}
