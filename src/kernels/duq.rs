//! Fused CPU kernels for the training-mode blocks of [`crate::duq::cnn::DuqCnn`]: batch norm with
//! the batch's statistics, the affine `gamma x_hat + beta`, ReLU and 2x2 max-pool as one candle
//! custom op ([`BnReluPool`]), and that op's vector-Jacobian product - the block's share of
//! the input gradient `grad_x sum_c K_c` - as a second ([`BnReluPoolGrad`]). Both have exact
//! hand-written backward passes, so one first-order backward of `BCE + penalty` through them
//! gives the penalty's parameter gradients. Tests compare them with the composition of candle
//! ops in `f64` (and the model's gradients with finite differences).
//!
//! Why: written as separate candle ops, the statistics, masks and broadcasts of one block are
//! about thirty full passes (forward, input gradient and the backward of both) over
//! `(b*h*w, c)` tensors of 12-26 MB per step, which dominated training time; each op here makes
//! two to four passes. With a gradient penalty a block trains as [`TrainBlock`] (the convolution
//! and [`BnReluPool`]) and [`BlockInputGrad`] ([`BnReluPoolGrad`] and the transposed
//! convolution), which keep the convolution output out of candle's graph (see [`BlockLink`]);
//! without one, all blocks are one [`BlockChain`]. Each kernel works on the batch's two halves
//! in parallel (a fixed split, so results do not depend on the thread count) and is compiled
//! per SIMD level through `pulp` (the `Half` trait), so its loops vectorise for the CPU at
//! hand.
//!
//! Notation, per channel over the `N = b*h*w` rows of the convolution output `y (b, h, w, c)`:
//! mean `mu`, biased variance `v`, `s = 1/sqrt(v + eps)`, `x_hat = (y - mu) s`,
//! `u = gamma x_hat + beta`. Each 2x2 window's first maximum of `u` is its argmax, *active* when
//! that maximum is `> 0` (the ReLU passes it). For a pooled gradient `gp`, `q` is `gp` routed to
//! the active argmaxes (zero elsewhere); the op's vector-Jacobian product is then
//! `gy = s gamma (q - mean(q) - x_hat mean(q x_hat))`.
//!
//! The ops take the block's parameters as one `(3, c)` tensor: rows `gamma`, `beta` and the
//! convolution's bias. The bias cancels in training-mode batch norm, so its gradient is exactly
//! zero (it still gets one, so weight decay treats it as PyTorch does); it matters only for the
//! running mean.

use crate::kernels::{fill, storage_slice, with_cpu_slices, Elem, Part};
use std::ops::Range;
use std::sync::{Arc, OnceLock};

use candle_core::{
    backend::BackendStorage, CpuStorage, CustomOp2, CustomOp3, DType, Layout, Result, Shape,
    Tensor, WithDType,
};

/// Batch-norm epsilon (PyTorch's default).
pub const EPS: f64 = 1e-5;
/// Argmax marker of a window whose maximum the ReLU blocks.
const INACTIVE: u8 = u8::MAX;

/// True when the fused ops can run on `x` (CPU, `f32` or `f64`).
pub fn supported(x: &Tensor) -> bool {
    crate::kernels::supported(x)
}

/// An NHWC activation's shape.
#[derive(Debug, Clone, Copy)]
struct Dims {
    b: usize,
    h: usize,
    w: usize,
    c: usize,
}

impl Dims {
    fn from_layout(l: &Layout, op: &str) -> Result<Self> {
        match l.dims() {
            &[b, h, w, c] => Ok(Self { b, h, w, c }),
            d => candle_core::bail!("{op} expects a rank-4 NHWC tensor, got {d:?}"),
        }
    }
    fn rows(&self) -> usize {
        self.b * self.h * self.w
    }
    fn pooled_shape(&self) -> (usize, usize, usize, usize) {
        (self.b, self.h / 2, self.w / 2, self.c)
    }
    /// The batch's two halves (image ranges) that the kernels work on in parallel: a fixed
    /// split, so results do not depend on the number of threads.
    fn halves(&self) -> [Range<usize>; 2] {
        let mid = self.b.div_ceil(2);
        [0..mid, mid..self.b]
    }
    /// Rows of one image.
    fn image_rows(&self) -> usize {
        self.h * self.w
    }
    /// Pooled pixels of one image.
    fn image_pooled(&self) -> usize {
        (self.h / 2) * (self.w / 2)
    }

    /// Every row of the images `imgs` outside all pooling windows (the last row / column of
    /// odd sides).
    #[inline(always)]
    fn uncovered(&self, imgs: Range<usize>, mut f: impl FnMut(usize)) {
        let (h2, w2) = (2 * (self.h / 2), 2 * (self.w / 2));
        for bi in imgs {
            for yy in 0..self.h {
                for xx in 0..self.w {
                    if yy >= h2 || xx >= w2 {
                        f((bi * self.h + yy) * self.w + xx);
                    }
                }
            }
        }
    }

    /// Every pooled pixel (flat index) of the images `imgs` with the row indices of its
    /// window, in the order `(0,0), (0,1), (1,0), (1,1)` (the order in which the first maximum
    /// wins).
    #[inline(always)]
    fn windows(&self, imgs: Range<usize>, mut f: impl FnMut(usize, [usize; 4])) {
        let (h2, w2) = (self.h / 2, self.w / 2);
        for bi in imgs {
            for py in 0..h2 {
                for px in 0..w2 {
                    let r0 = (bi * self.h + 2 * py) * self.w + 2 * px;
                    f(
                        (bi * h2 + py) * w2 + px,
                        [r0, r0 + 1, r0 + self.w, r0 + self.w + 1],
                    );
                }
            }
        }
    }
}

/// One kernel's work on a range of images: `run` is compiled once per SIMD level `S` (through
/// `pulp`'s dispatch: AVX-512, AVX2 or the baseline), and the closures inside it are
/// instantiated per level, so they inline there and their loops vectorise for the CPU at hand.
trait Half: Sync {
    /// Element types of the two outputs it writes (`()` for none).
    type A: Send;
    type B: Send;
    /// What it returns (per-channel sums, or nothing).
    type Out: Send;
    /// The work on images `imgs`, writing this range's parts `a`, `b` of the outputs.
    fn run<S: pulp::Simd>(
        &self,
        imgs: Range<usize>,
        a: &mut [Self::A],
        b: &mut [Self::B],
    ) -> Self::Out;
}

/// [`Half::run`] inside the target-feature context of SIMD level `S`.
struct Job<'a, H: Half> {
    half: &'a H,
    imgs: Range<usize>,
    a: &'a mut [H::A],
    b: &'a mut [H::B],
}

impl<H: Half> pulp::WithSimd for Job<'_, H> {
    type Output = H::Out;
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _simd: S) -> H::Out {
        self.half.run::<S>(self.imgs, self.a, self.b)
    }
}

/// `half` on the batch's two halves in parallel, each with its parts of the outputs
/// (`a.1`, `b.1` elements per image).
fn split_run<H: Half>(
    d: &Dims,
    half: &H,
    a: (&mut [H::A], usize),
    b: (&mut [H::B], usize),
) -> [H::Out; 2] {
    let [h0, h1] = d.halves();
    let (a0, a1) = a.0.split_at_mut(h0.len() * a.1);
    let (b0, b1) = b.0.split_at_mut(h0.len() * b.1);
    let job = |imgs, a, b| pulp::Arch::new().dispatch(Job { half, imgs, a, b });
    let (x, y) = crate::kernels::join(|| job(h0, a0, b0), || job(h1, a1, b1));
    [x, y]
}

