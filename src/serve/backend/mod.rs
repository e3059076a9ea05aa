//! A Label Studio ML backend over a session folder: the server a Label Studio project's
//! "Model" connection talks to (the protocol of `label-studio-ml-backend`).
//!
//! - `GET /health` (and `GET /`): `{"status": "UP", ...}`.
//! - `POST /setup`: the session's [`model_version`], the same for every model, so that a
//!   project set once to show it keeps showing every round's predictions.
//! - `POST /predict`: for each task Label Studio sends, the last model's most probable class
//!   as a pre-annotation and, as the prediction's `score`, the model's confidence made to rise
//!   along alkit's order over the pool ([`ordered_confidence`]; with a subsample, the items it
//!   left out score 1, after every ranked one), so that Label Studio's
//!   uncertainty sampling (lowest score first) serves items in alkit's order. A task is an
//!   item by its `alkit_id` (tasks alkit wrote) or by the path or URL of its image (tasks
//!   imported from the pool's folder); any other task gets an `error` instead of a
//!   prediction, which Label Studio logs and skips.
//! - `POST /webhook`: on `ANNOTATION_CREATED` and `ANNOTATION_UPDATED`, the annotation's
//!   single choice is taught through the session's checks (an answer the item already has
//!   is a no-op, another label for a labeled item is refused); once `retrain_every` new
//!   labels arrived, or on `START_TRAINING` (and the legacy `POST /train`), the model
//!   retrains on a background thread and ranks the pool again. Answers arriving while it
//!   trains wait in the session's [`journal`] (written atomically before the reply) and
//!   are taught when it is done, or by whatever opens the session next.
//!
//! Label Studio sends each webhook once: an answer given while the backend was down is never
//! sent again. Given Label Studio's URL and an API token ([`LabelStudioApi`]), the backend
//! reads the project's annotations back when it starts and on `START_TRAINING`, and teaches
//! what it missed by the same checks (`reconcile.rs`); the project is the one Label Studio
//! last named in a request, remembered in the session folder ([`PROJECT_FILE`]).
//!
//! Every request must carry the session's secret ([`secret`], kept in the session folder so
//! that Label Studio's saved connection outlives a restart): as the first path segment (the
//! connection URL `http://HOST:PORT/SECRET`, which Label Studio's webhook inherits) or as
//! the password of Basic authentication. It binds loopback unless told otherwise, holds the
//! session's lock for its life, and saves every answer before replying. Request bodies are
//! read into typed values that keep only what the backend uses (`requests.rs`), within a
//! budget of bytes shared by every connection ([`BODY_BUDGET`]), so that no request, and no
//! number of them, costs memory out of proportion to what the backend holds.

mod reconcile;
pub mod requests;

pub use reconcile::LabelStudioApi;
pub use requests::MAX_TASKS;

use super::conn::Limits;
use super::http::{self, Reply};
use super::state::guard;
use crate::error::{Error, Result};
use crate::label_studio::{
    image_folder, image_path, model_version, ordered_confidence, short, ExportRow, FROM_NAME,
};
use crate::observe::Silent;
use crate::session::journal::{self, Queued};
use crate::session::{Answer, Learner, PoolItems, QueryRequest, SessionLock, SessionState};
use candle_core::Device;
use requests::{Annotation, ProjectId, Task};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

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

/// The session's backend secret: read from `DIR/label-studio-secret`, or made (128 random
/// bits) and written there with owner-only permissions on first use.
pub fn secret(dir: &Path) -> Result<String> {
    let path = dir.join(SECRET_FILE);
    match std::fs::read_to_string(&path) {
        Ok(s) => {
            let s = s.trim().to_string();
            if s.len() < 16 || !s.bytes().all(|b| b.is_ascii_alphanumeric()) {
                return Err(Error::state(
                    &path,
                    "not a backend secret (at least 16 letters or digits); delete it to make \
                     a new one",
                ));
            }
            Ok(s)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let s = http::new_token()?;
            // Readable by its owner only from the moment it exists, then renamed into place.
            let tmp = dir.join(format!(".{SECRET_FILE}.{}", std::process::id()));
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create(true).truncate(true);
            #[cfg(unix)]
            {
                use std::os::unix::fs::OpenOptionsExt;
                options.mode(0o600);
            }
            let written = options
                .open(&tmp)
                .and_then(|mut f| {
                    use std::io::Write;
                    f.write_all(format!("{s}\n").as_bytes())?;
                    f.sync_all()
                })
                .and_then(|()| std::fs::rename(&tmp, &path));
            if let Err(e) = written {
                let _ = std::fs::remove_file(&tmp);
                return Err(Error::io(&path, e));
            }
            Ok(s)
        }
        Err(e) => Err(Error::io(&path, e)),
    }
}

