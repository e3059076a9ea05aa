//! Batch selection for regression in a kernel's feature space (Holzmüller, Zaverkin, Kästner
//! & Steinwart 2023, "A Framework and Benchmark for Deep Batch Active Learning for
//! Regression"): a base kernel given by feature rows of the pool and of the labeled items
//! ([`KernelFeatures`]: a network's last-layer or sketched whole-network gradient features,
//! computed on the model side as [`FeatureRequest`] asks, or any features a user brings), an
//! optional transform (the Gaussian-process posterior given the labeled items), and one of
//! the paper's selection rules ([`KernelRule`]), run over the pool alone (P mode) or over the
//! labeled items and the pool (TP mode).
//!
//! [`KernelBatch::paper`] gives each rule the combination the paper recommends (sketched
//! gradient features of dimension 512; the posterior with `sigma^2 = 1e-6` for MaxDiag,
//! MaxDet and BAIT; TP mode for the distance rules). Computations run in `f64` on `(n + m, p)`
//! rows, as the reference implementation does with `allow_float64`: memory is `O((n + m) p)`
//! (1,000,000 x 512 rows: 4 GB), never `n x n`.

mod distance;
mod greedy;
mod transform;

use crate::{BatchSelector, Evidence, Needs, ScoreError};
use distance::{Distance, Table};
use greedy::{max_diag, run, Bait, Greedy, MaxDet};
use rand::RngCore;
use transform::{posterior, Rows};

/// Which network features define the base kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BaseKernel {
    /// The gradient of the predicted mean w.r.t. the last linear layer's weights and bias
    /// (`ll`): the penultimate features with a 1 appended.
    LastLayer,
    /// The gradient of the predicted mean w.r.t. every linear layer's weights and biases
    /// (`grad`, the neural tangent kernel of the trained network).
    Grad,
}

/// The kernel features a rule asks the model side for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FeatureRequest {
    /// The base kernel.
    pub base: BaseKernel,
    /// The dimension of a seeded Gaussian sketch of the features (tensor sketch per layer,
    /// summed over layers and ensemble members), or `None` for the exact features.
    pub sketch: Option<usize>,
}

impl FeatureRequest {
    /// The paper's best: sketched gradient features of dimension 512.
    pub const PAPER: FeatureRequest = FeatureRequest {
        base: BaseKernel::Grad,
        sketch: Some(512),
    };
}

/// Kernel features of the pool `(n, p)` and of the labeled items `(m, p)`, `m` may be 0.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelFeatures {
    pool: Vec<f32>,
    labeled: Vec<f32>,
    dim: usize,
}

impl KernelFeatures {
    /// Wraps row-major rows, checking their shapes and that every value is finite.
    pub fn new(pool: Vec<f32>, labeled: Vec<f32>, dim: usize) -> Result<Self, ScoreError> {
        for (what, x) in [
            ("pool kernel features", &pool),
            ("labeled kernel features", &labeled),
        ] {
            if dim == 0 || !x.len().is_multiple_of(dim) {
                return Err(ScoreError::Shape {
                    what,
                    expected: format!("rows of p = {dim} > 0 values"),
                    got: format!("{} values", x.len()),
                });
            }
            if let Some(i) = x.iter().position(|v| !v.is_finite()) {
                return Err(ScoreError::NonFinite {
                    position: i / dim,
                    value: x[i],
                });
            }
        }
        Ok(Self { pool, labeled, dim })
    }

    /// Pool rows `n`.
    pub fn n(&self) -> usize {
        self.pool.len() / self.dim
    }

    /// Labeled rows `m`.
    pub fn m(&self) -> usize {
        self.labeled.len() / self.dim
    }

    /// Feature dimension `p`.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The pool rows `(n, p)`.
    pub fn pool(&self) -> &[f32] {
        &self.pool
    }

    /// The labeled rows `(m, p)`.
    pub fn labeled(&self) -> &[f32] {
        &self.labeled
    }
}

