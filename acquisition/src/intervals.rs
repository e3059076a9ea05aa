//! Split-conformal prediction intervals for regression: intervals that hold the true target
//! with probability at least `1 - alpha`, from a held-out calibration split (Vovk et al.
//! 2005; Lei et al. 2018).
//!
//! An [`IntervalScore`] says how far a target lies from an item's prediction:
//! - absolute residual `|y - mu|`: intervals `mu ± q`, one width for every item;
//! - normalised residual `|y - mu| / sigma` (the model's predicted standard deviation):
//!   intervals `mu ± q sigma`, wider where the model is less sure;
//! - CQR (Romano, Patterson & Candes 2019) on a quantile head's bounds `[lo, hi]`:
//!   `max(lo - y, y - hi)`, intervals `[lo - q, hi + q]` (`q` may be negative: bounds that
//!   cover too often are shrunk).
//!
//! The threshold `q` is the `ceil((n + 1)(1 - alpha))`-th smallest calibration score, as for
//! conformal sets (infinite when that rank exceeds `n`). Mondrian intervals (Vovk et al. 2003)
//! take one threshold per group from that group's calibration items alone, so coverage holds
//! within every group; an item of a group the calibration split lacks gets an infinite
//! interval, which is the honest answer.

use crate::conformal::conformal_quantile;
use crate::ScoreError;
use std::collections::BTreeMap;

/// How a target's distance from a prediction is scored (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntervalScore {
    /// `|y - mu|`.
    Absolute,
    /// `|y - mu| / sigma`.
    Normalized,
    /// `max(lo - y, y - hi)` on a quantile head's bounds.
    Cqr,
}

/// One item's prediction, as an interval score reads it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Prediction {
    /// A mean and a standard deviation.
    Gaussian {
        /// Predicted mean.
        mean: f64,
        /// Predicted standard deviation, positive.
        std: f64,
    },
    /// A quantile head's lower and upper bounds.
    Quantiles {
        /// Lower bound.
        lower: f64,
        /// Upper bound.
        upper: f64,
    },
}

impl IntervalScore {
    /// The name `calibrate` and Python use.
    pub fn name(self) -> &'static str {
        match self {
            IntervalScore::Absolute => "absolute",
            IntervalScore::Normalized => "normalized",
            IntervalScore::Cqr => "cqr",
        }
    }

    fn mismatch(self, p: &Prediction) -> ScoreError {
        ScoreError::Setting {
            setting: "conformal",
            why: format!(
                "the {} score reads {}, and the prediction is {:?}",
                self.name(),
                match self {
                    IntervalScore::Cqr => "a quantile head's bounds",
                    _ => "a mean and a standard deviation",
                },
                p
            ),
        }
    }

    /// The non-conformity of target `y` for prediction `p`.
    pub fn score(self, p: &Prediction, y: f64) -> Result<f64, ScoreError> {
        match (self, *p) {
            (IntervalScore::Absolute, Prediction::Gaussian { mean, .. }) => Ok((y - mean).abs()),
            (IntervalScore::Normalized, Prediction::Gaussian { mean, std }) if std > 0.0 => {
                Ok((y - mean).abs() / std)
            }
            (IntervalScore::Cqr, Prediction::Quantiles { lower, upper }) => {
                Ok((lower - y).max(y - upper))
            }
            _ => Err(self.mismatch(p)),
        }
    }

    /// The interval `[lower, upper]` of prediction `p` at threshold `q`.
    pub fn interval(self, p: &Prediction, q: f64) -> Result<(f64, f64), ScoreError> {
        match (self, *p) {
            (IntervalScore::Absolute, Prediction::Gaussian { mean, .. }) => {
                Ok((mean - q, mean + q))
            }
            (IntervalScore::Normalized, Prediction::Gaussian { mean, std }) if std > 0.0 => {
                Ok((mean - q * std, mean + q * std))
            }
            (IntervalScore::Cqr, Prediction::Quantiles { lower, upper }) => {
                Ok((lower - q, upper + q))
            }
            _ => Err(self.mismatch(p)),
        }
    }
}

/// A calibrated interval rule: the score and its threshold, one per group for Mondrian.
#[derive(Debug, Clone, PartialEq)]
pub struct ConformalIntervals {
    /// The non-conformity score.
    pub score: IntervalScore,
    /// The threshold of every item, or of each group (Mondrian).
    pub thresholds: Thresholds,
}

/// Thresholds of a calibrated rule.
#[derive(Debug, Clone, PartialEq)]
pub enum Thresholds {
    /// One threshold for every item.
    One(f64),
    /// One per group seen in the calibration split.
    Groups(BTreeMap<u32, f64>),
}

