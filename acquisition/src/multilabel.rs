//! Multi-label evidence and the scores over it: a probability per label that the label
//! applies, `(m, n, L)` over `m` draws of the model (an ensemble's members, MC-dropout passes,
//! or the one prediction of a single model), the labels independent given the item (sigmoid
//! heads).
//!
//! With `p_l` the mean over draws of label `l`'s probability and `h(p) = -p ln p - (1 - p)
//! ln(1 - p)` the binary entropy (nats), the scores are
//! - `entropy-mean`: `mean_l h(p_l)`, every label's doubt alike;
//! - `entropy-max`: `max_l h(p_l)`, the most doubtful label (a margin taken by the max ranks
//!   the candidates exactly as this does: both fall with `|p - 0.5|`);
//! - `margin-mean`: `mean_l (1 - |2 p_l - 1|)`, one minus the mean margin between a label's
//!   two answers;
//! - `entropy-cardinality`: `entropy-mean x (1 + |c(x) - c_lab|)`, `c(x)` the number of labels
//!   predicted at 0.5 and `c_lab` the labeled items' mean count: after Li & Guo (IJCAI 2013),
//!   who weigh uncertainty by how far an item's predicted label count is from what the
//!   labeled data show (alkit's product form; their paper mixes the two with an exponent);
//! - `bald-sum`: `sum_l [h(p_l) - mean_j h(p_jl)]`, each label's mutual information between
//!   its answer and the weights, summed (labels independent given the weights); it needs two
//!   or more draws.
//!
//! Sums over labels run in `f64`; every score is finite and non-negative.

use crate::{Evidence, Needs, SampleRequest, ScoreError, Scorer};

/// Label probabilities `(m, n, L)`: draws, candidates, labels; each in `[0, 1]`. Optionally the
/// labeled items' mean label count, which `entropy-cardinality` reads.
#[derive(Debug, Clone, PartialEq)]
pub struct LabelProbs {
    probs: Vec<f32>,
    m: usize,
    n: usize,
    l: usize,
    cardinality: Option<f64>,
}

impl LabelProbs {
    /// Wraps row-major probabilities `(m, n, L)`, checking the shape and that each is a finite
    /// value in `[0, 1]`.
    pub fn new(probs: Vec<f32>, m: usize, n: usize, l: usize) -> Result<Self, ScoreError> {
        let len = m.checked_mul(n).and_then(|v| v.checked_mul(l));
        if m == 0 || l == 0 || len != Some(probs.len()) {
            return Err(ScoreError::Shape {
                what: "label probabilities",
                expected: format!("({m}, {n}, {l}) with m, L > 0"),
                got: format!("{} values", probs.len()),
            });
        }
        if let Some(i) = probs.iter().position(|p| !(0.0..=1.0).contains(p)) {
            return Err(ScoreError::NonFinite {
                position: (i / l) % n,
                value: probs[i],
            });
        }
        Ok(Self {
            probs,
            m,
            n,
            l,
            cardinality: None,
        })
    }

    /// The same probabilities with the labeled items' mean label count `c` (finite, `>= 0`).
    pub fn with_cardinality(mut self, c: f64) -> Result<Self, ScoreError> {
        if !(c.is_finite() && c >= 0.0) {
            return Err(ScoreError::Setting {
                setting: "cardinality",
                why: format!("{c}; expected a finite count >= 0"),
            });
        }
        self.cardinality = Some(c);
        Ok(self)
    }

    /// Number of draws `m`.
    pub fn draws(&self) -> usize {
        self.m
    }

    /// Number of candidates `n`.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Number of labels `L`.
    pub fn labels(&self) -> usize {
        self.l
    }

    /// Draw `j`'s probabilities for candidate `i` `(L,)`.
    pub fn row(&self, j: usize, i: usize) -> &[f32] {
        let at = (j * self.n + i) * self.l;
        &self.probs[at..at + self.l]
    }

