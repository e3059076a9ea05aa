//! Scores over stochastic predictions `(s, n, c)`: MC dropout (Gal & Ghahramani 2016) and
//! deep ensembles (Lakshminarayanan et al. 2017).
//!
//! With `p_s` the `s`-th draw's class probabilities and `p = mean_s p_s`:
//! - BALD / mutual information `H[p] - mean_s H[p_s]` (`>= 0`, `<= ln C`);
//! - predictive entropy of the mean `H[p]`;
//! - class variance (Smith & Gal 2018) `(1/C) sum_c Var_s[p_{s,c}]` (population variance);
//! - variation ratio `1 - f_mode / S`, `f_mode` the number of draws voting for the most voted
//!   class (ties: the lowest class);
//! - `1 - mean_s max_c p_{s,c}` (one minus the mean max-probability).
//!
//! All `>= 0`, higher = more uncertain, computed in `f64` with `0 ln 0 = 0`.
//!
//! [`McAa`] is BALD's mutual information over the predictions MC-AA (Alarab & Prakoonwit
//! 2022) makes on inputs moved back and forth along the sign of their loss gradient.

use crate::scorers::entropy;
use crate::{Evidence, Needs, SampleRequest, ScoreError, Scorer};

/// Which statistic of the samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SampleScore {
    /// Mutual information between prediction and model (BALD).
    Bald,
    /// Entropy of the mean prediction.
    MeanEntropy,
    /// Mean over classes of the variance across draws.
    ClassVariance,
    /// One minus the fraction of draws voting for the modal class.
    VariationRatio,
    /// One minus the mean (over draws) max-probability.
    MaxProb,
}

/// A [`SampleScore`] over samples drawn as `request` says.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SampleScorer {
    /// The statistic.
    pub score: SampleScore,
    /// How the samples are drawn (MC dropout with T = 20 by default).
    pub request: SampleRequest,
}

impl SampleScorer {
    /// `score` over the members of an ensemble model.
    pub fn members(score: SampleScore) -> Self {
        Self {
            score,
            request: SampleRequest::Members,
        }
    }

    /// `score` over `samples` MC-dropout passes.
    pub fn mc_dropout(score: SampleScore, samples: usize) -> Self {
        Self {
            score,
            request: SampleRequest::McDropout { samples },
        }
    }
}

impl Scorer for SampleScorer {
    fn name(&self) -> &str {
        match self.score {
            SampleScore::Bald => "bald",
            SampleScore::MeanEntropy => "mc-entropy",
            SampleScore::ClassVariance => "class-variance",
            SampleScore::VariationRatio => "variation-ratio",
            SampleScore::MaxProb => "mc-max-prob",
        }
    }
    fn needs(&self) -> Needs {
        Needs {
            probs: false,
            ..Needs::samples(self.request)
        }
    }
    fn score(&self, ev: &Evidence) -> Result<Vec<f32>, ScoreError> {
        let s = ev.samples(self.name())?;
        let draws = s.draws();
        let (n, c, t) = (s.n(), draws[0].classes(), draws.len() as f64);
        // Items are scored independently, so the cores split them without changing a bit.
        let mut out = vec![0f32; n];
        crate::kernels::par_rows(&mut out, 1, |start, part| {
            for (o, i) in part.iter_mut().zip(start..) {
                *o = self.item(draws, i, c, t);
            }
        });
        Ok(out)
    }
}

/// MC-AA (Alarab & Prakoonwit 2022): the mutual information `H[mean p] - mean H[p_t]` over
/// `samples` predictions on `x + eps_t sign(grad_x CE(x, argmax p(x)))`, `eps_t` evenly
/// spread over `[-epsilon, epsilon]` ([`SampleRequest::Adversarial`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct McAa {
    /// Largest perturbation size on the `[0, 1]` input scale.
    pub epsilon: f32,
    /// Number of perturbation sizes (at least 2).
    pub samples: usize,
}

impl McAa {
    fn bald(&self) -> SampleScorer {
        SampleScorer {
            score: SampleScore::Bald,
            request: SampleRequest::Adversarial {
                epsilon: self.epsilon,
                samples: self.samples,
            },
        }
    }
}

impl Scorer for McAa {
    fn name(&self) -> &str {
        "mc-aa"
    }
    fn needs(&self) -> Needs {
        self.bald().needs()
    }
    fn score(&self, ev: &Evidence) -> Result<Vec<f32>, ScoreError> {
        self.bald().score(ev)
    }
}

