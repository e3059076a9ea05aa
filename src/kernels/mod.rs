//! Every hand-written CPU kernel of the crate, and its only `unsafe`: private to the crate,
//! reached by models through small safe functions and candle custom ops with exact backward
//! passes. Models never see a slice of a tensor's storage; kernels never build a model.
//!
//! - this file: the shared pieces (SIMD element trait, slice access, gemm, the thread split)
//!   and the layer ops below;
//! - [`conv`], [`winograd`], [`direct`]: stride-1 convolutions for training (im2col, Winograd
//!   tiles, one-channel direct kernels), forward, transpose and weight gradient;
//! - [`gradnorm`]: the standard CNN's sparse per-candidate gradient norms (REGrad and kin);
//! - [`relu`]: ReLU with a one-pass backward (the layer library's);
//! - [`duq`]: the fused training-mode blocks of the DUQ CNN (batch norm, ReLU, pool and their
//!   input-gradient passes);
//! - [`sys`]: process-wide allocator tuning (`mallopt`).
//!
//! Candle's CPU `conv2d` is slow, `Tensor::cat` along the last axis returns a strided
//! tensor (so im2col by `cat` costs a second copy), and `max_pool2d` has a wrong backward.
//! These kernels work on contiguous NHWC `f32`/`f64` tensors, parallel over the batch:
//!
//! - [`Im2col`] / [`Col2im`]: each is the other's adjoint, so each one's backward is the other
//!   and gradients are exact to any order;
//! - [`MaxPool`] (2x2, stride 2, floor, first maximum wins like PyTorch), whose backward
//!   [`MaxPoolRoute`] sends each gradient to the window's argmax, and whose backward in turn
//!   is [`MaxPoolSelect`] (pick the value at the argmax);
//! - inference-only fusions (no autograd): [`ConvReluPool`] (convolution + bias + ReLU + 2x2
//!   max-pool over small chunks of images, so intermediates stay in cache) and
//!   [`BiasReluPool`].
//!
//! Other devices use the generic compositions in `nn::layers`, so CUDA/Metal builds stay correct.

pub(crate) mod conv;
mod direct;
pub(crate) mod duq;
pub(crate) mod gradnorm;
pub(crate) mod sys;
mod winograd;

use candle_core::{
    backend::BackendStorage, CpuStorage, CustomOp1, CustomOp2, CustomOp3, Layout, Result, Shape,
    Tensor,
};

/// `(a(), b())`, potentially on two threads of rayon's pool (nested calls are fine: rayon
/// steals work instead of blocking). Kernels split a batch into two fixed halves through this,
/// so their results never depend on the thread count.
pub(crate) fn join<A: Send, B: Send>(
    a: impl FnOnce() -> A + Send,
    b: impl FnOnce() -> B + Send,
) -> (A, B) {
    rayon::join(a, b)
}

/// `f(i, chunk)` for the `i`-th `len`-element chunk of `out` (the last may be shorter), in
/// parallel on rayon's pool. Each chunk is written by one call, so the result does not depend
/// on the scheduling.
pub(crate) fn par_chunks<T: Send>(out: &mut [T], len: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    use rayon::prelude::*;
    out.par_chunks_mut(len.max(1))
        .enumerate()
        .for_each(|(i, part)| f(i, part));
}

/// Element types the kernels support.
pub trait Elem:
    Copy
    + Send
    + Sync
    + PartialOrd
    + std::ops::Add<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::AddAssign
    + 'static
{
    /// Additive identity.
    const ZERO: Self;
    /// Multiplicative identity.
    const ONE: Self;
    /// `e^self`.
    fn exp(self) -> Self;
    /// `self * a + b` with one rounding (an FMA instruction where the CPU has one; the
    /// gradient kernel runs inside `pulp`'s AVX2/AVX-512 context, where it does).
    fn mul_add(self, a: Self, b: Self) -> Self;
    /// Widening conversion.
    fn to_f64(self) -> f64;
    /// Narrowing conversion.
    fn from_f64(v: f64) -> Self;
    /// Exact conversion of a small code (a float compare vectorises beside float data where a
    /// byte compare did not).
    fn from_u8(v: u8) -> Self;
}
impl Elem for f32 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    #[inline(always)]
    fn exp(self) -> Self {
        f32::exp(self)
    }
    #[inline(always)]
    fn mul_add(self, a: Self, b: Self) -> Self {
        f32::mul_add(self, a, b)
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    #[inline(always)]
    fn from_u8(v: u8) -> Self {
        Self::from(v)
    }
}
impl Elem for f64 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    #[inline(always)]
    fn exp(self) -> Self {
        f64::exp(self)
    }
    #[inline(always)]
    fn mul_add(self, a: Self, b: Self) -> Self {
        f64::mul_add(self, a, b)
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v
    }
    #[inline(always)]
    fn from_u8(v: u8) -> Self {
        Self::from(v)
    }
}