/// The model's view of one pool item.
#[derive(Clone, Copy)]
struct View {
    /// Its most probable class.
    class: usize,
    /// That class's probability.
    prob: f32,
    /// The prediction's `score` (see [`ordered_confidence`]).
    score: f64,
    /// Its rank from 1 among the ranked candidates (`None`: labeled).
    rank: Option<usize>,
    /// Its acquisition score, when the strategy scores items.
    acquisition: Option<f32>,
}

/// The last model and its view of every pool item.
struct Model {
    round: usize,
    items: Vec<View>,
}

struct Inner {
    /// `None` while the training thread holds it.
    learner: Option<Learner>,
    state: SessionState,
    model: Option<Model>,
    /// Labels taught since the last training started.
    since: usize,
    /// A retraining was asked for while one ran.
    again: bool,
    /// Answers waiting for the training to end.
    queue: Vec<Queued>,
    error: Option<String>,
}

/// Bytes of request bodies held at once, shared by every connection ([`BODY_BUDGET`]).
struct Budget {
    left: Mutex<u64>,
    freed: Condvar,
}

/// Bytes taken from the [`Budget`], given back when dropped.
struct Taken<'a> {
    budget: &'a Budget,
    bytes: u64,
}

impl Budget {
    fn new(total: u64) -> Budget {
        Budget {
            left: Mutex::new(total),
            freed: Condvar::new(),
        }
    }

