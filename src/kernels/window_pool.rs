//! Max-pooling with any square window, stride and padding (a ResNet stem's 3x3, stride 2,
//! padding 1) as three custom ops that are each other's derivatives: [`WindowMax`], its
//! backward [`WindowRoute`] (each gradient sent to its window's first maximum in row-major
//! window order, PyTorch's rule) and that one's backward [`WindowSelect`] (the value at each
//! window's first maximum), so gradients of gradients (DUQ's penalty) are exact.
//! Padding is never a window's maximum. The generic composition in `nn::net::pool` (every
//! window unfolded, a one-hot mask of first maxima) gives the same values and gradients; on
//! the CPU it costs a ResNet-18's whole forward again at 224 px.

use super::dispatch::with_float;
use super::elem::Elem;
use super::enabled::entry;
use super::storage::{dims4, into_storage, storage_slice};
use super::threading::par_chunks;
use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Result, Shape, Tensor};

/// A max-pool's windows: `k x k`, `s` apart, over the input padded by `p` on each side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Window side.
    pub k: usize,
    /// Stride.
    pub s: usize,
    /// Padding on each side (at most `k / 2`, so every window of a non-empty side holds an
    /// input entry).
    pub p: usize,
}

impl Window {
    /// The output side for an input side `n`: `(n + 2 p - k) / s + 1`; an error when the
    /// side is empty, the window does not fit or the settings are out of range.
    fn out(&self, n: usize, op: &str) -> Result<usize> {
        if n == 0 || self.k == 0 || self.s == 0 || 2 * self.p > self.k || n + 2 * self.p < self.k {
            candle_core::bail!(
                "{op}: a {}x{} window (stride {}, padding {}) does not fit a side of {n}",
                self.k,
                self.k,
                self.s,
                self.p
            );
        }
        Ok((n + 2 * self.p - self.k) / self.s + 1)
    }

    /// The output sides `(oh, ow)` for NHWC dimensions `d` (see [`Window::out`]).
    fn out_dims(&self, d: (usize, usize, usize, usize), op: &str) -> Result<(usize, usize)> {
        Ok((self.out(d.1, op)?, self.out(d.2, op)?))
    }

    /// The input rows (or columns) of output row `o` inside an input side `n`.
    fn span(&self, o: usize, n: usize) -> std::ops::Range<usize> {
        let start = (o * self.s).saturating_sub(self.p);
        let end = (o * self.s + self.k).saturating_sub(self.p).min(n);
        start..end
    }
}

/// Max-pool of NHWC activations, `(b, h, w, c)` -> `(b, oh, ow, c)` with `oh = (h + 2 p - k)
/// / s + 1`.
#[derive(Debug, Clone, Copy)]
pub struct WindowMax(pub Window);

/// Backward of [`WindowMax`]: `(x (b, h, w, c), g (b, oh, ow, c))` -> `(b, h, w, c)`, each
/// `g` added at its window's first maximum in `x`.
#[derive(Debug, Clone, Copy)]
pub struct WindowRoute(pub Window);

/// `(x (b, h, w, c), v (b, h, w, c))` -> `(b, oh, ow, c)`: the value of `v` at each window's
/// first maximum in `x` (the adjoint of [`WindowRoute`] in its second argument).
#[derive(Debug, Clone, Copy)]
pub struct WindowSelect(pub Window);

/// For every output position of one item, `f(o, i)` with `o` the output's flat index and `i`
/// the flat input index of its window's first maximum, a row of `c` channels at a time.
fn for_maxima<T: Elem>(
    xb: &[T],
    (h, w, c): (usize, usize, usize),
    (oh, ow): (usize, usize),
    win: Window,
    mut f: impl FnMut(usize, usize),
) {
    // The running argmax of each channel.
    let mut best = vec![0; c];
    for oy in 0..oh {
        let rows = win.span(oy, h);
        for ox in 0..ow {
            let cols = win.span(ox, w);
            let first = (rows.start * w + cols.start) * c;
            for (ch, b) in best.iter_mut().enumerate() {
                *b = first + ch;
            }
            for y in rows.clone() {
                for x in cols.clone() {
                    let at = (y * w + x) * c;
                    for (ch, b) in best.iter_mut().enumerate() {
                        if xb[at + ch] > xb[*b] {
                            *b = at + ch;
                        }
                    }
                }
            }
            let o = (oy * ow + ox) * c;
            for (ch, &b) in best.iter().enumerate() {
                f(o + ch, b);
            }
        }
    }
}

