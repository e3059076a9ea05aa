//! A regression run's data: the pool and test tables read with their targets, the features
//! standardised by the pool's statistics (every pool input is known before any label is).

use crate::data::target::{read_table, Table};
use crate::data::Task;
use crate::error::{Error, Result};
use std::path::Path;

/// The pool and the test split of a regression run, features standardised.
#[derive(Debug, Clone)]
pub struct RegressionData {
    /// The pool: every item's target is known (the simulated oracle reads it).
    pub pool: Table,
    /// The labeled test split.
    pub test: Table,
    /// Pool features `(n, d)`, standardised.
    pub pool_x: Vec<f32>,
    /// Test features `(m, d)`, standardised with the pool's statistics.
    pub test_x: Vec<f32>,
}

impl RegressionData {
    /// Reads both tables (targets `target`, task `task` when the data cannot tell) and checks
    /// that they agree and that every item has its targets.
    pub fn load(pool: &Path, test: &Path, target: &[String], task: Option<Task>) -> Result<Self> {
        let pool = read_table(pool, target, task)?;
        let test = read_table(test, target, task.or(Some(Task::Regression)))?;
        if pool.features != test.features {
            return Err(Error::config(
                "test",
                format!(
                    "{} has the feature columns {}, and the pool {} has {}: give both the same",
                    test.path.display(),
                    test.features.join(", "),
                    pool.path.display(),
                    pool.features.join(", ")
                ),
            ));
        }
        pool.targets.check_varies(&pool.path)?;
        for t in [&pool, &test] {
            if let Some(i) = (0..t.len()).find(|&i| !t.targets.known(i)) {
                return Err(Error::config(
                    "target",
                    format!(
                        "{}: item `{}` has no target; a curve labels its picks from the known \
                         targets, so every item needs one",
                        t.path.display(),
                        t.ids[i]
                    ),
                ));
            }
        }
        let (mean, std) = feature_stats(&pool.x, pool.dim());
        let pool_x = standardize(&pool.x, &mean, &std);
        let test_x = standardize(&test.x, &mean, &std);
        Ok(RegressionData {
            pool,
            test,
            pool_x,
            test_x,
        })
    }
}

/// Per-feature mean and standard deviation of `x (n, d)` in `f64` (a constant feature
/// gets 1, so it standardises to 0).
fn feature_stats(x: &[f32], d: usize) -> (Vec<f64>, Vec<f64>) {
    let n = (x.len() / d) as f64;
    let mut mean = vec![0f64; d];
    for row in x.chunks_exact(d) {
        for (m, &v) in mean.iter_mut().zip(row) {
            *m += f64::from(v) / n;
        }
    }
    let mut var = vec![0f64; d];
    for row in x.chunks_exact(d) {
        for ((s, &v), m) in var.iter_mut().zip(row).zip(&mean) {
            *s += (f64::from(v) - m).powi(2) / n;
        }
    }
    let std = var
        .into_iter()
        .map(|v| if v > 0.0 { v.sqrt() } else { 1.0 })
        .collect();
    (mean, std)
}

fn standardize(x: &[f32], mean: &[f64], std: &[f64]) -> Vec<f32> {
    x.chunks_exact(mean.len())
        .flat_map(|row| {
            row.iter()
                .zip(mean.iter().zip(std))
                .map(|(&v, (m, s))| ((f64::from(v) - m) / s) as f32)
        })
        .collect()
}
