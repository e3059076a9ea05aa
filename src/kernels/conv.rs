//! Stride-1 `k x k` convolution on NHWC tensors as two candle custom ops for training on the
//! CPU: [`Conv`] (`x -> y`) and its transpose [`ConvT`] (`gy -> gx`, the convolution's input
//! gradient, which DUQ's penalty differentiates once more). Each op's backward is written with
//! the other's kernel, so gradients are exact at first order through either op, and second-order
//! quantities built from `ConvT` are exact too.
//!
//! Why: as `im2col -> matmul -> cat` the convolution materialises its whole column matrix
//! (58 MB for the Fashion-MNIST model's second layer at batch 128) and adds three nodes of that
//! size to the autograd graph (candle zero-fills and adds every node's gradient). Here the
//! columns of a few images at a time live in a per-thread buffer of about 2 MB, and the graph
//! holds one node per convolution. 3x3 layers with at least [`WINOGRAD_MIN_CHANNELS`]
//! channels in and out run all three products (convolution, transpose, weight gradient) in
//! Winograd form (`super::winograd`: F(2x2), F(4x4) or F(5x5) tiles, whichever needs the
//! fewest multiplies for the layer's size: 4.0x and 4.6x fewer than im2col on the
//! Fashion-MNIST model's two wide layers); 3x3 layers with one input channel run the
//! convolution and weight gradient as `super::direct`'s kernels; the rest use im2col.
//!
//! The weight enters as the matrix `wmat (cout, k*k*cin)` in im2col's `(ki, kj, c)` column
//! order (`weight.permute((0, 2, 3, 1)).reshape(...)` of a PyTorch `(cout, cin, k, k)`
//! weight). Work is split over two halves of the batch on rayon's pool
//! (`threading::join`); within a half, chunks of images are processed in turn, each output chunk
//! zero-filled just before (`output::fill`).

use super::dispatch::with_float;
use super::elem::Elem;
use super::enabled::entry;
use super::gemm::{gemm_nt, gemm_nt_rows, gemm_strided};
use super::im2col::for_taps;
use super::output::{fill, Part};
use super::storage::{into_storage, storage_slice, with_cpu_slices};
use super::threading::join;
use super::winograd::{self, Variant, Wino};
use candle_core::{CpuStorage, CustomOp2, Layout, Result, Shape, Tensor, WithDType};
use std::ops::Range;

/// Fewest input and output channels for which a 3x3 convolution runs in Winograd form.
pub const WINOGRAD_MIN_CHANNELS: usize = 8;

#[cfg(test)]
thread_local! {
    static FORCE_IM2COL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    static FORCE_VARIANT: std::cell::Cell<Option<Variant>> = const { std::cell::Cell::new(None) };
}
/// Tests compare the Winograd kernels with im2col on the same shapes.
#[cfg(test)]
fn force_im2col() -> bool {
    FORCE_IM2COL.with(|f| f.get())
}
#[cfg(not(test))]
fn force_im2col() -> bool {
    false
}
/// Tests run every Winograd variant on the same shapes.
#[cfg(test)]
fn force_variant() -> Option<Variant> {
    FORCE_VARIANT.with(|f| f.get())
}
#[cfg(not(test))]
fn force_variant() -> Option<Variant> {
    None
}

/// Convolution `(x (b, h, w, cin), wmat (cout, k*k*cin))` -> `y (b, oh, ow, cout)`,
/// `oh = h + 2 pad - k + 1`, zero padding, stride 1, no bias.
#[derive(Debug, Clone, Copy)]
pub struct Conv {
    /// Kernel size.
    pub k: usize,
    /// Zero padding on each side.
    pub pad: usize,
}

/// Transposed convolution, the adjoint of [`Conv`] in `x`:
/// `(gy (b, oh, ow, cout), wmat (cout, k*k*cin))` -> `gx (b, h, w, cin)`.
#[derive(Debug, Clone, Copy)]
pub struct ConvT {
    /// Kernel size.
    pub k: usize,
    /// Zero padding on each side.
    pub pad: usize,
}

/// Spatial geometry of one convolution.
#[derive(Debug, Clone, Copy)]
struct Geo {
    b: usize,
    h: usize,
    w: usize,
    cin: usize,
    oh: usize,
    ow: usize,
    cout: usize,
    k: usize,
    pad: usize,
}

