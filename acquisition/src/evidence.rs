//! Evidence: what a model tells a scorer about each candidate.
//!
//! Scorers never see a model. The model side (in `alkit`) computes the evidence a scorer asks
//! for through [`Needs`], and hands it over as plain row-major `f32` arrays with their shapes
//! checked once, here, at construction. Keeping these types free of candle means a scorer can be
//! written and tested against this crate alone.

use crate::{
    FeatureRequest, Features, Gaussian, KernelFeatures, LabelProbs, LastLayerLaplace, Reference,
    ScoreError,
};
use std::sync::Arc;

/// Which pieces of evidence a scorer reads. The model side computes only what is asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[non_exhaustive]
pub struct Needs {
    /// Predictive probabilities `(n, c)`.
    pub probs: bool,
    /// Per-class parameter-gradient norms, computed as requested.
    pub grads: Option<GradRequest>,
    /// Stochastic predictions `(s, n, c)`, drawn as requested.
    pub samples: Option<SampleRequest>,
    /// RBF kernel values `(n, c)` of a DUQ model.
    pub kernel: bool,
    /// Penultimate features `(n, d)` and the last linear layer (see [`Features`]).
    pub features: bool,
    /// The features and labels of the items the model was trained on (see [`Reference`]).
    pub reference: bool,
    /// Gaussian predictions of a regression model `(m, n, k)` (see [`Gaussian`]), drawn as
    /// requested.
    pub gaussian: Option<SampleRequest>,
    /// Kernel features of the pool and the labeled items for a regression model's batch
    /// selectors (see [`KernelFeatures`]), computed as requested.
    pub kernel_features: Option<FeatureRequest>,
    /// Label probabilities of a multi-label model `(m, n, L)` (see [`LabelProbs`]), drawn as
    /// requested.
    pub labels: Option<SampleRequest>,
}

impl Needs {
    /// Evidence that holds probabilities only.
    pub const PROBS: Needs = Needs {
        probs: true,
        grads: None,
        samples: None,
        kernel: false,
        features: false,
        reference: false,
        gaussian: None,
        kernel_features: None,
        labels: None,
    };

    /// Kernel values only (DUQ).
    pub const KERNEL: Needs = Needs {
        probs: false,
        grads: None,
        samples: None,
        kernel: true,
        features: false,
        reference: false,
        gaussian: None,
        kernel_features: None,
        labels: None,
    };

    /// Probabilities, penultimate features and the last layer.
    pub const FEATURES: Needs = Needs {
        features: true,
        ..Needs::PROBS
    };

    /// Probabilities and gradient norms computed as `request` says.
    pub fn grads(request: GradRequest) -> Needs {
        Needs {
            grads: Some(request),
            ..Needs::PROBS
        }
    }

    /// Probabilities and stochastic predictions drawn as `request` says.
    pub fn samples(request: SampleRequest) -> Needs {
        Needs {
            samples: Some(request),
            reference: matches!(request, SampleRequest::Laplace { .. }),
            ..Needs::PROBS
        }
    }

    /// Gaussian predictions only, drawn as `request` says (a regression model's evidence).
    pub fn gaussian(request: SampleRequest) -> Needs {
        Needs {
            probs: false,
            gaussian: Some(request),
            ..Needs::PROBS
        }
    }

    /// Kernel features only, computed as `request` says (a regression model's batch
    /// selectors).
    pub fn kernel_features(request: FeatureRequest) -> Needs {
        Needs {
            probs: false,
            kernel_features: Some(request),
            ..Needs::PROBS
        }
    }

    /// Label probabilities only, drawn as `request` says (a multi-label model's evidence).
    pub fn labels(request: SampleRequest) -> Needs {
        Needs {
            probs: false,
            labels: Some(request),
            ..Needs::PROBS
        }
    }

    /// Whether these needs read a regression model's evidence (and nothing a classifier's).
    pub fn is_regression(&self) -> bool {
        self.gaussian.is_some() || self.kernel_features.is_some()
    }

    /// Whether these needs read a multi-label model's evidence.
    pub fn is_multi_label(&self) -> bool {
        self.labels.is_some()
    }