/// [`split_run`] into two new outputs of `a_per` and `b_per` elements per image, each half's
/// parts zero-filled in the thread that writes them (see [`crate::kernels::fill`]).
fn split_run_filled<T: Elem, H: Half<A = T, B = T>>(
    d: &Dims,
    half: &H,
    a_per: usize,
    b_per: usize,
) -> (Vec<T>, Vec<T>, [H::Out; 2]) {
    let [h0, h1] = d.halves();
    let job = |imgs, a: Part<'_, T>, b: Part<'_, T>| {
        let (a, b) = (a.zeroed(), b.zeroed());
        pulp::Arch::new().dispatch(Job { half, imgs, a, b })
    };
    let (a, (b, out)) = fill(d.b * a_per, |pa| {
        fill(d.b * b_per, |pb| {
            let (a0, a1) = pa.split_at(h0.len() * a_per);
            let (b0, b1) = pb.split_at(h0.len() * b_per);
            let (x, y) = crate::kernels::join(|| job(h0, a0, b0), || job(h1, a1, b1));
            [x, y]
        })
    });
    (a, b, out)
}

/// The sum over the batch's two halves of `half`'s per-channel partial sums, computed in
/// parallel and added in a fixed order (so results do not depend on the thread count).
fn split_sum<const K: usize, H: Half<A = (), B = (), Out = [Vec<f64>; K]>>(
    d: &Dims,
    half: &H,
) -> [Vec<f64>; K] {
    let [mut a, b] = split_run(d, half, (&mut [], 0), (&mut [], 0));
    for (x, y) in a.iter_mut().zip(&b) {
        x.iter_mut().zip(y).for_each(|(u, v)| *u += v);
    }
    a
}

/// `K` per-channel sums accumulated in `T` over a few windows at a time and added into `f64`
/// (vectorised, and accurate).
struct Partials<T, const K: usize> {
    part: [Vec<T>; K],
    total: [Vec<f64>; K],
    windows: usize,
}

impl<T: Elem, const K: usize> Partials<T, K> {
    /// Windows summed in `T` before a flush into `f64`.
    const FLUSH: usize = 16;
    fn new(c: usize) -> Self {
        Self {
            part: std::array::from_fn(|_| vec![T::ZERO; c]),
            total: std::array::from_fn(|_| vec![0.0; c]),
            windows: 0,
        }
    }
    /// The `T` partial sums, for the next window.
    #[inline(always)]
    fn next(&mut self) -> &mut [Vec<T>; K] {
        self.windows += 1;
        if self.windows > Self::FLUSH {
            self.flush();
            self.windows = 1;
        }
        &mut self.part
    }
    #[inline(always)]
    fn flush(&mut self) {
        for (t, p) in self.total.iter_mut().zip(self.part.iter_mut()) {
            for (a, b) in t.iter_mut().zip(p.iter_mut()) {
                *a += b.to_f64();
                *b = T::ZERO;
            }
        }
    }
    fn finish(mut self) -> [Vec<f64>; K] {
        self.flush();
        self.total
    }
}

/// Value `k` of a window's four (`0..4`; [`INACTIVE`] gives the last), as a select the
/// compiler vectorises. Callers read the four values from local slices cut to the loop's
/// length: through a reference to an array of slices the loop stayed scalar.
#[inline(always)]
fn pick<T: Elem>(k: u8, [a, b, c, d]: [T; 4]) -> T {
    let (k, one) = (T::from_u8(k), T::ONE);
    if k < one {
        a
    } else if k < one + one {
        b
    } else if k < one + one + one {
        c
    } else {
        d
    }
}

/// The sparse term of one row of a window: `k g` in the channels whose argmax code `m` is this
/// row's `j`.
#[derive(Clone, Copy)]
struct Routed<'a, T> {
    m: &'a [u8],
    j: u8,
    k: &'a [T],
    g: &'a [T],
}

/// One row of a dense output: `o = (y - mu) kx + k0 [+ gr kg] [+ routed]`, per channel. Every
/// slice is cut to `o`'s length here, so the compiler can drop the bounds checks and vectorise
/// the loop (indexing slices whose lengths it cannot relate to the loop bound kept these loops
/// scalar).
#[inline(always)]
fn write_row<T: Elem>(
    o: &mut [T],
    yr: &[T],
    [mu, kx, k0]: [&[T]; 3],
    dense: Option<(&[T], &[T])>,
    routed: Option<Routed<'_, T>>,
) {
    let n = o.len();
    let (yr, mu, kx, k0) = (&yr[..n], &mu[..n], &kx[..n], &k0[..n]);
    match (dense, routed) {
        (Some((gr, kg)), Some(Routed { m, j, k: kr, g })) => {
            let (gr, kg, m, kr, g) = (&gr[..n], &kg[..n], &m[..n], &kr[..n], &g[..n]);
            for ch in 0..n {
                let r = if m[ch] == j { kr[ch] * g[ch] } else { T::ZERO };
                o[ch] = gr[ch] * kg[ch] + ((yr[ch] - mu[ch]) * kx[ch] + k0[ch]) + r;
            }
        }
        (Some((gr, kg)), None) => {
            let (gr, kg) = (&gr[..n], &kg[..n]);
            for ch in 0..n {
                o[ch] = gr[ch] * kg[ch] + ((yr[ch] - mu[ch]) * kx[ch] + k0[ch]);
            }
        }
        (None, Some(Routed { m, j, k: kr, g })) => {
            let (m, kr, g) = (&m[..n], &kr[..n], &g[..n]);
            for ch in 0..n {
                let r = if m[ch] == j { kr[ch] * g[ch] } else { T::ZERO };
                o[ch] = (yr[ch] - mu[ch]) * kx[ch] + k0[ch] + r;
            }
        }
        (None, None) => {
            for ch in 0..n {
                o[ch] = (yr[ch] - mu[ch]) * kx[ch] + k0[ch];
            }
        }
    }
}

/// Per-channel sums over rows of `y (N, c)`: of `y`, or of `(y - mean)^2` when `mean` is
/// given.
struct MomentSums<'a, T> {
    y: &'a [T],
    c: usize,
    /// Elements per image.
    per: usize,
    mean: Option<&'a [T]>,
}

impl<T: Elem> Half for MomentSums<'_, T> {
    type A = ();
    type B = ();
    type Out = [Vec<f64>; 1];
    #[inline(always)]
    fn run<S: pulp::Simd>(&self, imgs: Range<usize>, _: &mut [()], _: &mut [()]) -> Self::Out {
        let (c, y) = (self.c, &self.y[imgs.start * self.per..imgs.end * self.per]);
        [match self.mean {
            None => block_sums(y, c, |p, row| {
                for (a, &v) in p.iter_mut().zip(row) {
                    *a += v;
                }
            }),
            Some(m) => block_sums(y, c, |p, row| {
                for ((a, &v), &m) in p.iter_mut().zip(row).zip(m) {
                    let d = v - m;
                    *a += d * d;
                }
            }),
        }]
    }
}

/// Per-channel statistics of `y (N, c)` in `f64`: mean and biased variance.
fn moments<T: Elem>(y: &[T], d: &Dims) -> (Vec<f64>, Vec<f64>) {
    let n = d.rows().max(1) as f64;
    let mut sums = MomentSums {
        y,
        c: d.c,
        per: d.image_rows() * d.c,
        mean: None,
    };
    let [sum] = split_sum(d, &sums);
    let mean: Vec<f64> = sum.iter().map(|s| s / n).collect();
    let mt: Vec<T> = mean.iter().map(|&m| T::from_f64(m)).collect();
    sums.mean = Some(&mt);
    let [sq] = split_sum(d, &sums);
    (mean, sq.iter().map(|s| s / n).collect())
}

