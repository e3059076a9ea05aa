//! The [`Learner`]: a session's pool, state and last model; starting one, resuming one
//! (the pool checked against the state) and saving it.

use super::index::{self, content_hashes, describe_change, INDEX_FILE};
use super::pool::{fingerprint, Features, PoolItems, Values};
use super::state::{SessionConfig, SessionState, FORMAT, STATE_FILE};
use crate::checkpoint;
use crate::data::dataset::MAX_CLASSES;
use crate::data::reader::{survey, Opener, SourceReader, StreamedPool, SurveyOf};
use crate::data::{Dataset, Normalizer};
use crate::data::{Items, Loaded};
use crate::error::{Error, Result};
use crate::fsutil::{read_json, write_json};
use crate::nn::init::Weights;
use crate::observe::Observer;
use crate::train::Trained;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A labeling session over a pool (see the module docs).
pub struct Learner {
    pub(super) items: PoolItems,
    pub(super) features: Features,
    pub(super) test: Option<Dataset>,
    pub(super) state: SessionState,
    pub(super) last_model: Option<Trained>,
    /// Each item's content hash, when the session folder's pool index is still to be
    /// written (a new session, or an older one without an index), and whether it was.
    pub(super) index: Option<PendingIndex>,
}

/// Content hashes for the pool index, and whether a save wrote them.
pub(super) type PendingIndex = (Vec<u64>, std::sync::atomic::AtomicBool);

/// The pool index to write on the next save.
fn pending(hashes: Vec<u64>) -> Option<PendingIndex> {
    Some((hashes, Default::default()))
}

/// The checks of a new session's classes and settings, before the pool is read.
fn check_new(classes: &[String], config: &SessionConfig) -> Result<()> {
    config.train.validate()?;
    if classes.len() < 2 || classes.len() > MAX_CLASSES {
        return Err(Error::config(
            "classes",
            format!(
                "{} classes; a session needs 2 to {MAX_CLASSES}",
                classes.len()
            ),
        ));
    }
    let mut names = HashSet::new();
    if let Some(c) = classes
        .iter()
        .find(|c| c.trim().is_empty() || !names.insert(c.as_str()))
    {
        return Err(Error::config(
            "classes",
            format!("class name `{c}` is empty or given twice"),
        ));
    }
    if config.arch.classes() != classes.len() {
        return Err(Error::config(
            "classes",
            format!(
                "the model has {} outputs for {} classes",
                config.arch.classes(),
                classes.len()
            ),
        ));
    }
    Ok(())
}

fn check_format(state: &SessionState, origin: &Path) -> Result<()> {
    if !(1..=FORMAT).contains(&state.format) {
        return Err(Error::state(
            origin,
            format!(
                "session format {} is not supported (expected {FORMAT})",
                state.format
            ),
        ));
    }
    Ok(())
}

/// Checks the state against a pool of items of `shape` with `(size, fingerprint)`; on a
/// mismatch, `now` gives the pool's ids and content hashes so that the session's pool index
/// (beside `origin`) can name what changed.
fn check_pool(
    state: &SessionState,
    shape: &[usize],
    (size, fp): (usize, u64),
    origin: &Path,
    now: impl FnOnce() -> Result<(Vec<String>, Vec<u64>)>,
) -> Result<()> {
    let channels = shape.first().copied().unwrap_or(0);
    state.check_consistent(channels, origin)?;
    state.config.arch.check_input(shape)?;
    if size != state.pool_size || fp != state.pool_fingerprint {
        let (ids, hashes) = now()?;
        let what = describe_change(
            &origin.with_file_name(INDEX_FILE),
            state.pool_fingerprint,
            &ids,
            &hashes,
        )
        .unwrap_or_else(|| "different content".into());
        return Err(Error::state(
            origin,
            format!(
                "the pool `{}` changed since the session started ({} items then, {size} now): \
                 {what}",
                state.source, state.pool_size
            ),
        ));
    }
    Ok(())
}

/// The folder of a state file given as `origin`, when it names one (a session being started
/// has none yet).
fn folder_of(origin: &Path) -> Option<&Path> {
    origin.parent().filter(|p| !p.as_os_str().is_empty())
}

