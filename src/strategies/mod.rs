//! The one registry of acquisition strategies: every name a command, a curve spec or a
//! session accepts (`--scorer entropy,bald,...`), with what it builds from the shared
//! [`ScorerSettings`]. `score`, `curve`, `bench`, `ood`, `calibrate` and sessions all look
//! strategies up here.
//!
//! Adding a scorer to every command is one [`Scorer`] impl (in `alkit-acquisition` or your own
//! crate) plus one line in [`REGISTRY`]; the CLI's help and `alkit scorers` list the entries.

use crate::error::{Error, Result};
use crate::round::{Pick, Strategy};
use alkit_acquisition::{
    AtLastLayer, Badge, BatchBald, BatchSelector, Builtin, ConformalScore, CoreSet, DuqCertainty,
    Epig, ExGrad, ExGradV, GaussScore, GaussScorer, GradNorm, GradRequest, KernelRule, LabelScore,
    LabelScorer, LaplaceEntropy, LastLayerLaplace, McAa, NeGrad, PerturbKl, PostHoc, ProbCover,
    ReGrad, SampleRequest, SampleScore, SampleScorer, Scorer, Selection, SetSize, TypiClust,
    UnGrad,
};
use alkit_acquisition::{BaseKernel, FeatureRequest, KernelBatch};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::str::FromStr;
use std::sync::Arc;

#[macro_use]
mod named;
mod kernel;
mod laplace;
mod settings;
pub use kernel::{Kernel, KernelMode, KernelTransform};
pub use laplace::{LaplaceHessian, PosteriorKind};
pub use settings::{Layers, ScorerSettings, SelectKind};

/// One named strategy.
pub struct Entry {
    /// The name users type and CSV rows and state files carry.
    pub name: &'static str,
    /// One line for help texts.
    pub about: &'static str,
    /// Builds it from the settings.
    pub build: fn(&ScorerSettings) -> Pick,
}

/// A scorer with top-k selection ([`StrategyKind::strategy`] applies the settings' mode).
fn scorer(s: impl Scorer + 'static) -> Pick {
    Pick::Scored {
        scorer: Arc::new(s),
        selection: Selection::TopK,
    }
}

fn regrad(s: &ScorerSettings, perturbations: usize) -> Pick {
    scorer(ReGrad {
        lambda: s.lambda,
        request: GradRequest {
            perturbations,
            sigma: s.sigma,
            expected: false,
            ..GradRequest::PLAIN
        },
    })
}

/// The sample scorers' draws: an ensemble's members when the loop trains one, else
/// MC-dropout passes or the last-layer Laplace posterior's weight draws (setting `posterior`).
fn draws(s: &ScorerSettings) -> SampleRequest {
    if s.members {
        return SampleRequest::Members;
    }
    match s.posterior {
        Some(PosteriorKind::Laplace) => SampleRequest::Laplace {
            samples: s.mc_samples,
            laplace: last_layer_laplace(s),
        },
        Some(PosteriorKind::InsertedDropout) => SampleRequest::InsertedDropout {
            rate: s.inserted_dropout.unwrap_or(DEFAULT_INSERTED_DROPOUT),
            samples: s.mc_samples,
        },
        Some(PosteriorKind::McDropout) | None => SampleRequest::McDropout {
            samples: s.mc_samples,
        },
    }
}

/// The last-layer Laplace posterior the settings ask for (KFAC by default).
fn last_layer_laplace(s: &ScorerSettings) -> LastLayerLaplace {
    LastLayerLaplace {
        hessian: s
            .hessian
            .map_or(LastLayerLaplace::default().hessian, LaplaceHessian::hessian),
        prior_precision: s.prior_precision,
    }
}

/// A sample scorer over the settings' draws.
fn sample(s: &ScorerSettings, score: SampleScore) -> Pick {
    scorer(SampleScorer {
        score,
        request: draws(s),
    })
}

fn batchbald(s: &ScorerSettings) -> Pick {
    Pick::Batch(Arc::new(BatchBald {
        request: draws(s),
        ..BatchBald::members()
    }))
}