/// Per-channel sums over the rows of `y (N, c)`: `add(partial, row)` accumulates one row into
/// a `T` partial sum; partials of 64 rows are added in `f64` (vectorised, and accurate).
#[inline(always)]
fn block_sums<T: Elem>(y: &[T], c: usize, mut add: impl FnMut(&mut [T], &[T])) -> Vec<f64> {
    let mut total = vec![0f64; c];
    let mut part = vec![T::ZERO; c];
    for rows in y.chunks(64 * c) {
        part.iter_mut().for_each(|p| *p = T::ZERO);
        for row in rows.chunks_exact(c) {
            add(&mut part, row);
        }
        for (t, p) in total.iter_mut().zip(&part) {
            *t += p.to_f64();
        }
    }
    total
}

/// What every kernel recomputes from `y` and the parameters.
struct Block<T> {
    d: Dims,
    /// Per channel, `f64`: `s`, `gamma`, and the batch mean and biased variance.
    s: Vec<f64>,
    gamma: Vec<f64>,
    mean: Vec<f64>,
    var: Vec<f64>,
    /// Per channel, `T`: `mu`, `beta`.
    mu_t: Vec<T>,
    beta_t: Vec<T>,
}

impl<T: Elem> Block<T> {
    fn new(y: &[T], params: &[T], d: Dims) -> Self {
        let c = d.c;
        let (mean, var) = moments(y, &d);
        let s: Vec<f64> = var.iter().map(|v| 1.0 / (v + EPS).sqrt()).collect();
        Self {
            d,
            gamma: params[..c].iter().map(|g| g.to_f64()).collect(),
            mu_t: mean.iter().map(|&m| T::from_f64(m)).collect(),
            beta_t: params[c..2 * c].to_vec(),
            s,
            mean,
            var,
        }
    }

    /// Each window's active argmax per channel (`0..4`, or [`INACTIVE`]), and the pooled
    /// output `max(u_argmax, 0)`.
    fn argmax(&self, y: &[T]) -> (Vec<u8>, Vec<T>) {
        let c = self.d.c;
        let (b, h2, w2, _) = self.d.pooled_shape();
        let mut map = vec![INACTIVE; b * h2 * w2 * c];
        let mut out = vec![T::ZERO; b * h2 * w2 * c];
        let per = h2 * w2 * c;
        // u = (y - mu) (s gamma) + beta; slices of length c so the loop vectorises.
        let sg: Vec<T> = (0..c)
            .map(|ch| T::from_f64(self.s[ch] * self.gamma[ch]))
            .collect();
        let k = ArgmaxK {
            d: self.d,
            y,
            mu: &self.mu_t,
            sg: &sg,
            beta: &self.beta_t,
        };
        split_run(&self.d, &k, (&mut map, per), (&mut out, per));
        (map, out)
    }
}

/// [`Block::argmax`]'s kernel: per pooled pixel and channel, the active argmax of
/// `u = (y - mu) sg + beta` over the window and `max(u, 0)`.
struct ArgmaxK<'a, T> {
    d: Dims,
    y: &'a [T],
    mu: &'a [T],
    sg: &'a [T],
    beta: &'a [T],
}

impl<T: Elem> Half for ArgmaxK<'_, T> {
    type A = u8;
    type B = T;
    type Out = ();
    #[inline(always)]
    fn run<S: pulp::Simd>(&self, imgs: Range<usize>, map: &mut [u8], out: &mut [T]) {
        let (c, y) = (self.d.c, self.y);
        let (mu, sg, beta) = (&self.mu[..c], &self.sg[..c], &self.beta[..c]);
        let at = imgs.start * self.d.image_pooled();
        self.d.windows(imgs, |p, rows| {
            let (m, o) = (&mut map[(p - at) * c..][..c], &mut out[(p - at) * c..][..c]);
            let [r0, r1, r2, r3] = rows.map(|r| &y[r * c..][..c]);
            for ch in 0..c {
                let u = |v: T| (v - mu[ch]) * sg[ch] + beta[ch];
                let (u0, u1, u2, u3) = (u(r0[ch]), u(r1[ch]), u(r2[ch]), u(r3[ch]));
                // First maximum in window order: ties keep the earlier position.
                let (b01, i01) = if u1 > u0 { (u1, 1) } else { (u0, 0) };
                let (b23, i23) = if u3 > u2 { (u3, 3) } else { (u2, 2) };
                let (bu, bi) = if b23 > b01 { (b23, i23) } else { (b01, i01) };
                let on = bu > T::ZERO;
                m[ch] = if on { bi } else { INACTIVE };
                o[ch] = if on { bu } else { T::ZERO };
            }
        });
    }
}

/// A block's batch statistics and argmax map: computed once by the first of the four kernels
/// that need them (the forward, its backward, the input gradient and its backward) and shared
/// through the ops of one [`pair`].
pub(crate) struct Prep<T> {
    block: Block<T>,
    map: Vec<u8>,
}

/// [`Prep`] of either float type.
enum Prepared {
    F32(Prep<f32>),
    F64(Prep<f64>),
}

/// The float types of the kernels, with access to their [`Prepared`] variant.
trait Float: Elem + WithDType {
    fn get(p: &Prepared) -> Option<&Prep<Self>>;
    fn wrap(p: Prep<Self>) -> Prepared;
}
impl Float for f32 {
    fn get(p: &Prepared) -> Option<&Prep<Self>> {
        match p {
            Prepared::F32(v) => Some(v),
            Prepared::F64(_) => None,
        }
    }
    fn wrap(p: Prep<Self>) -> Prepared {
        Prepared::F32(p)
    }
}
impl Float for f64 {
    fn get(p: &Prepared) -> Option<&Prep<Self>> {
        match p {
            Prepared::F64(v) => Some(v),
            Prepared::F32(_) => None,
        }
    }
    fn wrap(p: Prep<Self>) -> Prepared {
        Prepared::F64(p)
    }
}

/// The [`Prep`] shared by one pair of ops (filled on first use).
#[derive(Default)]
struct Shared(OnceLock<Prepared>);

impl Shared {
    /// The preparation for `y`, `params` (computed now if this is the first use; with the
    /// pooled output when computed here).
    fn prep<T: Float>(&self, y: &[T], params: &[T], d: Dims) -> Result<(&Prep<T>, Option<Vec<T>>)> {
        let mut pooled = None;
        let p = self.0.get_or_init(|| {
            let block = Block::new(y, params, d);
            let (map, out) = block.argmax(y);
            pooled = Some(out);
            T::wrap(Prep { block, map })
        });
        match T::get(p) {
            Some(p) if p.map.len() == d.b * (d.h / 2) * (d.w / 2) * d.c => Ok((p, pooled)),
            _ => candle_core::bail!("fused duq op used with a different tensor than its pair's"),
        }
    }
}

/// What the input-gradient kernels read: the pooled gradient, the convolution output and the
/// block's preparation.
#[derive(Clone, Copy)]
struct VjpIn<'a, T> {
    d: Dims,
    gp: &'a [T],
    y: &'a [T],
    map: &'a [u8],
    mu: &'a [T],
}

impl<'a, T: Elem> VjpIn<'a, T> {
    /// Pooled pixel `p`'s argmax codes and pooled gradient.
    #[inline(always)]
    fn window(&self, p: usize) -> (&'a [u8], &'a [T]) {
        let c = self.d.c;
        (&self.map[p * c..][..c], &self.gp[p * c..][..c])
    }
    /// Row `r` of `v (N, c)`.
    #[inline(always)]
    fn row<'b>(&self, v: &'b [T], r: usize) -> &'b [T] {
        &v[r * self.d.c..][..self.d.c]
    }
}

