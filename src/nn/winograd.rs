//! Winograd F(2x2, 3x3) kernels for stride-1 3x3 convolutions on NHWC slices: the
//! convolution, its transpose (the input gradient) and its weight gradient, each as 16 gemms
//! in the transformed domain over a chunk of images. They compute what [`super::conv`]'s
//! im2col kernels compute (equal up to rounding) with 16 multiplies per 2x2 output tile and
//! channel pair instead of 36; the convolutions are where a DUQ training step spends most of
//! its time. `conv` drives them (chunks, threads) and falls back to im2col where they do not
//! pay (a kernel other than 3x3, a layer with few channels).
//!
//! With `d` a 4x4 input tile, `g` a 3x3 kernel and `Y` the 2x2 output tile (Lavin & Gray 2016;
//! correlation, as in CNNs): `Y = A^T [(G g G^T) . (B^T d B)] A`, the elementwise product summed
//! over input channels. The transpose and the weight gradient are the adjoints of the same
//! formula: `gd = B [sum_co U . (A gY A^T)] B^T` (overlapping tiles add) and
//! `dg = G^T [sum_tiles (B^T d B) . (A gY A^T)] G`.
//!
//! Layouts within a chunk of images (`t` a tile: image, tile row, tile column; `xi` one of the
//! 16 transformed positions): transformed inputs `V (t, xi, cin)` and transformed output
//! gradients `gM (t, xi, cout)`, one contiguous block per tile that the gemms read with a row
//! stride; gemm results `(xi, t, c)`; transformed weights `U (xi, cin, cout)`. The weight matrix
//! is `conv`'s `wmat (cout, 9 cin)` in `(ki, kj, c)` column order.

use super::kernels::{gemm_strided, Elem};

/// Tiles per chunk: a chunk's transformed tensors stay within a few MB.
const TILES_PER_CHUNK: usize = 256;

/// Geometry of one stride-1 3x3 convolution as the transformed domain sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Wino {
    /// Input height, width and channels.
    pub h: usize,
    pub w: usize,
    pub cin: usize,
    /// Output height and width (`h + 2 pad - 2`) and channels.
    pub oh: usize,
    pub ow: usize,
    pub cout: usize,
    /// Zero padding on each side.
    pub pad: usize,
}

impl Wino {
    fn tw(&self) -> usize {
        self.ow.div_ceil(2)
    }
    /// Tiles per image.
    fn tiles(&self) -> usize {
        self.oh.div_ceil(2) * self.tw()
    }
    /// Images per chunk of a batch of `b`.
    pub fn chunk(&self, b: usize) -> usize {
        (TILES_PER_CHUNK / self.tiles().max(1)).clamp(1, b.max(1))
    }
    fn in_len(&self) -> usize {
        self.h * self.w * self.cin
    }
    fn out_len(&self) -> usize {
        self.oh * self.ow * self.cout
    }
    /// Tile `t` of a chunk as `(image within the chunk, tile row, tile column)`.
    fn tile(&self, t: usize) -> (usize, usize, usize) {
        let per = self.tiles();
        (t / per, (t % per) / self.tw(), t % self.tw())
    }
    /// Input pixel at offset `(r, q)` of tile `(ty, tx)`'s 4x4 window, if inside the image.
    fn in_pixel(&self, ty: usize, tx: usize, r: usize, q: usize) -> Option<usize> {
        let iy = (2 * ty + r).checked_sub(self.pad).filter(|&v| v < self.h)?;
        let ix = (2 * tx + q).checked_sub(self.pad).filter(|&v| v < self.w)?;
        Some(iy * self.w + ix)
    }
    /// Output pixel at offset `(r, s)` of tile `(ty, tx)`, if inside the output.
    fn out_pixel(&self, ty: usize, tx: usize, r: usize, s: usize) -> Option<usize> {
        let (oy, ox) = (2 * ty + r, 2 * tx + s);
        (oy < self.oh && ox < self.ow).then_some(oy * self.ow + ox)
    }
}

// The 1-D transforms; each 2-D one applies its 1-D form to the columns, then the rows.

