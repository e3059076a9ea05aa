//! Labeling sessions: active learning with a person as the oracle.
//!
//! A [`Learner`] holds a pool of [`Items`] (each with a stable id) in memory, or reads it from
//! its source whenever a round needs items ([`Learner::new_streamed`],
//! [`Learner::resume_streamed`]: ids and labels held, features never all at once), and a
//! [`SessionState`]:
//! which ids are labeled (and with which class, in which round), which were queried and await
//! an answer, and one record per query round. [`Learner::query`] trains a fresh model on the
//! labeled items, scores every other item and returns the next batch; [`Learner::teach`]
//! checks a whole batch of answers first and applies it only when every row is valid.
//!
//! Everything random comes from the session's seed and the round number (the same
//! [`crate::rng::stream`]s as the simulated loop), so a session driven through the CLI, one
//! process per command, ends in exactly the state of the same session driven in one process
//! through this API. [`Learner::save`] writes `session.json` atomically after every change;
//! the model of the last query is saved beside it as a checkpoint.

mod setup;

pub use setup::{open, SessionOptions};

use crate::checkpoint;
use crate::data::dataset::MAX_CLASSES;
use crate::data::reader::{hash_item, survey, Opener, PoolReader, SourceReader, StreamedPool};
use crate::data::source::{read_csv, Items, Loaded};
use crate::data::{Dataset, Fnv1a, Normalizer};
use crate::error::{Error, Result};
use crate::fsutil::{read_json, write_json};
use crate::models::Arch;
use crate::nn::init::Weights;
use crate::observe::Observer;
use crate::predict::{evaluate, log_probs_of, metrics_from_log_probs};
use crate::rng::Purpose;
use crate::round::{self, pick_random, Acquisition, Picked, RoundSettings, Strategy};
use crate::train::{TrainConfig, Trained, MAX_MEMBERS};
use candle_core::Device;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// State format: 2 hashes the pool item by item (id, then values), so a streamed pool is
/// checked in one pass; format 1 (ids, then all values) is still read, checked on a pool in
/// memory and written back as format 2.
const FORMAT: u32 = 2;
/// Name of the state file inside a session folder.
pub const STATE_FILE: &str = "session.json";

/// Name of the lock file inside a session folder (see [`lock`]).
pub const LOCK_FILE: &str = "session.lock";

/// An exclusive hold on a session folder: while it lives, no other process can [`lock`] the
/// same folder. The operating system releases it when the process ends, however it ends, so
/// a killed server leaves nothing to clean up.
#[derive(Debug)]
pub struct SessionLock {
    _file: std::fs::File,
}

/// Takes the session folder `dir` for this process, so that a labeling page and a `teach`
/// in a shell (or two pages) cannot both change `session.json`; an error names the folder
/// when another process holds it.
pub fn lock(dir: &Path) -> Result<SessionLock> {
    let path = dir.join(LOCK_FILE);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| Error::io(&path, e))?;
    match file.try_lock() {
        Ok(()) => Ok(SessionLock { _file: file }),
        Err(std::fs::TryLockError::WouldBlock) => Err(Error::state(
            &path,
            "another alkit process (`alkit label`, `query` or `teach`) is using this session; \
             let it finish or stop it first",
        )),
        Err(std::fs::TryLockError::Error(e)) => Err(Error::io(&path, e)),
    }
}

/// A labeled item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Labeled {
    /// The item's id.
    pub id: String,
    /// Its class name.
    pub label: String,
    /// The round its label was taught after (0 = given at init).
    pub round: usize,
    /// The person's note on the item, if they left one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// One answer to teach: an item's id, its class name and an optional note; `row` is its
/// line (CSV), task (Label Studio) or answer number in errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// Where the answer came from, for errors: a 1-based line, task or answer number.
    pub row: usize,
    /// The item's id.
    pub id: String,
    /// Its class name.
    pub label: String,
    /// An optional note (at most [`MAX_NOTE`] characters, no control characters).
    pub note: Option<String>,
}

impl Answer {
    /// An answer without a note.
    pub fn new(row: usize, id: impl Into<String>, label: impl Into<String>) -> Answer {
        Answer {
            row,
            id: id.into(),
            label: label.into(),
            note: None,
        }
    }
}

