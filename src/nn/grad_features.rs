//! Gradient features of regression models for the kernel batch selectors: per item, the
//! gradient of the predicted mean w.r.t. the parameters of every linear layer (`grad`) or the
//! last one (`ll`), summed over an ensemble's members as a sum of kernels.
//!
//! A layer's gradient is the outer product of its input (with a 1 for the bias) `a (in + 1)`
//! and the gradient w.r.t. its output `d (out)`, so the kernel is
//! `sum_layers (a . a') (d . d')`. The exact features concatenate `vec(a d^T)` over layers
//! and members. The sketch of dimension `p` (Holzmüller et al. 2023's `rp`) is a tensor
//! sketch: `sqrt(p) sum_layers (a G) * (d H)`, elementwise, with `G (in + 1, p)` and
//! `H (out, p)` drawn `N(0, 1/p)` per layer and member from the caller's RNG, so that its
//! inner products equal the kernel in expectation; sketching never forms `vec(a d^T)`.

use crate::nn::Regressor;
use crate::rng::normal;
use alkit_acquisition::FeatureRequest;
use candle_core::{Device, Result, Tensor};
use rand::RngCore;

/// The largest exact feature dimension: beyond it, ask for a sketch.
pub const MAX_EXACT_FEATURES: usize = 16_384;

/// The sketch matrices of one selection, shared by the labeled and the pool rows: per member,
/// per layer, `(G (in + 1, p), H (out, p))`.
pub struct GradSketch {
    dim: usize,
    members: Vec<Vec<(Tensor, Tensor)>>,
}

impl GradSketch {
    /// Draws the matrices for `members` networks whose layers' factor widths are `widths`
    /// (`(in + 1, out)` per layer), in member, layer, `G`-then-`H`, row-major order.
    pub fn draw(
        widths: &[(usize, usize)],
        members: usize,
        dim: usize,
        rng: &mut dyn RngCore,
        device: &Device,
    ) -> Result<Self> {
        let scale = 1.0 / (dim as f64).sqrt();
        let mut matrix = |rows: usize| -> Result<Tensor> {
            let v: Vec<f32> = (0..rows * dim)
                .map(|_| (normal(rng) * scale) as f32)
                .collect();
            Tensor::from_vec(v, (rows, dim), device)
        };
        let members = (0..members)
            .map(|_| {
                widths
                    .iter()
                    .map(|&(a, d)| Ok((matrix(a)?, matrix(d)?)))
                    .collect::<Result<Vec<_>>>()
            })
            .collect::<Result<_>>()?;
        Ok(Self { dim, members })
    }
}

/// The factors' widths `(in + 1, out)` per layer, read from one forward pass on `x`.
pub fn factor_widths(
    model: &dyn Regressor,
    x: &Tensor,
    request: FeatureRequest,
) -> Result<Vec<(usize, usize)>> {
    model
        .mean_grad_factors(&x.narrow(0, 0, 1)?, request.base)?
        .iter()
        .map(|(a, d)| Ok((a.dim(1)?, d.dim(1)?)))
        .collect()
}

/// The features `(b, p)` of rows `x (b, ...)` under `models` (an ensemble's members, or one),
/// sketched with `sketch` or exact without it.
pub fn grad_features(
    models: &[&dyn Regressor],
    x: &Tensor,
    request: FeatureRequest,
    sketch: Option<&GradSketch>,
) -> Result<Tensor> {
    let mut parts = Vec::new();
    let mut sum: Option<Tensor> = None;
    for (m, model) in models.iter().enumerate() {
        let factors = model.mean_grad_factors(x, request.base)?;
        for (l, (a, d)) in factors.iter().enumerate() {
            match sketch {
                Some(s) => {
                    let (g, h) = &s.members[m][l];
                    let f = a.matmul(g)?.mul(&d.matmul(h)?)?;
                    sum = Some(match sum {
                        Some(t) => t.add(&f)?,
                        None => f,
                    });
                }
                None => {
                    let outer = a.unsqueeze(2)?.broadcast_mul(&d.unsqueeze(1)?)?;
                    parts.push(outer.flatten_from(1)?);
                }
            }
        }
    }
    match (sketch, sum) {
        (Some(s), Some(t)) => t.affine((s.dim as f64).sqrt(), 0.0),
        _ => Tensor::cat(&parts, 1),
    }
}
