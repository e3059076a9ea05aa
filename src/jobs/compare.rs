//! `alkit compare`: curve folders of several data sets, compared the way CDALBench and Demšar
//! (2006) rank classifiers. Each folder's strategies are summarised by their mean AUBC over
//! seeds (the `aubc_mean` of its `summary.csv`); the strategies every folder ran are ranked
//! per data set (1 = best), their mean ranks tested by Friedman's test, and Nemenyi's critical
//! difference at 5% says which mean ranks are too close to tell apart.
//!
//! Writes `compare.csv` (per strategy: its mean rank, whether it is within the critical
//! difference of the best, and its mean AUBC on each data set), `compare.json` (the data
//! sets, the test, the critical difference, the strategies left out) and the
//! critical-difference diagram `compare-cd.svg/png` ([`crate::plot::CdDiagram`]).

use crate::acquire::RunState;
use crate::error::{Error, Result, ResultExt};
use crate::fsutil::{read_json, write_csv, write_json};
use crate::jobs::curve::{aubc_by_seed, state_path, CurveSpec};
use crate::metrics::stats::{friedman, nemenyi_cd, Friedman};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// The level of the critical difference.
pub const ALPHA: f64 = 0.05;

/// Strategies compared over data sets.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// The data sets: each folder's name (made unique) and its path.
    pub datasets: Vec<(String, PathBuf)>,
    /// The strategies every folder ran, in the first folder's order.
    pub strategies: Vec<String>,
    /// Mean AUBC over seeds, `[data set][strategy]`.
    pub aubc: Vec<Vec<f64>>,
    /// Strategies some folder did not run (not ranked).
    pub left_out: Vec<String>,
    /// Mean ranks (1 = best), the chi-square statistic and its p-value.
    pub friedman: Friedman,
    /// Nemenyi's critical difference of mean ranks at [`ALPHA`].
    pub critical_difference: f64,
}

impl Comparison {
    /// True for strategy `s` when its mean rank is within the critical difference of the best.
    pub fn near_best(&self, s: usize) -> bool {
        let best = self
            .friedman
            .mean_ranks
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min);
        self.friedman.mean_ranks[s] - best < self.critical_difference
    }
}

/// Compares the curve folders `runs` (at least two, every run in each finished).
pub fn run(runs: &[PathBuf]) -> Result<Comparison> {
    if runs.len() < 2 {
        return Err(Error::config(
            "runs",
            "compare needs the curve folders of at least two data sets",
        ));
    }
    let mut seen: Vec<PathBuf> = Vec::with_capacity(runs.len());
    let mut per_folder = Vec::with_capacity(runs.len());
    for dir in runs {
        let canonical = dir.canonicalize().map_err(|e| Error::io(dir, e))?;
        if seen.contains(&canonical) {
            return Err(Error::config(
                "runs",
                format!(
                    "{} is given twice: each data set's folder counts once",
                    dir.display()
                ),
            ));
        }
        seen.push(canonical);
        per_folder.push(folder_aubcs(dir)?);
    }
    let first: Vec<String> = per_folder[0].iter().map(|(s, _)| s.clone()).collect();
    let shared: Vec<String> = first
        .iter()
        .filter(|s| per_folder.iter().all(|f| f.iter().any(|(t, _)| t == *s)))
        .cloned()
        .collect();
    let mut left_out: Vec<String> = Vec::new();
    for (s, _) in per_folder.iter().flatten() {
        if !shared.contains(s) && !left_out.contains(s) {
            left_out.push(s.clone());
        }
    }
    if shared.len() < 2 {
        return Err(Error::config(
            "runs",
            format!(
                "the folders share {} strateg{} ({}); compare ranks at least two that every \
                 folder ran",
                shared.len(),
                if shared.len() == 1 { "y" } else { "ies" },
                shared.join(", ")
            ),
        ));
    }
    let aubc: Vec<Vec<f64>> = per_folder
        .iter()
        .map(|f| {
            let value = |s: &String| f.iter().find(|(t, _)| t == s).map_or(f64::NAN, |x| x.1);
            shared.iter().map(value).collect()
        })
        .collect();
    Ok(Comparison {
        datasets: names(runs),
        friedman: friedman(&aubc),
        critical_difference: nemenyi_cd(shared.len(), runs.len(), ALPHA),
        strategies: shared,
        aubc,
        left_out,
    })
}