    /// The union of two needs, or `None` when they ask for gradients computed differently
    /// (then they need separate evidence).
    pub fn union(self, other: Needs) -> Option<Needs> {
        let grads = match (self.grads, other.grads) {
            (Some(a), Some(b)) if a != b => return None,
            (a, b) => a.or(b),
        };
        let samples = match (self.samples, other.samples) {
            (Some(a), Some(b)) if a != b => return None,
            (a, b) => a.or(b),
        };
        let gaussian = match (self.gaussian, other.gaussian) {
            (Some(a), Some(b)) if a != b => return None,
            (a, b) => a.or(b),
        };
        let kernel_features = match (self.kernel_features, other.kernel_features) {
            (Some(a), Some(b)) if a != b => return None,
            (a, b) => a.or(b),
        };
        let labels = match (self.labels, other.labels) {
            (Some(a), Some(b)) if a != b => return None,
            (a, b) => a.or(b),
        };
        Some(Needs {
            probs: self.probs || other.probs,
            grads,
            samples,
            kernel: self.kernel || other.kernel,
            features: self.features || other.features,
            reference: self.reference || other.reference,
            gaussian,
            kernel_features,
            labels,
        })
    }
}

/// How the model side draws stochastic predictions.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum SampleRequest {
    /// `samples` predictions on `x + eps`, `eps ~ N(0, sigma^2 I)` on the `[0, 1]` input scale.
    InputNoise {
        /// Noise standard deviation.
        sigma: f32,
        /// Number of draws `s`.
        samples: usize,
    },
    /// `samples` predictions with every parameter `theta + eps`, `eps ~ N(0, sigma^2)`.
    WeightNoise {
        /// Noise standard deviation (absolute, in parameter units).
        sigma: f32,
        /// Number of draws `s`.
        samples: usize,
    },
    /// `samples` MC-dropout predictions: dropout on (masks from the run's seeded RNG), batch
    /// norm (if any) in eval mode.
    McDropout {
        /// Number of stochastic forward passes `T`.
        samples: usize,
    },
    /// One prediction per member of an ensemble model (deep ensembles, anchored ensembles):
    /// `s` = the number of members.
    Members,
    /// MC-AA (Alarab & Prakoonwit 2022): `samples` predictions on `x + eps_t sign(g)`, `g` the
    /// gradient w.r.t. the input of the cross-entropy at the predicted class, `eps_t` spread
    /// evenly over `[-epsilon, epsilon]` on the `[0, 1]` input scale (back and forth across
    /// the decision boundary).
    Adversarial {
        /// Largest perturbation size.
        epsilon: f32,
        /// Number of perturbation sizes `T` (at least 2).
        samples: usize,
    },
    /// `samples` draws under dropout of `rate` injected at test time on the penultimate
    /// features (Ledda et al. 2023), the trained last layer applied after it.
    InsertedDropout {
        /// Dropout rate in `(0, 0.95]`.
        rate: f32,
        /// Number of draws `s`.
        samples: usize,
    },
    /// `samples` weight draws of the last-layer Laplace posterior fitted on the items the
    /// model was trained on (so these needs include [`Needs::reference`]), each draw shared
    /// by every candidate.
    Laplace {
        /// Number of draws `s`.
        samples: usize,
        /// How the posterior is fitted.
        laplace: LastLayerLaplace,
    },
}

/// Stochastic class probabilities `(s, n, c)`: draws, candidates, classes. Each `(s, n)` row is
/// a probability vector.
#[derive(Debug, Clone, PartialEq)]
pub struct Samples {
    draws: Vec<Probs>,
}

impl Samples {
    /// Wraps `s >= 1` draws, each `(n, c)` with the same `n` and `c`.
    pub fn new(draws: Vec<Probs>) -> Result<Self, ScoreError> {
        let first = draws.first().ok_or(ScoreError::Shape {
            what: "samples",
            expected: "at least one draw".into(),
            got: "none".into(),
        })?;
        let (n, c) = (first.n(), first.classes());
        if let Some(d) = draws.iter().find(|d| d.n() != n || d.classes() != c) {
            return Err(ScoreError::Shape {
                what: "samples",
                expected: format!("every draw ({n}, {c})"),
                got: format!("({}, {})", d.n(), d.classes()),
            });
        }
        Ok(Self { draws })
    }

    /// The draws, each `(n, c)`.
    pub fn draws(&self) -> &[Probs] {
        &self.draws
    }

    /// Number of candidates.
    pub fn n(&self) -> usize {
        self.draws[0].n()
    }