/// [`vjp_k`]'s sums: `Q1 = sum q`, `Q2 / s = sum q (y - mu)`.
struct VjpSums<'a, T>(VjpIn<'a, T>);

impl<T: Elem> Half for VjpSums<'_, T> {
    type A = ();
    type B = ();
    type Out = [Vec<f64>; 2];
    #[inline(always)]
    fn run<S: pulp::Simd>(&self, imgs: Range<usize>, _: &mut [()], _: &mut [()]) -> Self::Out {
        let v = &self.0;
        let (c, mu) = (v.d.c, &v.mu[..v.d.c]);
        let mut sums = Partials::<T, 2>::new(c);
        v.d.windows(imgs, |p, rows| {
            let (m, g) = v.window(p);
            let ys = rows.map(|r| &v.row(v.y, r)[..c]);
            let [a1, a2] = sums.next();
            let (a1, a2, m, g) = (&mut a1[..c], &mut a2[..c], &m[..c], &g[..c]);
            let [y0, y1, y2, y3] = ys;
            for ch in 0..c {
                let q = if m[ch] != INACTIVE { g[ch] } else { T::ZERO };
                a1[ch] += q;
                a2[ch] += q * (pick(m[ch], [y0[ch], y1[ch], y2[ch], y3[ch]]) - mu[ch]);
            }
        });
        sums.finish()
    }
}

/// [`vjp_k`]'s output: `gy = (y - mu) sk1 + k0 + sg q`.
struct VjpWrite<'a, T> {
    v: VjpIn<'a, T>,
    sk1: &'a [T],
    k0: &'a [T],
    sg: &'a [T],
}

impl<T: Elem> Half for VjpWrite<'_, T> {
    type A = T;
    type B = T;
    type Out = ();
    #[inline(always)]
    fn run<S: pulp::Simd>(&self, imgs: Range<usize>, gy: &mut [T], _: &mut [T]) {
        let v = &self.v;
        let c = v.d.c;
        let (mu, sk1, k0, sg) = (&v.mu[..c], &self.sk1[..c], &self.k0[..c], &self.sg[..c]);
        let at = imgs.start * v.d.image_rows();
        // Window by window, so the routed q lands on rows still in cache.
        v.d.windows(imgs.clone(), |p, rows| {
            let (m, g) = v.window(p);
            let (m, g) = (&m[..c], &g[..c]);
            for (j, &r) in rows.iter().enumerate() {
                let (o, yr) = (&mut gy[(r - at) * c..][..c], v.row(v.y, r));
                let routed = Routed {
                    m,
                    j: j as u8,
                    k: sg,
                    g,
                };
                write_row(o, yr, [mu, sk1, k0], None, Some(routed));
            }
        });
        v.d.uncovered(imgs, |r| {
            let (o, yr) = (&mut gy[(r - at) * c..][..c], v.row(v.y, r));
            write_row(o, yr, [mu, sk1, k0], None, None);
        });
    }
}

/// The op's vector-Jacobian product for a pooled gradient `gp`: `(gy (N, c), dgamma, dbeta)`.
fn vjp_k<T: Elem>(gp: &[T], y: &[T], prep: &Prep<T>, d: Dims) -> (Vec<T>, Vec<f64>, Vec<f64>) {
    let c = d.c;
    let bl = &prep.block;
    let v = VjpIn {
        d,
        gp,
        y,
        map: &prep.map,
        mu: &bl.mu_t,
    };
    // Q1 = sum q, Q2 = sum q x_hat = s sum q (y - mu).
    let [q1, mut q2] = split_sum(&d, &VjpSums(v));
    q2.iter_mut().zip(&bl.s).for_each(|(v, s)| *v *= s);
    let n = d.rows().max(1) as f64;
    // gy = s gamma (q - Q1/N - x_hat Q2/N): the dense part plus the routed q.
    let k0: Vec<T> = (0..c)
        .map(|ch| T::from_f64(-bl.s[ch] * bl.gamma[ch] * q1[ch] / n))
        .collect();
    // x_hat k1 + k0 = (y - mu) (s k1) + k0.
    let sk1: Vec<T> = (0..c)
        .map(|ch| T::from_f64(-bl.s[ch] * bl.s[ch] * bl.gamma[ch] * q2[ch] / n))
        .collect();
    let sg: Vec<T> = (0..c)
        .map(|ch| T::from_f64(bl.s[ch] * bl.gamma[ch]))
        .collect();
    let write = VjpWrite {
        v,
        sk1: &sk1,
        k0: &k0,
        sg: &sg,
    };
    let (gy, _, _) = split_run_filled(&d, &write, d.image_rows() * c, 0);
    (gy, q2, q1)
}

/// [`vjp_bwd_k`]'s sums: sparse over the routed q, `Q1 = sum q`, `Q2 / s = sum q (y - mu)`,
/// `SGq = sum gbar q`; dense, `R1 = sum gbar`, `R2 / s = sum gbar (y - mu)`, in one pass.
struct BwdSums<'a, T> {
    v: VjpIn<'a, T>,
    gbar: &'a [T],
}

impl<T: Elem> Half for BwdSums<'_, T> {
    type A = ();
    type B = ();
    type Out = [Vec<f64>; 5];
    #[inline(always)]
    fn run<S: pulp::Simd>(&self, imgs: Range<usize>, _: &mut [()], _: &mut [()]) -> Self::Out {
        let (v, gbar) = (&self.v, self.gbar);
        let (c, mu) = (v.d.c, &v.mu[..v.d.c]);
        // One pass: the window's four rows for the dense sums, its argmax for the sparse ones.
        let mut sums = Partials::<T, 5>::new(c);
        let dense = |a1: &mut [T], a2: &mut [T], gr: &[T], yr: &[T]| {
            let (a1, a2, gr, yr) = (&mut a1[..c], &mut a2[..c], &gr[..c], &yr[..c]);
            for ch in 0..c {
                a1[ch] += gr[ch];
                a2[ch] += gr[ch] * (yr[ch] - mu[ch]);
            }
        };
        v.d.windows(imgs.clone(), |p, rows| {
            let (m, g) = v.window(p);
            let ys = rows.map(|r| &v.row(v.y, r)[..c]);
            let gs = rows.map(|r| &v.row(gbar, r)[..c]);
            let [a1, a2, a3, a4, a5] = sums.next();
            for (&gr, &yr) in gs.iter().zip(&ys) {
                dense(a4, a5, gr, yr);
            }
            let (a1, a2, a3, m, g) = (&mut a1[..c], &mut a2[..c], &mut a3[..c], &m[..c], &g[..c]);
            let ([y0, y1, y2, y3], [g0, g1, g2, g3]) = (ys, gs);
            for ch in 0..c {
                let q = if m[ch] != INACTIVE { g[ch] } else { T::ZERO };
                a1[ch] += q;
                a2[ch] += q * (pick(m[ch], [y0[ch], y1[ch], y2[ch], y3[ch]]) - mu[ch]);
                a3[ch] += q * pick(m[ch], [g0[ch], g1[ch], g2[ch], g3[ch]]);
            }
        });
        v.d.uncovered(imgs, |r| {
            let [.., a4, a5] = sums.next();
            dense(a4, a5, v.row(gbar, r), v.row(v.y, r));
        });
        sums.finish()
    }
}