    /// `bytes` of the budget, waiting up to `wait` for them; `None` when they never came.
    fn take(&self, bytes: u64, wait: Duration) -> Option<Taken<'_>> {
        let until = Instant::now() + wait;
        let mut left = guard(&self.left);
        while *left < bytes {
            let now = Instant::now();
            if now >= until {
                return None;
            }
            left = self
                .freed
                .wait_timeout(left, until - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        *left -= bytes;
        Some(Taken {
            budget: self,
            bytes,
        })
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        *guard(&self.budget.left) += self.bytes;
        self.budget.freed.notify_all();
    }
}

struct App {
    dir: PathBuf,
    items: PoolItems,
    /// Tasks may name items by image path (an image-folder pool).
    image_folder: bool,
    api: Option<LabelStudioApi>,
    /// The Label Studio project served, as last named (or given).
    project: Mutex<Option<u64>>,
    /// A catch-up is reading the project.
    catching_up: AtomicBool,
    budget: Budget,
    secret: String,
    hosts: Option<Vec<String>>,
    version: String,
    request: QueryRequest,
    retrain_every: usize,
    device: Device,
    events: BackendEvents,
    inner: Mutex<Inner>,
    _lock: SessionLock,
}

/// A Label Studio ML backend bound to its port (see the module docs).
pub struct LabelStudioBackend {
    listener: TcpListener,
    limits: Limits,
    stop: Arc<AtomicBool>,
    app: Arc<App>,
    addr: SocketAddr,
}

impl LabelStudioBackend {
    /// Binds the backend for the session in `dir` (held by `lock`, loaded as `learner`),
    /// teaching first any answers left queued by a backend that stopped while training.
    pub fn bind(
        dir: &Path,
        lock: SessionLock,
        mut learner: Learner,
        settings: BackendSettings,
        events: BackendEvents,
    ) -> Result<LabelStudioBackend> {
        settings.limits.check()?;
        if settings.retrain_every == 0 {
            return Err(Error::config(
                "retrain_every",
                "0 new labels: retraining needs at least one",
            ));
        }
        if matches!(
            settings.request.strategy.pick(),
            crate::round::Pick::Batch(_)
        ) {
            return Err(Error::config(
                "strategy",
                format!(
                    "`{}` chooses a batch jointly and ranks no single item; the backend \
                     orders the whole pool, so it needs a scorer (entropy, bald, ...)",
                    settings.request.strategy.name()
                ),
            ));
        }
        let secret = secret(dir)?;
        // (`session::open` has taught a journal left by a backend that stopped; one that
        // bound a learner of its own gets it taught here.)
        journal::replay(&mut learner, dir)?;
        let (listener, addr, hosts) = super::listen(settings.host, settings.port)?;
        let state = learner.state().clone();
        let project = match settings.project {
            Some(p) => Some(p),
            None => read_project(dir)?,
        };
        let app = App {
            dir: dir.to_path_buf(),
            items: learner.shared_items(),
            image_folder: image_folder(&state),
            api: settings.label_studio,
            project: Mutex::new(project),
            catching_up: AtomicBool::new(false),
            budget: Budget::new(BODY_BUDGET),
            secret,
            hosts,
            version: model_version(&state),
            request: settings.request,
            retrain_every: settings.retrain_every,
            device: settings.device,
            events,
            inner: Mutex::new(Inner {
                learner: Some(learner),
                state,
                model: None,
                since: 0,
                again: false,
                queue: Vec::new(),
                error: None,
            }),
            _lock: lock,
        };
        Ok(LabelStudioBackend {
            listener,
            limits: settings.limits,
            stop: Arc::new(AtomicBool::new(false)),
            app: Arc::new(app),
            addr,
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URL to enter as the model's URL in Label Studio, secret included.
    pub fn url(&self) -> String {
        let ip = self.addr.ip();
        let shown = if ip.is_unspecified() || ip.is_loopback() {
            "127.0.0.1".to_string()
        } else if ip.is_ipv6() {
            format!("[{ip}]")
        } else {
            ip.to_string()
        };
        format!("http://{shown}:{}/{}", self.addr.port(), self.app.secret)
    }

    /// The secret (Basic authentication's password, or the URL's first segment).
    pub fn secret(&self) -> &str {
        &self.app.secret
    }

    /// The `model_version` of its predictions.
    pub fn model_version(&self) -> &str {
        &self.app.version
    }

    /// What stops [`LabelStudioBackend::run`] from another thread.
    pub fn stopper(&self) -> super::Stopper {
        super::Stopper {
            stop: Arc::clone(&self.stop),
            addr: self.addr,
        }
    }

    /// Serves until stopped. A session with labels trains its first model at once, in the
    /// background, after reading back from Label Studio what it missed (when it can); until
    /// the model is ready, predictions are answered with an error per task.
    pub fn run(self) -> Result<()> {
        let app = Arc::clone(&self.app);
        std::thread::spawn(move || {
            app.catch_up();
            let mut inner = guard(&app.inner);
            if !inner.state.labeled.is_empty() {
                app.start_round(&mut inner);
            }
        });
        let app = Arc::clone(&self.app);
        super::serve_until_stopped(
            &self.listener,
            &self.limits,
            &self.stop,
            Arc::new(move |req: &mut http::Request<'_>| app.route(req)),
        )
    }
}

/// The `name` and `toName` of the first `Choices` tag of a labeling configuration.
fn choices_tag(config: &str) -> Option<(String, String)> {
    let at = config.find("<Choices")?;
    let tag = &config[at..];
    let tag = &tag[..tag.find('>')?];
    let attr = |name: &str| {
        let k = tag.find(&format!(" {name}=\""))? + name.len() + 3;
        let v = &tag[k..];
        Some(v[..v.find('"')?].to_string())
    };
    Some((attr("name")?, attr("toName")?))
}

impl App {
    fn route(self: &Arc<Self>, req: &mut http::Request<'_>) -> Reply {
        if let Err(r) = super::http::host_ok(&self.hosts, req) {
            return r;
        }
        let url = req.url().to_string();
        let (path, _) = http::split_url(&url);
        // The secret as the first segment, or as Basic authentication's password; both
        // compared in constant time.
        let after = path.strip_prefix('/').unwrap_or("");
        let end = after.find('/').unwrap_or(after.len());
        let route = http::same_token(&after[..end], &self.secret).then(|| &after[end..]);
        let route = match route {
            Some(r) => r,
            None if http::basic_password(req)
                .is_some_and(|p| http::same_token(&p, &self.secret)) =>
            {
                path
            }
            None => {
                return Reply::error(
                    401,
                    "missing or wrong secret: use the URL alkit printed, or Basic \
                     authentication with the secret as password",
                )
            }
        };
        let route = route.trim_end_matches('/');
        let get = matches!(req.method(), "GET" | "HEAD");
        let post = req.method() == "POST";
        match route {
            "" | "/health" if get => self.health(),
            "/versions" if get => Reply::json(200, &json!({ "versions": [self.version] })),
            "/setup" if post => match self.body::<requests::Setup>(req) {
                Ok((b, _held)) => {
                    self.remember(b.project);
                    Reply::json(200, &json!({ "model_version": self.version }))
                }
                Err(e) => e,
            },
            "/predict" if post => match self.body::<requests::Predict>(req) {
                Ok((b, _held)) => self.predict(&b),
                Err(e) => e,
            },
            "/webhook" if post => match self.raw_body(req) {
                Ok((bytes, _held)) => self.webhook(&bytes),
                Err(e) => e,
            },
            "/train" if post => match self.body::<requests::Train>(req) {
                Ok((b, _held)) => self.train(&b),
                Err(e) => e,
            },
            "" | "/health" | "/versions" | "/setup" | "/predict" | "/webhook" | "/train" => {
                Reply::error(405, "method not allowed")
            }
            _ => Reply::error(404, "no such endpoint"),
        }
    }

    /// The request's body, read within the shared budget of body bytes, which the returned
    /// share holds until it is dropped (after the answer is made).
    fn raw_body(
        &self,
        req: &mut http::Request<'_>,
    ) -> std::result::Result<(Vec<u8>, Taken<'_>), Reply> {
        let declared = req.body_length();
        if declared > MAX_REQUEST as u64 {
            return Err(Reply::error(
                413,
                format!("bodies are at most {MAX_REQUEST} bytes"),
            ));
        }
        // Twice the body: its bytes, and what is parsed from them.
        let Some(taken) = self.budget.take(2 * declared, BODY_WAIT) else {
            let mut r = Reply::error(
                503,
                "the backend holds as many request bodies as it may; try again",
            );
            r.headers.push(("Retry-After", "1".to_string()));
            return Err(r);
        };
        Ok((http::body_bytes(req, MAX_REQUEST)?, taken))
    }

    /// The request's JSON body as `T` (see [`App::raw_body`]).
    fn body<T: DeserializeOwned>(
        &self,
        req: &mut http::Request<'_>,
    ) -> std::result::Result<(T, Taken<'_>), Reply> {
        let (bytes, taken) = self.raw_body(req)?;
        let value = serde_json::from_slice(&bytes)
            .map_err(|e| Reply::error(400, format!("invalid JSON body: {e}")))?;
        Ok((value, taken))
    }

    /// Keeps the project Label Studio named, in memory and in the session folder.
    fn remember(&self, project: ProjectId) {
        let Some(p) = project.0 else { return };
        let mut known = guard(&self.project);
        if *known != Some(p) {
            *known = Some(p);
            if let Err(e) = write_project(&self.dir, p) {
                let m = e.to_string();
                (self.events)(&BackendEvent::Failed { problem: &m });
            }
        }
    }

    /// Reads the project's answers back from Label Studio and teaches those the session
    /// lacks (module docs); reports what it did, or why it could not.
    fn catch_up(self: &Arc<Self>) {
        let (Some(api), Some(project)) = (&self.api, *guard(&self.project)) else {
            return;
        };
        // One at a time: a second Start Training while the project is read asks for nothing
        // the first does not do.
        if self.catching_up.swap(true, Ordering::SeqCst) {
            return;
        }
        let items = &self.items;
        let namer =
            |url: &str| image_path::item_of_image(items, url).map(|i| items.ids()[i].clone());
        let images = self.image_folder.then_some(&namer as _);
        let read = api.answers(project, images);
        self.catching_up.store(false, Ordering::SeqCst);
        let (rows, problems) = match read {
            Ok(r) => r,
            Err(e) => {
                let m = e.to_string();
                (self.events)(&BackendEvent::Failed { problem: &m });
                return;
            }
        };
        for m in &problems {
            (self.events)(&BackendEvent::Refused { problem: m });
        }
        let taught = self.teach_missed(&rows);
        (self.events)(&BackendEvent::Reconciled {
            project,
            answers: rows.len(),
            taught,
        });
    }

    /// Teaches the answers read back from Label Studio that the session lacks, in one batch
    /// and one save (or one journal write while the model trains); each one the session's
    /// checks refuse is reported and left out. Returns how many were new.
    fn teach_missed(&self, rows: &[ExportRow]) -> usize {
        let mut inner = guard(&self.inner);
        let inner = &mut *inner;
        let mut new: Vec<Queued> = Vec::new();
        for r in rows {
            let task = r.task.unwrap_or(0);
            let refuse = |m: String| (self.events)(&BackendEvent::Refused { problem: &m });
            if self.items.position(&r.id).is_none() {
                refuse(format!(
                    "Label Studio task {task}: `{}` is not an item of the session's pool",
                    r.id
                ));
                continue;
            }
            if !inner.state.classes.contains(&r.label) {
                refuse(format!(
                    "Label Studio task {task}: `{}` is not one of the classes {:?}",
                    r.label, inner.state.classes
                ));
                continue;
            }
            let held = inner
                .state
                .labeled
                .iter()
                .find(|l| l.id == r.id)
                .map(|l| &l.label);
            let waiting = inner
                .queue
                .iter()
                .chain(&new)
                .find(|q| q.id == r.id)
                .map(|q| &q.label);
            match held.or(waiting) {
                Some(l) if *l == r.label => {}
                Some(l) => refuse(format!(
                    "Label Studio task {task}: `{}` is already labeled `{l}`; Label Studio says `{}`",
                    r.id, r.label
                )),
                None => new.push(Queued {
                    task: Some(task),
                    ..Queued::new(r.id.clone(), r.label.clone())
                }),
            }
        }
        if new.is_empty() {
            return 0;
        }
        let count = new.len();
        let saved = match inner.learner.as_mut() {
            Some(learner) => {
                let answers: Vec<Answer> = new
                    .iter()
                    .enumerate()
                    .map(|(k, q)| Answer::new(k + 1, q.id.clone(), q.label.clone()))
                    .collect();
                let origin = PathBuf::from("Label Studio's project, read back");
                learner
                    .teach_file_answers(&answers, &origin)
                    .and_then(|_| learner.save_state(&self.dir))
                    .map(|()| inner.state = learner.state().clone())
            }
            None => {
                inner.queue.extend(new);
                journal::write(&self.dir, &inner.queue)
            }
        };
        if let Err(e) = saved {
            let m = format!("the answers read back from Label Studio were not saved: {e}");
            (self.events)(&BackendEvent::Failed { problem: &m });
            return 0;
        }
        inner.since += count;
        count
    }

    fn health(&self) -> Reply {
        let inner = guard(&self.inner);
        Reply::json(
            200,
            &json!({
                "status": "UP",
                "model_class": "alkit",
                "model_version": self.version,
                "round": inner.model.as_ref().map(|m| m.round),
                "training": inner.learner.is_none(),
                "labeled": inner.state.labeled.len(),
                "queued": inner.queue.len(),
                "error": inner.error,
            }),
        )
    }

    fn refuse(&self, status: u16, problem: String) -> Reply {
        (self.events)(&BackendEvent::Refused { problem: &problem });
        Reply::error(status, problem)
    }

    /// The pool item of a task: its `data.alkit_id`, or the pool image its data's URL or
    /// path names.
    fn item_of(&self, task: &Task) -> std::result::Result<usize, String> {
        let name = task
            .id
            .map_or("a task".to_string(), |t| format!("task {t}"));
        let Some(data) = &task.data else {
            return Err(format!("{name} has no `data` object"));
        };
        if let Some(id) = data.get("alkit_id") {
            return self
                .items
                .position(id)
                .ok_or_else(|| format!("{name}: `{id}` is not an item of the session's pool"));
        }
        if !self.image_folder {
            return Err(format!(
                "{name} has no `data.alkit_id`, and the pool is not an image folder whose \
                 paths could name it"
            ));
        }
        let named = data.0.iter().map(|(_, u)| {
            image_path::item_of_image(&self.items, u).map(|i| self.items.ids()[i].clone())
        });
        let found = image_path::one_item(named).map_err(|e| format!("{name}: {e}"))?;
        let id = found.ok_or_else(|| {
            format!("{name} has no `data.alkit_id` and no image path of the pool's folder")
        })?;
        self.items
            .position(&id)
            .ok_or_else(|| format!("{name}: `{id}` is not an item of the session's pool"))
    }

    fn predict(&self, body: &requests::Predict) -> Reply {
        let started = std::time::Instant::now();
        self.remember(body.project);
        let tasks = &body.tasks.0;
        let (from, to) = match body.label_config.as_deref() {
            Some(c) => match choices_tag(c) {
                Some(t) => t,
                None => {
                    return self.refuse(
                        400,
                        "the project's labeling configuration has no `Choices` tag".into(),
                    )
                }
            },
            None => (FROM_NAME.to_string(), self.items.object_name().to_string()),
        };
        let inner = guard(&self.inner);
        let mut predicted = 0;
        let results: Vec<Value> = tasks
            .iter()
            .map(|t| {
                let i = match self.item_of(t) {
                    Ok(i) => i,
                    Err(e) => return json!({ "error": e }),
                };
                let Some(model) = &inner.model else {
                    return json!({
                        "error": "no model yet: alkit predicts once it has trained on the \
                                  session's labels"
                    });
                };
                let View {
                    class,
                    prob,
                    score,
                    rank,
                    acquisition,
                } = model.items[i];
                predicted += 1;
                json!({
                    "model_version": self.version,
                    "score": score,
                    "result": [{
                        "from_name": from,
                        "to_name": to,
                        "type": "choices",
                        "value": { "choices": [inner.state.classes[class]] },
                        "score": short(prob),
                        "meta": {
                            "alkit_round": model.round,
                            "alkit_rank": rank,
                            "alkit_score": acquisition.map(short),
                        },
                    }],
                })
            })
            .collect();
        drop(inner);
        (self.events)(&BackendEvent::Predicted {
            tasks: tasks.len(),
            predicted,
            seconds: started.elapsed().as_secs_f64(),
        });
        Reply::json(
            200,
            &json!({ "results": results, "model_version": self.version }),
        )
    }

    /// An event: its action read first, the rest only for the actions the backend acts on, so
    /// that an event it ignores is acknowledged whatever else it carries.
    fn webhook(self: &Arc<Self>, bytes: &[u8]) -> Reply {
        let event = match serde_json::from_slice::<requests::Event>(bytes) {
            Ok(e) => e,
            Err(e) => return Reply::error(400, format!("invalid JSON body: {e}")),
        };
        self.remember(event.project);
        let action = event.action.as_deref().unwrap_or("");
        if action == "START_TRAINING" {
            // What was missed first (reading the project takes seconds): the answer comes
            // at once, the training after the catching up.
            let app = Arc::clone(self);
            std::thread::spawn(move || {
                app.catch_up();
                app.train_now();
            });
            return Reply::json(200, &json!({ "status": "ok", "job": "alkit" }));
        }
        if !matches!(
            action,
            "ANNOTATION_CREATED" | "ANNOTATION_UPDATED" | "ANNOTATIONS_CREATED"
        ) {
            // Other events (tasks imported, projects updated, annotations deleted) change
            // nothing alkit holds: a deleted answer stays taught until taken back by hand.
            return Reply::json(200, &json!({ "status": "ignored", "action": action }));
        }
        let body = match serde_json::from_slice::<requests::Webhook>(bytes) {
            Ok(b) => b,
            Err(e) => return self.refuse(400, format!("{action}: {e}")),
        };
        let pairs = body.pairs();
        if pairs.is_empty() || body.task.0.is_empty() {
            return self.refuse(400, format!("{action} without `task` and `annotation`"));
        }
        // Several at once (annotations made from predictions): each taught by itself, the
        // answer the first refusal's, if any.
        let (mut first, mut refused) = (None, None);
        for (task, annotation) in pairs {
            let r = match task {
                Some(t) => self.answer(t, annotation),
                None => self.refuse(
                    422,
                    format!("{action}: an annotation of a task the event does not hold"),
                ),
            };
            if r.status >= 400 && refused.is_none() {
                refused = Some(r);
            } else if first.is_none() {
                first = Some(r);
            }
        }
        refused
            .or(first)
            .unwrap_or_else(|| Reply::json(200, &json!({ "status": "ok" })))
    }

    /// The legacy train endpoint: every annotated task of the project, then a retraining.
    fn train(self: &Arc<Self>, body: &requests::Train) -> Reply {
        self.remember(body.project);
        for t in body.annotations.iter().flat_map(|a| &a.0) {
            let task = t.task();
            for a in t.annotations.iter().flat_map(|a| &a.0) {
                let r = self.answer(&task, a);
                if r.status >= 400 {
                    return r;
                }
            }
        }
        self.train_now()
    }

    fn train_now(self: &Arc<Self>) -> Reply {
        let mut inner = guard(&self.inner);
        if inner.learner.is_none() {
            inner.again = true;
        } else {
            self.start_round(&mut inner);
        }
        Reply::json(200, &json!({ "status": "ok", "job": "alkit" }))
    }

    fn answer(self: &Arc<Self>, task: &Task, annotation: &Annotation) -> Reply {
        let tid = task.id.unwrap_or(0);
        let i = match self.item_of(task) {
            Ok(i) => i,
            Err(e) => return self.refuse(422, e),
        };
        let label = match annotation.choice() {
            Ok(Some(c)) => c,
            Ok(None) => return Reply::json(200, &json!({ "status": "no choice" })),
            Err(e) => return self.refuse(422, format!("task {tid}: {e}")),
        };
        self.answer_item(tid, i, label)
    }

    /// Teaches Label Studio task `tid`'s answer `label` for pool item `i` by the session's
    /// checks (queued while the model trains); the reply's `status` says what happened.
    fn answer_item(self: &Arc<Self>, tid: u64, i: usize, label: String) -> Reply {
        let id = self.items.ids()[i].clone();
        let mut inner = guard(&self.inner);
        let inner = &mut *inner;
        if !inner.state.classes.contains(&label) {
            return self.refuse(
                422,
                format!(
                    "task {tid}: `{label}` is not one of the classes {:?}",
                    inner.state.classes
                ),
            );
        }
        if let Some(l) = inner.state.labeled.iter().find(|l| l.id == id) {
            if l.label != label {
                let m = format!(
                    "task {tid}: `{id}` is already labeled `{}` (round {}); this annotation \
                     says `{label}`",
                    l.label, l.round
                );
                return self.refuse(409, m);
            }
            (self.events)(&BackendEvent::Taught {
                task: tid,
                id: &id,
                label: &label,
                repeated: true,
                labeled: inner.state.labeled.len(),
            });
            return Reply::json(200, &json!({ "status": "repeated" }));
        }
        let Some(learner) = inner.learner.as_mut() else {
            // Training: checked against the state as saved, taught when it is done.
            if let Some(q) = inner.queue.iter().find(|q| q.id == id) {
                if q.label != label {
                    let m = format!(
                        "task {tid}: `{id}` waits to be taught `{}`; this annotation says \
                         `{label}`",
                        q.label
                    );
                    return self.refuse(409, m);
                }
                return Reply::json(200, &json!({ "status": "queued" }));
            }
            inner.queue.push(Queued {
                task: Some(tid),
                ..Queued::new(id, label)
            });
            if let Err(e) = journal::write(&self.dir, &inner.queue) {
                inner.queue.pop();
                return self.refuse(500, format!("the answer was not saved: {e}"));
            }
            (self.events)(&BackendEvent::Queued {
                task: tid,
                waiting: inner.queue.len(),
            });
            return Reply::json(200, &json!({ "status": "queued" }));
        };
        let origin = PathBuf::from(format!("Label Studio task {tid}"));
        let answer = Answer::new(1, id.clone(), label.clone());
        let undo = match learner.teach_one(&answer, &origin) {
            Ok(u) => u,
            Err(e) => return self.refuse(409, e.to_string()),
        };
        if let Err(e) = learner.save_state(&self.dir) {
            // Not saved, so not taken: taken back where it can be (in round 0 it cannot:
            // then it stays taught in memory, and the next save writes it).
            if learner.undo(undo).is_ok() {
                return self.refuse(500, format!("the answer was not saved: {e}"));
            }
            inner.state = learner.state().clone();
            return self.refuse(
                500,
                format!(
                    "`{id}` = `{label}` is taught but session.json could not be written ({e}); \
                     the next save writes it"
                ),
            );
        }
        inner.state = learner.state().clone();
        inner.since += 1;
        (self.events)(&BackendEvent::Taught {
            task: tid,
            id: &id,
            label: &label,
            repeated: false,
            labeled: inner.state.labeled.len(),
        });
        if inner.since >= self.retrain_every {
            self.start_round(inner);
        }
        Reply::json(200, &json!({ "status": "ok" }))
    }

    fn start_round(self: &Arc<Self>, inner: &mut Inner) {
        let Some(learner) = inner.learner.take() else {
            inner.again = true;
            return;
        };
        if learner.state().labeled.is_empty() || learner.candidates(true).is_empty() {
            inner.learner = Some(learner);
            return;
        }
        inner.since = 0;
        inner.again = false;
        (self.events)(&BackendEvent::RoundStarted {
            round: learner.state().rounds.len() + 1,
            labeled: learner.state().labeled.len(),
        });
        let app = Arc::clone(self);
        std::thread::spawn(move || app.run_round(learner));
    }

    fn run_round(self: Arc<Self>, mut learner: Learner) {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let ranked = learner.rank(&self.request, &self.device, &mut Silent)?;
            let all: Vec<usize> = (0..self.items.ids().len()).collect();
            let Some(pred) = learner.predicted(&all, &self.device)? else {
                return Err(Error::config(
                    "strategy",
                    "the round trained no model to predict with",
                ));
            };
            learner.save(&self.dir)?;
            let conf: Vec<f32> = ranked.iter().map(|q| pred[q.index].1).collect();
            let scores = ordered_confidence(&conf);
            let mut items: Vec<View> = pred
                .iter()
                .map(|&(class, prob)| View {
                    class,
                    prob,
                    // After every ranked item (their scores are below 1): labeled items,
                    // and with a subsample the unlabeled items it left out.
                    score: 1.0,
                    rank: None,
                    acquisition: None,
                })
                .collect();
            for (k, (q, s)) in ranked.iter().zip(scores).enumerate() {
                let v = &mut items[q.index];
                v.score = s;
                v.rank = Some(k + 1);
                v.acquisition = q.score;
            }
            Ok::<_, Error>((ranked.len(), items))
        }));
        let mut inner = guard(&self.inner);
        let inner = &mut *inner;
        match result {
            Ok(Ok((ranked, items))) => {
                let r = learner.state().rounds.last();
                let round = r.map_or(0, |r| r.round);
                (self.events)(&BackendEvent::RoundFinished {
                    round,
                    ranked,
                    test_acc: r.and_then(|r| r.test_acc),
                });
                inner.model = Some(Model { round, items });
                inner.error = None;
            }
            Ok(Err(e)) => {
                let m = e.to_string();
                (self.events)(&BackendEvent::Failed { problem: &m });
                inner.error = Some(m);
            }
            Err(_) => {
                let m = "retraining failed inside alkit (a bug); the answers are saved".to_string();
                (self.events)(&BackendEvent::Failed { problem: &m });
                inner.error = Some(m);
            }
        }
        // The answers that came while it trained.
        let queue = std::mem::take(&mut inner.queue);
        for q in &queue {
            let (task, answer) = (q.task.unwrap_or(0), Answer::new(1, &q.id, &q.label));
            let origin = PathBuf::from(format!("Label Studio task {task}"));
            match learner.teach_file_answers(&[answer], &origin) {
                Ok(t) => {
                    inner.since += t.taught;
                    (self.events)(&BackendEvent::Taught {
                        task,
                        id: &q.id,
                        label: &q.label,
                        repeated: t.repeated > 0,
                        labeled: learner.state().labeled.len(),
                    });
                }
                Err(e) => {
                    // Refused by the session's checks (a label taught meanwhile says
                    // otherwise): reported, and not kept.
                    let m = e.to_string();
                    (self.events)(&BackendEvent::Refused { problem: &m });
                }
            }
        }
        if !queue.is_empty() {
            let saved = learner
                .save_state(&self.dir)
                .and_then(|()| journal::clear(&self.dir));
            if let Err(e) = saved {
                // The journal still holds them; kept waiting too, so that a journal written
                // for the next answer still holds them (taught again, they are repeats).
                let m = format!("the queued answers were not saved: {e}");
                (self.events)(&BackendEvent::Failed { problem: &m });
                inner.queue = queue;
            }
        }
        inner.state = learner.state().clone();
        inner.learner = Some(learner);
        if inner.again || inner.since >= self.retrain_every {
            self.start_round(inner);
        }
    }
}

/// The project remembered in `dir` ([`PROJECT_FILE`]), if any.
fn read_project(dir: &Path) -> Result<Option<u64>> {
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
fn write_project(dir: &Path, project: u64) -> Result<()> {
    crate::fsutil::write_atomic(&dir.join(PROJECT_FILE), format!("{project}\n").as_bytes())
}