    /// The mean of the draws, summed in `f64`: the predictive probabilities `(n, c)`.
    pub fn mean(&self) -> Result<Probs, ScoreError> {
        let (n, c) = (self.n(), self.draws[0].classes());
        let t = self.draws.len() as f64;
        let mut mean = vec![0f64; n * c];
        for d in &self.draws {
            for (m, &v) in mean.iter_mut().zip(d.as_slice()) {
                *m += f64::from(v);
            }
        }
        Probs::new(mean.into_iter().map(|m| (m / t) as f32).collect(), n, c)
    }
}

/// How the model side computes per-class gradients `g_c = d log p(y=c|x) / d theta`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GradRequest {
    /// Perturbed copies averaged with the input (REGrad*'s `N`): each class's gradient is
    /// `(1/(N+1)) sum_{i=0..N} d log p_c(x_i) / d theta`, `x_0 = x`, `x_i = x + eps_i`. 0 gives the
    /// plain gradient.
    pub perturbations: usize,
    /// Standard deviation of `eps_i ~ N(0, sigma^2 I)` on the `[0, 1]` input scale (before
    /// normalisation).
    pub sigma: f32,
    /// Also compute the expected gradient `sum_c p_c g_c` (NEGrad's row).
    pub expected: bool,
    /// Which parameters `theta` are: every layer of the network, or only its last linear
    /// layer (exact closed forms over the penultimate features, see
    /// [`Features::last_layer_grads`]).
    pub layers: GradLayers,
}

impl GradRequest {
    /// Plain per-class gradients over every layer, no perturbation, no expected-gradient row.
    pub const PLAIN: GradRequest = GradRequest {
        perturbations: 0,
        sigma: 0.0,
        expected: false,
        layers: GradLayers::All,
    };
}

/// The parameters gradient evidence is taken over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GradLayers {
    /// Every parameterised layer of the network (the papers' scores).
    #[default]
    All,
    /// The last linear layer only: what a model known by its features and last layer (an
    /// imported or frozen network) gives; scorers carry an `@last` suffix.
    Last,
}

/// Squared L2 norms of per-candidate parameter gradients, per row and per layer:
/// `(n, r, L)`: candidates, rows, layers (numbered from the input, a layer's weight and bias
/// together). Rows `0..c` are the classes' `g_c`; when requested, row `c` is the expected
/// gradient `sum_c p_c g_c`. Also GradNorm's quantity: the L1 norm of the gradient of
/// `KL(uniform || p)` w.r.t. the last layer's weight, `(n,)`.
#[derive(Debug, Clone, PartialEq)]
pub struct GradNorms {
    sq: Vec<f32>,
    n: usize,
    classes: usize,
    rows: usize,
    layers: usize,
    kl_uniform_l1: Vec<f32>,
}

impl GradNorms {
    /// Wraps squared norms `(n, rows, layers)` with `rows` = `classes` or `classes + 1`, and the
    /// GradNorm L1 values `(n,)`; checks shapes and that every value is finite and `>= 0`.
    pub fn new(
        sq: Vec<f32>,
        n: usize,
        classes: usize,
        rows: usize,
        layers: usize,
        kl_uniform_l1: Vec<f32>,
    ) -> Result<Self, ScoreError> {
        if !(rows == classes || rows == classes + 1) || layers == 0 || sq.len() != n * rows * layers
        {
            return Err(ScoreError::Shape {
                what: "gradient norms",
                expected: format!("({n}, {classes} or {}, L > 0)", classes + 1),
                got: format!("{} values for {rows} rows x {layers} layers", sq.len()),
            });
        }
        if kl_uniform_l1.len() != n {
            return Err(ScoreError::Shape {
                what: "GradNorm values",
                expected: format!("({n},)"),
                got: format!("{} values", kl_uniform_l1.len()),
            });
        }
        if let Some(position) = sq
            .iter()
            .chain(&kl_uniform_l1)
            .position(|v| !v.is_finite() || *v < 0.0)
        {
            let value = sq
                .iter()
                .chain(&kl_uniform_l1)
                .nth(position)
                .copied()
                .unwrap_or(f32::NAN);
            return Err(ScoreError::NonFinite { position, value });
        }
        Ok(Self {
            sq,
            n,
            classes,
            rows,
            layers,
            kl_uniform_l1,
        })
    }

