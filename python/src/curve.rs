//! `alkit.curve`: the simulated acquisition loop of `alkit curve`, on a data source or on
//! arrays, into a run folder the command line can resume and plot (`curve.csv`,
//! `summary.csv`, `curve.svg/png`). The settings are the library's [`CurveOptions`]; the
//! parameterised scorers' settings come as one JSON object read into [`ScorerSettings`], its
//! keys checked against the type's own.

use crate::arrays::values;
use crate::errors::{PyAlkitError, PyAlkitResult, Signals};
use crate::settings::{self, Reads};
use alkit::data::Dataset;
use alkit::error::{Error, Result};
use alkit::hub::Hub;
use alkit::jobs::curve::{CurveOptions, Execution, Paired, SummaryRow};
use alkit::strategies::StrategyKind;
use candle_core::Device;
use numpy::{PyReadonlyArray1, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::prelude::*;
use std::path::PathBuf;

/// One run's records: `(strategy, seed, [cycle])`.
type Run = (String, u64, Vec<Cycle>);

/// One cycle of a run: cycle, labeled, ACC, NLL, balanced accuracy, recall per class, and the
/// stopping measures (kappa, changed, uncertainty, change in F; `None` for a cycle recorded
/// before they were kept).
type Cycle = (
    usize,
    usize,
    f64,
    f64,
    Option<f64>,
    Vec<Option<f64>>,
    Option<Stop>,
);

/// A cycle's stopping measures: `(kappa, changed, uncertainty, delta_f)`.
type Stop = (Option<f64>, Option<f64>, f64, Option<f64>);

/// One paired comparison: `(diff, lo, hi, p)`.
type Pair = Option<(f64, f64, f64, f64)>;
/// One summary row: `(strategy, seeds, acc_mean, acc_std, nll_mean, nll_std, final_acc,
/// final_labels, (aubc_mean, aubc_lo, aubc_hi), vs_random, vs_best, verdict)`.
type Summary = (
    String,
    usize,
    f64,
    f64,
    f64,
    f64,
    f64,
    f64,
    (f64, f64, f64),
    Pair,
    Pair,
    &'static str,
);

/// A split given as arrays: items `(n, ...)` and their labels `(n,)`.
type Split<'py> = (PyReadonlyArrayDyn<'py, f32>, PyReadonlyArray1<'py, i64>);

/// Runs (or with `resume` continues) a curve into `out`; see the package's `curve`.
#[pyfunction]
#[pyo3(signature = (
    out, *, data=None, train=None, test=None, classes=None, scorers=None, model=None, seed=None,
    seeds=None, initial=None, query=None, cycles=None, steps=None, batch_size=None, lr=None,
    ensemble=None, subsample=None, cold_start=false, balanced_start=false, hidden=None,
    stop=None, scorer_settings=None, stream=false, jobs=None, force=false, resume=false
))]
#[allow(clippy::too_many_arguments)]
pub fn curve(
    py: Python<'_>,
    out: PathBuf,
    data: Option<PathBuf>,
    train: Option<Split<'_>>,
    test: Option<Split<'_>>,
    classes: Option<Vec<String>>,
    scorers: Option<Vec<String>>,
    model: Option<String>,
    seed: Option<u64>,
    seeds: Option<u64>,
    initial: Option<usize>,
    query: Option<usize>,
    cycles: Option<usize>,
    steps: Option<usize>,
    batch_size: Option<usize>,
    lr: Option<f64>,
    ensemble: Option<usize>,
    subsample: Option<usize>,
    cold_start: bool,
    balanced_start: bool,
    hidden: Option<Vec<usize>>,
    stop: Option<String>,
    scorer_settings: Option<String>,
    stream: bool,
    jobs: Option<usize>,
    force: bool,
    resume: bool,
) -> PyAlkitResult<(Vec<Run>, Vec<Summary>)> {
    let strategies = scorers
        .map(|s| s.iter().map(|n| n.parse::<StrategyKind>()).collect())
        .transpose()
        .map_err(|e: String| Error::config("scorers", e))?;
    let model = model
        .map(|m| m.parse::<alkit::models::ModelKind>())
        .transpose()?;
    let options = CurveOptions {
        data,
        stream,
        model,
        strategies,
        seed,
        seeds,
        initial,
        query,
        cycles,
        steps,
        batch_size,
        lr,
        ensemble,
        anchor: None,
        subsample,
        cold_start,
        balanced_start,
        hidden,
        stop: stop
            .map(|r| r.parse())
            .transpose()
            .map_err(|e: String| Error::config("stop", e))?,
        scorers: settings::read(scorer_settings.as_deref(), Reads::All, "")?,
    };
    let arrays = match (train, test) {
        (Some(tr), Some(te)) => Some(splits(&tr, &te, classes)?),
        (None, None) => None,
        _ => {
            let m = "give both `train` and `test` as (items, labels), or neither";
            return Err(Error::config("train", m).into());
        }
    };
    if jobs == Some(0) {
        let m = "0 runs at once; give at least 1, or leave it out for one per core";
        return Err(Error::config("jobs", m).into());
    }
    let how = Execution {
        resume,
        save_scores: false,
        jobs: jobs.unwrap_or(0),
    };
    py.detach(move || run(&options, &out, arrays, force, how))
        .map_err(PyAlkitError::from)
}