/// A selection rule of the paper (closed set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KernelRule {
    /// Top-k of the kernel's diagonal (posterior variance): the naive baseline.
    MaxDiag,
    /// Greedy determinant maximisation (the regression analogue of BatchBALD).
    MaxDet,
    /// BAIT, forward only (`bait-f`) or forward-backward (`bait-fb`: twice the batch selected,
    /// then half of it dropped).
    Bait {
        /// Whether to over-select and drop (forward-backward).
        backward: bool,
    },
    /// Greedy farthest-point selection (core-set).
    MaxDist,
    /// k-means++ seeding (the regression analogue of BADGE).
    KMeansPP,
    /// Largest cluster, maximum distance (the paper's own rule).
    Lcmd,
}

impl KernelRule {
    /// The registry name.
    pub fn name(self) -> &'static str {
        match self {
            KernelRule::MaxDiag => "maxdiag",
            KernelRule::MaxDet => "maxdet",
            KernelRule::Bait { backward: false } => "bait",
            KernelRule::Bait { backward: true } => "bait-fb",
            KernelRule::MaxDist => "maxdist",
            KernelRule::KMeansPP => "kmeanspp",
            KernelRule::Lcmd => "lcmd",
        }
    }
}

/// One of the paper's selection rules over kernel features (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KernelBatch {
    /// The rule.
    pub rule: KernelRule,
    /// The features it asks for.
    pub request: FeatureRequest,
    /// TP mode: the labeled rows join the selection (added first); P mode otherwise.
    pub with_labeled: bool,
    /// The posterior transform's noise `sigma` (after scaling the labeled rows to unit mean
    /// squared norm), or `None` to select on the base kernel.
    pub posterior: Option<f64>,
    /// The noise `sigma` MaxDet and BAIT add to the kernel's diagonal.
    pub noise: f64,
}

impl KernelBatch {
    /// The paper's `sigma`: `sigma^2 = 1e-6`.
    pub const SIGMA: f64 = 1e-3;

    /// `rule` with the paper's recommended kernel, transform and mode: sketched gradients
    /// (512); the posterior given the labeled items for MaxDiag, MaxDet and BAIT (P mode);
    /// no transform and TP mode for MaxDist, k-means++ and LCMD.
    pub fn paper(rule: KernelRule) -> Self {
        let distance = matches!(
            rule,
            KernelRule::MaxDist | KernelRule::KMeansPP | KernelRule::Lcmd
        );
        Self {
            rule,
            request: FeatureRequest::PAPER,
            with_labeled: distance,
            posterior: (!distance).then_some(Self::SIGMA),
            noise: Self::SIGMA,
        }
    }