    /// Number of candidates.
    pub fn n(&self) -> usize {
        self.n
    }
    /// Number of classes.
    pub fn classes(&self) -> usize {
        self.classes
    }
    /// Number of layers `L`.
    pub fn layers(&self) -> usize {
        self.layers
    }
    /// Squared norms per layer `(L,)` of class `c`'s gradient for candidate `i`.
    pub fn class(&self, i: usize, c: usize) -> &[f32] {
        let o = (i * self.rows + c) * self.layers;
        &self.sq[o..o + self.layers]
    }
    /// Squared norms per layer `(L,)` of the expected gradient, if it was computed.
    pub fn expected(&self, i: usize) -> Option<&[f32]> {
        (self.rows > self.classes).then(|| self.class(i, self.classes))
    }
    /// GradNorm's L1 norm for candidate `i`.
    pub fn kl_uniform_l1(&self, i: usize) -> f32 {
        self.kl_uniform_l1[i]
    }
}

/// Class probabilities for a batch of candidates, row-major `(n, c)`: items, classes.
///
/// Every row is a probability vector: entries in `[0, 1]`, summing to 1 within `1e-3`.
#[derive(Debug, Clone, PartialEq)]
pub struct Probs {
    data: Vec<f32>,
    n: usize,
    c: usize,
}

impl Probs {
    /// Wraps row-major probabilities of shape `(n, c)`, checking shape and that each row is a
    /// probability vector (finite, non-negative, summing to 1 within `1e-3`).
    pub fn new(data: Vec<f32>, n: usize, c: usize) -> Result<Self, ScoreError> {
        if c == 0 || data.len() != n * c {
            return Err(ScoreError::Shape {
                what: "probabilities",
                expected: format!("({n}, {c}) with c > 0"),
                got: format!("{} values", data.len()),
            });
        }
        for (row, p) in data.chunks_exact(c).enumerate() {
            let sum: f32 = p.iter().sum();
            if p.iter().any(|v| !v.is_finite() || *v < 0.0) || (sum - 1.0).abs() > 1e-3 {
                return Err(ScoreError::NotProbabilities { row, sum });
            }
        }
        Ok(Self { data, n, c })
    }

    /// Number of candidates.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Number of classes.
    pub fn classes(&self) -> usize {
        self.c
    }

    /// Row `i`: the class probabilities `(c,)` of candidate `i`.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.c..(i + 1) * self.c]
    }

    /// Iterates over rows `(c,)`.
    pub fn rows(&self) -> std::slice::ChunksExact<'_, f32> {
        self.data.chunks_exact(self.c)
    }

    /// The raw row-major `(n, c)` data.
    pub fn as_slice(&self) -> &[f32] {
        &self.data
    }
}

/// Everything the model side computed for one batch of `n` candidates.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Evidence {
    /// Predictive probabilities `(n, c)`, present when [`Needs::probs`] was asked for.
    pub probs: Option<Probs>,
    /// Gradient norms `(n, r, L)`, present when [`Needs::grads`] was asked for.
    pub grads: Option<GradNorms>,
    /// Stochastic predictions `(s, n, c)`, present when [`Needs::samples`] was asked for.
    pub samples: Option<Samples>,
    /// DUQ kernel values `(n, c)`, present when [`Needs::kernel`] was asked for.
    pub kernel: Option<Kernel>,
    /// Penultimate features `(n, d)` and the last layer, present when [`Needs::features`]
    /// was asked for.
    pub features: Option<Features>,
    /// The training (or labeled) items' features and labels, present when
    /// [`Needs::reference`] was asked for; shared by every chunk of one scoring.
    pub reference: Option<Arc<Reference>>,
    /// Gaussian predictions `(m, n, k)`, present when [`Needs::gaussian`] was asked for.
    pub gaussian: Option<Gaussian>,
    /// Kernel features of the pool and the labeled items, present when
    /// [`Needs::kernel_features`] was asked for.
    pub kernel_features: Option<KernelFeatures>,
    /// Label probabilities `(m, n, L)`, present when [`Needs::labels`] was asked for.
    pub labels: Option<LabelProbs>,
}

/// RBF kernel values `K_c(x)` of a DUQ model `(n, c)`, each in `[0, 1]` (rows need not sum to
/// 1: a point far from every centroid has all `K_c` near 0).
#[derive(Debug, Clone, PartialEq)]
pub struct Kernel {
    data: Vec<f32>,
    n: usize,
    c: usize,
}

