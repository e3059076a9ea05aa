//! The strategies' settings, declared once: [`ScorerSettings`] (the parameterised scorers'
//! values and the selection mode), [`SelectKind`] and [`Layers`]. The binary's flags derive
//! from the struct (behind the `cli` feature) and the Python package reads its keyword
//! arguments into it, so a setting's name, default, help and range live here only.

use super::kernel::{Kernel, KernelMode, KernelTransform};
use super::laplace::{LaplaceHessian, PosteriorKind};
use crate::error::{Error, Result};
use alkit_acquisition::Selection;
use serde::{Deserialize, Serialize};
use std::str::FromStr;

/// How a curve's scored strategies select (applied to every strategy but `random`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SelectKind {
    /// The `query` highest scores.
    #[default]
    TopK,
    /// Sampling with weights `score^beta`.
    Power,
    /// Sampling with weights `exp(beta score)`.
    Softmax,
    /// Sampling with weights `rank^-beta`.
    Softrank,
    /// BatchBALD's joint selection (Kirsch et al. 2019). It needs the draws, not a score
    /// vector, so it applies to `bald` only (which then runs as `batchbald`).
    #[serde(rename = "batchbald")]
    BatchBald,
}

impl SelectKind {
    /// The CLI name.
    pub fn name(self) -> &'static str {
        match self {
            SelectKind::TopK => "top-k",
            SelectKind::Power => "power",
            SelectKind::Softmax => "softmax",
            SelectKind::Softrank => "softrank",
            SelectKind::BatchBald => "batchbald",
        }
    }

    /// The selection over scores with inverse temperature `beta`; `None` for
    /// [`SelectKind::BatchBald`], which does not select from scores.
    pub fn selection(self, beta: f32) -> Option<Selection> {
        Some(match self {
            SelectKind::TopK => Selection::TopK,
            SelectKind::Power => Selection::Power { beta },
            SelectKind::Softmax => Selection::Softmax { beta },
            SelectKind::Softrank => Selection::SoftRank { beta },
            SelectKind::BatchBald => return None,
        })
    }
}

impl FromStr for SelectKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        [
            SelectKind::TopK,
            SelectKind::Power,
            SelectKind::Softmax,
            SelectKind::Softrank,
            SelectKind::BatchBald,
        ]
        .into_iter()
        .find(|k| k.name() == s)
        .ok_or_else(|| {
            format!(
                "unknown selection `{s}`; expected one of: top-k, power, softmax, softrank, batchbald"
            )
        })
    }
}

