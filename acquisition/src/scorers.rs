//! The classic probability-based scorers: predictive entropy, least confidence and margin.
//!
//! Each reads probabilities `(n, c)` and returns one score per row, higher = label first.
//! They accumulate in `f64` and treat `0 * ln 0` as 0, so they never produce NaN on valid
//! probability vectors.

use crate::{Evidence, Needs, ScoreError, Scorer};

/// Predictive entropy `H[p] = -sum_c p_c ln p_c` (nats); in `[0, ln C]`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Entropy;

/// Least confidence `1 - max_c p_c`; in `[0, 1 - 1/C]`.
#[derive(Debug, Clone, Copy, Default)]
pub struct LeastConfidence;

/// Margin `1 - (p_(1) - p_(2))`, the top-two gap subtracted from 1; in `[0, 1]`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Margin;

/// Entropy of one probability row, in nats, with `0 ln 0 = 0`.
pub(crate) fn entropy(p: &[f32]) -> f64 {
    -p.iter()
        .map(|&v| {
            let v = f64::from(v);
            if v > 0.0 {
                v * v.ln()
            } else {
                0.0
            }
        })
        .sum::<f64>()
}

/// The two largest entries of a row (the second is 0 for a single class).
fn top_two(p: &[f32]) -> (f32, f32) {
    let mut first = f32::NEG_INFINITY;
    let mut second = 0.0_f32;
    let mut seen_first = false;
    for &v in p {
        if !seen_first || v > first {
            if seen_first {
                second = first;
            }
            first = v;
            seen_first = true;
        } else if v > second {
            second = v;
        }
    }
    (first, second)
}

fn per_row(ev: &Evidence, name: &str, f: impl Fn(&[f32]) -> f64) -> Result<Vec<f32>, ScoreError> {
    Ok(ev.probs(name)?.rows().map(|r| f(r) as f32).collect())
}

impl Scorer for Entropy {
    fn name(&self) -> &str {
        "entropy"
    }
    fn needs(&self) -> Needs {
        Needs::PROBS
    }
    fn score(&self, ev: &Evidence) -> Result<Vec<f32>, ScoreError> {
        per_row(ev, self.name(), |p| entropy(p).max(0.0))
    }
}

impl Scorer for LeastConfidence {
    fn name(&self) -> &str {
        "least-confidence"
    }
    fn needs(&self) -> Needs {
        Needs::PROBS
    }
    fn score(&self, ev: &Evidence) -> Result<Vec<f32>, ScoreError> {
        per_row(ev, self.name(), |p| 1.0 - f64::from(top_two(p).0))
    }
}

impl Scorer for Margin {
    fn name(&self) -> &str {
        "margin"
    }
    fn needs(&self) -> Needs {
        Needs::PROBS
    }
    fn score(&self, ev: &Evidence) -> Result<Vec<f32>, ScoreError> {
        per_row(ev, self.name(), |p| {
            let (a, b) = top_two(p);
            1.0 - (f64::from(a) - f64::from(b))
        })
    }
}

/// The closed set of built-in probability scorers, for configs and the CLI.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Builtin {
    /// [`Entropy`].
    Entropy,
    /// [`LeastConfidence`].
    LeastConfidence,
    /// [`Margin`].
    Margin,
}

impl Builtin {
    /// All built-in scorers.
    pub const ALL: [Builtin; 3] = [Builtin::Entropy, Builtin::LeastConfidence, Builtin::Margin];

    fn inner(self) -> &'static dyn Scorer {
        match self {
            Builtin::Entropy => &Entropy,
            Builtin::LeastConfidence => &LeastConfidence,
            Builtin::Margin => &Margin,
        }
    }
}

