//! Evidence: what a model tells a scorer about each candidate.
//!
//! Scorers never see a model. The model side (in `alkit`) computes the evidence a scorer asks
//! for through [`Needs`], and hands it over as plain row-major `f32` arrays with their shapes
//! checked once, here, at construction. Keeping these types free of candle means a scorer can be
//! written and tested against this crate alone.

use crate::ScoreError;

/// Which pieces of evidence a scorer reads. The model side computes only what is asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Needs {
    /// Predictive probabilities `(n, c)`.
    pub probs: bool,
}

impl Needs {
    /// Evidence that holds probabilities only.
    pub const PROBS: Needs = Needs { probs: true };

    /// The union of two needs.
    pub fn union(self, other: Needs) -> Needs {
        Needs {
            probs: self.probs || other.probs,
        }
    }
}

/// Class probabilities for a batch of candidates, row-major `(n, c)`: items, classes.
///
/// Every row is a probability vector: entries in `[0, 1]`, summing to 1 within `1e-3`.
#[derive(Debug, Clone, PartialEq)]
pub struct Probs {
    data: Vec<f32>,
    n: usize,
    c: usize,
}

impl Probs {
    /// Wraps row-major probabilities of shape `(n, c)`, checking shape and that each row is a
    /// probability vector (finite, non-negative, summing to 1 within `1e-3`).
    pub fn new(data: Vec<f32>, n: usize, c: usize) -> Result<Self, ScoreError> {
        if c == 0 || data.len() != n * c {
            return Err(ScoreError::Shape {
                what: "probabilities",
                expected: format!("({n}, {c}) with c > 0"),
                got: format!("{} values", data.len()),
            });
        }
        for (row, p) in data.chunks_exact(c).enumerate() {
            let sum: f32 = p.iter().sum();
            if p.iter().any(|v| !v.is_finite() || *v < 0.0) || (sum - 1.0).abs() > 1e-3 {
                return Err(ScoreError::NotProbabilities { row, sum });
            }
        }
        Ok(Self { data, n, c })
    }

    /// Number of candidates.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Number of classes.
    pub fn classes(&self) -> usize {
        self.c
    }

    /// Row `i`: the class probabilities `(c,)` of candidate `i`.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.c..(i + 1) * self.c]
    }

    /// Iterates over rows `(c,)`.
    pub fn rows(&self) -> std::slice::ChunksExact<'_, f32> {
        self.data.chunks_exact(self.c)
    }

    /// The raw row-major `(n, c)` data.
    pub fn as_slice(&self) -> &[f32] {
        &self.data
    }
}

/// Everything the model side computed for one batch of `n` candidates.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Evidence {
    /// Predictive probabilities `(n, c)`, present when [`Needs::probs`] was asked for.
    pub probs: Option<Probs>,
}

impl Evidence {
    /// Evidence holding probabilities only.
    pub fn from_probs(probs: Probs) -> Self {
        Self { probs: Some(probs) }
    }

    /// The probabilities, or an error naming the scorer that needed them.
    pub fn probs(&self, scorer: &str) -> Result<&Probs, ScoreError> {
        self.probs.as_ref().ok_or(ScoreError::Missing {
            scorer: scorer.to_string(),
            evidence: "probabilities",
        })
    }

    /// Number of candidates the evidence covers.
    pub fn len(&self) -> usize {
        self.probs.as_ref().map_or(0, Probs::n)
    }

    /// True when the evidence covers no candidate.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