impl Geo {
    fn kc(&self) -> usize {
        self.k * self.k * self.cin
    }
    fn in_len(&self) -> usize {
        self.h * self.w * self.cin
    }
    fn out_len(&self) -> usize {
        self.oh * self.ow * self.cout
    }
    fn rows(&self) -> usize {
        self.oh * self.ow
    }
    /// Images per chunk: the chunk's columns stay around 2 MB of `f32`.
    fn chunk(&self) -> usize {
        ((512 << 10) / (self.rows() * self.kc()).max(1)).clamp(1, self.b.max(1))
    }
    /// The Winograd form of a 3x3 convolution between layers wide enough for its gemms (one
    /// per transformed position) to pay (at least [`WINOGRAD_MIN_CHANNELS`] channels in and
    /// out); `None` runs im2col.
    fn winograd(&self) -> Option<Wino> {
        (self.k == 3 && self.cin.min(self.cout) >= WINOGRAD_MIN_CHANNELS && !force_im2col()).then(
            || {
                let input = (self.h, self.w, self.cin);
                Wino::new(input, self.cout, self.pad, force_variant())
            },
        )
    }
    /// The geometry of [`super::direct`]'s kernels when they handle this convolution (one
    /// input channel, 3x3).
    fn direct(&self) -> Option<super::direct::Geometry> {
        (super::direct::applies(self.cin, self.k, self.cout) && !force_im2col()).then_some(
            super::direct::Geometry {
                h: self.h,
                w: self.w,
                pad: self.pad,
                cout: self.cout,
            },
        )
    }
    /// Image ranges of the two halves of the batch.
    fn halves(&self) -> [Range<usize>; 2] {
        let mid = self.b.div_ceil(2);
        [0..mid, mid..self.b]
    }
    /// The images `imgs` of an input batch `x (b, h, w, cin)`.
    fn inputs<'a, T>(&self, x: &'a [T], imgs: Range<usize>) -> &'a [T] {
        &x[imgs.start * self.in_len()..imgs.end * self.in_len()]
    }
    /// The images `imgs` of an output batch `y (b, oh, ow, cout)`.
    fn outputs<'a, T>(&self, y: &'a [T], imgs: Range<usize>) -> &'a [T] {
        &y[imgs.start * self.out_len()..imgs.end * self.out_len()]
    }
}

/// im2col of images `x (n, h, w, cin)` into `cols (n*oh*ow, kc)`; positions in the padding are
/// left untouched (callers keep them zero: they are the same for every chunk).
fn im2col_into<T: Elem>(x: &[T], n: usize, g: &Geo, cols: &mut [T]) {
    let (kc, c) = (g.kc(), g.cin);
    for i in 0..n {
        let xb = &x[i * g.in_len()..(i + 1) * g.in_len()];
        let cb = &mut cols[i * g.rows() * kc..(i + 1) * g.rows() * kc];
        if c == 1 {
            // One channel (the first layer): element copies, not a `memcpy` call per tap.
            for_taps(g.h, g.w, g.k, g.pad, |o, t, p| cb[o * kc + t] = xb[p]);
        } else {
            for_taps(g.h, g.w, g.k, g.pad, |o, t, p| {
                cb[o * kc + t * c..o * kc + (t + 1) * c].copy_from_slice(&xb[p * c..(p + 1) * c]);
            });
        }
    }
}

/// col2im of `cols (n*oh*ow, kc)` added into images `x (n, h, w, cin)`.
fn col2im_add<T: Elem>(cols: &[T], n: usize, g: &Geo, x: &mut [T]) {
    let (kc, c) = (g.kc(), g.cin);
    for i in 0..n {
        let xb = &mut x[i * g.in_len()..(i + 1) * g.in_len()];
        let cb = &cols[i * g.rows() * kc..(i + 1) * g.rows() * kc];
        for_taps(g.h, g.w, g.k, g.pad, |o, t, p| {
            let src = &cb[o * kc + t * c..o * kc + (t + 1) * c];
            for (d, &s) in xb[p * c..(p + 1) * c].iter_mut().zip(src) {
                *d += s;
            }
        });
    }
}

/// `wmat (cout, kc)` -> `(kc, cout)`.
fn transpose<T: Elem>(wmat: &[T], cout: usize, kc: usize) -> Vec<T> {
    let mut t = vec![T::ZERO; wmat.len()];
    for co in 0..cout {
        for j in 0..kc {
            t[j * cout + co] = wmat[co * kc + j];
        }
    }
    t
}

/// Chunks of `chunk` images covering `imgs`.
fn chunks(imgs: Range<usize>, chunk: usize) -> impl Iterator<Item = Range<usize>> {
    let end = imgs.end;
    imgs.step_by(chunk.max(1))
        .map(move |at| at..(at + chunk).min(end))
}

