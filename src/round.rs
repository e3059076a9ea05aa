//! One acquisition round, the only one in the crate ([`run`]): fit the round's model on the
//! labeled items, let the caller measure it, gather the evidence the strategy needs for the
//! candidates, score them and select a batch ([`pick`]). The simulated loop (`acquire`) and
//! labeling sessions (`session`) both run their rounds through [`run`], so every strategy,
//! ensembles and BatchBALD included, works the same in both.
//!
//! [`pick`] is also the only place where a selection's positions (into the candidate list)
//! become dataset indices: callers get indices back, never positions. A scored strategy's
//! evidence is gathered [`SCORE_CHUNK`] candidates at a time and only the scores are kept, so
//! the evidence of a round (MC draws, gradient norms) takes the memory of a chunk, not of the
//! pool; chunks are whole evidence batches, so the scores are those of one call over every
//! candidate, noise included. The candidates come from a [`PoolReader`]: a data set in memory,
//! or a [`StreamedPool`](crate::data::StreamedPool) that reads each chunk from the source, so a
//! round over a pool larger than memory holds one chunk of features. Joint criteria (BatchBALD)
//! and weight-noise samples see every candidate at once, so they read all of them together.
//!
//! Randomness: a round draws from the streams of `(seed, key)` (see [`crate::rng::stream`]):
//! training from [`crate::train::TrainRngs::for_cycle`] (or per member), evidence noise from
//! `Purpose::Perturb` and the selection from `Purpose::Select`. Callers choose the keys, which
//! is how the loop and sessions keep their documented stream layouts.

use crate::data::{Dataset, PoolReader};
use crate::error::Result;
use crate::observe::{check, Event, Observer};
use crate::predict::Scoring;
use crate::rng::{stream, Purpose};
use crate::train::{train, ModelBuilder, TrainParams, Trained};
use alkit_acquisition::{BatchSelector, Scorer, Selection};
use candle_core::Device;
use std::sync::Arc;

/// How a strategy turns a model into the next batch.
#[derive(Clone)]
pub enum Pick {
    /// Uniformly at random.
    Random,
    /// One score per candidate, then a selection mode over the scores.
    Scored {
        /// The scorer.
        scorer: Arc<dyn Scorer>,
        /// How the batch is drawn from the scores.
        selection: Selection,
    },
    /// A joint batch criterion (BatchBALD).
    Batch(Arc<dyn BatchSelector>),
}

/// How the next items are chosen, under a name.
#[derive(Clone)]
pub struct Strategy {
    name: String,
    pick: Pick,
    balanced: bool,
}

impl Strategy {
    /// Uniformly random acquisition (no scorer).
    pub fn random() -> Self {
        Self {
            name: "random".into(),
            pick: Pick::Random,
            balanced: false,
        }
    }

    /// Top-k (or another selection mode) over `scorer`'s scores; named after the scorer.
    pub fn scored(scorer: Arc<dyn Scorer>, selection: Selection) -> Self {
        Self {
            name: scorer.name().to_string(),
            pick: Pick::Scored { scorer, selection },
            balanced: false,
        }
    }

    /// A joint batch criterion; named after it.
    pub fn batch(selector: Arc<dyn BatchSelector>) -> Self {
        Self {
            name: selector.name().to_string(),
            pick: Pick::Batch(selector),
            balanced: false,
        }
    }

    /// How it picks.
    pub fn pick(&self) -> &Pick {
        &self.pick
    }

    /// Renames the strategy (names key CSV rows and state files).
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Class-balanced: each round's batch shares its slots among the predicted classes so
    /// that the labeled set moves towards equal class counts ([`alkit_acquisition::class_quotas`]),
    /// each class's share chosen as the strategy chooses. Random picks stay uniform (they are
    /// the yardstick): this changes a scored or joint strategy only, named `balanced-<name>`.
    pub fn balanced(mut self) -> Self {
        if !matches!(self.pick, Pick::Random) {
            self.balanced = true;
            self.name = format!("balanced-{}", self.name);
        }
        self
    }

    /// Whether its batches are class-balanced.
    pub fn is_balanced(&self) -> bool {
        self.balanced
    }

