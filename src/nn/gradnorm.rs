//! Per-candidate, per-class, per-layer squared gradient norms: the evidence of REGrad, ExGrad
//! and their baselines.
//!
//! For candidate `x` and row `r` (class `c`: the output gradient `e_c - p`, i.e. the gradient
//! of `log p_c`; optionally the expected gradient `sum_c p_c (e_c - p)`), we need
//! `||d/d theta_l||^2` for every layer `l`. Two implementations:
//!
//! - `Cnn::grad_norms`: the standard CNN on CPU through the crate's sparse gradient kernel
//!   (the `kernels` module tree), exact up to summation order;
//! - [`site_grad_norms`]: any eval-mode forward that records a [`Site`] per parameterised
//!   layer (the MLP through [`linear_stack_grad_norms`], the CNN off the CPU), for a whole
//!   batch at once on any device: one backward of the batch per row, and each candidate's norms
//!   from its layer inputs and output gradients (the ghost-norm identity
//!   `||g a^T||^2 = ||g||^2 ||a||^2` in its Gram form over a candidate's perturbed copies,
//!   whose gradients are averaged before the norm; unfolded inputs for convolutions);
//! - [`autograd_grad_norms`]: any [`Classifier`] with `Var`-backed parameters, by per-candidate
//!   autograd (one backward per row). Slow; the fallback for user models and the independent
//!   reference the fast path is tested against.

use super::classifier::Classifier;
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

/// How a [`Site`]'s weight gradient is formed from its input and output gradient.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SiteKind {
    /// A dense layer: input `(m, in)`, weight gradient `d^T a`.
    Dense,
    /// A convolution: input patches `(m, ..positions, taps * in)` in im2col's `(ki, kj, c)`
    /// column order, weight gradient the patches times the output gradient, per group.
    Conv {
        /// Kernel taps `k * k`.
        taps: usize,
        /// Channel groups (1: an ordinary convolution).
        groups: usize,
    },
    /// A stride-1 ungrouped convolution on the CPU: input the layer's input images
    /// `(m, h, w, in)` (NHWC), the weight gradient formed per candidate by the crate's
    /// convolution kernels (Winograd where the layer is wide) instead of from stored patches.
    ConvImage {
        /// Square kernel size.
        kernel: usize,
        /// Zero padding on each side.
        padding: usize,
    },
    /// A per-channel scale (batch norm's weight): input `(m, ..positions, channels)`, the
    /// normalised activations, weight gradient `sum_positions d * a` per channel.
    Scale,
}

/// One parameterised layer of a batched gradient-norm pass: what its weight multiplies, and a
/// zero variable added to its output (candle keeps the gradients of variables only, so the
/// probe receives exactly the output's gradient).
pub struct Site {
    /// What the weight multiplies (see [`SiteKind`]).
    pub input: Tensor,
    /// Zeros of the output's shape `(m, ..., out)`, added to the layer's output.
    pub probe: candle_core::Var,
    /// Whether the layer has a bias (its gradient is the output gradient summed).
    pub bias: bool,
    /// How the weight gradient is formed.
    pub kind: SiteKind,
}

impl Site {
    /// A site for a layer whose output `z` (before any activation) is about to be used:
    /// returns the site and `z` plus its probe. Rank-2 inputs are dense layers, others
    /// ungrouped convolutions' patches.
    pub fn new(input: &Tensor, z: &Tensor, bias: bool) -> candle_core::Result<(Site, Tensor)> {
        let kind = if input.rank() == 2 {
            SiteKind::Dense
        } else {
            // The tap count matters only to grouped convolutions.
            SiteKind::Conv { taps: 1, groups: 1 }
        };
        Self::of(kind, input, z, bias)
    }

    /// A site of the given kind (see [`SiteKind`] for what `input` holds).
    pub fn of(
        kind: SiteKind,
        input: &Tensor,
        z: &Tensor,
        bias: bool,
    ) -> candle_core::Result<(Site, Tensor)> {
        let probe = candle_core::Var::zeros(z.shape(), z.dtype(), z.device())?;
        let out = (z + probe.as_tensor())?;
        Ok((
            Site {
                input: input.detach(),
                probe,
                bias,
                kind,
            },
            out,
        ))
    }
}