/// The output `(b, per)` of `f(scratch, images, out)` run on every chunk of `chunk` images,
/// the batch's two halves in parallel, each half with its own `scratch` (from `init`); `out`
/// is the chunk's part of the output (`per` elements per image), zero-filled just before.
fn for_chunks<T: Elem, S>(
    g: &Geo,
    per: usize,
    chunk: usize,
    init: impl Fn() -> S + Sync,
    f: impl Fn(&mut S, Range<usize>, &mut [T]) + Sync,
) -> Vec<T> {
    let [h0, h1] = g.halves();
    let half = |imgs: Range<usize>, part: Part<'_, T>| {
        let mut scratch = init();
        for (c, piece) in chunks(imgs, chunk).zip(part.chunks(chunk * per)) {
            f(&mut scratch, c, piece.zeroed());
        }
    };
    fill(g.b * per, |all| {
        let (p0, p1) = all.split_at(h0.len() * per);
        join(|| half(h0, p0), || half(h1, p1));
    })
    .0
}

/// The sum over the batch of `f(scratch, images, acc)` accumulated into `acc (len,)` for every
/// chunk of `chunk` images; the two halves in parallel, each with its own `scratch` and
/// accumulator, added in a fixed order.
fn sum_chunks<T: Elem, S>(
    g: &Geo,
    len: usize,
    chunk: usize,
    init: impl Fn() -> S + Sync,
    f: impl Fn(&mut S, Range<usize>, &mut [T]) + Sync,
) -> Vec<T> {
    let half = |imgs: Range<usize>| {
        let (mut scratch, mut acc) = (init(), vec![T::ZERO; len]);
        for c in chunks(imgs, chunk) {
            f(&mut scratch, c, &mut acc);
        }
        acc
    };
    let [h0, h1] = g.halves();
    let (mut a, b) = join(|| half(h0), || half(h1));
    a.iter_mut().zip(&b).for_each(|(x, &y)| *x += y);
    a
}

/// `y = conv(x)`: per chunk, Winograd or im2col then `cols @ wmat^T`.
fn conv_k<T: Elem>(x: &[T], wmat: &[T], g: &Geo) -> Vec<T> {
    let out = g.out_len();
    if let Some(dg) = g.direct() {
        // Two images per chunk: the chunk's output (400 KB on 28x28 with 64 channels) stays in
        // cache between its zero fill and the kernel's writes.
        let wt = transpose(wmat, g.cout, g.kc());
        return for_chunks(
            g,
            out,
            2,
            || (),
            |(), imgs, y| {
                super::direct::conv(g.inputs(x, imgs), &wt, dg, y);
            },
        );
    }
    if let Some(wg) = g.winograd() {
        let (u, chunk) = (winograd::weights(wmat, &wg), wg.chunk(g.b));
        let init = || winograd::Buffers::new(&wg);
        return for_chunks(g, out, chunk, init, |bufs, imgs, y| {
            let n = imgs.len();
            let x = g.inputs(x, imgs);
            winograd::run(winograd::Kernel::Conv { x, u: &u, y }, n, &wg, bufs);
        });
    }
    let chunk = g.chunk();
    let init = || vec![T::ZERO; chunk * g.rows() * g.kc()];
    for_chunks(g, out, chunk, init, |cols, imgs, y| {
        let n = imgs.len();
        im2col_into(g.inputs(x, imgs), n, g, cols);
        gemm_nt_rows(n * g.rows(), g.cout, g.kc(), cols, wmat, y);
    })
}

/// `gx = conv^T(gy)`: per chunk, Winograd or `gy @ wmat` then col2im.
fn conv_t_k<T: Elem>(gy: &[T], wmat: &[T], g: &Geo) -> Vec<T> {
    let out = g.in_len();
    if let Some(wg) = g.winograd() {
        let (u, chunk) = (winograd::weights(wmat, &wg), wg.chunk(g.b));
        let init = || winograd::Buffers::new(&wg);
        return for_chunks(g, out, chunk, init, |bufs, imgs, gx| {
            let n = imgs.len();
            let gy = g.outputs(gy, imgs);
            winograd::run(winograd::Kernel::ConvT { gy, u: &u, gx }, n, &wg, bufs);
        });
    }
    let wt = transpose(wmat, g.cout, g.kc());
    let chunk = g.chunk();
    let init = || vec![T::ZERO; chunk * g.rows() * g.kc()];
    for_chunks(g, out, chunk, init, |cols, imgs, gx| {
        let n = imgs.len();
        let rows = n * g.rows();
        let gy = g.outputs(gy, imgs);
        gemm_nt(rows, g.kc(), g.cout, gy, &wt, &mut cols[..rows * g.kc()]);
        col2im_add(cols, n, g, gx);
    })
}

