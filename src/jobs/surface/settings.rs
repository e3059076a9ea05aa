//! What `alkit surface` is told, declared once: the command line's flags derive from these
//! fields (their doc comments the help, [`Default`] the defaults), and Python's `surface`
//! reads its keyword arguments into the same type, a missing one taking the default here.

use super::spec::{SurfaceModel, SurfaceScore, SurfaceSpec};
use crate::duq::Penalty;
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

/// Declares a closed set of names with its `name`, `ALL`, `FromStr` (which also reads the
/// older names after `|`) and `Display`.
macro_rules! names {
    ($(#[$m:meta])* $name:ident, $field:literal { $($(#[$vm:meta])* $v:ident => $s:literal $(| $alias:literal)*),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
        pub enum $name { $($(#[$vm])* #[serde(rename = $s)] $v),+ }

        impl $name {
            /// Every value, in the order users are told them.
            pub const ALL: &'static [$name] = &[$($name::$v),+];

            /// The name users type.
            pub fn name(self) -> &'static str {
                match self { $($name::$v => $s),+ }
            }
        }

        impl std::str::FromStr for $name {
            type Err = Error;
            fn from_str(s: &str) -> Result<Self> {
                $(if [$($alias),*].contains(&s) { return Ok($name::$v); })+
                $name::ALL.iter().copied().find(|k| k.name() == s).ok_or_else(|| {
                    let known: Vec<&str> = $name::ALL.iter().map(|k| k.name()).collect();
                    Error::config($field, format!("unknown `{s}`; expected one of: {}", known.join(", ")))
                })
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

names!(
    /// The models a surface shows, by name.
    SurfaceModelKind, "model" {
        /// DUQ with a 2-20-20-20 ReLU MLP feature extractor.
        Duq => "duq",
        /// One softmax ReLU MLP (25-25-25).
        Mlp => "mlp",
        /// That MLP, Platt-scaled on validation moons.
        Platt => "platt",
        /// MC dropout (25-25-25-25, dropout 0.205).
        McDropout => "mc-dropout",
        /// Bayes-by-backprop (25-25-25, Gaussian weights).
        BayesByBackprop => "bayes-by-backprop",
        /// A deep ensemble of MLPs.
        Ensemble => "ensemble",
        /// An anchored ensemble (Pearce et al. 2020).
        AnchoredEnsemble => "anchored-ensemble",
    }
);

names!(
    /// The uncertainty scores a surface shows, by name.
    SurfaceScorer, "scorer" {
        /// `1 - max` of the mean probability.
        LeastConfidence => "least-confidence" | "max-prob",
        /// Entropy of the mean probability.
        Entropy => "entropy",
        /// Mean over classes of the variance across draws.
        ClassVariance => "class-variance",
        /// Mutual information across draws.
        Bald => "bald",
        /// DUQ's `1 - max K` (DUQ only).
        Duq => "duq",
    }
);

/// The settings of one surface. The model's own settings are read only by that model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[serde(default, deny_unknown_fields)]
pub struct SurfaceSettings {
    /// The model: duq, mlp, platt (the MLP Platt-scaled on points / 2 validation moons), mc-dropout, bayes-by-backprop (Gaussian weights, prior N(0, prior-sigma^2)), ensemble or anchored-ensemble.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = SurfaceSettings::default().model))]
    pub model: SurfaceModelKind,
    /// The uncertainty score: duq for the DUQ model; least-confidence, entropy, class-variance or bald otherwise. [default: duq for DUQ, entropy otherwise]
    #[cfg_attr(feature = "cli", arg(long))]
    pub scorer: Option<SurfaceScorer>,
    /// DUQ's gradient-penalty form (lambda 1.0): two-sided, squared, one-sided or none.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = SurfaceSettings::default().penalty))]
    pub penalty: Penalty,
    /// Training points (DUQ's setting: 1000; Ulmer & Cina's: 500).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = SurfaceSettings::default().points))]
    pub points: usize,
    /// Moon noise (DUQ's setting: 0.1; Ulmer & Cina's: 0.125).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = SurfaceSettings::default().noise))]
    pub noise: f64,
    /// MC-dropout passes, or networks drawn from Bayes-by-backprop's posterior.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = SurfaceSettings::default().mc_samples))]
    pub mc_samples: usize,
    /// Bayes-by-backprop's prior standard deviation of every weight and bias.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = SurfaceSettings::default().prior_sigma))]
    pub prior_sigma: f64,
    /// Ensemble members.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = SurfaceSettings::default().members))]
    pub members: usize,
    /// Anchoring strength tau of anchored ensembles.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = SurfaceSettings::default().anchor))]
    pub anchor: f64,
    /// Adam steps (batch 64) of the softmax models: lr 1e-3, 1e-2 for Bayes-by-backprop.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = SurfaceSettings::default().steps))]
    pub steps: usize,
    /// Seed of the data, initialisation, batch order, dropout masks and weight draws.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = SurfaceSettings::default().seed))]
    pub seed: u64,
}

impl Default for SurfaceSettings {
    fn default() -> Self {
        Self {
            model: SurfaceModelKind::Duq,
            scorer: None,
            penalty: Penalty::TwoSided,
            points: 1000,
            noise: 0.1,
            mc_samples: 20,
            prior_sigma: 1.0,
            members: 5,
            anchor: 1.0,
            steps: 2000,
            seed: 0,
        }
    }
}

impl SurfaceSettings {
    /// The defaults with the `given` settings, by name (Python's keyword arguments). A name
    /// that is not a setting, or a value of the wrong type, is refused naming it.
    pub fn with_given(given: serde_json::Map<String, serde_json::Value>) -> Result<Self> {
        let mut all = match serde_json::to_value(Self::default()) {
            Ok(serde_json::Value::Object(m)) => m,
            _ => serde_json::Map::new(),
        };
        for (k, v) in given {
            if !all.contains_key(&k) && k != "scorer" {
                let known: Vec<&str> = all.keys().map(String::as_str).collect();
                return Err(Error::config(
                    "surface",
                    format!(
                        "`{k}` is not a surface setting; known: {}",
                        known.join(", ")
                    ),
                ));
            }
            // Read alone first, so that a value of the wrong type is refused naming its key.
            serde_json::from_value::<Self>(serde_json::json!({ &k: &v }))
                .map_err(|e| Error::config("surface", format!("`{k}`: {e}")))?;
            all.insert(k, v);
        }
        serde_json::from_value(serde_json::Value::Object(all))
            .map_err(|e| Error::config("surface", e.to_string()))
    }

    /// The spec of the model these settings name, validated.
    pub fn spec(&self) -> Result<SurfaceSpec> {
        self.spec_of(self.model, self.scorer)
    }

    /// Checks every setting, those the model does not read too (a value out of range is a
    /// mistake whichever model it was meant for): every model's spec with these settings
    /// passes [`SurfaceSpec::validate`], the one place the ranges are written.
    pub fn validate(&self) -> Result<()> {
        SurfaceModelKind::ALL
            .iter()
            .try_for_each(|&k| self.spec_with(k, SurfaceScore::Entropy).validate())
    }

    /// The spec of `model` scored by `scorer` (its default when `None`: DUQ by its own
    /// certainty, the others by entropy) with these settings, validated. Refuses DUQ's score
    /// for another model and another score for DUQ.
    pub fn spec_of(
        &self,
        model: SurfaceModelKind,
        scorer: Option<SurfaceScorer>,
    ) -> Result<SurfaceSpec> {
        self.validate()?;
        let is_duq = model == SurfaceModelKind::Duq;
        let score = match (scorer, is_duq) {
            (None | Some(SurfaceScorer::Duq), true) => SurfaceScore::MaxProb,
            (Some(SurfaceScorer::Duq), false) => {
                return Err(Error::config(
                    "scorer",
                    "duq scores the DUQ model only (setting `model` duq)",
                ))
            }
            (Some(_), true) => {
                return Err(Error::config("scorer", "the DUQ model is scored by duq"))
            }
            (None | Some(SurfaceScorer::Entropy), false) => SurfaceScore::Entropy,
            (Some(SurfaceScorer::LeastConfidence), false) => SurfaceScore::MaxProb,
            (Some(SurfaceScorer::ClassVariance), false) => SurfaceScore::ClassVariance,
            (Some(SurfaceScorer::Bald), false) => SurfaceScore::Bald,
        };
        Ok(self.spec_with(model, score))
    }

    /// The spec of `kind` scored by `score` with these settings, unchecked.
    fn spec_with(&self, kind: SurfaceModelKind, score: SurfaceScore) -> SurfaceSpec {
        let model = match kind {
            SurfaceModelKind::Duq => SurfaceModel::duq(self.penalty),
            SurfaceModelKind::Mlp => SurfaceModel::mlp(),
            SurfaceModelKind::Platt => SurfaceModel::platt(),
            SurfaceModelKind::McDropout => SurfaceModel::mc_dropout(self.mc_samples),
            SurfaceModelKind::BayesByBackprop => {
                SurfaceModel::bayes_by_backprop(self.prior_sigma, self.mc_samples)
            }
            SurfaceModelKind::Ensemble => SurfaceModel::ensemble(self.members, None),
            SurfaceModelKind::AnchoredEnsemble => {
                SurfaceModel::ensemble(self.members, Some(self.anchor))
            }
        };
        SurfaceSpec {
            model,
            score,
            points: self.points,
            noise: self.noise,
            steps: self.steps,
            seed: self.seed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back_and_scores_follow_the_model() {
        for &k in SurfaceModelKind::ALL {
            assert_eq!(k.name().parse::<SurfaceModelKind>().unwrap(), k);
            let spec = SurfaceSettings::default().spec_of(k, None).unwrap();
            assert_eq!(spec.model.slug(), k.name());
        }
        for &s in SurfaceScorer::ALL {
            assert_eq!(s.name().parse::<SurfaceScorer>().unwrap(), s);
        }
        assert_eq!(
            "max-prob".parse::<SurfaceScorer>().unwrap(),
            SurfaceScorer::LeastConfidence
        );
        let err = "mpl".parse::<SurfaceModelKind>().unwrap_err().to_string();
        assert!(err.contains("bayes-by-backprop"), "{err}");
        let s = SurfaceSettings::default();
        assert!(s
            .spec_of(SurfaceModelKind::Mlp, Some(SurfaceScorer::Duq))
            .is_err());
        assert!(s
            .spec_of(SurfaceModelKind::Duq, Some(SurfaceScorer::Bald))
            .is_err());
        let zero = SurfaceSettings {
            members: 0,
            ..SurfaceSettings::default()
        };
        // Checked whichever model reads it.
        assert!(zero.spec_of(SurfaceModelKind::Duq, None).is_err());
        let given =
            |j: serde_json::Value| SurfaceSettings::with_given(j.as_object().unwrap().clone());
        let s =
            given(serde_json::json!({"model": "platt", "points": 500, "scorer": "bald"})).unwrap();
        assert_eq!(
            (s.model, s.points, s.scorer),
            (SurfaceModelKind::Platt, 500, Some(SurfaceScorer::Bald))
        );
        assert_eq!(s.noise, SurfaceSettings::default().noise);
        let err = given(serde_json::json!({"pionts": 5}))
            .unwrap_err()
            .to_string();
        assert!(err.contains("pionts") && err.contains("points"), "{err}");
        let err = given(serde_json::json!({"points": "many"}))
            .unwrap_err()
            .to_string();
        assert!(err.contains("`points`"), "{err}");
    }
}