/// Per-candidate gradient norms from one forward pass over `x (n * copies, ...)` (each
/// candidate's copies adjacent) that recorded a [`Site`] per parameterised layer (input first)
/// and ended in `logits (n * copies, c)`: the quantities of [`autograd_grad_norms`], from
/// `rows + 1` backward passes of the whole batch instead of `n (rows + 1)`. Candidates must
/// not interact (eval mode: no batch statistics, no dropout), so a backward of the batch's
/// summed objective gives each candidate's own output gradients `d`. Candidate `i`'s weight
/// gradient is `sum_k d_ik^T a_ik` over its copies `k` (and positions): for a dense layer its
/// squared norm is taken in the Gram form `sum_{k,k'} (d_ik . d_ik')(a_ik . a_ik')` (the
/// ghost-norm identity `||d a^T||^2 = ||d||^2 ||a||^2` for one copy), for a convolution from
/// the product of unfolded inputs and output gradients itself; the bias gradient is `d`
/// summed.
pub fn site_grad_norms(
    logits: &Tensor,
    sites: &[Site],
    copies: usize,
    expected: bool,
) -> candle_core::Result<GradOut> {
    let m = logits.dim(0)?;
    if copies == 0 || m % copies != 0 || sites.is_empty() {
        candle_core::bail!("{m} inputs are not whole candidates of {copies} copies");
    }
    let n = m / copies;
    let lp = candle_nn::ops::log_softmax(logits, D::Minus1)?;
    let c = lp.dim(1)?;
    let rows = c + usize::from(expected);
    let lpc = lp.reshape((n, copies, c))?;
    let p0 = lpc.narrow(1, 0, 1)?.exp()?.detach();
    let nl = sites.len();
    let mut grams = vec![None; nl];
    let mut sq = vec![0f64; n * rows * nl];
    for r in 0..rows {
        let obj = if r < c {
            lp.narrow(1, r, 1)?.sum_all()?
        } else {
            lpc.broadcast_mul(&p0)?.sum_all()?
        };
        let grads = (obj / copies as f64)?.backward()?;
        for (l, site) in sites.iter().enumerate() {
            let Some(d) = grads.get(site.probe.as_tensor()) else {
                continue;
            };
            let norm = site_norm(site.kind, site.bias, &site.input, d, copies, &mut grams[l])?;
            for (i, v) in norm.into_iter().enumerate() {
                sq[(i * rows + r) * nl + l] = v;
            }
        }
    }
    // GradNorm: d KL(u || p0) = -(1/C) sum_c d log p0_c through the unperturbed copy; the L1
    // norm of the last (dense) weight's gradient `d a^T` is `|d|_1 |a|_1`.
    let obj = (lpc.narrow(1, 0, 1)?.sum_all()? * (-1.0 / c as f64))?;
    let grads = obj.backward()?;
    let last = &sites[nl - 1];
    let kl_l1 = match grads.get(last.probe.as_tensor()) {
        Some(d) if last.kind == SiteKind::Dense => dense_first_copy_l1(d, &last.input, copies)?,
        _ => vec![0.0; n],
    };
    Ok(GradOut {
        sq,
        rows,
        layers: nl,
        kl_l1,
    })
}

/// GradNorm's L1 norm of a dense layer's weight gradient `d a^T` on each candidate's
/// unperturbed copy, `|d|_1 |a|_1`, for output gradients `d (n * copies, out)` and inputs
/// `a (n * copies, in)`: `(n,)`.
pub fn dense_first_copy_l1(d: &Tensor, a: &Tensor, copies: usize) -> candle_core::Result<Vec<f64>> {
    let n = d.dim(0)? / copies.max(1);
    let first = |t: &Tensor| -> candle_core::Result<Tensor> {
        let w = t.dim(1)?;
        t.reshape((n, copies, w))?
            .narrow(1, 0, 1)?
            .abs()?
            .sum((1, 2))
    };
    (first(d)? * first(a)?)?
        .to_dtype(DType::F64)?
        .to_vec1::<f64>()
}