/// Settings of the parameterised scorers and of selection, declared once: the command line's
/// flags derive from these fields (their doc comments are the flags' help, [`Default`] their
/// defaults) and the Python package's keyword arguments are read into this type by
/// [`ScorerSettings::with_given`]. A new setting is a field here, its default and, where it
/// has a range, a line of [`ScorerSettings::validate`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[serde(default, deny_unknown_fields)]
pub struct ScorerSettings {
    /// REGrad layer-selection strength lambda (a_l = exp(lambda * l)).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = ScorerSettings::default().lambda))]
    pub lambda: f32,
    /// REGrad* input-noise standard deviation on the [0, 1] pixel scale.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = ScorerSettings::default().sigma))]
    pub sigma: f32,
    /// REGrad*'s number of perturbed copies N.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = ScorerSettings::default().perturbations))]
    pub perturbations: usize,
    /// Perturb-x input-noise standard deviation on the [0, 1] pixel scale.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = ScorerSettings::default().perturb_x_sigma))]
    pub perturb_x_sigma: f32,
    /// Perturb-theta weight-noise standard deviation (absolute, every parameter).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = ScorerSettings::default().perturb_theta_sigma))]
    pub perturb_theta_sigma: f32,
    /// Draws of Perturb-x and Perturb-theta.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = ScorerSettings::default().perturb_samples))]
    pub perturb_samples: usize,
    /// Draws of bald, mc-entropy, class-variance, variation-ratio, mc-max-prob, epig and batchbald: MC-dropout forward passes, or Laplace weight draws (setting `posterior` laplace).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = ScorerSettings::default().mc_samples))]
    pub mc_samples: usize,
    /// Selection of every scored strategy: top-k, power, softmax, softrank (Kirsch et al. 2023), or batchbald (Kirsch et al. 2019; bald only, which then runs as batchbald).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = ScorerSettings::default().select))]
    pub select: SelectKind,
    /// Inverse temperature of the stochastic selection modes.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = ScorerSettings::default().beta))]
    pub beta: f32,
    /// Class-balanced batches for every strategy but random: each round shares its slots among the classes the model predicts for the candidates, rarest labeled class first (small-text's ClassBalancer), and chooses each share as the strategy would; strategies are then named `balanced-<name>`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub class_balance: bool,
    /// Sample scorers and BatchBALD read the members of an ensemble model instead of
    /// MC-dropout passes (set by the loop that trains ensembles, never given).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    #[cfg_attr(feature = "cli", arg(skip))]
    pub members: bool,
    /// Parameters of the gradient scorers (regrad, exgrad, negrad, ungrad, gradnorm): `all` layers of the network, or the `last` linear layer only, exact in closed form over the penultimate features (any model that gives them: imported, frozen, or a head on embeddings); scores are then named `<scorer>@last`.
    #[serde(default, skip_serializing_if = "Layers::is_all")]
    #[cfg_attr(feature = "cli", arg(long, default_value_t = ScorerSettings::default().layers))]
    pub layers: Layers,
    /// KNN's k: the score is the distance to the k-th nearest normalised training feature.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = ScorerSettings::default().knn_k))]
    pub knn_k: usize,
    /// ViM's principal dimension D (below the feature dimension). [default: 1000 for d >= 2048, 512 for d >= 768, else d/2]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub vim_dim: Option<usize>,
    /// ProbCover's ball radius on unit-length features, in (0, 2]. [default: the largest radius whose balls are 95% pure under a k-means clustering into as many clusters as classes]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub probcover_delta: Option<f32>,
    /// EPIG's target inputs: the candidates themselves, all of them up to this many, else this many spread evenly over them. [default: 100]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub epig_targets: Option<usize>,
    /// Where the sample scorers (bald, batchbald, epig, mc-entropy, ...) draw from when one model is trained: `mc-dropout` passes, weight draws of the last-layer `laplace` posterior fitted on the labeled items (Kristiadi et al. 2020), or `inserted-dropout`, dropout injected at test time before the last linear layer (Ledda et al. 2023; setting `inserted_dropout`). [default: mc-dropout; an ensemble's members when the run trains one]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub posterior: Option<PosteriorKind>,
    /// Hessian of the last-layer Laplace posterior (`la`, and the draws of setting `posterior` laplace): `diag`, `kron` (Kronecker-factored) or `full` (heads of at most 2,048 parameters). [default: kron]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub hessian: Option<LaplaceHessian>,
    /// Prior precision of the last-layer Laplace posterior, from 1e-12 to 1e12. [default: the maximum of the marginal likelihood]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub prior_precision: Option<f64>,
    /// Rate of the dropout injected before the last linear layer by setting `posterior` inserted-dropout, in (0, 0.95]. [default: 0.1]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub inserted_dropout: Option<f32>,
    /// MC-AA's largest perturbation along the sign of the input's loss gradient, on the [0, 1] input scale; its sizes are spread evenly over [-mcaa_epsilon, mcaa_epsilon]. [default: 0.1]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub mcaa_epsilon: Option<f32>,
    /// MC-AA's number of perturbation sizes, at least 2. [default: 11, so that one is the item itself]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub mcaa_samples: Option<usize>,
    /// Base kernel of the regression batch rules (maxdiag, maxdet, bait, bait-fb, maxdist, kmeanspp, lcmd): `grad` (gradients of the predicted mean w.r.t. every linear layer) or `ll` (the last layer's). [default: grad]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub kernel: Option<Kernel>,
    /// Dimension of the seeded random sketch of the regression batch rules' gradient features (0: exact features, for small networks or `ll`). [default: 512]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub sketch: Option<usize>,
    /// Kernel transform of the regression batch rules: `train` (the Gaussian-process posterior given the labeled items) or `none`. [default: train for maxdiag, maxdet, bait, bait-fb; none for maxdist, kmeanspp, lcmd]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub kernel_transform: Option<KernelTransform>,
    /// Rows the regression batch rules select among: `p` (the pool) or `tp` (the labeled items first, then the pool). [default: p for maxdiag, maxdet, bait, bait-fb; tp for maxdist, kmeanspp, lcmd]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub kernel_mode: Option<KernelMode>,
    /// Noise sigma of the regression batch rules' posterior transform and of MaxDet's and BAIT's diagonal. [default: 0.001, the paper's sigma^2 = 1e-6]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub kernel_sigma: Option<f64>,
}