/// The arrays as data sets: items `(n, ...)` (a row of features, or `(c, h, w)` images; one
/// axis per item adds a channel), labels below the class count (`classes` names them, else
/// `0..max label`).
fn splits(
    train: &Split<'_>,
    test: &Split<'_>,
    classes: Option<Vec<String>>,
) -> Result<(Dataset, Dataset, Vec<String>)> {
    // The package's one label reader, bounded by the class limit before any class name is
    // made from the largest label.
    let ys = |s: &Split<'_>, name: &'static str| -> Result<Vec<u32>> {
        let y = crate::arrays::labels(&s.1, name, Some(crate::arrays::MAX_LABEL))?;
        Ok(y.into_iter().map(|y| y as u32).collect())
    };
    let (ytr, yte) = (ys(train, "train labels")?, ys(test, "test labels")?);
    let most = ytr.iter().chain(&yte).max().map_or(0, |&m| m as usize + 1);
    let classes = classes.unwrap_or_else(|| (0..most.max(2)).map(|c| c.to_string()).collect());
    let set = |s: &Split<'_>, y: Vec<u32>, name: &'static str| -> Result<Dataset> {
        let shape = s.0.shape();
        if shape.len() < 2 || shape[0] != y.len() {
            return Err(Error::config(
                name,
                format!(
                    "items of shape {shape:?} and {} labels: expected (n, ...) items and \
                     (n,) labels",
                    y.len()
                ),
            ));
        }
        let item = match &shape[1..] {
            [h, w] => vec![1, *h, *w],
            rest => rest.to_vec(),
        };
        Dataset::new(values(&s.0, name)?, y, item, classes.len())
    };
    Ok((
        set(train, ytr, "train items")?,
        set(test, yte, "test items")?,
        classes,
    ))
}

/// Starts (on the data source, or on the arrays saved into `out`) or resumes the run, runs
/// it and returns its records and summary.
fn run(
    options: &CurveOptions,
    out: &std::path::Path,
    arrays: Option<(Dataset, Dataset, Vec<String>)>,
    force: bool,
    how: Execution,
) -> Result<(Vec<Run>, Vec<Summary>)> {
    let hub = Hub::from_env();
    let (spec, on) = match (how.resume, &arrays) {
        (true, None) => alkit::jobs::curve::resume_with(out, options, &hub, &mut Signals)?,
        (true, Some(_)) => {
            let m =
                "a run on arrays resumes from the arrays it saved: leave `train` and `test` out";
            return Err(Error::config("resume", m));
        }
        (false, Some((tr, te, names))) => options.start_on(out, force, (tr, te), names)?,
        (false, None) => options.start(out, force, &hub, &mut Signals)?,
    };
    let states = alkit::jobs::curve::run(&spec, &on, out, how, &Device::Cpu, &mut Signals)?;
    let runs = states
        .iter()
        .map(|s| {
            let records = s.records.iter();
            let rows = records
                .map(|r| {
                    let recall = r.recall.clone();
                    let stop = r
                        .stopping
                        .map(|m| (m.kappa, m.changed, m.uncertainty, m.delta_f));
                    (
                        r.cycle,
                        r.labeled,
                        r.acc,
                        r.nll,
                        r.balanced_acc,
                        recall,
                        stop,
                    )
                })
                .collect();
            (s.strategy.clone(), s.seed, rows)
        })
        .collect();
    let summary = alkit::jobs::curve::summarize(&states)
        .into_iter()
        .map(|r: SummaryRow| {
            let pair = |c: Option<Paired>| c.map(|c| (c.diff, c.lo, c.hi, c.p));
            (
                r.strategy,
                r.seeds,
                r.acc_mean,
                r.acc_std,
                r.nll_mean,
                r.nll_std,
                r.final_acc,
                r.final_labels,
                (r.aubc.mean, r.aubc.lo, r.aubc.hi),
                pair(r.vs_random),
                pair(r.vs_best),
                r.verdict.words(),
            )
        })
        .collect();
    Ok((runs, summary))
}
