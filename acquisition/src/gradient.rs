//! Gradient-based scorers: REGrad and REGrad* (Wang & Ji, CVPR 2024), ExGrad (Igoe et al.
//! 2022) and the baselines of the REGrad paper's tables.
//!
//! Notation, per candidate `x`: `p_c = p(y=c|x)`; `g_c = d log p_c / d theta`; the evidence
//! holds `||g_{c,l}||^2` per layer `l = 1..L` (numbered from the input). All scores are oriented
//! higher = more uncertain = label first, and are `>= 0`.

use crate::{Evidence, GradNorms, GradRequest, Needs, Probs, SampleRequest, ScoreError, Scorer};

/// `||g_c||` over all layers.
fn full_norm(layer_sq: &[f32]) -> f64 {
    layer_sq.iter().map(|&v| f64::from(v)).sum::<f64>().sqrt()
}

fn checked<'a>(ev: &'a Evidence, name: &str) -> Result<(&'a Probs, &'a GradNorms), ScoreError> {
    let (p, g) = (ev.probs(name)?, ev.grads(name)?);
    if p.n() != g.n() || p.classes() != g.classes() {
        return Err(ScoreError::Shape {
            what: "gradient norms",
            expected: format!("({}, {}, L) to match the probabilities", p.n(), p.classes()),
            got: format!("({}, {}, {})", g.n(), g.classes(), g.layers()),
        });
    }
    Ok((p, g))
}

/// REGrad (paper Eq. 11): `sum_c sqrt(p_c ||g~_c||^2)` with the layer-selective gradient
/// (Eq. 12) `g~_{c,l} = a_l g_{c,l}`, `a_l = exp(lambda * l)`. With `perturbations > 0` it is
/// REGrad* (Eq. 13): each `g_c` averaged over the input and `N` Gaussian-perturbed copies
/// (`p_c` from the unperturbed input). `lambda = 0`, `N = 0` is plain class-weighted
/// gradients.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReGrad {
    /// Layer-selection strength `lambda` (paper default 0.3).
    pub lambda: f32,
    /// How the gradients are computed (REGrad: no perturbation; REGrad*: `N = 8`,
    /// `sigma = 0.02` by default).
    pub request: GradRequest,
}

impl ReGrad {
    /// REGrad with `lambda = 0.3`.
    pub const DEFAULT: ReGrad = ReGrad {
        lambda: 0.3,
        request: GradRequest::PLAIN,
    };
    /// REGrad* with `lambda = 0.3`, `N = 8`, `sigma = 0.02`.
    pub const STAR: ReGrad = ReGrad {
        lambda: 0.3,
        request: GradRequest {
            perturbations: 8,
            sigma: 0.02,
            expected: false,
            ..GradRequest::PLAIN
        },
    };
}

impl Scorer for ReGrad {
    fn name(&self) -> &str {
        if self.request.perturbations > 0 {
            "regrad-star"
        } else {
            "regrad"
        }
    }
    fn needs(&self) -> Needs {
        Needs::grads(self.request)
    }
    fn score(&self, ev: &Evidence) -> Result<Vec<f32>, ScoreError> {
        let (p, g) = checked(ev, self.name())?;
        let scale: Vec<f64> = (1..=g.layers())
            .map(|l| (2.0 * f64::from(self.lambda) * l as f64).exp())
            .collect();
        Ok((0..p.n())
            .map(|i| {
                p.row(i)
                    .iter()
                    .enumerate()
                    .map(|(c, &pc)| {
                        let sel: f64 = g
                            .class(i, c)
                            .iter()
                            .zip(&scale)
                            .map(|(&v, a)| f64::from(v) * a)
                            .sum();
                        (f64::from(pc) * sel).sqrt()
                    })
                    .sum::<f64>() as f32
            })
            .collect())
    }
}

/// ExGrad (Igoe et al. 2022; REGrad paper Eq. 10): `sum_c p_c ||g_c||`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ExGrad;

impl Scorer for ExGrad {
    fn name(&self) -> &str {
        "exgrad"
    }
    fn needs(&self) -> Needs {
        Needs::grads(GradRequest::PLAIN)
    }
    fn score(&self, ev: &Evidence) -> Result<Vec<f32>, ScoreError> {
        let (p, g) = checked(ev, self.name())?;
        Ok((0..p.n())
            .map(|i| {
                p.row(i)
                    .iter()
                    .enumerate()
                    .map(|(c, &pc)| f64::from(pc) * full_norm(g.class(i, c)))
                    .sum::<f64>() as f32
            })
            .collect())
    }
}