/// Which parameters the gradient scorers (REGrad, ExGrad, the baselines, GradNorm) take
/// gradients over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layers {
    /// Every parameterised layer of the network: the papers' scores, for alkit's own models.
    #[default]
    All,
    /// The last linear layer only, exact in closed form over the penultimate features: any
    /// model that gives its features and last layer (imported, frozen or a head on
    /// embeddings); scores are named `<scorer>@last`.
    Last,
}

impl Layers {
    /// The name users type.
    pub fn name(self) -> &'static str {
        match self {
            Layers::All => "all",
            Layers::Last => "last",
        }
    }

    fn is_all(&self) -> bool {
        *self == Layers::All
    }

    /// The acquisition crate's request for these layers.
    pub fn request(self) -> alkit_acquisition::GradLayers {
        match self {
            Layers::All => alkit_acquisition::GradLayers::All,
            Layers::Last => alkit_acquisition::GradLayers::Last,
        }
    }
}

impl FromStr for Layers {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        [Layers::All, Layers::Last]
            .into_iter()
            .find(|l| l.name() == s)
            .ok_or_else(|| format!("unknown layers `{s}`; expected all or last"))
    }
}

impl std::fmt::Display for SelectKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::fmt::Display for Layers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl ScorerSettings {
    /// Checks ranges once: sample and copy counts at least 1 and at most
    /// [`crate::limits::MAX_SAMPLES`] and [`crate::limits::MAX_PERTURBATIONS`], `lambda` and `beta` finite,
    /// noise levels finite and `>= 0`.
    pub fn validate(&self) -> Result<()> {
        use crate::limits::{self, MAX_PERTURBATIONS, MAX_SAMPLES};
        if self.perturbations == 0 {
            return Err(Error::config(
                "perturbations",
                "REGrad* needs at least one perturbed copy (regrad is the unperturbed score)",
            ));
        }
        limits::count(
            "perturbations",
            self.perturbations,
            MAX_PERTURBATIONS,
            "perturbed copies per candidate",
        )?;
        limits::count(
            "mc_samples",
            self.mc_samples,
            MAX_SAMPLES,
            "draws per candidate",
        )?;
        limits::count(
            "perturb_samples",
            self.perturb_samples,
            MAX_SAMPLES,
            "draws per candidate",
        )?;
        if !self.lambda.is_finite() {
            return Err(Error::config("lambda", "must be a finite number"));
        }
        if !self.beta.is_finite() {
            return Err(Error::config("beta", "must be a finite number"));
        }
        let noise = |v: f32| v.is_finite() && v >= 0.0;
        let why = "must be a finite number >= 0";
        if !noise(self.sigma) {
            return Err(Error::config("sigma", why));
        }
        if !noise(self.perturb_x_sigma) {
            return Err(Error::config("perturb_x_sigma", why));
        }
        if !noise(self.perturb_theta_sigma) {
            return Err(Error::config("perturb_theta_sigma", why));
        }
        limits::count("knn_k", self.knn_k, MAX_SAMPLES, "neighbours")?;
        if let Some(dim) = self.vim_dim {
            limits::count("vim_dim", dim, limits::MAX_SAMPLES, "principal dimensions")?;
        }
        if let Some(t) = self.epig_targets {
            limits::count("epig_targets", t, MAX_SAMPLES, "target inputs")?;
        }
        if let Some(p) = self.sketch {
            if p > crate::limits::MAX_SKETCH {
                return Err(Error::config(
                    "sketch",
                    format!("{p}; expected 0 (exact) to {}", crate::limits::MAX_SKETCH),
                ));
            }
        }
        if let Some(s) = self.kernel_sigma {
            if !(s.is_finite() && s > 0.0) {
                return Err(Error::config(
                    "kernel_sigma",
                    "must be a finite number > 0 (the paper's is 0.001)",
                ));
            }
        }
        if self.members && self.posterior.is_some() {
            return Err(Error::config(
                "posterior",
                "this run trains an ensemble, whose members are the sample scorers' draws; \
                 MC-dropout and Laplace draws are one model's (drop setting `posterior` or \
                 setting `ensemble`)",
            ));
        }
        if let Some(r) = self.inserted_dropout {
            if !(r > 0.0 && r <= alkit_acquisition::MAX_RATE) {
                return Err(Error::config(
                    "inserted_dropout",
                    format!("{r}; expected a dropout rate in (0, 0.95]"),
                ));
            }
        }
        if let Some(e) = self.mcaa_epsilon {
            if !(e.is_finite() && e > 0.0) {
                return Err(Error::config(
                    "mcaa_epsilon",
                    format!("{e}; expected a finite number above 0 (on the [0, 1] input scale)"),
                ));
            }
        }
        if let Some(t) = self.mcaa_samples {
            if t < 2 {
                return Err(Error::config(
                    "mcaa_samples",
                    format!("{t}; MC-AA needs at least 2 perturbation sizes"),
                ));
            }
            limits::count("mcaa_samples", t, MAX_SAMPLES, "draws per candidate")?;
        }
        if let Some(delta) = self.prior_precision {
            let (lo, hi) = alkit_acquisition::PRIOR_RANGE;
            if !(lo..=hi).contains(&delta) {
                return Err(Error::config(
                    "prior_precision",
                    format!("{delta}; expected a number from {lo:e} to {hi:e}"),
                ));
            }
        }
        if let Some(delta) = self.probcover_delta {
            if !(delta.is_finite() && delta > 0.0 && delta <= 2.0) {
                return Err(Error::config(
                    "probcover_delta",
                    "must be a number in (0, 2]: a radius between unit-length features",
                ));
            }
        }
        Ok(())
    }

