//! Evaluation of uncertainty on its own, over plain vectors: a classifier's scores for OOD
//! detection and calibration (`scores.rs`, re-exported here), Platt scaling of a binary score
//! ([`Platt`]), a regression model's Gaussian predictions against the targets
//! ([`regression`]), a multi-label model's label probabilities against the true sets
//! ([`multilabel`]), the statistics over seeds that compare acquisition strategies
//! ([`stats`]), and the stopping rules read off successive rounds' predictions
//! ([`stopping`]).
//!
//! The files are independent of each other.

pub mod multilabel;
mod platt;
pub mod regression;
mod scores;
pub mod stats;
pub mod stopping;

pub use platt::Platt;
pub use scores::*;

/// The position of the first highest entry of `row` (ties to the lowest class, as numpy's
/// argmax); 0 for an empty row.
pub fn argmax(row: &[f32]) -> usize {
    row.iter()
        .enumerate()
        .fold(0, |best, (i, &v)| if v > row[best] { i } else { best })
}
