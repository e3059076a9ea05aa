//! Split conformal prediction: sets of classes that hold the true label with probability at
//! least `1 - alpha`, from a held-out calibration split (Vovk et al. 2005; Angelopoulos &
//! Bates 2021).
//!
//! A [`ConformalScore`] says how unlike a class is for an item, from its probabilities:
//! - LAC (Sadinle et al. 2019): `1 - p_y`;
//! - APS (Romano et al. 2020): the probability mass of the classes ranked at or above `y`;
//! - RAPS (Angelopoulos et al. 2021): APS plus `lambda (rank(y) - k_reg)^+`.
//!
//! APS and RAPS are the non-randomised forms (the true label's own mass is always counted),
//! so sets do not depend on a random draw and coverage stays at least `1 - alpha`. Ranks
//! order classes by probability, lower class index first on ties.
//!
//! [`Conformal::calibrate`] takes the `ceil((n + 1)(1 - alpha))`-th smallest calibration
//! score as the threshold `q` (infinite when that exceeds `n`: every class); a set is every
//! class scoring `<= q`. For exchangeable calibration and test items the set covers the label
//! with probability `>= 1 - alpha` (and below `1 - alpha + 1 / (n + 1)` without ties).

use crate::{Evidence, Needs, Probs, ScoreError, Scorer};

/// How a class's non-conformity is scored (module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum ConformalScore {
    /// `1 - p_y`.
    Lac,
    /// Cumulative mass down to `y`.
    Aps,
    /// APS with a rank penalty.
    Raps {
        /// Penalty per rank beyond `k_reg`.
        lambda: f32,
        /// Ranks free of penalty.
        k_reg: usize,
    },
}

impl ConformalScore {
    /// The name tables use.
    pub fn name(&self) -> &'static str {
        match self {
            ConformalScore::Lac => "lac",
            ConformalScore::Aps => "aps",
            ConformalScore::Raps { .. } => "raps",
        }
    }

    /// The score of every class for one probability row `(c,)`, `(c,)`.
    pub fn class_scores(&self, p: &[f32]) -> Vec<f64> {
        match *self {
            ConformalScore::Lac => p.iter().map(|&v| 1.0 - f64::from(v)).collect(),
            ConformalScore::Aps => cumulative(p, 0.0, 0),
            ConformalScore::Raps { lambda, k_reg } => cumulative(p, f64::from(lambda), k_reg),
        }
    }
}

/// APS's mass at and above each class's rank, plus `lambda (rank - k_reg)^+` (rank 1-based).
fn cumulative(p: &[f32], lambda: f64, k_reg: usize) -> Vec<f64> {
    let mut order: Vec<usize> = (0..p.len()).collect();
    order.sort_by(|&a, &b| p[b].total_cmp(&p[a]).then(a.cmp(&b)));
    let mut out = vec![0.0; p.len()];
    let mut mass = 0.0;
    for (rank0, &c) in order.iter().enumerate() {
        mass += f64::from(p[c]);
        out[c] = mass + lambda * (rank0 + 1).saturating_sub(k_reg) as f64;
    }
    out
}

/// A calibrated conformal predictor: the score and its threshold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Conformal {
    /// The non-conformity score.
    pub score: ConformalScore,
    /// Sets hold the classes scoring at most this (infinite: every class).
    pub threshold: f64,
}

impl Conformal {
    /// Calibrates `score` at miscoverage `alpha` in `(0, 1)` on `probs (n, c)` of held-out
    /// items with their `labels (n,)`.
    pub fn calibrate(
        score: ConformalScore,
        probs: &Probs,
        labels: &[usize],
        alpha: f64,
    ) -> Result<Self, ScoreError> {
        if !(alpha > 0.0 && alpha < 1.0) {
            return Err(ScoreError::Setting {
                setting: "conformal",
                why: format!("the miscoverage level {alpha} must be in (0, 1)"),
            });
        }
        let n = probs.n();
        if labels.len() != n || n == 0 {
            return Err(ScoreError::Shape {
                what: "calibration labels",
                expected: format!("({n},) with n > 0"),
                got: format!("{} labels", labels.len()),
            });
        }
        if let Some(&bad) = labels.iter().find(|&&l| l >= probs.classes()) {
            return Err(ScoreError::Shape {
                what: "calibration labels",
                expected: format!("class indices below {}", probs.classes()),
                got: format!("label {bad}"),
            });
        }
        let mut scores: Vec<f64> = probs
            .rows()
            .zip(labels)
            .map(|(p, &y)| score.class_scores(p)[y])
            .collect();
        scores.sort_by(f64::total_cmp);
        // The tolerance keeps a product that is an integer in exact arithmetic (n = 99 at
        // alpha 0.01) from rounding up to the next rank.
        let rank = ((n as f64 + 1.0) * (1.0 - alpha) - 1e-9).ceil() as usize;
        let threshold = if rank > n {
            f64::INFINITY
        } else {
            scores[rank.max(1) - 1]
        };
        Ok(Self { score, threshold })
    }