    /// The strategy's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The evidence it reads (`None` for random picks).
    pub fn needs(&self) -> Option<alkit_acquisition::Needs> {
        match &self.pick {
            Pick::Random => None,
            Pick::Scored { scorer, .. } => Some(scorer.needs()),
            Pick::Batch(b) => Some(b.needs()),
        }
    }
}

/// What every round of a loop or session trains and how it gathers evidence.
pub struct RoundSettings<'a> {
    /// The pool, with every label the round may train on: in memory or streamed.
    pub pool: &'a dyn PoolReader,
    /// Makes and trains the round's fresh model.
    pub model: &'a dyn ModelBuilder,
    /// `Some(k)`: an ensemble of `k` members instead of one model.
    pub ensemble: Option<usize>,
    /// Validated training settings.
    pub train: &'a TrainParams,
    /// Per-channel standard deviation the inputs were normalised with (perturbation scale).
    pub input_std: &'a [f32],
    /// Evidence batch size.
    pub batch: usize,
    /// Where tensors live.
    pub device: &'a Device,
}

/// The acquisition half of a round: `n` items picked by `strategy` among `candidates` (or
/// the `subsample` of them [`subsample`] draws), from the streams of `(seed, key)`.
pub struct Acquisition<'a> {
    /// How the items are chosen.
    pub strategy: &'a Strategy,
    /// Ascending pool indices of the unlabeled items it may pick.
    pub candidates: &'a [usize],
    /// Score only this many candidates, drawn at random (`None`: all).
    pub subsample: Option<usize>,
    /// How many to pick.
    pub n: usize,
    /// The stream key of the subsample, evidence noise and selection.
    pub key: u64,
    /// The round number [`Event::Scored`] reports.
    pub round: usize,
}

/// What a round gave: its model, what the caller measured of it, and the picks.
pub struct Outcome<T> {
    /// The round's model.
    pub trained: Trained,
    /// What the caller's `after_fit` returned.
    pub measured: T,
    /// The picks, when the round acquired.
    pub picked: Option<Picked>,
}

/// One acquisition round, the one the loop and sessions both run: trains a fresh model (or
/// ensemble) on the pool's items `labeled` from the streams of `(seed, key)` (through
/// [`train`]), lets the caller measure it (`after_fit` gets the model and the data set and
/// rows it trained on), then, with an `acquisition`, gathers the evidence its strategy needs
/// and picks ([`pick`]).
pub fn run<T>(
    settings: &RoundSettings<'_>,
    labeled: &[usize],
    (seed, key): (u64, u64),
    acquisition: Option<Acquisition<'_>>,
    observer: &mut dyn Observer,
    after_fit: impl FnOnce(&Trained, &Dataset, &[usize], &mut dyn Observer) -> Result<T>,
) -> Result<Outcome<T>> {
    let (data, rows) = settings.pool.rows(labeled)?;
    let trained = train(
        settings.model,
        settings.ensemble,
        &data,
        &rows,
        settings.train,
        (seed, key),
        settings.device,
        observer,
    )?;
    let measured = after_fit(&trained, &data, &rows, observer)?;
    let picked = match acquisition {
        None => None,
        Some(a) => {
            let mut scoring = Scoring::of_trained(
                &trained,
                settings.model,
                settings.ensemble,
                settings.input_std,
                settings.batch,
                settings.device,
            );
            // Core-set, TypiClust, ProbCover and the training-statistics detectors compare
            // candidates with the labeled items, under this round's model.
            if a.strategy.needs().is_some_and(|n| n.reference) {
                scoring.reference = Some(Arc::new(crate::predict::reference_of(
                    trained.model.as_ref(),
                    &data,
                    &rows,
                    settings.batch,
                    settings.device,
                    observer,
                )?));
            }
            let scored = subsample(a.candidates, a.subsample, (seed, a.key));
            let counts = class_counts(&data, &rows, trained.model.classes());
            Some(pick(
                a.strategy,
                &scoring,
                settings.pool,
                &scored,
                (a.n, &counts),
                (seed, a.key),
                a.round,
                observer,
            )?)
        }
    };
    Ok(Outcome {
        trained,
        measured,
        picked,
    })
}

