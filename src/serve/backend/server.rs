//! The backend bound to its port: its settings checked, the session's learner taken in (the
//! journal a stopped backend left taught first), the first round started once it serves.

use super::app::{App, Inner};
use super::budget::Budget;
use super::secret::secret;
use super::settings::{read_project, BackendEvents, BackendSettings, BODY_BUDGET};
use crate::error::{Error, Result};
use crate::label_studio::{image_folder, model_version};
use crate::serve::conn::Limits;
use crate::serve::http;
use crate::serve::state::guard;
use crate::session::journal;
use crate::session::{Learner, SessionLock};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

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
        let (listener, addr, hosts) = crate::serve::listen(settings.host, settings.port)?;
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
    pub fn stopper(&self) -> crate::serve::Stopper {
        crate::serve::Stopper {
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
        crate::serve::serve_until_stopped(
            &self.listener,
            &self.limits,
            &self.stop,
            Arc::new(move |req: &mut http::Request<'_>| app.route(req)),
        )
    }
}
