//! A session's round: what a query asks for, the batch it returns, and [`Learner::query`]
//! through the crate's one round ([`crate::round::run`]).

use super::learner::Learner;
use super::state::{Pending, Round};
use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::metrics::stopping::StopMeasure;
use crate::observe::Observer;
use crate::predict::{evaluate, log_probs_of, metrics_from_log_probs};
use crate::rng::Purpose;
use crate::round::{self, Acquisition, Picked, RoundSettings, Strategy};
use candle_core::Device;
use std::collections::HashSet;

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

/// What a round measured of its model, for the session's record (nothing before a model
/// trains).
#[derive(Default)]
struct Record {
    fit_acc: Option<f64>,
    test_acc: Option<f64>,
    test_nll: Option<f64>,
    stopping: Option<StopMeasure>,
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

impl Learner {
    /// Trains on the labeled items, scores the others and returns the next batch (best
    /// first), recording it as pending. Before any label exists the batch is drawn at random,
    /// or chosen from the items alone by a cold-start selector (core-set, TypiClust,
    /// ProbCover: [`crate::round::cold_start`]).
    pub fn query(
        &mut self,
        request: &QueryRequest,
        device: &Device,
        observer: &mut dyn Observer,
    ) -> Result<Vec<Query>> {
        let round = self.state.rounds.len() + 1;
        let cand = self.check_query(request)?;
        let lab = self.labeled_indices();
        let (picked, scorer, record) = if lab.is_empty() {
            self.last_model = None;
            let cfg = &self.state.config;
            let (picks, chosen) = round::first_batch(
                &request.strategy,
                true,
                self.features.reader(),
                &cand,
                cfg.arch.classes(),
                request.n,
                (cfg.seed, Purpose::Select, round as u64),
                observer,
            )?;
            let picked = Picked {
                indices: picks,
                scores: None,
            };
            let name = if chosen {
                request.strategy.name()
            } else {
                "random"
            };
            (picked, name.to_string(), Record::default())
        } else {
            let (picked, record) =
                self.trained_round(request, &cand, &lab, round, device, observer)?;
            (picked, request.strategy.name().to_string(), record)
        };
        Ok(self.record(picked, round, scorer, lab.len(), record))
    }

    /// The candidates of `request`, checked: a strategy the model can serve, a batch of 1 to
    /// the candidates, a subsample that holds it, and (once a model trains) evidence that fits.
    fn check_query(&self, request: &QueryRequest) -> Result<Vec<usize>> {
        let cfg = &self.state.config;
        if let Some(needs) = request.strategy.needs() {
            cfg.arch.check_needs(request.strategy.name(), &needs)?;
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
        if !self.labeled_indices().is_empty() {
            // Before the round trains: a round that cannot hold its evidence does no work.
            round::check_evidence(
                &request.strategy,
                (cand.len(), request.subsample),
                cfg.arch.classes(),
                cfg.ensemble,
                cfg.batch,
            )?;
        }
        Ok(cand)
    }

    /// The round on the labeled items `lab`: a model trained, its fit and test metrics, and the
    /// batch picked from `cand`; the model kept for the guesses shown beside the batch.
    fn trained_round(
        &mut self,
        request: &QueryRequest,
        cand: &[usize],
        lab: &[usize],
        round: usize,
        device: &Device,
        observer: &mut dyn Observer,
    ) -> Result<(Picked, Record)> {
        let cfg = self.state.config.clone();
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
        let key = round as u64;
        let acquisition = Acquisition {
            strategy: &request.strategy,
            candidates: cand,
            subsample: request.subsample,
            n: request.n,
            key,
            round,
        };
        let test_set = self.test.as_ref();
        let stop_set = round::stop_set(self.state.pool_size, cfg.seed)?;
        let reader = self.features.reader();
        let before = self.state.stop_predicted.clone();
        let outcome = round::run(
            &settings,
            lab,
            (cfg.seed, key),
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
                // Read once the model has trained: a failed training reads nothing.
                let (stop, stop_rows) = reader.rows(&stop_set)?;
                let measured = round::measure_stop(
                    trained.model.as_ref(),
                    (&stop, &stop_rows),
                    &before,
                    (cfg.batch, device),
                    observer,
                )?;
                Ok((fit_metrics, test, measured))
            },
        )?;
        let (fit_metrics, test, (stop_measure, stop_predicted)) = outcome.measured;
        self.state.stop_predicted = stop_predicted;
        let picked = outcome.picked.expect("the round acquired");
        self.last_model = Some(outcome.trained);
        let record = Record {
            fit_acc: Some(fit_metrics.acc),
            test_acc: test.as_ref().map(|m| m.acc),
            test_nll: test.as_ref().map(|m| m.nll),
            stopping: Some(stop_measure),
        };
        Ok((picked, record))
    }

    /// The batch `picked` in round `round` (by `scorer`, on `labeled` labels) as queries, made
    /// pending (an item pending from an earlier round moves to this one) and the round recorded.
    fn record(
        &mut self,
        picked: Picked,
        round: usize,
        scorer: String,
        labeled: usize,
        record: Record,
    ) -> Vec<Query> {
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
            labeled,
            queried: out.len(),
            fit_acc: record.fit_acc,
            test_acc: record.test_acc,
            test_nll: record.test_nll,
            stopping: record.stopping,
        });
        out
    }

    /// A round that ranks every candidate: [`Learner::query`] asked for all of them (or all
    /// of the `subsample`), returned best first, of which only the first `request.n` are
    /// recorded as pending. This is the order a labeling tool that serves the whole pool by
    /// alkit's scores (Label Studio's uncertainty sampling) follows. A joint batch selector
    /// ranks no single item and is refused.
    pub fn rank(
        &mut self,
        request: &QueryRequest,
        device: &Device,
        observer: &mut dyn Observer,
    ) -> Result<Vec<Query>> {
        if matches!(request.strategy.pick(), round::Pick::Batch(_)) {
            return Err(Error::config(
                "strategy",
                format!(
                    "`{}` chooses a batch jointly and ranks no single item",
                    request.strategy.name()
                ),
            ));
        }
        if request.strategy.is_balanced() {
            return Err(Error::config(
                "class_balance",
                "class balancing shares one batch among the predicted classes; a ranking of \
                 the whole pool (Label Studio's order) has no batch to share: drop setting \
                 `class_balance`, or label batches with `query` or `label`",
            ));
        }
        let all = self.candidates(request.include_pending).len();
        let mut every = request.clone();
        every.n = request.subsample.map_or(all, |m| m.min(all));
        let ranked = self.query(&every, device, observer)?;
        let keep = request.n.min(ranked.len());
        let round = self.state.rounds.len();
        let dropped: HashSet<&str> = ranked[keep..].iter().map(|q| q.id.as_str()).collect();
        self.state
            .pending
            .retain(|p| p.round != round || !dropped.contains(p.id.as_str()));
        if let Some(r) = self.state.rounds.last_mut() {
            r.queried = keep;
        }
        Ok(ranked)
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
}