/// `dW (cout, kc) = gy^T @ im2col(x)` summed over the batch (or its Winograd form).
fn weight_grad_k<T: Elem>(x: &[T], gy: &[T], g: &Geo) -> Vec<T> {
    if let Some(dg) = g.direct() {
        // Tap-major sums `(9, cout)`, transposed to wmat's `(cout, 9)`.
        let dt = sum_chunks(
            g,
            g.kc() * g.cout,
            2,
            || (),
            |(), imgs, acc| {
                let (x, gy) = (g.inputs(x, imgs.clone()), g.outputs(gy, imgs));
                super::direct::weight_grad(x, gy, dg, acc);
            },
        );
        return transpose(&dt, g.kc(), g.cout);
    }
    if let Some(wg) = g.winograd() {
        let chunk = wg.chunk(g.b);
        let init = || winograd::Buffers::new(&wg);
        let len = wg.positions() * g.cin * g.cout;
        let du = sum_chunks(g, len, chunk, init, |bufs, imgs, du| {
            let n = imgs.len();
            let (x, gy) = (g.inputs(x, imgs.clone()), g.outputs(gy, imgs));
            winograd::run(winograd::Kernel::WeightGrad { x, gy, du }, n, &wg, bufs);
        });
        return winograd::weights_adjoint(&du, &wg);
    }
    let chunk = g.chunk();
    let init = || vec![T::ZERO; chunk * g.rows() * g.kc()];
    sum_chunks(g, g.cout * g.kc(), chunk, init, |cols, imgs, dw| {
        let rows = imgs.len() * g.rows();
        im2col_into(g.inputs(x, imgs.clone()), imgs.len(), g, cols);
        let gy = g.outputs(gy, imgs);
        gemm_strided(
            (g.cout, g.kc(), rows),
            gy,
            (1, g.cout),
            cols,
            (g.kc(), 1),
            (dw, g.kc()),
            true,
        );
    })
}

fn geometry(x_dims: &[usize], w_dims: &[usize], k: usize, pad: usize, op: &str) -> Result<Geo> {
    let (&[b, h, w, cin], &[cout, kc]) = (x_dims, w_dims) else {
        candle_core::bail!(
            "{op}: expects NHWC input and (cout, k*k*cin) weights, got {x_dims:?} and {w_dims:?}"
        );
    };
    if kc != k * k * cin || h + 2 * pad < k || w + 2 * pad < k {
        candle_core::bail!(
            "{op}: input {x_dims:?} and weights {w_dims:?} do not fit a {k}x{k} kernel"
        );
    }
    Ok(Geo {
        b,
        h,
        w,
        cin,
        oh: h + 2 * pad + 1 - k,
        ow: w + 2 * pad + 1 - k,
        cout,
        k,
        pad,
    })
}

/// The input geometry from a transposed convolution's `gy (b, oh, ow, cout)`.
fn geometry_t(gy_dims: &[usize], w_dims: &[usize], k: usize, pad: usize, op: &str) -> Result<Geo> {
    let (&[b, oh, ow, cout], &[wc, kc]) = (gy_dims, w_dims) else {
        candle_core::bail!("{op}: expects NHWC gradient and (cout, k*k*cin) weights, got {gy_dims:?} and {w_dims:?}");
    };
    if wc != cout || kc % (k * k) != 0 || oh + k < 1 + 2 * pad || ow + k < 1 + 2 * pad {
        candle_core::bail!("{op}: gradient {gy_dims:?} and weights {w_dims:?} do not fit");
    }
    geometry(
        &[b, oh + k - 1 - 2 * pad, ow + k - 1 - 2 * pad, kc / (k * k)],
        w_dims,
        k,
        pad,
        op,
    )
}

/// `(d first, d wmat)` of either op: the other op's kernel on the incoming gradient (skipped
/// when `first` is outside the graph, like a batch of images), and the weight gradient
/// `gy^T @ im2col(x)` from the op's `(x, gy)` pair.
fn backward<T: Elem + WithDType>(
    first: &Tensor,
    wmat: &Tensor,
    grad: &Tensor,
    g: &Geo,
    (transposed, wanted): (bool, bool),
) -> Result<(Option<Tensor>, Tensor)> {
    let (d_first, dw) = if transposed {
        // first = gy, grad = d gx: d gy = conv(d gx), dW = gy^T im2col(d gx).
        let d_gy = wanted
            .then(|| {
                with_cpu_slices::<T, _>(&[grad, wmat], "conv backward", |s| conv_k(s[0], s[1], g))
            })
            .transpose()?;
        let dw = with_cpu_slices::<T, _>(&[grad, first], "conv backward", |s| {
            weight_grad_k(s[0], s[1], g)
        })?;
        (d_gy, dw)
    } else {
        // first = x, grad = d y: d x = conv^T(d y), dW = dy^T im2col(x).
        let dx = wanted
            .then(|| {
                with_cpu_slices::<T, _>(&[grad, wmat], "conv backward", |s| conv_t_k(s[0], s[1], g))
            })
            .transpose()?;
        let dw = with_cpu_slices::<T, _>(&[first, grad], "conv backward", |s| {
            weight_grad_k(s[0], s[1], g)
        })?;
        (dx, dw)
    };
    Ok((
        d_first
            .map(|v| Tensor::from_vec(v, first.shape(), first.device()))
            .transpose()?,
        Tensor::from_vec(dw, wmat.shape(), wmat.device())?,
    ))
}