/// How many of `rows` each of `classes` classes labels `(C,)`.
fn class_counts(data: &Dataset, rows: &[usize], classes: usize) -> Vec<usize> {
    let mut counts = vec![0; classes];
    for &r in rows {
        if let Some(c) = counts.get_mut(data.labels()[r] as usize) {
            *c += 1;
        }
    }
    counts
}

/// The candidates a round scores: all of them, or with `m = Some(M)` (baal's `max_sample`)
/// a seeded random `M` of them, from the stream of `(seed, Subsample, key)`, kept in pool
/// order. Scoring cost then follows `M`, not the pool; the batch is chosen among the `M`.
pub fn subsample(candidates: &[usize], m: Option<usize>, (seed, key): (u64, u64)) -> Vec<usize> {
    match m {
        Some(m) if m < candidates.len() => {
            let mut rng = stream(seed, Purpose::Subsample, key);
            let mut picked = rand::seq::index::sample(&mut rng, candidates.len(), m).into_vec();
            picked.sort_unstable();
            picked.into_iter().map(|p| candidates[p]).collect()
        }
        _ => candidates.to_vec(),
    }
}

/// What a round picked.
#[derive(Debug, Clone, PartialEq)]
pub struct Picked {
    /// Dataset indices of the picks, in selection order (best first for top-k).
    pub indices: Vec<usize>,
    /// The picks' scores, aligned with `indices`, when the strategy scores items one at a
    /// time (`None` for random picks and joint batch criteria, which rank no single item).
    pub scores: Option<Vec<f32>>,
}

/// Candidates whose evidence a scored strategy gathers at once (rounded up to whole evidence
/// batches).
pub const SCORE_CHUNK: usize = 16384;

/// Scores the `candidates` (ascending indices into `pool`, in memory or streamed) for
/// `strategy` with the model in `scoring` and selects `n` of them: evidence noise from
/// `(seed, Perturb, key)`, the selection from `(seed, Select, key)`. A class-balanced strategy
/// also reads `labeled`, the labeled items' count per class `(C,)`. Reports
/// [`Event::Scored`] (as `cycle`) before selecting.
#[allow(clippy::too_many_arguments)]
pub fn pick(
    strategy: &Strategy,
    scoring: &Scoring<'_>,
    pool: &dyn PoolReader,
    candidates: &[usize],
    (n, labeled): (usize, &[usize]),
    (seed, key): (u64, u64),
    cycle: usize,
    observer: &mut dyn Observer,
) -> Result<Picked> {
    pick_in_chunks(
        strategy,
        scoring,
        pool,
        candidates,
        (n, labeled),
        (seed, key),
        (cycle, SCORE_CHUNK),
        observer,
    )
}

/// [`pick`] gathering a scored strategy's evidence about `chunk` candidates at a time (rounded
/// up to whole evidence batches; weight-noise and Laplace samples, which draw the weights once
/// for every candidate, and a joint scorer's, which compares the candidates, in one piece).
/// The result does not depend on `chunk`.
#[allow(clippy::too_many_arguments)]
pub fn pick_in_chunks(
    strategy: &Strategy,
    scoring: &Scoring<'_>,
    pool: &dyn PoolReader,
    candidates: &[usize],
    (n, labeled): (usize, &[usize]),
    (seed, key): (u64, u64),
    (cycle, chunk): (usize, usize),
    observer: &mut dyn Observer,
) -> Result<Picked> {
    let mut noise = stream(seed, Purpose::Perturb, key);
    let mut rng = stream(seed, Purpose::Select, key);
    let balance = match strategy.balanced {
        true => Some(Balance::of(
            scoring,
            pool,
            candidates,
            labeled,
            (seed, key),
            observer,
        )?),
        false => None,
    };
    let (positions, scores) = match &strategy.pick {
        Pick::Scored { scorer, selection } => {
            let scores = score_all(
                scorer.as_ref(),
                scoring,
                pool,
                candidates,
                chunk,
                &mut noise,
                observer,
            )?;
            let ev = Event::Scored {
                cycle,
                indices: candidates,
                scores: &scores,
            };
            check(observer, &ev)?;
            let picks = match &balance {
                None => selection.select(&scores, n, &mut rng)?,
                Some(b) => alkit_acquisition::balanced_select(
                    &scores,
                    &b.predicted,
                    labeled,
                    n,
                    (selection, &b.order),
                    &mut rng,
                )?,
            };
            let picked = picks.iter().map(|&p| scores[p]).collect();
            (picks, Some(picked))
        }
        Pick::Batch(b) => match &balance {
            None => (
                joint_pick(
                    b.as_ref(),
                    scoring,
                    pool,
                    candidates,
                    n,
                    (&mut noise, &mut rng),
                    observer,
                )?,
                None,
            ),
            Some(bal) => (
                bal.joint_pick(
                    b.as_ref(),
                    (scoring, pool, candidates),
                    (labeled, n),
                    (&mut noise, &mut rng),
                    observer,
                )?,
                None,
            ),
        },
        Pick::Random => (random_positions(candidates.len(), n, &mut rng)?, None),
    };
    Ok(Picked {
        indices: positions.iter().map(|&p| candidates[p]).collect(),
        scores,
    })
}

