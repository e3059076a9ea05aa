//! The acquisition loop: seed set, then cycles of train -> evaluate -> score -> label.
//!
//! One [`run`] is one strategy with one seed. Cycle `t` trains a fresh model on every item
//! labeled in cycles `0..=t`, evaluates it on the test split, and (if `t` is not the last
//! cycle) scores the unlabeled pool with it and labels the top `query` items for cycle `t + 1`.
//! After each cycle the whole [`RunState`] is written atomically, so an interrupted run resumes
//! at the first unfinished cycle and produces the identical curve: every cycle's randomness is
//! derived from `(seed, purpose, cycle)` (see [`crate::rng`]).

use crate::data::{Dataset, Pool, PoolReader};
use crate::error::{Error, Result};
use crate::fsutil::write_json;
use crate::metrics::stopping::{StopMeasure, StopRule};
pub use crate::observe::CycleRecord;
use crate::observe::{check, Event, Observer};
use crate::predict::evaluate;
use crate::rng::Purpose;
use crate::round::{self, Acquisition, RoundSettings, Strategy};
use crate::train::{ModelBuilder, TrainConfig, TrainParams};
use candle_core::Device;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::Instant;

/// Loop settings (the MNIST protocol of Wang & Ji 2024 by default).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoopConfig {
    /// Random seed labels before cycle 0 (m1).
    pub initial: usize,
    /// Items labeled per cycle (m2).
    pub query: usize,
    /// Acquisition cycles after the seed cycle.
    pub cycles: usize,
    /// Training settings for every cycle.
    pub train: TrainConfig,
    /// Batch size for evaluation and pool scoring.
    pub batch: usize,
    /// Train a deep ensemble of this many members each cycle instead of one model (its mean
    /// prediction is evaluated; sample scorers read one draw per member).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ensemble: Option<usize>,
    /// Score a seeded random subset of this many unlabeled items each cycle instead of all
    /// of them (see [`crate::round::subsample`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subsample: Option<usize>,
    /// A strategy that can choose from the items alone (core-set, TypiClust, ProbCover)
    /// also chooses the `initial` items, from their own vectors ([`crate::round::cold_start`]);
    /// the others start from the random seed set as usual.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cold_start: bool,
    /// The random seed set is drawn class by class ([`crate::round::pick_balanced`]), an equal
    /// share of the `initial` items per class (CDALBench's `initial_points_per_class`), instead
    /// of uniformly from the pool; a strategy that starts cold chooses its own.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub balanced_start: bool,
    /// End the run after the first cycle this stopping rule says stop (its picks are not
    /// labeled); `None`: every cycle runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<StopRule>,
}

impl Default for LoopConfig {
    fn default() -> Self {
        Self {
            initial: 20,
            query: 20,
            cycles: 10,
            train: TrainConfig::default(),
            batch: 512,
            ensemble: None,
            subsample: None,
            cold_start: false,
            balanced_start: false,
            stop: None,
        }
    }
}

/// A [`LoopConfig`] checked against the pool it will run on.
#[derive(Debug, Clone)]
pub struct LoopParams {
    config: LoopConfig,
    train: TrainParams,
}

impl LoopConfig {
    /// Validates ranges and that `initial + cycles * query` items exist in a pool of `pool`.
    pub fn validate(&self, pool: usize) -> Result<LoopParams> {
        if self.initial == 0 {
            return Err(Error::config("initial", "must be at least 1"));
        }
        if self.query == 0 && self.cycles > 0 {
            return Err(Error::config("query", "must be at least 1"));
        }
        if self.batch == 0 {
            return Err(Error::config("batch", "must be at least 1"));
        }
        if self.ensemble.is_some_and(|k| k < 2) {
            return Err(Error::config("ensemble", "needs at least 2 members"));
        }
        if let Some(m) = self.subsample {
            if m < self.query {
                return Err(Error::config(
                    "subsample",
                    format!("{m} items cannot yield a batch of {}", self.query),
                ));
            }
        }
        if self.initial > pool {
            return Err(Error::config(
                "initial",
                format!("{} labels needed, the pool has {pool} items", self.initial),
            ));
        }
        if self.query > pool {
            return Err(Error::config(
                "query",
                format!("{} items per batch, the pool has {pool} items", self.query),
            ));
        }
        let needed = self
            .cycles
            .checked_mul(self.query)
            .and_then(|q| q.checked_add(self.initial));
        if needed.is_none_or(|n| n > pool) {
            return Err(Error::config(
                "cycles",
                format!(
                    "{} + {} x {} = {} labels needed, the pool has {pool} items",
                    self.initial,
                    self.cycles,
                    self.query,
                    needed.map_or("more than 2^64".to_string(), |n| n.to_string())
                ),
            ));
        }
        Ok(LoopParams {
            train: self.train.validate()?,
            config: self.clone(),
        })
    }
}