thread_local! {
    /// Whether this thread may use the kernels (see [`without`]).
    static ENABLED: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
}

/// True when a tensor can use these kernels (CPU, `f32` or `f64`, and not turned off on this
/// thread by [`without`]).
pub fn supported(x: &Tensor) -> bool {
    ENABLED.with(std::cell::Cell::get)
        && x.device().is_cpu()
        && matches!(x.dtype(), candle_core::DType::F32 | candle_core::DType::F64)
}

/// Refuses a kernel's CPU entry while the kernels are off on this thread (see [`without`]):
/// a kernel reached there is a path on which a CUDA or Metal tensor would fail.
pub(crate) fn entry(op: &str) -> Result<()> {
    if !ENABLED.with(std::cell::Cell::get) {
        candle_core::bail!(
            "{op}: a CPU kernel was reached with the kernels off (a GPU tensor would fail here)"
        );
    }
    Ok(())
}

/// Runs `f` with the kernels turned off on this thread: CPU tensors then take the generic
/// candle compositions that CUDA and Metal tensors take. Restored afterwards, also when `f`
/// panics.
pub fn without<T>(f: impl FnOnce() -> T) -> T {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            ENABLED.with(|e| e.set(self.0));
        }
    }
    let _restore = Restore(ENABLED.with(|e| e.replace(false)));
    f()
}

fn contiguous<'a, T>(s: &'a [T], l: &Layout, op: &str) -> Result<&'a [T]> {
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&s[a..b]),
        None => candle_core::bail!("{op} needs a contiguous input"),
    }
}

/// The contiguous `T` slice of a CPU storage under `l` (for custom ops' `cpu_fwd`).
pub(crate) fn storage_slice<'a, T: candle_core::WithDType>(
    s: &'a CpuStorage,
    l: &Layout,
    op: &str,
) -> Result<&'a [T]> {
    contiguous(s.as_slice::<T>()?, l, op)
}

/// Runs `f` on the contiguous CPU slices of `ts`, all of dtype `T` (for custom ops' `bwd`,
/// which receive tensors).
pub(crate) fn with_cpu_slices<T: candle_core::WithDType, R>(
    ts: &[&Tensor],
    op: &str,
    f: impl FnOnce(&[&[T]]) -> R,
) -> Result<R> {
    let guards: Vec<_> = ts.iter().map(|t| t.storage_and_layout()).collect();
    let mut slices = Vec::with_capacity(ts.len());
    for (g, l) in &guards {
        let candle_core::Storage::Cpu(cs) = &**g else {
            candle_core::bail!("{op} runs on the CPU only");
        };
        slices.push(storage_slice::<T>(cs, l, op)?);
    }
    Ok(f(&slices))
}

fn dims4(l: &Layout, op: &str) -> Result<(usize, usize, usize, usize)> {
    match l.dims() {
        &[a, b, c, d] => Ok((a, b, c, d)),
        d => candle_core::bail!("{op} expects a rank-4 NHWC tensor, got {d:?}"),
    }
}

macro_rules! dispatch1 {
    ($s:expr, $op:expr, |$v:ident| $body:expr) => {
        match $s {
            CpuStorage::F32($v) => CpuStorage::F32($body),
            CpuStorage::F64($v) => CpuStorage::F64($body),
            other => candle_core::bail!("{} supports f32 and f64, got {:?}", $op, other.dtype()),
        }
    };
}

macro_rules! dispatch2 {
    ($s1:expr, $s2:expr, $op:expr, |$a:ident, $b:ident| $body:expr) => {
        match ($s1, $s2) {
            (CpuStorage::F32($a), CpuStorage::F32($b)) => CpuStorage::F32($body),
            (CpuStorage::F64($a), CpuStorage::F64($b)) => CpuStorage::F64($body),
            (a, b) => candle_core::bail!(
                "{} needs two f32 or two f64 inputs, got {:?} and {:?}",
                $op,
                a.dtype(),
                b.dtype()
            ),
        }
    };
}

// Declared after the dispatch macros, which it uses (macros are visible below their
// definition only).
pub(crate) mod rbf;
pub(crate) mod relu;
pub(crate) mod transpose;

// ---------------------------------------------------------------- im2col / col2im

/// im2col on NHWC with zero padding `pad` and stride `stride`: `(b, h, w, c)` ->
/// `(b, oh, ow, k*k*c)`, `oh = (h + 2 pad - k) / stride + 1`; columns ordered `(ki, kj, c)`.
#[derive(Debug, Clone, Copy)]
pub struct Im2col {
    /// Kernel size.
    pub k: usize,
    /// Zero padding on each side.
    pub pad: usize,
    /// Step between patches (1: every position).
    pub stride: usize,
}

