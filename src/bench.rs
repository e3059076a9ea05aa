//! Throughput measurement of pool scoring (the `alkit bench` command).
//!
//! One warm-up pass, then `repeats` timed passes over the same items; the result is the median
//! samples/s. A pass is everything a cycle's scoring does: batches gathered, inference, evidence
//! built, scores computed.

use crate::data::Dataset;
use crate::error::Result;
use crate::observe::Silent;
use crate::predict::Scoring;
use crate::rng::{stream, Purpose};
use alkit_acquisition::Scorer;
use std::time::Instant;

/// Throughput of one scorer.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchResult {
    /// Scorer name.
    pub scorer: String,
    /// Median samples per second.
    pub samples_per_s: f64,
    /// Every timed pass, seconds.
    pub passes_s: Vec<f64>,
}

/// Times scoring `data[indices]` with `scorer`.
pub fn bench_scoring(
    scoring: &Scoring<'_>,
    data: &Dataset,
    indices: &[usize],
    scorer: &dyn Scorer,
    repeats: usize,
) -> Result<BenchResult> {
    let pass = || -> Result<f64> {
        let t = Instant::now();
        let mut rng = stream(0, Purpose::Tool, 0);
        let ev = scoring.evidence(data, indices, scorer.needs(), &mut rng, &mut Silent)?;
        let scores = scorer.score(&ev)?;
        debug_assert_eq!(scores.len(), indices.len());
        Ok(t.elapsed().as_secs_f64())
    };
    pass()?; // warm-up
    let mut passes_s = (0..repeats.max(1))
        .map(|_| pass())
        .collect::<Result<Vec<_>>>()?;
    let mut sorted = passes_s.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    passes_s.shrink_to_fit();
    Ok(BenchResult {
        scorer: scorer.name().to_string(),
        samples_per_s: indices.len() as f64 / median,
        passes_s,
    })
}