/// The longest note kept with an answer, in characters.
pub const MAX_NOTE: usize = 2000;

/// What [`Learner::undo`] needs to take one answer of [`Learner::teach_one`] back: the item
/// and the pending entry (with its place in the pending list) that the answer removed.
#[derive(Debug, Clone, PartialEq)]
pub struct Undo {
    /// The answered item's id.
    pub id: String,
    removed: Vec<(usize, Pending)>,
}

/// An item queried and not yet answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pending {
    /// The item's id.
    pub id: String,
    /// The query round that asked for it (from 1).
    pub round: usize,
    /// Its score then (`null` for random picks and joint batch criteria).
    pub score: Option<f32>,
}

/// One query round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Round {
    /// Round number, from 1.
    pub round: usize,
    /// Scorer that ranked the pool (`random` before any label exists).
    pub scorer: String,
    /// Labeled items the model was trained on.
    pub labeled: usize,
    /// Items returned.
    pub queried: usize,
    /// Accuracy on the labeled items (training fit).
    pub fit_acc: Option<f64>,
    /// Accuracy on the source's test split, when it has one.
    pub test_acc: Option<f64>,
    /// NLL on the source's test split, when it has one.
    pub test_nll: Option<f64>,
}

/// Settings fixed when a session starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionConfig {
    /// The model trained every round.
    pub arch: Arch,
    /// How it is trained (from scratch every round).
    pub train: TrainConfig,
    /// Seed of every random stream.
    pub seed: u64,
    /// Inference batch size.
    pub batch: usize,
    /// Train a deep ensemble of this many members every round (sample scorers and BatchBALD
    /// then read the members' draws); `None`: one model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ensemble: Option<usize>,
}

/// Everything a session is: written to `session.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionState {
    /// State format version.
    pub format: u32,
    /// The pool's source, as given.
    pub source: String,
    /// Items in the pool.
    pub pool_size: usize,
    /// Hash of the pool's ids and features: a changed pool is refused. Format 2 hashes each
    /// item's id and values in turn (one pass over a streamed pool), format 1 every id, then
    /// every value.
    pub pool_fingerprint: u64,
    /// Class names; answers must use one of them.
    pub classes: Vec<String>,
    /// Settings.
    pub config: SessionConfig,
    /// Normalisation fitted on the whole pool at init.
    pub normalizer: Normalizer,
    /// Labeled items, in the order they were taught.
    pub labeled: Vec<Labeled>,
    /// Queried items awaiting an answer.
    pub pending: Vec<Pending>,
    /// One record per query.
    pub rounds: Vec<Round>,
}

