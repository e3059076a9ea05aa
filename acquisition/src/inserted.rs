//! Inserted dropout (Ledda, Fumera & Roli 2023, "Dropout injection at test time"): dropout
//! added at test time to a network trained without it, its stochastic predictions read like
//! MC dropout's. alkit injects it where the authors' networks carry it, before the last linear
//! layer: each draw keeps each penultimate feature with probability `1 - rate` and scales the
//! kept ones by `1 / (1 - rate)` (inverted dropout, so a feature's expectation is unchanged),
//! then applies the trained layer, `softmax(W (m o h) / (1 - rate) + b)`.
//!
//! The authors rescale the resulting uncertainty by one factor fitted on validation data; a
//! positive factor changes no ranking, so the scores that select and detect by rank (BALD,
//! EPIG, the entropy of the mean) need none, and none is applied. It works on every model that
//! gives its penultimate features and last layer, imported and frozen ones included, because
//! nothing before the last layer is recomputed.

use crate::linalg::{softmax, unit};
use crate::{Features, Probs, Samples, ScoreError};
use rand::RngCore;

/// The largest dropout rate injected: at 1 every feature is dropped.
pub const MAX_RATE: f32 = 0.95;

/// `samples` draws `(s, n, c)` of the candidates `f` under dropout of `rate` injected on the
/// features, masks from `rng` (for each draw, candidate by candidate, feature by feature: one
/// uniform each, kept below `1 - rate`).
pub fn inserted_dropout_draws(
    f: &Features,
    rate: f32,
    samples: usize,
    rng: &mut dyn RngCore,
) -> Result<Samples, ScoreError> {
    if !(rate > 0.0 && rate <= MAX_RATE) {
        return Err(ScoreError::Setting {
            setting: "inserted_dropout",
            why: format!("{rate}; expected a dropout rate in (0, {MAX_RATE}]"),
        });
    }
    let (n, d, c) = (f.n(), f.dim(), f.classes());
    let keep = 1.0 - f64::from(rate);
    let (w, b) = (f.weight(), f.bias());
    let mut draws = Vec::with_capacity(samples.max(1));
    let mut h = vec![0f64; d];
    for _ in 0..samples.max(1) {
        let mut p = Vec::with_capacity(n * c);
        for i in 0..n {
            for (o, &v) in h.iter_mut().zip(f.row(i)) {
                *o = if unit(rng) < keep {
                    f64::from(v) / keep
                } else {
                    0.0
                };
            }
            let z: Vec<f64> = (0..c)
                .map(|k| {
                    let wk = &w[k * d..(k + 1) * d];
                    f64::from(b[k])
                        + wk.iter()
                            .zip(&h)
                            .map(|(&a, x)| f64::from(a) * x)
                            .sum::<f64>()
                })
                .collect();
            p.extend(softmax(&z).into_iter().map(|v| v as f32));
        }
        draws.push(Probs::new(p, n, c)?);
    }
    Samples::new(draws)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn each_feature_is_kept_at_the_rate_and_rescaled() {
        // One feature h = 2 and logits (W h, 0) with W = 1: a kept feature gives
        // z = (2 / (1 - 0.5), 0) = (4, 0), p_0 = 1 / (1 + e^-4); a dropped one p_0 = 0.5.
        let f = Features::new(vec![2.0], 1, 1, vec![1.0, 0.0], vec![0.0, 0.0]).unwrap();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let s = inserted_dropout_draws(&f, 0.5, 4000, &mut rng).unwrap();
        let kept_p = 1.0 / (1.0 + (-4f64).exp());
        let mut kept = 0;
        for d in s.draws() {
            let p0 = f64::from(d.row(0)[0]);
            if (p0 - kept_p).abs() < 1e-6 {
                kept += 1;
            } else {
                assert!((p0 - 0.5).abs() < 1e-6, "{p0}");
            }
        }
        // Binomial(4000, 0.5): 2000 +- 4 standard deviations (31.6 each).
        assert!((kept as i64 - 2000).abs() < 130, "{kept}");
        let mut again = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        assert_eq!(
            inserted_dropout_draws(&f, 0.5, 4000, &mut again).unwrap(),
            s
        );
    }

    #[test]
    fn a_rate_outside_its_range_is_refused() {
        let f = Features::new(vec![2.0], 1, 1, vec![1.0, 0.0], vec![0.0, 0.0]).unwrap();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        for rate in [0.0, -0.1, 0.96, f32::NAN] {
            assert!(
                inserted_dropout_draws(&f, rate, 2, &mut rng).is_err(),
                "{rate}"
            );
        }
    }
}
