//! Regression evidence and the scores over it: Gaussian predictions `N(mu, sigma^2)` per
//! candidate and output, one per draw of the model (the members of a deep ensemble, MC-dropout
//! passes, or the one head of a single model).
//!
//! With `m` draws of means `mu_j` and variances `s_j^2`, the predictive distribution is their
//! equal mixture. Its variance splits exactly into
//! - the aleatoric part, the mean of the variances `mean_j s_j^2` (noise the model expects in
//!   the target, which labeling does not remove), and
//! - the epistemic part, the variance of the means `mean_j (mu_j - mean mu)^2` (disagreement
//!   between draws, which labeling removes);
//!
//! their sum is the total variance. The mutual information between the target and the
//! weights, `H[y] - E_j H[y | j]`, has no closed form for a mixture; [`GaussScore::MutualInfo`]
//! takes the entropy of the moment-matched Gaussian for `H[y]` (an upper bound), which gives
//! `0.5 ln(total) - mean_j 0.5 ln(s_j^2)`: zero for one draw, growing with disagreement.
//!
//! Every score sums over the outputs, in the units the model predicts in (standardised
//! targets for alkit's models), so that outputs of different units weigh alike.

use crate::{Evidence, Needs, SampleRequest, ScoreError, Scorer};

/// Gaussian predictions `(m, n, k)`: draws, candidates, outputs; means and variances.
#[derive(Debug, Clone, PartialEq)]
pub struct Gaussian {
    means: Vec<f32>,
    vars: Vec<f32>,
    m: usize,
    n: usize,
    k: usize,
}

impl Gaussian {
    /// Wraps row-major means and variances `(m, n, k)`, checking the shape, that every mean
    /// is finite and every variance finite and positive.
    pub fn new(
        means: Vec<f32>,
        vars: Vec<f32>,
        m: usize,
        n: usize,
        k: usize,
    ) -> Result<Self, ScoreError> {
        let len = m.checked_mul(n).and_then(|v| v.checked_mul(k));
        if m == 0 || k == 0 || len != Some(means.len()) || len != Some(vars.len()) {
            return Err(ScoreError::Shape {
                what: "Gaussian predictions",
                expected: format!("means and variances ({m}, {n}, {k}) with m, k > 0"),
                got: format!("{} means, {} variances", means.len(), vars.len()),
            });
        }
        let item = |i: usize| (i / k) % n;
        if let Some(i) = means.iter().position(|v| !v.is_finite()) {
            return Err(ScoreError::NonFinite {
                position: item(i),
                value: means[i],
            });
        }
        if let Some(i) = vars.iter().position(|v| !(v.is_finite() && *v > 0.0)) {
            return Err(ScoreError::NonFinite {
                position: item(i),
                value: vars[i],
            });
        }
        Ok(Self {
            means,
            vars,
            m,
            n,
            k,
        })
    }

    /// Number of draws `m`.
    pub fn draws(&self) -> usize {
        self.m
    }

    /// Number of candidates `n`.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Number of outputs `k`.
    pub fn outputs(&self) -> usize {
        self.k
    }

    /// Mean and variance of draw `j` for candidate `i`, output `o`.
    pub fn get(&self, j: usize, i: usize, o: usize) -> (f32, f32) {
        let at = (j * self.n + i) * self.k + o;
        (self.means[at], self.vars[at])
    }

    /// The mixture's moments for candidate `i`, output `o`, in `f64`.
    pub fn moments(&self, i: usize, o: usize) -> Moments {
        let m = self.m as f64;
        let (mut mean, mut alea, mut log_var) = (0f64, 0f64, 0f64);
        for j in 0..self.m {
            let (mu, v) = self.get(j, i, o);
            mean += f64::from(mu);
            alea += f64::from(v);
            log_var += f64::from(v).ln();
        }
        mean /= m;
        let epistemic = (0..self.m)
            .map(|j| (f64::from(self.get(j, i, o).0) - mean).powi(2))
            .sum::<f64>()
            / m;
        Moments {
            mean,
            aleatoric: alea / m,
            epistemic,
            mean_log_var: log_var / m,
        }
    }

    /// The mixture's predictive mean and total variance `(n, k)` each, row-major.
    pub fn predictive(&self) -> (Vec<f64>, Vec<f64>) {
        let mut means = Vec::with_capacity(self.n * self.k);
        let mut vars = Vec::with_capacity(self.n * self.k);
        for i in 0..self.n {
            for o in 0..self.k {
                let mo = self.moments(i, o);
                means.push(mo.mean);
                vars.push(mo.total());
            }
        }
        (means, vars)
    }
}

/// A Gaussian mixture's moments for one candidate and output.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Moments {
    /// Mean of the draws' means.
    pub mean: f64,
    /// Mean of the draws' variances.
    pub aleatoric: f64,
    /// Variance of the draws' means.
    pub epistemic: f64,
    /// Mean of the draws' log variances.
    pub mean_log_var: f64,
}

