//! Platt scaling (Platt 1999): a binary classifier's score `s` becomes the probability
//! `sigmoid(a s + b)` of the positive class, `a` and `b` fitted on held-out items by the
//! likelihood of Platt's smoothed targets.
//!
//! The targets are `(N+ + 1) / (N+ + 2)` for positives and `1 / (N- + 2)` for negatives
//! (Platt's prior correction), as scikit-learn's `CalibratedClassifierCV(method="sigmoid")`
//! uses: they keep the optimum finite when the held-out items are separated perfectly, which
//! a network's scores on easy data usually are. Multi-class models have temperature scaling
//! ([`fit_temperature`](super::fit_temperature)) instead.

use crate::error::{Error, Result};

/// Newton steps at most; the loss is convex and smooth, so a handful reach `f64` precision.
const MAX_STEPS: usize = 100;

/// A fitted Platt scaling: `P(positive | s) = sigmoid(slope * s + intercept)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Platt {
    /// `a`.
    pub slope: f64,
    /// `b`.
    pub intercept: f64,
}

/// `ln(1 + e^z)` without overflow.
fn softplus(z: f64) -> f64 {
    z.max(0.0) + (-z.abs()).exp().ln_1p()
}

fn sigmoid(z: f64) -> f64 {
    if z >= 0.0 {
        1.0 / (1.0 + (-z).exp())
    } else {
        let e = z.exp();
        e / (1.0 + e)
    }
}

impl Platt {
    /// Fits `a` and `b` to held-out `scores` and whether each item is `positive`, by Newton's
    /// method with backtracking on the cross-entropy of Platt's targets. Refuses an empty set,
    /// lengths that differ and a non-finite score (naming the item).
    pub fn fit(scores: &[f64], positive: &[bool]) -> Result<Platt> {
        if scores.is_empty() || scores.len() != positive.len() {
            return Err(Error::config(
                "scores",
                format!(
                    "{} scores for {} labels; Platt scaling needs one score per held-out item",
                    scores.len(),
                    positive.len()
                ),
            ));
        }
        if let Some(i) = scores.iter().position(|s| !s.is_finite()) {
            return Err(Error::config(
                "scores",
                format!("item {i} has a non-finite score ({})", scores[i]),
            ));
        }
        let pos = positive.iter().filter(|&&p| p).count() as f64;
        let neg = positive.len() as f64 - pos;
        let (hi, lo) = ((pos + 1.0) / (pos + 2.0), 1.0 / (neg + 2.0));
        let targets: Vec<f64> = positive.iter().map(|&p| if p { hi } else { lo }).collect();
        // Scores brought within [-1, 1] first: `s^2` in the Hessian overflows past 1e154, and
        // the fit is the same up to the slope's scale.
        let scale = scores.iter().fold(1f64, |m, s| m.max(s.abs()));
        let s: Vec<f64> = scores.iter().map(|v| v / scale).collect();
        let (a, b) = newton(&s, &targets, ((pos + 1.0) / (neg + 1.0)).ln());
        let (ga, gb) = gradient(&s, &targets, a, b);
        let residual = ga.abs() + gb.abs();
        if residual.is_nan() || residual > 1e-7 * s.len() as f64 {
            return Err(Error::config(
                "scores",
                format!(
                    "Platt scaling did not converge in {MAX_STEPS} Newton steps (gradient \
                     {ga:e}, {gb:e}); check the scores for extreme outliers"
                ),
            ));
        }
        Ok(Platt {
            slope: a / scale,
            intercept: b,
        })
    }

    /// `P(positive | s)`.
    pub fn probability(&self, score: f64) -> f64 {
        sigmoid(self.slope * score + self.intercept)
    }
}

/// `sum_i (sigmoid(a s_i + b) - t_i) (s_i, 1)`: the gradient of the cross-entropy.
fn gradient(s: &[f64], t: &[f64], a: f64, b: f64) -> (f64, f64) {
    s.iter().zip(t).fold((0.0, 0.0), |(ga, gb), (s, t)| {
        let d = sigmoid(a * s + b) - t;
        (ga + d * s, gb + d)
    })
}