/// The taught labels as `(index, class)`. Only these count: the source's own labels (ground
/// truth of a benchmark set) never reach training.
fn taught(state: &SessionState, items: &PoolItems, origin: &Path) -> Result<Vec<(usize, u32)>> {
    state
        .labeled
        .iter()
        .map(|l| {
            let i = items.position(&l.id).ok_or_else(|| {
                Error::state(origin, format!("labeled id `{}` is not in the pool", l.id))
            })?;
            let c = state
                .classes
                .iter()
                .position(|k| *k == l.label)
                .ok_or_else(|| {
                    Error::state(
                        origin,
                        format!("label `{}` of `{}` is not a class", l.label, l.id),
                    )
                })?;
            Ok((i, c as u32))
        })
        .collect()
}

/// The test split normalised, when its items fit the pool's shape and the session's classes.
fn test_set(
    state: &SessionState,
    test: Option<&Items>,
    shape: &[usize],
) -> Result<Option<Dataset>> {
    match test {
        Some(t)
            if t.item_shape == shape
                && t.labels.iter().all(Option::is_some)
                && t.labels
                    .iter()
                    .flatten()
                    .all(|&l| (l as usize) < state.classes.len()) =>
        {
            Ok(Some(state.normalizer.apply(&t.dataset()?)?))
        }
        _ => Ok(None),
    }
}

impl Learner {
    /// Starts a session on `loaded.pool` with class list `classes` and seed labels
    /// `(id, class name)`. Errors (nothing started) on an unknown id, a duplicate, or a class
    /// outside the list.
    pub fn new(
        source: &str,
        loaded: Loaded,
        classes: Vec<String>,
        seeds: &[(String, String)],
        config: SessionConfig,
    ) -> Result<Learner> {
        check_new(&classes, &config)?;
        let state = SessionState {
            format: FORMAT,
            source: source.to_string(),
            pool_size: loaded.pool.len(),
            pool_fingerprint: fingerprint(&loaded.pool, FORMAT),
            classes,
            config,
            normalizer: Normalizer::fit(&loaded.pool.dataset()?),
            labeled: Vec::new(),
            pending: Vec::new(),
            rounds: Vec::new(),
            stop_predicted: Vec::new(),
        };
        let hashes = content_hashes(&loaded.pool);
        let mut learner = Learner::resume(state, loaded, Path::new(STATE_FILE))?;
        learner.index = pending(hashes);
        learner.seeded(seeds, source)
    }

    /// [`Learner::new`] over a pool read from its source (`open` opens it at its first item),
    /// as [`Learner::resume_streamed`] reads it: one pass fits the normaliser, hashes the pool
    /// and collects the ids (Hub downloads reported to `observer`); `test` is the source's test
    /// split, if any. The state equals the
    /// one [`Learner::new`] starts over the same pool in memory.
    pub fn new_streamed(
        source: &str,
        open: Opener,
        test: Option<Items>,
        classes: Vec<String>,
        seeds: &[(String, String)],
        config: SessionConfig,
        observer: &mut dyn Observer,
    ) -> Result<Learner> {
        check_new(&classes, &config)?;
        let found = survey(
            &open,
            observer,
            SurveyOf {
                normalizer: true,
                fingerprint: true,
                item_hashes: true,
            },
        )?;
        let state = SessionState {
            format: FORMAT,
            source: source.to_string(),
            pool_size: found.ids.len(),
            pool_fingerprint: found.fingerprint.expect("the survey hashed"),
            classes,
            config,
            normalizer: found.normalizer.expect("the survey fitted"),
            labeled: Vec::new(),
            pending: Vec::new(),
            rounds: Vec::new(),
            stop_predicted: Vec::new(),
        };
        let hashes = found.item_hashes.unwrap_or_default();
        let reader = SourceReader::new(open, source, found.ids, found.item_shape);
        let mut learner = Learner::streamed(state, reader, test, Path::new(STATE_FILE))?;
        learner.index = pending(hashes);
        learner.seeded(seeds, source)
    }

