//! The last-layer view of a network: its penultimate features `h` and last linear layer
//! `W`, `b` ([`Features`]), the gradient evidence over that layer in closed form, and
//! [`AtLastLayer`], which runs any gradient scorer on that evidence.
//!
//! A model known only by its features and last layer (an ONNX export, a frozen backbone, a
//! matrix of embeddings with a head) has no gradients through the rest of the network, but
//! over the last layer they are exact: with logits `z = W h + b` and `p = softmax(z)`, the
//! gradient of `log p_c` is `(e_c - p) [h; 1]^T` (weight and bias), so
//! `||g_c||^2 = ||e_c - p||^2 (||h||^2 + 1)`, and GradNorm's L1 norm of the weight's
//! gradient of `KL(u || p)` is `||p - u||_1 ||h||_1`. No per-candidate backward is needed.

use crate::{Evidence, GradLayers, GradNorms, Needs, Probs, ScoreError, Scorer};
use std::sync::Arc;

/// Penultimate features `h (n, d)` of `n` candidates and the last linear layer `W (c, d)`,
/// `b (c,)` that maps them to logits `z = h W^T + b`. All row-major `f32`, finite.
#[derive(Debug, Clone, PartialEq)]
pub struct Features {
    h: Vec<f32>,
    n: usize,
    d: usize,
    w: Vec<f32>,
    b: Vec<f32>,
}

impl Features {
    /// Wraps features `h (n, d)`, weight `w (c, d)` and bias `b (c,)`, checking the shapes
    /// (`d > 0`, `c > 0`) and that every value is finite.
    pub fn new(
        h: Vec<f32>,
        n: usize,
        d: usize,
        w: Vec<f32>,
        b: Vec<f32>,
    ) -> Result<Self, ScoreError> {
        let c = b.len();
        if d == 0
            || c == 0
            || Some(h.len()) != n.checked_mul(d)
            || Some(w.len()) != c.checked_mul(d)
        {
            return Err(ScoreError::Shape {
                what: "features and last layer",
                expected: format!("h ({n}, d > 0), W (c > 0, d), b (c,) with d = {d}"),
                got: format!(
                    "{} feature values, {} weight values, {c} bias values",
                    h.len(),
                    w.len()
                ),
            });
        }
        if let Some(position) = h.iter().position(|v| !v.is_finite()) {
            return Err(ScoreError::NonFinite {
                position: position / d,
                value: h[position],
            });
        }
        if let Some(v) = w.iter().chain(&b).find(|v| !v.is_finite()) {
            return Err(ScoreError::Shape {
                what: "last layer",
                expected: "finite weights and bias".into(),
                got: format!("{v}"),
            });
        }
        Ok(Self { h, n, d, w, b })
    }

    /// The predictive probabilities `softmax(h W^T + b)` `(n, c)`, computed in `f64`.
    pub fn probs(&self) -> Result<Probs, ScoreError> {
        let c = self.classes();
        let mut out = Vec::with_capacity(self.n * c);
        let mut h = Vec::with_capacity(self.d);
        for i in 0..self.n {
            h.clear();
            h.extend(self.row(i).iter().map(|&v| f64::from(v)));
            let z = crate::linalg::logits(&h, &self.w, &self.b);
            out.extend(crate::linalg::softmax(&z).iter().map(|&p| p as f32));
        }
        Probs::new(out, self.n, c)
    }

    /// Number of candidates `n`.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Feature dimension `d`.
    pub fn dim(&self) -> usize {
        self.d
    }

    /// Number of classes `c`.
    pub fn classes(&self) -> usize {
        self.b.len()
    }

    /// Candidate `i`'s features `(d,)`.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.h[i * self.d..(i + 1) * self.d]
    }

    /// The raw row-major features `(n, d)`.
    pub fn as_slice(&self) -> &[f32] {
        &self.h
    }

    /// The last layer's weight `(c, d)`, row-major.
    pub fn weight(&self) -> &[f32] {
        &self.w
    }

    /// The last layer's bias `(c,)`.
    pub fn bias(&self) -> &[f32] {
        &self.b
    }

    /// Gradient evidence over the last layer (one layer: weight and bias together), in closed
    /// form from the features and the probabilities `probs (n, c)` (the model's own, so that
    /// scorers combine them with norms of the same prediction): per class
    /// `||e_c - p||^2 (||h||^2 + 1)`; with `expected`, the expected gradient
    /// `sum_c p_c (e_c - p) = p (1 - sum_c p_c)` (zero up to rounding) in the row after the
    /// classes; GradNorm's `||p - 1/c||_1 ||h||_1`. Sums in `f64`.
    pub fn last_layer_grads(&self, probs: &Probs, expected: bool) -> Result<GradNorms, ScoreError> {
        let c = self.classes();
        if probs.n() != self.n || probs.classes() != c {
            return Err(ScoreError::Shape {
                what: "probabilities beside features",
                expected: format!("({}, {c})", self.n),
                got: format!("({}, {})", probs.n(), probs.classes()),
            });
        }
        let rows = c + usize::from(expected);
        let mut sq = Vec::with_capacity(self.n * rows);
        let mut l1 = Vec::with_capacity(self.n);
        let mut one = Vec::with_capacity(rows);
        for i in 0..self.n {
            let h: Vec<f64> = self.row(i).iter().map(|&v| f64::from(v)).collect();
            let p: Vec<f64> = probs.row(i).iter().map(|&v| f64::from(v)).collect();
            one.clear();
            l1.push(last_layer_norms(&h, &p, expected, &mut one) as f32);
            sq.extend(one.iter().map(|&v| v as f32));
        }
        GradNorms::new(sq, self.n, c, rows, 1, l1)
    }
}