impl SessionState {
    /// Checks that the state is one alkit could have written, before any of it is used: at
    /// least two distinct, non-empty class names (at most [`MAX_CLASSES`]) matching the
    /// model's outputs, valid training settings, a sound normaliser for `channels`, labeled
    /// and pending ids distinct and disjoint with tags up to the last round, rounds numbered
    /// `1, 2, ...` with non-decreasing label counts, scores finite. `origin` names the file.
    pub fn check_consistent(&self, channels: usize, origin: &Path) -> Result<()> {
        let bad = |m: String| Err(Error::state(origin, m));
        if self.classes.len() < 2 || self.classes.len() > MAX_CLASSES {
            return bad(format!(
                "{} classes; a session has 2 to {MAX_CLASSES}",
                self.classes.len()
            ));
        }
        let mut names = HashSet::new();
        if let Some(c) = self
            .classes
            .iter()
            .find(|c| c.trim().is_empty() || !names.insert(c.as_str()))
        {
            return bad(format!("class name `{c}` is empty or given twice"));
        }
        if self.config.arch.classes() != self.classes.len() {
            return bad(format!(
                "the model has {} outputs for {} classes",
                self.config.arch.classes(),
                self.classes.len()
            ));
        }
        self.config
            .train
            .validate()
            .map_err(|e| Error::state(origin, format!("training settings: {e}")))?;
        if self.config.batch == 0 {
            return bad("inference batch size 0".into());
        }
        if let Some(k) = self.config.ensemble {
            if !(1..=MAX_MEMBERS).contains(&k) {
                return bad(format!("an ensemble of {k} members (1 to {MAX_MEMBERS})"));
            }
        }
        self.normalizer
            .check(channels)
            .map_err(|m| Error::state(origin, m))?;
        let rounds = self.rounds.len();
        for (k, r) in self.rounds.iter().enumerate() {
            if r.round != k + 1 {
                return bad(format!("round record {} says round {}", k + 1, r.round));
            }
            if k > 0 && r.labeled < self.rounds[k - 1].labeled {
                return bad(format!(
                    "round {} trained on {} labels, fewer than round {}'s {}",
                    r.round,
                    r.labeled,
                    k,
                    self.rounds[k - 1].labeled
                ));
            }
            if r.labeled > self.labeled.len() {
                return bad(format!(
                    "round {} trained on {} labels; the session holds {}",
                    r.round,
                    r.labeled,
                    self.labeled.len()
                ));
            }
        }
        let mut ids = HashSet::new();
        for l in &self.labeled {
            if !ids.insert(l.id.as_str()) {
                return bad(format!("item `{}` is labeled twice", l.id));
            }
            if l.round > rounds {
                return bad(format!(
                    "`{}` is tagged round {} of {rounds}",
                    l.id, l.round
                ));
            }
        }
        let mut pending = HashSet::new();
        for p in &self.pending {
            if ids.contains(p.id.as_str()) || !pending.insert(p.id.as_str()) {
                return bad(format!(
                    "item `{}` is pending twice or pending and labeled",
                    p.id
                ));
            }
            if p.round == 0 || p.round > rounds {
                return bad(format!(
                    "pending `{}` is tagged round {} of {rounds}",
                    p.id, p.round
                ));
            }
            if p.score.is_some_and(|v| !v.is_finite()) {
                return bad(format!("pending `{}` has a non-finite score", p.id));
            }
        }
        Ok(())
    }

    /// Labeled items per class name.
    pub fn per_class(&self) -> BTreeMap<&str, usize> {
        let mut m: BTreeMap<&str, usize> = self.classes.iter().map(|c| (c.as_str(), 0)).collect();
        for l in &self.labeled {
            *m.entry(l.label.as_str()).or_default() += 1;
        }
        m
    }
}

/// What one query asks for.
#[derive(Clone)]
pub struct QueryRequest {
    /// How the batch is chosen: any strategy of the loop (see [`crate::strategies`]),
    /// BatchBALD and ensemble draws included.
    pub strategy: Strategy,
    /// How many items to return.
    pub n: usize,
    /// Also offer items queried earlier and not yet answered.
    pub include_pending: bool,
    /// Score a seeded random subset of this many candidates instead of all of them (see
    /// [`crate::round::subsample`]); `None`: all.
    pub subsample: Option<usize>,
}

/// One item of a query's batch.
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    /// The item's id.
    pub id: String,
    /// Its position in the pool source.
    pub index: usize,
    /// Its score (`None` for random picks and joint batch criteria, which score no single
    /// item).
    pub score: Option<f32>,
}

/// A session's pool items as the page and exports show them (values as the source gives
/// them, not normalised), decoded in memory or read from the source on demand with the items
/// asked for last kept (a batch, see [`PoolItems::prefetch`]); and the position of each id.
#[derive(Clone)]
pub struct PoolItems {
    /// Positions in id order: a lookup is a binary search, and the index costs one position
    /// per item instead of a second copy of every id (a pool of millions holds its ids).
    by_id: Arc<Vec<usize>>,
    values: Values,
}

#[derive(Clone)]
enum Values {
    Memory(Arc<Items>),
    Streamed {
        reader: Arc<SourceReader>,
        kept: Arc<std::sync::Mutex<HashMap<usize, Vec<f32>>>>,
    },
}

impl PoolItems {
    fn new(values: Values) -> PoolItems {
        let mut items = PoolItems {
            by_id: Arc::default(),
            values,
        };
        let ids = items.ids();
        let mut order: Vec<usize> = (0..ids.len()).collect();
        order.sort_unstable_by(|&a, &b| ids[a].cmp(&ids[b]));
        items.by_id = Arc::new(order);
        items
    }