/// `B^T a`.
#[inline(always)]
fn bt<T: Elem>([a0, a1, a2, a3]: [T; 4]) -> [T; 4] {
    [a0 - a2, a1 + a2, a2 - a1, a1 - a3]
}
/// `B a`, the adjoint of [`bt`].
#[inline(always)]
fn b<T: Elem>([a0, a1, a2, a3]: [T; 4]) -> [T; 4] {
    [a0, a1 - a2 + a3, a1 + a2 - a0, T::ZERO - a3]
}
/// `A^T m`.
#[inline(always)]
fn at<T: Elem>([m0, m1, m2, m3]: [T; 4]) -> [T; 2] {
    [m0 + m1 + m2, m1 - m2 - m3]
}
/// `A y`, the adjoint of [`at`].
#[inline(always)]
fn a<T: Elem>([y0, y1]: [T; 2]) -> [T; 4] {
    [y0, y0 + y1, y0 - y1, T::ZERO - y1]
}
/// `G g`.
#[inline(always)]
fn gk<T: Elem>([g0, g1, g2]: [T; 3]) -> [T; 4] {
    let h = T::from_f64(0.5);
    [g0, (g0 + g1 + g2) * h, (g0 - g1 + g2) * h, g2]
}
/// `G^T u`, the adjoint of [`gk`].
#[inline(always)]
fn gt<T: Elem>([u0, u1, u2, u3]: [T; 4]) -> [T; 3] {
    let h = T::from_f64(0.5);
    [u0 + (u1 + u2) * h, (u1 - u2) * h, (u1 + u2) * h + u3]
}

/// `f` applied to every column of `x`, then to every row: `F x F^T` for the linear map `F`
/// (the small weight transforms).
#[inline(always)]
fn two_d<T: Elem, const I: usize, const O: usize>(
    x: [[T; I]; I],
    f: impl Fn([T; I]) -> [T; O],
) -> [[T; O]; O] {
    let cols: [[T; O]; I] = std::array::from_fn(|q| f(std::array::from_fn(|r| x[r][q])));
    std::array::from_fn(|o| f(std::array::from_fn(|q| cols[q][o])))
}

/// `O` consecutive vectors of length `c` at the start of `block`.
#[inline(always)]
fn split<T, const O: usize>(block: &mut [T], c: usize) -> [&mut [T]; O] {
    let mut it = block.chunks_exact_mut(c);
    std::array::from_fn(|_| it.next().expect("block holds O vectors"))
}

/// One 1-D transform over channel vectors: `dst[o][k] = f(src[..][k])[o]` for `k < c`, `dst`
/// the `O` consecutive vectors at the start of `dst`. Every slice is cut to `c` first so the
/// loop runs without bounds checks and vectorises.
#[inline(always)]
fn pass<T: Elem, const I: usize, const O: usize>(
    src: [&[T]; I],
    dst: &mut [T],
    c: usize,
    f: impl Fn([T; I]) -> [T; O],
) {
    let src = src.map(|s| &s[..c]);
    let mut dst: [&mut [T]; O] = split(dst, c);
    for k in 0..c {
        let r = f(std::array::from_fn(|i| src[i][k]));
        for (d, v) in dst.iter_mut().zip(r) {
            d[k] = v;
        }
    }
}

/// The 2-D transform `F x F^T` of a tile of channel vectors: `src[r * I + q]` (row `r`, column
/// `q`) to `dst (O * O, c)`, through `tmp (I * O, c)` (column-major intermediate).
#[inline(always)]
fn tile_pass<T: Elem, const I: usize, const O: usize>(
    src: &[&[T]],
    tmp: &mut [T],
    dst: &mut [T],
    c: usize,
    f: impl Fn([T; I]) -> [T; O] + Copy,
) {
    // Columns: tmp[q * O + o] = f(column q)[o].
    for q in 0..I {
        pass(
            std::array::from_fn(|r| src[r * I + q]),
            &mut tmp[q * O * c..(q + 1) * O * c],
            c,
            f,
        );
    }
    // Rows: dst[o * O + p] = f(row o of tmp)[p].
    for o in 0..O {
        let row: [&[T]; I] = std::array::from_fn(|q| &tmp[(q * O + o) * c..(q * O + o + 1) * c]);
        pass(row, &mut dst[o * O * c..(o + 1) * O * c], c, f);
    }
}