/// Per-candidate squared norms `(n,)` of one parameterised layer's weight (and bias)
/// gradient, from what its weight multiplied (`input`, see [`SiteKind`]) and its output
/// gradient `d (n * copies, ..., out)`, a candidate's copies summed before the norm. `gram`
/// caches a dense layer's per-candidate Gram matrix of its inputs across class rows.
pub fn site_norm(
    kind: SiteKind,
    bias: bool,
    input: &Tensor,
    d_raw: &Tensor,
    copies: usize,
    gram: &mut Option<Tensor>,
) -> candle_core::Result<Vec<f64>> {
    let m = d_raw.dim(0)?;
    if copies == 0 || m % copies != 0 {
        candle_core::bail!("{m} output gradients are not whole candidates of {copies} copies");
    }
    let n = m / copies;
    // `(m, ...)` -> `(n, copies * positions, width)`: a candidate's rows together.
    let per = |t: &Tensor| -> candle_core::Result<Tensor> {
        let w = t.dim(t.rank() - 1)?;
        t.reshape((n, (), w))
    };
    let d = per(d_raw)?;
    let mut norm = match kind {
        SiteKind::Dense => {
            if gram.is_none() {
                let a = per(input)?;
                *gram = Some(a.matmul(&a.t()?)?);
            }
            let g = gram.as_ref().expect("just set");
            (d.matmul(&d.t()?)? * g)?.sum((1, 2))?
        }
        SiteKind::Scale => super::layers::sum_rows(&(&d * per(input)?)?)?
            .sqr()?
            .sum(1)?,
        SiteKind::Conv { groups: 1, .. } => {
            let a = per(input)?;
            let (q, out, kc) = (d.dim(1)?, d.dim(2)?, a.dim(2)?);
            if q * (out + kc) < out * kc {
                // The Gram form: few positions, wide channels.
                (d.matmul(&d.t()?)? * a.matmul(&a.t()?)?)?.sum((1, 2))?
            } else {
                d.transpose(1, 2)?.matmul(&a)?.sqr()?.sum((1, 2))?
            }
        }
        SiteKind::Conv { taps, groups } => grouped_conv_norm(&d, &per(input)?, taps, groups)?,
        SiteKind::ConvImage { kernel, padding } => {
            let conv = crate::kernels::conv::Conv {
                k: kernel,
                pad: padding,
            };
            let v = crate::kernels::conv::candidate_weight_grad_norms(&conv, input, d_raw, copies)?;
            Tensor::from_vec(v, n, d.device())?.to_dtype(d.dtype())?
        }
    };
    if bias {
        norm = (norm + super::layers::sum_rows(&d)?.sqr()?.sum(1)?)?;
    }
    norm.to_dtype(DType::F64)?.to_vec1::<f64>()
}

/// Per-candidate squared norms `(n,)` of a grouped convolution's weight gradient from output
/// gradients `d (n, q, out)` and patches `a (n, q, taps * in)`: group `j`'s gradient is its
/// output channels' `d` times its input channels' columns.
fn grouped_conv_norm(
    d: &Tensor,
    a: &Tensor,
    taps: usize,
    groups: usize,
) -> candle_core::Result<Tensor> {
    let (n, q, out) = d.dims3()?;
    let cols = a.dim(2)?;
    if groups == 0 || taps == 0 || out % groups != 0 || cols % (taps * groups) != 0 {
        candle_core::bail!(
            "a convolution site of {out} outputs and {cols} columns is not {groups} groups of \
             {taps} taps"
        );
    }
    let (og, cg) = (out / groups, cols / (taps * groups));
    let a = a
        .reshape((n, q, taps, groups, cg))?
        .permute((0, 3, 1, 2, 4))?
        .reshape((n * groups, q, taps * cg))?;
    let d = d
        .reshape((n, q, groups, og))?
        .permute((0, 2, 3, 1))?
        .reshape((n * groups, og, q))?;
    d.matmul(&a)?.sqr()?.reshape((n, ()))?.sum(1)
}

/// [`site_grad_norms`] for a stack of dense layers (weight `(out, in)`, optional bias `(out,)`,
/// input first, ReLU between, the last one's output the logits) on `x (n * copies, ...)`,
/// flattened.
pub fn linear_stack_grad_norms(
    layers: &[(Tensor, Option<Tensor>)],
    x: &Tensor,
    copies: usize,
    expected: bool,
) -> candle_core::Result<GradOut> {
    let mut a = x.flatten_from(1)?.detach();
    let mut sites = Vec::with_capacity(layers.len());
    for (l, (w, b)) in layers.iter().enumerate() {
        let mut z = a.matmul(&w.detach().t()?)?;
        if let Some(b) = b {
            z = z.broadcast_add(&b.detach())?;
        }
        let (site, z) = Site::new(&a, &z, b.is_some())?;
        sites.push(site);
        a = if l + 1 < layers.len() { z.relu()? } else { z };
    }
    site_grad_norms(&a, &sites, copies, expected)
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
        let lp = candle_nn::ops::log_softmax(
            &model.forward(&xi, &mut super::classifier::Mode::Eval)?,
            D::Minus1,
        )?;
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
