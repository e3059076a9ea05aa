//! The loop of a multi-label curve: for each strategy and seed, cycles of training sigmoid
//! heads on the labeled items, measuring them on the test split, and labeling the pool items
//! the strategy picks (from the known label sets).
//!
//! Randomness follows the regression loop's streams: the seed set from `(seed, SeedSet, 0)`
//! (the same for every strategy of a seed, so strategies are paired), member `m`'s
//! initialisation and batches from
//! [`TrainRngs::for_member`](crate::train::TrainRngs::for_member)`(seed, cycle, m)`,
//! MC-dropout masks from `(seed, Perturb, cycle)` when scoring and `(seed, Tool, cycle)` when
//! measuring, and random or stochastic picks from `(seed, Select, cycle)`: the same seed gives
//! the same picks and figures on the CPU.

use super::data::MultiLabelData;
use super::fit::Heads;
use super::output::{curve_figure, summarize, write_curve_csv, write_summary_csv, Record};
use super::output::{SummaryRow, OUTPUTS};
use super::settings::MultiLabelSettings;
use crate::error::{Error, Result};
use crate::fsutil::write_json;
use crate::metrics::multilabel::{label_metrics, LabelMetrics};
use crate::models::SigmoidKind;
use crate::nn::Mlp;
use crate::observe::{check, Event, Observer};
use crate::rng::{stream, Purpose, Rng};
use crate::round::{pick_random, Pick, Strategy};
use crate::strategies::{ScorerSettings, StrategyKind};
use crate::train::TrainConfig;
use alkit_acquisition::{Evidence, LabelProbs, SampleRequest};
use candle_core::Device;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Everything that defines a multi-label curve; saved as `run.json`. Unset fields take the
/// defaults each field names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MultiLabelCurve {
    /// The pool: a CSV table or an embedding file with label sets.
    pub data: PathBuf,
    /// The labeled test split: a table of the pool's kind and columns.
    pub test: Option<PathBuf>,
    /// Label sets, separator, threshold.
    pub settings: MultiLabelSettings,
    /// The sigmoid head. [default: mlp-sigmoid]
    pub model: Option<SigmoidKind>,
    /// Strategies. [default: entropy-mean, bald-sum (with draws to read), random]
    pub strategies: Option<Vec<StrategyKind>>,
    /// The scorers' settings.
    pub scorers: ScorerSettings,
    /// First seed. [default: 0]
    pub seed: Option<u64>,
    /// Number of seeds. [default: 1]
    pub seeds: Option<u64>,
    /// Seed-set size. [default: 20]
    pub initial: Option<usize>,
    /// Items labeled per cycle. [default: 20]
    pub query: Option<usize>,
    /// Acquisition cycles. [default: 10]
    pub cycles: Option<usize>,
    /// Adam steps per training. [default: 500]
    pub steps: Option<usize>,
    /// Mini-batch size. [default: 32]
    pub batch_size: Option<usize>,
    /// Adam learning rate. [default: 0.001]
    pub lr: Option<f64>,
    /// Members of a deep ensemble (none: one head).
    pub ensemble: Option<usize>,
}

/// A checked multi-label curve.
struct Plan {
    strategies: Vec<Strategy>,
    seeds: Vec<u64>,
    initial: usize,
    query: usize,
    cycles: usize,
    heads: Heads,
    threshold: f64,
}

impl MultiLabelCurve {
    /// Cycles the run will train, over every strategy and seed (for progress bars).
    pub fn cycles_total(&self) -> usize {
        let strategies = self
            .strategies
            .as_ref()
            .map_or_else(|| default_strategies(self.draws()).len(), Vec::len);
        (self.seeds.unwrap_or(1) as usize)
            .saturating_mul(strategies)
            .saturating_mul(self.cycles.unwrap_or(10).saturating_add(1))
    }

    /// Whether the model gives several draws (an ensemble, or dropout).
    fn draws(&self) -> bool {
        self.draw_count(self.scorers.mc_samples) > 1
    }

    /// The draws a scorer reads: an ensemble's members, a model with dropout's `mc_samples`
    /// passes, or a single model's one prediction.
    fn draw_count(&self, mc_samples: usize) -> usize {
        match self.ensemble.unwrap_or(1) {
            1 if self.model.unwrap_or(SigmoidKind::MlpSigmoid).has_dropout() => mc_samples,
            members => members,
        }
    }

    fn test_path(&self) -> Result<&Path> {
        self.test.as_deref().ok_or_else(|| {
            Error::config(
                "test",
                "a multi-label curve measures every cycle on a labeled test split: name its \
                 table (the pool's kind and columns)",
            )
        })
    }