impl LoopParams {
    /// The validated settings.
    pub fn config(&self) -> &LoopConfig {
        &self.config
    }
}

/// Everything needed to continue a run exactly where it stopped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunState {
    /// State format version.
    pub format: u32,
    /// The alkit version that wrote it.
    pub alkit_version: String,
    /// Strategy name.
    pub strategy: String,
    /// The run's seed; all randomness derives from it (see `rng`).
    pub seed: u64,
    /// Loop settings.
    pub config: LoopConfig,
    /// A description of the model (architecture and its config) the run trains.
    pub model: String,
    /// Fingerprints of the train and test data (hex FNV-1a), checked on resume.
    pub data: [String; 2],
    /// How the RNG is derived: the only RNG state a run needs besides the seed.
    pub rng: String,
    /// `(index, cycle)` of every labeled item, including those chosen for the next cycle.
    pub labeled: Vec<(usize, usize)>,
    /// Completed cycles.
    pub records: Vec<CycleRecord>,
    /// Scoring time of the acquisition already made for the next cycle.
    pub pending_score_s: f64,
    /// The last cycle's predicted classes on the stop set ([`round::stop_set`]), which the next
    /// cycle's stopping measures compare with (empty before the first cycle, and in a run
    /// recorded before they were kept).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop_predicted: Vec<u32>,
}

const FORMAT: u32 = 1;

impl RunState {
    /// A fresh state for `strategy` with `seed`.
    pub fn new(
        strategy: &Strategy,
        seed: u64,
        config: &LoopConfig,
        model: String,
        train: &Dataset,
        test: &Dataset,
    ) -> Self {
        let data = [train.fingerprint(), test.fingerprint()];
        Self::with_fingerprints(strategy, seed, config, model, data)
    }

    /// [`RunState::new`] with the train and test fingerprints ([`Dataset::fingerprint`],
    /// [`PoolReader::fingerprint`]) already taken: a streamed pool is read once for them, not
    /// once per run.
    pub fn with_fingerprints(
        strategy: &Strategy,
        seed: u64,
        config: &LoopConfig,
        model: String,
        [train, test]: [u64; 2],
    ) -> Self {
        Self {
            format: FORMAT,
            alkit_version: env!("CARGO_PKG_VERSION").into(),
            strategy: strategy.name().into(),
            seed,
            config: config.clone(),
            model,
            data: [format!("{train:016x}"), format!("{test:016x}")],
            rng: "chacha8; stream(seed, purpose, cycle) = seed_from_u64(seed), set_stream(purpose << 32 | cycle)".into(),
            labeled: Vec::new(),
            records: Vec::new(),
            pending_score_s: 0.0,
            stop_predicted: Vec::new(),
        }
    }

    /// Checks that a loaded state belongs to the run described by `expected` (same strategy,
    /// seed, settings, model and data); `path` names the file in the error.
    pub fn check_matches(&self, expected: &RunState, path: &Path) -> Result<()> {
        let mismatch = |what: &str, a: String, b: String| {
            Err(Error::state(
                path,
                format!("saved {what} {a} differs from this run's {b}"),
            ))
        };
        if self.format != FORMAT {
            return mismatch("format", self.format.to_string(), FORMAT.to_string());
        }
        if self.strategy != expected.strategy {
            return mismatch("strategy", self.strategy.clone(), expected.strategy.clone());
        }
        if self.seed != expected.seed {
            return mismatch("seed", self.seed.to_string(), expected.seed.to_string());
        }
        if self.config != expected.config {
            return mismatch(
                "settings",
                format!("{:?}", self.config),
                format!("{:?}", expected.config),
            );
        }
        if self.model != expected.model {
            return mismatch("model", self.model.clone(), expected.model.clone());
        }
        if self.data != expected.data {
            return mismatch(
                "data fingerprints",
                format!("{:?}", self.data),
                format!("{:?}", expected.data),
            );
        }
        self.check_consistent(path)
    }