/// `U (16, cin, cout)` from `wmat (cout, 9 cin)`.
pub(crate) fn weights<T: Elem>(wmat: &[T], g: &Wino) -> Vec<T> {
    let (cin, cout) = (g.cin, g.cout);
    let mut u = vec![T::ZERO; 16 * cin * cout];
    for co in 0..cout {
        for c in 0..cin {
            let k: [[T; 3]; 3] = std::array::from_fn(|i| {
                std::array::from_fn(|j| wmat[co * 9 * cin + (i * 3 + j) * cin + c])
            });
            let t = two_d(k, gk);
            for (p, &v) in t.iter().flatten().enumerate() {
                u[(p * cin + c) * cout + co] = v;
            }
        }
    }
    u
}

/// `dW (cout, 9 cin)` from the transformed-domain gradient `dU (16, cin, cout)`: the adjoint
/// of [`weights`].
pub(crate) fn weights_adjoint<T: Elem>(du: &[T], g: &Wino) -> Vec<T> {
    let (cin, cout) = (g.cin, g.cout);
    let mut dw = vec![T::ZERO; cout * 9 * cin];
    for co in 0..cout {
        for c in 0..cin {
            let m: [[T; 4]; 4] = std::array::from_fn(|a| {
                std::array::from_fn(|b| du[((a * 4 + b) * cin + c) * cout + co])
            });
            let k = two_d(m, gt);
            for (t, &v) in k.iter().flatten().enumerate() {
                dw[co * 9 * cin + t * cin + c] = v;
            }
        }
    }
    dw
}

/// Per-thread buffers for one chunk.
pub(crate) struct Buffers<T> {
    /// `V (t, 16, cin)`.
    v: Vec<T>,
    /// `gM (t, 16, cout)`.
    gm: Vec<T>,
    /// A gemm result `(16, t, max(cin, cout))`.
    out: Vec<T>,
    zeros: Vec<T>,
    /// Per-tile intermediates `(16, max(cin, cout))` each.
    tmp: Vec<T>,
    scratch: Vec<T>,
}

impl<T: Elem> Buffers<T> {
    /// Buffers for chunks of up to `n` images.
    pub fn new(g: &Wino, n: usize) -> Self {
        let t = n * g.tiles();
        Self {
            v: Vec::with_capacity(t * 16 * g.cin),
            gm: Vec::with_capacity(t * 16 * g.cout),
            out: Vec::with_capacity(t * 16 * g.cin.max(g.cout)),
            zeros: vec![T::ZERO; g.cin.max(g.cout)],
            tmp: vec![T::ZERO; 16 * g.cin.max(g.cout)],
            scratch: vec![T::ZERO; 16 * g.cin.max(g.cout)],
        }
    }
}

/// The first `len` elements of `buf`, grown (never shrunk, never cleared: every caller
/// overwrites them) as needed.
#[inline(always)]
fn sized<T: Elem>(buf: &mut Vec<T>, len: usize) -> &mut [T] {
    if buf.len() < len {
        buf.resize(len, T::ZERO);
    }
    &mut buf[..len]
}

/// The transformed tiles `(t, 16, c)` of `n` images `data (n, per)` with `c` channels: tile
/// `t`'s `I x I` pixels (`pixel(ty, tx, r, q)`, zeros outside the image) through the 2-D form
/// of `f`.
#[inline(always)]
fn transform_tiles<T: Elem, const I: usize>(
    (data, per, c): (&[T], usize, usize),
    n: usize,
    g: &Wino,
    pixel: impl Fn(usize, usize, usize, usize) -> Option<usize>,
    (zeros, tmp): (&[T], &mut [T]),
    out: &mut Vec<T>,
    f: impl Fn([T; I]) -> [T; 4] + Copy,
) {
    for (t, block) in sized(out, n * g.tiles() * 16 * c)
        .chunks_exact_mut(16 * c)
        .enumerate()
    {
        let (i, ty, tx) = g.tile(t);
        let img = &data[i * per..(i + 1) * per];
        // At most 16 pixels (I = 4); the first I * I are the tile's.
        let src: [&[T]; 16] = std::array::from_fn(|p| {
            (p < I * I)
                .then(|| pixel(ty, tx, p / I, p % I))
                .flatten()
                .map_or(&zeros[..c], |px| &img[px * c..(px + 1) * c])
        });
        tile_pass(&src[..I * I], tmp, block, c, f);
    }
}

