//! The block's batch norm + affine + ReLU + 2x2 max-pool as one op ([`BnReluPool`]) and its
//! vector-Jacobian product with respect to the convolution output as a second
//! ([`BnReluPoolGrad`]), a [`pair`] sharing one preparation; each with an exact backward.

use super::super::dispatch::with_float;
use super::super::elem::Elem;
use super::super::enabled::entry;
use super::super::storage::{into_storage, storage_slice, with_cpu_slices};
use super::super::threading::join;
use super::dims::Dims;
use super::prep::{Float, Prepared, Shared};
use super::vjp::{vjp_bwd_k, vjp_k};
use candle_core::{CpuStorage, CustomOp2, CustomOp3, Layout, Result, Shape, Tensor, WithDType};
use std::sync::Arc;

/// Training-mode batch norm + affine + ReLU + 2x2 max-pool: `(y (b, h, w, c), params (3, c))`
/// -> `(b, h/2, w/2, c)` (floor, first maximum wins, like PyTorch).
pub struct BnReluPool(Arc<Shared>);

/// The vector-Jacobian product of [`BnReluPool`] with respect to `y`, as a differentiable op:
/// `(gp (b, h/2, w/2, c), y (b, h, w, c), params (3, c))` -> `gy (b, h, w, c)`.
pub struct BnReluPoolGrad(pub(super) Arc<Shared>);

/// The two ops of one block's forward, sharing one preparation: apply both to the same `y` and
/// `params` (one pair per forward pass).
pub fn pair() -> (BnReluPool, BnReluPoolGrad) {
    let shared = Arc::new(Shared::default());
    (BnReluPool(shared.clone()), BnReluPoolGrad(shared))
}

fn check_params(l: &Layout, c: usize, op: &str) -> Result<()> {
    if l.dims() != [3, c] {
        candle_core::bail!("{op}: params must be (3, {c}), got {:?}", l.dims());
    }
    Ok(())
}

/// `(3, c)` parameter gradient from `dgamma` and `dbeta` (the bias row is zero).
fn param_grad<T: Elem + WithDType>(
    dgamma: &[f64],
    dbeta: Option<&[f64]>,
    like: &Tensor,
) -> Result<Tensor> {
    let c = dgamma.len();
    let mut v: Vec<T> = dgamma.iter().map(|&g| <T as Elem>::from_f64(g)).collect();
    match dbeta {
        Some(b) => v.extend(b.iter().map(|&g| <T as Elem>::from_f64(g))),
        None => v.extend(std::iter::repeat_n(T::ZERO, c)),
    }
    v.extend(std::iter::repeat_n(T::ZERO, c));
    Tensor::from_vec(v, (3, c), like.device())
}

impl BnReluPool {
    /// The backward for `grad (b, h/2, w/2, c)`: `(gy (b, h, w, c), dparams (3, c))`, with
    /// `extra (b, h, w, c)` (another consumer's gradient with respect to `y`) added to `gy` in
    /// place as `(0 + extra) + gy`, the order of candle's accumulation.
    pub(super) fn vjp(
        &self,
        y: &Tensor,
        params: &Tensor,
        grad: &Tensor,
        extra: Option<&Tensor>,
    ) -> Result<(Tensor, Tensor)> {
        let d = Dims::from_layout(y.layout(), self.name())?;
        let grad = grad.contiguous()?;
        let extra = match extra {
            Some(e) if e.dims() != y.dims() => candle_core::bail!(
                "{}: a gradient of {:?} for y {:?}",
                self.name(),
                e.dims(),
                y.dims()
            ),
            Some(e) => Some(e.contiguous()?),
            None => None,
        };
        fn run<T: Float>(
            sh: &Shared,
            [grad, y, params]: [&Tensor; 3],
            extra: Option<&Tensor>,
            d: Dims,
        ) -> Result<(Tensor, Tensor)> {
            let mut ts = vec![grad, y, params];
            ts.extend(extra);
            let (gy, dgamma, dbeta) =
                with_cpu_slices::<T, _>(&ts, "fused duq kernel", |s| -> Result<_> {
                    let (prep, _) = sh.prep(s[1], s[2], d)?;
                    let (mut gy, dgamma, dbeta) = vjp_k(s[0], s[1], prep, d);
                    if let Some(e) = s.get(3) {
                        add_after(e, &mut gy);
                    }
                    Ok((gy, dgamma, dbeta))
                })??;
            Ok((
                Tensor::from_vec(gy, y.shape(), y.device())?,
                param_grad::<T>(&dgamma, Some(&dbeta), params)?,
            ))
        }
        let ts = [&grad, y, params];
        with_float!(self.name(), y.dtype(), |T| run::<T>(
            &self.0,
            ts,
            extra.as_ref(),
            d
        ))
    }
}