    /// Checks that the saved progress is one the loop could have written: records for cycles
    /// `0, 1, ...` in order, each with `initial + cycle * query` labels, and the labeled items
    /// distinct, `initial` of them tagged cycle 0 and `query` tagged each later cycle up to the
    /// next one to train (up to the last recorded one, in a run its stopping rule ended). An
    /// edited or truncated file is an error naming it.
    pub fn check_consistent(&self, path: &Path) -> Result<()> {
        let bad = |problem: String| Err(Error::state(path, problem));
        let cfg = &self.config;
        if self.records.len() > cfg.cycles + 1 {
            return bad(format!(
                "{} cycle records for a run of {} cycles",
                self.records.len(),
                cfg.cycles
            ));
        }
        for (k, r) in self.records.iter().enumerate() {
            let want = cfg.initial + k * cfg.query;
            if r.cycle != k || r.labeled != want {
                return bad(format!(
                    "record {k} says cycle {} with {} labels; the loop writes cycle {k} with {want}",
                    r.cycle, r.labeled
                ));
            }
        }
        if self.labeled.is_empty() && self.records.is_empty() {
            return Ok(());
        }
        // A run its stopping rule ended labels nothing after its last record.
        let last = match self.stopped() {
            true => self.records.len() - 1,
            false => self.records.len().min(cfg.cycles),
        };
        let mut per_cycle = vec![0usize; last + 1];
        let mut seen = std::collections::HashSet::new();
        for &(index, cycle) in &self.labeled {
            if !seen.insert(index) {
                return bad(format!("item {index} is labeled twice"));
            }
            match per_cycle.get_mut(cycle) {
                Some(n) => *n += 1,
                None => {
                    return bad(format!(
                        "item {index} is tagged cycle {cycle}; after {} records the loop has \
                         labeled up to cycle {last}",
                        self.records.len()
                    ))
                }
            }
        }
        for (cycle, &n) in per_cycle.iter().enumerate() {
            let want = if cycle == 0 { cfg.initial } else { cfg.query };
            if n != want {
                return bad(format!(
                    "{n} items are tagged cycle {cycle}; the loop labels {want}"
                ));
            }
        }
        Ok(())
    }

    /// True when every cycle is done, or the run's stopping rule ended it.
    pub fn is_complete(&self) -> bool {
        self.records.len() == self.config.cycles + 1 || self.stopped()
    }

    /// Whether the run's stopping rule (`config.stop`) said stop after its last cycle.
    pub fn stopped(&self) -> bool {
        let measures: Vec<StopMeasure> = self.records.iter().filter_map(|r| r.stopping).collect();
        self.config
            .stop
            .is_some_and(|rule| rule.says_stop(&measures))
    }

    /// The labels the run would hold at the end of its budget: `initial + cycles * query`.
    pub fn budget(&self) -> usize {
        self.config.initial + self.config.cycles * self.config.query
    }
}

/// What one run needs besides its state.
pub struct RunContext<'a> {
    /// Normalised training split with every label: the pool, in memory or streamed.
    pub train: &'a dyn PoolReader,
    /// Normalised test split.
    pub test: &'a Dataset,
    /// Makes a fresh model each cycle.
    pub model: &'a dyn ModelBuilder,
    /// Validated loop settings.
    pub params: &'a LoopParams,
    /// Per-channel standard deviation the inputs were normalised with (perturbation scale).
    pub input_std: &'a [f32],
    /// Where tensors live.
    pub device: &'a Device,
}