/// One score per candidate from `scorer`, its evidence gathered `chunk` candidates at a time
/// (every candidate at once for a joint scorer, which compares them).
fn score_all(
    scorer: &dyn alkit_acquisition::Scorer,
    scoring: &Scoring<'_>,
    pool: &dyn PoolReader,
    candidates: &[usize],
    chunk: usize,
    noise: &mut crate::rng::Rng,
    observer: &mut dyn Observer,
) -> Result<Vec<f32>> {
    let needs = scorer.needs();
    let step = match scorer.joint() {
        true => candidates.len(),
        false => scored_step(&needs, candidates.len(), scoring.batch, chunk),
    };
    let mut scores = Vec::with_capacity(candidates.len());
    pool.parts(candidates, step.max(1), &mut |data, rows| {
        let mut progress = Offset {
            inner: &mut *observer,
            done: scores.len(),
            total: candidates.len(),
        };
        let ev = scoring.evidence(data, rows, needs, &mut *noise, &mut progress)?;
        scores.extend(scorer.score(&ev)?);
        Ok(())
    })?;
    Ok(scores)
}

/// `n` positions among `candidates` chosen by a joint criterion, which sees every
/// candidate's evidence at once: one part (a streamed pool's candidates are then read into
/// memory together; `--subsample` bounds them).
fn joint_pick(
    b: &dyn BatchSelector,
    scoring: &Scoring<'_>,
    pool: &dyn PoolReader,
    candidates: &[usize],
    n: usize,
    (noise, rng): (&mut crate::rng::Rng, &mut crate::rng::Rng),
    observer: &mut dyn Observer,
) -> Result<Vec<usize>> {
    let mut ev = alkit_acquisition::Evidence::default();
    pool.parts(candidates, candidates.len().max(1), &mut |data, rows| {
        ev = scoring.evidence(data, rows, b.needs(), &mut *noise, &mut *observer)?;
        Ok(())
    })?;
    Ok(b.select(&ev, n, rng)?)
}

/// What a class-balanced pick knows before it selects: each candidate's predicted class (the
/// argmax of the round model's probabilities, the ensemble's mean for an ensemble) and the
/// seeded class order its quota ties follow.
struct Balance {
    /// Predicted class per candidate `(n_candidates,)`.
    predicted: Vec<u32>,
    /// Candidate positions by predicted class `(C,)`.
    members: Vec<Vec<usize>>,
    /// A permutation of the classes from `(seed, Balance, key)`.
    order: Vec<usize>,
}

