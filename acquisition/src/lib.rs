//! # alkit-acquisition
//!
//! The acquisition half of alkit, kept free of any model, training, IO or CLI code so that a
//! scorer can be written and tested against this crate alone:
//!
//! - [`Scorer`]: the one trait every uncertainty score implements: evidence in, one score per
//!   candidate out, **higher = label first**;
//! - the evidence types scorers read ([`Evidence`], [`Probs`]) and what a scorer asks for
//!   ([`Needs`]);
//! - the built-in scorers: probability-based ([`Entropy`], [`LeastConfidence`], [`Margin`],
//!   and the closed set of them as [`Builtin`]) and gradient-based ([`ReGrad`] (REGrad and
//!   REGrad*), [`ExGrad`], [`UnGrad`], [`NeGrad`], [`GradNorm`], [`ExGradV`], [`PerturbKl`]) and over stochastic predictions
//!   ([`SampleScorer`]: BALD, entropy of the mean, class variance, variation ratio, max-prob;
//!   [`Epig`], the expected information gain about the predictions on target inputs);
//! - the last-layer view of a network ([`Features`]: penultimate features and the last
//!   linear layer, with the gradient evidence over that layer in closed form) and
//!   [`AtLastLayer`], which runs any gradient scorer over it;
//! - post-hoc OOD detectors over features and the last layer ([`PostHoc`]: max-logit,
//!   energy, GEN, ReAct, ASH, SCALE, KNN, Mahalanobis, ViM), the training statistics some of
//!   them read ([`Reference`]), and split conformal prediction sets ([`Conformal`]);
//! - batch selectors over features ([`Badge`], [`CoreSet`], [`TypiClust`], [`ProbCover`])
//!   beside BatchBALD, and for regression the kernel rules of Holzmüller et al. 2023
//!   ([`KernelBatch`]: MaxDiag, MaxDet, BAIT, MaxDist, k-means++, LCMD over
//!   [`KernelFeatures`]);
//! - scores over a multi-label model's label probabilities ([`LabelProbs`], [`LabelScore`]:
//!   binary entropy by mean, max and the predicted label count, mean margin, per-label BALD);
//! - batch selection from scores ([`Selection`]: top-k, random, and the stochastic power /
//!   softmax / soft-rank modes of Kirsch et al. 2023), and class-balanced quotas over the
//!   predicted classes ([`class_quotas`], [`balanced_select`]).
//!
//! ```
//! use alkit_acquisition::{Builtin, Evidence, Probs, Scorer, Selection};
//! use rand::SeedableRng;
//!
//! // Three candidates, two classes: (n, c) = (3, 2).
//! let probs = Probs::new(vec![0.5, 0.5, 0.9, 0.1, 0.99, 0.01], 3, 2).unwrap();
//! let scores = Builtin::Entropy.score(&Evidence::from_probs(probs)).unwrap();
//! let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
//! let picked = Selection::TopK.select(&scores, 1, &mut rng).unwrap();
//! assert_eq!(picked, vec![0]); // the 50/50 candidate is labeled first
//! ```

mod balance;
mod batch;
mod bayes;
mod conformal;
mod diverse;
mod epig;
mod evidence;
mod features;
mod gradient;
mod inserted;
mod intervals;
mod kernel_batch;
mod kernels;
mod label_conformal;
mod laplace;
pub mod linalg;
mod multilabel;
mod plogp;
mod posthoc;
mod reference;
mod regression;
mod scorers;
mod selection;

pub use balance::{balanced_select, class_quotas, members_by_class};
pub use batch::{joint_mutual_information, BatchBald, BatchSelector};
pub use bayes::{McAa, SampleScore, SampleScorer};
pub use conformal::{check_draws, ApsForm, ClassConformal, Conformal, ConformalScore, SetSize};
pub use diverse::{kmeans, purity_radius, Badge, CoreSet, ProbCover, TypiClust, MAX_EDGES};
pub use epig::{Epig, MAX_JOINT_VALUES};
pub use evidence::{
    Evidence, GradLayers, GradNorms, GradRequest, Kernel, Needs, Probs, SampleRequest, Samples,
};
pub use features::{last_layer_norms, AtLastLayer, Features};
pub use gradient::{ExGrad, ExGradV, GradNorm, NeGrad, PerturbKl, ReGrad, UnGrad};
pub use inserted::{inserted_dropout_draws, MAX_RATE};
pub use intervals::{ConformalIntervals, IntervalScore, Prediction, Thresholds};
pub use kernel_batch::{BaseKernel, FeatureRequest, KernelBatch, KernelFeatures, KernelRule};
pub use label_conformal::{control_recall, default_lambdas, LabelLac, RecallControl};
pub use laplace::{
    Hessian, LaplaceEntropy, LaplacePosterior, LastLayerLaplace, MAX_FULL_PARAMS, MAX_KRON_SIDE,
    PRIOR_RANGE,
};
pub use multilabel::{binary_entropy, LabelProbs, LabelScore, LabelScorer};
pub use posthoc::PostHoc;
pub use reference::Reference;
pub use regression::{GaussScore, GaussScorer, Gaussian, Moments};
pub use scorers::{Builtin, DuqCertainty, Entropy, LeastConfidence, Margin};
pub use selection::{gumbel, Selection};