/// A score over a regression model's Gaussian draws: an ensemble's members when the loop
/// trains one, else MC-dropout passes (a run whose model has no dropout reads its one head).
fn gauss(s: &ScorerSettings, score: GaussScore) -> Pick {
    scorer(GaussScorer {
        score,
        request: if s.members {
            SampleRequest::Members
        } else {
            SampleRequest::McDropout {
                samples: s.mc_samples,
            }
        },
    })
}

/// A score over a multi-label model's label probabilities: an ensemble's members when the
/// loop trains one, else MC-dropout passes (a run whose model has no dropout reads its one
/// prediction).
fn labels(s: &ScorerSettings, score: LabelScore) -> Pick {
    scorer(LabelScorer {
        score,
        request: if s.members {
            SampleRequest::Members
        } else {
            SampleRequest::McDropout {
                samples: s.mc_samples,
            }
        },
    })
}

/// MC-AA's largest perturbation and number of sizes by default (alkit's choice: the papers
/// do not fix them for images).
pub const DEFAULT_MCAA: (f32, usize) = (0.1, 11);

/// The rate of inserted dropout by default (alkit's choice, within the rates Ledda et al.
/// sweep).
pub const DEFAULT_INSERTED_DROPOUT: f32 = 0.1;

/// EPIG's target inputs by default (the paper's experiments use about as many).
pub const DEFAULT_EPIG_TARGETS: usize = 100;

/// EPIG over the settings' draws.
fn epig(s: &ScorerSettings) -> Pick {
    scorer(Epig {
        request: draws(s),
        targets: s.epig_targets.unwrap_or(DEFAULT_EPIG_TARGETS),
    })
}

/// A joint batch selector.
fn batch(b: impl BatchSelector + 'static) -> Pick {
    Pick::Batch(Arc::new(b))
}

/// `rule` with the paper's recommended combination, then the settings `s` gives.
fn kernel_batch(s: &ScorerSettings, rule: KernelRule) -> KernelBatch {
    let paper = KernelBatch::paper(rule);
    let sigma = s.kernel_sigma.unwrap_or(KernelBatch::SIGMA);
    let base = match s.kernel.unwrap_or(Kernel::Grad) {
        Kernel::Grad => BaseKernel::Grad,
        Kernel::Ll => BaseKernel::LastLayer,
    };
    let sketch = match s.sketch {
        Some(0) => None,
        Some(p) => Some(p),
        None => FeatureRequest::PAPER.sketch,
    };
    let posterior = match s.kernel_transform {
        Some(KernelTransform::Train) => Some(sigma),
        Some(KernelTransform::None) => None,
        None => paper.posterior.map(|_| sigma),
    };
    KernelBatch {
        rule,
        request: FeatureRequest { base, sketch },
        with_labeled: s
            .kernel_mode
            .map_or(paper.with_labeled, |m| m == KernelMode::Tp),
        posterior,
        noise: sigma,
    }
}