impl Kernel {
    /// Wraps row-major values `(n, c)`, checking the shape and that each is in `[0, 1]`.
    pub fn new(data: Vec<f32>, n: usize, c: usize) -> Result<Self, ScoreError> {
        if c == 0 || data.len() != n * c {
            return Err(ScoreError::Shape {
                what: "kernel values",
                expected: format!("({n}, {c}) with c > 0"),
                got: format!("{} values", data.len()),
            });
        }
        if let Some(i) = data.iter().position(|v| !(0.0..=1.0).contains(v)) {
            return Err(ScoreError::NonFinite {
                position: i / c,
                value: data[i],
            });
        }
        Ok(Self { data, n, c })
    }
    /// Number of candidates.
    pub fn n(&self) -> usize {
        self.n
    }
    /// Row `i` `(c,)`.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.c..(i + 1) * self.c]
    }
}

impl Evidence {
    /// Evidence holding probabilities only.
    pub fn from_probs(probs: Probs) -> Self {
        Self {
            probs: Some(probs),
            grads: None,
            samples: None,
            kernel: None,
            features: None,
            reference: None,
            gaussian: None,
            kernel_features: None,
            labels: None,
        }
    }

    /// Evidence holding a multi-label model's label probabilities only.
    pub fn from_labels(labels: LabelProbs) -> Self {
        Self {
            labels: Some(labels),
            ..Self::default()
        }
    }

    /// The label probabilities, or an error naming the scorer that needed them.
    pub fn labels(&self, scorer: &str) -> Result<&LabelProbs, ScoreError> {
        self.labels.as_ref().ok_or(ScoreError::Missing {
            scorer: scorer.to_string(),
            evidence: "a multi-label model's label probabilities",
        })
    }

    /// Evidence holding a regression model's Gaussian predictions only.
    pub fn from_gaussian(gaussian: Gaussian) -> Self {
        Self {
            gaussian: Some(gaussian),
            ..Self::default()
        }
    }

    /// Evidence holding kernel features of the pool and the labeled items only.
    pub fn from_kernel_features(features: KernelFeatures) -> Self {
        Self {
            kernel_features: Some(features),
            ..Self::default()
        }
    }

    /// The Gaussian predictions, or an error naming the scorer that needed them.
    pub fn gaussian(&self, scorer: &str) -> Result<&Gaussian, ScoreError> {
        self.gaussian.as_ref().ok_or(ScoreError::Missing {
            scorer: scorer.to_string(),
            evidence: "a regression model's Gaussian predictions",
        })
    }

    /// The features and last layer, or an error naming the scorer that needed them.
    pub fn features(&self, scorer: &str) -> Result<&Features, ScoreError> {
        self.features.as_ref().ok_or(ScoreError::Missing {
            scorer: scorer.to_string(),
            evidence: "penultimate features and the last layer",
        })
    }

    /// The DUQ kernel values, or an error naming the scorer that needed them.
    pub fn kernel(&self, scorer: &str) -> Result<&Kernel, ScoreError> {
        self.kernel.as_ref().ok_or(ScoreError::Missing {
            scorer: scorer.to_string(),
            evidence: "DUQ kernel values",
        })
    }

    /// The stochastic predictions, or an error naming the scorer that needed them.
    pub fn samples(&self, scorer: &str) -> Result<&Samples, ScoreError> {
        self.samples.as_ref().ok_or(ScoreError::Missing {
            scorer: scorer.to_string(),
            evidence: "stochastic predictions",
        })
    }

    /// The gradient norms, or an error naming the scorer that needed them.
    pub fn grads(&self, scorer: &str) -> Result<&GradNorms, ScoreError> {
        self.grads.as_ref().ok_or(ScoreError::Missing {
            scorer: scorer.to_string(),
            evidence: "gradient norms",
        })
    }

    /// The probabilities, or an error naming the scorer that needed them.
    pub fn probs(&self, scorer: &str) -> Result<&Probs, ScoreError> {
        self.probs.as_ref().ok_or(ScoreError::Missing {
            scorer: scorer.to_string(),
            evidence: "probabilities",
        })
    }

    /// Number of candidates the evidence covers.
    pub fn len(&self) -> usize {
        match (&self.probs, &self.gaussian, &self.kernel_features) {
            (Some(p), _, _) => p.n(),
            (None, Some(g), _) => g.n(),
            (None, None, Some(f)) => f.n(),
            (None, None, None) => self.labels.as_ref().map_or(0, LabelProbs::n),
        }
    }

    /// True when the evidence covers no candidate.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
