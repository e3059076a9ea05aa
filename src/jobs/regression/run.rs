//! The loop of a regression curve: for each strategy and seed, cycles of training Gaussian
//! heads on the labeled items, measuring them on the test split, and labeling the pool items
//! the strategy picks (from the known targets).
//!
//! Randomness follows the classification loop's streams: the seed set from
//! `(seed, SeedSet, 0)` (the same for every strategy of a seed, so strategies are paired),
//! member `m`'s initialisation and batches from [`TrainRngs::for_member`](crate::train::TrainRngs::for_member)`(seed, cycle, m)`,
//! MC-dropout masks from `(seed, Perturb, cycle)` when scoring and `(seed, Tool, cycle)` when
//! measuring, and random or stochastic picks from
//! `(seed, Select, cycle)`: the same seed gives the same picks and figures on the CPU.

use super::data::RegressionData;
use super::fit::Heads;
use super::output::{curve_figure, summarize, write_curve_csv, write_summary_csv, Record};
use super::output::{SummaryRow, OUTPUTS};
use super::settings::RegressionSettings;
use crate::data::{Standardizer, Task};
use crate::error::{Error, Result};
use crate::fsutil::write_json;
use crate::metrics::regression::regression_metrics;
use crate::models::GaussKind;
use crate::nn::{GaussMlp, Regressor};
use crate::observe::{check, Event, Observer};
use crate::predict::kernel_features;
use crate::rng::{stream, Purpose};
use crate::round::{pick_random, Pick, Strategy};
use crate::strategies::{ScorerSettings, StrategyKind};
use crate::train::TrainConfig;
use alkit_acquisition::{Evidence, Gaussian, SampleRequest};
use candle_core::Device;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Everything that defines a regression curve; saved as `run.json`. Unset fields take the
/// defaults each field names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegressionCurve {
    /// The pool: a CSV table or an embedding file with targets.
    pub data: PathBuf,
    /// Targets, test split, loss.
    pub settings: RegressionSettings,
    /// The Gaussian head. [default: mlp-gauss]
    pub model: Option<GaussKind>,
    /// Strategies. [default: variance, epistemic (with draws to read), random]
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

/// A checked regression curve.
struct Plan {
    strategies: Vec<Strategy>,
    seeds: Vec<u64>,
    initial: usize,
    query: usize,
    cycles: usize,
    heads: Heads,
}

impl RegressionCurve {
    /// Cycles the run will train, over every strategy and seed (for progress bars).
    pub fn cycles_total(&self) -> usize {
        let draws = self.ensemble.unwrap_or(1) > 1
            || self.model.unwrap_or(GaussKind::MlpGauss) != GaussKind::LinearGauss;
        let strategies = self
            .strategies
            .as_ref()
            .map_or_else(|| default_strategies(draws).len(), Vec::len);
        (self.seeds.unwrap_or(1) as usize)
            .saturating_mul(strategies)
            .saturating_mul(self.cycles.unwrap_or(10).saturating_add(1))
    }

    fn test_path(&self) -> Result<&Path> {
        self.settings.test.as_deref().ok_or_else(|| {
            Error::config(
                "test",
                "a regression curve measures every cycle on a labeled test split: name its \
                 table (the pool's kind and columns)",
            )
        })
    }

    /// Checks every setting against the data.
    fn plan(&self, data: &RegressionData) -> Result<Plan> {
        if self.settings.task.is_some_and(|t| t != Task::Regression) {
            return Err(Error::config(
                "task",
                "these settings are a regression run's; a classification curve reads class labels",
            ));
        }
        let members = self.ensemble.unwrap_or(1);
        let model = self.model.unwrap_or(GaussKind::MlpGauss);
        let cfg = model.config(data.pool.dim(), data.pool.targets.outputs());
        let draws = members > 1 || cfg.dropout > 0.0;
        let scorers = ScorerSettings {
            members: members > 1,
            ..self.scorers
        };
        let kinds = match &self.strategies {
            Some(k) => k.clone(),
            None => default_strategies(draws),
        };
        let strategies = kinds
            .iter()
            .map(|k| regression_strategy(*k, &scorers, draws))
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
                loss: self.settings.gauss_loss()?,
                members,
                params,
                mc_samples: scorers.mc_samples,
            },
        })
    }
}

/// The strategies a regression curve runs when none are named.
fn default_strategies(draws: bool) -> Vec<StrategyKind> {
    let names: &[&str] = if draws {
        &["variance", "epistemic", "random"]
    } else {
        &["variance", "random"]
    };
    names
        .iter()
        .filter_map(|n| StrategyKind::named(n))
        .collect()
}

/// `kind` as a regression strategy: random picks, or a score over Gaussian draws that the
/// run's model gives (a probe with one draw finds the scores that need several).
fn regression_strategy(kind: StrategyKind, s: &ScorerSettings, draws: bool) -> Result<Strategy> {
    s.refuse_class_balance("targets that are numbers have no classes")?;
    let strategy = kind.strategy(s)?;
    let regression: Vec<&str> = StrategyKind::all()
        .filter(|k| {
            k.strategy(s)
                .ok()
                .and_then(|st| st.needs())
                .is_some_and(|n| n.is_regression())
        })
        .map(StrategyKind::name)
        .collect();
    match strategy.pick() {
        Pick::Random => Ok(strategy),
        Pick::Batch(b) if b.needs().is_regression() => Ok(strategy),
        Pick::Scored { scorer, .. } if scorer.needs().is_regression() => {
            let probe = Gaussian::new(vec![0.0], vec![1.0], 1, 1, 1)?;
            if !draws && scorer.score(&Evidence::from_gaussian(probe)).is_err() {
                return Err(Error::config(
                    "scorer",
                    format!(
                        "`{}` reads the disagreement of several draws: train an ensemble \
                         (setting `ensemble`) or a model with dropout (mlp-gauss)",
                        kind.name()
                    ),
                ));
            }
            Ok(strategy)
        }
        _ => Err(Error::config(
            "scorer",
            format!(
                "`{}` scores a classifier's predictions; a regression run takes {} or random",
                kind.name(),
                regression.join(", ")
            ),
        )),
    }
}