    /// Selects `k` pool rows from kernel features directly (the evidence-free entry Python
    /// and [`BatchSelector::select`] share).
    pub fn select_features(
        &self,
        f: &KernelFeatures,
        k: usize,
        rng: &mut dyn RngCore,
    ) -> Result<Vec<usize>, ScoreError> {
        let (n, m, p) = (f.n(), f.m(), f.dim());
        if k > n {
            return Err(ScoreError::TooMany { k, n });
        }
        for (setting, v) in [
            ("sigma", self.posterior.unwrap_or(1.0)),
            ("noise", self.noise),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(ScoreError::Setting {
                    setting,
                    why: format!("{v}; expected a finite value >= 0"),
                });
            }
        }
        let distance = matches!(
            self.rule,
            KernelRule::MaxDist | KernelRule::KMeansPP | KernelRule::Lcmd
        );
        let added = if self.with_labeled { m } else { 0 };
        if distance && self.posterior.is_none() {
            // The features as given: f32 rows, no f64 copy.
            let mut x = f.pool().to_vec();
            if self.with_labeled {
                x.extend_from_slice(f.labeled());
            }
            let mut state = Distance::new(self.rule, Table { x, p }, n);
            return Ok(run(&mut state, (n, added), k, rng).0);
        }
        if self.rule == KernelRule::MaxDet {
            return self.max_det(f, k, rng);
        }
        let widen = |x: &[f32]| Rows::widened(x, &[], p, 1.0);
        let (mut pool, mut labeled) = (widen(f.pool()), widen(f.labeled()));
        if let Some(sigma) = self.posterior {
            posterior(&mut pool, &mut labeled, sigma)?;
        }
        if self.rule == KernelRule::MaxDiag {
            return max_diag(&pool, n, k);
        }
        let extra = if self.with_labeled {
            pool.x.extend_from_slice(&labeled.x);
            None
        } else {
            Some(labeled)
        };
        let mut state: Box<dyn Greedy> = match self.rule {
            KernelRule::Bait { backward } => {
                let mut bait = Bait::new(pool, extra.as_ref(), n, self.noise);
                let over = if backward { (2 * k).min(n) } else { k };
                let (mut picks, filled) = run(&mut bait, (n, added), over, rng);
                if filled {
                    picks.truncate(k);
                } else {
                    bait.backward(&mut picks, k);
                }
                return Ok(picks);
            }
            _ => Box::new(Distance::new(self.rule, Table { x: pool.x, p }, n)),
        };
        Ok(run(state.as_mut(), (n, added), k, rng).0)
    }

    /// MaxDet over the pool rows followed by the labeled rows. With fewer labeled rows than
    /// features the posterior is not a transform of the rows but MaxDet's own conditioning on
    /// each labeled row in turn (the rank-one update it makes for a pick, with the posterior's
    /// noise, after the same scaling): the same kernel for `n m p` work instead of `n p^2`.
    fn max_det(
        &self,
        f: &KernelFeatures,
        k: usize,
        rng: &mut dyn RngCore,
    ) -> Result<Vec<usize>, ScoreError> {
        let (n, m, p) = (f.n(), f.m(), f.dim());
        let condition = self.posterior.filter(|_| m <= p);
        let scale = match condition {
            Some(_) => transform::unit_scale(&Rows::widened(f.labeled(), &[], p, 1.0)),
            None => 1.0,
        };
        let mut rows = Rows::widened(f.pool(), f.labeled(), p, scale);
        if let (Some(sigma), None) = (self.posterior, condition) {
            let mut labeled = Rows {
                x: rows.x.split_off(n * p),
                p,
            };
            posterior(&mut rows, &mut labeled, sigma)?;
            rows.x.extend_from_slice(&labeled.x);
        }
        let mut state = MaxDet::new(rows, n, self.noise);
        if let Some(sigma) = condition {
            state.condition(n, m, sigma);
        }
        let added = if self.with_labeled { m } else { 0 };
        Ok(run(&mut state, (n, added), k, rng).0)
    }
}

impl BatchSelector for KernelBatch {
    fn name(&self) -> &str {
        self.rule.name()
    }

    fn needs(&self) -> Needs {
        Needs::kernel_features(self.request)
    }