impl Balance {
    fn of(
        scoring: &Scoring<'_>,
        pool: &dyn PoolReader,
        candidates: &[usize],
        labeled: &[usize],
        (seed, key): (u64, u64),
        observer: &mut dyn Observer,
    ) -> Result<Self> {
        let mut rng = stream(seed, Purpose::Balance, key);
        let mut predicted = Vec::with_capacity(candidates.len());
        let step = SCORE_CHUNK.div_ceil(scoring.batch.max(1)) * scoring.batch.max(1);
        pool.parts(candidates, step, &mut |data, rows| {
            let ev = scoring.evidence(
                data,
                rows,
                alkit_acquisition::Needs::PROBS,
                &mut rng,
                &mut NoProgress(&mut *observer),
            )?;
            let probs = ev.probs("class balance")?;
            predicted.extend(probs.rows().map(|r| crate::metrics::argmax(r) as u32));
            Ok(())
        })?;
        let classes = labeled.len();
        let members = alkit_acquisition::members_by_class(&predicted, classes)?;
        let mut order: Vec<usize> = (0..classes).collect();
        crate::rng::shuffle(&mut rng, &mut order);
        Ok(Self {
            predicted,
            members,
            order,
        })
    }

    /// A joint criterion's class-balanced batch: each class's quota chosen by `b` among that
    /// class's candidates alone (positions into `candidates`, class by class).
    fn joint_pick(
        &self,
        b: &dyn BatchSelector,
        (scoring, pool, candidates): (&Scoring<'_>, &dyn PoolReader, &[usize]),
        (labeled, n): (&[usize], usize),
        (noise, rng): (&mut crate::rng::Rng, &mut crate::rng::Rng),
        observer: &mut dyn Observer,
    ) -> Result<Vec<usize>> {
        let available: Vec<usize> = self.members.iter().map(Vec::len).collect();
        let quota = alkit_acquisition::class_quotas(labeled, &available, n, &self.order)?;
        let mut picks = Vec::with_capacity(n);
        for (members, &q) in self.members.iter().zip(&quota).filter(|(_, &q)| q > 0) {
            let sub: Vec<usize> = members.iter().map(|&p| candidates[p]).collect();
            let chosen = joint_pick(
                b,
                scoring,
                pool,
                &sub,
                q,
                (&mut *noise, &mut *rng),
                observer,
            )?;
            picks.extend(chosen.into_iter().map(|j| members[j]));
        }
        Ok(picks)
    }
}

/// Passes on every event but scoring progress: the class-balance pass predicts the
/// candidates before the scorer scores them, and the progress shown is the scorer's.
struct NoProgress<'a>(&'a mut dyn Observer);

impl Observer for NoProgress<'_> {
    fn on(&mut self, event: &Event<'_>) -> crate::observe::Control {
        match event {
            Event::Scoring { .. } => crate::observe::Control::Continue,
            other => self.0.on(other),
        }
    }
}

/// Candidates whose evidence a scored pick gathers at once: `chunk` rounded up to whole
/// evidence batches, or every candidate for weight-noise and Laplace samples (which draw the
/// weights once for all of them).
fn scored_step(
    needs: &alkit_acquisition::Needs,
    candidates: usize,
    batch: usize,
    chunk: usize,
) -> usize {
    match needs.samples {
        Some(
            alkit_acquisition::SampleRequest::WeightNoise { .. }
            | alkit_acquisition::SampleRequest::Laplace { .. },
        ) => candidates,
        _ => {
            // Evidence runs `batch` rows at a time, gradients at most 256.
            let (b, g) = (batch.max(1), batch.clamp(1, 256));
            let unit = b / gcd(b, g) * g;
            chunk.max(1).div_ceil(unit).saturating_mul(unit)
        }
    }
}

/// The evidence a round of `strategy` holds at once over `candidates` candidates, of which
/// `subsample` keeps at most `M` as [`subsample`] does, fits in the machine's memory
/// ([`crate::limits::evidence`]): a scored strategy's
/// chunk of [`SCORE_CHUNK`], a joint criterion's every candidate. Callers run it with the
/// settings' other checks, before a round trains, so that a round that cannot hold its draws
/// is refused before any work; `members` is the ensemble's size, if any. Gradient norms are
/// checked again by [`crate::predict::Scoring`] once the model's layer count is known.
pub fn check_evidence(
    strategy: &Strategy,
    (candidates, subsample): (usize, Option<usize>),
    classes: usize,
    members: Option<usize>,
    batch: usize,
) -> Result<()> {
    let Some(needs) = strategy.needs() else {
        return Ok(());
    };
    let candidates = subsample.map_or(candidates, |m| m.min(candidates));
    let (items, from) = match &strategy.pick {
        Pick::Batch(_) => (
            candidates,
            "every candidate at once, setting `subsample` bounds them",
        ),
        Pick::Scored { scorer, .. } if scorer.joint() => (
            candidates,
            "every candidate at once, setting `subsample` bounds them",
        ),
        _ => (
            scored_step(&needs, candidates, batch, SCORE_CHUNK).min(candidates),
            "the candidates scored at once",
        ),
    };
    let who = format!("`{}`", strategy.name());
    crate::limits::evidence(&who, &needs, items, classes, members, None, from)
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Passes events on, with the scoring progress of one chunk counted among all candidates.
struct Offset<'a> {
    inner: &'a mut dyn Observer,
    done: usize,
    total: usize,
}