impl Moments {
    /// Total predictive variance: aleatoric plus epistemic.
    pub fn total(&self) -> f64 {
        self.aleatoric + self.epistemic
    }
}

/// The scores over Gaussian predictions (module docs), summed over outputs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum GaussScore {
    /// Total predictive variance.
    Variance,
    /// Variance of the draws' means (needs two or more draws).
    Epistemic,
    /// Mean of the draws' variances.
    Aleatoric,
    /// Moment-matched mutual information between the target and the weights (needs two or
    /// more draws).
    MutualInfo,
}

/// A [`GaussScore`] over draws taken as `request` says.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GaussScorer {
    /// What is scored.
    pub score: GaussScore,
    /// The draws: [`SampleRequest::Members`] reads an ensemble's members (or a single
    /// model's one head), [`SampleRequest::McDropout`] dropout passes.
    pub request: SampleRequest,
}

impl GaussScore {
    /// The registry's name.
    pub fn name(self) -> &'static str {
        match self {
            GaussScore::Variance => "variance",
            GaussScore::Epistemic => "epistemic",
            GaussScore::Aleatoric => "aleatoric",
            GaussScore::MutualInfo => "gauss-mi",
        }
    }

    /// Whether the score is zero for every candidate of a single draw.
    fn needs_draws(self) -> bool {
        matches!(self, GaussScore::Epistemic | GaussScore::MutualInfo)
    }

    fn of(self, mo: &Moments) -> f64 {
        match self {
            GaussScore::Variance => mo.total(),
            GaussScore::Epistemic => mo.epistemic,
            GaussScore::Aleatoric => mo.aleatoric,
            GaussScore::MutualInfo => 0.5 * mo.total().ln() - 0.5 * mo.mean_log_var,
        }
    }

    /// One score per candidate of `g`.
    pub fn scores(self, g: &Gaussian) -> Result<Vec<f32>, ScoreError> {
        if self.needs_draws() && g.draws() < 2 {
            return Err(ScoreError::Missing {
                scorer: self.name().into(),
                evidence: "two or more draws (an ensemble's members or MC-dropout passes)",
            });
        }
        let scores: Vec<f32> = (0..g.n())
            .map(|i| {
                (0..g.outputs())
                    .map(|o| self.of(&g.moments(i, o)))
                    .sum::<f64>() as f32
            })
            .collect();
        if let Some(i) = scores.iter().position(|v| !v.is_finite()) {
            return Err(ScoreError::NonFinite {
                position: i,
                value: scores[i],
            });
        }
        Ok(scores)
    }
}

impl Scorer for GaussScorer {
    fn name(&self) -> &str {
        self.score.name()
    }
    fn needs(&self) -> Needs {
        Needs::gaussian(self.request)
    }
    fn score(&self, evidence: &Evidence) -> Result<Vec<f32>, ScoreError> {
        self.score.scores(evidence.gaussian(self.name())?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_draws_split_the_variance_by_hand() {
        // One candidate, one output; draws N(1, 0.5) and N(3, 1.5).
        let g = Gaussian::new(vec![1.0, 3.0], vec![0.5, 1.5], 2, 1, 1).unwrap();
        let mo = g.moments(0, 0);
        assert_eq!(mo.mean, 2.0);
        assert_eq!(mo.aleatoric, 1.0);
        assert_eq!(mo.epistemic, 1.0);
        let v = GaussScore::Variance.scores(&g).unwrap()[0];
        assert_eq!(v, 2.0);
        let mi = GaussScore::MutualInfo.scores(&g).unwrap()[0] as f64;
        let want = 0.5 * 2f64.ln() - 0.25 * (0.5f64.ln() + 1.5f64.ln());
        assert!((mi - want).abs() < 1e-6, "{mi} vs {want}");
    }

    #[test]
    fn outputs_add_and_one_draw_has_no_epistemic_score() {
        // Two candidates, two outputs, one draw.
        let g = Gaussian::new(vec![0.0; 4], vec![1.0, 2.0, 3.0, 4.0], 1, 2, 2).unwrap();
        assert_eq!(GaussScore::Aleatoric.scores(&g).unwrap(), vec![3.0, 7.0]);
        let e = GaussScore::Epistemic.scores(&g).unwrap_err();
        assert!(e.to_string().contains("two or more draws"), "{e}");
    }

    #[test]
    fn bad_predictions_are_refused() {
        assert!(Gaussian::new(vec![0.0; 3], vec![1.0; 4], 1, 2, 2).is_err());
        let e = Gaussian::new(vec![0.0; 2], vec![1.0, 0.0], 1, 2, 1).unwrap_err();
        assert_eq!(
            e,
            ScoreError::NonFinite {
                position: 1,
                value: 0.0
            }
        );
        assert!(Gaussian::new(vec![f32::NAN, 0.0], vec![1.0; 2], 1, 2, 1).is_err());
    }
}