/// [`vjp_bwd_k`]'s outputs: `d y` (dense `kg gbar + kx (y - mu) + k0`, plus `ksparse q` at the
/// active argmaxes) and `d gp = gamma a_bar` at the active argmaxes.
struct BwdWrite<'a, T> {
    v: VjpIn<'a, T>,
    gbar: &'a [T],
    /// Per channel: `kg, kx, k0, ksparse, mean(h), mean(h x_hat), s, gamma`.
    k: [&'a [T]; 8],
}

impl<T: Elem> Half for BwdWrite<'_, T> {
    type A = T;
    type B = T;
    type Out = ();
    #[inline(always)]
    fn run<S: pulp::Simd>(&self, imgs: Range<usize>, dy: &mut [T], dgp: &mut [T]) {
        let (v, gbar) = (&self.v, self.gbar);
        let c = v.d.c;
        let mu = &v.mu[..c];
        let [kg, kx, k0, ksparse, mh, mhx, s_t, gamma] = self.k.map(|k| &k[..c]);
        let (at, pat) = (
            imgs.start * v.d.image_rows(),
            imgs.start * v.d.image_pooled(),
        );
        // Window by window, so the sparse terms land on rows still in cache.
        v.d.windows(imgs.clone(), |p, rows| {
            let (m, g) = v.window(p);
            let (m, g) = (&m[..c], &g[..c]);
            for (j, &r) in rows.iter().enumerate() {
                let (o, gr, yr) = (&mut dy[(r - at) * c..][..c], v.row(gbar, r), v.row(v.y, r));
                write_row(
                    o,
                    yr,
                    [mu, kx, k0],
                    Some((gr, kg)),
                    Some(Routed {
                        m,
                        j: j as u8,
                        k: ksparse,
                        g,
                    }),
                );
            }
            let ys = rows.map(|r| v.row(v.y, r));
            let gs = rows.map(|r| v.row(gbar, r));
            let o = &mut dgp[(p - pat) * c..][..c];
            let n = o.len();
            let (ys, gs) = (ys.map(|r| &r[..n]), gs.map(|r| &r[..n]));
            let (m, mu, s_t, mh, mhx, gamma) = (
                &m[..n],
                &mu[..n],
                &s_t[..n],
                &mh[..n],
                &mhx[..n],
                &gamma[..n],
            );
            let ([y0, y1, y2, y3], [g0, g1, g2, g3]) = (ys, gs);
            for ch in 0..n {
                let xh = (pick(m[ch], [y0[ch], y1[ch], y2[ch], y3[ch]]) - mu[ch]) * s_t[ch];
                let gb = pick(m[ch], [g0[ch], g1[ch], g2[ch], g3[ch]]);
                let a_bar = s_t[ch] * gb - mh[ch] - xh * mhx[ch];
                o[ch] = if m[ch] != INACTIVE {
                    gamma[ch] * a_bar
                } else {
                    T::ZERO
                };
            }
        });
        v.d.uncovered(imgs, |r| {
            let (o, gr, yr) = (&mut dy[(r - at) * c..][..c], v.row(gbar, r), v.row(v.y, r));
            write_row(o, yr, [mu, kx, k0], Some((gr, kg)), None);
        });
    }
}

/// The backward of [`vjp_k`] for an adjoint `gbar (N, c)` of `gy`:
/// `(d gp (P, c), d y (N, c), d gamma)` (the mask and argmax are piecewise constant, so `beta`
/// gets none).
fn vjp_bwd_k<T: Elem>(
    gbar: &[T],
    gp: &[T],
    y: &[T],
    prep: &Prep<T>,
    d: Dims,
) -> (Vec<T>, Vec<T>, Vec<f64>) {
    let c = d.c;
    let bl = &prep.block;
    let n = d.rows().max(1) as f64;
    let v = VjpIn {
        d,
        gp,
        y,
        map: &prep.map,
        mu: &bl.mu_t,
    };
    let [q1, mut q2, sgq, r1, mut r2] = split_sum(&d, &BwdSums { v, gbar });
    for ((a, b), s) in q2.iter_mut().zip(r2.iter_mut()).zip(&bl.s) {
        *a *= s;
        *b *= s;
    }
    // Per channel (see the module notes; h = s gbar, a = gamma q):
    //   mean(h) = s R1 / N, mean(h x_hat) = s R2 / N, m2 = mean(a x_hat) = gamma Q2 / N,
    //   s_bar = gamma (SGq - Q1 R1 / N - Q2 R2 / N)   (sum gbar gy / s),
    //   a_bar = h - mean(h) - x_hat mean(h x_hat)      -> dgamma = sum a_bar q, d gp = gamma a_bar,
    //   x_hat_bar = -h m2 - a mean(h x_hat),
    //   d y = s (x_hat_bar - mean(x_hat_bar) - x_hat mean(x_hat_bar x_hat)) - s_bar s^2 x_hat / N.
    let mut dgamma = vec![0f64; c];
    // kg, kx, k0, ksparse, mean(h), mean(h x_hat), s, gamma.
    let mut k: [Vec<T>; 8] = std::array::from_fn(|_| vec![T::ZERO; c]);
    for ch in 0..c {
        let (s, g) = (bl.s[ch], bl.gamma[ch]);
        let (h1, h2) = (s * r1[ch], s * r2[ch]);
        let (mh, mhx) = (h1 / n, h2 / n);
        let m2 = g * q2[ch] / n;
        let s_bar = g * (sgq[ch] - q1[ch] * r1[ch] / n - q2[ch] * r2[ch] / n);
        dgamma[ch] = s * sgq[ch] - mh * q1[ch] - mhx * q2[ch];
        let mean_xb = (-m2 * h1 - g * mhx * q1[ch]) / n;
        let mean_xbx = (-m2 * h2 - g * mhx * q2[ch]) / n;
        let vals = [
            // Dense part of d y: kg gbar + k0 + kx (y - mu), (y - mu) = x_hat / s.
            -s * s * m2,
            (-s * mean_xbx - s_bar * s * s / n) * s,
            -s * mean_xb,
            // Sparse part at active argmaxes: s (-gamma q mean(h x_hat)).
            -s * g * mhx,
            mh,
            mhx,
            s,
            g,
        ];
        for (kv, val) in k.iter_mut().zip(vals) {
            kv[ch] = T::from_f64(val);
        }
    }
    let write = BwdWrite {
        v,
        gbar,
        k: std::array::from_fn(|i| &k[i][..]),
    };
    let per = (d.image_rows() * c, d.image_pooled() * c);
    let (dy, dgp, _) = split_run_filled(&d, &write, per.0, per.1);
    (dgp, dy, dgamma)
}

/// Training-mode batch norm + affine + ReLU + 2x2 max-pool: `(y (b, h, w, c), params (3, c))`
/// -> `(b, h/2, w/2, c)` (floor, first maximum wins, like PyTorch).
pub struct BnReluPool(Arc<Shared>);

