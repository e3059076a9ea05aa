//! What one surface is: the model, the score and the data's settings ([`SurfaceSpec`]),
//! checked once before any work.

use crate::duq::DuqConfig;
use crate::error::Result;
use serde::Serialize;

/// An uncertainty score over stochastic (or single) predictions `(S, b, c)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SurfaceScore {
    /// `1 - max_c mean_s p`.
    MaxProb,
    /// Entropy of the mean prediction.
    Entropy,
    /// `(1/C) sum_c Var_s[p_c]`.
    ClassVariance,
    /// Mutual information (BALD).
    Bald,
}

/// Which model a surface shows.
#[derive(Debug, Clone, PartialEq)]
pub enum SurfaceModel {
    /// DUQ; score `1 - max_c K_c`.
    Duq(DuqConfig),
    /// One softmax ReLU MLP with these hidden widths.
    Mlp(Vec<usize>),
    /// An MLP with dropout `p` after each hidden layer, `samples` MC-dropout passes.
    McDropout {
        /// Hidden widths.
        hidden: Vec<usize>,
        /// Dropout probability.
        p: f32,
        /// Forward passes.
        samples: usize,
    },
    /// A softmax ReLU MLP with these hidden widths, its two-class logit difference Platt-scaled
    /// on validation moons ([`Platt`](crate::metrics::Platt)).
    Platt(Vec<usize>),
    /// A Bayes-by-backprop MLP ([`BayesMlp`](crate::nn::BayesMlp)): Gaussian weights with prior
    /// `N(0, prior_sigma^2)`, `samples` networks drawn from the posterior.
    BayesByBackprop {
        /// Hidden widths.
        hidden: Vec<usize>,
        /// Prior standard deviation of every weight and bias.
        prior_sigma: f64,
        /// Networks drawn.
        samples: usize,
    },
    /// `members` MLPs from different seeds and batch orders; anchored (Pearce et al. 2020)
    /// with strength `tau` when `anchor` is set.
    Ensemble {
        /// Hidden widths.
        hidden: Vec<usize>,
        /// Members.
        members: usize,
        /// Anchoring strength `tau`.
        anchor: Option<f64>,
    },
}

impl SurfaceModel {
    /// DUQ with `penalty` and otherwise its defaults.
    pub fn duq(penalty: crate::duq::Penalty) -> SurfaceModel {
        SurfaceModel::Duq(DuqConfig {
            settings: crate::duq::DuqSettings {
                penalty,
                ..Default::default()
            },
            ..Default::default()
        })
    }

    /// The two-moons softmax MLP: three hidden layers of 25.
    pub fn mlp() -> SurfaceModel {
        SurfaceModel::Mlp(vec![25, 25, 25])
    }

    /// The two-moons MC-dropout MLP: four hidden layers of 25, dropout 0.205, `samples`
    /// passes.
    pub fn mc_dropout(samples: usize) -> SurfaceModel {
        SurfaceModel::McDropout {
            hidden: vec![25, 25, 25, 25],
            p: 0.205,
            samples,
        }
    }

    /// The two-moons softmax MLP, Platt-scaled.
    pub fn platt() -> SurfaceModel {
        SurfaceModel::Platt(vec![25, 25, 25])
    }

    /// The two-moons Bayes-by-backprop MLP: three hidden layers of 25, prior standard
    /// deviation `prior_sigma`, `samples` networks drawn.
    pub fn bayes_by_backprop(prior_sigma: f64, samples: usize) -> SurfaceModel {
        SurfaceModel::BayesByBackprop {
            hidden: vec![25, 25, 25],
            prior_sigma,
            samples,
        }
    }

    /// A deep ensemble of `members` two-moons MLPs, anchored with `tau` when given.
    pub fn ensemble(members: usize, anchor: Option<f64>) -> SurfaceModel {
        SurfaceModel::Ensemble {
            hidden: vec![25, 25, 25],
            members,
            anchor,
        }
    }