/// `V (t, 16, cin)` of the `n` images `x (n, h, w, cin)`.
#[inline(always)]
fn input_transform<T: Elem>(
    x: &[T],
    n: usize,
    g: &Wino,
    scratch: (&[T], &mut [T]),
    v: &mut Vec<T>,
) {
    let pixel = |ty, tx, r, q| g.in_pixel(ty, tx, r, q);
    transform_tiles((x, g.in_len(), g.cin), n, g, pixel, scratch, v, bt);
}

/// `gM (t, 16, cout)` of the output gradients `gy (n, oh, ow, cout)`.
#[inline(always)]
fn grad_output_transform<T: Elem>(
    gy: &[T],
    n: usize,
    g: &Wino,
    scratch: (&[T], &mut [T]),
    gm: &mut Vec<T>,
) {
    let pixel = |ty, tx, r, s| g.out_pixel(ty, tx, r, s);
    transform_tiles((gy, g.out_len(), g.cout), n, g, pixel, scratch, gm, a);
}

/// The 16 gemms `out[xi] (t, n) = lhs[:, xi, :] (t, k) @ rhs[xi] (k, n)`, `lhs (t, 16, k)`,
/// `rhs[xi]` at `xi * k * n` with strides `rhs_strides`.
fn gemms<T: Elem>(
    tiles: usize,
    (k, n): (usize, usize),
    lhs: &[T],
    rhs: &[T],
    rhs_strides: (usize, usize),
    out: &mut Vec<T>,
) {
    for (xi, o) in sized(out, 16 * tiles * n)
        .chunks_exact_mut(tiles * n)
        .enumerate()
    {
        gemm_strided(
            (tiles, n, k),
            &lhs[xi * k..],
            (16 * k, 1),
            &rhs[xi * k * n..(xi + 1) * k * n],
            rhs_strides,
            o,
            false,
        );
    }
}

/// `y (n, oh, ow, cout) = conv(x (n, h, w, cin))` with transformed weights `u`.
#[inline(always)]
fn conv_chunk<T: Elem>(x: &[T], n: usize, g: &Wino, u: &[T], bufs: &mut Buffers<T>, y: &mut [T]) {
    let (tiles, c) = (n * g.tiles(), g.cout);
    input_transform(x, n, g, (&bufs.zeros, &mut bufs.tmp), &mut bufs.v);
    gemms(tiles, (g.cin, c), &bufs.v, u, (c, 1), &mut bufs.out);
    let (m, tmp, scratch) = (&bufs.out, &mut bufs.tmp, &mut bufs.scratch);
    for t in 0..tiles {
        let (i, ty, tx) = g.tile(t);
        let img = &mut y[i * g.out_len()..(i + 1) * g.out_len()];
        let src: [&[T]; 16] = std::array::from_fn(|p| &m[(p * tiles + t) * c..][..c]);
        let dst: [Option<usize>; 4] = std::array::from_fn(|p| g.out_pixel(ty, tx, p / 2, p % 2));
        tile_pass(&src, tmp, scratch, c, at);
        for (p, val) in dst.iter().zip(scratch.chunks_exact(c)) {
            if let Some(px) = *p {
                img[px * c..(px + 1) * c].copy_from_slice(val);
            }
        }
    }
}