    /// Continues a saved session over the same pool, decoded in memory. `origin` names the
    /// state file in errors.
    pub fn resume(mut state: SessionState, loaded: Loaded, origin: &Path) -> Result<Learner> {
        check_format(&state, origin)?;
        let shape = loaded.pool.item_shape.clone();
        let found = (loaded.pool.len(), fingerprint(&loaded.pool, state.format));
        check_pool(&state, &shape, found, origin, || {
            Ok((loaded.pool.ids.clone(), content_hashes(&loaded.pool)))
        })?;
        if state.format != FORMAT {
            state.format = FORMAT;
            state.pool_fingerprint = fingerprint(&loaded.pool, FORMAT);
        }
        let index = folder_of(origin)
            .filter(|dir| !index::is_current(dir, state.pool_fingerprint))
            .and_then(|_| pending(content_hashes(&loaded.pool)));
        let test = test_set(&state, loaded.test.as_ref(), &shape)?;
        let raw = Dataset::new(
            loaded.pool.x.clone(),
            vec![0; loaded.pool.len()],
            shape,
            state.classes.len(),
        )?;
        let items = PoolItems::new(Values::Memory(Arc::new(loaded.pool)))
            .with_displays(source_displays(&state)?);
        let mut data = state.normalizer.apply(&raw)?;
        drop(raw);
        data.set_labels(&taught(&state, &items, origin)?)?;
        Ok(Learner {
            items,
            features: Features::Memory(data),
            test,
            state,
            last_model: None,
            index,
        })
    }

    /// Continues a saved session over the same pool read from its source whenever a round
    /// needs items (`open` opens it at its first item): the features are never all in memory,
    /// only the ids, the taught labels and a round's chunk. Opening reads the pool once to
    /// check it is the session's (Hub downloads reported to `observer`). `test` is the source's
    /// test split, if any. A format 1 session is refused: resume it once in memory, which
    /// writes it as format 2.
    pub fn resume_streamed(
        state: SessionState,
        open: Opener,
        test: Option<Items>,
        origin: &Path,
        observer: &mut dyn Observer,
    ) -> Result<Learner> {
        check_format(&state, origin)?;
        if state.format != FORMAT {
            return Err(Error::state(
                origin,
                format!(
                    "session format {} predates streamed pools; run one command on it with \
                     the pool read whole (setting `stream` off) first (it is then written as format {FORMAT})",
                    state.format
                ),
            ));
        }
        // An older session without a pool index gets one: its content hashes are taken in the
        // same pass.
        let missing =
            folder_of(origin).is_some_and(|d| !index::is_current(d, state.pool_fingerprint));
        let of = SurveyOf {
            fingerprint: true,
            item_hashes: missing,
            ..SurveyOf::default()
        };
        let found = survey(&open, observer, of)?;
        let fp = found.fingerprint.expect("the survey hashed");
        check_pool(
            &state,
            &found.item_shape,
            (found.ids.len(), fp),
            origin,
            || {
                // Read again, only to say what changed.
                let again = SurveyOf {
                    item_hashes: true,
                    ..SurveyOf::default()
                };
                let s = survey(&open, observer, again)?;
                Ok((s.ids, s.item_hashes.unwrap_or_default()))
            },
        )?;
        let hashes = found.item_hashes;
        let reader = SourceReader::new(open, state.source.clone(), found.ids, found.item_shape);
        let mut learner = Learner::streamed(state, reader, test, origin)?;
        learner.index = hashes.and_then(pending);
        Ok(learner)
    }

    /// A streamed learner over a pool read once already (the state's checks made again, the
    /// fingerprint taken as checked).
    fn streamed(
        state: SessionState,
        reader: SourceReader,
        test: Option<Items>,
        origin: &Path,
    ) -> Result<Learner> {
        let shape = reader.item_shape().to_vec();
        check_pool(
            &state,
            &shape,
            (reader.len(), state.pool_fingerprint),
            origin,
            || Ok((Vec::new(), Vec::new())),
        )?;
        let reader = Arc::new(reader);
        let items = PoolItems::new(Values::Streamed {
            reader: Arc::clone(&reader),
            kept: Arc::default(),
        })
        .with_displays(source_displays(&state)?);
        let mut pool = StreamedPool::new(reader, state.normalizer.clone(), state.classes.len())?;
        pool.set_labels(&taught(&state, &items, origin)?)?;
        let test = test_set(&state, test.as_ref(), &shape)?;
        Ok(Learner {
            items,
            features: Features::Streamed(pool),
            test,
            state,
            last_model: None,
            index: None,
        })
    }