/// The vector-Jacobian product of [`BnReluPool`] with respect to `y`, as a differentiable op:
/// `(gp (b, h/2, w/2, c), y (b, h, w, c), params (3, c))` -> `gy (b, h, w, c)`.
pub struct BnReluPoolGrad(Arc<Shared>);

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
    fn vjp(
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
        match y.dtype() {
            DType::F32 => run::<f32>(&self.0, ts, extra.as_ref(), d),
            DType::F64 => run::<f64>(&self.0, ts, extra.as_ref(), d),
            dt => candle_core::bail!("{} supports f32 and f64, got {dt:?}", self.name()),
        }
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
    crate::kernels::join(|| add(lo, &first[..half]), || add(hi, &first[half..]));
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
        crate::kernels::entry(self.name())?;
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
        let out = match s1.dtype() {
            DType::F32 => CpuStorage::F32(run::<f32>(
                &self.0,
                storage_slice(s1, l1, n)?,
                storage_slice(s2, l2, n)?,
                d,
            )?),
            DType::F64 => CpuStorage::F64(run::<f64>(
                &self.0,
                storage_slice(s1, l1, n)?,
                storage_slice(s2, l2, n)?,
                d,
            )?),
            dt => candle_core::bail!("{n} supports f32 and f64, got {dt:?}"),
        };
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
        crate::kernels::entry(self.name())?;
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
        let out = match s2.dtype() {
            DType::F32 => CpuStorage::F32(run::<f32>(
                &self.0,
                storage_slice(s1, l1, n)?,
                storage_slice(s2, l2, n)?,
                storage_slice(s3, l3, n)?,
                d,
            )?),
            DType::F64 => CpuStorage::F64(run::<f64>(
                &self.0,
                storage_slice(s1, l1, n)?,
                storage_slice(s2, l2, n)?,
                storage_slice(s3, l3, n)?,
                d,
            )?),
            dt => candle_core::bail!("{n} supports f32 and f64, got {dt:?}"),
        };
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
        let (dgp, dy, dparams) = match y.dtype() {
            DType::F32 => run::<f32>(&self.0, &grad, gp, y, params, d)?,
            DType::F64 => run::<f64>(&self.0, &grad, gp, y, params, d)?,
            dt => candle_core::bail!("{} supports f32 and f64, got {dt:?}", self.name()),
        };
        Ok((Some(dgp), Some(dy), Some(dparams)))
    }
}

/// One block's backward from `grad (b, oh/2, ow/2, cout)`: batch norm/ReLU/pool's (with
/// `extra`, another consumer's `dL/dy`, added first; see [`BnReluPool::vjp`]) then the
/// convolution's, for the block's input `x`, convolution output `y` and parameters:
/// `(dL/dx, dL/dwmat, dL/dparams)`, `dL/dx` when `x` is in the graph or `want_x`.
fn block_backward(
    (conv, bn): (&crate::kernels::conv::Conv, &BnReluPool),
    (x, y): (&Tensor, &Tensor),
    (wmat, params): (&Tensor, &Tensor),
    grad: &Tensor,
    extra: Option<&Tensor>,
    want_x: bool,
) -> Result<(Option<Tensor>, Tensor, Tensor)> {
    let (dy, dparams) = bn.vjp(y, params, grad, extra)?;
    let (dx, dw) = crate::kernels::conv::conv_backward(conv, x, wmat, &dy, want_x)?;
    Ok((dx, dw, dparams))
}

/// Where one block's parameters lie in a packed parameter vector: `wmat (cout, k*k*cin)`
/// flattened, then `params (3, cout)`, from offset `at`. The fused ops below take their
/// parameters packed (an op has at most three inputs).
#[derive(Debug, Clone, Copy)]
struct Packed {
    at: usize,
    /// `wmat`'s `(cout, k*k*cin)`.
    wmat: (usize, usize),
}

impl Packed {
    fn len(&self) -> usize {
        let (cout, kc) = self.wmat;
        cout * kc + 3 * cout
    }

    /// The layouts of `wmat` and `params` in a storage whose packed vector starts at `base`.
    fn layouts(&self, base: usize) -> (Layout, Layout) {
        let at = base + self.at;
        (
            Layout::contiguous_with_offset(self.wmat, at),
            Layout::contiguous_with_offset((3, self.wmat.0), at + self.wmat.0 * self.wmat.1),
        )
    }

    /// `wmat` and `params` as views of a packed tensor.
    fn tensors(&self, packed: &Tensor) -> Result<(Tensor, Tensor)> {
        let w_len = self.wmat.0 * self.wmat.1;
        Ok((
            packed.narrow(0, self.at, w_len)?.reshape(self.wmat)?,
            packed
                .narrow(0, self.at + w_len, 3 * self.wmat.0)?
                .reshape((3, self.wmat.0))?,
        ))
    }
}

/// The start offset of a packed parameter vector of `len` elements with layout `l`, after
/// checking its shape.
fn packed_start(l: &Layout, len: usize, op: &str) -> Result<usize> {
    if !l.is_contiguous() || l.dims() != [len] {
        candle_core::bail!(
            "{op}: packed parameters must be a contiguous ({len},), got {:?}",
            l.dims()
        );
    }
    Ok(l.start_offset())
}

/// Consecutive training-mode blocks in one op, each the convolution then [`BnReluPool`]:
/// `(x (b, h, w, cin), packed)` -> the last block's pooled output, `packed` being every
/// block's `wmat (cout, k*k*cin)` and `params (3, cout)` flattened, block after block. For a loss that takes no input gradient (DUQ without a
/// penalty): the convolution outputs and the pooled outputs between blocks stay inside the op
/// rather than becoming nodes of candle's graph, whose backward zero-fills a buffer of each
/// node's size and adds its gradient into it (26 MB for the first convolution output of the
/// Fashion-MNIST model, 6 MB for its pooled output). The backward is the blocks' backwards in
/// reverse. The input-gradient ops of the blocks' [`pair`]s cannot be used with it (there is no
/// `y` in the graph to differentiate through); their `batch_moments` can.
pub struct BlockChain {
    blocks: Vec<ChainBlock>,
    /// Per block, from the forward: its input (`None` for the first, the op's own input) and
    /// its convolution output `y`.
    saved: std::sync::Mutex<Vec<(Option<Tensor>, Tensor)>>,
}

/// One block of a [`BlockChain`].
pub struct ChainBlock {
    /// The convolution.
    pub conv: crate::kernels::conv::Conv,
    /// The forward op of the block's [`pair`].
    pub bn: BnReluPool,
    /// `wmat`'s `(cout, k*k*cin)`.
    pub wmat_dims: (usize, usize),
}

