//! Opening and starting sessions from what a person names: a session folder to lock and
//! resume ([`open`]), or a pool, seed labels and settings to start one from
//! ([`SessionOptions::start`]), the pool in memory or streamed from its source. Every
//! setting is checked before anything is written, and nothing replaces a session unless asked.

use super::learner::Learner;
use super::lock::{lock, SessionLock};
use super::state::{SessionConfig, SessionState, STATE_FILE};
use super::teach::read_answer_csv;
use crate::data::source::{listed_labels, load_named, load_test};
use crate::data::Source;
use crate::error::{DataProblem, Error, Result, ResultExt};
use crate::hub::Hub;
use crate::models::{Arch, ModelKind};
use crate::observe::Observer;
use std::path::{Path, PathBuf};

/// Locks the session folder `dir` and loads its session, over its pool in memory or, with
/// `stream`, read from the source whenever needed (Hub files through `hub`, downloads and the
/// pool's check reported to `observer`). Answers waiting in the folder's
/// [`journal`](super::journal) are taught and saved first.
pub fn open(
    dir: &Path,
    stream: bool,
    hub: &Hub,
    observer: &mut dyn Observer,
) -> Result<(SessionLock, Learner)> {
    let not_a_session = "not a session folder";
    let path = SessionState::file_in(dir)?;
    let held = lock(dir).context_with(|| format!("session {}", dir.display()))?;
    let state: SessionState = crate::fsutil::read_json(&path)
        .context_with(|| format!("session {}: {not_a_session}", dir.display()))?;
    let mut learner = if stream {
        let name = state.source.clone();
        let source = Source::parse(&name).context_with(|| format!("data source {name}"))?;
        let test = load_test(&source, hub, observer)
            .context_with(|| format!("loading the test split of {name}"))?;
        let open = crate::data::reader::opener(source, hub.clone());
        Learner::resume_streamed(state, open, test, &path, observer)
            .context_with(|| format!("reading the pool {name}"))?
    } else {
        let (_, loaded) = load_named(&state.source, None, hub, observer)?;
        Learner::resume(state, loaded, &path)?
    };
    // Answers a Label Studio backend took while training and did not teach before it
    // stopped: every command sees them.
    super::journal::replay(&mut learner, dir)?;
    Ok((held, learner))
}

/// A new session as a person describes it; `None` takes the default.
#[derive(Debug, Clone, Default)]
pub struct SessionOptions {
    /// The pool: an image folder (labeled ones in `CLASS/` subfolders), an IDX folder, a
    /// safetensors, CSV or Parquet file, or `hf:OWNER/NAME`.
    pub pool: String,
    /// Seed labels: a CSV with columns `id,label` (label = class name).
    pub labels: Option<PathBuf>,
    /// Class names [default: the source's classes].
    pub classes: Option<Vec<String>>,
    /// The model trained every round [default: [`Arch::default_for`] the items].
    pub model: Option<ModelKind>,
    /// Optimiser steps per training.
    pub steps: usize,
    /// Mini-batch size [default: the model's].
    pub batch_size: Option<usize>,
    /// Adam's learning rate (softmax models only).
    pub lr: Option<f64>,
    /// Seed of every random choice in the session.
    pub seed: u64,
    /// Train a deep ensemble of this many members every round.
    pub ensemble: Option<usize>,
    /// Read the pool a chunk at a time instead of decoding it into memory.
    pub stream: bool,
    /// The data the pool's items were computed from, when the pool is a frozen backbone's
    /// embedding file of it: the labels that data gives (an image folder's class subfolders)
    /// seed the session, as they would have on the data itself; the embedding file's own
    /// labels are a data set's ground truth.
    pub embedded_from: Option<String>,
    /// The stopping rule whose word is passed on to the person labeling.
    pub stop: Option<crate::metrics::stopping::StopRule>,
}

