//! Per-candidate, per-class, per-layer squared gradient norms: the evidence of REGrad, ExGrad
//! and their baselines.
//!
//! For candidate `x` and row `r` (class `c`: the output gradient `e_c - p`, i.e. the gradient
//! of `log p_c`; optionally the expected gradient `sum_c p_c (e_c - p)`), we need
//! `||d/d theta_l||^2` for every layer `l`. Two implementations:
//!
//! - `Cnn::grad_norms`: the standard CNN on CPU through the crate's sparse gradient kernel
//!   (the `kernels` module tree), exact up to summation order;
//! - [`autograd_grad_norms`]: any [`Classifier`] with `Var`-backed parameters, by per-candidate
//!   autograd (one backward per row). Slow; the fallback for user models and the independent
//!   reference the fast path is tested against.

use super::Classifier;
use crate::error::Result;
use candle_core::{DType, Tensor, D};

pub use crate::kernels::gradnorm::GradOut;

/// Groups parameter names into layers by the prefix before the last `.`, in order of first
/// appearance (the order a model creates them, input first).
pub fn layer_groups(names: &[String]) -> Vec<String> {
    let mut layers: Vec<String> = Vec::new();
    for n in names {
        let prefix = n
            .rsplit_once('.')
            .map_or(n.as_str(), |(p, _)| p)
            .to_string();
        if !layers.contains(&prefix) {
            layers.push(prefix);
        }
    }
    layers
}

/// Gradient norms of any classifier whose parameters are `Var`-backed `params` (name, tensor),
/// by autograd: for each candidate, one forward over its copies and one backward per row.
/// Layers are [`layer_groups`] of the names; GradNorm's L1 uses the last layer's `weight`.
pub fn autograd_grad_norms(
    model: &dyn Classifier,
    params: &[(String, Tensor)],
    x: &Tensor,
    copies: usize,
    expected: bool,
) -> Result<GradOut> {
    let names: Vec<String> = params.iter().map(|(n, _)| n.clone()).collect();
    let layers = layer_groups(&names);
    let layer_of: Vec<usize> = names
        .iter()
        .map(|n| {
            let p = n.rsplit_once('.').map_or(n.as_str(), |(p, _)| p);
            layers.iter().position(|l| l == p).unwrap_or(0)
        })
        .collect();
    let last_weight = params.iter().rposition(|(n, _)| n.ends_with("weight"));
    let c = model.classes();
    let rows = c + usize::from(expected);
    let n = x.dim(0)? / copies;
    let mut sq = Vec::with_capacity(n * rows * layers.len());
    let mut kl_l1 = Vec::with_capacity(n);
    for i in 0..n {
        let xi = x.narrow(0, i * copies, copies)?;
        let lp =
            candle_nn::ops::log_softmax(&model.forward(&xi, &mut super::Mode::Eval)?, D::Minus1)?;
        let p0 = lp.get(0)?.exp()?.detach();
        for r in 0..rows {
            // Mean over copies of log p_r, or of sum_c p0_c log p_c for the expected row.
            let obj = if r < c {
                lp.narrow(1, r, 1)?.sum_all()?
            } else {
                lp.broadcast_mul(&p0.unsqueeze(0)?)?.sum_all()?
            };
            let obj = (obj / copies as f64)?;
            let grads = obj.backward()?;
            let mut per_layer = vec![0f64; layers.len()];
            for ((_, t), &l) in params.iter().zip(&layer_of) {
                if let Some(g) = grads.get(t) {
                    per_layer[l] += g
                        .to_dtype(DType::F64)?
                        .sqr()?
                        .sum_all()?
                        .to_scalar::<f64>()?;
                }
            }
            sq.extend_from_slice(&per_layer);
        }
        // GradNorm: d KL(u || p0) = -(1/C) sum_c d log p0_c, last layer weight, L1.
        let kl = match last_weight {
            Some(j) => {
                let obj = (lp.get(0)?.sum_all()? * (-1.0 / c as f64))?;
                let g = obj.backward()?;
                match g.get(&params[j].1) {
                    Some(t) => t
                        .to_dtype(DType::F64)?
                        .abs()?
                        .sum_all()?
                        .to_scalar::<f64>()?,
                    None => 0.0,
                }
            }
            None => 0.0,
        };
        kl_l1.push(kl);
    }
    Ok(GradOut {
        sq,
        rows,
        layers: layers.len(),
        kl_l1,
    })
}
