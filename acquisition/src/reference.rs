//! Reference evidence: the penultimate features and labels of the items a model was trained
//! on, for the scores that compare a candidate with what the model has seen (KNN,
//! Mahalanobis, ViM and ReAct's training statistics, conformal calibration) and the selectors
//! that must know what is already labeled (core-set, TypiClust, ProbCover).
//!
//! In an acquisition round the reference is the labeled set under the round's model; when a
//! trained model is evaluated (`ood`, `calibrate`), it is the training split (or a held-out
//! calibration split), never the items being scored. Statistics derived from it (a
//! normalised bank, class means and a precision, a principal subspace) are computed once per
//! reference and shared by every chunk of candidates scored against it ([`Reference::memo`]).

use crate::{Features, ScoreError};
use std::any::Any;
use std::sync::{Arc, Mutex};

/// Features `(m, d)` with the last layer, and the class label of each of the `m` rows.
pub struct Reference {
    features: Features,
    labels: Vec<usize>,
    memo: Mutex<Vec<(String, Arc<dyn Any + Send + Sync>)>>,
}

impl std::fmt::Debug for Reference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reference")
            .field("rows", &self.features.n())
            .field("dim", &self.features.dim())
            .finish_non_exhaustive()
    }
}

impl Reference {
    /// Wraps the reference rows' features and their labels, checking that there is one label
    /// per row and each is below the last layer's class count.
    pub fn new(features: Features, labels: Vec<usize>) -> Result<Self, ScoreError> {
        if labels.len() != features.n() {
            return Err(ScoreError::Shape {
                what: "reference labels",
                expected: format!("({},)", features.n()),
                got: format!("{} labels", labels.len()),
            });
        }
        let c = features.classes();
        if let Some(bad) = labels.iter().find(|&&l| l >= c) {
            return Err(ScoreError::Shape {
                what: "reference labels",
                expected: format!("class indices below {c}"),
                got: format!("label {bad}"),
            });
        }
        Ok(Self {
            features,
            labels,
            memo: Mutex::new(Vec::new()),
        })
    }

    /// The rows' features and the last layer.
    pub fn features(&self) -> &Features {
        &self.features
    }

    /// The rows' labels `(m,)`.
    pub fn labels(&self) -> &[usize] {
        &self.labels
    }

    /// Number of reference rows `m`.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// True when the reference holds no row (nothing labeled yet).
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// A statistic of this reference under `key`, computed by `fit` the first time it is
    /// asked for and shared afterwards (a failed fit is not kept). Keys name the statistic
    /// and its settings, e.g. `knn-bank` or `vim-256`.
    pub fn memo<T: Any + Send + Sync>(
        &self,
        key: &str,
        fit: impl FnOnce(&Self) -> Result<T, ScoreError>,
    ) -> Result<Arc<T>, ScoreError> {
        let found = {
            let memo = self.memo.lock().unwrap_or_else(|e| e.into_inner());
            memo.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
        };
        if let Some(v) = found.and_then(|v| v.downcast::<T>().ok()) {
            return Ok(v);
        }
        let value = Arc::new(fit(self)?);
        let mut memo = self.memo.lock().unwrap_or_else(|e| e.into_inner());
        memo.retain(|(k, _)| k != key);
        memo.push((key.to_string(), value.clone()));
        Ok(value)
    }
}