/// The closed forms of [`Features::last_layer_grads`] for one candidate in `f64`: appends
/// the squared norms of each class's gradient of `log p_c` over the last layer's weight and
/// bias (`||e_c - p||^2 (||h||^2 + 1)`), then with `expected` the expected gradient's
/// (`||p (1 - sum p)||^2 (||h||^2 + 1)`), to `sq`, and returns GradNorm's
/// `||p - 1/c||_1 ||h||_1` (weight only, as Huang et al. 2021 take it).
pub fn last_layer_norms(h: &[f64], p: &[f64], expected: bool, sq: &mut Vec<f64>) -> f64 {
    let hh = h.iter().map(|v| v * v).sum::<f64>() + 1.0;
    let pp: f64 = p.iter().map(|v| v * v).sum();
    sq.extend(p.iter().map(|pc| (1.0 - 2.0 * pc + pp) * hh));
    if expected {
        let rest = 1.0 - p.iter().sum::<f64>();
        sq.push(pp * rest * rest * hh);
    }
    let uniform = 1.0 / p.len().max(1) as f64;
    let dp: f64 = p.iter().map(|v| (v - uniform).abs()).sum();
    dp * h.iter().map(|v| v.abs()).sum::<f64>()
}

/// A gradient scorer run over the last layer only: the same formula on
/// [`Features::last_layer_grads`]'s evidence, named `<name>@last` so that tables and files
/// say which gradients they hold.
pub struct AtLastLayer {
    inner: Arc<dyn Scorer>,
    name: String,
}

impl AtLastLayer {
    /// `inner` over the last layer; `None` when it reads no gradients (it would be unchanged).
    pub fn new(inner: Arc<dyn Scorer>) -> Option<Self> {
        inner.needs().grads?;
        let name = format!("{}@last", inner.name());
        Some(Self { inner, name })
    }
}

impl Scorer for AtLastLayer {
    fn name(&self) -> &str {
        &self.name
    }
    fn needs(&self) -> Needs {
        let mut needs = self.inner.needs();
        if let Some(g) = needs.grads.as_mut() {
            g.layers = GradLayers::Last;
        }
        needs
    }
    fn score(&self, evidence: &Evidence) -> Result<Vec<f32>, ScoreError> {
        self.inner.score(evidence)
    }
    fn joint(&self) -> bool {
        self.inner.joint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closed_forms_match_a_hand_worked_case() {
        // h = (1, 2), p = (0.25, 0.75): ||h||^2 + 1 = 6; sum p^2 = 0.625;
        // class 0: 1 - 0.5 + 0.625 = 1.125 -> 6.75; class 1: 1 - 1.5 + 0.625 = 0.125 -> 0.75.
        // GradNorm: (|0.25 - 0.5| + |0.75 - 0.5|) * 3 = 1.5.
        let f = Features::new(vec![1.0, 2.0], 1, 2, vec![0.0; 4], vec![0.0; 2]).unwrap();
        let p = Probs::new(vec![0.25, 0.75], 1, 2).unwrap();
        let g = f.last_layer_grads(&p, true).unwrap();
        assert_eq!(g.layers(), 1);
        assert_eq!(g.class(0, 0), &[6.75]);
        assert_eq!(g.class(0, 1), &[0.75]);
        assert_eq!(g.expected(0), Some(&[0.0][..]));
        assert_eq!(g.kl_uniform_l1(0), 1.5);
    }

    #[test]
    fn shapes_and_values_are_checked() {
        assert!(Features::new(vec![1.0; 5], 2, 3, vec![0.0; 6], vec![0.0; 2]).is_err());
        assert!(Features::new(vec![1.0; 6], 2, 3, vec![0.0; 5], vec![0.0; 2]).is_err());
        assert!(Features::new(vec![], 0, 0, vec![], vec![]).is_err());
        assert!(Features::new(vec![f32::NAN; 3], 1, 3, vec![0.0; 6], vec![0.0; 2]).is_err());
        assert!(Features::new(vec![1.0; 3], 1, 3, vec![0.0; 6], vec![f32::INFINITY, 0.0]).is_err());
        let f = Features::new(vec![1.0; 3], 1, 3, vec![0.0; 6], vec![0.0; 2]).unwrap();
        let p = Probs::new(vec![0.2, 0.3, 0.5], 1, 3).unwrap();
        assert!(f.last_layer_grads(&p, false).is_err());
    }

    #[test]
    fn the_wrapper_renames_and_asks_for_last_layer_gradients() {
        let w = AtLastLayer::new(Arc::new(crate::NeGrad)).unwrap();
        assert_eq!(w.name(), "negrad@last");
        assert_eq!(w.needs().grads.unwrap().layers, GradLayers::Last);
        assert!(AtLastLayer::new(Arc::new(crate::Builtin::Entropy)).is_none());
    }
}