/// `acc[i] = (0 + first[i]) + acc[i]`: `first` accumulated before `acc`, as candle's backward
/// adds a node's gradients (the `0 +` turns a `-0` of `first` into `+0`); on two halves in
/// parallel.
fn add_after<T: Elem>(first: &[T], acc: &mut [T]) {
    let add = |acc: &mut [T], first: &[T]| {
        for (a, &f) in acc.iter_mut().zip(first) {
            *a = (T::ZERO + f) + *a;
        }
    };
    let half = acc.len() / 2;
    let (lo, hi) = acc.split_at_mut(half);
    join(|| add(lo, &first[..half]), || add(hi, &first[half..]));
}

impl CustomOp2 for BnReluPool {
    fn name(&self) -> &'static str {
        "alkit-duq-bn-relu-pool"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        entry(self.name())?;
        let d = Dims::from_layout(l1, self.name())?;
        check_params(l2, d.c, self.name())?;
        fn run<T: Float>(sh: &Shared, y: &[T], params: &[T], d: Dims) -> Result<Vec<T>> {
            let (prep, pooled) = sh.prep(y, params, d)?;
            Ok(match pooled {
                Some(p) => p,
                None => prep.block.argmax(y).1,
            })
        }
        let n = self.name();
        let out = with_float!(n, [s1, s2], |T| into_storage(run::<T>(
            &self.0,
            storage_slice(s1, l1, n)?,
            storage_slice(s2, l2, n)?,
            d,
        )?));
        Ok((out, Shape::from(d.pooled_shape())))
    }

    fn bwd(
        &self,
        y: &Tensor,
        params: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let (gy, gparams) = self.vjp(y, params, grad, None)?;
        Ok((Some(gy), Some(gparams)))
    }
}

impl CustomOp3 for BnReluPoolGrad {
    fn name(&self) -> &'static str {
        "alkit-duq-bn-relu-pool-grad"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        entry(self.name())?;
        let d = Dims::from_layout(l2, self.name())?;
        check_params(l3, d.c, self.name())?;
        let (pb, ph, pw, pc) = d.pooled_shape();
        if l1.dims() != [pb, ph, pw, pc] {
            candle_core::bail!(
                "{}: pooled gradient {:?} does not fit input {:?}",
                self.name(),
                l1.dims(),
                l2.dims()
            );
        }
        fn run<T: Float>(sh: &Shared, gp: &[T], y: &[T], params: &[T], d: Dims) -> Result<Vec<T>> {
            Ok(vjp_k(gp, y, sh.prep(y, params, d)?.0, d).0)
        }
        let n = self.name();
        let out = with_float!(n, [s1, s2, s3], |T| into_storage(run::<T>(
            &self.0,
            storage_slice(s1, l1, n)?,
            storage_slice(s2, l2, n)?,
            storage_slice(s3, l3, n)?,
            d,
        )?));
        Ok((out, Shape::from((d.b, d.h, d.w, d.c))))
    }

    fn bwd(
        &self,
        gp: &Tensor,
        y: &Tensor,
        params: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let d = Dims::from_layout(y.layout(), self.name())?;
        let grad = grad.contiguous()?;
        fn run<T: Float>(
            sh: &Shared,
            grad: &Tensor,
            gp: &Tensor,
            y: &Tensor,
            params: &Tensor,
            d: Dims,
        ) -> Result<(Tensor, Tensor, Tensor)> {
            let (dgp, dy, dgamma) =
                with_cpu_slices::<T, _>(&[grad, gp, y, params], "fused duq kernel", |s| {
                    sh.prep(s[2], s[3], d)
                        .map(|(prep, _)| vjp_bwd_k(s[0], s[1], s[2], prep, d))
                })??;
            Ok((
                Tensor::from_vec(dgp, gp.shape(), gp.device())?,
                Tensor::from_vec(dy, y.shape(), y.device())?,
                param_grad::<T>(&dgamma, None, params)?,
            ))
        }
        let (dgp, dy, dparams) = with_float!(self.name(), y.dtype(), |T| run::<T>(
            &self.0, &grad, gp, y, params, d
        )?);
        Ok((Some(dgp), Some(dy), Some(dparams)))
    }
}

