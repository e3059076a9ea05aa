//! A session's state as `session.json` records it: the settings, the labeled items, the
//! pending queries and one record per round, with the checks a state read from disk passes.

use crate::data::dataset::MAX_CLASSES;
use crate::data::Normalizer;
use crate::error::{Error, Result, ResultExt};
use crate::metrics::stopping::{StopMeasure, StopRule};
use crate::models::Arch;
use crate::train::{TrainConfig, MAX_MEMBERS};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::path::Path;

/// State format: 2 hashes the pool item by item (id, then values), so a streamed pool is
/// checked in one pass; format 1 (ids, then all values) is still read, checked on a pool in
/// memory and written back as format 2.
pub(super) const FORMAT: u32 = 2;
/// Name of the state file inside a session folder.
pub const STATE_FILE: &str = "session.json";

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
    /// The class the model of round `round` predicted for the item when the person answered
    /// (the labeling page records it; how often it matched is the page's learning curve when
    /// the pool has no test split).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guess: Option<String>,
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
    /// The class the latest model predicted for the item, when the answer's page showed one.
    pub guess: Option<String>,
    /// The round the answer was given after, when it waited while a later round trained
    /// (`None`: the current round).
    pub round: Option<usize>,
}

impl Answer {
    /// An answer without a note.
    pub fn new(row: usize, id: impl Into<String>, label: impl Into<String>) -> Answer {
        Answer {
            row,
            id: id.into(),
            label: label.into(),
            note: None,
            guess: None,
            round: None,
        }
    }
}

/// Checks a note on answer `id`: at most [`MAX_NOTE`] characters, no control characters.
pub(crate) fn check_note(id: &str, note: &str) -> std::result::Result<(), String> {
    if note.chars().count() > MAX_NOTE || note.chars().any(char::is_control) {
        return Err(format!(
            "the note on `{id}` is longer than {MAX_NOTE} characters or holds control characters"
        ));
    }
    Ok(())
}

/// The longest note kept with an answer, in characters.
pub const MAX_NOTE: usize = 2000;

/// What [`Learner::undo`](super::Learner::undo) needs to take one answer of
/// [`Learner::teach_one`](super::Learner::teach_one) back: the item
/// and the pending entry (with its place in the pending list) that the answer removed.
#[derive(Debug, Clone, PartialEq)]
pub struct Undo {
    /// The answered item's id.
    pub id: String,
    pub(super) removed: Vec<(usize, Pending)>,
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
    /// What the round's model predicted on the session's stop set, against the last trained
    /// round's predictions (none when no model trained).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopping: Option<StopMeasure>,
}

/// How often one round's model guessed the class the person then gave: a learning curve
/// that needs no test split.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct GuessMatch {
    /// The round whose model guessed.
    pub round: usize,
    /// The labels that model was trained on.
    pub labeled: usize,
    /// Answers that came with its guess.
    pub answered: usize,
    /// Of them, those equal to the guess.
    pub matched: usize,
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
    /// The image folder a backbone embedded into the session's pool: the person named it, so
    /// its images are what the page and Label Studio tasks show of the items (never a folder
    /// the embedding file itself names outside its own folder).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_root: Option<std::path::PathBuf>,
    /// The stopping rule whose word the session passes on to the person labeling (`status`,
    /// the page, the Label Studio backend's log); every rule is measured either way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<StopRule>,
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
    /// The last trained round's predicted classes on the stop set ([`crate::round::stop_set`]
    /// of the pool, from the session's seed), which the next round's stopping measures compare
    /// with; empty before a model trains.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop_predicted: Vec<u32>,
}

/// What the stopping rules say of a session: the last measured round and, per rule, the round
/// since which it says stop.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stopping {
    /// The last round whose model was measured.
    pub round: usize,
    /// Its measures.
    pub measure: StopMeasure,
    /// Per rule (by name, every rule), the round since which it says stop; `null`: it does
    /// not.
    pub since: BTreeMap<&'static str, Option<usize>>,
    /// The session's own rule (`init --stop`), if it has one.
    pub rule: Option<StopRule>,
    /// Whether that rule says labeling more has stopped paying.
    pub stop: bool,
}

impl SessionState {
    /// What the session folder `dir` holds (its `session.json`), read without taking its lock
    /// or loading its pool: for reports on a session, not for continuing it (see
    /// [`crate::session::open`]).
    pub fn read(dir: &Path) -> Result<SessionState> {
        crate::fsutil::read_json(&Self::file_in(dir)?)
            .context_with(|| format!("session {}: not a session folder", dir.display()))
    }