impl BlockChain {
    /// The op over `blocks`, in order.
    pub fn new(blocks: Vec<ChainBlock>) -> Self {
        Self {
            blocks,
            saved: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Each block's place in the packed parameters, and their total length.
    fn packed(&self) -> (Vec<Packed>, usize) {
        let mut at = 0;
        let places = self
            .blocks
            .iter()
            .map(|b| {
                let p = Packed {
                    at,
                    wmat: b.wmat_dims,
                };
                at += p.len();
                p
            })
            .collect();
        (places, at)
    }
}

/// Stores what an op's forward keeps for its backward.
fn keep<T>(slot: &std::sync::Mutex<T>, value: T, op: &str) -> Result<()> {
    *slot
        .lock()
        .map_err(|_| candle_core::Error::Msg(format!("{op}: poisoned lock")))? = value;
    Ok(())
}

/// A storage and shape from one of the ops' `cpu_fwd` as a tensor outside the graph.
fn detached(storage: CpuStorage, shape: Shape) -> Tensor {
    Tensor::from_storage(
        candle_core::Storage::Cpu(storage),
        shape,
        candle_core::op::BackpropOp::none(),
        false,
    )
}

impl CustomOp2 for BlockChain {
    fn name(&self) -> &'static str {
        "alkit-duq-block-chain"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        crate::kernels::entry(self.name())?;
        let (places, len) = self.packed();
        let base = packed_start(l2, len, self.name())?;
        let mut saved = Vec::with_capacity(self.blocks.len());
        // The current block's input: the op's own first, then the previous block's output.
        let mut cur: Option<(CpuStorage, Shape)> = None;
        for (blk, place) in self.blocks.iter().zip(places) {
            let (lw, lp) = place.layouts(base);
            let (y, y_shape) = match &cur {
                None => blk.conv.cpu_fwd(s1, l1, s2, &lw)?,
                Some((x, shape)) => blk.conv.cpu_fwd(x, &Layout::contiguous(shape), s2, &lw)?,
            };
            let pooled = blk.bn.cpu_fwd(&y, &Layout::contiguous(&y_shape), s2, &lp)?;
            let input = cur.take().map(|(x, shape)| detached(x, shape));
            saved.push((input, detached(y, y_shape)));
            cur = Some(pooled);
        }
        keep(&self.saved, saved, self.name())?;
        cur.ok_or_else(|| candle_core::Error::Msg(format!("{}: no blocks", self.name())))
    }

    fn bwd(
        &self,
        x: &Tensor,
        packed: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let saved = self.saved.lock().map(|s| s.clone()).unwrap_or_default();
        if saved.len() != self.blocks.len() {
            candle_core::bail!("{}: backward before forward", self.name());
        }
        let (places, _) = self.packed();
        let packed = packed.detach();
        let mut g = grad.clone();
        let mut parts = vec![None; self.blocks.len()];
        let mut dx = None;
        for (i, (blk, place)) in self.blocks.iter().zip(places).enumerate().rev() {
            let (wmat, params) = place.tensors(&packed)?;
            let (input, y) = &saved[i];
            let missing = || candle_core::Error::Msg(format!("{}: no gradient", self.name()));
            // An inner block's input is the previous block's output: its gradient is needed.
            let x_i = input.as_ref().unwrap_or(x);
            let (d_in, dw, dparams) = block_backward(
                (&blk.conv, &blk.bn),
                (x_i, y),
                (&wmat, &params),
                &g,
                None,
                i > 0,
            )?;
            parts[i] = Some((dw, dparams));
            if i > 0 {
                g = d_in.ok_or_else(missing)?;
            } else {
                dx = d_in;
            }
        }
        let flat = parts
            .into_iter()
            .flatten()
            .flat_map(|(dw, dp)| [dw.flatten_all(), dp.flatten_all()])
            .collect::<Result<Vec<_>>>()?;
        Ok((dx, Some(Tensor::cat(&flat, 0)?)))
    }
}

/// What a [`TrainBlock`] and its [`BlockInputGrad`]s share (see [`BlockLink`]).
#[derive(Default)]
struct Link {
    y: std::sync::Mutex<Option<Tensor>>,
    dy: std::sync::Mutex<Option<Tensor>>,
}

impl Link {
    fn y(&self, op: &str) -> Result<Tensor> {
        self.y
            .lock()
            .ok()
            .and_then(|y| y.clone())
            .ok_or_else(|| candle_core::Error::Msg(format!("{op}: no forward pass yet")))
    }

    /// Adds an input-gradient op's share of `dL/dy` to what the forward's backward will take.
    fn hand_over(&self, dy: Tensor, op: &str) -> Result<()> {
        let mut slot = self
            .dy
            .lock()
            .map_err(|_| candle_core::Error::Msg(format!("{op}: poisoned lock")))?;
        // A second share (the input gradient taken twice) is summed as candle sums a node's
        // gradients, `(0 + a) + b`, with its own ops: a rare path.
        *slot = Some(match slot.take() {
            Some(prev) => prev.zeros_like()?.add(&prev)?.add(&dy)?,
            None => dy,
        });
        Ok(())
    }

    fn take_dy(&self) -> Option<Tensor> {
        self.dy.lock().ok().and_then(|mut d| d.take())
    }
}

/// One training-mode block in one op, the convolution then [`BnReluPool`]:
/// `(x (b, h, w, cin), packed)` -> pooled `(b, oh/2, ow/2, cout)`, `packed` being the block's
/// `wmat (cout, k*k*cin)` and `params (3, cout)` flattened, as for [`BlockChain`]. The
/// convolution output stays inside the op (see [`BlockLink`]); the block's input-gradient ops
/// come from the [`BlockLink`] that [`train_block`] returns with it.
pub struct TrainBlock {
    conv: crate::kernels::conv::Conv,
    bn: BnReluPool,
    place: Packed,
    link: Arc<Link>,
}

/// The handle a forward keeps of its [`TrainBlock`]: the batch statistics, and input-gradient
/// ops that differentiate through the block's convolution output `y (b, oh, ow, cout)`.
///
/// Why: `y` stays out of candle's graph. As a graph node (26 MB for the first block of the
/// Fashion-MNIST model at batch 128) it cost, in every backward with a gradient penalty, a
/// zero-filled buffer and two single-threaded adds of its size. Instead each input-gradient
/// op's backward hands its share of `dL/dy` to the [`TrainBlock`]'s backward: candle reaches
/// those ops first (they depend on the block's output through the head), and the share is
/// added in the order candle would have added it (`(0 + a) + b`), so every gradient is
/// bit-identical to the graph with `y` as a node (a test checks it).
pub struct BlockLink {
    grad: BnReluPoolGrad,
    place: Packed,
    link: Arc<Link>,
}

/// A training-mode block op for `conv` with a weight matrix of `wmat_dims`, and its link.
pub fn train_block(
    conv: crate::kernels::conv::Conv,
    wmat_dims: (usize, usize),
) -> (TrainBlock, BlockLink) {
    let (bn, grad) = pair();
    let place = Packed {
        at: 0,
        wmat: wmat_dims,
    };
    let link = Arc::new(Link::default());
    (
        TrainBlock {
            conv,
            bn,
            place,
            link: link.clone(),
        },
        BlockLink { grad, place, link },
    )
}

impl BlockLink {
    /// The batch mean and biased variance of the forward (see
    /// [`BnReluPoolGrad::batch_moments`]).
    pub fn batch_moments(&self, like: &Tensor) -> Result<Option<(Tensor, Tensor)>> {
        self.grad.batch_moments(like)
    }

    /// An op for the block's share of the input gradient, through the transposed convolution
    /// `conv_t` (one per use; each adds its share of `dL/dy` for the forward's backward).
    pub fn input_grad(&self, conv_t: crate::kernels::conv::ConvT) -> BlockInputGrad {
        BlockInputGrad {
            conv_t,
            grad: BnReluPoolGrad(self.grad.0.clone()),
            place: self.place,
            link: self.link.clone(),
            gy: std::sync::Mutex::new(None),
        }
    }
}

impl CustomOp2 for TrainBlock {
    fn name(&self) -> &'static str {
        "alkit-duq-train-block"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        crate::kernels::entry(self.name())?;
        let base = packed_start(l2, self.place.len(), self.name())?;
        let (lw, lp) = self.place.layouts(base);
        let (y, y_shape) = self.conv.cpu_fwd(s1, l1, s2, &lw)?;
        let pooled = self
            .bn
            .cpu_fwd(&y, &Layout::contiguous(&y_shape), s2, &lp)?;
        keep(&self.link.y, Some(detached(y, y_shape)), self.name())?;
        Ok(pooled)
    }

    fn bwd(
        &self,
        x: &Tensor,
        packed: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let y = self.link.y(self.name())?;
        let (wmat, params) = self.place.tensors(&packed.detach())?;
        // The input-gradient ops' share of `dL/dy` first, as candle would have added it.
        let shared = self.link.take_dy();
        let (dx, dw, dparams) = block_backward(
            (&self.conv, &self.bn),
            (x, &y),
            (&wmat, &params),
            grad,
            shared.as_ref(),
            false,
        )?;
        Ok((
            dx,
            Some(Tensor::cat(
                &[dw.flatten_all()?, dparams.flatten_all()?],
                0,
            )?),
        ))
    }
}