    /// The model's short name: the folder `--beside` writes its files to, and the name
    /// `alkit surface --model` takes.
    pub fn slug(&self) -> &'static str {
        match self {
            SurfaceModel::Duq(_) => "duq",
            SurfaceModel::Mlp(_) => "mlp",
            SurfaceModel::McDropout { .. } => "mc-dropout",
            SurfaceModel::Platt(_) => "platt",
            SurfaceModel::BayesByBackprop { .. } => "bayes-by-backprop",
            SurfaceModel::Ensemble { anchor: None, .. } => "ensemble",
            SurfaceModel::Ensemble { .. } => "anchored-ensemble",
        }
    }

    /// The model as a figure's title names it.
    pub fn label(&self) -> String {
        match self {
            SurfaceModel::Duq(_) => "DUQ".into(),
            SurfaceModel::Mlp(_) => "softmax MLP".into(),
            SurfaceModel::McDropout { samples, .. } => format!("MC dropout ({samples} passes)"),
            SurfaceModel::Platt(_) => "Platt-scaled MLP".into(),
            SurfaceModel::BayesByBackprop { samples, .. } => {
                format!("Bayes-by-backprop ({samples} draws)")
            }
            SurfaceModel::Ensemble {
                members,
                anchor: None,
                ..
            } => format!("ensemble of {members}"),
            SurfaceModel::Ensemble { members, .. } => format!("anchored ensemble of {members}"),
        }
    }
}

/// Surface settings.
#[derive(Debug, Clone, PartialEq)]
pub struct SurfaceSpec {
    /// The model.
    pub model: SurfaceModel,
    /// The score (ignored for DUQ).
    pub score: SurfaceScore,
    /// Training points.
    pub points: usize,
    /// Moon noise.
    pub noise: f64,
    /// Adam steps of batch 64 for the softmax models (lr 1e-3; 1e-2 for Bayes-by-backprop).
    pub steps: usize,
    /// Seed of data, initialisation, batch order, dropout masks and weight draws.
    pub seed: u64,
}

impl SurfaceSpec {
    /// Checks the settings before any work: at least 20 training points (the held-out split
    /// and the far-away points need some) and at most 10,000,000, a noise in `0..=1000`,
    /// at least one training step, and for the MC-dropout, Bayes-by-backprop and ensemble
    /// models at least one pass, draw or member (ensembles at most
    /// [`crate::train::MAX_MEMBERS`]), a dropout probability in `[0, 1)` and a prior standard
    /// deviation that is a positive number.
    pub fn validate(&self) -> Result<()> {
        if !(20..=10_000_000).contains(&self.points) {
            return Err(crate::Error::config(
                "points",
                format!("{} is not in 20..=10000000", self.points),
            ));
        }
        if !(self.noise.is_finite() && (0.0..=1000.0).contains(&self.noise)) {
            return Err(crate::Error::config(
                "noise",
                format!(
                    "{} is not a number in 0..=1000 (the moons are 3 wide)",
                    self.noise
                ),
            ));
        }
        crate::limits::count(
            "steps",
            self.steps,
            crate::limits::MAX_STEPS,
            "training steps",
        )?;
        match &self.model {
            SurfaceModel::McDropout { samples, p, .. } => {
                crate::limits::count(
                    "mc_samples",
                    *samples,
                    crate::limits::MAX_SAMPLES,
                    "MC-dropout passes",
                )?;
                if !(0.0..1.0).contains(p) {
                    return Err(crate::Error::config(
                        "dropout",
                        format!("{p} is not in [0, 1)"),
                    ));
                }
            }
            SurfaceModel::Ensemble {
                members, anchor, ..
            } => {
                if !(1..=crate::train::MAX_MEMBERS).contains(members) {
                    return Err(crate::Error::config(
                        "members",
                        format!("{members} is not in 1..={}", crate::train::MAX_MEMBERS),
                    ));
                }
                if anchor.is_some_and(|t| !(t.is_finite() && t >= 0.0)) {
                    return Err(crate::Error::config(
                        "anchor",
                        format!("{anchor:?} is not a number >= 0"),
                    ));
                }
            }
            SurfaceModel::BayesByBackprop {
                prior_sigma,
                samples,
                ..
            } => {
                crate::limits::count(
                    "mc_samples",
                    *samples,
                    crate::limits::MAX_SAMPLES,
                    "networks drawn",
                )?;
                if !(prior_sigma.is_finite() && *prior_sigma > 0.0 && *prior_sigma <= 1e6) {
                    return Err(crate::Error::config(
                        "prior_sigma",
                        format!("{prior_sigma} is not a number in (0, 1e6]"),
                    ));
                }
            }
            SurfaceModel::Duq(_) | SurfaceModel::Mlp(_) | SurfaceModel::Platt(_) => {}
        }
        Ok(())
    }
}
