//! What a backend is told (how it listens, when it retrains, its bounds) and what it reports
//! as it goes ([`BackendEvent`]), with the files it keeps in a session folder.

use super::reconcile::LabelStudioApi;
use crate::error::{Error, Result};
use crate::serve::Limits;
use crate::session::QueryRequest;
use candle_core::Device;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The file in a session folder holding the backend's secret.
pub const SECRET_FILE: &str = "label-studio-secret";

/// The file in a session folder holding the Label Studio project the backend serves (its
/// number, as Label Studio last named it), for catching up when it starts.
pub const PROJECT_FILE: &str = "label-studio-project";

/// The largest request body read: a predict request for a thousand tasks whose images are
/// inline data URIs of tens of KB each.
pub const MAX_REQUEST: usize = 64 << 20;

/// The request bytes all connections may hold at once (four of the largest bodies); a
/// request whose body does not fit waits for room, and is answered `503` after
/// [`BODY_WAIT`].
pub const BODY_BUDGET: u64 = 256 << 20;

/// How long a request waits for room in [`BODY_BUDGET`].
pub const BODY_WAIT: Duration = Duration::from_secs(10);

/// How the backend listens and when it retrains.
#[derive(Clone)]
pub struct BackendSettings {
    /// Address to bind.
    pub host: IpAddr,
    /// Port (Label Studio's examples use 9090); 0 picks a free one.
    pub port: u16,
    /// How the pool is ranked (a strategy that scores items one at a time) and how many of
    /// the top items are recorded as pending (`n`).
    pub request: QueryRequest,
    /// New labels that start a retraining (at least 1).
    pub retrain_every: usize,
    /// Where training and scoring run.
    pub device: Device,
    /// Connection bounds; [`BackendSettings::limits`] gives the backend's defaults.
    pub limits: Limits,
    /// Label Studio's API, for reading back the answers the backend missed (module docs).
    pub label_studio: Option<LabelStudioApi>,
    /// The project to read them from, when Label Studio has not named it yet.
    pub project: Option<u64>,
}

impl BackendSettings {
    /// The connection bounds of a backend: Label Studio waits up to 100 s for a prediction
    /// and sends tasks with their data, so a request may take a minute and be large; its
    /// head must arrive within 10 s, so idle connections give their slot back soon. 256
    /// connections at once (their bodies share [`BODY_BUDGET`]): Label Studio opens one per
    /// request, and a burst of webhooks while the model trains must not be turned away.
    pub fn limits() -> Limits {
        Limits {
            request_timeout: Duration::from_secs(60),
            head_timeout: Duration::from_secs(10),
            send_timeout: Duration::from_secs(120),
            max_connections: 256,
            ..Limits::default()
        }
    }
}

/// What the backend reports as it goes (the binary prints these).
#[derive(Debug, Clone, PartialEq)]
pub enum BackendEvent<'a> {
    /// An answer was taught (`repeated`: the item already had that label).
    Taught {
        /// Label Studio's task.
        task: u64,
        /// The item.
        id: &'a str,
        /// Its class.
        label: &'a str,
        /// Whether it only repeated a label the item had.
        repeated: bool,
        /// Labeled items now.
        labeled: usize,
    },
    /// An answer waits for the training to end.
    Queued {
        /// Label Studio's task.
        task: u64,
        /// Answers waiting.
        waiting: usize,
    },
    /// A request or answer was refused.
    Refused {
        /// What and why.
        problem: &'a str,
    },
    /// Retraining began.
    RoundStarted {
        /// The round.
        round: usize,
        /// Labels it trains on.
        labeled: usize,
    },
    /// A new model ranks the pool; predictions now come from it.
    RoundFinished {
        /// The round.
        round: usize,
        /// Items ranked.
        ranked: usize,
        /// Test accuracy, when the pool has a test split.
        test_acc: Option<f64>,
        /// What the stopping rules say after it.
        stopping: Option<&'a crate::session::Stopping>,
    },
    /// Retraining failed; the previous model keeps predicting.
    Failed {
        /// What went wrong.
        problem: &'a str,
    },
    /// The project's annotations were read back from Label Studio and what the backend had
    /// missed was taught (each refused one is a [`BackendEvent::Refused`] too).
    Reconciled {
        /// Label Studio's project.
        project: u64,
        /// Tasks with an answer in the project.
        answers: usize,
        /// Answers new to the session (taught or queued).
        taught: usize,
    },
    /// A predict request was answered.
    Predicted {
        /// Tasks asked for.
        tasks: usize,
        /// Tasks given a prediction.
        predicted: usize,
        /// Seconds it took.
        seconds: f64,
    },
}

/// Receives [`BackendEvent`]s from request threads and the training thread.
pub type BackendEvents = Arc<dyn Fn(&BackendEvent<'_>) + Send + Sync>;

/// The project remembered in `dir` ([`PROJECT_FILE`]), if any.
pub(super) fn read_project(dir: &Path) -> Result<Option<u64>> {
    let path = dir.join(PROJECT_FILE);
    match std::fs::read_to_string(&path) {
        Ok(s) => s.trim().parse().map(Some).map_err(|_| {
            Error::state(
                &path,
                "not a Label Studio project number; delete it (the backend learns the project \
                 from Label Studio's next request)",
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(&path, e)),
    }
}

/// Remembers `project` in `dir`, atomically.
pub(super) fn write_project(dir: &Path, project: u64) -> Result<()> {
    crate::fsutil::write_atomic(&dir.join(PROJECT_FILE), format!("{project}\n").as_bytes())
}
