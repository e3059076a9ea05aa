//! Conformal guarantees for label sets, calibrated on held-out items with known sets:
//!
//! - per-label LAC sets ([`LabelLac`]): each label a binary problem with its own split-conformal
//!   threshold (the [`Conformal`] LAC predictor on `(1 - p, p)`), so that each label's set of
//!   answers covers the truth with probability at least `1 - alpha`;
//! - conformal risk control of the false-negative rate ([`control_recall`], Angelopoulos et
//!   al. 2022): the largest threshold `lambda` of a grid whose predicted sets `{l : p_l >
//!   lambda}` keep the bound `n / (n + 1) FNR(lambda) + 1 / (n + 1)` below `alpha`, so that the
//!   expected share of an item's true labels the set misses is at most `alpha`.
//!
//! The recall control follows MAPIE 1.6's `MultiLabelClassificationController(risk="recall",
//! method="crc")` step for step (its grid `0, 0.01, .., 0.99` by default, strict `p > lambda`,
//! and its rule for a risk that does not grow with `lambda`), so that the thresholds equal
//! MAPIE's on the same probabilities.

use crate::{Conformal, ConformalScore, Probs, ScoreError};

/// One split-conformal LAC predictor per label.
#[derive(Debug, Clone, PartialEq)]
pub struct LabelLac {
    /// Label `l`'s predictor over the answers `0` (absent) and `1` (present).
    pub labels: Vec<Conformal>,
}

/// Checks `truth (n, L)` of 0/1 against `probs (n, L)` in `[0, 1]`.
fn check(truth: &[u8], probs: &[f64], labels: usize) -> Result<usize, ScoreError> {
    if labels == 0 || truth.is_empty() || truth.len() != probs.len() {
        return Err(ScoreError::Shape {
            what: "calibration label sets",
            expected: format!("truth and probabilities (n, {labels}) with n, L > 0"),
            got: format!(
                "{} truth values, {} probabilities",
                truth.len(),
                probs.len()
            ),
        });
    }
    if !truth.len().is_multiple_of(labels) || truth.iter().any(|&v| v > 1) {
        return Err(ScoreError::Shape {
            what: "calibration label sets",
            expected: format!("0/1 values, a multiple of {labels}"),
            got: format!("{} values", truth.len()),
        });
    }
    if let Some(i) = probs.iter().position(|p| !(0.0..=1.0).contains(p)) {
        return Err(ScoreError::NonFinite {
            position: i / labels,
            value: probs[i] as f32,
        });
    }
    Ok(truth.len() / labels)
}