/// Each strategy's mean AUBC over the seeds of the curve folder `dir`, in its run order.
fn folder_aubcs(dir: &Path) -> Result<Vec<(String, f64)>> {
    let spec: CurveSpec = read_json(&dir.join("run.json")).context_with(|| {
        format!(
            "{}: not the folder of a classification curve run (its run.json)",
            dir.display()
        )
    })?;
    // The names the curve saved its runs under (`balanced-`, a selection's prefix, `@last`).
    let names: Vec<String> = spec
        .strategies
        .iter()
        .map(|kind| Ok(kind.strategy(&spec.scorers)?.name().to_string()))
        .collect::<Result<_>>()
        .context_with(|| format!("{}: its run.json's strategies", dir.display()))?;
    let mut states: Vec<RunState> = Vec::new();
    for &seed in &spec.seeds {
        for name in &names {
            let path = state_path(dir, name, seed);
            let state: Option<RunState> = if path.is_file() {
                Some(read_json(&path)?)
            } else {
                None
            };
            match state {
                Some(st) if st.strategy != *name || st.seed != seed => {
                    return Err(Error::config(
                        "runs",
                        format!(
                            "{}: holds the run of `{}` with seed {}, not its own name's; \
                             restore the folder as the curve wrote it",
                            path.display(),
                            st.strategy,
                            st.seed
                        ),
                    ))
                }
                Some(st) if st.is_complete() => states.push(st),
                _ => {
                    return Err(Error::config(
                        "runs",
                        format!(
                            "{}: this run is unfinished; resume the curve in {} first \
                             (setting `resume`)",
                            path.display(),
                            dir.display()
                        ),
                    ))
                }
            }
        }
    }
    Ok(names
        .into_iter()
        .map(|name| {
            let by_seed = aubc_by_seed(&states, &name);
            let mean = by_seed.values().sum::<f64>() / by_seed.len() as f64;
            (name, mean)
        })
        .collect())
}

/// Each folder's last path component, suffixed `-2`, `-3`, ... where two share one.
fn names(runs: &[PathBuf]) -> Vec<(String, PathBuf)> {
    let mut out: Vec<(String, PathBuf)> = Vec::with_capacity(runs.len());
    for dir in runs {
        let base = dir.file_name().map_or_else(
            || dir.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        let mut name = base.clone();
        let mut k = 1;
        while out.iter().any(|(n, _)| *n == name) || RESERVED.contains(&name.as_str()) {
            k += 1;
            name = format!("{base}-{k}");
        }
        out.push((name, dir.clone()));
    }
    out
}

/// The columns of `compare.csv` before the data sets', which no data set's column may take.
const RESERVED: [&str; 3] = ["strategy", "mean_rank", "near_best"];

/// Writes `compare.csv`, `compare.json` and `compare-cd.svg/png` into `out` (created if
/// needed).
pub fn write(c: &Comparison, out: &Path) -> Result<()> {
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
    let mut header: Vec<String> = RESERVED.map(String::from).to_vec();
    header.extend(c.datasets.iter().map(|(n, _)| n.clone()));
    let rows = c.strategies.iter().enumerate().map(|(s, name)| {
        let mut row = vec![
            name.clone(),
            format!("{:.4}", c.friedman.mean_ranks[s]),
            c.near_best(s).to_string(),
        ];
        row.extend(c.aubc.iter().map(|d| format!("{:.6}", d[s])));
        row
    });
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    write_csv(&out.join("compare.csv"), &header, rows)?;
    write_json(&out.join("compare.json"), c)?;
    let diagram = crate::plot::CdDiagram {
        title: format!(
            "mean rank over {} data sets (Friedman p = {:.3}; Nemenyi at {ALPHA})",
            c.datasets.len(),
            c.friedman.p
        ),
        ranks: c
            .strategies
            .iter()
            .cloned()
            .zip(c.friedman.mean_ranks.iter().copied())
            .collect(),
        cd: c.critical_difference,
    };
    diagram.save(out, "compare-cd")
}