/// Every strategy, in the order commands list them: one line each.
#[rustfmt::skip]
pub static REGISTRY: &[Entry] = &[
    Entry { name: "entropy", about: "predictive entropy", build: |_| scorer(Builtin::Entropy) },
    Entry { name: "margin", about: "one minus the gap between the two most likely classes", build: |_| scorer(Builtin::Margin) },
    Entry { name: "least-confidence", about: "one minus the largest probability", build: |_| scorer(Builtin::LeastConfidence) },
    Entry { name: "random", about: "uniformly random picks", build: |_| Pick::Random },
    Entry { name: "regrad-star", about: "REGrad* (Wang & Ji 2024): layer-weighted gradient norms averaged over perturbed copies", build: |s| regrad(s, s.perturbations.max(1)) },
    Entry { name: "regrad", about: "REGrad: layer-weighted per-class gradient norms", build: |s| regrad(s, 0) },
    Entry { name: "exgrad", about: "ExGrad: expected gradient norm", build: |_| scorer(ExGrad) },
    Entry { name: "negrad", about: "NEGrad: gradient norm of the predicted class", build: |_| scorer(NeGrad) },
    Entry { name: "ungrad", about: "UNGrad: unweighted sum of class gradient norms", build: |_| scorer(UnGrad) },
    Entry { name: "gradnorm", about: "GradNorm: L1 norm of the KL-to-uniform gradient of the last layer", build: |_| scorer(GradNorm) },
    Entry { name: "exgrad-v", about: "ExGrad's V-term", build: |_| scorer(ExGradV) },
    Entry { name: "perturb-x", about: "expected KL under input noise", build: |s| scorer(PerturbKl { request: SampleRequest::InputNoise { sigma: s.perturb_x_sigma, samples: s.perturb_samples } }) },
    Entry { name: "perturb-theta", about: "expected KL under weight noise", build: |s| scorer(PerturbKl { request: SampleRequest::WeightNoise { sigma: s.perturb_theta_sigma, samples: s.perturb_samples } }) },
    Entry { name: "bald", about: "BALD: mutual information over MC-dropout, Laplace or ensemble draws (joint with setting `select` batchbald)", build: |s| if s.select == SelectKind::BatchBald { batchbald(s) } else { sample(s, SampleScore::Bald) } },
    Entry { name: "batchbald", about: "BatchBALD (Kirsch et al. 2019): greedy joint mutual information of the batch", build: batchbald },
    Entry { name: "mc-entropy", about: "entropy of the mean of the MC-dropout, Laplace or ensemble draws", build: |s| sample(s, SampleScore::MeanEntropy) },
    Entry { name: "class-variance", about: "class variance over draws", build: |s| sample(s, SampleScore::ClassVariance) },
    Entry { name: "variation-ratio", about: "variation ratio over draws", build: |s| sample(s, SampleScore::VariationRatio) },
    Entry { name: "mc-max-prob", about: "one minus the mean largest probability over draws", build: |s| sample(s, SampleScore::MaxProb) },
    Entry { name: "epig", about: "EPIG (Bickford Smith et al. 2023): expected information gain about the predictions on the candidates as targets (setting `epig_targets`), over MC-dropout, Laplace or ensemble draws", build: epig },
    Entry { name: "mc-aa", about: "MC-AA (Alarab & Prakoonwit 2022): mutual information over predictions on inputs moved back and forth along the sign of their loss gradient (settings `mcaa_epsilon`, `mcaa_samples`)", build: |s| scorer(McAa { epsilon: s.mcaa_epsilon.unwrap_or(DEFAULT_MCAA.0), samples: s.mcaa_samples.unwrap_or(DEFAULT_MCAA.1) }) },
    Entry { name: "la", about: "last-layer Laplace (Kristiadi et al. 2020): entropy of the probit predictive of a Gaussian posterior over the last layer, fitted on the labeled items (settings `hessian`, `prior_precision`)", build: |s| scorer(LaplaceEntropy { laplace: last_layer_laplace(s) }) },
    Entry { name: "variance", about: "regression: total predictive variance of the Gaussian draws (aleatoric plus epistemic)", build: |s| gauss(s, GaussScore::Variance) },
    Entry { name: "epistemic", about: "regression: variance of the draws' means (an ensemble or MC dropout)", build: |s| gauss(s, GaussScore::Epistemic) },
    Entry { name: "aleatoric", about: "regression: mean of the draws' variances (the noise the model expects)", build: |s| gauss(s, GaussScore::Aleatoric) },
    Entry { name: "gauss-mi", about: "regression: mutual information between target and weights, moment-matched Gaussian (an ensemble or MC dropout)", build: |s| gauss(s, GaussScore::MutualInfo) },
    Entry { name: "entropy-mean", about: "multi-label: mean binary entropy over labels", build: |s| labels(s, LabelScore::EntropyMean) },
    Entry { name: "entropy-max", about: "multi-label: largest binary entropy over labels (ranks as the smallest margin does)", build: |s| labels(s, LabelScore::EntropyMax) },
    Entry { name: "margin-mean", about: "multi-label: one minus the mean margin |2p - 1| over labels", build: |s| labels(s, LabelScore::MarginMean) },
    Entry { name: "entropy-cardinality", about: "multi-label: mean binary entropy times 1 + the distance of the predicted label count from the labeled items' mean (after Li & Guo 2013)", build: |s| labels(s, LabelScore::EntropyCardinality) },
    Entry { name: "bald-sum", about: "multi-label: per-label BALD summed over labels (an ensemble or MC dropout)", build: |s| labels(s, LabelScore::BaldSum) },
    Entry { name: "duq", about: "DUQ: one minus the largest RBF kernel value (needs a DUQ model)", build: |_| scorer(DuqCertainty) },
    Entry { name: "max-logit", about: "max-logit (Hendrycks et al. 2022): minus the largest logit", build: |_| scorer(PostHoc::MaxLogit) },
    Entry { name: "energy", about: "energy (Liu et al. 2020): minus the log-sum-exp of the logits", build: |_| scorer(PostHoc::Energy) },
    Entry { name: "gen", about: "GEN (Liu et al. 2023): generalized entropy of the top 100 probabilities, gamma 0.1", build: |_| scorer(PostHoc::Gen { gamma: 0.1, m: 100 }) },
    Entry { name: "react", about: "ReAct (Sun et al. 2021): energy of features clipped at the training features' 90th percentile", build: |_| scorer(PostHoc::React { percentile: 90.0 }) },
    Entry { name: "ash", about: "ASH-S (Djurisic et al. 2023): energy of features pruned to their top 10% and rescaled", build: |_| scorer(PostHoc::Ash { percentile: 90.0 }) },
    Entry { name: "ash-b", about: "ASH-B (Djurisic et al. 2023, OpenOOD v1.5's ASH): energy of the top 10% set to the row's mean mass", build: |_| scorer(PostHoc::AshB { percentile: 90.0 }) },
    Entry { name: "scale", about: "SCALE (Xu et al. 2024): energy of features scaled by their top-15% share", build: |_| scorer(PostHoc::Scale { percentile: 85.0 }) },
    Entry { name: "knn", about: "KNN (Sun et al. 2022): distance to the k-th nearest normalised training feature (setting `knn_k`)", build: |s| scorer(PostHoc::Knn { k: s.knn_k }) },
    Entry { name: "mahalanobis", about: "Mahalanobis (Lee et al. 2018): smallest distance to a class mean, tied training covariance", build: |_| scorer(PostHoc::Mahalanobis) },
    Entry { name: "vim", about: "ViM (Wang et al. 2022): virtual-logit residual beyond the principal subspace minus energy (setting `vim_dim`)", build: |s| scorer(PostHoc::Vim { dim: s.vim_dim }) },
    Entry { name: "conformal-size", about: "size of the APS conformal set at alpha 0.1 (Romano et al. 2020's non-randomised rule), calibrated on the labeled items; ties by the mass outside the set", build: |_| scorer(SetSize { score: ConformalScore::APS, alpha: 0.1 }) },
    Entry { name: "badge", about: "BADGE (Ash et al. 2020): k-means++ seeding on gradient embeddings", build: |_| batch(Badge) },
    Entry { name: "coreset", about: "core-set (Sener & Savarese 2018): k-center greedy on the features", build: |_| batch(CoreSet) },
    Entry { name: "typiclust", about: "TypiClust (Hacohen et al. 2022): the most typical item of each uncovered cluster (cold start)", build: |_| batch(TypiClust::default()) },
    Entry { name: "maxdiag", about: "regression: top-k posterior variance in the kernel's feature space (Holzmüller et al. 2023's MaxDiag; settings `kernel`, `sketch`, `kernel_transform`, `kernel_mode`, `kernel_sigma`)", build: |s| batch(kernel_batch(s, KernelRule::MaxDiag)) },
    Entry { name: "maxdet", about: "regression: greedy determinant of the batch's posterior kernel (MaxDet-P, the paper's BatchBALD analogue)", build: |s| batch(kernel_batch(s, KernelRule::MaxDet)) },
    Entry { name: "bait", about: "regression: BAIT-F-P (Ash et al. 2021, as Holzmüller et al. 2023 adapt it) on the posterior kernel", build: |s| batch(kernel_batch(s, KernelRule::Bait { backward: false })) },
    Entry { name: "bait-fb", about: "regression: BAIT forward-backward: twice the batch greedily, then the cheapest half dropped", build: |s| batch(kernel_batch(s, KernelRule::Bait { backward: true })) },
    Entry { name: "maxdist", about: "regression: greedy farthest point from the labeled items and picks in the kernel's feature space (MaxDist-TP, core-set)", build: |s| batch(kernel_batch(s, KernelRule::MaxDist)) },
    Entry { name: "kmeanspp", about: "regression: k-means++ seeding in the kernel's feature space (KMeansPP-TP, the paper's BADGE analogue)", build: |s| batch(kernel_batch(s, KernelRule::KMeansPP)) },
    Entry { name: "lcmd", about: "regression: LCMD-TP (Holzmüller et al. 2023): from the largest cluster, the farthest item, on sketched gradient features", build: |s| batch(kernel_batch(s, KernelRule::Lcmd)) },
    Entry { name: "probcover", about: "ProbCover (Yehuda et al. 2022): greedy max coverage of feature balls (cold start; setting `probcover_delta`)", build: |s| batch(ProbCover { delta: s.probcover_delta, ..ProbCover::default() }) },
];