/// The adjoint of [`Im2col`]: `(b, oh, ow, k*k*c)` -> `(b, h, w, c)`, summing overlapping
/// patches. With stride 1 the input size follows from the grid; with a larger stride several
/// sizes give the same grid, so it is given.
#[derive(Debug, Clone, Copy)]
pub struct Col2im {
    /// Kernel size.
    pub k: usize,
    /// Zero padding on each side.
    pub pad: usize,
    /// Step between patches.
    pub stride: usize,
    /// The input's `(h, w)`; `None` with stride 1 (then `oh + k - 1 - 2 pad`).
    pub input: Option<(usize, usize)>,
}

impl Im2col {
    /// The output grid `(oh, ow)` for an `h x w` input, `None` when the kernel does not fit.
    pub fn grid(&self, h: usize, w: usize) -> Option<(usize, usize)> {
        let s = self.stride.max(1);
        let (hp, wp) = (h + 2 * self.pad, w + 2 * self.pad);
        (self.k >= 1 && hp >= self.k && wp >= self.k)
            .then(|| ((hp - self.k) / s + 1, (wp - self.k) / s + 1))
    }
}

impl Col2im {
    /// The input size `(h, w)` this op writes for an `oh x ow` grid, `None` when the grid and
    /// the given size disagree.
    pub fn input_size(&self, oh: usize, ow: usize) -> Option<(usize, usize)> {
        let (h, w) = match self.input {
            Some(hw) => hw,
            None => {
                let (hp, wp) = (oh + self.k - 1, ow + self.k - 1);
                if hp < 2 * self.pad + 1 || wp < 2 * self.pad + 1 {
                    return None;
                }
                (hp - 2 * self.pad, wp - 2 * self.pad)
            }
        };
        let fwd = Im2col {
            k: self.k,
            pad: self.pad,
            stride: self.stride,
        };
        (h > 0 && w > 0 && fwd.grid(h, w) == Some((oh, ow))).then_some((h, w))
    }
}

/// Visits each (output pixel, tap) pair whose input pixel lies inside the image:
/// `f(out_pixel, tap, in_pixel)`.
#[inline(always)]
pub(crate) fn for_taps(
    h: usize,
    w: usize,
    k: usize,
    pad: usize,
    f: impl FnMut(usize, usize, usize),
) {
    for_taps_strided(h, w, k, pad, 1, f)
}

/// [`for_taps`] with patches `stride` apart.
#[inline(always)]
pub(crate) fn for_taps_strided(
    h: usize,
    w: usize,
    k: usize,
    pad: usize,
    stride: usize,
    mut f: impl FnMut(usize, usize, usize),
) {
    let (oh, ow) = (
        (h + 2 * pad - k) / stride + 1,
        (w + 2 * pad - k) / stride + 1,
    );
    for oy in 0..oh {
        for ox in 0..ow {
            for ki in 0..k {
                let iy = (oy * stride + ki) as isize - pad as isize;
                if iy < 0 || iy >= h as isize {
                    continue;
                }
                for kj in 0..k {
                    let ix = (ox * stride + kj) as isize - pad as isize;
                    if ix < 0 || ix >= w as isize {
                        continue;
                    }
                    f(oy * ow + ox, ki * k + kj, iy as usize * w + ix as usize);
                }
            }
        }
    }
}

fn im2col_k<T: Elem>(
    x: &[T],
    (b, h, w, c): (usize, usize, usize, usize),
    op: Im2col,
    (oh, ow): (usize, usize),
) -> Vec<T> {
    let Im2col { k, pad, stride } = op;
    let kc = k * k * c;
    let mut out = vec![T::ZERO; b * oh * ow * kc];
    if out.is_empty() {
        return out;
    }
    par_chunks(&mut out, oh * ow * kc, |bi, ob| {
        let xb = &x[bi * h * w * c..(bi + 1) * h * w * c];
        for_taps_strided(h, w, k, pad, stride, |o, t, i| {
            ob[o * kc + t * c..o * kc + (t + 1) * c].copy_from_slice(&xb[i * c..(i + 1) * c]);
        });
    });
    out
}

/// im2col of one image `(h, w, c)`, no padding, single-threaded: `(oh * ow, k * k * c)`.
#[inline(always)]
pub(crate) fn im2col_one<T: Elem>(x: &[T], (h, w, c): (usize, usize, usize), k: usize) -> Vec<T> {
    let (oh, ow) = (h + 1 - k, w + 1 - k);
    let kc = k * k * c;
    let mut out = vec![T::ZERO; oh * ow * kc];
    for_taps(h, w, k, 0, |o, t, i| {
        out[o * kc + t * c..o * kc + (t + 1) * c].copy_from_slice(&x[i * c..(i + 1) * c]);
    });
    out
}