impl ConformalIntervals {
    /// Calibrates `score` at miscoverage `alpha` in `(0, 1)` on held-out predictions `(n,)`
    /// and their targets `(n,)`; with `groups (n,)` one threshold per group (Mondrian).
    pub fn calibrate(
        score: IntervalScore,
        preds: &[Prediction],
        targets: &[f64],
        alpha: f64,
        groups: Option<&[u32]>,
    ) -> Result<Self, ScoreError> {
        if !(alpha > 0.0 && alpha < 1.0) {
            return Err(ScoreError::Setting {
                setting: "conformal",
                why: format!("the miscoverage level {alpha} must be in (0, 1)"),
            });
        }
        let n = preds.len();
        if targets.len() != n || n == 0 || groups.is_some_and(|g| g.len() != n) {
            return Err(ScoreError::Shape {
                what: "calibration targets",
                expected: format!("({n},) targets and groups, n > 0"),
                got: format!(
                    "{} targets, {} groups",
                    targets.len(),
                    groups.map_or(0, <[u32]>::len)
                ),
            });
        }
        if let Some(i) = targets.iter().position(|t| !t.is_finite()) {
            return Err(ScoreError::NonFinite {
                position: i,
                value: targets[i] as f32,
            });
        }
        let scores = preds
            .iter()
            .zip(targets)
            .map(|(p, &y)| score.score(p, y))
            .collect::<Result<Vec<f64>, _>>()?;
        let thresholds = match groups {
            None => Thresholds::One(conformal_quantile(scores, alpha)),
            Some(groups) => {
                let mut by: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
                for (&g, s) in groups.iter().zip(scores) {
                    by.entry(g).or_default().push(s);
                }
                Thresholds::Groups(
                    by.into_iter()
                        .map(|(g, s)| (g, conformal_quantile(s, alpha)))
                        .collect(),
                )
            }
        };
        Ok(Self { score, thresholds })
    }

    /// The threshold for an item of `group` (infinite for a group calibration never saw;
    /// `group` is read by Mondrian rules only).
    pub fn threshold(&self, group: Option<u32>) -> f64 {
        match &self.thresholds {
            Thresholds::One(q) => *q,
            Thresholds::Groups(by) => group
                .and_then(|g| by.get(&g).copied())
                .unwrap_or(f64::INFINITY),
        }
    }

    /// The interval of prediction `p` for an item of `group`.
    pub fn interval(&self, p: &Prediction, group: Option<u32>) -> Result<(f64, f64), ScoreError> {
        self.score.interval(p, self.threshold(group))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gauss(mean: f64, std: f64) -> Prediction {
        Prediction::Gaussian { mean, std }
    }

    #[test]
    fn absolute_threshold_by_hand() {
        // Residuals 0.5, 1, 2, 3 (n = 4): alpha 0.4 takes ceil(5 * 0.6) = 3rd: 2.
        let preds = [gauss(0.0, 1.0); 4];
        let y = [0.5, -1.0, 2.0, 3.0];
        let c =
            ConformalIntervals::calibrate(IntervalScore::Absolute, &preds, &y, 0.4, None).unwrap();
        assert_eq!(c.thresholds, Thresholds::One(2.0));
        assert_eq!(c.interval(&gauss(1.0, 9.0), None).unwrap(), (-1.0, 3.0));
        // alpha 0.1: ceil(4.5) = 5 > 4, an infinite interval.
        let c =
            ConformalIntervals::calibrate(IntervalScore::Absolute, &preds, &y, 0.1, None).unwrap();
        assert_eq!(c.threshold(None), f64::INFINITY);
    }

    #[test]
    fn normalized_and_cqr_by_hand() {
        let preds = [gauss(0.0, 2.0), gauss(1.0, 0.5)];
        // Scores |y - mu| / sigma: 1 and 2; alpha 0.5 takes ceil(1.5) = 2nd: 2.
        let c = ConformalIntervals::calibrate(
            IntervalScore::Normalized,
            &preds,
            &[2.0, 0.0],
            0.5,
            None,
        )
        .unwrap();
        assert_eq!(c.interval(&gauss(0.0, 3.0), None).unwrap(), (-6.0, 6.0));
        // CQR: bounds [0, 1]; y = 0.5 scores -0.5, y = 3 scores 2.
        let q = Prediction::Quantiles {
            lower: 0.0,
            upper: 1.0,
        };
        let c = ConformalIntervals::calibrate(IntervalScore::Cqr, &[q, q], &[0.5, 3.0], 0.5, None)
            .unwrap();
        assert_eq!(c.interval(&q, None).unwrap(), (-2.0, 3.0));
        let e = ConformalIntervals::calibrate(IntervalScore::Cqr, &preds, &[0.0, 0.0], 0.5, None)
            .unwrap_err();
        assert!(e.to_string().contains("quantile head"), "{e}");
    }

    #[test]
    fn mondrian_groups_and_an_unseen_group() {
        let preds = [gauss(0.0, 1.0); 4];
        let c = ConformalIntervals::calibrate(
            IntervalScore::Absolute,
            &preds,
            &[1.0, 2.0, 10.0, 20.0],
            0.5,
            Some(&[0, 0, 1, 1]),
        )
        .unwrap();
        assert_eq!(c.threshold(Some(0)), 2.0);
        assert_eq!(c.threshold(Some(1)), 20.0);
        assert_eq!(c.threshold(Some(7)), f64::INFINITY);
    }
}