/// A strategy of the [`REGISTRY`], by name (serialised as its name).
#[derive(Clone, Copy)]
pub struct StrategyKind(&'static Entry);

impl PartialEq for StrategyKind {
    fn eq(&self, other: &Self) -> bool {
        self.0.name == other.0.name
    }
}

impl Eq for StrategyKind {}

impl std::hash::Hash for StrategyKind {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.name.hash(state)
    }
}

impl std::fmt::Debug for StrategyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StrategyKind({})", self.0.name)
    }
}

impl StrategyKind {
    /// The strategies `alkit curve` runs when none is named.
    pub const DEFAULT: [&'static str; 4] = ["entropy", "margin", "least-confidence", "random"];

    /// Every registered strategy, in registry order.
    pub fn all() -> impl Iterator<Item = StrategyKind> {
        REGISTRY.iter().map(StrategyKind)
    }

    /// The strategy registered as `name`, if any.
    pub fn named(name: &str) -> Option<StrategyKind> {
        REGISTRY.iter().find(|e| e.name == name).map(StrategyKind)
    }

    /// The default strategies of `alkit curve`.
    pub fn defaults() -> Vec<StrategyKind> {
        Self::DEFAULT
            .iter()
            .filter_map(|n| Self::named(n))
            .collect()
    }

    /// The CLI/CSV name.
    pub fn name(self) -> &'static str {
        self.0.name
    }