    /// Ids `(n,)`.
    pub fn ids(&self) -> &[String] {
        match &self.values {
            Values::Memory(items) => &items.ids,
            Values::Streamed { reader, .. } => reader.ids(),
        }
    }

    /// The position of item `id`, if the pool has it.
    pub fn position(&self, id: &str) -> Option<usize> {
        let ids = self.ids();
        self.by_id
            .binary_search_by(|&p| ids[p].as_str().cmp(id))
            .ok()
            .map(|k| self.by_id[k])
    }

    /// Items in the pool.
    pub fn len(&self) -> usize {
        self.ids().len()
    }

    /// True when the pool has no items.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Shape of one item.
    pub fn item_shape(&self) -> &[usize] {
        match &self.values {
            Values::Memory(items) => &items.item_shape,
            Values::Streamed { reader, .. } => reader.item_shape(),
        }
    }

    /// Values of items `indices` (each at most once), `(k, *item_shape)` in that order: from
    /// memory, from the kept items, or read from the source in one pass.
    pub fn values(&self, indices: &[usize]) -> Result<Vec<f32>> {
        let d: usize = self.item_shape().iter().product();
        match &self.values {
            Values::Memory(items) => Ok(indices
                .iter()
                .flat_map(|&i| &items.x[i * d..(i + 1) * d])
                .copied()
                .collect()),
            Values::Streamed { reader, kept } => {
                {
                    let kept = kept.lock().unwrap_or_else(|e| e.into_inner());
                    if indices.iter().all(|i| kept.contains_key(i)) {
                        return Ok(indices.iter().flat_map(|i| &kept[i]).copied().collect());
                    }
                }
                reader.raw(indices)
            }
        }
    }

    /// Reads items `indices` in one pass and keeps them (instead of those kept before), so
    /// that showing them one at a time reads nothing; a pool in memory has them already.
    pub fn prefetch(&self, indices: &[usize]) -> Result<()> {
        if let Values::Streamed { reader, kept } = &self.values {
            let d: usize = reader.item_shape().iter().product();
            let x = reader.raw(indices)?;
            let mut kept = kept.lock().unwrap_or_else(|e| e.into_inner());
            kept.clear();
            for (k, &i) in indices.iter().enumerate() {
                kept.insert(i, x[k * d..(k + 1) * d].to_vec());
            }
        }
        Ok(())
    }
}

/// A session's pool as its rounds read it: normalised, with the taught labels.
enum Features {
    Memory(Dataset),
    Streamed(StreamedPool),
}

impl Features {
    fn reader(&self) -> &dyn PoolReader {
        match self {
            Features::Memory(d) => d,
            Features::Streamed(p) => p,
        }
    }

    fn set_labels(&mut self, labels: &[(usize, u32)]) -> Result<()> {
        match self {
            Features::Memory(d) => d.set_labels(labels),
            Features::Streamed(p) => p.set_labels(labels),
        }
    }
}

/// A labeling session over a pool (see the module docs).
pub struct Learner {
    items: PoolItems,
    features: Features,
    test: Option<Dataset>,
    state: SessionState,
    last_model: Option<Trained>,
}