/// The run's pool: its labeled items, or, before any, the first `initial` items chosen as
/// [`round::first_batch`] chooses them (from `(seed, SeedSet, 0)`), recorded in `state`.
fn seeded_pool(
    ctx: &RunContext<'_>,
    strategy: &Strategy,
    state: &mut RunState,
    observer: &mut dyn Observer,
) -> Result<Pool> {
    let cfg = ctx.params.config();
    let mut pool = Pool::from_labeled(ctx.train.len(), &state.labeled)?;
    if state.labeled.is_empty() {
        let all = pool.candidates();
        let draw = (state.seed, Purpose::SeedSet, 0);
        let picks = if cfg.balanced_start && !round::starts_cold(strategy, cfg.cold_start) {
            round::pick_balanced(ctx.train, all.indices(), cfg.initial, draw)?
        } else {
            round::first_batch(
                strategy,
                cfg.cold_start,
                ctx.train,
                all.indices(),
                ctx.test.classes(),
                cfg.initial,
                draw,
                observer,
            )?
            .0
        };
        pool.acquire(&picks, 0)?;
        state.labeled = pool.labeled().to_vec();
    }
    Ok(pool)
}

/// Runs (or continues) `state` to completion, saving it to `save` after every cycle.
pub fn run(
    ctx: &RunContext<'_>,
    strategy: &Strategy,
    state: &mut RunState,
    save: Option<&Path>,
    observer: &mut dyn Observer,
) -> Result<()> {
    let cfg = ctx.params.config();
    let seed = state.seed;
    let mut pool = seeded_pool(ctx, strategy, state, observer)?;
    let stop = ctx.train.gather(&round::stop_set(ctx.train.len(), seed)?)?;
    let stop_rows: Vec<usize> = (0..stop.len()).collect();
    let start = state.records.len();
    let start_ev = Event::RunStarted {
        strategy: strategy.name(),
        seed,
        from_cycle: start,
        cycles: cfg.cycles,
    };
    check(observer, &start_ev)?;
    for cycle in start..=cfg.cycles {
        let labeled = pool.labeled_indices();
        let ev = Event::CycleStarted {
            cycle,
            labeled: labeled.len(),
        };
        check(observer, &ev)?;
        let t0 = Instant::now();
        let settings = RoundSettings {
            pool: ctx.train,
            model: ctx.model,
            ensemble: cfg.ensemble,
            train: &ctx.params.train,
            input_std: ctx.input_std,
            batch: cfg.batch,
            device: ctx.device,
        };
        let cand = pool.candidates();
        let acquisition = (cycle < cfg.cycles).then(|| Acquisition {
            strategy,
            candidates: cand.indices(),
            subsample: cfg.subsample,
            n: cfg.query,
            key: cycle as u64 + 1,
            round: cycle,
        });
        let outcome = round::run(
            &settings,
            &labeled,
            (seed, cycle as u64),
            acquisition,
            observer,
            |trained, _, _, observer| {
                let train_s = t0.elapsed().as_secs_f64();
                let model = trained.model.as_ref();
                let m = evaluate(model, ctx.test, cfg.batch, ctx.device, observer)?;
                let s = round::measure_stop(
                    model,
                    (&stop, &stop_rows),
                    &state.stop_predicted,
                    (cfg.batch, ctx.device),
                    observer,
                )?;
                Ok((train_s, m, s, Instant::now()))
            },
        )?;
        let (train_s, m, (stop_measure, stop_predicted), t1) = outcome.measured;
        let record = CycleRecord {
            cycle,
            labeled: labeled.len(),
            acc: m.acc,
            nll: m.nll,
            balanced_acc: m.balanced_acc(),
            recall: m.recall,
            train_s,
            score_s: if cycle == 0 {
                0.0
            } else {
                state.pending_score_s
            },
            stopping: Some(stop_measure),
        };
        state.records.push(record);
        // A run its stopping rule ends keeps the labels it trained on: the last picks are
        // dropped, so that every label belongs to a recorded cycle.
        let stopped = state.stopped();
        let mut pending = 0.0;
        if let Some(picked) = outcome.picked.filter(|_| !stopped) {
            pool.acquire(&picked.indices, cycle + 1)?;
            pending = t1.elapsed().as_secs_f64();
        }
        state.labeled = pool.labeled().to_vec();
        state.pending_score_s = pending;
        state.stop_predicted = stop_predicted;
        if let Some(path) = save {
            write_json(path, state)?;
        }
        let last = state.records.last().expect("just pushed");
        check(observer, &Event::CycleFinished { record: last })?;
        if stopped {
            break;
        }
    }
    Ok(())
}