fn col2im_k<T: Elem>(
    cols: &[T],
    (b, oh, ow, kc): (usize, usize, usize, usize),
    op: Col2im,
    (h, w): (usize, usize),
) -> Vec<T> {
    let Col2im { k, pad, stride, .. } = op;
    let c = kc / (k * k);
    let mut out = vec![T::ZERO; b * h * w * c];
    if !out.is_empty() {
        par_chunks(&mut out, h * w * c, |bi, xb| {
            let cb = &cols[bi * oh * ow * kc..(bi + 1) * oh * ow * kc];
            for_taps_strided(h, w, k, pad, stride, |o, t, i| {
                let src = &cb[o * kc + t * c..o * kc + (t + 1) * c];
                for (d, &s) in xb[i * c..(i + 1) * c].iter_mut().zip(src) {
                    *d += s;
                }
            });
        });
    }
    out
}

impl CustomOp1 for Im2col {
    fn name(&self) -> &'static str {
        "alkit-im2col"
    }
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        entry(self.name())?;
        let (b, h, w, c) = dims4(l, self.name())?;
        if self.stride == 0 {
            candle_core::bail!("im2col: stride 0");
        }
        let Some((oh, ow)) = self.grid(h, w) else {
            candle_core::bail!(
                "im2col: {h}x{w} input is smaller than the {k}x{k} kernel",
                k = self.k
            );
        };
        let out = dispatch1!(s, self.name(), |v| im2col_k(
            contiguous(v, l, "im2col")?,
            (b, h, w, c),
            *self,
            (oh, ow)
        ));
        Ok((out, Shape::from((b, oh, ow, self.k * self.k * c))))
    }
    fn bwd(&self, arg: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        let g = grad.contiguous()?;
        let (_, h, w, _) = arg.dims4()?;
        Ok(Some(g.apply_op1(Col2im {
            k: self.k,
            pad: self.pad,
            stride: self.stride,
            input: Some((h, w)),
        })?))
    }
}

impl CustomOp1 for Col2im {
    fn name(&self) -> &'static str {
        "alkit-col2im"
    }
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        entry(self.name())?;
        let d = dims4(l, self.name())?;
        let k = self.k;
        if k == 0 || self.stride == 0 || d.3 % (k * k) != 0 {
            candle_core::bail!(
                "col2im: {} columns are not {k}x{k} patches (stride {})",
                d.3,
                self.stride
            );
        }
        let Some((h, w)) = self.input_size(d.1, d.2) else {
            candle_core::bail!(
                "col2im: a {}x{} grid does not come from {:?} with padding {} and stride {}",
                d.1,
                d.2,
                self.input,
                self.pad,
                self.stride
            );
        };
        let out = dispatch1!(s, self.name(), |v| col2im_k(
            contiguous(v, l, "col2im")?,
            d,
            *self,
            (h, w)
        ));
        Ok((out, Shape::from((d.0, h, w, d.3 / (k * k)))))
    }
    fn bwd(&self, _arg: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        let g = grad.contiguous()?;
        Ok(Some(g.apply_op1(Im2col {
            k: self.k,
            pad: self.pad,
            stride: self.stride,
        })?))
    }
}

// ---------------------------------------------------------------- max pool 2x2

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
        let out = dispatch1!(s, self.name(), |v| pool_k(contiguous(v, l, "maxpool")?, d));
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
        let out = dispatch2!(s1, s2, self.name(), |x, g| route_k(
            contiguous(x, l1, "maxpool route")?,
            contiguous(g, l2, "maxpool route")?,
            d
        ));
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
        let out = dispatch2!(s1, s2, self.name(), |x, v| select_k(
            contiguous(x, l1, "maxpool select")?,
            contiguous(v, l2, "maxpool select")?,
            d
        ));
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

// ---------------------------------------------------------------- outputs