/// What can go wrong when scoring or selecting. Every variant names what it refers to.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum ScoreError {
    /// An array did not have the shape it claimed.
    #[error("{what}: expected shape {expected}, got {got}")]
    Shape {
        /// Which array.
        what: &'static str,
        /// The expected shape.
        expected: String,
        /// What was given.
        got: String,
    },
    /// A row of probabilities was not a probability vector.
    #[error(
        "row {row} is not a probability vector (sum {sum}, or a negative or non-finite entry)"
    )]
    NotProbabilities {
        /// The offending row.
        row: usize,
        /// Its sum.
        sum: f32,
    },
    /// A scorer needed evidence the model side did not provide.
    #[error("scorer `{scorer}` needs {evidence}, which the evidence does not hold")]
    Missing {
        /// The scorer's name.
        scorer: String,
        /// The missing evidence.
        evidence: &'static str,
    },
    /// A score was NaN or infinite.
    #[error("score at position {position} is not finite ({value})")]
    NonFinite {
        /// Position of the candidate in the scored batch.
        position: usize,
        /// The value.
        value: f32,
    },
    /// A setting of a scorer or selector is out of its range for this evidence.
    #[error("setting `{setting}`: {why}")]
    Setting {
        /// The setting's name.
        setting: &'static str,
        /// What is wrong with it.
        why: String,
    },
    /// More items were requested than there are candidates.
    #[error("cannot select {k} of {n} candidates")]
    TooMany {
        /// Requested.
        k: usize,
        /// Available.
        n: usize,
    },
}

/// An uncertainty score over candidates.
///
/// Implementations return exactly one finite score per candidate in the evidence, in the
/// evidence's order, **higher = more uncertain = label first**. A scorer is a pure function of
/// its evidence: randomness belongs to [`Selection`] or to the model side that builds evidence.
///
/// A user scorer in a few lines:
///
/// ```
/// use alkit_acquisition::{Evidence, Needs, ScoreError, Scorer};
///
/// /// Probability mass outside the two most likely classes.
/// struct Tail;
/// impl Scorer for Tail {
///     fn name(&self) -> &str { "tail" }
///     fn needs(&self) -> Needs { Needs::PROBS }
///     fn score(&self, ev: &Evidence) -> Result<Vec<f32>, ScoreError> {
///         let p = ev.probs(self.name())?;
///         Ok(p.rows().map(|row| {
///             let mut r = row.to_vec();
///             r.sort_by(|a, b| b.total_cmp(a));
///             1.0 - r.iter().take(2).sum::<f32>()
///         }).collect())
///     }
/// }
/// ```
pub trait Scorer: Send + Sync {
    /// A short stable name, used in CSV headers and tables (e.g. `entropy`).
    fn name(&self) -> &str;
    /// The evidence this scorer reads.
    fn needs(&self) -> Needs;
    /// One score per candidate, higher = label first.
    fn score(&self, evidence: &Evidence) -> Result<Vec<f32>, ScoreError>;
    /// Whether a candidate's score depends on the other candidates scored with it (EPIG's
    /// targets are the candidates themselves): callers then score every candidate at once,
    /// never in chunks or shards.
    fn joint(&self) -> bool {
        false
    }
}

impl<S: Scorer + ?Sized> Scorer for Box<S> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn needs(&self) -> Needs {
        (**self).needs()
    }
    fn score(&self, evidence: &Evidence) -> Result<Vec<f32>, ScoreError> {
        (**self).score(evidence)
    }
    fn joint(&self) -> bool {
        (**self).joint()
    }
}