    /// The prediction set of one probability row: ascending class indices.
    pub fn set(&self, p: &[f32]) -> Vec<usize> {
        self.score
            .class_scores(p)
            .iter()
            .enumerate()
            .filter(|(_, &s)| s <= self.threshold)
            .map(|(c, _)| c)
            .collect()
    }
}

/// The size of each candidate's conformal set as an acquisition score (larger sets: less
/// certain), calibrated on [`Evidence::reference`] with the last layer's probabilities. In an
/// acquisition round the reference is the labeled set the model was trained on, so the
/// threshold is optimistic (sets smaller than a held-out split would give) and the guarantee
/// does not hold; the ranking is what acquisition uses.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SetSize {
    /// The non-conformity score.
    pub score: ConformalScore,
    /// The miscoverage level.
    pub alpha: f32,
}

impl Scorer for SetSize {
    fn name(&self) -> &str {
        "conformal-size"
    }
    fn needs(&self) -> Needs {
        Needs {
            reference: true,
            ..Needs::FEATURES
        }
    }
    fn score(&self, ev: &Evidence) -> Result<Vec<f32>, ScoreError> {
        let f = ev.features(self.name())?;
        let r = ev.reference.as_deref().ok_or(ScoreError::Missing {
            scorer: self.name().to_string(),
            evidence: "labeled items to calibrate on (reference evidence)",
        })?;
        let (score, alpha) = (self.score, f64::from(self.alpha));
        let key = format!("conformal-{}-{alpha}-{score:?}", score.name());
        let cal = r.memo(&key, |r| {
            let probs = r.features().probs()?;
            Conformal::calibrate(score, &probs, r.labels(), alpha)
        })?;
        let probs = f.probs()?;
        Ok(probs.rows().map(|p| cal.set(p).len() as f32).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_match_hand_worked_values() {
        let p = [0.2f32, 0.5, 0.3];
        let close = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-6);
        assert!(close(
            &ConformalScore::Lac.class_scores(&p),
            &[0.8, 0.5, 0.7]
        ));
        // Order 1, 2, 0: masses 0.5, 0.8, 1.0.
        assert!(close(
            &ConformalScore::Aps.class_scores(&p),
            &[1.0, 0.5, 0.8]
        ));
        let raps = ConformalScore::Raps {
            lambda: 0.1,
            k_reg: 1,
        };
        assert!(close(&raps.class_scores(&p), &[1.2, 0.5, 0.9]));
    }

    #[test]
    fn the_threshold_is_the_finite_sample_quantile() {
        // Four calibration items, LAC scores 0.1, 0.2, 0.3, 0.4; alpha 0.4:
        // ceil(5 * 0.6) = 3 -> 0.3. alpha 0.1: ceil(4.5) = 5 > 4 -> infinite.
        let probs = Probs::new(vec![0.9, 0.1, 0.8, 0.2, 0.7, 0.3, 0.6, 0.4], 4, 2).unwrap();
        let c = Conformal::calibrate(ConformalScore::Lac, &probs, &[0; 4], 0.4).unwrap();
        assert!((c.threshold - 0.3).abs() < 1e-6);
        assert_eq!(c.set(&[0.75, 0.25]), vec![0]);
        let all = Conformal::calibrate(ConformalScore::Lac, &probs, &[0; 4], 0.1).unwrap();
        assert_eq!(all.set(&[1.0, 0.0]), vec![0, 1]);
        assert!(Conformal::calibrate(ConformalScore::Lac, &probs, &[0; 4], 1.0).is_err());
        assert!(Conformal::calibrate(ConformalScore::Lac, &probs, &[0, 0, 0, 2], 0.1).is_err());
    }
}