/// A kernel's output vector of `len` elements, built without `vec![0; len]`: that is one
/// serial pass over memory on the calling thread before the kernel's own parallel pass (~6 ms
/// of a Fashion-MNIST DUQ training step, for the convolutions' and batch norm's outputs).
/// [`fill`] hands the uninitialised storage to the kernel as one [`Part`], which it splits
/// across threads and chunks; each piece is zero-filled by [`Part::zeroed`] in the thread that
/// then writes it, just before, so the fill is parallel and the piece is in cache.
pub(crate) fn fill<T: Elem, R>(len: usize, f: impl FnOnce(Part<'_, T>) -> R) -> (Vec<T>, R) {
    let mut v: Vec<T> = Vec::with_capacity(len);
    let done = std::sync::atomic::AtomicUsize::new(0);
    let r = f(Part {
        s: &mut v.spare_capacity_mut()[..len],
        done: &done,
    });
    let done = done.into_inner();
    assert_eq!(
        done, len,
        "fill: {done} of {len} output elements were initialised"
    );
    #[allow(unsafe_code)]
    // SAFETY: `len <= capacity`, and every one of the first `len` elements is initialised: the
    // only way to them is the one root `Part`, which can only be split into disjoint parts
    // (`split_at`, `chunks`) and consumed by `zeroed`, which writes every element of its part
    // before adding the part's length to `done`; `done == len` (asserted above) therefore
    // means that disjoint parts covering all `len` elements were written.
    unsafe {
        v.set_len(len);
    }
    (v, r)
}

/// Uninitialised storage of a [`fill`]ed vector: split it, then zero-fill each piece with
/// [`Part::zeroed`] to write into it.
pub(crate) struct Part<'a, T> {
    s: &'a mut [std::mem::MaybeUninit<T>],
    done: &'a std::sync::atomic::AtomicUsize,
}

impl<'a, T: Elem> Part<'a, T> {
    /// The first `mid` elements and the rest.
    pub(crate) fn split_at(self, mid: usize) -> (Self, Self) {
        let (a, b) = self.s.split_at_mut(mid);
        let done = self.done;
        (Self { s: a, done }, Self { s: b, done })
    }

    /// Consecutive parts of `n` elements (the last may be shorter).
    pub(crate) fn chunks(self, n: usize) -> impl Iterator<Item = Self> {
        let done = self.done;
        self.s.chunks_mut(n.max(1)).map(move |s| Self { s, done })
    }

    /// The part zero-filled, as initialised elements.
    pub(crate) fn zeroed(self) -> &'a mut [T] {
        for v in self.s.iter_mut() {
            v.write(T::ZERO);
        }
        self.done
            .fetch_add(self.s.len(), std::sync::atomic::Ordering::Relaxed);
        #[allow(unsafe_code)]
        // SAFETY: every element was initialised just above, and `MaybeUninit<T>` has the size,
        // alignment and layout of `T`: the same memory as a `[T]` of the same length, borrowed
        // exclusively for `'a` (the part is consumed).
        unsafe {
            &mut *(std::ptr::from_mut::<[std::mem::MaybeUninit<T>]>(self.s) as *mut [T])
        }
    }
}

// ---------------------------------------------------------------- inference fusions