/// Each window's maximum, a row of `c` channels at a time (the same values as the first
/// maxima [`for_maxima`] finds: a later entry replaces the running maximum only when larger).
fn max_k<T: Elem>(
    x: &[T],
    (b, h, w, c): (usize, usize, usize, usize),
    win: Window,
    (oh, ow): (usize, usize),
) -> Vec<T> {
    let per = oh * ow * c;
    let mut out = vec![T::ZERO; b * per];
    if per > 0 {
        par_chunks(&mut out, per, |bi, ob| {
            let xb = &x[bi * h * w * c..(bi + 1) * h * w * c];
            for oy in 0..oh {
                let rows = win.span(oy, h);
                for ox in 0..ow {
                    let cols = win.span(ox, w);
                    let o = &mut ob[(oy * ow + ox) * c..(oy * ow + ox + 1) * c];
                    let first = (rows.start * w + cols.start) * c;
                    o.copy_from_slice(&xb[first..first + c]);
                    for y in rows.clone() {
                        for x in cols.clone() {
                            let at = (y * w + x) * c;
                            for (d, &v) in o.iter_mut().zip(&xb[at..at + c]) {
                                if v > *d {
                                    *d = v;
                                }
                            }
                        }
                    }
                }
            }
        });
    }
    out
}

fn route_k<T: Elem>(
    x: &[T],
    g: &[T],
    (b, h, w, c): (usize, usize, usize, usize),
    win: Window,
    (oh, ow): (usize, usize),
) -> Vec<T> {
    let (per_in, per_out) = (h * w * c, oh * ow * c);
    let mut out = vec![T::ZERO; b * per_in];
    if per_out > 0 {
        par_chunks(&mut out, per_in, |bi, ob| {
            let xb = &x[bi * per_in..(bi + 1) * per_in];
            let gb = &g[bi * per_out..(bi + 1) * per_out];
            for_maxima(xb, (h, w, c), (oh, ow), win, |o, i| ob[i] += gb[o]);
        });
    }
    out
}

fn select_k<T: Elem>(
    x: &[T],
    v: &[T],
    (b, h, w, c): (usize, usize, usize, usize),
    win: Window,
    (oh, ow): (usize, usize),
) -> Vec<T> {
    let (per_in, per_out) = (h * w * c, oh * ow * c);
    let mut out = vec![T::ZERO; b * per_out];
    if per_out > 0 {
        par_chunks(&mut out, per_out, |bi, ob| {
            let xb = &x[bi * per_in..(bi + 1) * per_in];
            let vb = &v[bi * per_in..(bi + 1) * per_in];
            for_maxima(xb, (h, w, c), (oh, ow), win, |o, i| ob[o] = vb[i]);
        });
    }
    out
}

impl CustomOp1 for WindowMax {
    fn name(&self) -> &'static str {
        "alkit-maxpool"
    }
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        entry(self.name())?;
        let d = dims4(l, self.name())?;
        let (oh, ow) = self.0.out_dims(d, self.name())?;
        let out = with_float!(self.name(), [s], |T| into_storage(max_k(
            storage_slice::<T>(s, l, "maxpool")?,
            d,
            self.0,
            (oh, ow)
        )));
        Ok((out, Shape::from((d.0, oh, ow, d.3))))
    }
    fn bwd(&self, arg: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(
            arg.apply_op2(&grad.contiguous()?, WindowRoute(self.0))?,
        ))
    }
}

impl CustomOp2 for WindowRoute {
    fn name(&self) -> &'static str {
        "alkit-maxpool-route"
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
        let (oh, ow) = self.0.out_dims(d, self.name())?;
        if l2.dims() != [d.0, oh, ow, d.3] {
            candle_core::bail!(
                "maxpool route: gradient {:?} does not match input {:?}",
                l2.dims(),
                l1.dims()
            );
        }
        let out = with_float!(self.name(), [s1, s2], |T| into_storage(route_k(
            storage_slice::<T>(s1, l1, "maxpool route")?,
            storage_slice::<T>(s2, l2, "maxpool route")?,
            d,
            self.0,
            (oh, ow)
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
        Ok((
            None,
            Some(x.apply_op2(&grad.contiguous()?, WindowSelect(self.0))?),
        ))
    }
}

impl CustomOp2 for WindowSelect {
    fn name(&self) -> &'static str {
        "alkit-maxpool-select"
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
        if l2.dims() != l1.dims() {
            candle_core::bail!(
                "maxpool select: shapes {:?} and {:?} differ",
                l1.dims(),
                l2.dims()
            );
        }
        let (oh, ow) = self.0.out_dims(d, self.name())?;
        let out = with_float!(self.name(), [s1, s2], |T| into_storage(select_k(
            storage_slice::<T>(s1, l1, "maxpool select")?,
            storage_slice::<T>(s2, l2, "maxpool select")?,
            d,
            self.0,
            (oh, ow)
        )));
        Ok((out, Shape::from((d.0, oh, ow, d.3))))
    }
    fn bwd(
        &self,
        x: &Tensor,
        _v: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        Ok((
            None,
            Some(x.apply_op2(&grad.contiguous()?, WindowRoute(self.0))?),
        ))
    }
}