impl SessionOptions {
    /// Starts the session in the folder `dir`: the pool read (or with `stream` opened and
    /// listed: its item shape, the classes it names and the labels it gives), the seeds and
    /// settings checked, then `dir` created, locked and the session saved. An existing session
    /// there is refused unless `force`.
    pub fn start(
        &self,
        dir: &Path,
        force: bool,
        hub: &Hub,
        observer: &mut dyn Observer,
    ) -> Result<Learner> {
        let state_file = dir.join(STATE_FILE);
        let taken = || {
            Error::state(
                dir,
                "already holds a session; replace it only on purpose (setting `force`)",
            )
        };
        if state_file.exists() && !force {
            return Err(taken());
        }
        // Record an absolute path so later commands work from any folder.
        let source = if self.pool.starts_with("hf:") {
            self.pool.clone()
        } else {
            std::fs::canonicalize(&self.pool)
                .map_err(|e| Error::io(&self.pool, e).context("the pool"))?
                .to_string_lossy()
                .into_owned()
        };
        let learner = if self.stream {
            let src = Source::parse(&source).context_with(|| format!("data source {source}"))?;
            if matches!(src, Source::Csv(_)) {
                return Err(Error::data(
                    &source,
                    DataProblem::Other(
                        "a CSV pool's label cells are read with the whole file: start the session \
                         with the pool read whole (setting `stream` off); later rounds may \
                         still stream it"
                            .into(),
                    ),
                ));
            }
            let shape = crate::data::source::open(&src, hub, observer, None)
                .context_with(|| format!("reading the data {source}"))?
                .item_shape()
                .to_vec();
            let test = load_test(&src, hub, observer)
                .context_with(|| format!("loading the test split of {source}"))?;
            let listed_from = self.seeding_source(&src)?;
            let (named, given) = self
                .listing(&listed_from, hub, observer)?
                .map_or((None, Vec::new()), |l| (Some(l.classes), l.given));
            let classes = self.classes(&source, named)?;
            let (seeds, listed) = self.seeds(&listed_from, given)?;
            check_seed_classes(&listed_from, &seeds, &classes)?;
            let config = self.config(&shape, classes.len())?;
            let open = crate::data::reader::opener(src, hub.clone());
            Learner::new_streamed(&source, open, test, classes, &seeds, config, observer)
                .and_then(|l| self.taught_listed(l, &listed))
        } else {
            let (src, loaded) = load_named(&source, None, hub, observer)?;
            let shape = loaded.pool.item_shape.clone();
            let classes = self.classes(&source, Some(loaded.pool.classes.clone()))?;
            let (seeds, listed) = if self.embedded_from.is_some() {
                let from = self.seeding_source(&src)?;
                let given = self
                    .listing(&from, hub, observer)?
                    .map_or_else(Vec::new, |l| l.given);
                self.seeds(&from, given)?
            } else {
                self.seeds(&src, loaded.pool.given_labels())?
            };
            check_seed_classes(&self.seeding_source(&src)?, &seeds, &classes)?;
            let config = self.config(&shape, classes.len())?;
            Learner::new(&source, loaded, classes, &seeds, config)
                .and_then(|l| self.taught_listed(l, &listed))
        }
        .context_with(|| match &self.embedded_from {
            Some(from) => format!("starting a session on {from} (embedded into {source})"),
            None => format!("starting a session on {source}"),
        })?;
        // Nothing is written before the pool and the settings are known to be good; then the
        // folder is held while the session is written (a page may already serve an old one).
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(dir, e).context("creating the session folder"))?;
        let _held = lock(dir).context_with(|| format!("session {}", dir.display()))?;
        if state_file.exists() && !force {
            return Err(taken());
        }
        learner.save(dir)?;
        Ok(learner)
    }

    /// The source whose listing names the classes and gives the seed labels: the data the
    /// pool was embedded from ([`SessionOptions::embedded_from`]), else the pool itself.
    fn seeding_source(&self, pool: &Source) -> Result<Source> {
        match &self.embedded_from {
            Some(from) => Source::parse(from).context_with(|| format!("data source {from}")),
            None => Ok(pool.clone()),
        }
    }

    /// The classes `from` names and the labels it gives ([`listed_labels`]). A CSV file the
    /// pool was embedded from keeps its label cells beside its values: it is read whole for
    /// them, as embedding it read it.
    fn listing(
        &self,
        from: &Source,
        hub: &Hub,
        observer: &mut dyn Observer,
    ) -> Result<Option<crate::data::stream::Listed>> {
        match (from, &self.embedded_from) {
            (Source::Csv(_), Some(name)) => {
                let (_, loaded) = load_named(name, None, hub, observer)
                    .context_with(|| format!("listing {from}"))?;
                Ok(Some(crate::data::stream::Listed {
                    given: loaded.pool.given_labels(),
                    classes: loaded.pool.classes,
                }))
            }
            _ => listed_labels(from).context_with(|| format!("listing {from}")),
        }
    }

    /// The class list: given, or the one the source names.
    fn classes(&self, source: &str, named: Option<Vec<String>>) -> Result<Vec<String>> {
        let classes = match (self.classes.clone(), named) {
            (Some(c), _) | (None, Some(c)) => c,
            (None, None) => {
                return Err(Error::data(
                    source,
                    DataProblem::Other(
                        "a streamed pool needs its class list given (setting `classes`): \
                         this source names its classes only when read whole"
                            .into(),
                    ),
                ))
            }
        };
        if classes.len() < 2 {
            return Err(Error::config(
                "classes",
                format!(
                    "{source} names {} class(es); give the class list (setting `classes`) \
                     (for an image folder, or create one subfolder per class)",
                    classes.len()
                ),
            ));
        }
        Ok(classes)
    }

    /// The seed labels: those the source gives (when its labels are given by a person: class
    /// subfolders, CSV label cells) as `(id, class)`, and the rows `(line, id, class)` of
    /// [`SessionOptions::labels`], read first so that a bad file stops the start early.
    #[allow(clippy::type_complexity)]
    fn seeds(
        &self,
        src: &Source,
        given: Vec<(String, String)>,
    ) -> Result<(Vec<(String, String)>, Vec<(usize, String, String)>)> {
        let given = if src.labels_are_given() {
            given
        } else {
            Vec::new()
        };
        let listed = match &self.labels {
            Some(p) => read_answer_csv(p)?,
            None => Vec::new(),
        };
        Ok((given, listed))
    }

    /// `learner` with the seed labels of the labels file taught, checked as one batch after
    /// those the source gives: an error names the file's own line.
    fn taught_listed(
        &self,
        mut learner: Learner,
        listed: &[(usize, String, String)],
    ) -> Result<Learner> {
        if let Some(p) = &self.labels {
            learner.teach_from(listed, p)?;
        }
        Ok(learner)
    }

    /// The image folder the pool was embedded from, canonical, when it is one.
    fn embedded_images(&self) -> Result<Option<PathBuf>> {
        match self.embedded_from.as_deref().map(Source::parse) {
            Some(Ok(Source::Images(dir))) => std::fs::canonicalize(&dir)
                .map(Some)
                .map_err(|e| Error::io(&dir, e)),
            _ => Ok(None),
        }
    }

    /// The session's model and training settings for items of `shape` in `classes` classes.
    fn config(&self, shape: &[usize], classes: usize) -> Result<SessionConfig> {
        if let Some(rule) = self.stop {
            rule.check_classes(classes)
                .map_err(|m| Error::config("stop", m))?;
        }
        let arch = match self.model {
            None => Arch::default_for(shape, classes),
            Some(m) => Arch::for_shape(m, shape, classes),
        };
        let train = arch
            .kind()
            .train_config(self.steps, self.batch_size, self.lr, None)?;
        if let Some(k) = self.ensemble {
            if !(1..=crate::train::MAX_MEMBERS).contains(&k) {
                return Err(Error::config(
                    "ensemble",
                    format!("{k} members; expected 1 to {}", crate::train::MAX_MEMBERS),
                ));
            }
        }
        Ok(SessionConfig {
            arch: arch.with_batch(train.batch_size),
            train,
            seed: self.seed,
            batch: crate::predict::default_batch(shape.iter().product()),
            ensemble: self.ensemble,
            display_root: self.embedded_images()?,
            stop: self.stop,
        })
    }
}

/// Refuses seed labels an image folder's subfolders give outside `classes`, before anything
/// trains, named as the person made them: the subfolder, and the two ways out. (Other
/// sources' labels are checked as they are taught, naming their file's line.)
fn check_seed_classes(from: &Source, seeds: &[(String, String)], classes: &[String]) -> Result<()> {
    let Source::Images(dir) = from else {
        return Ok(());
    };
    let Some((id, class)) = seeds.iter().find(|(_, c)| !classes.contains(c)) else {
        return Ok(());
    };
    Err(Error::data(
        dir,
        DataProblem::Other(format!(
            "item `{id}` is in the subfolder `{class}/`, which makes `{class}` its seed label, \
             and `{class}` is not one of the classes {classes:?}: add it to the class list \
             (setting `classes`), or move the images out of {} (into the folder itself: \
             unlabeled; into a class's subfolder: labeled that class)",
            dir.join(class).display()
        )),
    ))
}
