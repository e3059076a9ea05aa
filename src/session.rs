//! Labeling sessions: active learning with a person as the oracle.
//!
//! A [`Learner`] holds a pool of [`Items`] (each with a stable id) and a [`SessionState`]:
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

use crate::checkpoint;
use crate::data::dataset::MAX_CLASSES;
use crate::data::source::{read_csv, Items, Loaded};
use crate::data::{Dataset, Normalizer};
use crate::error::{Error, Result};
use crate::fsutil::{read_json, write_json};
use crate::models::Arch;
use crate::nn::init::Params;
use crate::observe::Observer;
use crate::predict::{evaluate, log_probs_of, metrics_from_log_probs, Scoring};
use crate::rng::Purpose;
use crate::round::{fit, pick, pick_random, subsample, Picked, Strategy};
use crate::train::{TrainConfig, Trained, MAX_MEMBERS};
use candle_core::Device;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const FORMAT: u32 = 1;
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
    /// Hash of the pool's ids and features: a changed pool is refused.
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

/// A labeling session over a pool (see the module docs).
pub struct Learner {
    items: Arc<Items>,
    data: Dataset,
    test: Option<Dataset>,
    index: HashMap<String, usize>,
    state: SessionState,
    last_model: Option<Trained>,
}

fn fingerprint(items: &Items) -> u64 {
    use std::hash::Hasher;
    let mut h = crate::data::Fnv1a::default();
    for id in &items.ids {
        h.write(id.as_bytes());
        h.write(&[0]);
    }
    for v in &items.x {
        h.write(&v.to_bits().to_le_bytes());
    }
    h.finish()
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
        let raw = loaded.pool.dataset()?;
        let normalizer = Normalizer::fit(&raw);
        let state = SessionState {
            format: FORMAT,
            source: source.to_string(),
            pool_size: loaded.pool.len(),
            pool_fingerprint: fingerprint(&loaded.pool),
            classes,
            config,
            normalizer,
            labeled: Vec::new(),
            pending: Vec::new(),
            rounds: Vec::new(),
        };
        let mut l = Learner::resume(state, loaded, Path::new(STATE_FILE))?;
        let rows: Vec<Answer> = seeds
            .iter()
            .enumerate()
            .map(|(i, (id, c))| Answer::new(i + 1, id.clone(), c.clone()))
            .collect();
        l.teach_rows(&rows, Path::new("seed labels"), 0)?;
        Ok(l)
    }

    /// Continues a saved session over the same pool. `origin` names the state file in errors.
    pub fn resume(state: SessionState, loaded: Loaded, origin: &Path) -> Result<Learner> {
        if state.format != FORMAT {
            return Err(Error::state(
                origin,
                format!(
                    "session format {} is not supported (expected {FORMAT})",
                    state.format
                ),
            ));
        }
        let channels = loaded.pool.item_shape.first().copied().unwrap_or(0);
        state.check_consistent(channels, origin)?;
        state.config.arch.check_input(&loaded.pool.item_shape)?;
        if loaded.pool.len() != state.pool_size
            || fingerprint(&loaded.pool) != state.pool_fingerprint
        {
            return Err(Error::state(
                origin,
                format!(
                    "the pool `{}` changed since the session started ({} items then, {} now, \
                     or different content)",
                    state.source,
                    state.pool_size,
                    loaded.pool.len()
                ),
            ));
        }
        let index: HashMap<String, usize> = loaded
            .pool
            .ids
            .iter()
            .enumerate()
            .map(|(i, id)| (id.clone(), i))
            .collect();
        let raw = loaded.pool.dataset()?;
        // Only taught labels count: the source's own labels (ground truth of a benchmark
        // set) never reach training.
        let mut y = vec![0u32; raw.len()];
        for l in &state.labeled {
            let i = index.get(&l.id).ok_or_else(|| {
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
            y[*i] = c as u32;
        }
        let raw = Dataset::new(
            raw.features().to_vec(),
            y,
            raw.item_shape().to_vec(),
            state.classes.len(),
        )?;
        let data = state.normalizer.apply(&raw)?;
        let test = match &loaded.test {
            Some(t)
                if t.item_shape == loaded.pool.item_shape
                    && t.labels.iter().all(Option::is_some)
                    && t.labels
                        .iter()
                        .flatten()
                        .all(|&l| (l as usize) < state.classes.len()) =>
            {
                Some(state.normalizer.apply(&t.dataset()?)?)
            }
            _ => None,
        };
        Ok(Learner {
            items: Arc::new(loaded.pool),
            data,
            test,
            index,
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
            let members: Vec<(PathBuf, Params)> = match self.state.config.ensemble {
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
                    &self.items.item_shape,
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

    /// The pool.
    pub fn items(&self) -> &Items {
        &self.items
    }

    /// The pool, shared: for readers that outlive a borrow of the learner (a server renders
    /// items while another thread trains).
    pub fn shared_items(&self) -> Arc<Items> {
        Arc::clone(&self.items)
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
            .map(|l| self.index[&l.id])
            .collect()
    }

    /// Pool positions a query may ask for: unlabeled, and not pending unless
    /// `include_pending`.
    pub fn candidates(&self, include_pending: bool) -> Vec<usize> {
        let labeled: HashSet<&str> = self.state.labeled.iter().map(|l| l.id.as_str()).collect();
        let pending: HashSet<&str> = self.state.pending.iter().map(|p| p.id.as_str()).collect();
        (0..self.items.len())
            .filter(|&i| {
                let id = self.items.ids[i].as_str();
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
            let trained = fit(
                &cfg.arch,
                cfg.ensemble,
                &self.data,
                &lab,
                &params,
                (seed, key),
                device,
                observer,
            )?;
            let lp = log_probs_of(
                trained.model.as_ref(),
                &self.data,
                &lab,
                cfg.batch,
                device,
                observer,
            )?;
            let ylab: Vec<u32> = lab.iter().map(|&i| self.data.labels()[i]).collect();
            let fit_metrics = metrics_from_log_probs(&lp, &ylab, trained.model.classes());
            let test = match &self.test {
                Some(t) => Some(evaluate(
                    trained.model.as_ref(),
                    t,
                    cfg.batch,
                    device,
                    observer,
                )?),
                None => None,
            };
            let scoring = Scoring::of_trained(
                &trained,
                &cfg.arch,
                cfg.ensemble,
                &self.state.normalizer.std,
                cfg.batch,
                device,
            );
            let scored = subsample(&cand, request.subsample, (seed, key));
            let picked = pick(
                &request.strategy,
                &scoring,
                &self.data,
                &scored,
                request.n,
                (seed, key),
                round,
                observer,
            )?;
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
                id: self.items.ids[i].clone(),
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
        let lp = log_probs_of(
            t.model.as_ref(),
            &self.data,
            indices,
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
        let i = self.index[&undo.id];
        self.data.set_labels(&[(i, 0)])?;
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
            let Some(&i) = self.index.get(id.as_str()) else {
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
        self.data.set_labels(&labels)?;
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