    /// The state file of the session folder `dir`, or a state error saying `dir` holds no
    /// session.
    pub fn file_in(dir: &Path) -> Result<std::path::PathBuf> {
        let path = dir.join(STATE_FILE);
        if !path.is_file() {
            return Err(Error::state(
                dir,
                format!("not a session folder (no {STATE_FILE}: start a session there first)"),
            ));
        }
        Ok(path)
    }

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
            if r.stopping.is_some_and(|m| !m.is_sound()) {
                return bad(format!(
                    "round {}'s stopping measures are out of range",
                    r.round
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
        let stop_set = crate::round::STOP_SET.min(self.pool_size);
        let sized = self.stop_predicted.is_empty() || self.stop_predicted.len() == stop_set;
        let classes = self.classes.len();
        if !sized || self.stop_predicted.iter().any(|&c| c as usize >= classes) {
            return bad(format!(
                "{} stop-set predictions, or a class outside the {classes} classes; a session \
                 keeps none or {stop_set} (one per item of the pool's stop set)",
                self.stop_predicted.len(),
            ));
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
            if let Some(g) = l.guess.as_ref().filter(|g| !self.classes.contains(g)) {
                return bad(format!(
                    "the guess `{g}` recorded on `{}` is not one of the classes",
                    l.id
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

    /// What the stopping rules say after the rounds so far (`None` before a round measured
    /// its model).
    pub fn stopping(&self) -> Option<Stopping> {
        let measured: Vec<(usize, StopMeasure)> = self
            .rounds
            .iter()
            .filter_map(|r| r.stopping.map(|m| (r.round, m)))
            .collect();
        let &(round, measure) = measured.last()?;
        let measures: Vec<StopMeasure> = measured.iter().map(|m| m.1).collect();
        let since = StopRule::ALL
            .into_iter()
            .map(|rule| {
                (
                    rule.name(),
                    rule.stop_since(&measures).map(|k| measured[k].0),
                )
            })
            .collect();
        Some(Stopping {
            round,
            measure,
            since,
            rule: self.config.stop,
            stop: self.config.stop.is_some_and(|r| r.says_stop(&measures)),
        })
    }

    /// Labeled items per class name.
    pub fn per_class(&self) -> BTreeMap<&str, usize> {
        let mut m: BTreeMap<&str, usize> = self.classes.iter().map(|c| (c.as_str(), 0)).collect();
        for l in &self.labeled {
            *m.entry(l.label.as_str()).or_default() += 1;
        }
        m
    }

    /// Labeled items per round they were taught after (0: given at init) and class name:
    /// the class balance of each round's answers, every class listed in each.
    pub fn per_round(&self) -> BTreeMap<usize, BTreeMap<&str, usize>> {
        let mut out: BTreeMap<usize, BTreeMap<&str, usize>> = BTreeMap::new();
        for l in &self.labeled {
            let counts = out
                .entry(l.round)
                .or_insert_with(|| self.classes.iter().map(|c| (c.as_str(), 0)).collect());
            *counts.entry(l.label.as_str()).or_default() += 1;
        }
        out
    }

    /// Per round whose model guessed, how often its guesses matched the answers (rounds in
    /// order; rounds without a recorded guess are left out).
    pub fn guess_matches(&self) -> Vec<GuessMatch> {
        let mut per: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
        for l in &self.labeled {
            if let Some(g) = &l.guess {
                let e = per.entry(l.round).or_default();
                e.0 += 1;
                e.1 += usize::from(*g == l.label);
            }
        }
        per.into_iter()
            .map(|(round, (answered, matched))| GuessMatch {
                round,
                labeled: round
                    .checked_sub(1)
                    .and_then(|k| self.rounds.get(k))
                    .map_or(0, |r| r.labeled),
                answered,
                matched,
            })
            .collect()
    }

    /// The session at a glance as one JSON object: `source`, `pool` (items), `labeled`,
    /// `pending`, `rounds`, `per_class` (labeled items per class name), `per_round` (per round
    /// the items were taught after, `round` and their `per_class`), `last_round` (the last
    /// [`Round`], `null` before the first query) and `stopping` ([`Stopping`], `null` before a
    /// round measured its model).
    pub fn summary(&self) -> serde_json::Value {
        serde_json::json!({
            "source": self.source,
            "pool": self.pool_size,
            "labeled": self.labeled.len(),
            "pending": self.pending.len(),
            "rounds": self.rounds.len(),
            "per_class": self.per_class(),
            "per_round": self
                .per_round()
                .into_iter()
                .map(|(round, per_class)| serde_json::json!({"round": round, "per_class": per_class}))
                .collect::<Vec<_>>(),
            "last_round": self.rounds.last(),
            "stopping": self.stopping(),
        })
    }
}