    /// Checks every setting against the data.
    fn plan(&self, data: &MultiLabelData) -> Result<Plan> {
        let s = &self.scorers;
        let unread = [
            ("posterior", s.posterior.is_some()),
            ("hessian", s.hessian.is_some()),
            ("prior_precision", s.prior_precision.is_some()),
            ("inserted_dropout", s.inserted_dropout.is_some()),
            ("epig_targets", s.epig_targets.is_some()),
        ];
        if let Some((name, _)) = unread.iter().find(|(_, given)| *given) {
            return Err(Error::config(
                name,
                "no multi-label scorer reads it (their draws are MC-dropout passes or an \
                 ensemble's members); drop it",
            ));
        }
        let members = self.ensemble.unwrap_or(1);
        let model = self.model.unwrap_or(SigmoidKind::MlpSigmoid);
        let cfg = model.config(data.pool.dim(), data.pool.sets.labels());
        let scorers = ScorerSettings {
            members: members > 1,
            ..self.scorers
        };
        let kinds = match &self.strategies {
            Some(k) => k.clone(),
            None => default_strategies(self.draws()),
        };
        let strategies = kinds
            .iter()
            .map(|k| multi_label_strategy(*k, &scorers, self.draw_count(scorers.mc_samples)))
            .collect::<Result<Vec<_>>>()?;
        let seeds = self.seeds.unwrap_or(1);
        if seeds == 0 || seeds > crate::jobs::curve::MAX_SEEDS {
            return Err(Error::config(
                "seeds",
                format!("{seeds}; expected 1 to {}", crate::jobs::curve::MAX_SEEDS),
            ));
        }
        let seed = self.seed.unwrap_or(0);
        let (initial, query, cycles) = (
            self.initial.unwrap_or(20),
            self.query.unwrap_or(20),
            self.cycles.unwrap_or(10),
        );
        let need = query
            .checked_mul(cycles)
            .and_then(|q| q.checked_add(initial));
        if initial == 0 || query == 0 || need.is_none_or(|n| n > data.pool.len()) {
            return Err(Error::config(
                "initial",
                format!(
                    "{initial} seed labels + {cycles} cycles x {query} do not fit a pool of {} \
                     items (each at least 1)",
                    data.pool.len()
                ),
            ));
        }
        let params = TrainConfig {
            steps: self.steps.unwrap_or(500),
            batch_size: self.batch_size.unwrap_or(32),
            lr: self.lr.unwrap_or(1e-3),
            anchor: None,
        }
        .validate()?;
        Ok(Plan {
            strategies,
            seeds: (0..seeds).map(|s| seed.wrapping_add(s)).collect(),
            initial,
            query,
            cycles,
            heads: Heads {
                cfg,
                members,
                params,
                mc_samples: scorers.mc_samples,
            },
            threshold: self.settings.threshold()?,
        })
    }
}

/// The strategies a multi-label curve runs when none are named.
fn default_strategies(draws: bool) -> Vec<StrategyKind> {
    let names: &[&str] = if draws {
        &["entropy-mean", "bald-sum", "random"]
    } else {
        &["entropy-mean", "random"]
    };
    names
        .iter()
        .filter_map(|n| StrategyKind::named(n))
        .collect()
}

/// `kind` as a multi-label strategy: random picks, or a score over label probabilities that
/// the run's model gives (a probe with the run's number of draws finds the scores that need
/// more).
fn multi_label_strategy(kind: StrategyKind, s: &ScorerSettings, draws: usize) -> Result<Strategy> {
    s.refuse_class_balance("targets that are label sets have no classes")?;
    let strategy = kind.strategy(s)?;
    match strategy.pick() {
        Pick::Random => Ok(strategy),
        Pick::Scored { scorer, .. } if scorer.needs().is_multi_label() => {
            let probe = LabelProbs::new(vec![0.5; draws], draws, 1, 1)?.with_cardinality(1.0)?;
            if scorer.score(&Evidence::from_labels(probe)).is_err() {
                return Err(Error::config(
                    "scorer",
                    format!(
                        "`{}` reads the disagreement of several draws: train an ensemble \
                         (setting `ensemble`) or a model with dropout (mlp-sigmoid) with two \
                         or more passes (setting `mc_samples`)",
                        kind.name()
                    ),
                ));
            }
            Ok(strategy)
        }
        _ => {
            let ours: Vec<&str> = StrategyKind::all()
                .filter(|k| {
                    k.strategy(s)
                        .ok()
                        .and_then(|st| st.needs())
                        .is_some_and(|n| n.is_multi_label())
                })
                .map(StrategyKind::name)
                .collect();
            Err(Error::config(
                "scorer",
                format!(
                    "`{}` does not score label sets; a multi-label run takes {} or random",
                    kind.name(),
                    ours.join(", ")
                ),
            ))
        }
    }
}