/// Runs the curve into `out` (refusing a run already there unless `force`), writing
/// `curve.csv` after every finished run and the summary and figure at the end.
pub fn run(
    opts: &RegressionCurve,
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
    let data = RegressionData::load(&opts.data, test, &opts.settings.target, opts.settings.task)?;
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
    data: &RegressionData,
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
        let scaler = Standardizer::fit(&data.pool.targets, &labeled)?;
        let key = (seed, cycle as u64);
        let models = plan
            .heads
            .train(data, &scaler, &labeled, key, device, observer)?;
        let train_s = t.elapsed().as_secs_f64();
        let mut masks = stream(seed, Purpose::Tool, cycle as u64);
        let measured = evaluate(&plan.heads, &models, data, &scaler, &mut masks, device)?;
        records.push(measured.record(
            strategy.name(),
            seed,
            (cycle, labeled.len()),
            (train_s, score_s),
        ));
        let rmse = records.last().map_or(f64::NAN, |r: &Record| r.rmse);
        check(
            observer,
            &Event::CycleMeasured {
                cycle,
                metric: "rmse",
                value: rmse,
            },
        )?;
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

/// Test-split figures of one cycle, each the mean over outputs.
struct Measured {
    rmse: f64,
    mae: f64,
    nll: f64,
    crps: f64,
    coverage90: f64,
    width90: f64,
}

impl Measured {
    fn record(
        self,
        strategy: &str,
        seed: u64,
        (cycle, labeled): (usize, usize),
        (train_s, score_s): (f64, f64),
    ) -> Record {
        Record {
            strategy: strategy.to_string(),
            seed,
            cycle,
            labeled,
            rmse: self.rmse,
            mae: self.mae,
            nll: self.nll,
            crps: self.crps,
            coverage90: self.coverage90,
            width90: self.width90,
            train_s,
            score_s,
        }
    }
}

/// The model's predictive mixture on the test split (see [`Heads::predict`]), measured.
fn evaluate(
    heads: &Heads,
    models: &[GaussMlp],
    data: &RegressionData,
    scaler: &Standardizer,
    masks: &mut crate::rng::Rng,
    device: &Device,
) -> Result<Measured> {
    let (d, k, n) = (
        data.test.dim(),
        data.test.targets.outputs(),
        data.test.len(),
    );
    let (mean, var) = heads.predict(models, &data.test_x, d, scaler, masks, device)?;
    let mut sum = [0f64; 6];
    for o in 0..k {
        let (mut y, mut mu, mut sd) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..n {
            y.push(data.test.targets.row(i)[o]);
            mu.push(mean[i * k + o]);
            sd.push(var[i * k + o].sqrt());
        }
        let m = regression_metrics(&y, &mu, &sd, &[0.9])?;
        let figures = [
            m.rmse,
            m.mae,
            m.nll,
            m.crps,
            m.intervals[0].coverage,
            m.intervals[0].width,
        ];
        for (s, f) in sum.iter_mut().zip(figures) {
            *s += f / k as f64;
        }
    }
    let [rmse, mae, nll, crps, coverage90, width90] = sum;
    Ok(Measured {
        rmse,
        mae,
        nll,
        crps,
        coverage90,
        width90,
    })
}

/// The pool items `strategy` labels next.
#[allow(clippy::too_many_arguments)]
fn choose(
    plan: &Plan,
    data: &RegressionData,
    strategy: &Strategy,
    models: &[GaussMlp],
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
    let d = data.pool.dim();
    let rows_of = |ids: &[usize]| {
        let mut x = Vec::with_capacity(ids.len() * d);
        for &i in ids {
            x.extend_from_slice(&data.pool_x[i * d..(i + 1) * d]);
        }
        x
    };
    let x = rows_of(&unlabeled);
    let (scorer, selection) = match strategy.pick() {
        Pick::Scored { scorer, selection } => (scorer, selection),
        Pick::Batch(b) => {
            let request = b.needs().kernel_features.ok_or_else(|| {
                Error::config("scorer", format!("`{}` is not a regression rule", b.name()))
            })?;
            let refs: Vec<&dyn Regressor> = models.iter().map(|m| m as &dyn Regressor).collect();
            let mut sketch = stream(seed, Purpose::Perturb, key);
            let f = kernel_features(
                &refs,
                (&rows_of(labeled), &x),
                d,
                request,
                &mut sketch,
                device,
            )?;
            let ev = Evidence::from_kernel_features(f);
            let mut rng = stream(seed, Purpose::Select, key);
            let picks = b.select(&ev, plan.query, &mut rng)?;
            return Ok(picks.into_iter().map(|p| unlabeled[p]).collect());
        }
        Pick::Random => return pick_random(&unlabeled, plan.query, (seed, Purpose::Select, key)),
    };
    let request = scorer.needs().gaussian.unwrap_or(SampleRequest::Members);
    let mut masks = stream(seed, Purpose::Perturb, key);
    let g = Heads::draws(models, &x, d, request, &mut masks, device)?;
    let scores = scorer.score(&Evidence::from_gaussian(g))?;
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
