//! `alkit label`: a labeling page in the browser over a session folder; and, on the same
//! connection layer, the Label Studio ML backend ([`backend`], `alkit serve-label-studio`).
//!
//! [`LabelServer`] serves one page and a small JSON API on a local port. The page shows the
//! session's pending batch item by item and takes one key per class; every answer goes
//! through [`Learner::teach_one`] (the checks of `alkit teach`) and is in `session.json`
//! (written atomically) before the page hears back, so closing the tab or killing the server
//! loses nothing. When the batch is answered (or on the page's button) a background thread
//! retrains and queries the next batch through [`Learner::query`], the same round as
//! `alkit query`, while the page shows its progress and keeps serving: the open items of the
//! batch, then the last ranking's next items (a seeded random draw where no ranking exists:
//! random picks, joint batch criteria, a server just started). Those answers wait in the
//! session's [`journal`](crate::session::journal) (written before the page hears back) and
//! are taught, in the round they were given after, when the model is ready; the new batch
//! then swaps in.
//!
//! It lives here, above the loops, because it drives a session; the HTTP details (token,
//! host, bodies) are in [`http`], the connections and their bounds ([`Limits`]) in `conn.rs`.
//! The server is the standard library's sockets and `httparse` for request heads: synchronous,
//! no async runtime (a page with one person behind it does not need one), and every
//! connection on its own thread from a bounded number, each held to a deadline, so that a
//! stalled or slow client never delays another's answer. Requests run concurrently; each
//! change takes the session's state lock for the whole of its check and save, so two tabs
//! cannot interleave inside an answer, and the session folder is
//! [`lock`](crate::session::lock)ed for the server's life against other processes.

pub mod backend;
mod conn;
pub mod http;
mod page;
mod state;
mod waiting;
mod worker;

pub use conn::Limits;
pub use page::class_keys;
pub use state::{Events, ServeEvent};

use state::{guard, ranks, App, Inner};

use crate::data::source::Source;
use crate::error::{Error, Result};
use crate::session::{Learner, QueryRequest, SessionLock};
use candle_core::Device;
use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// How a labeling server listens and what it asks for.
#[derive(Clone)]
pub struct ServeSettings {
    /// Address to bind (`127.0.0.1` unless the person asks for another).
    pub host: IpAddr,
    /// Port; 0 picks a free one.
    pub port: u16,
    /// How each next batch is chosen (strategy, size, subsample).
    pub request: QueryRequest,
    /// Where training and scoring run.
    pub device: Device,
    /// How long and how many connections a client may hold ([`Limits::default`]).
    pub limits: Limits,
}

/// A labeling page bound to its port (see the module docs).
pub struct LabelServer {
    listener: TcpListener,
    limits: Limits,
    stop: Arc<AtomicBool>,
    app: Arc<App>,
    url: String,
    addr: SocketAddr,
}

/// Stops a [`LabelServer::run`] from another thread.
#[derive(Clone)]
pub struct Stopper {
    stop: Arc<AtomicBool>,
    addr: SocketAddr,
}

impl Stopper {
    /// Makes `run` return: no connection is accepted after this; those being served finish
    /// on their own threads within their bounds.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        // `accept` blocks: one connection wakes it to see the flag.
        let mut addr = self.addr;
        if addr.ip().is_unspecified() {
            addr.set_ip(match addr {
                SocketAddr::V4(_) => IpAddr::from([127, 0, 0, 1]),
                SocketAddr::V6(_) => IpAddr::from([0, 0, 0, 0, 0, 0, 0, 1]),
            });
        }
        let _ = TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(1));
    }
}