    /// Refuses setting `class_balance` where it cannot apply: `why` says what the command
    /// does instead of choosing batches among classes.
    pub fn refuse_class_balance(&self, why: &str) -> Result<()> {
        match self.class_balance {
            true => Err(Error::config(
                "class_balance",
                format!(
                    "class balancing shares a batch among the predicted classes; {why} (drop \
                     setting `class_balance`)"
                ),
            )),
            false => Ok(()),
        }
    }

    /// These settings once [`ScorerSettings::validate`] accepts them.
    pub fn checked(self) -> Result<Self> {
        self.validate()?;
        Ok(self)
    }

    /// The names of the settings a person gives: every field but `members`, which follows
    /// the model. Read from serde's own list of the struct's fields, so it cannot drift.
    pub fn names() -> impl Iterator<Item = &'static str> {
        fields::of::<Self>()
            .iter()
            .copied()
            .filter(|n| *n != "members")
    }

    /// Each setting a person gives, by name, with its default (`null` for a default the
    /// data decides).
    pub fn defaults() -> serde_json::Map<String, serde_json::Value> {
        let mut default = object(&Self::default());
        // The non-optional fields left out of run files at their defaults, so that files
        // written before they existed read the same.
        default.insert("layers".into(), Layers::default().name().into());
        default.insert("class_balance".into(), false.into());
        Self::names()
            .map(|k| {
                let v = default.get(k).cloned().unwrap_or(serde_json::Value::Null);
                (k.to_string(), v)
            })
            .collect()
    }

    /// The defaults with the `given` settings, by name, validated. A name that is not a
    /// setting is refused under `field` (the front end's word for the set) naming the known
    /// ones; a value of the wrong type or out of range is refused naming its setting.
    pub fn with_given(
        given: serde_json::Map<String, serde_json::Value>,
        field: &'static str,
    ) -> Result<Self> {
        let mut all = object(&Self::default());
        for (k, v) in given {
            let Some(name) = Self::names().find(|n| *n == k) else {
                let names: Vec<&str> = Self::names().collect();
                return Err(Error::config(
                    field,
                    format!(
                        "`{k}` is not a scorer setting; known: {} (members follows `ensemble`)",
                        names.join(", ")
                    ),
                ));
            };
            // Read alone first, so that a value of the wrong type is refused naming its key.
            serde_json::from_value::<Self>(serde_json::json!({ name: &v }))
                .map_err(|e| Error::config(name, e.to_string()))?;
            all.insert(k, v);
        }
        let s: Self = serde_json::from_value(serde_json::Value::Object(all))
            .map_err(|e| Error::config(field, e.to_string()))?;
        s.checked()
    }

    /// The first setting, by name, that differs from its default (`members` aside).
    pub fn first_given(&self) -> Option<&'static str> {
        let given = object(&Self {
            members: false,
            ..*self
        });
        let default = object(&Self::default());
        Self::names().find(|k| given.get(*k) != default.get(*k))
    }
}

mod fields {
    //! A struct's field names as serde's derive lists them: a deserializer that only asks.
    use serde::de::{self, Deserialize, Deserializer, Visitor};