/// `cpu_fwd` of either op: [`Conv`] maps `x` to `y`, [`ConvT`] maps `gy` to `gx`.
fn forward(
    (k, pad, transposed): (usize, usize, bool),
    (s1, l1): (&CpuStorage, &Layout),
    (s2, l2): (&CpuStorage, &Layout),
    op: &str,
) -> Result<(CpuStorage, Shape)> {
    let g = if transposed {
        geometry_t(l1.dims(), l2.dims(), k, pad, op)?
    } else {
        geometry(l1.dims(), l2.dims(), k, pad, op)?
    };
    fn run<T: Elem + WithDType>(a: &[T], w: &[T], g: &Geo, transposed: bool) -> Vec<T> {
        if transposed {
            conv_t_k(a, w, g)
        } else {
            conv_k(a, w, g)
        }
    }
    let out = with_float!(op, [s1, s2], |T| into_storage(run::<T>(
        storage_slice(s1, l1, op)?,
        storage_slice(s2, l2, op)?,
        &g,
        transposed,
    )));
    let shape = if transposed {
        Shape::from((g.b, g.h, g.w, g.cin))
    } else {
        Shape::from((g.b, g.oh, g.ow, g.cout))
    };
    Ok((out, shape))
}

/// `bwd` of either op, for its first input `first` (`x` or `gy`) and `wmat`; `first`'s
/// gradient only when `first` is in the graph or `want_first`.
fn bwd_either(
    (k, pad, transposed): (usize, usize, bool),
    (first, want_first): (&Tensor, bool),
    wmat: &Tensor,
    grad: &Tensor,
    op: &str,
) -> Result<(Option<Tensor>, Tensor)> {
    let g = if transposed {
        geometry_t(first.dims(), wmat.dims(), k, pad, op)?
    } else {
        geometry(first.dims(), wmat.dims(), k, pad, op)?
    };
    let grad = grad.contiguous()?;
    let how = (transposed, want_first || first.track_op());
    with_float!(op, first.dtype(), |T| backward::<T>(
        first, wmat, &grad, &g, how
    ))
}

/// The gradients of `y = conv(x, wmat)` for `dL/dy (b, oh, ow, cout)`: `dL/dx` (`None` when
/// `x` is outside the graph, unless `want_x`: `x` may be an intermediate of the fused op that
/// calls this) and `dL/dwmat` - [`Conv`]'s backward, for ops that run the convolution inside a
/// larger fused op.
pub(crate) fn conv_backward(
    conv: &Conv,
    x: &Tensor,
    wmat: &Tensor,
    dy: &Tensor,
    want_x: bool,
) -> Result<(Option<Tensor>, Tensor)> {
    bwd_either(
        (conv.k, conv.pad, false),
        (x, want_x),
        wmat,
        dy,
        conv.name(),
    )
}

/// The gradients of `gx = conv^T(gy, wmat)` for `dL/dgx (b, h, w, cin)`: `dL/dgy` (always:
/// `gy` may be an intermediate of the fused op that calls this) and `dL/dwmat`.
pub(crate) fn conv_t_backward(
    conv_t: &ConvT,
    gy: &Tensor,
    wmat: &Tensor,
    dgx: &Tensor,
) -> Result<(Tensor, Tensor)> {
    let (d_gy, dw) = bwd_either(
        (conv_t.k, conv_t.pad, true),
        (gy, true),
        wmat,
        dgx,
        conv_t.name(),
    )?;
    let d_gy =
        d_gy.ok_or_else(|| candle_core::Error::Msg("conv^T backward: no input gradient".into()))?;
    Ok((d_gy, dw))
}