/// The cross-entropy of `sigmoid(a s + b)` against the targets `t`, minimised over `(a, b)` by
/// Newton's method with backtracking from `(0, b0)`.
fn newton(s: &[f64], t: &[f64], b0: f64) -> (f64, f64) {
    let loss = |a: f64, b: f64| -> f64 {
        s.iter()
            .zip(t)
            .map(|(s, t)| {
                let z = a * s + b;
                softplus(z) - t * z
            })
            .sum()
    };
    let (mut a, mut b) = (0.0, b0);
    let mut f = loss(a, b);
    for _ in 0..MAX_STEPS {
        let (mut ga, mut gb, mut haa, mut hab, mut hbb) = (0.0, 0.0, 0.0, 0.0, 0.0);
        for (s, t) in s.iter().zip(t) {
            let p = sigmoid(a * s + b);
            let (d, w) = (p - t, p * (1.0 - p));
            ga += d * s;
            gb += d;
            haa += w * s * s;
            hab += w * s;
            hbb += w;
        }
        // A tiny ridge keeps the step defined when every score is equal (then only `a s + b`
        // is determined, and the ridge picks the smallest step reaching it).
        let ridge = 1e-12 * (1.0 + haa + hbb);
        let (haa, hbb) = (haa + ridge, hbb + ridge);
        let det = haa * hbb - hab * hab;
        let (da, db) = ((hbb * ga - hab * gb) / det, (haa * gb - hab * ga) / det);
        let slope = ga * da + gb * db;
        if !(slope.is_finite() && slope > 1e-24 * (1.0 + f.abs())) {
            break;
        }
        let mut step = 1.0;
        let accepted = loop {
            let (na, nb) = (a - step * da, b - step * db);
            let nf = loss(na, nb);
            if nf <= f - 1e-4 * step * slope {
                break Some((na, nb, nf));
            }
            step /= 2.0;
            if step < 1e-12 {
                break None;
            }
        };
        let Some((na, nb, nf)) = accepted else { break };
        (a, b, f) = (na, nb, nf);
    }
    (a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gradient_vanishes_at_the_fit_and_hostile_inputs_are_named() {
        let s = [-2.0, -0.5, 0.1, 0.4, 1.5, 3.0, -1.0, 0.8];
        let y = [false, false, true, false, true, true, true, false];
        let p = Platt::fit(&s, &y).unwrap();
        let (pos, neg) = (4.0, 4.0);
        let (ga, gb) = s.iter().zip(&y).fold((0.0, 0.0), |(ga, gb), (s, &y)| {
            let t = if y {
                (pos + 1.0) / (pos + 2.0)
            } else {
                1.0 / (neg + 2.0)
            };
            let d = p.probability(*s) - t;
            (ga + d * s, gb + d)
        });
        assert!(ga.abs() < 1e-10 && gb.abs() < 1e-10, "{ga} {gb}");
        // Perfectly separated items still give a finite fit.
        let sep = Platt::fit(&[-3.0, -1.0, 1.0, 3.0], &[false, false, true, true]).unwrap();
        assert!(sep.slope.is_finite() && sep.slope > 0.0);
        // Equal scores: the intercept alone matches the smoothed positive rate.
        let flat = Platt::fit(&[0.5; 4], &[true, false, false, false]).unwrap();
        assert!((flat.probability(0.5) - (2.0 / 3.0 + 3.0 / 5.0) / 4.0).abs() < 1e-9);
        let err = Platt::fit(&[0.0, f64::NAN], &[true, false]).unwrap_err();
        assert!(err.to_string().contains("item 1"), "{err}");
        assert!(Platt::fit(&[], &[]).is_err());
        // Scores near the largest float fit as their scaled copies do.
        let big: Vec<f64> = s.iter().map(|v| v * 1e300).collect();
        let fit = Platt::fit(&big, &y).unwrap();
        assert!(
            (fit.slope * 1e300 - p.slope).abs() < 1e-9 * p.slope.abs(),
            "{fit:?} vs {p:?}"
        );
        assert!(
            (fit.intercept - p.intercept).abs() < 1e-9,
            "{fit:?} vs {p:?}"
        );
        assert!(Platt::fit(&[1.0], &[true, false]).is_err());
    }
}