    /// The mean over draws `(n, L)`, row-major, in `f64`.
    pub fn mean(&self) -> Vec<f64> {
        let mut out = vec![0f64; self.n * self.l];
        for j in 0..self.m {
            let draw = &self.probs[j * self.n * self.l..(j + 1) * self.n * self.l];
            for (o, &p) in out.iter_mut().zip(draw) {
                *o += f64::from(p);
            }
        }
        let m = self.m as f64;
        out.iter_mut().for_each(|o| *o /= m);
        out
    }
}

/// Binary entropy `h(p)` in nats, `0` at `p` = 0 or 1.
pub fn binary_entropy(p: f64) -> f64 {
    let part = |q: f64| if q > 0.0 { -q * q.ln() } else { 0.0 };
    part(p) + part(1.0 - p)
}

/// The scores over label probabilities (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelScore {
    /// Mean binary entropy over labels.
    EntropyMean,
    /// Largest binary entropy over labels.
    EntropyMax,
    /// One minus the mean margin `|2p - 1|` over labels.
    MarginMean,
    /// Mean entropy weighted by the distance of the predicted label count from the labeled
    /// items' mean count.
    EntropyCardinality,
    /// Per-label mutual information with the weights, summed (two or more draws).
    BaldSum,
}

impl LabelScore {
    /// The registry's name.
    pub fn name(self) -> &'static str {
        match self {
            LabelScore::EntropyMean => "entropy-mean",
            LabelScore::EntropyMax => "entropy-max",
            LabelScore::MarginMean => "margin-mean",
            LabelScore::EntropyCardinality => "entropy-cardinality",
            LabelScore::BaldSum => "bald-sum",
        }
    }

    /// One score per candidate of `p`.
    pub fn scores(self, p: &LabelProbs) -> Result<Vec<f32>, ScoreError> {
        if self == LabelScore::BaldSum && p.draws() < 2 {
            return Err(ScoreError::Missing {
                scorer: self.name().into(),
                evidence: "two or more draws (an ensemble's members or MC-dropout passes)",
            });
        }
        let card = match (self, p.cardinality) {
            (LabelScore::EntropyCardinality, None) => {
                return Err(ScoreError::Missing {
                    scorer: self.name().into(),
                    evidence: "the labeled items' mean label count",
                })
            }
            (_, c) => c.unwrap_or(0.0),
        };
        let mean = p.mean();
        let l = p.labels();
        let scores = (0..p.n())
            .map(|i| {
                let row = &mean[i * l..(i + 1) * l];
                self.of(p, i, row, card) as f32
            })
            .collect::<Vec<f32>>();
        if let Some(i) = scores.iter().position(|v| !v.is_finite()) {
            return Err(ScoreError::NonFinite {
                position: i,
                value: scores[i],
            });
        }
        Ok(scores)
    }

    /// Candidate `i`'s score from its mean probabilities `row (L,)`.
    fn of(self, p: &LabelProbs, i: usize, row: &[f64], card: f64) -> f64 {
        let l = row.len() as f64;
        let entropy_mean = || row.iter().map(|&q| binary_entropy(q)).sum::<f64>() / l;
        match self {
            LabelScore::EntropyMean => entropy_mean(),
            LabelScore::EntropyMax => row.iter().map(|&q| binary_entropy(q)).fold(0.0, f64::max),
            LabelScore::MarginMean => {
                row.iter()
                    .map(|&q| 1.0 - (2.0 * q - 1.0).abs())
                    .sum::<f64>()
                    / l
            }
            LabelScore::EntropyCardinality => {
                let predicted = row.iter().filter(|&&q| q >= 0.5).count() as f64;
                entropy_mean() * (1.0 + (predicted - card).abs())
            }
            LabelScore::BaldSum => {
                let m = p.draws() as f64;
                let expected: f64 = (0..p.draws())
                    .flat_map(|j| p.row(j, i).iter())
                    .map(|&q| binary_entropy(f64::from(q)))
                    .sum::<f64>()
                    / m;
                let total: f64 = row.iter().map(|&q| binary_entropy(q)).sum();
                // Jensen makes the difference >= 0; rounding can leave -1e-16.
                (total - expected).max(0.0)
            }
        }
    }
}

