//! Winograd kernels for stride-1 3x3 convolutions on NHWC slices: the convolution, its
//! transpose (the input gradient) and its weight gradient, each as `N * N` gemms in the
//! transformed domain over a chunk of images. They compute what [`super::conv`]'s im2col
//! kernels compute (equal up to rounding) with fewer multiplies: F(m x m, 3 x 3) takes
//! `(m + 2)^2` per `m x m` output tile and channel pair instead of `9 m^2`. `conv` drives them
//! (chunks, threads) and falls back to im2col where they do not pay (a kernel other than 3x3, a
//! layer with few channels).
//!
//! Three variants ([`Variant`]): F(2x2, 3x3), F(4x4, 3x3) and F(5x5, 3x3); [`Wino::new`] picks
//! the one with the fewest transformed products for the layer's output size (tiles times
//! `(m + 2)^2`; the Fashion-MNIST model's 14x14 and 5x5 layers take F(5x5): 441 and 49 products
//! per channel pair and image against 784 and 144 for F(2x2)). Larger tiles round worse in
//! `f32`: the largest error relative to the result's largest magnitude, measured on the
//! 14x14 layer, is ~4e-7 for F(2x2) (im2col's ~6e-7), ~7e-6 for F(4x4) and ~8e-6 for F(5x5)
//! (`conv`'s tests hold each variant below a bound). That is far below what a training step
//! notices, but it means results differ in the last digits from an im2col or F(2x2) run.
//!
//! With `d` an `N x N` input tile (`N = m + 2`), `g` a 3x3 kernel and `Y` the `m x m` output
//! tile (Lavin & Gray 2016; correlation, as in CNNs): `Y = A^T [(G g G^T) . (B^T d B)] A`, the
//! elementwise product summed over input channels. The transpose and the weight gradient are
//! the adjoints of the same formula: `gd = B [sum_co U . (A gY A^T)] B^T` (overlapping tiles
//! add) and `dg = G^T [sum_tiles (B^T d B) . (A gY A^T)] G`, so they are exact adjoints of the
//! convolution as computed, in any precision. The F(4x4) and F(5x5) matrices are the
//! Toom-Cook ones for the points `0, 1, -1, 2, -2 (, 1/2)` and infinity, worked out in exact
//! rationals (the `f64` tests check every variant against candle's `conv2d`).
//!
//! Layouts within a chunk of images (`t` a tile: image, tile row, tile column; `xi` one of the
//! `N * N` transformed positions): transformed inputs `V (t, xi, cin)` and transformed output
//! gradients `gM (t, xi, cout)`, one contiguous block per tile that the gemms read with a row
//! stride; gemm results `(xi, t, c)`; transformed weights `U (xi, cin, cout)`. The weight matrix
//! is `conv`'s `wmat (cout, 9 cin)` in `(ki, kj, c)` column order.

use super::kernels::{gemm_strided, Elem};
use std::marker::PhantomData;

/// Transformed positions times tiles per chunk: a chunk's transformed inputs stay near 1 MB
/// (`f32`, 64 channels).
const POSITIONS_PER_CHUNK: usize = 4096;
/// The most transformed positions of any variant (F(5x5): 7 x 7).
const MAX_POSITIONS: usize = 49;

/// Which Winograd tile a convolution uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Variant {
    /// F(2x2, 3x3): 4x4 input tiles.
    F2,
    /// F(4x4, 3x3): 6x6 input tiles.
    F4,
    /// F(5x5, 3x3): 7x7 input tiles.
    F5,
}

impl Variant {
    /// Every variant, smallest tile first.
    pub const ALL: [Variant; 3] = [Variant::F2, Variant::F4, Variant::F5];
    /// Output tile side `m`.
    pub fn out(self) -> usize {
        match self {
            Self::F2 => 2,
            Self::F4 => 4,
            Self::F5 => 5,
        }
    }
    /// Transformed positions per tile, `(m + 2)^2`.
    pub fn positions(self) -> usize {
        (self.out() + 2).pow(2)
    }
}

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
    /// The tile.
    pub variant: Variant,
}