/// Per-candidate squared norms of a convolution's weight gradient, `(n,)` for `x (n * copies,
/// h, w, cin)` and the output gradient `gy (n * copies, oh, ow, cout)`: candidate `i`'s
/// gradient `G_i = sum over its copies' positions q of gy_q im2col(x)_q^T`. Its squared norm
/// is taken in whichever form costs less for the layer: explicitly (`cout * kc` per position),
/// or as `sum_{q,q'} (gy_q . gy_q') (a_q . a_q')` from two Gram matrices of the candidate's `Q`
/// positions (`Q (cout + kc)` per position: the deep layers of a ResNet, with few positions
/// and wide channels). Candidates run in parallel, each with its own buffers; nothing of the
/// size of the batch's patches is stored.
pub(crate) fn candidate_weight_grad_norms(
    conv: &Conv,
    x: &Tensor,
    gy: &Tensor,
    copies: usize,
) -> Result<Vec<f64>> {
    let (m, cout) = (gy.dim(0)?, gy.dim(3)?);
    let cin = x.dim(3)?;
    let k = conv.k;
    let g = geometry(x.dims(), &[cout, k * k * cin], k, conv.pad, "conv site")?;
    if copies == 0 || m % copies != 0 || x.dim(0)? != m || gy.dims() != [m, g.oh, g.ow, cout] {
        candle_core::bail!(
            "conv site: input {:?} and output gradient {:?} are not whole candidates of {copies}",
            x.dims(),
            gy.dims()
        );
    }
    let one = Geo { b: copies, ..g };
    let (x, gy) = (x.contiguous()?, gy.contiguous()?);
    fn norms<T: Elem + WithDType>(x: &[T], gy: &[T], one: &Geo, n: usize) -> Vec<f64> {
        use rayon::prelude::*;
        let (q, kc, cout) = (one.b * one.rows(), one.kc(), one.cout);
        let gram = q * (kc + cout) < cout * kc;
        let square_sum = |v: &[T]| v.iter().map(|&e| Elem::to_f64(e) * Elem::to_f64(e)).sum();
        (0..n)
            .into_par_iter()
            .map_init(
                || {
                    let out = if gram { 2 * q * q } else { cout * kc };
                    (vec![T::ZERO; q * kc], vec![T::ZERO; out])
                },
                |(cols, out), i| {
                    let imgs = i * one.b..(i + 1) * one.b;
                    im2col_into(one.inputs(x, imgs.clone()), one.b, one, cols);
                    let gy = one.outputs(gy, imgs);
                    if gram {
                        let (ga, gd) = out.split_at_mut(q * q);
                        gemm_nt(q, q, kc, cols, cols, ga);
                        gemm_nt(q, q, cout, gy, gy, gd);
                        ga.iter()
                            .zip(gd.iter())
                            .map(|(&a, &d)| Elem::to_f64(a) * Elem::to_f64(d))
                            .sum()
                    } else {
                        gemm_strided(
                            (cout, kc, q),
                            gy,
                            (1, cout),
                            cols,
                            (kc, 1),
                            (out, kc),
                            false,
                        );
                        square_sum(out)
                    }
                },
            )
            .collect()
    }
    let n = m / copies;
    with_float!("conv site", x.dtype(), |T| with_cpu_slices::<T, _>(
        &[&x, &gy],
        "conv site",
        |s| norms(s[0], s[1], &one, n)
    ))
}

impl CustomOp2 for Conv {
    fn name(&self) -> &'static str {
        "alkit-conv"
    }
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        entry(self.name())?;
        forward((self.k, self.pad, false), (s1, l1), (s2, l2), self.name())
    }
    fn bwd(
        &self,
        x: &Tensor,
        wmat: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        if !wmat.track_op() {
            // Detached weights (a gradient-evidence pass): the input gradient only, the
            // weight gradient's whole cost saved.
            if !x.track_op() {
                return Ok((None, None));
            }
            let g = geometry(x.dims(), wmat.dims(), self.k, self.pad, self.name())?;
            let grad = grad.contiguous()?;
            let dx = with_float!(self.name(), x.dtype(), |T| Tensor::from_vec(
                with_cpu_slices::<T, _>(&[&grad, wmat], self.name(), |s| {
                    conv_t_k(s[0], s[1], &g)
                })?,
                x.shape(),
                x.device(),
            )?);
            return Ok((Some(dx), None));
        }
        let (dx, dw) = bwd_either(
            (self.k, self.pad, false),
            (x, false),
            wmat,
            grad,
            self.name(),
        )?;
        Ok((dx, Some(dw)))
    }
}