/// A [`LabelScore`] over draws taken as `request` says.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LabelScorer {
    /// What is scored.
    pub score: LabelScore,
    /// The draws: [`SampleRequest::Members`] reads an ensemble's members (or a single
    /// model's one prediction), [`SampleRequest::McDropout`] dropout passes.
    pub request: SampleRequest,
}

impl Scorer for LabelScorer {
    fn name(&self) -> &str {
        self.score.name()
    }
    fn needs(&self) -> Needs {
        Needs::labels(self.request)
    }
    fn score(&self, evidence: &Evidence) -> Result<Vec<f32>, ScoreError> {
        self.score.scores(evidence.labels(self.name())?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(p: f64) -> f64 {
        -p * p.ln() - (1.0 - p) * (1.0 - p).ln()
    }

    #[test]
    fn scores_match_the_formulas_worked_by_hand() {
        // One draw, two candidates, two labels: (0.5, 0.9) and (0.1, 0.2).
        let p = LabelProbs::new(vec![0.5, 0.9, 0.1, 0.2], 1, 2, 2)
            .unwrap()
            .with_cardinality(1.0)
            .unwrap();
        let close = |a: f32, b: f64| assert!((f64::from(a) - b).abs() < 1e-6, "{a} vs {b}");
        let s = LabelScore::EntropyMean.scores(&p).unwrap();
        close(s[0], (h(0.5) + h(0.9)) / 2.0);
        close(s[1], (h(0.1) + h(0.2)) / 2.0);
        let s = LabelScore::EntropyMax.scores(&p).unwrap();
        close(s[0], 2f64.ln());
        close(s[1], h(0.2));
        let s = LabelScore::MarginMean.scores(&p).unwrap();
        close(s[0], (1.0 + 0.2) / 2.0);
        close(s[1], (0.2 + 0.4) / 2.0);
        // Predicted counts 2 and 0 against a labeled mean of 1: both weighted by 2.
        let s = LabelScore::EntropyCardinality.scores(&p).unwrap();
        close(s[0], 2.0 * (h(0.5) + h(0.9)) / 2.0);
        close(s[1], 2.0 * (h(0.1) + h(0.2)) / 2.0);
        let e = LabelScore::BaldSum.scores(&p).unwrap_err();
        assert!(e.to_string().contains("two or more draws"), "{e}");
    }

    #[test]
    fn bald_sums_each_labels_disagreement() {
        // Two draws, one candidate, two labels: (0.2, 0.5) and (0.8, 0.5).
        let p = LabelProbs::new(vec![0.2, 0.5, 0.8, 0.5], 2, 1, 2).unwrap();
        let s = LabelScore::BaldSum.scores(&p).unwrap()[0];
        let want = (h(0.5) - h(0.2)) + 0.0;
        assert!((f64::from(s) - want).abs() < 1e-6, "{s} vs {want}");
    }

    #[test]
    fn bad_probabilities_and_a_missing_count_are_refused() {
        assert!(LabelProbs::new(vec![0.5; 3], 1, 2, 2).is_err());
        assert!(LabelProbs::new(vec![0.5, 1.5], 1, 1, 2).is_err());
        assert!(LabelProbs::new(vec![0.5, f32::NAN], 1, 1, 2).is_err());
        let p = LabelProbs::new(vec![0.5, 0.5], 1, 1, 2).unwrap();
        assert!(p.clone().with_cardinality(-1.0).is_err());
        let e = LabelScore::EntropyCardinality.scores(&p).unwrap_err();
        assert!(e.to_string().contains("mean label count"), "{e}");
    }
}