impl Observer for Offset<'_> {
    fn on(&mut self, event: &Event<'_>) -> crate::observe::Control {
        match event {
            Event::Scoring { done, .. } => self.inner.on(&Event::Scoring {
                done: self.done + done,
                total: self.total,
            }),
            other => self.inner.on(other),
        }
    }
}

/// The first batch, before any label exists: chosen from the items alone by `strategy`'s
/// selector where it can (`cold` allows it, and the selector's `cold_start()` says so:
/// core-set, TypiClust, ProbCover; see [`cold_start`]), otherwise drawn at random; both from
/// `(seed, purpose, key)`. Returns the picks and whether the selector chose them.
#[allow(clippy::too_many_arguments)]
pub fn first_batch(
    strategy: &Strategy,
    cold: bool,
    pool: &dyn PoolReader,
    candidates: &[usize],
    classes: usize,
    n: usize,
    draw: (u64, Purpose, u64),
    observer: &mut dyn Observer,
) -> Result<(Vec<usize>, bool)> {
    match strategy.pick() {
        Pick::Batch(b) if starts_cold(strategy, cold) => Ok((
            cold_start(b.as_ref(), pool, candidates, classes, n, draw, observer)?,
            true,
        )),
        _ => Ok((pick_random(candidates, n, draw)?, false)),
    }
}

/// Whether `strategy` chooses the seed set itself when a cold start is asked for (`cold`):
/// a joint criterion that can choose from the items alone.
pub fn starts_cold(strategy: &Strategy, cold: bool) -> bool {
    matches!(strategy.pick(), Pick::Batch(b) if cold && b.cold_start())
}

/// `n` of the `candidates` (ascending pool indices) drawn class by class, by the pool's
/// labels: the classes present among them share `n` equally, the lowest classes taking one
/// more each while a remainder is left, and each share is drawn uniformly from its class,
/// classes in order, from the stream `(seed, purpose, key)`. A class with fewer candidates
/// than its share is refused.
pub fn pick_balanced(
    pool: &dyn PoolReader,
    candidates: &[usize],
    n: usize,
    (seed, purpose, key): (u64, Purpose, u64),
) -> Result<Vec<usize>> {
    let mut by_class = std::collections::BTreeMap::<u32, Vec<usize>>::new();
    let mut at = 0;
    pool.parts(candidates, 4096, &mut |data, rows| {
        for &r in rows {
            by_class
                .entry(data.labels()[r])
                .or_default()
                .push(candidates[at]);
            at += 1;
        }
        Ok(())
    })?;
    let (share, extra) = (n / by_class.len().max(1), n % by_class.len().max(1));
    let mut rng = stream(seed, purpose, key);
    let mut picks = Vec::with_capacity(n);
    for (j, (class, members)) in by_class.iter().enumerate() {
        let want = share + usize::from(j < extra);
        if members.len() < want {
            return Err(crate::Error::config(
                "balanced_start",
                format!(
                    "class {class} has {} items and its share of the {n} seed labels is \
                     {want}: ask for fewer seed labels (setting `initial`), or draw them \
                     uniformly",
                    members.len()
                ),
            ));
        }
        let positions = random_positions(members.len(), want, &mut rng)?;
        picks.extend(positions.into_iter().map(|p| members[p]));
    }
    Ok(picks)
}

