//! 2x2 max-pooling (stride 2, floor, first maximum wins like PyTorch) as three custom ops that
//! are each other's derivatives: [`MaxPool`], its backward [`MaxPoolRoute`] (each gradient to
//! its window's argmax), and that one's backward [`MaxPoolSelect`] (the value at the argmax).
//! Candle's own `max_pool2d` has a wrong backward.

use super::dispatch::with_float;
use super::elem::Elem;
use super::enabled::entry;
use super::storage::{dims4, into_storage, storage_slice};
use super::threading::par_chunks;
use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Result, Shape, Tensor};

/// 2x2 max-pool, stride 2, floor: `(b, h, w, c)` -> `(b, h/2, w/2, c)`; the first maximum in
/// row-major window order wins.
#[derive(Debug, Clone, Copy)]
pub struct MaxPool;

/// Backward of [`MaxPool`]: `(x (b, h, w, c), g (b, h/2, w/2, c))` -> `(b, h, w, c)` with each
/// `g` sent to its window's argmax in `x`.
#[derive(Debug, Clone, Copy)]
pub struct MaxPoolRoute;

/// `(x (b, h, w, c), v (b, h, w, c))` -> `(b, h/2, w/2, c)`: the value of `v` at each window's
/// argmax in `x` (the adjoint of [`MaxPoolRoute`] in its second argument).
#[derive(Debug, Clone, Copy)]
pub struct MaxPoolSelect;

/// For every pooled output `(j, ch)`, the flat input index of its window's first maximum.
#[inline]
fn pool_windows<T: Elem>(xb: &[T], h: usize, w: usize, c: usize, mut f: impl FnMut(usize, usize)) {
    let (h2, w2) = (h / 2, w / 2);
    for py in 0..h2 {
        for px in 0..w2 {
            let o = (py * w2 + px) * c;
            let base = [
                (2 * py * w + 2 * px) * c,
                (2 * py * w + 2 * px + 1) * c,
                ((2 * py + 1) * w + 2 * px) * c,
                ((2 * py + 1) * w + 2 * px + 1) * c,
            ];
            for ch in 0..c {
                let mut best = base[0] + ch;
                for &bi in &base[1..] {
                    if xb[bi + ch] > xb[best] {
                        best = bi + ch;
                    }
                }
                f(o + ch, best);
            }
        }
    }
}

fn pool_k<T: Elem>(x: &[T], (b, h, w, c): (usize, usize, usize, usize)) -> Vec<T> {
    let per = (h / 2) * (w / 2) * c;
    let mut out = vec![T::ZERO; b * per];
    if per > 0 {
        par_chunks(&mut out, per, |bi, ob| {
            let xb = &x[bi * h * w * c..(bi + 1) * h * w * c];
            pool_windows(xb, h, w, c, |o, i| ob[o] = xb[i]);
        });
    }
    out
}

fn route_k<T: Elem>(x: &[T], g: &[T], (b, h, w, c): (usize, usize, usize, usize)) -> Vec<T> {
    let per = (h / 2) * (w / 2) * c;
    let mut out = vec![T::ZERO; b * h * w * c];
    if per > 0 {
        par_chunks(&mut out, h * w * c, |bi, ob| {
            let xb = &x[bi * h * w * c..(bi + 1) * h * w * c];
            let gb = &g[bi * per..(bi + 1) * per];
            pool_windows(xb, h, w, c, |o, i| ob[i] += gb[o]);
        });
    }
    out
}

fn select_k<T: Elem>(x: &[T], v: &[T], (b, h, w, c): (usize, usize, usize, usize)) -> Vec<T> {
    let per = (h / 2) * (w / 2) * c;
    let mut out = vec![T::ZERO; b * per];
    if per > 0 {
        par_chunks(&mut out, per, |bi, ob| {
            let xb = &x[bi * h * w * c..(bi + 1) * h * w * c];
            let vb = &v[bi * h * w * c..(bi + 1) * h * w * c];
            pool_windows(xb, h, w, c, |o, i| ob[o] = vb[i]);
        });
    }
    out
}

impl CustomOp1 for MaxPool {
    fn name(&self) -> &'static str {
        "alkit-maxpool2x2"
    }
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        entry(self.name())?;
        let d = dims4(l, self.name())?;
        let out = with_float!(self.name(), [s], |T| into_storage(pool_k(
            storage_slice::<T>(s, l, "maxpool")?,
            d
        )));
        Ok((out, Shape::from((d.0, d.1 / 2, d.2 / 2, d.3))))
    }
    fn bwd(&self, arg: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(arg.apply_op2(&grad.contiguous()?, MaxPoolRoute)?))
    }
}

fn check_same_shape(l1: &Layout, l2: &Layout, op: &str) -> Result<(usize, usize, usize, usize)> {
    let d = dims4(l1, op)?;
    if l2.dims() != l1.dims() {
        candle_core::bail!("{op}: shapes {:?} and {:?} differ", l1.dims(), l2.dims());
    }
    Ok(d)
}

impl CustomOp2 for MaxPoolRoute {
    fn name(&self) -> &'static str {
        "alkit-maxpool2x2-route"
    }
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        entry(self.name())?;
        let d = dims4(l1, self.name())?;
        if l2.dims() != [d.0, d.1 / 2, d.2 / 2, d.3] {
            candle_core::bail!(
                "maxpool route: gradient {:?} does not match input {:?}",
                l2.dims(),
                l1.dims()
            );
        }
        let out = with_float!(self.name(), [s1, s2], |T| into_storage(route_k(
            storage_slice::<T>(s1, l1, "maxpool route")?,
            storage_slice::<T>(s2, l2, "maxpool route")?,
            d
        )));
        Ok((out, Shape::from(d)))
    }
    fn bwd(
        &self,
        x: &Tensor,
        _g: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        // Routing is piecewise constant in x (no gradient) and linear in g.
        Ok((None, Some(x.apply_op2(&grad.contiguous()?, MaxPoolSelect)?)))
    }
}

impl CustomOp2 for MaxPoolSelect {
    fn name(&self) -> &'static str {
        "alkit-maxpool2x2-select"
    }
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        entry(self.name())?;
        let d = check_same_shape(l1, l2, self.name())?;
        let out = with_float!(self.name(), [s1, s2], |T| into_storage(select_k(
            storage_slice::<T>(s1, l1, "maxpool select")?,
            storage_slice::<T>(s2, l2, "maxpool select")?,
            d
        )));
        Ok((out, Shape::from((d.0, d.1 / 2, d.2 / 2, d.3))))
    }
    fn bwd(
        &self,
        x: &Tensor,
        _v: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        Ok((None, Some(x.apply_op2(&grad.contiguous()?, MaxPoolRoute)?)))
    }
}

#[cfg(test)]
mod tests {
    use super::super::enabled::{supported, without};
    use super::MaxPool;

    #[test]
    fn a_kernel_entered_with_the_kernels_off_fails_as_on_a_gpu() {
        use candle_core::{DType, Device, Tensor};
        let x = Tensor::ones((1, 4, 4, 2), DType::F32, &Device::Cpu).unwrap();
        assert!(supported(&x));
        let pooled = x.apply_op1(MaxPool).unwrap();
        let off = without(|| {
            assert!(!supported(&x));
            x.apply_op1(MaxPool)
        });
        let e = off.unwrap_err().to_string();
        assert!(e.contains("kernels off"), "{e}");
        // Restored afterwards, on this thread.
        assert!(supported(&x));
        assert_eq!(
            x.apply_op1(MaxPool).unwrap().to_vec3::<f32>().ok(),
            pooled.to_vec3::<f32>().ok()
        );
    }
}
