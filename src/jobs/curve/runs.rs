//! A curve's runs: every strategy x seed of a [`CurveSpec`] run (or continued) into an output
//! folder ([`run_curve`]), and what is written from their states: `curve.csv`, `summary.csv`
//! and the ACC/NLL figure.

use super::parallel::{default_jobs, run_jobs};
use super::stopping::write_stopping_csv;
use crate::acquire::{run as run_one, LoopConfig, RunContext, RunState};
use crate::data::{Dataset, PoolReader};
use crate::error::{Error, Result};
use crate::fsutil::{read_json, write_csv, write_json};
use crate::metrics::stats::{aubc, bootstrap_interval, mean_interval, wilcoxon, Interval};
use crate::models::Arch;
use crate::observe::Observer;
use crate::plot::{Figure, Panel, Series};
use crate::strategies::{ScorerSettings, StrategyKind};
use candle_core::Device;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Everything that defines a curve experiment; saved as `run.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CurveSpec {
    /// Where the data came from (informational; data identity is checked by fingerprint).
    pub data: PathBuf,
    /// The model trained every cycle.
    pub model: Arch,
    /// Strategies to compare.
    pub strategies: Vec<StrategyKind>,
    /// Seeds, one run per strategy and seed.
    pub seeds: Vec<u64>,
    /// Loop settings.
    pub config: LoopConfig,
    /// Settings of the parameterised scorers.
    #[serde(default)]
    pub scorers: ScorerSettings,
}

/// One row of `summary.csv`.
#[derive(Debug, Clone, PartialEq)]
pub struct SummaryRow {
    /// Strategy name.
    pub strategy: String,
    /// Number of seeds.
    pub seeds: usize,
    /// Mean over seeds of the ACC averaged over cycles 1..=cycles.
    pub acc_mean: f64,
    /// Sample standard deviation over seeds (0 for one seed).
    pub acc_std: f64,
    /// Same for NLL.
    pub nll_mean: f64,
    /// Same for NLL.
    pub nll_std: f64,
    /// Mean ACC at the last cycle.
    pub final_acc: f64,
    /// Mean labels at the last cycle: the budget, or fewer where a stopping rule ended runs.
    pub final_labels: f64,
    /// The normalised area under the ACC curve over cycles `0..=cycles`
    /// ([`aubc`](crate::metrics::stats::aubc)): its mean over seeds and 95% t interval.
    pub aubc: Interval,
    /// This strategy's AUBC minus `random`'s, paired by seed (none without a `random` run,
    /// and for `random` itself).
    pub vs_random: Option<Paired>,
    /// The same against the strategy of the highest mean AUBC (none for that one).
    pub vs_best: Option<Paired>,
    /// What the comparison with random says, in words (see [`Verdict`]).
    pub verdict: Verdict,
}

/// A paired comparison of two strategies' AUBCs over the seeds both ran.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Paired {
    /// Mean difference (this minus the other).
    pub diff: f64,
    /// Its 95% percentile bootstrap interval (9,999 resamples).
    pub lo: f64,
    /// Upper bound.
    pub hi: f64,
    /// Wilcoxon's signed-rank two-sided p-value.
    pub p: f64,
}

/// What a strategy's comparison with random says: a difference only when Wilcoxon's test
/// rejects at 5% and the bootstrap interval excludes zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The strategy is `random`.
    Baseline,
    /// The curve has no `random` run to compare with.
    NoRandom,
    /// Higher AUBC than random, both tests agreeing.
    Better,
    /// Lower AUBC than random, both tests agreeing.
    Worse,
    /// Neither test shows a difference (three seeds never can: the smallest p is 0.25).
    NoDifference,
}

impl Verdict {
    /// The words `summary.csv` writes.
    pub fn words(self) -> &'static str {
        match self {
            Verdict::Baseline => "baseline",
            Verdict::NoRandom => "no random run to compare with",
            Verdict::Better => "better than random",
            Verdict::Worse => "worse than random",
            Verdict::NoDifference => "no difference from random",
        }
    }

    fn of(vs_random: Option<Paired>, is_random: bool) -> Verdict {
        match vs_random {
            _ if is_random => Verdict::Baseline,
            None => Verdict::NoRandom,
            Some(c) if c.p < 0.05 && c.lo > 0.0 => Verdict::Better,
            Some(c) if c.p < 0.05 && c.hi < 0.0 => Verdict::Worse,
            Some(_) => Verdict::NoDifference,
        }
    }
}

/// The most seeds one curve takes: far more runs than any machine finishes, few enough that
/// the seed list itself is never a memory problem.
pub const MAX_SEEDS: u64 = 100_000;

/// Paths inside an output folder.
pub fn state_path(out: &Path, strategy: &str, seed: u64) -> PathBuf {
    out.join("runs").join(format!("{strategy}-seed{seed}.json"))
}

/// How a curve's runs are carried out; none of it changes a run's results.
#[derive(Debug, Clone, Copy, Default)]
pub struct Execution {
    /// Continue the runs saved in the output folder (without it, a folder holding a run is
    /// refused: no work is ever overwritten).
    pub resume: bool,
    /// Also write every pool scoring under `out/scores` ([`SaveScores`]).
    pub save_scores: bool,
    /// Runs carried out at once, each on its own thread (0: [`default_jobs`]).
    pub jobs: usize,
}

/// Runs (or, with `how.resume`, continues) every strategy x seed of `spec`, writing everything
/// under `out`, `how.jobs` runs at once. `train` (every item labeled; in memory, or a
/// [`StreamedPool`](crate::data::StreamedPool) read a chunk at a time) and `test` must be
/// normalised already, with per-channel standard deviation `input_std`. Returns the finished
/// states, seed-major, whatever the number of jobs.
#[allow(clippy::too_many_arguments)]
pub fn run_curve(
    spec: &CurveSpec,
    train: &dyn PoolReader,
    test: &Dataset,
    input_std: &[f32],
    out: &Path,
    how: Execution,
    device: &Device,
    observer: &mut (dyn Observer + Send),
) -> Result<Vec<RunState>> {
    // Validate everything before touching the output folder.
    let params = spec.config.validate(train.len())?;
    let strategies = checked_strategies(spec, train.len())?;
    claim_output(spec, out, how.resume)?;
    let model_desc = serde_json::to_string(&spec.model).unwrap_or_default();
    let ctx = RunContext {
        train,
        test,
        model: &spec.model,
        params: &params,
        input_std,
        device,
    };
    let fingerprints = [train.fingerprint()?, test.fingerprint()];
    let mut states = Vec::new();
    let mut runs = Vec::new();
    for &seed in &spec.seeds {
        for strategy in &strategies {
            let path = state_path(out, strategy.name(), seed);
            let fresh = RunState::with_fingerprints(
                strategy,
                seed,
                &spec.config,
                model_desc.clone(),
                fingerprints,
            );
            states.push(if path.exists() {
                let saved: RunState = read_json(&path)?;
                saved.check_matches(&fresh, &path)?;
                saved
            } else {
                fresh
            });
            runs.push((strategy, path));
        }
    }
    let job = |i: usize, state: &mut RunState, observer: &mut dyn Observer| {
        let (strategy, path) = &runs[i];
        if !how.save_scores {
            return run_one(&ctx, strategy, state, Some(path), observer);
        }
        let mut saver = SaveScores::new(out.join("scores"), observer);
        let r = run_one(&ctx, strategy, state, Some(path), &mut saver);
        match saver.error.take() {
            Some(e) => Err(e.context("saving the scores of every round (setting `save_scores`)")),
            None => r,
        }
    };
    let done = |so_far: &[Option<RunState>]| {
        write_curve_csv(&out.join("curve.csv"), so_far.iter().flatten())
    };
    let jobs = match how.jobs {
        0 => default_jobs(&spec.model, device),
        n => n,
    };
    let states = run_jobs(states, jobs, &job, &done, observer)?;
    let rows = summarize(&states);
    write_summary_csv(&out.join("summary.csv"), &rows)?;
    write_batches_csv(&out.join("batches.csv"), &states, train)?;
    write_recall_csv(&out.join("recall.csv"), &states)?;
    write_stopping_csv(&out.join("stopping.csv"), &states)?;
    curve_figure(&states).save(out, "curve")?;
    if let Some(figure) = vs_random_figure(&states) {
        figure.save(out, "vs-random")?;
    }
    Ok(states)
}

/// Every strategy of `spec` built once and checked against its settings, the model and a pool
/// of `items` items, before the output folder is touched (a settings error, a scorer under the
/// `batchbald` selection, evidence past the memory bound, a strategy named twice).
fn checked_strategies(spec: &CurveSpec, items: usize) -> Result<Vec<crate::round::Strategy>> {
    spec.scorers.validate()?;
    if spec.seeds.is_empty() || spec.strategies.is_empty() {
        return Err(Error::config(
            "seeds",
            "a curve needs at least one seed and one strategy",
        ));
    }
    if spec.seeds.len() as u64 > MAX_SEEDS {
        return Err(Error::config(
            "seeds",
            format!("{} seeds; at most {MAX_SEEDS}", spec.seeds.len()),
        ));
    }
    let mut seen = std::collections::HashSet::new();
    if let Some(s) = spec.seeds.iter().find(|s| !seen.insert(**s)) {
        return Err(Error::config("seeds", format!("seed {s} is given twice")));
    }
    // Every strategy is built once up front: a settings error (a scorer under
    // `--select batchbald`) is reported before the output folder is touched.
    let strategies = spec
        .strategies
        .iter()
        .map(|k| k.strategy(&spec.scorers))
        .collect::<Result<Vec<_>>>()?;
    let mut names = std::collections::HashSet::new();
    if let Some(dup) = strategies
        .iter()
        .find(|s| !names.insert(s.name().to_string()))
    {
        return Err(Error::config(
            "scorer",
            format!(
                "`{}` is given twice (each strategy runs once per seed)",
                dup.name()
            ),
        ));
    }
    // The first round has the most candidates: the most evidence any round holds.
    let first = items - spec.config.initial;
    for s in &strategies {
        crate::round::check_evidence(
            s,
            (first, spec.config.subsample),
            spec.model.classes(),
            spec.config.ensemble,
            spec.config.batch,
        )?;
        if let Some(needs) = s.needs() {
            spec.model.check_needs(s.name(), &needs)?;
            let last = alkit_acquisition::GradLayers::Last;
            let reads_last_layer = needs.features || needs.grads.is_some_and(|g| g.layers == last);
            if reads_last_layer && spec.config.ensemble.is_some() {
                return Err(Error::config(
                    "layers",
                    format!(
                        "`{}` reads the last layer's features, and an ensemble has one per \
                         member, not one: score one model, or every layer (setting `layers` all)",
                        s.name()
                    ),
                ));
            }
        }
    }
    if spec.scorers.members != spec.config.ensemble.is_some() {
        return Err(Error::config(
            "ensemble",
            "sample scorers read ensemble members exactly when the loop trains an ensemble",
        ));
    }
    Ok(strategies)
}

/// `run.json` in `out`: written for a new run (refused where one is already), read and
/// compared with `spec` when resuming.
fn claim_output(spec: &CurveSpec, out: &Path, resume: bool) -> Result<()> {
    let spec_path = out.join("run.json");
    if resume {
        let saved: CurveSpec = read_json(&spec_path)?;
        if &saved != spec {
            return Err(Error::state(
                &spec_path,
                "the saved experiment differs from the one requested",
            ));
        }
    } else {
        if spec_path.exists() {
            return Err(Error::state(
                &spec_path,
                "this folder already holds a run; continue it (setting `resume`) or choose another output folder",
            ));
        }
        write_json(&spec_path, spec)?;
    }
    Ok(())
}

/// Writes `curve.csv` for `states` to `path`.
pub fn write_curve_csv<'a>(
    path: &Path,
    states: impl IntoIterator<Item = &'a RunState>,
) -> Result<()> {
    let header = [
        "scorer",
        "seed",
        "cycle",
        "labeled",
        "acc",
        "nll",
        "train_s",
        "score_s",
        "balanced_acc",
    ];
    let rows = states.into_iter().flat_map(|st| {
        st.records.iter().map(|r| {
            vec![
                st.strategy.clone(),
                st.seed.to_string(),
                r.cycle.to_string(),
                r.labeled.to_string(),
                format!("{:.6}", r.acc),
                format!("{:.6}", r.nll),
                format!("{:.3}", r.train_s),
                format!("{:.3}", r.score_s),
                cell(r.balanced_acc),
            ]
        })
    });
    write_csv(path, &header, rows)
}

/// A figure to six decimals, or an empty cell where there is none.
fn cell(v: Option<f64>) -> String {
    v.map_or_else(String::new, |v| format!("{v:.6}"))
}

/// Writes `recall.csv`: per run (in `states`' order) and cycle, the test balanced accuracy and
/// each class's test recall (`class_<c>`; an empty cell for a class without test items, or
/// in a cycle recorded before recall was kept).
pub fn write_recall_csv(path: &Path, states: &[RunState]) -> Result<()> {
    let records = || {
        states
            .iter()
            .flat_map(|st| st.records.iter().map(move |r| (st, r)))
    };
    let classes = records().map(|(_, r)| r.recall.len()).max().unwrap_or(0);
    let rows = records().map(|(st, r)| {
        let mut row = vec![
            st.strategy.clone(),
            st.seed.to_string(),
            r.cycle.to_string(),
            r.labeled.to_string(),
            cell(r.balanced_acc),
        ];
        row.extend((0..classes).map(|c| cell(r.recall.get(c).copied().flatten())));
        row
    });
    let header = with_classes(
        &["scorer", "seed", "cycle", "labeled", "balanced_acc"],
        classes,
    );
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    write_csv(path, &header, rows)
}

/// The columns `fixed`, then `class_0` .. `class_<classes - 1>`.
fn with_classes(fixed: &[&str], classes: usize) -> Vec<String> {
    let named = (0..classes).map(|c| format!("class_{c}"));
    fixed.iter().map(|s| s.to_string()).chain(named).collect()
}

/// Records grouped by strategy (first-seen order), each strategy's runs by seed (first-seen
/// order), a run's records in their order; `key` gives a record's strategy and seed.
pub(crate) fn by_strategy<R>(
    records: &[R],
    key: impl Fn(&R) -> (&str, u64),
) -> Vec<(String, Vec<Vec<&R>>)> {
    let mut out: Vec<(String, Vec<Vec<&R>>)> = Vec::new();
    for r in records {
        let (strategy, seed) = key(r);
        let at = match out.iter().position(|(s, _)| s == strategy) {
            Some(at) => at,
            None => {
                out.push((strategy.to_string(), Vec::new()));
                out.len() - 1
            }
        };
        let runs = &mut out[at].1;
        match runs.iter_mut().find(|run| key(run[0]).1 == seed) {
            Some(run) => run.push(r),
            None => runs.push(vec![r]),
        }
    }
    out
}

/// Mean and sample standard deviation of `v` (0 for one value): what curves report over seeds.
pub(crate) fn mean_std(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let m = v.iter().sum::<f64>() / n.max(1.0);
    let var = if v.len() > 1 {
        v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    (m, var.sqrt())
}

/// Per strategy (in first-seen order): mean and sample std over seeds of the per-run averages
/// of ACC and NLL over cycles `1..=cycles` (cycle 0 alone when there are no acquisition
/// cycles), and the AUBC statistics: its t interval, and the paired comparisons with `random`
/// and with the best strategy (their bootstrap draws from the stream `(smallest seed, Tool,
/// strategy's position)`, so the same runs give the same summary).
pub fn summarize(states: &[RunState]) -> Vec<SummaryRow> {
    let names = strategy_names(states);
    let aubcs: Vec<BTreeMap<u64, f64>> = names.iter().map(|n| aubc_by_seed(states, n)).collect();
    let means: Vec<f64> = aubcs
        .iter()
        .map(|a| a.values().sum::<f64>() / a.len() as f64)
        .collect();
    let best = (0..names.len())
        .filter(|&k| means[k].is_finite())
        .max_by(|&a, &b| means[a].total_cmp(&means[b]));
    let random = names.iter().position(|n| *n == "random");
    let seed = states.iter().map(|s| s.seed).min().unwrap_or(0);
    names
        .iter()
        .enumerate()
        .map(|(k, name)| {
            let mut rng = crate::rng::stream(seed, crate::rng::Purpose::Tool, k as u64);
            let mut against = |other: Option<usize>| {
                other
                    .filter(|&o| o != k)
                    .and_then(|o| paired(&aubcs[k], &aubcs[o], &mut rng))
            };
            let vs_random = against(random);
            let vs_best = against(best);
            let runs: Vec<&RunState> = states.iter().filter(|s| s.strategy == *name).collect();
            SummaryRow {
                aubc: mean_interval(&aubcs[k].values().copied().collect::<Vec<_>>(), 0.95),
                vs_random,
                vs_best,
                verdict: Verdict::of(vs_random, random == Some(k)),
                ..averages(name, &runs)
            }
        })
        .collect()
}

/// The ACC and NLL averages of one strategy's runs (the AUBC fields left for the caller).
fn averages(name: &str, runs: &[&RunState]) -> SummaryRow {
    let avg = |st: &RunState, f: fn(&crate::observe::CycleRecord) -> f64| {
        let rs: Vec<f64> = st.records.iter().filter(|r| r.cycle >= 1).map(f).collect();
        if rs.is_empty() {
            st.records.first().map_or(f64::NAN, f)
        } else {
            rs.iter().sum::<f64>() / rs.len() as f64
        }
    };
    let accs: Vec<f64> = runs.iter().map(|st| avg(st, |r| r.acc)).collect();
    let nlls: Vec<f64> = runs.iter().map(|st| avg(st, |r| r.nll)).collect();
    let finals: Vec<f64> = runs
        .iter()
        .filter_map(|st| st.records.last().map(|r| r.acc))
        .collect();
    let labels: Vec<f64> = runs
        .iter()
        .filter_map(|st| st.records.last().map(|r| r.labeled as f64))
        .collect();
    let (acc_mean, acc_std) = mean_std(&accs);
    let (nll_mean, nll_std) = mean_std(&nlls);
    SummaryRow {
        strategy: name.to_string(),
        seeds: runs.len(),
        acc_mean,
        acc_std,
        nll_mean,
        nll_std,
        final_acc: mean_std(&finals).0,
        final_labels: mean_std(&labels).0,
        aubc: mean_interval(&[], 0.95),
        vs_random: None,
        vs_best: None,
        verdict: Verdict::NoRandom,
    }
}

/// The strategies of `states`, in first-seen order.
fn strategy_names(states: &[RunState]) -> Vec<&str> {
    let mut names: Vec<&str> = Vec::new();
    for st in states {
        if !names.contains(&st.strategy.as_str()) {
            names.push(&st.strategy);
        }
    }
    names
}

/// Strategy `name`'s AUBC per seed: its ACC against the labeled count over every cycle a run
/// recorded, a run that its stopping rule ended carried at its last ACC to the end of the
/// budget (the model one keeps after stopping). A run without a record has none (its seed is left out, as a missing one).
pub fn aubc_by_seed(states: &[RunState], name: &str) -> BTreeMap<u64, f64> {
    states
        .iter()
        .filter(|st| st.strategy == name)
        .filter_map(|st| {
            let mut labeled: Vec<f64> = st.records.iter().map(|r| r.labeled as f64).collect();
            let mut acc: Vec<f64> = st.records.iter().map(|r| r.acc).collect();
            // A run its stopping rule ended keeps its last model to the end of the budget.
            if let (true, Some(&last)) = (st.stopped(), acc.last()) {
                if labeled.last().is_some_and(|&l| l < st.budget() as f64) {
                    labeled.push(st.budget() as f64);
                    acc.push(last);
                }
            }
            let a = aubc(&labeled, &acc);
            a.is_finite().then_some((st.seed, a))
        })
        .collect()
}

/// `a` against `b` over the seeds both have: mean difference, bootstrap interval, Wilcoxon's
/// p (`None` without a shared seed).
fn paired(
    a: &BTreeMap<u64, f64>,
    b: &BTreeMap<u64, f64>,
    rng: &mut dyn rand::RngCore,
) -> Option<Paired> {
    let d: Vec<f64> = a
        .iter()
        .filter_map(|(s, x)| b.get(s).map(|y| x - y))
        .collect();
    if d.is_empty() {
        return None;
    }
    let (lo, hi) = bootstrap_interval(&d, BOOTSTRAP_RESAMPLES, 0.95, rng);
    Some(Paired {
        diff: d.iter().sum::<f64>() / d.len() as f64,
        lo,
        hi,
        p: wilcoxon(&d).p,
    })
}

/// Resamples of the bootstrap intervals (SciPy's default).
const BOOTSTRAP_RESAMPLES: usize = 9_999;

/// Writes `batches.csv`: per run (in `states`' order) and per cycle, how many items of each
/// class that cycle's labeling added (cycle 0: the seed set; cycle `c`: the batch chosen with
/// cycle `c - 1`'s model), read from the runs' labeled items and `train`'s labels. Columns
/// `scorer,seed,cycle,items,class_0..class_{C-1}` (the data set's class order).
pub fn write_batches_csv(path: &Path, states: &[RunState], train: &dyn PoolReader) -> Result<()> {
    let mut rows = Vec::new();
    let mut classes = 0;
    for st in states {
        let indices: Vec<usize> = st.labeled.iter().map(|&(i, _)| i).collect();
        let data = train.gather(&indices)?;
        classes = data.classes();
        let last = st.labeled.iter().map(|&(_, c)| c).max().unwrap_or(0);
        let mut counts = vec![vec![0usize; classes]; last + 1];
        for (&(_, cycle), &y) in st.labeled.iter().zip(data.labels()) {
            counts[cycle][y as usize] += 1;
        }
        for (cycle, c) in counts.into_iter().enumerate() {
            let mut row = vec![
                st.strategy.clone(),
                st.seed.to_string(),
                cycle.to_string(),
                c.iter().sum::<usize>().to_string(),
            ];
            row.extend(c.iter().map(usize::to_string));
            rows.push(row);
        }
    }
    let header = with_classes(&["scorer", "seed", "cycle", "items"], classes);
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    write_csv(path, &header, rows)
}

/// Writes `summary.csv` for `rows` to `path` (an absent or undefined figure is an empty cell).
pub fn write_summary_csv(path: &Path, rows: &[SummaryRow]) -> Result<()> {
    let header = [
        "scorer",
        "seeds",
        "acc_mean",
        "acc_std",
        "nll_mean",
        "nll_std",
        "final_acc",
        "final_labels",
        "aubc_mean",
        "aubc_lo",
        "aubc_hi",
        "vs_random",
        "vs_random_lo",
        "vs_random_hi",
        "p_random",
        "vs_best",
        "vs_best_lo",
        "vs_best_hi",
        "p_best",
        "verdict",
    ];
    let f = |v: f64| cell((!v.is_nan()).then_some(v));
    let pair = |c: Option<Paired>| match c {
        Some(c) => vec![f(c.diff), f(c.lo), f(c.hi), format!("{:.4}", c.p)],
        None => vec![String::new(); 4],
    };
    let rows = rows.iter().map(|r| {
        let mut row = vec![
            r.strategy.clone(),
            r.seeds.to_string(),
            f(r.acc_mean),
            f(r.acc_std),
            f(r.nll_mean),
            f(r.nll_std),
            f(r.final_acc),
            f(r.final_labels),
            f(r.aubc.mean),
            f(r.aubc.lo),
            f(r.aubc.hi),
        ];
        row.extend(pair(r.vs_random));
        row.extend(pair(r.vs_best));
        row.push(r.verdict.words().to_string());
        row
    });
    write_csv(path, &header, rows)
}

/// Two panels (ACC, NLL against labeled count), one line per strategy with a ± std band.
pub fn curve_figure(states: &[RunState]) -> Figure {
    // What the line and band are, in the titles: one seed has no band.
    let seeds = states
        .iter()
        .map(|s| s.seed)
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    let over = match seeds {
        1 => " (1 seed)".to_string(),
        n => format!(" (mean ± std over {n} seeds)"),
    };
    let mut acc = Panel {
        log_y: false,
        title: format!("Test accuracy{over}"),
        x_label: "labeled items".into(),
        y_label: "accuracy".into(),
        series: Vec::new(),
    };
    let mut nll = Panel {
        log_y: false,
        title: format!("Test NLL{over}"),
        x_label: "labeled items".into(),
        y_label: "NLL (nats)".into(),
        series: Vec::new(),
    };
    for name in strategy_names(states) {
        let runs: Vec<&RunState> = states.iter().filter(|s| s.strategy == name).collect();
        let cycles = runs.iter().map(|s| s.records.len()).min().unwrap_or(0);
        for (panel, f) in [
            (
                &mut acc,
                (|r: &crate::observe::CycleRecord| r.acc) as fn(&_) -> f64,
            ),
            (&mut nll, |r| r.nll),
        ] {
            let mut points = Vec::new();
            let mut band = Vec::new();
            for c in 0..cycles {
                let vals: Vec<f64> = runs.iter().map(|s| f(&s.records[c])).collect();
                let (m, sd) = mean_std(&vals);
                let x = runs[0].records[c].labeled as f64;
                points.push((x, m));
                band.push((x, m - sd, m + sd));
            }
            panel.series.push(Series {
                name: name.to_string(),
                points,
                band,
            });
        }
    }
    Figure {
        panels: vec![acc, nll],
        panel_width: 480,
        height: 360,
        columns: 0,
    }
}

/// Each strategy's test accuracy minus `random`'s, paired by seed, against the labeled
/// count: the mean difference and its 95% t interval over the seeds, with `random` itself as
/// the line at 0 (the strategies in the order and colours of [`curve_figure`]). A band clear
/// of 0 is a difference the seeds support at that budget. `None` without `random` beside
/// another strategy.
pub fn vs_random_figure(states: &[RunState]) -> Option<Figure> {
    let random: BTreeMap<u64, &RunState> = states
        .iter()
        .filter(|s| s.strategy == "random")
        .map(|s| (s.seed, s))
        .collect();
    let names = strategy_names(states);
    if random.is_empty() || names.len() < 2 {
        return None;
    }
    let (series, seeds): (Vec<Series>, Vec<usize>) = names
        .into_iter()
        .map(|name| {
            let pairs: Vec<(&RunState, &RunState)> = states
                .iter()
                .filter(|s| s.strategy == name)
                .filter_map(|s| random.get(&s.seed).map(|r| (s, *r)))
                .collect();
            (paired_series(name, &pairs), pairs.len())
        })
        .unzip();
    let seeds = seeds.into_iter().min().unwrap_or(0);
    let panel = Panel {
        log_y: false,
        title: format!(
            "Accuracy minus random's, paired by seed (mean, 95% interval over {seeds} seeds)"
        ),
        x_label: "labeled items".into(),
        y_label: "accuracy difference".into(),
        series,
    };
    Some(Figure {
        panels: vec![panel],
        panel_width: 640,
        height: 360,
        columns: 0,
    })
}

/// The line of [`vs_random_figure`] for strategy `name` from its runs paired with random's
/// of the same seed: per cycle they all reached, the mean difference in accuracy and its 95%
/// t interval (no band with one pair).
fn paired_series(name: &str, pairs: &[(&RunState, &RunState)]) -> Series {
    let cycles = pairs
        .iter()
        .map(|(a, b)| a.records.len().min(b.records.len()));
    let (mut points, mut band) = (Vec::new(), Vec::new());
    for c in 0..cycles.min().unwrap_or(0) {
        let diffs: Vec<f64> = pairs
            .iter()
            .map(|(a, b)| a.records[c].acc - b.records[c].acc)
            .collect();
        let i = mean_interval(&diffs, 0.95);
        let x = pairs[0].0.records[c].labeled as f64;
        points.push((x, i.mean));
        if i.lo.is_finite() && i.hi.is_finite() {
            band.push((x, i.lo, i.hi));
        }
    }
    Series {
        name: name.to_string(),
        points,
        band,
    }
}

/// The files a curve run writes into its folder (besides `runs/`): what `--force` removes
/// before starting over. Nothing else in the folder is touched.
pub const OUTPUTS: [&str; 10] = [
    "run.json",
    "curve.csv",
    "summary.csv",
    "batches.csv",
    "recall.csv",
    "stopping.csv",
    "curve.svg",
    "curve.png",
    "vs-random.svg",
    "vs-random.png",
];

/// Removes a previous run's outputs from `out` ([`OUTPUTS`] and `runs/`), so that a run can
/// start over in the same folder. Missing files are fine; any other failure is an error.
pub fn remove_outputs(out: &Path) -> Result<()> {
    for p in OUTPUTS {
        let path = out.join(p);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(Error::io(path, e)),
            _ => {}
        }
    }
    let runs = out.join("runs");
    match std::fs::remove_dir_all(&runs) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(runs, e)),
        _ => Ok(()),
    }
}