impl SampleScorer {
    /// The score of item `i` from its `t` draws of `c` classes.
    fn item(&self, draws: &[crate::Probs], i: usize, c: usize, t: f64) -> f32 {
        let mut mean = vec![0f64; c];
        for d in draws {
            for (m, &v) in mean.iter_mut().zip(d.row(i)) {
                *m += f64::from(v) / t;
            }
        }
        let h_mean = -mean
            .iter()
            .map(|&v| if v > 0.0 { v * v.ln() } else { 0.0 })
            .sum::<f64>();
        let v = match self.score {
            SampleScore::Bald => h_mean - draws.iter().map(|d| entropy(d.row(i))).sum::<f64>() / t,
            SampleScore::MeanEntropy => h_mean,
            SampleScore::ClassVariance => {
                (0..c)
                    .map(|k| {
                        draws
                            .iter()
                            .map(|d| (f64::from(d.row(i)[k]) - mean[k]).powi(2))
                            .sum::<f64>()
                            / t
                    })
                    .sum::<f64>()
                    / c as f64
            }
            SampleScore::VariationRatio => {
                let mut votes = vec![0usize; c];
                for d in draws {
                    let r = d.row(i);
                    let arg = (0..c).fold(0, |b, k| if r[k] > r[b] { k } else { b });
                    votes[arg] += 1;
                }
                1.0 - *votes.iter().max().unwrap_or(&0) as f64 / t
            }
            SampleScore::MaxProb => {
                1.0 - draws
                    .iter()
                    .map(|d| d.row(i).iter().fold(0f64, |m, &v| m.max(f64::from(v))))
                    .sum::<f64>()
                    / t
            }
        };
        v.max(0.0) as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Probs, Samples};
    use proptest::prelude::*;

    fn ev(draws: &[&[f32]], c: usize) -> Evidence {
        let n = draws[0].len() / c;
        Evidence {
            samples: Some(
                Samples::new(
                    draws
                        .iter()
                        .map(|d| Probs::new(d.to_vec(), n, c).unwrap())
                        .collect(),
                )
                .unwrap(),
            ),
            ..Default::default()
        }
    }

    fn score(kind: SampleScore, e: &Evidence) -> f32 {
        SampleScorer::mc_dropout(kind, 2).score(e).unwrap()[0]
    }

    #[test]
    fn two_disagreeing_one_hot_samples() {
        // Draws (1, 0) and (0, 1): mean (.5, .5), H[mean] = ln 2, each H[p_s] = 0, so
        // BALD = ln 2 = 0.6931472; class variance = ((.25 + .25)/2 + (.25 + .25)/2) / 2 = 0.25;
        // variation ratio = 1 - 1/2 = 0.5; 1 - mean max-prob = 0.
        let e = ev(&[&[1.0, 0.0], &[0.0, 1.0]], 2);
        assert!((score(SampleScore::Bald, &e) - std::f32::consts::LN_2).abs() < 1e-6);
        assert!((score(SampleScore::MeanEntropy, &e) - std::f32::consts::LN_2).abs() < 1e-6);
        assert!((score(SampleScore::ClassVariance, &e) - 0.25).abs() < 1e-6);
        assert!((score(SampleScore::VariationRatio, &e) - 0.5).abs() < 1e-6);
        assert!(score(SampleScore::MaxProb, &e).abs() < 1e-6);
        // Agreeing uniform draws: BALD 0 although the entropy is maximal.
        let u = ev(&[&[0.5, 0.5], &[0.5, 0.5]], 2);
        assert!(score(SampleScore::Bald, &u).abs() < 1e-7);
        assert!((score(SampleScore::MaxProb, &u) - 0.5).abs() < 1e-6);
    }

    proptest! {
        #[test]
        fn bald_is_between_zero_and_ln_c_and_permutation_invariant(
            c in 2usize..6, t in 1usize..6, shift in 1usize..6,
            logits in proptest::collection::vec(-8.0f32..8.0, 36),
        ) {
            let draws: Vec<Vec<f32>> = (0..t).map(|s| {
                let z = &logits[s * c..(s + 1) * c];
                let m = z.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                let e: Vec<f32> = z.iter().map(|v| (v - m).exp()).collect();
                let sum: f32 = e.iter().sum();
                e.iter().map(|v| v / sum).collect()
            }).collect();
            let refs: Vec<&[f32]> = draws.iter().map(|d| d.as_slice()).collect();
            let b = score(SampleScore::Bald, &ev(&refs, c));
            prop_assert!(b >= 0.0 && b <= (c as f32).ln() + 1e-5);
            let rotated: Vec<Vec<f32>> = draws.iter().map(|d| { let mut d = d.clone(); d.rotate_left(shift % c); d }).collect();
            let rrefs: Vec<&[f32]> = rotated.iter().map(|d| d.as_slice()).collect();
            for k in [SampleScore::Bald, SampleScore::MeanEntropy, SampleScore::ClassVariance, SampleScore::MaxProb] {
                prop_assert!((score(k, &ev(&refs, c)) - score(k, &ev(&rrefs, c))).abs() < 1e-5);
            }
        }
    }
}