/// Runs the curve into `out` (refusing a run already there unless `force`), writing
/// `curve.csv` after every finished run and the summary and figure at the end.
pub fn run(
    opts: &MultiLabelCurve,
    out: &Path,
    force: bool,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<Vec<SummaryRow>> {
    let test = opts.test_path()?;
    crate::fsutil::check_output_dir("out", out, &[&opts.data, test], true)?;
    if out.join("run.json").exists() && !force {
        return Err(Error::config(
            "out",
            format!(
                "{} holds a curve run; start again there with setting `force`, or write elsewhere",
                out.display()
            ),
        ));
    }
    let s = &opts.settings;
    let data = MultiLabelData::load(&opts.data, test, &s.labels, &s.format())?;
    let plan = opts.plan(&data)?;
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
    for f in OUTPUTS {
        match std::fs::remove_file(out.join(f)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(Error::io(out.join(f), e))
            }
            _ => {}
        }
    }
    write_json(&out.join("run.json"), opts)?;
    let mut records = Vec::new();
    for strategy in &plan.strategies {
        for &seed in &plan.seeds {
            records.extend(run_one(&plan, &data, strategy, seed, device, observer)?);
            write_curve_csv(&out.join("curve.csv"), &records)?;
        }
    }
    let summary = summarize(&records);
    write_summary_csv(&out.join("summary.csv"), &summary)?;
    curve_figure(&records).save(out, "curve")?;
    Ok(summary)
}

/// One strategy and seed, every cycle.
fn run_one(
    plan: &Plan,
    data: &MultiLabelData,
    strategy: &Strategy,
    seed: u64,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<Vec<Record>> {
    check(
        observer,
        &Event::RunStarted {
            strategy: strategy.name(),
            seed,
            from_cycle: 0,
            cycles: plan.cycles,
        },
    )?;
    let all: Vec<usize> = (0..data.pool.len()).collect();
    let mut labeled = pick_random(&all, plan.initial, (seed, Purpose::SeedSet, 0))?;
    let mut records = Vec::with_capacity(plan.cycles + 1);
    let mut score_s = 0.0;
    for cycle in 0..=plan.cycles {
        check(
            observer,
            &Event::CycleStarted {
                cycle,
                labeled: labeled.len(),
            },
        )?;
        let t = Instant::now();
        let models = plan
            .heads
            .train(data, &labeled, (seed, cycle as u64), device, observer)?;
        let train_s = t.elapsed().as_secs_f64();
        let mut masks = stream(seed, Purpose::Tool, cycle as u64);
        let metrics = evaluate(plan, &models, data, &mut masks, device)?;
        check(
            observer,
            &Event::CycleMeasured {
                cycle,
                metric: "map",
                value: metrics.map,
            },
        )?;
        records.push(Record {
            strategy: strategy.name().to_string(),
            seed,
            cycle,
            labeled: labeled.len(),
            metrics,
            train_s,
            score_s,
        });
        if cycle == plan.cycles {
            break;
        }
        let t = Instant::now();
        let picks = choose(
            plan,
            data,
            strategy,
            &models,
            &labeled,
            (seed, cycle),
            device,
            observer,
        )?;
        labeled.extend(picks);
        score_s = t.elapsed().as_secs_f64();
    }
    Ok(records)
}

/// The model's label probabilities on the test split (see [`Heads::predict`]), measured.
fn evaluate(
    plan: &Plan,
    models: &[Mlp],
    data: &MultiLabelData,
    masks: &mut Rng,
    device: &Device,
) -> Result<LabelMetrics> {
    let probs = plan.heads.predict(models, &data.test_x, masks, device)?;
    let sets = &data.test.sets;
    let truth: Vec<u8> = (0..sets.len()).flat_map(|i| sets.row(i).to_vec()).collect();
    label_metrics(&truth, &probs, sets.labels(), plan.threshold)
}

/// The pool items `strategy` labels next.
#[allow(clippy::too_many_arguments)]
fn choose(
    plan: &Plan,
    data: &MultiLabelData,
    strategy: &Strategy,
    models: &[Mlp],
    labeled: &[usize],
    (seed, cycle): (u64, usize),
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<Vec<usize>> {
    let mut taken = vec![false; data.pool.len()];
    for &i in labeled {
        taken[i] = true;
    }
    let unlabeled: Vec<usize> = (0..data.pool.len()).filter(|&i| !taken[i]).collect();
    let key = cycle as u64;
    let (scorer, selection) = match strategy.pick() {
        Pick::Scored { scorer, selection } => (scorer, selection),
        Pick::Random => return pick_random(&unlabeled, plan.query, (seed, Purpose::Select, key)),
        Pick::Batch(b) => {
            return Err(Error::config(
                "scorer",
                format!("`{}` does not select label sets yet", b.name()),
            ))
        }
    };
    let d = data.pool.dim();
    let mut x = Vec::with_capacity(unlabeled.len() * d);
    for &i in &unlabeled {
        x.extend_from_slice(&data.pool_x[i * d..(i + 1) * d]);
    }
    let request = scorer.needs().labels.unwrap_or(SampleRequest::Members);
    let mut masks = stream(seed, Purpose::Perturb, key);
    let probs = plan
        .heads
        .draws(models, &x, request, &mut masks, device)?
        .with_cardinality(data.pool.sets.mean_cardinality(labeled))?;
    let scores = scorer.score(&Evidence::from_labels(probs))?;
    check(
        observer,
        &Event::Scored {
            cycle,
            indices: &unlabeled,
            scores: &scores,
        },
    )?;
    let mut rng = stream(seed, Purpose::Select, key);
    Ok(selection
        .select(&scores, plan.query, &mut rng)?
        .into_iter()
        .map(|p| unlabeled[p])
        .collect())
}