    /// One line for help texts.
    pub fn about(self) -> &'static str {
        self.0.about
    }

    /// What the entry builds with `s`: with [`Layers::Last`], a gradient scorer runs over
    /// the last layer ([`AtLastLayer`], named `<name>@last`).
    pub fn build(self, s: &ScorerSettings) -> Pick {
        match ((self.0.build)(s), s.layers) {
            (Pick::Scored { scorer, selection }, Layers::Last) => Pick::Scored {
                scorer: match AtLastLayer::new(scorer.clone()) {
                    Some(last) => Arc::new(last),
                    None => scorer,
                },
                selection,
            },
            (pick, _) => pick,
        }
    }

    /// Whether the strategy's scorer reads gradient evidence with `s` (so that
    /// [`Layers::Last`] applies to it).
    pub fn reads_gradients(self, s: &ScorerSettings) -> bool {
        match (self.0.build)(s) {
            Pick::Scored { scorer, .. } => scorer.needs().grads.is_some(),
            Pick::Batch(_) | Pick::Random => false,
        }
    }

    /// The name rows, columns and state files carry with `s`: the registry name, with
    /// `@last` when [`Layers::Last`] turns it into a last-layer gradient score.
    pub fn name_with(self, s: &ScorerSettings) -> String {
        if s.layers == Layers::Last && self.reads_gradients(s) {
            format!("{}@last", self.name())
        } else {
            self.name().to_string()
        }
    }

    /// The scorer, if the strategy scores one candidate at a time with `s` (all but random
    /// and the joint batch criteria).
    pub fn scorer(self, s: &ScorerSettings) -> Option<Arc<dyn Scorer>> {
        match self.build(s) {
            Pick::Scored { scorer, .. } => Some(scorer),
            Pick::Batch(_) | Pick::Random => None,
        }
    }

    /// Refuses [`Layers::Last`] for a scorer that averages gradients over perturbed copies of
    /// the input (REGrad*): the last layer's closed forms are taken at the item itself.
    pub fn check_layers(self, s: &ScorerSettings) -> Result<()> {
        let perturbs = match (self.0.build)(s) {
            Pick::Scored { scorer, .. } => {
                scorer.needs().grads.is_some_and(|g| g.perturbations > 0)
            }
            Pick::Batch(_) | Pick::Random => false,
        };
        if s.layers == Layers::Last && perturbs {
            return Err(Error::config(
                "layers",
                format!(
                    "`{}` averages gradients over perturbed copies of the input, which the \
                     last layer's closed forms do not; use regrad, or every layer (setting \
                     `layers` all)",
                    self.name()
                ),
            ));
        }
        Ok(())
    }

    /// The runnable strategy: the scorer with `s.select` (named `<select>-<name>` unless
    /// top-k), a joint batch criterion (its own selection; `s.select` does not apply), or
    /// random; class-balanced with `s.class_balance` (all but random, named
    /// `balanced-<name>`). A scorer under the `batchbald` selection is a settings error.
    pub fn strategy(self, s: &ScorerSettings) -> Result<Strategy> {
        self.check_layers(s)?;
        let strategy = self.unbalanced(s)?;
        Ok(match s.class_balance {
            true => strategy.balanced(),
            false => strategy,
        })
    }

    fn unbalanced(self, s: &ScorerSettings) -> Result<Strategy> {
        Ok(match self.build(s) {
            Pick::Scored { scorer: sc, .. } => {
                let name = match s.select {
                    SelectKind::TopK => self.name_with(s),
                    other => format!("{}-{}", other.name(), self.name_with(s)),
                };
                let selection = s.select.selection(s.beta).ok_or_else(|| {
                    Error::config(
                        "select",
                        format!(
                            "batchbald selects jointly from MC-dropout or ensemble draws; it \
                             applies to bald, not to `{}`",
                            self.name()
                        ),
                    )
                })?;
                Strategy::scored(sc, selection).named(name)
            }
            Pick::Batch(b) => Strategy::batch(b),
            Pick::Random => Strategy::random(),
        })
    }
}

/// The scorers of `kinds` with `settings`, for commands that score items one at a time
/// (`score`, `ood`, `calibrate`): a strategy that only picks whole batches is refused.
pub fn per_item_scorers(
    kinds: &[StrategyKind],
    settings: &ScorerSettings,
) -> Result<Vec<Arc<dyn Scorer>>> {
    settings.refuse_class_balance("a per-item score has no batch")?;
    kinds
        .iter()
        .map(|k| {
            k.check_layers(settings)?;
            k.scorer(settings).ok_or_else(|| {
                Error::config(
                    "scorer",
                    format!("`{k}` picks a whole batch (a strategy for a learning curve), it gives no per-item score"),
                )
            })
        })
        .collect()
}

impl FromStr for StrategyKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        StrategyKind::named(s).ok_or_else(|| {
            let names: Vec<_> = REGISTRY.iter().map(|e| e.name).collect();
            format!(
                "unknown scorer `{s}`; expected one of: {}",
                names.join(", ")
            )
        })
    }
}

impl std::fmt::Display for StrategyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for StrategyKind {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for StrategyKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}