    #[derive(Debug)]
    struct Asked(&'static [&'static str]);

    impl std::fmt::Display for Asked {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("field names asked")
        }
    }

    impl std::error::Error for Asked {}

    impl de::Error for Asked {
        fn custom<T: std::fmt::Display>(_: T) -> Self {
            Asked(&[])
        }
    }

    struct Ask;

    impl<'de> Deserializer<'de> for Ask {
        type Error = Asked;

        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Asked> {
            Err(Asked(&[]))
        }

        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Asked> {
            Err(Asked(fields))
        }

        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
            identifier ignored_any
        }
    }

    /// The field names `T`'s derived `Deserialize` knows, in declaration order.
    pub(super) fn of<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
        match T::deserialize(Ask) {
            Err(Asked(fields)) => fields,
            Ok(_) => &[],
        }
    }
}

/// `s` as a JSON object of its serialised fields.
fn object(s: &ScorerSettings) -> serde_json::Map<String, serde_json::Value> {
    match serde_json::to_value(s) {
        Ok(serde_json::Value::Object(m)) => m,
        _ => serde_json::Map::new(),
    }
}

impl Default for ScorerSettings {
    fn default() -> Self {
        Self {
            lambda: 0.3,
            sigma: 0.02,
            perturbations: 8,
            perturb_x_sigma: 0.05,
            perturb_theta_sigma: 0.01,
            perturb_samples: 8,
            mc_samples: 20,
            select: SelectKind::TopK,
            beta: 1.0,
            class_balance: false,
            members: false,
            layers: Layers::All,
            knn_k: 50,
            vim_dim: None,
            probcover_delta: None,
            epig_targets: None,
            posterior: None,
            hessian: None,
            prior_precision: None,
            inserted_dropout: None,
            mcaa_epsilon: None,
            mcaa_samples: None,
            kernel: None,
            sketch: None,
            kernel_transform: None,
            kernel_mode: None,
            kernel_sigma: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn given(v: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn the_names_are_the_fields_but_members_in_declaration_order() {
        let names: Vec<&str> = ScorerSettings::names().collect();
        assert_eq!(names.first(), Some(&"lambda"));
        assert_eq!(names.last(), Some(&"kernel_sigma"));
        assert_eq!(names.len(), 26);
        assert!(!names.contains(&"members"));
        let d = ScorerSettings::defaults();
        assert_eq!(d["lambda"], json!(0.30000001192092896));
        assert_eq!(d["layers"], json!("all"));
        assert_eq!(d["class_balance"], json!(false));
        assert_eq!(d["vim_dim"], serde_json::Value::Null);
    }

    #[test]
    fn given_settings_replace_defaults_and_are_checked_by_name() {
        let s = ScorerSettings::with_given(
            given(json!({"lambda": 0.5, "layers": "last", "vim_dim": 7, "select": "softmax"})),
            "set",
        )
        .unwrap();
        assert_eq!(
            s,
            ScorerSettings {
                lambda: 0.5,
                layers: Layers::Last,
                vim_dim: Some(7),
                select: SelectKind::Softmax,
                ..ScorerSettings::default()
            }
        );
        assert_eq!(s.first_given(), Some("lambda"));
        assert_eq!(ScorerSettings::default().first_given(), None);
        let all = ScorerSettings::with_given(given(json!({"layers": "all"})), "set").unwrap();
        assert_eq!(all, ScorerSettings::default());
        let field = |v| match ScorerSettings::with_given(given(v), "set") {
            Err(Error::Config { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(field(json!({"bogus": 1})), "set");
        assert_eq!(field(json!({"members": true})), "set");
        assert_eq!(field(json!({"knn_k": -1})), "knn_k");
        assert_eq!(field(json!({"knn_k": 2.5})), "knn_k");
        assert_eq!(field(json!({"knn_k": 0})), "knn_k");
        assert_eq!(field(json!({"lambda": "nan"})), "lambda");
        assert_eq!(field(json!({"select": "best"})), "select");
        assert_eq!(field(json!({"probcover_delta": 3.0})), "probcover_delta");
    }

    #[test]
    fn a_run_file_with_an_unknown_setting_is_refused_not_ignored() {
        let e = serde_json::from_str::<ScorerSettings>(r#"{"lamda": 0.5}"#).unwrap_err();
        assert!(e.to_string().contains("lamda"), "{e}");
    }
}
