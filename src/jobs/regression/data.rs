//! A regression run's data: the pool and test tables read with their targets, the features
//! standardised by the pool's statistics (every pool input is known before any label is).

use crate::data::target::{read_table, standardize_features, Table};
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
        let (pool_x, test_x) = standardize_features(&pool.x, &test.x, pool.dim());
        Ok(RegressionData {
            pool,
            test,
            pool_x,
            test_x,
        })
    }
}
