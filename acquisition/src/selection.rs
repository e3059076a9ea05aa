//! Batch selection: turning one score per candidate into the positions to label next.
//!
//! Selection is where randomness enters acquisition; it takes the caller's seeded RNG so that
//! runs are reproducible. Positions returned are positions in the scored batch, never dataset
//! indices: mapping them back is the pool's job.

use crate::ScoreError;
use rand::RngCore;

/// How to pick `k` candidates from their scores.
///
/// The stochastic modes (Kirsch et al. 2023, "Stochastic Batch Acquisition") sample `k`
/// candidates without replacement with probability proportional to a weight, by the
/// Gumbel-top-k trick (top `k` of `ln w_i + G_i`, `G_i` standard Gumbel): `Power`
/// `w = s^beta` (a score of 0 gets weight `1e-30^beta`; negative scores are refused, see
/// [`Selection::outside_domain`]), `Softmax` `w = exp(beta s)`, `SoftRank`
/// `w = rank^-beta` (rank 1 = highest score, ties by position).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[non_exhaustive]
pub enum Selection {
    /// The `k` highest scores; ties broken by lower position first, so the result is
    /// deterministic.
    #[default]
    TopK,
    /// `k` positions uniformly at random without replacement; the scores are ignored (only
    /// their count is used).
    Random,
    /// Sampling with weights `score^beta`.
    Power {
        /// Inverse temperature (1 in Kirsch et al.).
        beta: f32,
    },
    /// Sampling with weights `exp(beta * score)`.
    Softmax {
        /// Inverse temperature.
        beta: f32,
    },
    /// Sampling with weights `rank^-beta`.
    SoftRank {
        /// Inverse temperature.
        beta: f32,
    },
}

impl Selection {
    /// Picks `k` distinct positions among `scores.len()` candidates, in pick order.
    ///
    /// Errors when `k` exceeds the number of candidates or (for score-based modes) a score is
    /// NaN or infinite.
    pub fn select(
        &self,
        scores: &[f32],
        k: usize,
        rng: &mut dyn RngCore,
    ) -> Result<Vec<usize>, ScoreError> {
        let n = scores.len();
        if k > n {
            return Err(ScoreError::TooMany { k, n });
        }
        if !matches!(self, Selection::Random) {
            if let Some((position, &value)) =
                scores.iter().enumerate().find(|(_, s)| !s.is_finite())
            {
                return Err(ScoreError::NonFinite { position, value });
            }
        }
        if let Some((position, value)) = self.outside_domain(scores) {
            return Err(ScoreError::Setting {
                setting: "select",
                why: Self::power_domain(&format!("the candidate at position {position}"), value),
            });
        }
        let top_k = |keys: &[f64]| {
            let mut order: Vec<usize> = (0..n).collect();
            order.sort_by(|&a, &b| keys[b].total_cmp(&keys[a]).then(a.cmp(&b)));
            order.truncate(k);
            order
        };
        let gumbel_top_k = |logw: &[f64], rng: &mut dyn RngCore| {
            let keys: Vec<f64> = logw.iter().map(|&lw| lw + gumbel(rng.next_u64())).collect();
            top_k(&keys)
        };
        match *self {
            Selection::TopK => Ok(top_k(
                &scores.iter().map(|&s| f64::from(s)).collect::<Vec<_>>(),
            )),
            Selection::Power { beta } => {
                let lw: Vec<f64> = scores
                    .iter()
                    .map(|&s| f64::from(beta) * f64::from(s).max(1e-30).ln())
                    .collect();
                Ok(gumbel_top_k(&lw, rng))
            }
            Selection::Softmax { beta } => {
                let lw: Vec<f64> = scores
                    .iter()
                    .map(|&s| f64::from(beta) * f64::from(s))
                    .collect();
                Ok(gumbel_top_k(&lw, rng))
            }
            Selection::SoftRank { beta } => {
                let mut order: Vec<usize> = (0..n).collect();
                order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
                let mut lw = vec![0f64; n];
                for (r, &i) in order.iter().enumerate() {
                    lw[i] = -f64::from(beta) * ((r + 1) as f64).ln();
                }
                Ok(gumbel_top_k(&lw, rng))
            }
            Selection::Random => {
                // Partial Fisher-Yates with an unbiased bounded draw.
                let mut order: Vec<usize> = (0..n).collect();
                for i in 0..k {
                    let j = i + uniform_below(rng, (n - i) as u64) as usize;
                    order.swap(i, j);
                }
                order.truncate(k);
                Ok(order)
            }
        }
    }
}