/// `gx (n, h, w, cin) = conv^T(gy (n, oh, ow, cout))` with transformed weights `u`; `gx` is
/// overwritten.
#[inline(always)]
fn conv_t_chunk<T: Elem>(
    gy: &[T],
    n: usize,
    g: &Wino,
    u: &[T],
    bufs: &mut Buffers<T>,
    gx: &mut [T],
) {
    let (tiles, c) = (n * g.tiles(), g.cin);
    grad_output_transform(gy, n, g, (&bufs.zeros, &mut bufs.tmp), &mut bufs.gm);
    // gV[xi] = gM[:, xi, :] @ U[xi]^T: U[xi] (cin, cout) read transposed.
    gemms(tiles, (g.cout, c), &bufs.gm, u, (1, g.cout), &mut bufs.out);
    gx[..n * g.in_len()].fill(T::ZERO);
    let (gv, tmp, scratch) = (&bufs.out, &mut bufs.tmp, &mut bufs.scratch);
    for t in 0..tiles {
        let (i, ty, tx) = g.tile(t);
        let img = &mut gx[i * g.in_len()..(i + 1) * g.in_len()];
        let src: [&[T]; 16] = std::array::from_fn(|p| &gv[(p * tiles + t) * c..][..c]);
        let dst: [Option<usize>; 16] = std::array::from_fn(|p| g.in_pixel(ty, tx, p / 4, p % 4));
        tile_pass(&src, tmp, scratch, c, b);
        for (p, val) in dst.iter().zip(scratch.chunks_exact(c)) {
            if let Some(px) = *p {
                for (d, &v) in img[px * c..(px + 1) * c].iter_mut().zip(val) {
                    *d += v;
                }
            }
        }
    }
}

/// `du (16, cin, cout) += sum_tiles V[:, xi]^T gM[:, xi]` for the images `x (n, h, w, cin)` and
/// their output gradients `gy (n, oh, ow, cout)`.
#[inline(always)]
fn weight_grad_chunk<T: Elem>(
    x: &[T],
    gy: &[T],
    n: usize,
    g: &Wino,
    bufs: &mut Buffers<T>,
    du: &mut [T],
) {
    let tiles = n * g.tiles();
    let (cin, cout) = (g.cin, g.cout);
    input_transform(x, n, g, (&bufs.zeros, &mut bufs.tmp), &mut bufs.v);
    grad_output_transform(gy, n, g, (&bufs.zeros, &mut bufs.tmp), &mut bufs.gm);
    for (xi, d) in du.chunks_exact_mut(cin * cout).enumerate() {
        gemm_strided(
            (cin, cout, tiles),
            &bufs.v[xi * cin..],
            (1, 16 * cin),
            &bufs.gm[xi * cout..],
            (16 * cout, 1),
            d,
            true,
        );
    }
}

/// One chunk's work, with its inputs and output.
pub(crate) enum Kernel<'a, T> {
    /// `y (n, oh, ow, cout) = conv(x (n, h, w, cin))` with transformed weights `u`.
    Conv {
        x: &'a [T],
        u: &'a [T],
        y: &'a mut [T],
    },
    /// `gx (n, h, w, cin) = conv^T(gy (n, oh, ow, cout))` with transformed weights `u`
    /// (overwrites `gx`).
    ConvT {
        gy: &'a [T],
        u: &'a [T],
        gx: &'a mut [T],
    },
    /// `du (16, cin, cout) +=` the transformed weight gradient of `x` and `gy`.
    WeightGrad {
        x: &'a [T],
        gy: &'a [T],
        du: &'a mut [T],
    },
}

/// A chunk's kernel inside `pulp`'s target-feature context: the transforms (all
/// `#[inline(always)]`) are compiled and vectorised for the best SIMD level of the CPU at hand.
struct Job<'a, T> {
    kernel: Kernel<'a, T>,
    n: usize,
    g: &'a Wino,
    bufs: &'a mut Buffers<T>,
}

impl<T: Elem> pulp::WithSimd for Job<'_, T> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _simd: S) {
        let (n, g, bufs) = (self.n, self.g, self.bufs);
        match self.kernel {
            Kernel::Conv { x, u, y } => conv_chunk(x, n, g, u, bufs, y),
            Kernel::ConvT { gy, u, gx } => conv_t_chunk(gy, n, g, u, bufs, gx),
            Kernel::WeightGrad { x, gy, du } => weight_grad_chunk(x, gy, n, g, bufs, du),
        }
    }
}

/// Runs `kernel` on a chunk of `n` images.
pub(crate) fn run<T: Elem>(kernel: Kernel<'_, T>, n: usize, g: &Wino, bufs: &mut Buffers<T>) {
    pulp::Arch::new().dispatch(Job { kernel, n, g, bufs });
}