/// `c (m, n) = a (m, k) @ b (n, k)^T`, all row-major and contiguous, single-threaded (callers
/// parallelise over independent chunks). With [`gemm_strided`], the only places alkit calls `gemm`.
pub fn gemm_nt<T: Elem>(m: usize, n: usize, k: usize, a: &[T], b: &[T], c: &mut [T]) {
    assert!(
        a.len() >= m * k && b.len() >= n * k && c.len() >= m * n,
        "gemm_nt: slices too short"
    );
    if m == 0 || n == 0 {
        return;
    }
    #[allow(unsafe_code)]
    // SAFETY: the assert above guarantees every element gemm reads or writes is inside the
    // slices: a is read at [i*k + p], b at [j*k + p] (b^T: column stride k, row stride 1), c is
    // written at [i*n + j], for i < m, j < n, p < k. `T` is f32 or f64 (sealed by `Elem`), both
    // of which gemm supports; `c` is an exclusive borrow, so nothing aliases it.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.as_ptr(),
            1,
            k as isize,
            b.as_ptr(),
            k as isize,
            1,
            T::ZERO,
            T::ONE,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// `c (m, n) = a (m, k) b (k, n)` (or `c += a b` with `accumulate`), `c` row-major with row
/// stride `c_rs` (`c[i, j] = c[i * c_rs + j]`), `a` and `b` given by strides:
/// `a[i, p] = a[i * a_rs + p * a_cs]`, `b[p, j] = b[p * b_rs + j * b_cs]`.
/// Single-threaded (callers parallelise over independent chunks).
#[allow(clippy::too_many_arguments)]
pub fn gemm_strided<T: Elem>(
    (m, n, k): (usize, usize, usize),
    a: &[T],
    (a_rs, a_cs): (usize, usize),
    b: &[T],
    (b_rs, b_cs): (usize, usize),
    (c, c_rs): (&mut [T], usize),
    accumulate: bool,
) {
    if m == 0 || n == 0 {
        return;
    }
    let last = |rows: usize, rs: usize, cols: usize, cs: usize| (rows - 1) * rs + (cols - 1) * cs;
    assert!(
        c_rs >= n
            && c.len() > last(m, c_rs, n, 1)
            && (k == 0 || (a.len() > last(m, a_rs, k, a_cs) && b.len() > last(k, b_rs, n, b_cs))),
        "gemm_strided: slices too short"
    );
    let to_isize = |v: usize| isize::try_from(v).expect("stride fits isize");
    #[allow(unsafe_code)]
    // SAFETY: the assert above guarantees every element gemm reads or writes is inside the
    // slices: a is read at [i*a_rs + p*a_cs], b at [p*b_rs + j*b_cs], c is read/written at
    // [i*c_rs + j], for i < m, j < n, p < k; with c_rs >= n no two (i, j) share an element.
    // `T` is f32 or f64 (sealed by `Elem`), both of which gemm supports; `c` is an exclusive
    // borrow, so nothing aliases it.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            to_isize(c_rs),
            accumulate,
            a.as_ptr(),
            to_isize(a_cs),
            to_isize(a_rs),
            b.as_ptr(),
            to_isize(b_cs),
            to_isize(b_rs),
            T::ONE,
            T::ONE,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// Inference only: valid `k x k` convolution + bias + ReLU + 2x2 max-pool. Inputs:
/// `x (b, h, w, cin)` NHWC, `weight (cout, cin, k, k)`, `bias (cout,)`; output
/// `(b, (h-k+1)/2, (w-k+1)/2, cout)`. Works on chunks of a few images at a time (im2col into a
/// small buffer, one gemm, pooled epilogue) so intermediates stay in cache, in parallel over
/// chunks.
#[derive(Debug, Clone, Copy)]
pub struct ConvReluPool;

const CHUNK: usize = 16;
/// Largest `k*k*cin` for which the direct (no gemm) kernel is used.
const DIRECT_MAX_K: usize = 32;
/// Output channels per accumulator block of the direct kernel.
const LANES: usize = 16;

/// Direct convolution for small `k*k*cin`: for every pooled pixel and block of 16 output
/// channels, accumulate the four window positions in fixed-size arrays (vectorised by the
/// compiler), take their max, add nothing more (bias is in the accumulator), apply ReLU.
#[allow(clippy::too_many_arguments)]
fn direct_conv_relu_pool<T: Elem>(
    x: &[T],
    wm: &[T],
    bias: &[T],
    (h, w, cin): (usize, usize, usize),
    k: usize,
    cout: usize,
    per: usize,
    out: &mut [T],
) {
    let kc = k * k * cin;

    // (cout, kc) -> (kc, cout) so that one tap's weights for 16 channels are contiguous.
    let mut wt = vec![T::ZERO; wm.len()];
    for co in 0..cout {
        for t in 0..kc {
            wt[t * cout + co] = wm[co * kc + t];
        }
    }
    par_chunks(out, per, |bi, ob| {
        let xb = &x[bi * h * w * cin..(bi + 1) * h * w * cin];
        let image = DirectImage {
            xb,
            wt: &wt,
            bias,
            geo: (w, cin, k, cout),
            ob,
        };
        pulp::Arch::new().dispatch(image);
    });
}

/// One image of [`direct_conv_relu_pool`], run inside `pulp`'s dispatch so its fixed-size
/// lane loops compile for the CPU's widest vectors (the crate's baseline x86-64 target gives
/// SSE2 only: four lanes where AVX-512 has sixteen).
struct DirectImage<'a, T> {
    xb: &'a [T],
    /// Weights `(k*k*cin, cout)`.
    wt: &'a [T],
    bias: &'a [T],
    /// `(w, cin, k, cout)`.
    geo: (usize, usize, usize, usize),
    ob: &'a mut [T],
}

impl<T: Elem> pulp::WithSimd for DirectImage<'_, T> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _simd: S) {
        let (xb, wt, bias, ob) = (self.xb, self.wt, self.bias, self.ob);
        let (w, cin, k, cout) = self.geo;
        let kc = k * k * cin;
        let ow2 = (w + 1 - k) / 2;
        // The four window positions' input patches, gathered once per pooled pixel.
        let mut patches = vec![T::ZERO; 4 * kc];
        for (pix, opix) in ob.chunks_exact_mut(cout).enumerate() {
            let (py, px) = (pix / ow2, pix % ow2);
            for (q, (dy, dx)) in [(0, 0), (0, 1), (1, 0), (1, 1)].into_iter().enumerate() {
                let (oy, ox) = (2 * py + dy, 2 * px + dx);
                for ki in 0..k {
                    let src = &xb[((oy + ki) * w + ox) * cin..((oy + ki) * w + ox + k) * cin];
                    patches[q * kc + ki * k * cin..q * kc + (ki + 1) * k * cin]
                        .copy_from_slice(src);
                }
            }
            let patches: [&[T]; 4] = std::array::from_fn(|q| &patches[q * kc..(q + 1) * kc]);
            for (blk, oblk) in opix.chunks_exact_mut(LANES).enumerate() {
                let mut acc = [[T::ZERO; LANES]; 4];
                for a in &mut acc {
                    a.copy_from_slice(&bias[blk * LANES..(blk + 1) * LANES]);
                }
                // Tap by tap, the tap's weights for the block reused by the four positions
                // (each accumulator sums its taps in order, as before).
                for t in 0..kc {
                    let mut wr = [T::ZERO; LANES];
                    wr.copy_from_slice(&wt[t * cout + blk * LANES..][..LANES]);
                    for (a, patch) in acc.iter_mut().zip(&patches) {
                        let v = patch[t];
                        for j in 0..LANES {
                            a[j] += v * wr[j];
                        }
                    }
                }
                // The window's first maximum, then ReLU.
                let [a0, a1, a2, a3] = acc;
                for j in 0..LANES {
                    let mut best = a0[j];
                    for v in [a1[j], a2[j], a3[j]] {
                        if v > best {
                            best = v;
                        }
                    }
                    oblk[j] = if best > T::ZERO { best } else { T::ZERO };
                }
            }
        }
    }
}