impl Selection {
    /// The first candidate whose score lies outside this mode's domain, with its score:
    /// `Power` weighs by `score^beta`, defined for scores `>= 0` only (down to `-1e-6`,
    /// rounding, weighed as 0), so a negative score
    /// (max-logit, energy and other detectors go negative) would make it uniform sampling
    /// under another name. Every other mode takes any finite score.
    pub fn outside_domain(&self, scores: &[f32]) -> Option<(usize, f32)> {
        match self {
            // A hair below 0 is rounding (`1 - p` with `p` a float over 1): weighed as 0.
            Selection::Power { .. } => scores
                .iter()
                .enumerate()
                .find(|(_, &s)| s < -1e-6)
                .map(|(i, &s)| (i, s)),
            _ => None,
        }
    }

    /// Why `Power` refuses `what`, which scored `value` (below 0), and what to use instead.
    pub fn power_domain(what: &str, value: f32) -> String {
        format!(
            "power selection weighs candidates by score^beta, which needs scores >= 0, but \
             {what} scored {value}; for a scorer that goes negative (max-logit, energy, ...) \
             select with softmax or softrank"
        )
    }

    /// The log-weight `ln w` of one candidate's score for the modes whose weight depends on
    /// that score alone (`TopK`: the score itself, `Power`, `Softmax`), so that a candidate's
    /// selection key `ln w + G` can be computed without the others (sharded scoring).
    /// `None` for `SoftRank` (a rank needs every score) and `Random`.
    pub fn log_weight(&self, score: f32) -> Option<f64> {
        match *self {
            Selection::TopK => Some(f64::from(score)),
            Selection::Power { beta } => Some(f64::from(beta) * f64::from(score).max(1e-30).ln()),
            Selection::Softmax { beta } => Some(f64::from(beta) * f64::from(score)),
            Selection::SoftRank { .. } | Selection::Random => None,
        }
    }

    /// True for the modes that add Gumbel noise to the log-weights.
    pub fn is_stochastic(&self) -> bool {
        !matches!(self, Selection::TopK)
    }
}

