//! Batch selection: turning one score per candidate into the positions to label next.
//!
//! Selection is where randomness enters acquisition; it takes the caller's seeded RNG so that
//! runs are reproducible. Positions returned are positions in the scored batch, never dataset
//! indices: mapping them back is the pool's job.

use crate::ScoreError;
use rand::RngCore;

/// How to pick `k` candidates from their scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Selection {
    /// The `k` highest scores; ties broken by lower position first, so the result is
    /// deterministic.
    #[default]
    TopK,
    /// `k` positions uniformly at random without replacement; the scores are ignored (only
    /// their count is used).
    Random,
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
        match self {
            Selection::TopK => {
                if let Some((position, &value)) =
                    scores.iter().enumerate().find(|(_, s)| !s.is_finite())
                {
                    return Err(ScoreError::NonFinite { position, value });
                }
                let mut order: Vec<usize> = (0..n).collect();
                order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
                order.truncate(k);
                Ok(order)
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