/// An observer that writes every pool scoring of a curve run to
/// `dir/<strategy>/seed<S>/cycle<C>.csv` (`index,score`, the candidates' dataset indices and
/// scores) and passes every event on to `inner`. A failed write stops the run; the error is
/// kept in [`SaveScores::error`].
pub struct SaveScores<'a> {
    dir: PathBuf,
    run: (String, u64),
    inner: &'a mut dyn Observer,
    /// The first write that failed.
    pub error: Option<Error>,
}

impl<'a> SaveScores<'a> {
    /// Saves under `dir`, forwarding to `inner`.
    pub fn new(dir: PathBuf, inner: &'a mut dyn Observer) -> Self {
        Self {
            dir,
            run: (String::new(), 0),
            inner,
            error: None,
        }
    }
}

impl Observer for SaveScores<'_> {
    fn on(&mut self, event: &crate::observe::Event<'_>) -> crate::observe::Control {
        use crate::observe::{Control, Event};
        match event {
            Event::RunStarted { strategy, seed, .. } => self.run = (strategy.to_string(), *seed),
            Event::Scored {
                cycle,
                indices,
                scores,
            } => {
                let path = self
                    .dir
                    .join(&self.run.0)
                    .join(format!("seed{}", self.run.1))
                    .join(format!("cycle{cycle}.csv"));
                let rows = indices
                    .iter()
                    .zip(scores.iter())
                    .map(|(i, v)| vec![i.to_string(), v.to_string()]);
                if let Err(e) = write_csv(&path, &["index", "score"], rows) {
                    self.error = Some(e);
                    return Control::Stop;
                }
            }
            _ => {}
        }
        self.inner.on(event)
    }
}