/// A block's share of the input gradient in one op: [`BnReluPoolGrad`], then the transposed
/// convolution: `(gp (b, oh/2, ow/2, cout), packed)` -> `gx (b, h, w, cin)`, `packed` as for
/// [`TrainBlock`], whose convolution output `y` it reads through their [`BlockLink`]. The
/// intermediate `gy (b, oh, ow, cout)` stays inside the op, as `y` does: as a node of candle's
/// graph, its gradient cost a zero-filled buffer and an add of its size in every backward. The
/// backward is the two ops' backwards in sequence; its gradient with respect to `y` goes to the
/// [`TrainBlock`]'s backward.
pub struct BlockInputGrad {
    conv_t: crate::kernels::conv::ConvT,
    grad: BnReluPoolGrad,
    /// Where `packed` holds the parameters.
    place: Packed,
    link: Arc<Link>,
    /// `gy`, kept from the forward for the backward.
    gy: std::sync::Mutex<Option<Tensor>>,
}

impl CustomOp2 for BlockInputGrad {
    fn name(&self) -> &'static str {
        "alkit-duq-block-input-grad"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        crate::kernels::entry(self.name())?;
        let base = packed_start(l2, self.place.len(), self.name())?;
        let (lw, lp) = self.place.layouts(base);
        let y = self.link.y(self.name())?;
        let (ys, yl) = y.storage_and_layout();
        let candle_core::Storage::Cpu(ys) = &*ys else {
            candle_core::bail!("{}: the convolution output is not on the CPU", self.name());
        };
        let (gy, shape) = self.grad.cpu_fwd(s1, l1, ys, yl, s2, &lp)?;
        let out = self
            .conv_t
            .cpu_fwd(&gy, &Layout::contiguous(&shape), s2, &lw)?;
        keep(&self.gy, Some(detached(gy, shape)), self.name())?;
        Ok(out)
    }

    fn bwd(
        &self,
        gp: &Tensor,
        packed: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let missing =
            || candle_core::Error::Msg(format!("{}: backward before forward", self.name()));
        let gy = self
            .gy
            .lock()
            .ok()
            .and_then(|g| g.clone())
            .ok_or_else(missing)?;
        let y = self.link.y(self.name())?;
        let (wmat, params) = self.place.tensors(&packed.detach())?;
        let (d_gy, d_wmat) = crate::kernels::conv::conv_t_backward(&self.conv_t, &gy, &wmat, grad)?;
        let (d_gp, d_y, d_params) = self.grad.bwd(gp, &y, &params, &gy, &d_gy)?;
        if let Some(d_y) = d_y {
            self.link.hand_over(d_y, self.name())?;
        }
        let d_params = match d_params {
            Some(d) => d,
            None => params.zeros_like()?,
        };
        let d_packed = Tensor::cat(&[d_wmat.flatten_all()?, d_params.flatten_all()?], 0)?;
        Ok((d_gp, Some(d_packed)))
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

    /// [`TrainBlock`] and [`BlockInputGrad`] keep the convolution output out of candle's graph
    /// and hand its gradient over by hand: the gradients of a loss through them must be, bit
    /// for bit in `f32`, those of the same computation with the convolution output as a node
    /// (the convolution, [`BnReluPool`], [`BnReluPoolGrad`] and the transposed convolution as
    /// separate ops), where candle adds the two shares itself. The pooled gradient depends on
    /// the pooled output, as the head makes it in the model, so candle reaches the
    /// input-gradient op first; the input gradient is taken twice, as a caller may.
    #[test]
    fn the_training_block_ops_give_the_gradients_of_the_graph_with_y_as_a_node_bit_for_bit(
    ) -> Result<()> {
        use crate::kernels::conv::{Conv, ConvT};
        let (b, h, w, cin, cout, k, pad) = (4, 9, 9, 3, 5, 3, 1);
        let f32_of = |t: Tensor| t.to_dtype(DType::F32);
        let x = Var::from_tensor(&f32_of(randn(&[b, h, w, cin], 11))?)?;
        let wmat = Var::from_tensor(&f32_of((randn(&[cout, k * k * cin], 12) * 0.3)?)?)?;
        let mut p = randn(&[3, cout], 13).to_vec2::<f64>()?;
        p[0][2] = -p[0][2].abs() - 0.5;
        let params = Var::from_tensor(&f32_of(Tensor::new(p, &Device::Cpu)?)?)?;
        let r = f32_of(randn(&[b, h / 2, w / 2, cout], 14))?;
        let r2 = f32_of(randn(&[b, h / 2, w / 2, cout], 15))?;
        let r3 = f32_of(randn(&[b, h, w, cin], 16))?;
        let (conv, conv_t) = (Conv { k, pad }, ConvT { k, pad });
        let loss = |pooled: &Tensor, gxs: &[Tensor]| -> Result<Tensor> {
            let mut l = (pooled * &r2)?.sum_all()?;
            for gx in gxs {
                l = (l + (gx * &r3)?.sum_all()?.sqr()?)?;
            }
            Ok(l)
        };

        // Reference: `y` and `gy` nodes of the graph.
        let y = x.as_tensor().apply_op2(wmat.as_tensor(), conv)?;
        let (bn, grad) = pair();
        let pooled = y.apply_op2(params.as_tensor(), bn)?;
        let gp = (&pooled * &r)?;
        let gxs = (0..2)
            .map(|_| {
                gp.apply_op3(&y, params.as_tensor(), BnReluPoolGrad(grad.0.clone()))?
                    .apply_op2(wmat.as_tensor(), conv_t)
            })
            .collect::<Result<Vec<_>>>()?;
        let reference = loss(&pooled, &gxs)?.backward()?;

        // The fused ops on the packed parameters.
        let (op, link) = train_block(conv, (cout, k * k * cin));
        let packed = Tensor::cat(
            &[
                wmat.as_tensor().flatten_all()?,
                params.as_tensor().flatten_all()?,
            ],
            0,
        )?;
        let pooled_f = x.as_tensor().apply_op2(&packed, op)?;
        let gp_f = (&pooled_f * &r)?;
        let gxs_f = (0..2)
            .map(|_| gp_f.apply_op2(&packed, link.input_grad(conv_t)))
            .collect::<Result<Vec<_>>>()?;
        let fused = loss(&pooled_f, &gxs_f)?.backward()?;

        let same_bits = |a: &Tensor, b: &Tensor, what: &str| -> Result<()> {
            let (a, b) = (
                a.flatten_all()?.to_vec1::<f32>()?,
                b.flatten_all()?.to_vec1::<f32>()?,
            );
            assert_eq!(a.len(), b.len(), "{what}: sizes");
            let differ: Vec<usize> = (0..a.len())
                .filter(|&i| a[i].to_bits() != b[i].to_bits())
                .collect();
            assert!(
                differ.is_empty(),
                "{what}: {} of {} entries differ, the first at {}: {} vs {}",
                differ.len(),
                a.len(),
                differ[0],
                a[differ[0]],
                b[differ[0]]
            );
            Ok(())
        };
        same_bits(&pooled_f, &pooled, "pooled output")?;
        for (f, r) in gxs_f.iter().zip(&gxs) {
            same_bits(f, r, "input gradient")?;
        }
        for (name, v) in [
            ("x", x.as_tensor()),
            ("wmat", wmat.as_tensor()),
            ("params", params.as_tensor()),
        ] {
            let (f, r) = (fused.get(v).unwrap(), reference.get(v).unwrap());
            same_bits(f, r, &format!("gradient of {name}"))?;
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