/// UNGrad: the unweighted mean `(1/C) sum_c ||g_c||`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct UnGrad;

impl Scorer for UnGrad {
    fn name(&self) -> &str {
        "ungrad"
    }
    fn needs(&self) -> Needs {
        Needs::grads(GradRequest::PLAIN)
    }
    fn score(&self, ev: &Evidence) -> Result<Vec<f32>, ScoreError> {
        let (p, g) = checked(ev, self.name())?;
        let c = p.classes();
        Ok((0..p.n())
            .map(|i| ((0..c).map(|k| full_norm(g.class(i, k))).sum::<f64>() / c as f64) as f32)
            .collect())
    }
}

/// NEGrad: the norm of the expected gradient `||sum_c p_c g_c||`. In exact arithmetic this is
/// 0 for every input (`sum_c p_c d log p_c = d sum_c p_c = 0`), so it ranks by rounding noise:
/// the paper's tables show it near or below chance.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct NeGrad;

impl Scorer for NeGrad {
    fn name(&self) -> &str {
        "negrad"
    }
    fn needs(&self) -> Needs {
        Needs::grads(GradRequest {
            expected: true,
            ..GradRequest::PLAIN
        })
    }
    fn score(&self, ev: &Evidence) -> Result<Vec<f32>, ScoreError> {
        let (p, g) = checked(ev, self.name())?;
        (0..p.n())
            .map(|i| {
                g.expected(i)
                    .map(|e| full_norm(e) as f32)
                    .ok_or(ScoreError::Missing {
                        scorer: self.name().into(),
                        evidence: "the expected-gradient row",
                    })
            })
            .collect()
    }
}

/// GradNorm (Huang et al. 2021): the L1 norm of the gradient of `KL(u || p)` (`u` uniform,
/// temperature 1) w.r.t. the last layer's weight matrix (bias excluded). Used as is, like the
/// REGrad paper's tables: higher norm = label first. (Huang et al. use it the other way round
/// for OOD detection, where in-distribution inputs have the larger norm.)
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GradNorm;

impl Scorer for GradNorm {
    fn name(&self) -> &str {
        "gradnorm"
    }
    fn needs(&self) -> Needs {
        Needs::grads(GradRequest::PLAIN)
    }
    fn score(&self, ev: &Evidence) -> Result<Vec<f32>, ScoreError> {
        let (p, g) = checked(ev, self.name())?;
        Ok((0..p.n()).map(|i| g.kl_uniform_l1(i)).collect())
    }
}

/// ExGrad's V-term `V = sum_c |p_c - 1/C|` (0 for the uniform prediction, `2 (1 - 1/C)` for a
/// one-hot one), reflected as `2 (1 - 1/C) - V` so that higher = more uncertain; reads
/// probabilities only.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ExGradV;

impl Scorer for ExGradV {
    fn name(&self) -> &str {
        "exgrad-v"
    }
    fn needs(&self) -> Needs {
        Needs::PROBS
    }
    fn score(&self, ev: &Evidence) -> Result<Vec<f32>, ScoreError> {
        let p = ev.probs(self.name())?;
        let u = 1.0 / p.classes() as f64;
        Ok(p.rows()
            .map(|r| {
                let v: f64 = r.iter().map(|&x| (f64::from(x) - u).abs()).sum();
                (2.0 * (1.0 - u) - v).max(0.0) as f32
            })
            .collect())
    }
}

/// Perturb-x / Perturb-theta: the expected divergence of the prediction under Gaussian noise
/// on the input (`E_dx[KL(p(y|x+dx) || p(y|x))]`) or on the parameters
/// (`E_dtheta[KL(p(y|x, theta+dtheta) || p(y|x, theta))]`), estimated by the mean over the
/// draws of the request. `0 ln 0 = 0`; the reference probabilities are floored at `1e-30`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PerturbKl {
    /// Where the noise goes and how much.
    pub request: SampleRequest,
}