/// The pool fingerprint of state format `format` (see [`FORMAT`]).
fn fingerprint(items: &Items, format: u32) -> u64 {
    use std::hash::Hasher;
    let mut h = Fnv1a::default();
    if format == 1 {
        for id in &items.ids {
            h.write(id.as_bytes());
            h.write(&[0]);
        }
        for v in &items.x {
            h.write(&v.to_bits().to_le_bytes());
        }
    } else {
        let d: usize = items.item_shape.iter().product();
        for (id, x) in items.ids.iter().zip(items.x.chunks_exact(d.max(1))) {
            hash_item(&mut h, id, x);
        }
    }
    h.finish()
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

/// Checks the state against a pool of items of `shape` with `(size, fingerprint)`.
fn check_pool(
    state: &SessionState,
    shape: &[usize],
    (size, fp): (usize, u64),
    origin: &Path,
) -> Result<()> {
    let channels = shape.first().copied().unwrap_or(0);
    state.check_consistent(channels, origin)?;
    state.config.arch.check_input(shape)?;
    if size != state.pool_size || fp != state.pool_fingerprint {
        return Err(Error::state(
            origin,
            format!(
                "the pool `{}` changed since the session started ({} items then, {size} now, \
                 or different content)",
                state.source, state.pool_size
            ),
        ));
    }
    Ok(())
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
        };
        Learner::resume(state, loaded, Path::new(STATE_FILE))?.seeded(seeds)
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
        let found = survey(&open, observer, true, true)?;
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
        };
        let reader = SourceReader::new(open, source, found.ids, found.item_shape);
        Learner::streamed(state, reader, test, Path::new(STATE_FILE))?.seeded(seeds)
    }

    /// Teaches the seed labels `(id, class name)` as round 0.
    fn seeded(mut self, seeds: &[(String, String)]) -> Result<Learner> {
        let rows: Vec<Answer> = seeds
            .iter()
            .enumerate()
            .map(|(i, (id, c))| Answer::new(i + 1, id.clone(), c.clone()))
            .collect();
        self.teach_rows(&rows, Path::new("seed labels"), 0)?;
        Ok(self)
    }

    /// Continues a saved session over the same pool, decoded in memory. `origin` names the
    /// state file in errors.
    pub fn resume(mut state: SessionState, loaded: Loaded, origin: &Path) -> Result<Learner> {
        check_format(&state, origin)?;
        let shape = loaded.pool.item_shape.clone();
        let found = (loaded.pool.len(), fingerprint(&loaded.pool, state.format));
        check_pool(&state, &shape, found, origin)?;
        if state.format != FORMAT {
            state.format = FORMAT;
            state.pool_fingerprint = fingerprint(&loaded.pool, FORMAT);
        }
        let test = test_set(&state, loaded.test.as_ref(), &shape)?;
        let raw = Dataset::new(
            loaded.pool.x.clone(),
            vec![0; loaded.pool.len()],
            shape,
            state.classes.len(),
        )?;
        let items = PoolItems::new(Values::Memory(Arc::new(loaded.pool)));
        let mut data = state.normalizer.apply(&raw)?;
        drop(raw);
        data.set_labels(&taught(&state, &items, origin)?)?;
        Ok(Learner {
            items,
            features: Features::Memory(data),
            test,
            state,
            last_model: None,
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
                    "session format {} predates streamed pools; run one command on it without \
                     --stream first (it is then written as format {FORMAT})",
                    state.format
                ),
            ));
        }
        let found = survey(&open, observer, false, true)?;
        let fp = found.fingerprint.expect("the survey hashed");
        check_pool(&state, &found.item_shape, (found.ids.len(), fp), origin)?;
        let reader = SourceReader::new(open, state.source.clone(), found.ids, found.item_shape);
        Learner::streamed(state, reader, test, origin)
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
        )?;
        let reader = Arc::new(reader);
        let items = PoolItems::new(Values::Streamed {
            reader: Arc::clone(&reader),
            kept: Arc::default(),
        });
        let mut pool = StreamedPool::new(reader, state.normalizer.clone(), state.classes.len())?;
        pool.set_labels(&taught(&state, &items, origin)?)?;
        let test = test_set(&state, test.as_ref(), &shape)?;
        Ok(Learner {
            items,
            features: Features::Streamed(pool),
            test,
            state,
            last_model: None,
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

    fn labeled_indices(&self) -> Vec<usize> {
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

    /// Trains on the labeled items, scores the others and returns the next batch (best
    /// first), recording it as pending. Before any label exists the batch is drawn at random.
    pub fn query(
        &mut self,
        request: &QueryRequest,
        device: &Device,
        observer: &mut dyn Observer,
    ) -> Result<Vec<Query>> {
        let round = self.state.rounds.len() + 1;
        if let Some(needs) = request.strategy.needs() {
            self.state
                .config
                .arch
                .check_needs(request.strategy.name(), &needs)?;
        }
        let cand = self.candidates(request.include_pending);
        if request.n == 0 || request.n > cand.len() {
            return Err(Error::config(
                "n",
                format!(
                    "asked for {} items; {} are unlabeled and not pending",
                    request.n,
                    cand.len()
                ),
            ));
        }
        if request.subsample.is_some_and(|m| m < request.n) {
            return Err(Error::config(
                "subsample",
                format!(
                    "{} items cannot yield a batch of {}",
                    request.subsample.unwrap_or(0),
                    request.n
                ),
            ));
        }
        let cfg = self.state.config.clone();
        let seed = cfg.seed;
        let key = round as u64;
        let lab = self.labeled_indices();
        let (picked, scorer, record) = if lab.is_empty() {
            self.last_model = None;
            let picks = pick_random(&cand, request.n, (seed, Purpose::Select, key))?;
            let none = (None, None, None);
            (
                Picked {
                    indices: picks,
                    scores: None,
                },
                "random".to_string(),
                none,
            )
        } else {
            let params = cfg.train.validate()?;
            let settings = RoundSettings {
                pool: self.features.reader(),
                model: &cfg.arch,
                ensemble: cfg.ensemble,
                train: &params,
                input_std: &self.state.normalizer.std,
                batch: cfg.batch,
                device,
            };
            let acquisition = Acquisition {
                strategy: &request.strategy,
                candidates: &cand,
                subsample: request.subsample,
                n: request.n,
                key,
                round,
            };
            let test_set = self.test.as_ref();
            let outcome = round::run(
                &settings,
                &lab,
                (seed, key),
                Some(acquisition),
                observer,
                |trained, train_on, rows, observer| {
                    let lp = log_probs_of(
                        trained.model.as_ref(),
                        train_on,
                        rows,
                        cfg.batch,
                        device,
                        observer,
                    )?;
                    let ylab: Vec<u32> = rows.iter().map(|&i| train_on.labels()[i]).collect();
                    let fit_metrics = metrics_from_log_probs(&lp, &ylab, trained.model.classes());
                    let test = match test_set {
                        Some(t) => Some(evaluate(
                            trained.model.as_ref(),
                            t,
                            cfg.batch,
                            device,
                            observer,
                        )?),
                        None => None,
                    };
                    Ok((fit_metrics, test))
                },
            )?;
            let (fit_metrics, test) = outcome.measured;
            let picked = outcome.picked.expect("the round acquired");
            let trained = outcome.trained;
            self.last_model = Some(trained);
            (
                picked,
                request.strategy.name().to_string(),
                (
                    Some(fit_metrics.acc),
                    test.map(|m| m.acc),
                    test.map(|m| m.nll),
                ),
            )
        };
        let out: Vec<Query> = picked
            .indices
            .iter()
            .enumerate()
            .map(|(k, &i)| Query {
                id: self.items.ids()[i].clone(),
                index: i,
                score: picked.scores.as_ref().map(|s| s[k]),
            })
            .collect();
        let chosen: HashSet<&str> = out.iter().map(|q| q.id.as_str()).collect();
        self.state
            .pending
            .retain(|p| !chosen.contains(p.id.as_str()));
        self.state.pending.extend(out.iter().map(|q| Pending {
            id: q.id.clone(),
            round,
            score: q.score,
        }));
        self.state.rounds.push(Round {
            round,
            scorer,
            labeled: lab.len(),
            queried: out.len(),
            fit_acc: record.0,
            test_acc: record.1,
            test_nll: record.2,
        });
        Ok(out)
    }

    /// The last query's model's prediction for pool items `indices`: `(class, probability)`
    /// of the most probable class each, or `None` when the last query trained no model (a
    /// random first round, or a session just loaded).
    pub fn predicted(
        &self,
        indices: &[usize],
        device: &Device,
    ) -> Result<Option<Vec<(usize, f32)>>> {
        let Some(t) = &self.last_model else {
            return Ok(None);
        };
        let c = t.model.classes();
        let (data, rows) = self.features.reader().rows(indices)?;
        let data: &Dataset = &data;
        let lp = log_probs_of(
            t.model.as_ref(),
            data,
            &rows,
            self.state.config.batch,
            device,
            &mut crate::observe::Silent,
        )?;
        Ok(Some(
            lp.chunks_exact(c)
                .map(|row| {
                    // First maximum wins, as everywhere else.
                    let (k, v) =
                        row.iter()
                            .enumerate()
                            .fold(
                                (0, f32::NEG_INFINITY),
                                |b, (k, &v)| {
                                    if v > b.1 {
                                        (k, v)
                                    } else {
                                        b
                                    }
                                },
                            );
                    (k, v.exp())
                })
                .collect(),
        ))
    }

    /// Teaches `(row, id, class name)` answers read from `origin` (a file; `row` its line or
    /// task number in errors); all are checked before any is applied.
    pub fn teach_from(&mut self, rows: &[(usize, String, String)], origin: &Path) -> Result<usize> {
        let rows: Vec<Answer> = rows
            .iter()
            .map(|(r, id, c)| Answer::new(*r, id.clone(), c.clone()))
            .collect();
        self.teach_answers(&rows, origin)
    }

    /// Teaches `answers` read from `origin` (a file, or what a page sent); all are checked
    /// before any is applied.
    pub fn teach_answers(&mut self, answers: &[Answer], origin: &Path) -> Result<usize> {
        let round = self.state.rounds.len();
        self.teach_rows(answers, origin, round)
    }

    /// Teaches one answer, checked as [`Learner::teach_answers`] checks a file's rows, and
    /// returns what [`Learner::undo`] needs to take it back.
    pub fn teach_one(&mut self, answer: &Answer, origin: &Path) -> Result<Undo> {
        let removed: Vec<(usize, Pending)> = self
            .state
            .pending
            .iter()
            .enumerate()
            .filter(|(_, p)| p.id == answer.id)
            .map(|(k, p)| (k, p.clone()))
            .collect();
        self.teach_answers(std::slice::from_ref(answer), origin)?;
        Ok(Undo {
            id: answer.id.clone(),
            removed,
        })
    }

    /// Takes back the answer `undo` came from: it must be the last label taught, in the
    /// current round. The item is unlabeled again and its pending entry is back in its place.
    pub fn undo(&mut self, undo: Undo) -> Result<()> {
        let round = self.state.rounds.len();
        match self.state.labeled.last() {
            Some(l) if l.id == undo.id && l.round == round && round > 0 => {}
            _ => {
                return Err(Error::config(
                    "undo",
                    format!(
                        "`{}` is not the last label taught in round {round}; only that one \
                         can be taken back",
                        undo.id
                    ),
                ))
            }
        }
        self.state.labeled.pop();
        let i = self
            .items
            .position(&undo.id)
            .ok_or_else(|| Error::config("undo", format!("`{}` is not in the pool", undo.id)))?;
        self.features.set_labels(&[(i, 0)])?;
        for (k, p) in undo.removed {
            let at = k.min(self.state.pending.len());
            self.state.pending.insert(at, p);
        }
        Ok(())
    }

    /// Writes a query's batch to `out` atomically as CSV: `id,index,path,score` (the image's
    /// path for image-folder pools, else empty; the score empty for random picks and joint
    /// criteria), best first, quoted as RFC 4180 requires so that `teach` reads every id back.
    pub fn write_batch(&self, out: &Path, batch: &[Query]) -> Result<()> {
        let folder = match crate::data::source::Source::parse(&self.state.source) {
            Ok(crate::data::source::Source::Images(dir)) => Some(dir),
            _ => None,
        };
        let rows = batch.iter().map(|q| {
            let path = folder
                .as_ref()
                .map(|d| d.join(&q.id).to_string_lossy().into_owned())
                .unwrap_or_default();
            let score = q.score.map(|v| v.to_string()).unwrap_or_default();
            vec![q.id.clone(), q.index.to_string(), path, score]
        });
        crate::fsutil::write_csv(out, &["id", "index", "path", "score"], rows)
    }

    /// Teaches `(id, class name)` answers; all are checked before any is applied.
    pub fn teach(&mut self, answers: &[(String, String)]) -> Result<usize> {
        let rows: Vec<Answer> = answers
            .iter()
            .enumerate()
            .map(|(i, (id, c))| Answer::new(i + 1, id.clone(), c.clone()))
            .collect();
        let round = self.state.rounds.len();
        self.teach_rows(&rows, Path::new("answers"), round)
    }

    /// Teaches the answers in a CSV file with columns `id,label` and an optional `note`
    /// (label = class name); every row is checked before any is applied, and an error names
    /// the file and line.
    pub fn teach_csv(&mut self, path: &Path) -> Result<usize> {
        let rows = read_answers(path)?;
        let round = self.state.rounds.len();
        self.teach_rows(&rows, path, round)
    }

    fn teach_rows(&mut self, rows: &[Answer], origin: &Path, round: usize) -> Result<usize> {
        let row_err = |row: usize, problem: String| Error::Row {
            path: origin.to_path_buf(),
            row,
            problem,
        };
        let labeled: HashMap<&str, &Labeled> = self
            .state
            .labeled
            .iter()
            .map(|l| (l.id.as_str(), l))
            .collect();
        let mut seen: HashMap<&str, usize> = HashMap::new();
        let mut labels = Vec::with_capacity(rows.len());
        for Answer {
            row,
            id,
            label: class,
            note,
        } in rows
        {
            if let Some(n) = note {
                if n.chars().count() > MAX_NOTE || n.chars().any(char::is_control) {
                    return Err(row_err(
                        *row,
                        format!(
                            "the note on `{id}` is longer than {MAX_NOTE} characters or holds \
                             control characters"
                        ),
                    ));
                }
            }
            let Some(i) = self.items.position(id) else {
                return Err(row_err(*row, format!("unknown id `{id}`")));
            };
            if let Some(prev) = seen.insert(id.as_str(), *row) {
                return Err(row_err(
                    *row,
                    format!("id `{id}` appears twice (also row {prev})"),
                ));
            }
            if let Some(l) = labeled.get(id.as_str()) {
                return Err(row_err(
                    *row,
                    format!(
                        "id `{id}` is already labeled `{}` (round {})",
                        l.label, l.round
                    ),
                ));
            }
            let Some(c) = self.state.classes.iter().position(|k| k == class) else {
                return Err(row_err(
                    *row,
                    format!(
                        "label `{class}` is not one of the classes {:?}",
                        self.state.classes
                    ),
                ));
            };
            labels.push((i, c as u32));
        }
        self.features.set_labels(&labels)?;
        let taught: HashSet<&str> = rows.iter().map(|r| r.id.as_str()).collect();
        self.state
            .pending
            .retain(|p| !taught.contains(p.id.as_str()));
        self.state.labeled.extend(rows.iter().map(|a| Labeled {
            id: a.id.clone(),
            label: a.label.clone(),
            round,
            note: a.note.clone(),
        }));
        Ok(rows.len())
    }
}

/// Reads `id,label` rows (header required, extra columns ignored) with their line numbers.
pub fn read_answer_csv(path: &Path) -> Result<Vec<(usize, String, String)>> {
    Ok(read_answers(path)?
        .into_iter()
        .map(|a| (a.row, a.id, a.label))
        .collect())
}

/// Reads `id,label` rows and the optional `note` column (header required, other columns
/// ignored; an empty note is none) with their line numbers.
pub fn read_answers(path: &Path) -> Result<Vec<Answer>> {
    let (header, rows) = read_csv(path)?;
    let col = |name: &str| {
        header
            .iter()
            .position(|h| h == name)
            .ok_or_else(|| Error::Row {
                path: PathBuf::from(path),
                row: 1,
                problem: format!("the header has no `{name}` column (expected id,label)"),
            })
    };
    let (ic, lc) = (col("id")?, col("label")?);
    let nc = header.iter().position(|h| h == "note");
    rows.into_iter()
        .map(|(n, r)| {
            if r[lc].is_empty() {
                return Err(Error::Row {
                    path: PathBuf::from(path),
                    row: n,
                    problem: format!("id `{}` has an empty label", r[ic]),
                });
            }
            let note = nc.map(|c| r[c].clone()).filter(|s| !s.is_empty());
            Ok(Answer {
                row: n,
                id: r[ic].clone(),
                label: r[lc].clone(),
                note,
            })
        })
        .collect()
}