    fn select(
        &self,
        evidence: &Evidence,
        k: usize,
        rng: &mut dyn RngCore,
    ) -> Result<Vec<usize>, ScoreError> {
        let f = evidence
            .kernel_features
            .as_ref()
            .ok_or(ScoreError::Missing {
                scorer: self.rule.name().to_string(),
                evidence: "kernel features of the pool and the labeled items",
            })?;
        self.select_features(f, k, rng)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linalg::unit;
    use rand::SeedableRng;

    /// Two tight clusters of pool rows and one far row, two labeled rows in the first cluster.
    fn toy() -> KernelFeatures {
        let pool = vec![
            1.0, 0.0, 1.1, 0.1, 0.9, -0.1, // cluster A
            5.0, 5.0, 5.2, 4.9, 4.8, 5.1, // cluster B
            -3.0, 4.0, // far
        ];
        KernelFeatures::new(pool, vec![1.0, 0.05, 0.95, 0.0], 2).unwrap()
    }

    fn rng() -> rand_chacha::ChaCha8Rng {
        rand_chacha::ChaCha8Rng::seed_from_u64(7)
    }

    #[test]
    fn distance_rules_leave_the_labeled_cluster_first() {
        let f = toy();
        for rule in [KernelRule::MaxDist, KernelRule::Lcmd] {
            let picks = KernelBatch {
                request: FeatureRequest::PAPER,
                ..KernelBatch::paper(rule)
            }
            .select_features(&f, 3, &mut rng())
            .unwrap();
            assert_eq!(picks.len(), 3);
            // The first pick is the farthest row from the labeled cluster: (5.2, 4.9).
            assert_eq!(picks[0], 4, "{rule:?}");
            assert!(!picks.iter().any(|&i| i < 3), "{rule:?} {picks:?}");
        }
    }

    #[test]
    fn every_rule_returns_k_distinct_pool_rows() {
        let f = toy();
        for rule in [
            KernelRule::MaxDiag,
            KernelRule::MaxDet,
            KernelRule::Bait { backward: false },
            KernelRule::Bait { backward: true },
            KernelRule::MaxDist,
            KernelRule::KMeansPP,
            KernelRule::Lcmd,
        ] {
            for k in [0, 1, 4, 7] {
                let picks = KernelBatch::paper(rule)
                    .select_features(&f, k, &mut rng())
                    .unwrap();
                let mut seen = picks.clone();
                seen.sort_unstable();
                seen.dedup();
                assert_eq!((picks.len(), seen.len()), (k, k), "{rule:?} {k}");
                assert!(picks.iter().all(|&i| i < 7));
            }
            assert!(matches!(
                KernelBatch::paper(rule).select_features(&f, 8, &mut rng()),
                Err(ScoreError::TooMany { k: 8, n: 7 })
            ));
        }
    }

    #[test]
    fn maxdet_conditioning_on_the_labeled_rows_is_the_posterior_transform() {
        // Random rows, fewer labeled (5) than features (8): select_features conditions on
        // each labeled row; here the rows are transformed as the other rules' posterior is.
        let mut values = rng();
        let mut draw = |rows: usize| -> Vec<f32> {
            (0..rows * 8)
                .map(|i| unit(&mut values) as f32 * (1 + i % 8) as f32)
                .collect()
        };
        let f = KernelFeatures::new(draw(60), draw(5), 8).unwrap();
        for with_labeled in [false, true] {
            let rule = KernelBatch {
                with_labeled,
                posterior: Some(0.1),
                noise: 0.05,
                ..KernelBatch::paper(KernelRule::MaxDet)
            };
            let ours = rule.select_features(&f, 12, &mut rng()).unwrap();
            let widen = |x: &[f32]| Rows::widened(x, &[], 8, 1.0);
            let (mut pool, mut labeled) = (widen(f.pool()), widen(f.labeled()));
            posterior(&mut pool, &mut labeled, 0.1).unwrap();
            pool.x.extend_from_slice(&labeled.x);
            let mut state = MaxDet::new(pool, 60, 0.05);
            let added = if with_labeled { 5 } else { 0 };
            let want = run(&mut state, (60, added), 12, &mut rng()).0;
            assert_eq!(ours, want, "TP {with_labeled}");
        }
    }

    #[test]
    fn hostile_features_are_refused_by_name() {
        assert!(KernelFeatures::new(vec![1.0, f32::NAN], vec![], 2).is_err());
        assert!(KernelFeatures::new(vec![1.0, 2.0, 3.0], vec![], 2).is_err());
        assert!(KernelFeatures::new(vec![], vec![], 0).is_err());
        let bad = KernelBatch {
            posterior: Some(-1.0),
            ..KernelBatch::paper(KernelRule::MaxDet)
        };
        assert!(matches!(
            bad.select_features(&toy(), 1, &mut rng()),
            Err(ScoreError::Setting {
                setting: "sigma",
                ..
            })
        ));
    }
}