impl LabelLac {
    /// Calibrates every label at miscoverage `alpha` on held-out `probs (n, L)` with their
    /// true sets `truth (n, L)`.
    pub fn calibrate(
        truth: &[u8],
        probs: &[f64],
        labels: usize,
        alpha: f64,
    ) -> Result<Self, ScoreError> {
        let n = check(truth, probs, labels)?;
        let per_label = (0..labels)
            .map(|l| {
                let (pairs, answers) = binary(probs, truth, labels, l, n);
                Conformal::calibrate(ConformalScore::Lac, &pairs?, &answers, alpha, &[])
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(LabelLac { labels: per_label })
    }

    /// Label `l`'s set of answers for probability `p` that it is present: a subset of
    /// `[0, 1]`, ascending.
    pub fn set(&self, l: usize, p: f64) -> Vec<usize> {
        let q = p as f32;
        self.labels[l].set(&[1.0 - q, q], 0.0)
    }
}

/// Label `l`'s binary probabilities `(n, 2)` and true answers `(n,)`.
fn binary(
    probs: &[f64],
    truth: &[u8],
    labels: usize,
    l: usize,
    n: usize,
) -> (Result<Probs, ScoreError>, Vec<usize>) {
    let mut pairs = Vec::with_capacity(2 * n);
    let mut answers = Vec::with_capacity(n);
    for i in 0..n {
        let p = probs[i * labels + l] as f32;
        pairs.extend([1.0 - p, p]);
        answers.push(usize::from(truth[i * labels + l]));
    }
    (Probs::new(pairs, n, 2), answers)
}

/// A threshold that controls the false-negative rate, and what it was chosen from.
#[derive(Debug, Clone, PartialEq)]
pub struct RecallControl {
    /// The chosen threshold: sets hold the labels with `p > lambda`.
    pub lambda: f64,
    /// The calibration items' mean false-negative rate at `lambda`.
    pub risk: f64,
    /// Its conformal bound `n / (n + 1) risk + 1 / (n + 1)`, below `alpha`.
    pub bound: f64,
}

/// MAPIE's default grid of thresholds: `0, 0.01, .., 0.99`.
pub fn default_lambdas() -> Vec<f64> {
    (0..100).map(|k| f64::from(k) * 0.01).collect()
}

/// Conformal risk control of the false-negative rate at level `alpha` in `(0, 1)` over the
/// thresholds `lambdas` (ascending), calibrated on held-out `probs (n, L)` with their true
/// sets `truth (n, L)`, every item with at least one label (the rate is undefined without).
/// Refuses a level no threshold reaches (too few calibration items for it: `1 / (n + 1)` is
/// the smallest bound there is).
pub fn control_recall(
    truth: &[u8],
    probs: &[f64],
    labels: usize,
    alpha: f64,
    lambdas: &[f64],
) -> Result<RecallControl, ScoreError> {
    if !(alpha > 0.0 && alpha < 1.0) {
        return Err(ScoreError::Setting {
            setting: "conformal",
            why: format!("the risk level {alpha} must be in (0, 1)"),
        });
    }
    if lambdas.is_empty() || lambdas.windows(2).any(|w| w[0] >= w[1]) {
        return Err(ScoreError::Setting {
            setting: "lambdas",
            why: "thresholds must be given, ascending".into(),
        });
    }
    let n = check(truth, probs, labels)?;
    let mut risk = vec![0f64; lambdas.len()];
    for i in 0..n {
        let (y, p) = (
            &truth[i * labels..(i + 1) * labels],
            &probs[i * labels..(i + 1) * labels],
        );
        let positives = y.iter().filter(|&&v| v == 1).count();
        if positives == 0 {
            return Err(ScoreError::Setting {
                setting: "labels",
                why: format!(
                    "calibration item {i} has no label: its false-negative rate is undefined"
                ),
            });
        }
        for (r, &lambda) in risk.iter_mut().zip(lambdas) {
            let hit = y
                .iter()
                .zip(p)
                .filter(|(&t, &q)| t == 1 && q > lambda)
                .count();
            *r += 1.0 - hit as f64 / positives as f64;
        }
    }
    let nf = n as f64;
    risk.iter_mut().for_each(|r| *r /= nf);
    let bound: Vec<f64> = risk
        .iter()
        .map(|r| nf / (nf + 1.0) * r + 1.0 / (nf + 1.0))
        .collect();
    let at = best_index(&bound, alpha).ok_or_else(|| ScoreError::Setting {
        setting: "conformal",
        why: format!(
            "no threshold keeps the false-negative rate's bound below {alpha} (the smallest is \
             {:.4}); raise the level or calibrate on more items",
            bound.iter().copied().fold(f64::INFINITY, f64::min)
        ),
    })?;
    Ok(RecallControl {
        lambda: lambdas[at],
        risk: risk[at],
        bound: bound[at],
    })
}

/// MAPIE's choice over the bounds: with a risk that grows along the grid, the last threshold
/// before the first bound at or above `alpha`; otherwise the grid read from its end. `None`
/// when every bound is at or above `alpha`.
fn best_index(bound: &[f64], alpha: f64) -> Option<usize> {
    let last = bound.len() - 1;
    let increasing = bound[0] < bound[last];
    let ok = |k: usize| bound[if increasing { k } else { last - k }] < alpha;
    let run = (0..bound.len()).take_while(|&k| ok(k)).count();
    if run == 0 {
        return None;
    }
    Some(if increasing {
        run - 1
    } else {
        last - (run - 1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recall_control_worked_by_hand() {
        // Two items, two labels; truth {0} and {0, 1}; probabilities (0.9, 0.2), (0.6, 0.4).
        let truth = [1, 0, 1, 1];
        let probs = [0.9, 0.2, 0.6, 0.4];
        let lambdas = [0.0, 0.3, 0.5, 0.7];
        // FNR per threshold: 0; item 2 misses label 1 (0.4 <= 0.5) from 0.5: 0.25; from 0.7
        // it misses both: (0 + 1) / 2 = 0.5. Bounds 2/3 r + 1/3: 1/3, 1/3, 1/2, 2/3.
        let c = control_recall(&truth, &probs, 2, 0.45, &lambdas).unwrap();
        assert_eq!(c.lambda, 0.3);
        assert!((c.bound - 1.0 / 3.0).abs() < 1e-12);
        let c = control_recall(&truth, &probs, 2, 0.6, &lambdas).unwrap();
        assert_eq!(c.lambda, 0.5);
        let e = control_recall(&truth, &probs, 2, 0.3, &lambdas).unwrap_err();
        assert!(e.to_string().contains("calibrate on more items"), "{e}");
        let e = control_recall(&[0, 0], &[0.5, 0.5], 2, 0.3, &lambdas).unwrap_err();
        assert!(e.to_string().contains("has no label"), "{e}");
    }

    #[test]
    fn per_label_sets_cover_their_calibration() {
        // One label, four items: present with p 0.9, 0.8, absent with 0.3, 0.6. Scores
        // 1 - p(answer): 0.1, 0.2, 0.3, 0.6; at alpha 0.25 the rank is ceil(5 x 0.75) = 4.
        let lac = LabelLac::calibrate(&[1, 1, 0, 0], &[0.9, 0.8, 0.3, 0.6], 1, 0.25).unwrap();
        assert!((lac.labels[0].threshold - 0.6).abs() < 1e-6);
        assert_eq!(lac.set(0, 0.9), vec![1]);
        assert_eq!(lac.set(0, 0.5), vec![0, 1]);
        assert_eq!(lac.set(0, 0.1), vec![0]);
    }
}