fn conv_relu_pool_k<T: Elem>(
    x: &[T],
    weight: &[T],
    bias: &[T],
    (b, h, w, cin): (usize, usize, usize, usize),
    k: usize,
    cout: usize,
) -> Vec<T> {
    let (oh, ow) = (h + 1 - k, w + 1 - k);
    let per = (oh / 2) * (ow / 2) * cout;
    let kc = k * k * cin;
    // (cout, cin, k, k) -> (cout, k, k, cin): rows match im2col's (ki, kj, c) column order.
    let mut wm = vec![T::ZERO; weight.len()];
    for co in 0..cout {
        for ci in 0..cin {
            for t in 0..k * k {
                wm[co * kc + t * cin + ci] = weight[(co * cin + ci) * k * k + t];
            }
        }
    }
    let mut out = vec![T::ZERO; b * per];
    if per == 0 {
        return out;
    }
    if kc <= DIRECT_MAX_K && cout.is_multiple_of(LANES) {
        direct_conv_relu_pool(x, &wm, bias, (h, w, cin), k, cout, per, &mut out);
        return out;
    }
    par_chunks(&mut out, CHUNK * per, |ci, ob| {
        let n = ob.len() / per;
        let xs = &x[ci * CHUNK * h * w * cin..(ci * CHUNK + n) * h * w * cin];
        let cols = im2col_k(
            xs,
            (n, h, w, cin),
            Im2col {
                k,
                pad: 0,
                stride: 1,
            },
            (oh, ow),
        );
        let mut y = vec![T::ZERO; n * oh * ow * cout];
        gemm_nt(n * oh * ow, cout, kc, &cols, &wm, &mut y);
        ob.copy_from_slice(&bias_relu_pool_k(&y, bias, (n, oh, ow, cout)));
    });
    out
}

impl CustomOp3 for ConvReluPool {
    fn name(&self) -> &'static str {
        "alkit-conv-relu-pool"
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
        let d = dims4(l1, self.name())?;
        let (cout, cin, k, k2) = match l2.dims() {
            &[a, b, c, e] => (a, b, c, e),
            other => candle_core::bail!(
                "conv-relu-pool: weight must be (cout, cin, k, k), got {other:?}"
            ),
        };
        if cin != d.3 || k != k2 || l3.dims() != [cout] || d.1 < k || d.2 < k {
            candle_core::bail!(
                "conv-relu-pool: input {:?}, weight {:?}, bias {:?} do not fit",
                l1.dims(),
                l2.dims(),
                l3.dims()
            );
        }
        let name = "conv-relu-pool";
        let out = match (s1, s2, s3) {
            (CpuStorage::F32(x), CpuStorage::F32(wv), CpuStorage::F32(bv)) => {
                CpuStorage::F32(conv_relu_pool_k(
                    contiguous(x, l1, name)?,
                    contiguous(wv, l2, name)?,
                    contiguous(bv, l3, name)?,
                    d,
                    k,
                    cout,
                ))
            }
            (CpuStorage::F64(x), CpuStorage::F64(wv), CpuStorage::F64(bv)) => {
                CpuStorage::F64(conv_relu_pool_k(
                    contiguous(x, l1, name)?,
                    contiguous(wv, l2, name)?,
                    contiguous(bv, l3, name)?,
                    d,
                    k,
                    cout,
                ))
            }
            _ => candle_core::bail!("conv-relu-pool needs f32 or f64 inputs of one type"),
        };
        let (oh, ow) = (d.1 + 1 - k, d.2 + 1 - k);
        Ok((out, Shape::from((d.0, oh / 2, ow / 2, cout))))
    }
}