/// A cold start: `n` of the `candidates` (ascending pool indices) chosen by `selector` from
/// the items' own vectors (as the pool holds them, flattened), with nothing labeled and no
/// model: the evidence's features are the items under a zero last layer of `classes`
/// classes (which ProbCover's purity rule clusters into), its reference empty. The
/// selector draws from `(seed, purpose, key)`. Candidates are read together, like a joint
/// criterion's.
pub fn cold_start(
    selector: &dyn BatchSelector,
    pool: &dyn PoolReader,
    candidates: &[usize],
    classes: usize,
    n: usize,
    (seed, purpose, key): (u64, Purpose, u64),
    observer: &mut dyn Observer,
) -> Result<Vec<usize>> {
    let mut rng = stream(seed, purpose, key);
    let mut picks = Vec::new();
    pool.parts(candidates, candidates.len().max(1), &mut |data, rows| {
        let d = data.item_len();
        let mut h = Vec::with_capacity(rows.len() * d);
        for &r in rows {
            h.extend_from_slice(&data.features()[r * d..(r + 1) * d]);
        }
        let c = classes.max(1);
        let zero_layer = |h: Vec<f32>, n: usize| {
            alkit_acquisition::Features::new(h, n, d, vec![0.0; c * d], vec![0.0; c])
        };
        let mut ev = alkit_acquisition::Evidence::default();
        ev.features = Some(zero_layer(h, rows.len())?);
        ev.reference = Some(Arc::new(alkit_acquisition::Reference::new(
            zero_layer(Vec::new(), 0)?,
            Vec::new(),
        )?));
        check(
            observer,
            &Event::Scoring {
                done: rows.len(),
                total: candidates.len(),
            },
        )?;
        picks = selector.select(&ev, n, &mut rng)?;
        Ok(())
    })?;
    Ok(picks.into_iter().map(|p| candidates[p]).collect())
}

/// The most items of a run's or session's stop set.
pub const STOP_SET: usize = 1000;

/// The pool items (ascending) whose predictions the stopping rules read every cycle or round: all of a
/// pool of at most [`STOP_SET`] items, else [`STOP_SET`] of them drawn uniformly from
/// `(seed, StopSet, 0)`, so every strategy of a seed reads the same items.
pub fn stop_set(pool: usize, seed: u64) -> Result<Vec<usize>> {
    let all: Vec<usize> = (0..pool).collect();
    if pool <= STOP_SET {
        return Ok(all);
    }
    let mut picks = pick_random(&all, STOP_SET, (seed, Purpose::StopSet, 0))?;
    picks.sort_unstable();
    Ok(picks)
}

/// What `model` predicts on the stop set (`rows` of `stop`), measured against the last
/// round's predicted classes `before` (empty: no round before): the stopping measures and
/// this round's predicted classes, as the loop and sessions record them every round.
pub fn measure_stop(
    model: &dyn crate::nn::Classifier,
    (stop, rows): (&Dataset, &[usize]),
    before: &[u32],
    (batch, device): (usize, &Device),
    observer: &mut dyn Observer,
) -> Result<(crate::metrics::stopping::StopMeasure, Vec<u32>)> {
    let lp = crate::predict::log_probs_of(model, stop, rows, batch, device, observer)?;
    let probs: Vec<f32> = lp.iter().map(|v| v.exp()).collect();
    let before = Some(before).filter(|p| !p.is_empty());
    Ok(crate::metrics::stopping::measure(
        &probs,
        model.classes(),
        before,
    ))
}

/// `n` of the `candidates` uniformly at random from `(seed, purpose, key)`: the seed set of a
/// run and the first round of a session without labels.
pub fn pick_random(
    candidates: &[usize],
    n: usize,
    (seed, purpose, key): (u64, Purpose, u64),
) -> Result<Vec<usize>> {
    let mut rng = stream(seed, purpose, key);
    Ok(random_positions(candidates.len(), n, &mut rng)?
        .into_iter()
        .map(|p| candidates[p])
        .collect())
}

fn random_positions(m: usize, n: usize, rng: &mut crate::rng::Rng) -> Result<Vec<usize>> {
    Ok(Selection::Random.select(&vec![0.0; m], n, rng)?)
}