impl CustomOp2 for ConvT {
    fn name(&self) -> &'static str {
        "alkit-conv-transpose"
    }
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        entry(self.name())?;
        forward((self.k, self.pad, true), (s1, l1), (s2, l2), self.name())
    }
    fn bwd(
        &self,
        gy: &Tensor,
        wmat: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let (dgy, dw) = bwd_either(
            (self.k, self.pad, true),
            (gy, false),
            wmat,
            grad,
            self.name(),
        )?;
        Ok((dgy, Some(dw)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::DType;
    use candle_core::Var;

    use crate::rng::randn_f64 as randn;

    fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
        (a - b)
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar::<f64>()
            .unwrap()
    }

    /// Rounding of the f32 Winograd kernels on the Fashion-MNIST model's second layer
    /// (64 -> 128 channels, 14x14, pad 1), against candle's `conv2d` in f64 as the exact value:
    /// the largest error of the convolution, its transpose and its weight gradient, relative
    /// to the largest magnitude of each result. im2col's is a few times f32's epsilon (1.2e-7);
    /// larger tiles round worse, each variant is held below its bound. Measured (conv /
    /// transpose / weight gradient): im2col 5.8e-7 / 2.6e-7 / 6.2e-7; F(2x2) 3.7e-7 / 4.0e-7 /
    /// 4.1e-7; F(4x4) 6.7e-6 / 6.4e-6 /
    /// 2.9e-6; F(5x5) 8.0e-6 / 6.8e-6 / 2.9e-6.
    #[test]
    fn winograd_f32_rounding_stays_near_im2col() -> Result<()> {
        let (b, h, w, cin, cout, k, pad) = (3, 14, 14, 64, 128, 3, 1);
        let x = randn(&[b, h, w, cin], 11);
        let weight = (randn(&[cout, cin, k, k], 12) / ((k * k * cin) as f64).sqrt())?;
        let gy = randn(&[b, h, w, cout], 13);
        // Exact (f64) references: y = conv(x); gx = conv^T(gy) and dW from autodiff.
        let xv = Var::from_tensor(&x)?;
        let wv = Var::from_tensor(&weight)?;
        let y64 = xv
            .as_tensor()
            .permute((0, 3, 1, 2))?
            .conv2d(wv.as_tensor(), pad, 1, 1, 1)?
            .permute((0, 2, 3, 1))?;
        let g = (&y64 * &gy)?.sum_all()?.backward()?;
        let gx64 = g.get(xv.as_tensor()).unwrap().clone();
        let dw64 = g
            .get(wv.as_tensor())
            .unwrap()
            .permute((0, 2, 3, 1))?
            .reshape((cout, k * k * cin))?;
        let rel = |a: &Tensor, e: &Tensor| -> f64 {
            let a = a.to_dtype(DType::F64).unwrap();
            max_diff(&a, e)
                / e.abs()
                    .unwrap()
                    .max_all()
                    .unwrap()
                    .to_scalar::<f64>()
                    .unwrap()
        };
        let errors = |im2col: bool, variant: Option<Variant>| -> Result<[f64; 3]> {
            FORCE_IM2COL.with(|f| f.set(im2col));
            FORCE_VARIANT.with(|f| f.set(variant));
            let f32s = |t: &Tensor| t.to_dtype(DType::F32);
            let wmat = f32s(&weight.permute((0, 2, 3, 1))?.reshape((cout, k * k * cin))?)?;
            let (xf, gyf) = (Var::from_tensor(&f32s(&x)?)?, f32s(&gy)?);
            let wf = Var::from_tensor(&wmat)?;
            let y = xf.as_tensor().apply_op2(wf.as_tensor(), Conv { k, pad })?;
            let gx = gyf.apply_op2(&wmat, ConvT { k, pad })?;
            let dw = (&y * &gyf)?.sum_all()?.backward()?;
            let dw = dw.get(wf.as_tensor()).unwrap().clone();
            FORCE_IM2COL.with(|f| f.set(false));
            FORCE_VARIANT.with(|f| f.set(None));
            Ok([rel(&y, &y64), rel(&gx, &gx64), rel(&dw, &dw64)])
        };
        let im2col = errors(true, None)?;
        assert!(im2col.iter().all(|&e| e < 1e-6), "im2col {im2col:?}");
        for (variant, bound) in [
            (Variant::F2, 1e-6),
            (Variant::F4, 1e-5),
            (Variant::F5, 2e-5),
        ] {
            let wino = errors(false, Some(variant))?;
            assert!(
                wino.iter().all(|&e| e < bound),
                "{variant:?} {wino:?} vs im2col {im2col:?}"
            );
        }
        Ok(())
    }

    /// The tile choice, worked by hand as output tiles x transformed positions per image and
    /// channel pair (ties go to the smaller tile): a 14x14 output costs 7*7*16 = 784 (F2),
    /// 4*4*36 = 576 (F4), 3*3*49 = 441 (F5); 5x5: 144, 144, 49; 6x7: 3*4*16 = 192,
    /// 2*2*36 = 144, 2*2*49 = 196; 3x2: 2*1*16 = 32, 36, 49; 8x8: 256, 144, 196.
    #[test]
    fn winograd_picks_the_tile_with_fewest_products() {
        let pick = |h: usize, w: usize, pad: usize| Wino::new((h, w, 64), 128, pad, None).variant;
        assert_eq!(pick(14, 14, 1), Variant::F5);
        assert_eq!(pick(7, 7, 0), Variant::F5);
        assert_eq!(pick(6, 7, 1), Variant::F4);
        assert_eq!(pick(5, 4, 0), Variant::F2);
        assert_eq!(pick(8, 8, 1), Variant::F4);
        assert_eq!(
            Wino::new((14, 14, 64), 128, 1, Some(Variant::F2)).variant,
            Variant::F2
        );
    }

    /// Reference: candle's own `conv2d` (NCHW, PyTorch weight layout) and its autodiff, f64,
    /// for pad 0 and 1, an odd batch (unequal halves) and more images than one chunk holds;
    /// `ConvT` against autodiff's input gradient of `conv2d`, and both ops' backward against
    /// candle's gradients of the same scalar.
    #[test]
    fn conv_ops_match_candle_conv2d_and_its_gradients_in_f64() -> Result<()> {
        // The first two run the one-channel direct kernels (their transpose im2col), the
        // next three im2col, the rest Winograd, each in all three variants (odd output sides,
        // pad 0 and 1, partial tiles, several chunks, unequal halves).
        let shapes = [
            (5, 9, 8, 1, 16, 1),
            (3, 7, 6, 1, 32, 0),
            (5, 6, 7, 3, 4, 1),
            (3, 5, 5, 2, 3, 0),
            (41, 9, 8, 4, 5, 1),
            (5, 6, 7, 8, 9, 1),
            (3, 7, 7, 9, 8, 0),
            (13, 14, 14, 8, 16, 1),
            (7, 5, 4, 12, 8, 0),
        ];
        let cases = shapes.into_iter().flat_map(|shape| {
            let variants = if shape.3.min(shape.4) >= WINOGRAD_MIN_CHANNELS {
                Variant::ALL.map(Some).to_vec()
            } else {
                vec![None]
            };
            variants.into_iter().map(move |v| (shape, v))
        });
        for ((b, h, w, cin, cout, pad), variant) in cases {
            FORCE_VARIANT.with(|f| f.set(variant));
            let k = 3;
            let x = Var::from_tensor(&randn(&[b, h, w, cin], 1))?;
            let weight = Var::from_tensor(&randn(&[cout, cin, k, k], 2))?;
            let wmat = weight
                .as_tensor()
                .permute((0, 2, 3, 1))?
                .reshape((cout, k * k * cin))?;
            let y = x.as_tensor().apply_op2(&wmat, Conv { k, pad })?;
            let reference = x
                .as_tensor()
                .permute((0, 3, 1, 2))?
                .conv2d(weight.as_tensor(), pad, 1, 1, 1)?
                .permute((0, 2, 3, 1))?;
            assert!(max_diff(&y, &reference) < 1e-12);
            let r = randn(y.dims(), 3);
            let ga = (&y * &r)?.sum_all()?.backward()?;
            let gb = (&reference * &r)?.sum_all()?.backward()?;
            for v in [x.as_tensor(), weight.as_tensor()] {
                assert!(max_diff(ga.get(v).unwrap(), gb.get(v).unwrap()) < 1e-10);
            }
            // ConvT = the input gradient; its own gradients against autodiff of
            // sum(conv2d-input-gradient * r2), written as <conv(z), r> differentiated in z.
            let gp = Var::from_tensor(&r)?;
            let gx = gp.as_tensor().apply_op2(&wmat, ConvT { k, pad })?;
            assert!(max_diff(&gx, gb.get(x.as_tensor()).unwrap()) < 1e-10);
            let r2 = randn(&[b, h, w, cin], 4);
            let g1 = (&gx * &r2)?.sum_all()?.backward()?;
            // <conv^T(gp), r2> = <gp, conv(r2)>: gradient in gp is conv(r2), in the weight
            // the gradient of <conv(r2; W), gp>.
            let r2v = Var::from_tensor(&r2)?;
            let conv_r2 = r2v
                .as_tensor()
                .permute((0, 3, 1, 2))?
                .conv2d(weight.as_tensor(), pad, 1, 1, 1)?
                .permute((0, 2, 3, 1))?;
            assert!(max_diff(g1.get(gp.as_tensor()).unwrap(), &conv_r2) < 1e-10);
            let g2 = (&conv_r2 * gp.as_tensor())?.sum_all()?.backward()?;
            assert!(
                max_diff(
                    g1.get(weight.as_tensor()).unwrap(),
                    g2.get(weight.as_tensor()).unwrap()
                ) < 1e-10
            );
        }
        FORCE_VARIANT.with(|f| f.set(None));
        Ok(())
    }
}