impl Wino {
    /// The geometry for an input `(h, w, cin)`, `cout` output channels and padding `pad`, with
    /// the variant that needs the fewest transformed products (`force` overrides it).
    pub fn new(
        (h, w, cin): (usize, usize, usize),
        cout: usize,
        pad: usize,
        force: Option<Variant>,
    ) -> Self {
        let (oh, ow) = (
            (h + 2 * pad).saturating_sub(2),
            (w + 2 * pad).saturating_sub(2),
        );
        let cost = |v: Variant| oh.div_ceil(v.out()) * ow.div_ceil(v.out()) * v.positions();
        // Ties go to the smaller tile (it rounds better).
        let variant = force.unwrap_or_else(|| {
            Variant::ALL
                .into_iter()
                .reduce(|best, v| if cost(v) < cost(best) { v } else { best })
                .unwrap_or(Variant::F2)
        });
        Self {
            h,
            w,
            cin,
            oh,
            ow,
            cout,
            pad,
            variant,
        }
    }
    /// Output tile side.
    fn m(&self) -> usize {
        self.variant.out()
    }
    /// Transformed positions per tile.
    pub fn positions(&self) -> usize {
        self.variant.positions()
    }
    fn tw(&self) -> usize {
        self.ow.div_ceil(self.m())
    }
    /// Tiles per image.
    fn tiles(&self) -> usize {
        self.oh.div_ceil(self.m()) * self.tw()
    }
    /// Images per chunk of a batch of `b`.
    pub fn chunk(&self, b: usize) -> usize {
        (POSITIONS_PER_CHUNK / (self.positions() * self.tiles()).max(1)).clamp(1, b.max(1))
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
    /// Input pixel at offset `(r, q)` of tile `(ty, tx)`'s input window, if inside the image.
    fn in_pixel(&self, ty: usize, tx: usize, r: usize, q: usize) -> Option<usize> {
        let m = self.m();
        let iy = (m * ty + r).checked_sub(self.pad).filter(|&v| v < self.h)?;
        let ix = (m * tx + q).checked_sub(self.pad).filter(|&v| v < self.w)?;
        Some(iy * self.w + ix)
    }
    /// Output pixel at offset `(r, s)` of tile `(ty, tx)`, if inside the output.
    fn out_pixel(&self, ty: usize, tx: usize, r: usize, s: usize) -> Option<usize> {
        let m = self.m();
        let (oy, ox) = (m * ty + r, m * tx + s);
        (oy < self.oh && ox < self.ow).then_some(oy * self.ow + ox)
    }
}

/// The 1-D transforms of F(O x O, 3 x 3), `N = O + 2`; each 2-D one applies its 1-D form to
/// the columns, then the rows. Each adjoint is the transpose of its map, written out.
trait Tile<const N: usize, const O: usize> {
    /// `B^T a`.
    fn bt<T: Elem>(a: [T; N]) -> [T; N];
    /// `B a`, the adjoint of `bt`.
    fn b<T: Elem>(a: [T; N]) -> [T; N];
    /// `A^T m`.
    fn at<T: Elem>(m: [T; N]) -> [T; O];
    /// `A y`, the adjoint of `at`.
    fn a<T: Elem>(y: [T; O]) -> [T; N];
    /// `G g`.
    fn g<T: Elem>(g: [T; 3]) -> [T; N];
    /// `G^T u`, the adjoint of `g`.
    fn gt<T: Elem>(u: [T; N]) -> [T; 3];
}

/// F(2x2, 3x3).
struct F2;
/// F(4x4, 3x3), points `0, 1, -1, 2, -2`, infinity.
struct F4;
/// F(5x5, 3x3), points `0, 1, -1, 2, -2, 1/2`, infinity.
struct F5;

impl Tile<4, 2> for F2 {
    #[inline(always)]
    fn bt<T: Elem>([a0, a1, a2, a3]: [T; 4]) -> [T; 4] {
        [a0 - a2, a1 + a2, a2 - a1, a1 - a3]
    }
    #[inline(always)]
    fn b<T: Elem>([a0, a1, a2, a3]: [T; 4]) -> [T; 4] {
        [a0, a1 - a2 + a3, a1 + a2 - a0, T::ZERO - a3]
    }
    #[inline(always)]
    fn at<T: Elem>([m0, m1, m2, m3]: [T; 4]) -> [T; 2] {
        [m0 + m1 + m2, m1 - m2 - m3]
    }
    #[inline(always)]
    fn a<T: Elem>([y0, y1]: [T; 2]) -> [T; 4] {
        [y0, y0 + y1, y0 - y1, T::ZERO - y1]
    }
    #[inline(always)]
    fn g<T: Elem>([g0, g1, g2]: [T; 3]) -> [T; 4] {
        let h = T::from_f64(0.5);
        [g0, (g0 + g1 + g2) * h, (g0 - g1 + g2) * h, g2]
    }
    #[inline(always)]
    fn gt<T: Elem>([u0, u1, u2, u3]: [T; 4]) -> [T; 3] {
        let h = T::from_f64(0.5);
        [u0 + (u1 + u2) * h, (u1 - u2) * h, (u1 + u2) * h + u3]
    }
}

impl Tile<6, 4> for F4 {
    #[inline(always)]
    fn bt<T: Elem>([a0, a1, a2, a3, a4, a5]: [T; 6]) -> [T; 6] {
        let k0 = T::from_f64(4.0);
        let k1 = T::from_f64(5.0);
        let k2 = T::from_f64(2.0);
        [
            a4 + a0 * k0 - a2 * k1,
            a3 + a4 - (a1 + a2) * k0,
            a4 + (a1 - a2) * k0 - a3,
            a4 + (a3 - a1) * k2 - a2,
            a4 + (a1 - a3) * k2 - a2,
            a5 + a1 * k0 - a3 * k1,
        ]
    }
    #[inline(always)]
    fn b<T: Elem>([a0, a1, a2, a3, a4, a5]: [T; 6]) -> [T; 6] {
        let k0 = T::from_f64(4.0);
        let k1 = T::from_f64(2.0);
        let k2 = T::from_f64(5.0);
        [
            a0 * k0,
            (a4 - a3) * k1 + (a2 + a5 - a1) * k0,
            T::ZERO - a3 - a4 - (a1 + a2) * k0 - a0 * k2,
            a1 + (a3 - a4) * k1 - a2 - a5 * k2,
            a0 + a1 + a2 + a3 + a4,
            a5,
        ]
    }
    #[inline(always)]
    fn at<T: Elem>([m0, m1, m2, m3, m4, m5]: [T; 6]) -> [T; 4] {
        let k0 = T::from_f64(2.0);
        let k1 = T::from_f64(4.0);
        let k2 = T::from_f64(8.0);
        [
            m0 + m1 + m2 + m3 + m4,
            m1 + (m3 - m4) * k0 - m2,
            m1 + m2 + (m3 + m4) * k1,
            m1 + m5 + (m3 - m4) * k2 - m2,
        ]
    }
    #[inline(always)]
    fn a<T: Elem>([y0, y1, y2, y3]: [T; 4]) -> [T; 6] {
        let k0 = T::from_f64(2.0);
        let k1 = T::from_f64(4.0);
        let k2 = T::from_f64(8.0);
        [
            y0,
            y0 + y1 + y2 + y3,
            y0 + y2 - y1 - y3,
            y0 + y1 * k0 + y2 * k1 + y3 * k2,
            y0 + y2 * k1 - y1 * k0 - y3 * k2,
            y3,
        ]
    }
    #[inline(always)]
    fn g<T: Elem>([g0, g1, g2]: [T; 3]) -> [T; 6] {
        let k0 = T::from_f64(0.25);
        let k1 = T::from_f64(1.0 / 6.0);
        let k2 = T::from_f64(1.0 / 24.0);
        let k3 = T::from_f64(1.0 / 12.0);
        [
            g0 * k0,
            T::ZERO - (g0 + g1 + g2) * k1,
            (g1 - g0 - g2) * k1,
            g0 * k2 + g1 * k3 + g2 * k1,
            g0 * k2 + g2 * k1 - g1 * k3,
            g2,
        ]
    }
    #[inline(always)]
    fn gt<T: Elem>([u0, u1, u2, u3, u4, u5]: [T; 6]) -> [T; 3] {
        let k0 = T::from_f64(1.0 / 24.0);
        let k1 = T::from_f64(1.0 / 6.0);
        let k2 = T::from_f64(0.25);
        let k3 = T::from_f64(1.0 / 12.0);
        [
            (u3 + u4) * k0 + u0 * k2 - (u1 + u2) * k1,
            (u3 - u4) * k3 + (u2 - u1) * k1,
            u5 + (u3 + u4 - u1 - u2) * k1,
        ]
    }
}

impl Tile<7, 5> for F5 {
    #[inline(always)]
    fn bt<T: Elem>([a0, a1, a2, a3, a4, a5, a6]: [T; 7]) -> [T; 7] {
        let k0 = T::from_f64(0.5);
        let k1 = T::from_f64(2.0);
        let k2 = T::from_f64(2.5);
        let k3 = T::from_f64(4.0);
        let k4 = T::from_f64(5.0);
        let k5 = T::from_f64(4.5);
        let k6 = T::from_f64(1.5);
        let k7 = T::from_f64(3.5);
        let k8 = T::from_f64(6.0);
        [
            a5 + a2 * k2 + a1 * k3 - a4 * k0 - a0 * k1 - a3 * k4,
            a5 + a4 * k0 + (a1 - a2) * k1 - a3 * k5,
            a5 + a2 * k8 - a4 * k6 - a1 * k1 - a3 * k7,
            a1 + a5 + (a4 - a2) * k6 - a3 * k1,
            a5 + (a2 - a4) * k2 - a1,
            a5 + a1 * k3 - a3 * k4,
            a6 + a3 * k2 + a2 * k3 - a5 * k0 - a1 * k1 - a4 * k4,
        ]
    }
    #[inline(always)]
    fn b<T: Elem>([a0, a1, a2, a3, a4, a5, a6]: [T; 7]) -> [T; 7] {
        let k0 = T::from_f64(2.0);
        let k1 = T::from_f64(4.0);
        let k2 = T::from_f64(1.5);
        let k3 = T::from_f64(2.5);
        let k4 = T::from_f64(6.0);
        let k5 = T::from_f64(3.5);
        let k6 = T::from_f64(4.5);
        let k7 = T::from_f64(5.0);
        let k8 = T::from_f64(0.5);
        [
            T::ZERO - a0 * k0,
            a3 + (a1 - a2 - a6) * k0 + (a0 + a5) * k1 - a4,
            (a0 + a4) * k3 + a6 * k1 + a2 * k4 - a3 * k2 - a1 * k0,
            a6 * k3 - a3 * k0 - a2 * k5 - a1 * k6 - (a0 + a5) * k7,
            (a1 - a0) * k8 + (a3 - a2) * k2 - a4 * k3 - a6 * k7,
            a0 + a1 + a2 + a3 + a4 + a5 - a6 * k8,
            a6,
        ]
    }
    #[inline(always)]
    fn at<T: Elem>([m0, m1, m2, m3, m4, m5, m6]: [T; 7]) -> [T; 5] {
        let k0 = T::from_f64(0.5);
        let k1 = T::from_f64(2.0);
        let k2 = T::from_f64(0.25);
        let k3 = T::from_f64(4.0);
        let k4 = T::from_f64(0.125);
        let k5 = T::from_f64(8.0);
        let k6 = T::from_f64(0.0625);
        let k7 = T::from_f64(16.0);
        [
            m0 + m1 + m2 + m3 + m4 + m5,
            m1 + m5 * k0 + (m3 - m4) * k1 - m2,
            m1 + m2 + m5 * k2 + (m3 + m4) * k3,
            m1 + m5 * k4 + (m3 - m4) * k5 - m2,
            m1 + m2 + m6 + m5 * k6 + (m3 + m4) * k7,
        ]
    }
    #[inline(always)]
    fn a<T: Elem>([y0, y1, y2, y3, y4]: [T; 5]) -> [T; 7] {
        let k0 = T::from_f64(2.0);
        let k1 = T::from_f64(4.0);
        let k2 = T::from_f64(8.0);
        let k3 = T::from_f64(16.0);
        let k4 = T::from_f64(0.0625);
        let k5 = T::from_f64(0.125);
        let k6 = T::from_f64(0.25);
        let k7 = T::from_f64(0.5);
        [
            y0,
            y0 + y1 + y2 + y3 + y4,
            y0 + y2 + y4 - y1 - y3,
            y0 + y1 * k0 + y2 * k1 + y3 * k2 + y4 * k3,
            y0 + y2 * k1 + y4 * k3 - y1 * k0 - y3 * k2,
            y0 + y4 * k4 + y3 * k5 + y2 * k6 + y1 * k7,
            y4,
        ]
    }
    #[inline(always)]
    fn g<T: Elem>([g0, g1, g2]: [T; 3]) -> [T; 7] {
        let k0 = T::from_f64(0.5);
        let k1 = T::from_f64(1.0 / 3.0);
        let k2 = T::from_f64(1.0 / 9.0);
        let k3 = T::from_f64(1.0 / 36.0);
        let k4 = T::from_f64(1.0 / 18.0);
        let k5 = T::from_f64(1.0 / 60.0);
        let k6 = T::from_f64(1.0 / 30.0);
        let k7 = T::from_f64(1.0 / 15.0);
        let k8 = T::from_f64(8.0 / 45.0);
        let k9 = T::from_f64(16.0 / 45.0);
        let k10 = T::from_f64(32.0 / 45.0);
        [
            T::ZERO - g0 * k0,
            T::ZERO - (g0 + g1 + g2) * k1,
            (g0 + g2 - g1) * k2,
            g0 * k3 + g1 * k4 + g2 * k2,
            g1 * k6 - g0 * k5 - g2 * k7,
            g2 * k8 + g1 * k9 + g0 * k10,
            g2,
        ]
    }
    #[inline(always)]
    fn gt<T: Elem>([u0, u1, u2, u3, u4, u5, u6]: [T; 7]) -> [T; 3] {
        let k0 = T::from_f64(1.0 / 60.0);
        let k1 = T::from_f64(1.0 / 36.0);
        let k2 = T::from_f64(1.0 / 9.0);
        let k3 = T::from_f64(1.0 / 3.0);
        let k4 = T::from_f64(0.5);
        let k5 = T::from_f64(32.0 / 45.0);
        let k6 = T::from_f64(1.0 / 30.0);
        let k7 = T::from_f64(1.0 / 18.0);
        let k8 = T::from_f64(16.0 / 45.0);
        let k9 = T::from_f64(1.0 / 15.0);
        let k10 = T::from_f64(8.0 / 45.0);
        [
            u3 * k1 + u2 * k2 + u5 * k5 - u4 * k0 - u1 * k3 - u0 * k4,
            u4 * k6 + u3 * k7 + u5 * k8 - u2 * k2 - u1 * k3,
            u6 + (u2 + u3) * k2 + u5 * k10 - u4 * k9 - u1 * k3,
        ]
    }
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
    // Cut to `c` as well: without it the compiler could not tie the chunks' lengths to the
    // loop bound, kept a bounds check per store and left some instances scalar.
    let mut dst: [&mut [T]; O] = split(dst, c).map(|d| &mut d[..c]);
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

/// `U (N * N, cin, cout)` from `wmat (cout, 9 cin)`.
pub(crate) fn weights<T: Elem>(wmat: &[T], g: &Wino) -> Vec<T> {
    match g.variant {
        Variant::F2 => weights_with::<T, 4, 2, F2>(wmat, g),
        Variant::F4 => weights_with::<T, 6, 4, F4>(wmat, g),
        Variant::F5 => weights_with::<T, 7, 5, F5>(wmat, g),
    }
}

fn weights_with<T: Elem, const N: usize, const O: usize, X: Tile<N, O>>(
    wmat: &[T],
    g: &Wino,
) -> Vec<T> {
    let (cin, cout, p) = (g.cin, g.cout, N * N);
    // wmat (cout, 9, cin) -> (9, cin, cout), so the transform runs over contiguous vectors of
    // the output channels.
    let mut kt = vec![T::ZERO; 9 * cin * cout];
    for (co, row) in wmat.chunks_exact(9 * cin).take(cout).enumerate() {
        for (tc, &v) in row.iter().enumerate() {
            kt[tc * cout + co] = v;
        }
    }
    let mut u = vec![T::ZERO; p * cin * cout];
    let (mut tmp, mut dst) = (vec![T::ZERO; 3 * N * cout], vec![T::ZERO; p * cout]);
    for c in 0..cin {
        let src: [&[T]; 9] = std::array::from_fn(|t| &kt[(t * cin + c) * cout..][..cout]);
        tile_pass(&src, &mut tmp, &mut dst, cout, X::g);
        for (xi, v) in dst.chunks_exact(cout).enumerate() {
            u[(xi * cin + c) * cout..][..cout].copy_from_slice(v);
        }
    }
    u
}

/// `dW (cout, 9 cin)` from the transformed-domain gradient `dU (N * N, cin, cout)`: the
/// adjoint of [`weights`].
pub(crate) fn weights_adjoint<T: Elem>(du: &[T], g: &Wino) -> Vec<T> {
    match g.variant {
        Variant::F2 => weights_adjoint_with::<T, 4, 2, F2>(du, g),
        Variant::F4 => weights_adjoint_with::<T, 6, 4, F4>(du, g),
        Variant::F5 => weights_adjoint_with::<T, 7, 5, F5>(du, g),
    }
}

fn weights_adjoint_with<T: Elem, const N: usize, const O: usize, X: Tile<N, O>>(
    du: &[T],
    g: &Wino,
) -> Vec<T> {
    let (cin, cout, p) = (g.cin, g.cout, N * N);
    // Per input channel: the 2-D transform over vectors of the output channels into
    // (9, cin, cout), then the transpose to wmat's (cout, 9, cin).
    let mut kt = vec![T::ZERO; 9 * cin * cout];
    let (mut tmp, mut dst) = (vec![T::ZERO; N * 3 * cout], vec![T::ZERO; 9 * cout]);
    for c in 0..cin {
        let src: [&[T]; MAX_POSITIONS] =
            std::array::from_fn(|xi| &du[((xi % p) * cin + c) * cout..][..cout]);
        tile_pass(&src[..p], &mut tmp, &mut dst, cout, X::gt);
        for (t, v) in dst.chunks_exact(cout).enumerate() {
            kt[(t * cin + c) * cout..][..cout].copy_from_slice(v);
        }
    }
    let mut dw = vec![T::ZERO; cout * 9 * cin];
    for (tc, row) in kt.chunks_exact(cout).enumerate() {
        for (co, &v) in row.iter().enumerate() {
            dw[co * 9 * cin + tc] = v;
        }
    }
    dw
}

/// Per-thread buffers for one chunk.
pub(crate) struct Buffers<T> {
    /// `V (t, P, cin)`, `P` the variant's transformed positions.
    v: Vec<T>,
    /// `gM (t, P, cout)`.
    gm: Vec<T>,
    /// A gemm result `(P, t, max(cin, cout))`.
    out: Vec<T>,
    zeros: Vec<T>,
    /// Per-tile intermediates `(P, max(cin, cout))` each.
    tmp: Vec<T>,
    scratch: Vec<T>,
}

impl<T: Elem> Buffers<T> {
    /// Buffers for chunks of up to `n` images.
    pub fn new(g: &Wino, n: usize) -> Self {
        let (t, p, c) = (n * g.tiles(), g.positions(), g.cin.max(g.cout));
        Self {
            v: Vec::with_capacity(t * p * g.cin),
            gm: Vec::with_capacity(t * p * g.cout),
            out: Vec::with_capacity(t * p * c),
            zeros: vec![T::ZERO; c],
            tmp: vec![T::ZERO; p * c],
            scratch: vec![T::ZERO; p * c],
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

/// The transformed tiles `(t, N * N, c)` of `n` images `data (n, per)` with `c` channels:
/// tile `t`'s `S x S` pixels (`pixel(ty, tx, r, q)`, zeros outside the image) through the 2-D
/// form of `f`.
#[inline(always)]
fn transform_tiles<T: Elem, const S: usize, const N: usize>(
    (data, per, c): (&[T], usize, usize),
    n: usize,
    g: &Wino,
    pixel: impl Fn(usize, usize, usize, usize) -> Option<usize>,
    (zeros, tmp): (&[T], &mut [T]),
    out: &mut Vec<T>,
    f: impl Fn([T; S]) -> [T; N] + Copy,
) {
    for (t, block) in sized(out, n * g.tiles() * N * N * c)
        .chunks_exact_mut(N * N * c)
        .enumerate()
    {
        let (i, ty, tx) = g.tile(t);
        let img = &data[i * per..(i + 1) * per];
        // The first S * S are the tile's pixels.
        let src: [&[T]; MAX_POSITIONS] = std::array::from_fn(|p| {
            (p < S * S)
                .then(|| pixel(ty, tx, p / S, p % S))
                .flatten()
                .map_or(&zeros[..c], |px| &img[px * c..(px + 1) * c])
        });
        tile_pass(&src[..S * S], tmp, block, c, f);
    }
}

/// `V (t, N * N, cin)` of the `n` images `x (n, h, w, cin)`.
#[inline(always)]
fn input_transform<T: Elem, const N: usize, const O: usize, X: Tile<N, O>>(
    x: &[T],
    n: usize,
    g: &Wino,
    scratch: (&[T], &mut [T]),
    v: &mut Vec<T>,
) {
    let pixel = |ty, tx, r, q| g.in_pixel(ty, tx, r, q);
    transform_tiles((x, g.in_len(), g.cin), n, g, pixel, scratch, v, X::bt);
}

/// `gM (t, N * N, cout)` of the output gradients `gy (n, oh, ow, cout)`.
#[inline(always)]
fn grad_output_transform<T: Elem, const N: usize, const O: usize, X: Tile<N, O>>(
    gy: &[T],
    n: usize,
    g: &Wino,
    scratch: (&[T], &mut [T]),
    gm: &mut Vec<T>,
) {
    let pixel = |ty, tx, r, s| g.out_pixel(ty, tx, r, s);
    transform_tiles((gy, g.out_len(), g.cout), n, g, pixel, scratch, gm, X::a);
}

/// The `P = N * N` gemms `out[xi] (t, n) = lhs[:, xi, :] (t, k) @ rhs[xi] (k, n)`,
/// `lhs (t, P, k)`, `rhs[xi]` at `xi * k * n` with strides `rhs_strides`.
fn gemms<T: Elem>(
    (tiles, p): (usize, usize),
    (k, n): (usize, usize),
    lhs: &[T],
    rhs: &[T],
    rhs_strides: (usize, usize),
    out: &mut Vec<T>,
) {
    for (xi, o) in sized(out, p * tiles * n)
        .chunks_exact_mut(tiles * n)
        .enumerate()
    {
        gemm_strided(
            (tiles, n, k),
            &lhs[xi * k..],
            (p * k, 1),
            &rhs[xi * k * n..(xi + 1) * k * n],
            rhs_strides,
            o,
            false,
        );
    }
}

/// `y (n, oh, ow, cout) = conv(x (n, h, w, cin))` with transformed weights `u`.
#[inline(always)]
fn conv_chunk<T: Elem, const N: usize, const O: usize, X: Tile<N, O>>(
    x: &[T],
    n: usize,
    g: &Wino,
    u: &[T],
    bufs: &mut Buffers<T>,
    y: &mut [T],
) {
    let (tiles, c) = (n * g.tiles(), g.cout);
    input_transform::<T, N, O, X>(x, n, g, (&bufs.zeros, &mut bufs.tmp), &mut bufs.v);
    gemms(
        (tiles, N * N),
        (g.cin, c),
        &bufs.v,
        u,
        (c, 1),
        &mut bufs.out,
    );
    let (m, tmp, scratch) = (&bufs.out, &mut bufs.tmp, &mut bufs.scratch);
    for t in 0..tiles {
        let (i, ty, tx) = g.tile(t);
        let img = &mut y[i * g.out_len()..(i + 1) * g.out_len()];
        let src: [&[T]; MAX_POSITIONS] =
            std::array::from_fn(|p| &m[((p % (N * N)) * tiles + t) * c..][..c]);
        tile_pass(&src[..N * N], tmp, scratch, c, X::at);
        for (p, val) in scratch.chunks_exact(c).take(O * O).enumerate() {
            if let Some(px) = g.out_pixel(ty, tx, p / O, p % O) {
                img[px * c..(px + 1) * c].copy_from_slice(val);
            }
        }
    }
}

/// `gx (n, h, w, cin) = conv^T(gy (n, oh, ow, cout))` with transformed weights `u`; `gx` is
/// overwritten.
#[inline(always)]
fn conv_t_chunk<T: Elem, const N: usize, const O: usize, X: Tile<N, O>>(
    gy: &[T],
    n: usize,
    g: &Wino,
    u: &[T],
    bufs: &mut Buffers<T>,
    gx: &mut [T],
) {
    let (tiles, c) = (n * g.tiles(), g.cin);
    grad_output_transform::<T, N, O, X>(gy, n, g, (&bufs.zeros, &mut bufs.tmp), &mut bufs.gm);
    // gV[xi] = gM[:, xi, :] @ U[xi]^T: U[xi] (cin, cout) read transposed.
    let p = N * N;
    gemms(
        (tiles, p),
        (g.cout, c),
        &bufs.gm,
        u,
        (1, g.cout),
        &mut bufs.out,
    );
    gx[..n * g.in_len()].fill(T::ZERO);
    let (gv, tmp, scratch) = (&bufs.out, &mut bufs.tmp, &mut bufs.scratch);
    for t in 0..tiles {
        let (i, ty, tx) = g.tile(t);
        let img = &mut gx[i * g.in_len()..(i + 1) * g.in_len()];
        let src: [&[T]; MAX_POSITIONS] =
            std::array::from_fn(|q| &gv[((q % p) * tiles + t) * c..][..c]);
        tile_pass(&src[..p], tmp, scratch, c, X::b);
        for (q, val) in scratch.chunks_exact(c).take(p).enumerate() {
            if let Some(px) = g.in_pixel(ty, tx, q / N, q % N) {
                for (d, &v) in img[px * c..(px + 1) * c].iter_mut().zip(val) {
                    *d += v;
                }
            }
        }
    }
}

/// `du (N * N, cin, cout) += sum_tiles V[:, xi]^T gM[:, xi]` for the images
/// `x (n, h, w, cin)` and their output gradients `gy (n, oh, ow, cout)`.
#[inline(always)]
fn weight_grad_chunk<T: Elem, const N: usize, const O: usize, X: Tile<N, O>>(
    (x, gy): (&[T], &[T]),
    n: usize,
    g: &Wino,
    bufs: &mut Buffers<T>,
    du: &mut [T],
) {
    let (tiles, p) = (n * g.tiles(), N * N);
    let (cin, cout) = (g.cin, g.cout);
    input_transform::<T, N, O, X>(x, n, g, (&bufs.zeros, &mut bufs.tmp), &mut bufs.v);
    grad_output_transform::<T, N, O, X>(gy, n, g, (&bufs.zeros, &mut bufs.tmp), &mut bufs.gm);
    for (xi, d) in du.chunks_exact_mut(cin * cout).enumerate() {
        gemm_strided(
            (cin, cout, tiles),
            &bufs.v[xi * cin..],
            (1, p * cin),
            &bufs.gm[xi * cout..],
            (p * cout, 1),
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
    /// `du (N * N, cin, cout) +=` the transformed weight gradient of `x` and `gy`.
    WeightGrad {
        x: &'a [T],
        gy: &'a [T],
        du: &'a mut [T],
    },
}

/// A chunk's kernel inside `pulp`'s target-feature context: the transforms (all
/// `#[inline(always)]`) are compiled and vectorised for the best SIMD level of the CPU at hand.
struct Job<'a, T, X, const N: usize, const O: usize> {
    kernel: Kernel<'a, T>,
    n: usize,
    g: &'a Wino,
    bufs: &'a mut Buffers<T>,
    tile: PhantomData<X>,
}

impl<T: Elem, X: Tile<N, O>, const N: usize, const O: usize> pulp::WithSimd
    for Job<'_, T, X, N, O>
{
    type Output = ();
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _simd: S) {
        let (n, g, bufs) = (self.n, self.g, self.bufs);
        match self.kernel {
            Kernel::Conv { x, u, y } => conv_chunk::<T, N, O, X>(x, n, g, u, bufs, y),
            Kernel::ConvT { gy, u, gx } => conv_t_chunk::<T, N, O, X>(gy, n, g, u, bufs, gx),
            Kernel::WeightGrad { x, gy, du } => {
                weight_grad_chunk::<T, N, O, X>((x, gy), n, g, bufs, du)
            }
        }
    }
}

/// Runs `kernel` on a chunk of `n` images.
pub(crate) fn run<T: Elem>(kernel: Kernel<'_, T>, n: usize, g: &Wino, bufs: &mut Buffers<T>) {
    let arch = pulp::Arch::new();
    match g.variant {
        Variant::F2 => arch.dispatch(Job::<T, F2, 4, 2> {
            kernel,
            n,
            g,
            bufs,
            tile: PhantomData,
        }),
        Variant::F4 => arch.dispatch(Job::<T, F4, 6, 4> {
            kernel,
            n,
            g,
            bufs,
            tile: PhantomData,
        }),
        Variant::F5 => arch.dispatch(Job::<T, F5, 7, 5> {
            kernel,
            n,
            g,
            bufs,
            tile: PhantomData,
        }),
    }
}