    /// Loads `dir/session.json` and continues it over `loaded`.
    pub fn load(dir: &Path, loaded: Loaded) -> Result<Learner> {
        let path = dir.join(STATE_FILE);
        let state: SessionState = read_json(&path)?;
        Learner::resume(state, loaded, &path)
    }

    /// Writes `dir/session.json` atomically, and the last query's model to `dir/model/` (an
    /// ensemble's members to `dir/model/m0/`, `dir/model/m1/`, ...: score them together with
    /// `--checkpoint DIR/model/m0,DIR/model/m1,...`).
    pub fn save(&self, dir: &Path) -> Result<()> {
        if let Some(t) = &self.last_model {
            let members: Vec<(PathBuf, Weights)> = match self.state.config.ensemble {
                None => vec![(dir.join("model"), t.params.clone())],
                Some(k) => (0..k)
                    .map(|m| {
                        let at = dir.join("model").join(format!("m{m}"));
                        (at, t.params.member(m))
                    })
                    .collect(),
            };
            for (at, params) in &members {
                checkpoint::save(
                    at,
                    &self.state.config.arch,
                    params,
                    &self.state.normalizer,
                    self.items.item_shape(),
                    self.state.classes.clone(),
                )?;
            }
        }
        if let Some((hashes, written)) = &self.index {
            if !written.load(std::sync::atomic::Ordering::Acquire) {
                index::write(dir, self.state.pool_fingerprint, self.items.ids(), hashes)?;
                written.store(true, std::sync::atomic::Ordering::Release);
            }
        }
        write_json(&dir.join(STATE_FILE), &self.state)
    }

    /// The session's state.
    pub fn state(&self) -> &SessionState {
        &self.state
    }

    /// The pool's items as the page and exports show them.
    pub fn items(&self) -> &PoolItems {
        &self.items
    }

    /// The pool's items, shared: for readers that outlive a borrow of the learner (a server
    /// renders items while another thread trains).
    pub fn shared_items(&self) -> PoolItems {
        self.items.clone()
    }

    /// Writes `dir/session.json` atomically, and nothing else: after an answer, the model
    /// of the last query is unchanged on disk.
    pub fn save_state(&self, dir: &Path) -> Result<()> {
        write_json(&dir.join(STATE_FILE), &self.state)
    }

    pub(super) fn labeled_indices(&self) -> Vec<usize> {
        self.state
            .labeled
            .iter()
            .filter_map(|l| self.items.position(&l.id))
            .collect()
    }

    /// Pool positions a query may ask for: unlabeled, and not pending unless
    /// `include_pending`.
    pub fn candidates(&self, include_pending: bool) -> Vec<usize> {
        let labeled: HashSet<&str> = self.state.labeled.iter().map(|l| l.id.as_str()).collect();
        let pending: HashSet<&str> = self.state.pending.iter().map(|p| p.id.as_str()).collect();
        let ids = self.items.ids();
        (0..ids.len())
            .filter(|&i| {
                let id = ids[i].as_str();
                !labeled.contains(id) && (include_pending || !pending.contains(id))
            })
            .collect()
    }
}

/// What the session's pool shows of its items (an embedding file's texts or image paths),
/// read anew by each command so that it follows the file: below the image folder the session
/// embedded, when it did ([`SessionConfig::display_root`]). A source name that does not parse
/// has none (its pool was read by whoever gave it).
fn source_displays(state: &SessionState) -> Result<Option<crate::data::display::Displays>> {
    match crate::data::Source::parse(&state.source) {
        Ok(src) => crate::data::source::displays_below(&src, state.config.display_root.as_deref()),
        Err(_) => Ok(None),
    }
}