impl PerturbKl {
    /// Perturb-x defaults: `sigma = 0.05` on the `[0, 1]` input scale, 8 draws.
    pub const INPUT: PerturbKl = PerturbKl {
        request: SampleRequest::InputNoise {
            sigma: 0.05,
            samples: 8,
        },
    };
    /// Perturb-theta defaults: `sigma = 0.01` on every parameter, 8 draws.
    pub const WEIGHTS: PerturbKl = PerturbKl {
        request: SampleRequest::WeightNoise {
            sigma: 0.01,
            samples: 8,
        },
    };
}

/// `KL(q || p)` in nats for probability rows.
pub(crate) fn kl(q: &[f32], p: &[f32]) -> f64 {
    q.iter()
        .zip(p)
        .map(|(&qi, &pi)| {
            let qi = f64::from(qi);
            if qi > 0.0 {
                qi * (qi.ln() - f64::from(pi).max(1e-30).ln())
            } else {
                0.0
            }
        })
        .sum::<f64>()
        .max(0.0)
}

impl Scorer for PerturbKl {
    fn name(&self) -> &str {
        match self.request {
            SampleRequest::InputNoise { .. } => "perturb-x",
            SampleRequest::WeightNoise { .. } => "perturb-theta",
            SampleRequest::McDropout { .. } => "perturb-dropout",
            SampleRequest::Members => "perturb-members",
            SampleRequest::Laplace { .. } => "perturb-laplace",
            SampleRequest::Adversarial { .. } => "perturb-adversarial",
            SampleRequest::InsertedDropout { .. } => "perturb-inserted",
        }
    }
    fn needs(&self) -> Needs {
        Needs::samples(self.request)
    }
    fn score(&self, ev: &Evidence) -> Result<Vec<f32>, ScoreError> {
        let (p, s) = (ev.probs(self.name())?, ev.samples(self.name())?);
        if s.n() != p.n() || s.draws()[0].classes() != p.classes() {
            return Err(ScoreError::Shape {
                what: "samples",
                expected: format!("(s, {}, {})", p.n(), p.classes()),
                got: format!("(s, {}, {})", s.n(), s.draws()[0].classes()),
            });
        }
        let k = s.draws().len() as f64;
        Ok((0..p.n())
            .map(|i| {
                (s.draws()
                    .iter()
                    .map(|d| kl(d.row(i), p.row(i)))
                    .sum::<f64>()
                    / k) as f32
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn evidence(
        p: Vec<f32>,
        sq: Vec<f32>,
        n: usize,
        c: usize,
        rows: usize,
        layers: usize,
    ) -> Evidence {
        let mut ev = Evidence::from_probs(Probs::new(p, n, c).unwrap());
        ev.grads = Some(GradNorms::new(sq, n, c, rows, layers, vec![1.5; n]).unwrap());
        ev
    }

    #[test]
    fn perturb_kl_hand_worked() {
        // p = (0.5, 0.5); draws (0.75, 0.25) and (0.5, 0.5):
        // KL((.75,.25)||(.5,.5)) = .75 ln 1.5 + .25 ln .5 = 0.3040988 - 0.1732868 = 0.1308121;
        // KL(p||p) = 0; mean = 0.0654060.
        let mut ev = Evidence::from_probs(Probs::new(vec![0.5, 0.5], 1, 2).unwrap());
        ev.samples = Some(
            crate::Samples::new(vec![
                Probs::new(vec![0.75, 0.25], 1, 2).unwrap(),
                Probs::new(vec![0.5, 0.5], 1, 2).unwrap(),
            ])
            .unwrap(),
        );
        let got = PerturbKl::INPUT.score(&ev).unwrap()[0];
        assert!((got - 0.065_406).abs() < 1e-5, "{got}");
        assert_eq!(PerturbKl::WEIGHTS.name(), "perturb-theta");
        // One-hot draw against a zero reference entry stays finite (floor 1e-30).
        assert!(kl(&[1.0, 0.0], &[0.0, 1.0]).is_finite());
    }

    #[test]
    fn hand_worked_values() {
        // One candidate, C = 2, L = 2. p = (0.75, 0.25).
        // Class 0 squared norms per layer (1, 3) -> ||g_0|| = 2; class 1: (4, 5) -> ||g_1|| = 3.
        // Expected-gradient row: (0.01, 0.03) -> NEGrad = 0.2.
        let ev = evidence(
            vec![0.75, 0.25],
            vec![1.0, 3.0, 4.0, 5.0, 0.01, 0.03],
            1,
            2,
            3,
            2,
        );
        // ExGrad = 0.75 * 2 + 0.25 * 3 = 2.25.
        assert!((ExGrad.score(&ev).unwrap()[0] - 2.25).abs() < 1e-6);
        // UNGrad = (2 + 3) / 2 = 2.5.
        assert!((UnGrad.score(&ev).unwrap()[0] - 2.5).abs() < 1e-6);
        assert!((NeGrad.score(&ev).unwrap()[0] - 0.2).abs() < 1e-6);
        assert_eq!(GradNorm.score(&ev).unwrap()[0], 1.5);
        // REGrad, lambda = 0: sqrt(0.75 * 4) + sqrt(0.25 * 9) = 1.7320508 + 1.5 = 3.2320508.
        let r0 = ReGrad {
            lambda: 0.0,
            request: GradRequest::PLAIN,
        };
        assert!((r0.score(&ev).unwrap()[0] - 3.232_051).abs() < 1e-5);
        // REGrad, lambda = 0.3: a_1^2 = e^0.6 = 1.8221188, a_2^2 = e^1.2 = 3.3201169.
        // class 0: 1 * 1.8221188 + 3 * 3.3201169 = 11.7824695; sqrt(0.75 * 11.7824695) = 2.9726576
        // class 1: 4 * 1.8221188 + 5 * 3.3201169 = 23.8890597; sqrt(0.25 * 23.8890597) = 2.4438221
        let got = ReGrad::DEFAULT.score(&ev).unwrap()[0];
        assert!((got - 5.416_479_7).abs() < 1e-4, "{got}");
        // V-term, C = 2: V = |0.75 - 0.5| + |0.25 - 0.5| = 0.5; score = 2 * 0.5 - 0.5 = 0.5.
        assert!((ExGradV.score(&ev).unwrap()[0] - 0.5).abs() < 1e-6);
    }

    #[test]
    fn negrad_without_its_row_is_an_error_and_names_differ() {
        let ev = evidence(vec![0.5, 0.5], vec![1.0, 1.0, 1.0, 1.0], 1, 2, 2, 2);
        assert!(matches!(NeGrad.score(&ev), Err(ScoreError::Missing { .. })));
        assert_eq!(ReGrad::DEFAULT.name(), "regrad");
        assert_eq!(ReGrad::STAR.name(), "regrad-star");
        assert!(Needs::grads(GradRequest::PLAIN)
            .union(ReGrad::STAR.needs())
            .is_none());
    }

    proptest! {
        #[test]
        fn scores_are_non_negative_and_lambda_zero_is_class_weighted(
            c in 2usize..6, layers in 1usize..5,
            logits in proptest::collection::vec(-5.0f32..5.0, 6),
            sq in proptest::collection::vec(0.0f32..10.0, 6 * 5),
        ) {
            let z = &logits[..c];
            let m = z.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            let e: Vec<f32> = z.iter().map(|v| (v - m).exp()).collect();
            let s: f32 = e.iter().sum();
            let p: Vec<f32> = e.iter().map(|v| v / s).collect();
            let sq = sq[..c * layers].to_vec();
            let ev = evidence(p.clone(), sq.clone(), 1, c, c, layers);
            for sc in [&ExGrad as &dyn Scorer, &UnGrad, &GradNorm, &ExGradV, &ReGrad::DEFAULT] {
                let v = sc.score(&ev).unwrap()[0];
                prop_assert!(v.is_finite() && v >= 0.0, "{} {v}", sc.name());
            }
            // lambda = 0: sum_c sqrt(p_c ||g_c||^2), computed directly.
            let want: f64 = (0..c).map(|k| (f64::from(p[k]) * sq[k * layers..(k + 1) * layers].iter().map(|&v| f64::from(v)).sum::<f64>()).sqrt()).sum();
            let got = ReGrad { lambda: 0.0, request: GradRequest::PLAIN }.score(&ev).unwrap()[0];
            prop_assert!((f64::from(got) - want).abs() <= 1e-4 * want.max(1.0));
        }
    }
}
