//! A multi-label run's data: the pool and test tables read with their label sets (the test
//! split's against the pool's labels), the features standardised by the pool's statistics.

use crate::data::label_sets::{read_label_table, LabelFormat, LabelTable};
use crate::data::target::standardize_features;
use crate::error::{Error, Result};
use std::path::Path;

/// The pool and the test split of a multi-label run, features standardised.
#[derive(Debug, Clone)]
pub struct MultiLabelData {
    /// The pool: every item's label set is known (the simulated oracle reads it).
    pub pool: LabelTable,
    /// The labeled test split, over the pool's labels.
    pub test: LabelTable,
    /// Pool features `(n, d)`, standardised.
    pub pool_x: Vec<f32>,
    /// Test features `(m, d)`, standardised with the pool's statistics.
    pub test_x: Vec<f32>,
}

impl MultiLabelData {
    /// Reads both tables (label sets `labels`, written as `format` says) and checks that they
    /// agree.
    pub fn load(pool: &Path, test: &Path, labels: &[String], format: &LabelFormat) -> Result<Self> {
        let pool = read_label_table(pool, labels, format, None)?;
        let test = read_label_table(test, labels, format, Some(pool.sets.names()))?;
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
        pool.sets.check_varies(&pool.path)?;
        let (pool_x, test_x) = standardize_features(&pool.x, &test.x, pool.dim());
        Ok(MultiLabelData {
            pool,
            test,
            pool_x,
            test_x,
        })
    }
}