impl Scorer for Builtin {
    fn name(&self) -> &str {
        self.inner().name()
    }
    fn needs(&self) -> Needs {
        self.inner().needs()
    }
    fn score(&self, ev: &Evidence) -> Result<Vec<f32>, ScoreError> {
        self.inner().score(ev)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Probs;
    use proptest::prelude::*;

    fn ev(rows: &[&[f32]]) -> Evidence {
        let c = rows[0].len();
        let data: Vec<f32> = rows.iter().flat_map(|r| r.iter().copied()).collect();
        Evidence::from_probs(Probs::new(data, rows.len(), c).unwrap())
    }

    #[test]
    fn hand_worked_values() {
        // Row 0: uniform over 4 classes: H = ln 4 = 1.3862944; LC = 0.75; margin = 1 - 0 = 1.
        // Row 1: one-hot: H = 0 (0 ln 0 = 0, no NaN); LC = 0; margin = 1 - (1 - 0) = 0.
        // Row 2: (0.5, 0.3, 0.2, 0): H = -(.5 ln .5 + .3 ln .3 + .2 ln .2)
        //        = 0.3465736 + 0.3611918 + 0.3218876 = 1.0296530; LC = 0.5;
        //        margin = 1 - (0.5 - 0.3) = 0.8.
        let e = ev(&[
            &[0.25, 0.25, 0.25, 0.25],
            &[1.0, 0.0, 0.0, 0.0],
            &[0.5, 0.3, 0.2, 0.0],
        ]);
        let h = Entropy.score(&e).unwrap();
        let lc = LeastConfidence.score(&e).unwrap();
        let m = Margin.score(&e).unwrap();
        for (got, want) in h.iter().zip([1.386_294_4, 0.0, 1.029_653]) {
            assert!((got - want).abs() < 1e-6, "{got} vs {want}");
        }
        for (got, want) in lc.iter().zip([0.75, 0.0, 0.5]) {
            assert!((got - want).abs() < 1e-6, "{got} vs {want}");
        }
        for (got, want) in m.iter().zip([1.0, 0.0, 0.8]) {
            assert!((got - want).abs() < 1e-6, "{got} vs {want}");
        }
    }

    #[test]
    fn margin_with_tied_top_two_is_one() {
        let m = Margin.score(&ev(&[&[0.4, 0.4, 0.2]])).unwrap();
        assert!((m[0] - 1.0).abs() < 1e-6);
    }

    #[test]
    fn missing_probabilities_is_an_error() {
        let err = Entropy.score(&Evidence::default()).unwrap_err();
        assert!(matches!(err, ScoreError::Missing { .. }), "{err}");
    }

    #[test]
    fn invalid_probabilities_are_rejected() {
        assert!(matches!(
            Probs::new(vec![0.5, 0.6], 1, 2),
            Err(ScoreError::NotProbabilities { row: 0, .. })
        ));
        assert!(matches!(
            Probs::new(vec![f32::NAN, 1.0], 1, 2),
            Err(ScoreError::NotProbabilities { .. })
        ));
        assert!(matches!(
            Probs::new(vec![1.0; 5], 2, 2),
            Err(ScoreError::Shape { .. })
        ));
    }

    /// Random probability rows: `c` in 2..=12, softmax of arbitrary logits (some very peaked so
    /// that entries underflow to exactly 0).
    fn prob_rows() -> impl Strategy<Value = (Vec<f32>, usize, usize)> {
        (2usize..=12, 1usize..=6).prop_flat_map(|(c, n)| {
            proptest::collection::vec(-60.0f32..60.0, c * n).prop_map(move |logits| {
                let mut p = Vec::with_capacity(c * n);
                for row in logits.chunks(c) {
                    let m = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                    let e: Vec<f64> = row.iter().map(|&l| f64::from(l - m).exp()).collect();
                    let s: f64 = e.iter().sum();
                    p.extend(e.iter().map(|v| (v / s) as f32));
                }
                (p, n, c)
            })
        })
    }

    proptest! {
        #[test]
        fn scores_are_finite_and_in_range((p, n, c) in prob_rows()) {
            let e = Evidence::from_probs(Probs::new(p, n, c).unwrap());
            let ln_c = (c as f32).ln();
            for s in Entropy.score(&e).unwrap() {
                prop_assert!(s.is_finite() && (0.0..=ln_c + 1e-5).contains(&s));
            }
            for s in LeastConfidence.score(&e).unwrap() {
                prop_assert!(s.is_finite() && (-1e-6..=1.0 - 1.0 / c as f32 + 1e-5).contains(&s));
            }
            for s in Margin.score(&e).unwrap() {
                prop_assert!(s.is_finite() && (-1e-6..=1.0 + 1e-6).contains(&s));
            }
        }

        #[test]
        fn scores_are_invariant_to_class_permutation((p, n, c) in prob_rows(), shift in 1usize..12) {
            // Rotating the classes of every row must not change any score.
            let rotated: Vec<f32> = p.chunks(c).flat_map(|r| {
                let mut r = r.to_vec();
                r.rotate_left(shift % c);
                r
            }).collect();
            let a = Evidence::from_probs(Probs::new(p, n, c).unwrap());
            let b = Evidence::from_probs(Probs::new(rotated, n, c).unwrap());
            for s in Builtin::ALL {
                let (x, y) = (s.score(&a).unwrap(), s.score(&b).unwrap());
                for (u, v) in x.iter().zip(&y) {
                    prop_assert!((u - v).abs() < 1e-5, "{} {u} {v}", s.name());
                }
            }
        }

        #[test]
        fn uniform_maximises_every_score(c in 2usize..=20) {
            // The uniform row is the most uncertain possible: ln C, 1 - 1/C, and margin 1.
            let u = vec![1.0 / c as f32; c];
            let e = Evidence::from_probs(Probs::new(u, 1, c).unwrap());
            prop_assert!((Entropy.score(&e).unwrap()[0] - (c as f32).ln()).abs() < 1e-5);
            prop_assert!((LeastConfidence.score(&e).unwrap()[0] - (1.0 - 1.0 / c as f32)).abs() < 1e-5);
            prop_assert!((Margin.score(&e).unwrap()[0] - 1.0).abs() < 1e-5);
        }
    }
}

/// DUQ's uncertainty `1 - max_c K_c` (van Amersfoort et al. 2020) over RBF kernel values; in
/// `[0, 1]`, near 1 far from every class centroid.
#[derive(Debug, Clone, Copy, Default)]
pub struct DuqCertainty;

impl Scorer for DuqCertainty {
    fn name(&self) -> &str {
        "duq"
    }
    fn needs(&self) -> Needs {
        Needs::KERNEL
    }
    fn score(&self, ev: &Evidence) -> Result<Vec<f32>, ScoreError> {
        let k = ev.kernel(self.name())?;
        Ok((0..k.n())
            .map(|i| 1.0 - k.row(i).iter().cloned().fold(0.0f32, f32::max))
            .collect())
    }
}

#[cfg(test)]
mod duq_tests {
    use super::*;
    use crate::Kernel;

    #[test]
    fn duq_is_one_minus_the_largest_kernel_value() {
        // Rows (0.9, 0.2) -> 0.1; (0.05, 0.01) -> 0.95 (far from both centroids); rows need
        // not sum to 1.
        let ev = Evidence {
            kernel: Some(Kernel::new(vec![0.9, 0.2, 0.05, 0.01], 2, 2).unwrap()),
            ..Evidence::default()
        };
        let s = DuqCertainty.score(&ev).unwrap();
        assert!((s[0] - 0.1).abs() < 1e-6 && (s[1] - 0.95).abs() < 1e-6);
        assert!(Kernel::new(vec![1.5, 0.0], 1, 2).is_err());
        assert!(DuqCertainty.score(&Evidence::default()).is_err());
    }
}