/// A standard Gumbel draw from 64 random bits: `-ln(-ln u)` with `u` in `(0, 1)` from the top
/// 53 bits, shifted off 0. The one formula every stochastic selection uses.
pub fn gumbel(bits: u64) -> f64 {
    let u = ((bits >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    -(-u.ln()).ln()
}

/// Uniform integer in `0..bound` (bound > 0) by rejection, independent of `rand`'s
/// distribution internals so the stream stays stable across `rand` versions.
pub(crate) fn uniform_below(rng: &mut dyn RngCore, bound: u64) -> u64 {
    let zone = u64::MAX - (u64::MAX % bound);
    loop {
        let v = rng.next_u64();
        if v < zone {
            return v % bound;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn top_k_orders_by_score_then_position() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let s = [0.1, 0.9, 0.5, 0.9, 0.0];
        let got = Selection::TopK.select(&s, 3, &mut rng).unwrap();
        assert_eq!(got, vec![1, 3, 2]);
    }

    #[test]
    fn top_k_rejects_nan_and_too_many() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        assert!(matches!(
            Selection::TopK.select(&[0.1, f32::NAN], 1, &mut rng),
            Err(ScoreError::NonFinite { position: 1, .. })
        ));
        assert!(matches!(
            Selection::TopK.select(&[0.1], 2, &mut rng),
            Err(ScoreError::TooMany { k: 2, n: 1 })
        ));
    }

    #[test]
    fn power_refuses_negative_scores_and_the_others_take_them() {
        let scores = [0.5f32, 0.0, -0.25, 2.0];
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let err = Selection::Power { beta: 1.0 }
            .select(&scores, 2, &mut rng)
            .unwrap_err()
            .to_string();
        assert!(err.contains("position 2 scored -0.25"), "{err}");
        assert!(err.contains("softmax or softrank"), "{err}");
        assert!(Selection::Power { beta: 1.0 }
            .select(&[0.5, 0.0, 2.0], 2, &mut rng)
            .is_ok());
        for mode in [
            Selection::TopK,
            Selection::Softmax { beta: 1.0 },
            Selection::SoftRank { beta: 1.0 },
            Selection::Random,
        ] {
            assert!(mode.select(&scores, 2, &mut rng).is_ok(), "{mode:?}");
        }
    }

    #[test]
    fn stochastic_modes_follow_their_weights() {
        // Power with beta = 1 and k = 1 picks item i with probability s_i / sum s: scores
        // (1, 3) -> 0.25 / 0.75. Over 8000 draws the count of item 1 is 6000 +- 39 (sd).
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let picks = (0..8000)
            .filter(|_| {
                Selection::Power { beta: 1.0 }
                    .select(&[1.0, 3.0], 1, &mut rng)
                    .unwrap()[0]
                    == 1
            })
            .count();
        assert!((5800..6200).contains(&picks), "{picks}");
        // Softmax beta = ln 3 on scores (0, 1): weights (1, 3), the same 0.75.
        let picks = (0..8000)
            .filter(|_| {
                Selection::Softmax { beta: 3f32.ln() }
                    .select(&[0.0, 1.0], 1, &mut rng)
                    .unwrap()[0]
                    == 1
            })
            .count();
        assert!((5800..6200).contains(&picks), "{picks}");
        // SoftRank beta = ln 3 / ln 2 on two items: weights (1, 2^-beta) = (1, 1/3) -> top item
        // (position 1, the higher score) 0.75.
        let beta = 3f32.ln() / 2f32.ln();
        let picks = (0..8000)
            .filter(|_| {
                Selection::SoftRank { beta }
                    .select(&[0.2, 0.9], 1, &mut rng)
                    .unwrap()[0]
                    == 1
            })
            .count();
        assert!((5800..6200).contains(&picks), "{picks}");
        // k = n returns every position once; NaN is refused.
        let mut all = Selection::Softmax { beta: 1.0 }
            .select(&[0.1, 0.5, 0.3], 3, &mut rng)
            .unwrap();
        all.sort();
        assert_eq!(all, vec![0, 1, 2]);
        assert!(Selection::Power { beta: 1.0 }
            .select(&[f32::NAN], 1, &mut rng)
            .is_err());
    }

    #[test]
    fn random_is_distinct_seeded_and_roughly_uniform() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let scores = vec![0.0; 10];
        let mut counts = [0usize; 10];
        for _ in 0..2000 {
            let picked = Selection::Random.select(&scores, 3, &mut rng).unwrap();
            let mut sorted = picked.clone();
            sorted.sort();
            sorted.dedup();
            assert_eq!(sorted.len(), 3);
            for p in picked {
                counts[p] += 1;
            }
        }
        // Each position is expected 2000 * 3 / 10 = 600 times; sd = sqrt(600 * 0.7) ~ 20.5.
        for c in counts {
            assert!((500..700).contains(&c), "{counts:?}");
        }
        let a = Selection::Random
            .select(&scores, 4, &mut ChaCha8Rng::seed_from_u64(3))
            .unwrap();
        let b = Selection::Random
            .select(&scores, 4, &mut ChaCha8Rng::seed_from_u64(3))
            .unwrap();
        assert_eq!(a, b);
    }
}
