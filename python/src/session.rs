//! `alkit.Session`: a labeling session kept in a state folder, the same folder the command
//! line's `init`, `query`, `teach`, `label` and `status` work on. Like those commands, each
//! method locks the folder, loads the session, does one thing through
//! [`alkit::session::Learner`] and saves it, so a notebook and `alkit label` can take turns on
//! one session (one at a time: the lock refuses a second writer).

use crate::errors::{PyAlkitError, PyAlkitResult, Signals};
use crate::settings::{self, Reads};
use alkit::error::{Error, Result};
use alkit::hub::Hub;
use alkit::session::{
    check_batch_out, BatchFormat, Learner, QueryRequest, SessionOptions, SessionState,
};
use alkit::strategies::{ScorerSettings, StrategyKind};
use candle_core::Device;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::path::{Path, PathBuf};

/// A labeling session in the folder `state`.
#[pyclass(module = "alkit._alkit", frozen)]
pub struct Session {
    state: PathBuf,
}

/// Locks the session folder and loads its session, its pool in memory or `stream`ed.
fn open(dir: &Path, stream: bool) -> Result<(alkit::session::SessionLock, Learner)> {
    alkit::session::open(dir, stream, &Hub::from_env(), &mut Signals)
}

#[pymethods]
impl Session {
    /// The session already in the folder `state`.
    #[new]
    fn new(state: PathBuf) -> PyAlkitResult<Self> {
        SessionState::read(&state)?;
        Ok(Self { state })
    }

    /// Starts a session in the folder `state` on `pool`, as `alkit init` does; with
    /// `backbone`, on the pool embedded once through it into the embeddings cache
    /// (`embed_cache`, else the command line's default), each round training a head.
    #[staticmethod]
    #[pyo3(signature = (
        state, pool, *, labels=None, classes=None, model=None, steps=500, batch_size=None,
        lr=None, seed=0, ensemble=None, stream=false, force=false, backbone=None,
        embed_cache=None, stop=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn start(
        py: Python<'_>,
        state: PathBuf,
        pool: String,
        labels: Option<PathBuf>,
        classes: Option<Vec<String>>,
        model: Option<String>,
        steps: usize,
        batch_size: Option<usize>,
        lr: Option<f64>,
        seed: u64,
        ensemble: Option<usize>,
        stream: bool,
        force: bool,
        backbone: Option<String>,
        embed_cache: Option<PathBuf>,
        stop: Option<String>,
    ) -> PyAlkitResult<Self> {
        let stop = stop
            .map(|r| r.parse())
            .transpose()
            .map_err(|e: String| alkit::Error::config("stop", e))?;
        let model = model
            .map(|m| m.parse::<alkit::models::ModelKind>())
            .transpose()?;
        let dir = state.clone();
        py.detach(move || -> Result<()> {
            let hub = Hub::from_env();
            // As `alkit init --backbone`: the pool embedded once into the cache, the session
            // on the embedding file, seeded by the labels the pool itself gives.
            let (pool, embedded_from, model) = match backbone {
                Some(backbone) => {
                    let job = alkit::jobs::embed::EmbedJob::through(&backbone, &pool);
                    let on = alkit::jobs::embed::on_backbone(
                        &job,
                        embed_cache.as_deref(),
                        model,
                        &hub,
                        &Device::Cpu,
                        &mut Signals,
                    )?;
                    let data = on.data.to_string_lossy().into_owned();
                    (data, Some(pool), Some(on.model))
                }
                None => (pool, None, model),
            };
            let options = SessionOptions {
                pool,
                labels,
                classes,
                model,
                steps,
                batch_size,
                lr,
                seed,
                ensemble,
                stream,
                embedded_from,
                stop,
            };
            options.start(&dir, force, &hub, &mut Signals).map(|_| ())
        })?;
        Ok(Self { state })
    }

    /// The session folder.
    #[getter]
    fn state(&self) -> PathBuf {
        self.state.clone()
    }

    /// Trains on the labeled items and returns the next `n` to label, best first, as
    /// `alkit query` does (written to `out` as well when given).
    #[pyo3(signature = (
        n=50, *, scorer="entropy", out=None, format="csv", include_pending=false,
        subsample=None, stream=false, settings=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn query<'py>(
        &self,
        py: Python<'py>,
        n: usize,
        scorer: &str,
        out: Option<PathBuf>,
        format: &str,
        include_pending: bool,
        subsample: Option<usize>,
        stream: bool,
        settings: Option<&str>,
    ) -> PyAlkitResult<Vec<Bound<'py, PyDict>>> {
        let format = BatchFormat::parse(format)?;
        let kind: StrategyKind = scorer
            .parse()
            .map_err(|e: String| Error::config("scorer", e))?;
        let given = settings::read(settings, Reads::All, "")?;
        let dir = self.state.clone();
        let batch = py.detach(move || -> Result<_> {
            if let Some(out) = &out {
                check_batch_out(&dir, out, format)?;
            }
            let (_held, mut learner) = open(&dir, stream)?;
            let settings = ScorerSettings {
                members: learner.state().config.ensemble.is_some(),
                ..given
            };
            let request = QueryRequest {
                strategy: kind.strategy(&settings)?,
                n,
                include_pending,
                subsample,
            };
            let batch = learner.query(&request, &Device::Cpu, &mut Signals)?;
            // The batch file first: if saving the state fails, the same query gives the
            // same batch.
            if let Some(out) = &out {
                alkit::label_studio::write_batch(&learner, format, out, &batch, &Device::Cpu)?;
            }
            learner.save(&dir)?;
            Ok(batch)
        })?;
        batch
            .into_iter()
            .map(|q| {
                let d = PyDict::new(py);
                d.set_item("id", q.id)?;
                d.set_item("index", q.index)?;
                d.set_item("score", q.score)?;
                Ok(d)
            })
            .collect()
    }

    /// Teaches answers: `(id, class name)` pairs, or a file (a CSV of `id,label` rows or Label
    /// Studio's JSON export), as `alkit teach` does. Returns the number taught.
    #[pyo3(signature = (answers=None, *, file=None, stream=false))]
    fn teach(
        &self,
        py: Python<'_>,
        answers: Option<Vec<(String, String)>>,
        file: Option<PathBuf>,
        stream: bool,
    ) -> PyAlkitResult<usize> {
        let dir = self.state.clone();
        py.detach(move || -> Result<usize> {
            let (_held, mut learner) = open(&dir, stream)?;
            let n = match (answers, file) {
                (Some(a), None) => learner.teach(&a)?,
                (None, Some(f)) => {
                    alkit::label_studio::teach_file(&mut learner, &f)?
                        .taught
                        .taught
                }
                _ => {
                    return Err(Error::config(
                        "answers",
                        "give the answers or a file of them, one of the two",
                    ))
                }
            };
            learner.save(&dir)?;
            Ok(n)
        })
        .map_err(PyAlkitError::from)
    }

    /// The session at a glance, as `alkit status --json` prints it (a JSON text).
    fn status_json(&self) -> PyAlkitResult<String> {
        let st = SessionState::read(&self.state)?;
        Ok(st.summary().to_string())
    }

    fn __repr__(&self) -> String {
        format!("Session({:?})", self.state.display().to_string())
    }
}