impl BnReluPoolGrad {
    /// The per-channel batch mean and biased variance the pair's forward normalised with (for
    /// the running statistics), as `(c,)` tensors of `like`'s dtype; `None` before the forward
    /// has run.
    pub fn batch_moments(&self, like: &Tensor) -> Result<Option<(Tensor, Tensor)>> {
        let (mean, var) = match self.0 .0.get() {
            Some(Prepared::F32(p)) => (&p.block.mean, &p.block.var),
            Some(Prepared::F64(p)) => (&p.block.mean, &p.block.var),
            None => return Ok(None),
        };
        let t = |v: &Vec<f64>| {
            Tensor::from_vec(v.clone(), v.len(), like.device())?.to_dtype(like.dtype())
        };
        Ok(Some((t(mean)?, t(var)?)))
    }
}

#[cfg(test)]
mod tests {
    use super::super::prep::EPS;
    use super::*;
    use candle_core::{Device, Var};

    /// The same block written with candle ops (what `cnn` uses on other devices), `f64`.
    fn composed(y: &Tensor, params: &Tensor) -> Result<Tensor> {
        let (b, h, w, c) = y.dims4()?;
        let gamma = params.get(0)?;
        let beta = params.get(1)?;
        let bias = params.get(2)?;
        let y = y.reshape((b * h * w, c))?.broadcast_add(&bias)?;
        let mean = y.mean(0)?;
        let centred = y.broadcast_sub(&mean)?;
        let var = centred.sqr()?.mean(0)?;
        let x_hat = centred.broadcast_div(&(var + EPS)?.sqrt()?)?;
        let u = x_hat.broadcast_mul(&gamma)?.broadcast_add(&beta)?.relu()?;
        let u = u.reshape((b, h, w, c))?;
        let (h2, w2) = (h / 2, w / 2);
        u.narrow(1, 0, 2 * h2)?
            .narrow(2, 0, 2 * w2)?
            .reshape((b, h2, 2, w2, 2, c))?
            .max(4)?
            .max(2)
    }

    use crate::rng::randn_f64 as randn;