/// `relu(maxpool2x2(y) + bias)` for `y (b, h, w, c)`, `bias (c,)` -> `(b, h/2, w/2, c)`; equal
/// to pooling `relu(y + bias)` since both maps are monotone, in one pass instead of three.
/// Backward: with `gm = grad * [out > 0]`, `dy = route(y, gm)` ([`MaxPoolRoute`]) and
/// `dbias = sum(gm)`, built from differentiable ops, so it is exact to any order.
#[derive(Debug, Clone, Copy)]
pub struct BiasReluPool;

fn bias_relu_pool_k<T: Elem>(
    y: &[T],
    bias: &[T],
    (b, h, w, c): (usize, usize, usize, usize),
) -> Vec<T> {
    let (h2, w2) = (h / 2, w / 2);
    let per = h2 * w2 * c;
    let mut out = vec![T::ZERO; b * per];
    if per == 0 {
        return out;
    }
    let bias = &bias[..c];
    let max = |a: T, b: T| if b > a { b } else { a };
    // One pass per image: each pooled pixel's four rows, as slices so the loop vectorises.
    par_chunks(&mut out, per, |bi, ob| {
        let yb = &y[bi * h * w * c..(bi + 1) * h * w * c];
        for (p, o) in ob.chunks_exact_mut(c).enumerate() {
            let r0 = (2 * (p / w2) * w + 2 * (p % w2)) * c;
            let [a, b2, c2, d2] = [r0, r0 + c, r0 + w * c, r0 + (w + 1) * c].map(|r| &yb[r..r + c]);
            for ch in 0..c {
                let m = max(max(a[ch], b2[ch]), max(c2[ch], d2[ch])) + bias[ch];
                o[ch] = if m > T::ZERO { m } else { T::ZERO };
            }
        }
    });
    out
}

impl CustomOp2 for BiasReluPool {
    fn name(&self) -> &'static str {
        "alkit-bias-relu-pool"
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
        if l2.dims() != [d.3] {
            candle_core::bail!(
                "bias-relu-pool: bias {:?} does not match {} channels",
                l2.dims(),
                d.3
            );
        }
        let out = dispatch2!(s1, s2, self.name(), |y, bv| bias_relu_pool_k(
            contiguous(y, l1, "bias-relu-pool")?,
            contiguous(bv, l2, "bias-relu-pool")?,
            d
        ));
        Ok((out, Shape::from((d.0, d.1 / 2, d.2 / 2, d.3))))
    }
    fn bwd(
        &self,
        y: &Tensor,
        _bias: &Tensor,
        res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let active = res.gt(0.0)?.to_dtype(grad.dtype())?;
        let gm = grad.mul(&active)?;
        let dy = y.apply_op2(&gm.contiguous()?, MaxPoolRoute)?;
        let db = gm.sum((0, 1, 2))?;
        Ok((Some(dy), Some(db)))
    }
}

#[cfg(test)]
mod tests {
    use super::{join, par_chunks};

    #[test]
    fn a_kernel_entered_with_the_kernels_off_fails_as_on_a_gpu() {
        use candle_core::{DType, Device, Tensor};
        let x = Tensor::ones((1, 4, 4, 2), DType::F32, &Device::Cpu).unwrap();
        assert!(super::supported(&x));
        let pooled = x.apply_op1(super::MaxPool).unwrap();
        let off = super::without(|| {
            assert!(!super::supported(&x));
            x.apply_op1(super::MaxPool)
        });
        let e = off.unwrap_err().to_string();
        assert!(e.contains("kernels off"), "{e}");
        // Restored afterwards, on this thread.
        assert!(super::supported(&x));
        assert_eq!(
            x.apply_op1(super::MaxPool).unwrap().to_vec3::<f32>().ok(),
            pooled.to_vec3::<f32>().ok()
        );
    }

    #[test]
    fn pool_helpers_nest_and_match_a_sequential_loop() {
        // Reference: the same sums computed in one plain loop. Nested use (par_chunks inside
        // join inside par_chunks), from several threads at once, must neither deadlock nor
        // mix up chunks.
        let fill = |out: &mut [u64], base: u64| {
            par_chunks(out, 7, |i, part| {
                let (x, y) = join(|| i as u64 * 1000, || base);
                for (j, v) in part.iter_mut().enumerate() {
                    *v = x + y + j as u64;
                }
            });
        };
        let expect = |base: u64| -> Vec<u64> {
            (0..100u64).map(|k| (k / 7) * 1000 + base + k % 7).collect()
        };
        std::thread::scope(|s| {
            for t in 0..3u64 {
                s.spawn(move || {
                    let (a, b) = join(
                        || {
                            let mut v = vec![0; 100];
                            fill(&mut v, t);
                            v
                        },
                        || {
                            let mut v = vec![0; 100];
                            fill(&mut v, t + 10);
                            v
                        },
                    );
                    assert_eq!(a, expect(t));
                    assert_eq!(b, expect(t + 10));
                });
            }
        });
    }
}