fn listen(host: IpAddr, port: u16) -> Result<(TcpListener, SocketAddr, Option<Vec<String>>)> {
    let cannot =
        |e: std::io::Error| Error::config("port", format!("cannot listen on {host}:{port}: {e}"));
    let listener = TcpListener::bind(SocketAddr::new(host, port)).map_err(cannot)?;
    let addr = listener.local_addr().map_err(cannot)?;
    let port = addr.port();
    let hosts = host.is_loopback().then(|| {
        vec![
            format!("127.0.0.1:{port}"),
            format!("localhost:{port}"),
            format!("[::1]:{port}"),
        ]
    });
    Ok((listener, addr, hosts))
}

/// Serves `listener` with `handler` until `stop` (see [`conn::serve`]); a failing listener is
/// an error naming the server's address.
fn serve_until_stopped(
    listener: &TcpListener,
    limits: &Limits,
    stop: &AtomicBool,
    handler: Arc<conn::Handler>,
) -> Result<()> {
    conn::serve(listener, limits, stop, &handler).map_err(|e| Error::Io {
        path: PathBuf::from(match listener.local_addr() {
            Ok(a) => format!("http://{a}"),
            Err(_) => "the server's address".into(),
        }),
        cause: e,
    })
}

impl LabelServer {
    /// Binds the page for the session in `dir` (held by `lock`, loaded as `learner`). The
    /// URL to open, with a fresh random token, is [`LabelServer::url`].
    pub fn bind(
        dir: &Path,
        lock: SessionLock,
        learner: Learner,
        settings: ServeSettings,
        events: Events,
    ) -> Result<LabelServer> {
        settings.limits.check()?;
        let token = http::new_token()?;
        let (listener, addr, hosts) = listen(settings.host, settings.port)?;
        let port = addr.port();
        let shown = if settings.host.is_unspecified() || settings.host.is_loopback() {
            "127.0.0.1".to_string()
        } else {
            match settings.host {
                IpAddr::V6(a) => format!("[{a}]"),
                a => a.to_string(),
            }
        };
        let url = format!("http://{shown}:{port}/?token={token}");
        let items = learner.shared_items();
        let state = learner.state().clone();
        let pending: Vec<usize> = state
            .pending
            .iter()
            .filter_map(|p| items.position(&p.id))
            .collect();
        items.prefetch(&pending)?;
        let folder = match Source::parse(&state.source) {
            Ok(Source::Images(d)) => Some(d),
            _ => None,
        };
        let app = App {
            dir: dir.to_path_buf(),
            items,
            folder,
            classes: state.classes.clone(),
            token,
            hosts,
            request: settings.request,
            device: settings.device,
            events,
            inner: Mutex::new(Inner {
                learner: Some(learner),
                ranks: ranks(&state),
                state,
                skipped: HashSet::new(),
                spare_skips: HashSet::new(),
                undo: Vec::new(),
                predicted: HashMap::new(),
                spares: Vec::new(),
                queue: Vec::new(),
                error: None,
                exhausted: false,
            }),
            progress: Mutex::new(None),
            _lock: lock,
        };
        Ok(LabelServer {
            listener,
            limits: settings.limits,
            stop: Arc::new(AtomicBool::new(false)),
            app: Arc::new(app),
            url,
            addr,
        })
    }

    /// The page's address with its token: open this.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What stops [`LabelServer::run`] from another thread.
    pub fn stopper(&self) -> Stopper {
        Stopper {
            stop: Arc::clone(&self.stop),
            addr: self.addr,
        }
    }

    /// Serves until [`Stopper::stop`] or the listener fails (in practice, until the process
    /// is stopped). With nothing pending, the first batch is queried at once in the
    /// background. Each connection is served on its own thread within the settings'
    /// [`Limits`].
    pub fn run(self) -> Result<()> {
        {
            let mut inner = guard(&self.app.inner);
            if inner.state.pending.is_empty() {
                self.app.start_round(&mut inner);
            }
        }
        let app = Arc::clone(&self.app);
        serve_until_stopped(
            &self.listener,
            &self.limits,
            &self.stop,
            Arc::new(move |req: &mut http::Request<'_>| app.route(req)),
        )
    }
}