    /// Reference: candle's own autodiff of the composition above, at first order (the op's
    /// gradients) and at second order through an explicitly written input gradient (the VJP op's
    /// gradients), in f64 on a block with odd sides (rows outside every window) and negative
    /// gammas (the argmax of `u` is then not the argmax of `y`).
    #[test]
    fn fused_block_and_its_input_gradient_match_candle_autodiff_in_f64() -> Result<()> {
        // c = 19: full SIMD vectors and a remainder; the batch splits into unequal halves.
        for (b, h, w, c) in [(3, 5, 7, 4), (3, 6, 5, 19)] {
            let y = Var::from_tensor(&((randn(&[b, h, w, c], 1) * 2.0)? + 0.5)?)?;
            let mut p = randn(&[3, c], 2).to_vec2::<f64>()?;
            p[0][1] = -p[0][1].abs() - 0.5; // a negative gamma
            let params = Var::from_tensor(&Tensor::new(p, &Device::Cpu)?)?;
            let r = randn(&[b, h / 2, w / 2, c], 3);

            // Forward value.
            let (op, grad_op) = pair();
            let fused = y.as_tensor().apply_op2(params.as_tensor(), op)?;
            let reference = composed(y.as_tensor(), params.as_tensor())?;
            let diff = (&fused - &reference)?
                .abs()?
                .max_all()?
                .to_scalar::<f64>()?;
            assert!(diff < 1e-12, "forward differs by {diff}");

            // First order: gradients of sum(pooled * r).
            let gf = (&fused * &r)?.sum_all()?.backward()?;
            let gr = (&reference * &r)?.sum_all()?.backward()?;
            for (name, v) in [("y", y.as_tensor()), ("params", params.as_tensor())] {
                let (a, e) = (gf.get(v).unwrap(), gr.get(v).unwrap());
                let d = (a - e)?.abs()?.max_all()?.to_scalar::<f64>()?;
                assert!(d < 1e-10, "first-order gradient of {name} differs by {d}");
            }

            // The VJP op's value equals autodiff's gradient of sum(pooled * gp) with respect to y.
            let gp = Var::from_tensor(&r)?;
            let gy = gp
                .as_tensor()
                .apply_op3(y.as_tensor(), params.as_tensor(), grad_op)?;
            let autodiff_gy = gr.get(y.as_tensor()).unwrap();
            let d = (&gy - autodiff_gy)?.abs()?.max_all()?.to_scalar::<f64>()?;
            assert!(d < 1e-10, "input gradient differs by {d}");

            // Second order: gradients of sum(gy * r2)^2-ish function against central finite
            // differences of the op's own forward (f64, step 1e-6).
            let r2 = randn(&[b, h, w, c], 4);
            let obj = |gp: &Tensor, y: &Tensor, params: &Tensor| -> Result<f64> {
                let gy = gp.apply_op3(y, params, pair().1)?;
                (gy * &r2)?.sum_all()?.sqr()?.to_scalar::<f64>()
            };
            let grads = obj_graph(&gp, &y, &params, &r2)?;
            let eps = 1e-6;
            for (which, var, g) in [
                (0, gp.as_tensor(), grads.0),
                (1, y.as_tensor(), grads.1),
                (2, params.as_tensor(), grads.2),
            ] {
                let flat = var.flatten_all()?.to_vec1::<f64>()?;
                let gv = g.flatten_all()?.to_vec1::<f64>()?;
                // Every entry of the small tensors, a spread of the large one; the bias row of
                // params and beta get exactly zero (piecewise-constant dependence).
                let picks: Vec<usize> = (0..flat.len()).step_by(1 + flat.len() / 40).collect();
                for i in picks {
                    let at = |delta: f64| -> Result<f64> {
                        let mut v = flat.clone();
                        v[i] += delta;
                        let t = Tensor::from_vec(v, var.shape(), &Device::Cpu)?;
                        match which {
                            0 => obj(&t, y.as_tensor(), params.as_tensor()),
                            1 => obj(gp.as_tensor(), &t, params.as_tensor()),
                            _ => obj(gp.as_tensor(), y.as_tensor(), &t),
                        }
                    };
                    let fd = (at(eps)? - at(-eps)?) / (2.0 * eps);
                    let err = (fd - gv[i]).abs() / (1.0 + fd.abs());
                    assert!(err < 1e-6, "input {which} entry {i}: fd {fd} vs {}", gv[i]);
                }
            }
        }
        Ok(())
    }

    /// Gradients of `(sum gy * r2)^2` with respect to `(gp, y, params)` through the op's
    /// backward.
    fn obj_graph(gp: &Var, y: &Var, params: &Var, r2: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
        let gy = gp
            .as_tensor()
            .apply_op3(y.as_tensor(), params.as_tensor(), pair().1)?;
        let g = (gy * r2)?.sum_all()?.sqr()?.backward()?;
        Ok((
            g.get(gp.as_tensor()).unwrap().clone(),
            g.get(y.as_tensor()).unwrap().clone(),
            g.get(params.as_tensor()).unwrap().clone(),
        ))
    }
}
