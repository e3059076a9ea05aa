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
//! stride; gemm results `(t, xi, c)`, written with a row stride so that the output transform
//! reads each tile's block in one piece; transformed weights `U (cin, xi, cout)` (and the weight
//! gradient `dU` alike), one block per input channel so that the weight transforms split over
//! threads by input channel. The weight matrix is `conv`'s `wmat (cout, 9 cin)` in
//! `(ki, kj, c)` column order.
//!
//! The 2-D transforms read and write tiles in place (input tiles from the chunk's images copied
//! into a zero frame, output tiles straight into the result where they fit), through
//! [`tile_pass`], whose 1-D passes go over blocks of channels in local arrays.

use super::elem::Elem;
use super::gemm::{gemm_rows, gemm_strided};
use super::output::{fill, Part};
use super::threading::join;
use std::marker::PhantomData;

/// Transformed positions times tiles per chunk: a chunk's transformed inputs stay near 1 MB
/// (`f32`, 64 channels).
const POSITIONS_PER_CHUNK: usize = 4096;

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
    /// Tile rows and columns per image.
    fn th(&self) -> usize {
        self.oh.div_ceil(self.m())
    }
    fn tw(&self) -> usize {
        self.ow.div_ceil(self.m())
    }
    /// Tiles per image.
    fn tiles(&self) -> usize {
        self.th() * self.tw()
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

/// Lanes of one block in [`pass`].
const LANES: usize = 16;

/// `O` vectors of length `c`, `stride` apart from the start of `buf`, as disjoint slices.
#[inline(always)]
fn strided_mut<T, const O: usize>(buf: &mut [T], stride: usize, c: usize) -> [&mut [T]; O] {
    let mut rest = buf;
    std::array::from_fn(|o| {
        let (head, tail) =
            std::mem::take(&mut rest).split_at_mut(if o + 1 < O { stride } else { c });
        rest = tail;
        &mut head[..c]
    })
}

/// One 1-D transform over channel vectors: `dst[o * ds + k] = f(src[i * ss + k])[o]` for
/// `k < c`. Channels go in blocks of [`LANES`] through local arrays (loads, then `f` lane by
/// lane, then stores), so the compiler vectorises each block without having to prove that the
/// vectors do not overlap (it could not for a loop over the slices themselves, and kept part of
/// it scalar).
#[inline(always)]
fn pass<T: Elem, const I: usize, const O: usize>(
    (src, ss): (&[T], usize),
    (dst, ds): (&mut [T], usize),
    c: usize,
    f: impl Fn([T; I]) -> [T; O],
) {
    let src: [&[T]; I] = std::array::from_fn(|i| &src[i * ss..][..c]);
    let mut dst: [&mut [T]; O] = strided_mut(dst, ds, c);
    let full = c - c % LANES;
    let mut k = 0;
    while k < full {
        let mut a = [[T::ZERO; LANES]; I];
        for (a, s) in a.iter_mut().zip(&src) {
            a.copy_from_slice(&s[k..k + LANES]);
        }
        let mut r = [[T::ZERO; LANES]; O];
        for l in 0..LANES {
            let v = f(std::array::from_fn(|i| a[i][l]));
            for o in 0..O {
                r[o][l] = v[o];
            }
        }
        for (d, r) in dst.iter_mut().zip(&r) {
            d[k..k + LANES].copy_from_slice(r);
        }
        k += LANES;
    }
    for k in full..c {
        for (d, v) in dst.iter_mut().zip(f(std::array::from_fn(|i| src[i][k]))) {
            d[k] = v;
        }
    }
}

/// Where a tile's vectors of length `c` lie in a slice: vector `(r, q)` (row, column) at
/// `r * row + q * col`.
#[derive(Clone, Copy)]
struct Grid {
    row: usize,
    col: usize,
}

impl Grid {
    /// Vectors packed one after another, `n` per row.
    fn packed(n: usize, c: usize) -> Self {
        Self { row: n * c, col: c }
    }
}

/// The 2-D transform `F x F^T` of a tile of `I x I` channel vectors in `src` to the `O x O`
/// vectors in `dst`, through `tmp (I * O, c)` (column-major intermediate).
#[inline(always)]
fn tile_pass<T: Elem, const I: usize, const O: usize>(
    (src, sg): (&[T], Grid),
    tmp: &mut [T],
    (dst, dg): (&mut [T], Grid),
    c: usize,
    f: impl Fn([T; I]) -> [T; O] + Copy,
) {
    // Columns: tmp[q * O + o] = f(column q)[o].
    for q in 0..I {
        pass(
            (&src[q * sg.col..], sg.row),
            (&mut tmp[q * O * c..], c),
            c,
            f,
        );
    }
    // Rows: dst[o, p] = f(row o of tmp)[p].
    for o in 0..O {
        pass(
            (&tmp[o * c..], O * c),
            (&mut dst[o * dg.row..], dg.col),
            c,
            f,
        );
    }
}

/// `U (cin, N * N, cout)` from `wmat (cout, 9 cin)`: per input channel, its transformed
/// positions' vectors over the output channels.
pub(crate) fn weights<T: Elem>(wmat: &[T], g: &Wino) -> Vec<T> {
    match g.variant {
        Variant::F2 => weight_transform::<T, 4, 2, F2>(wmat, g, false),
        Variant::F4 => weight_transform::<T, 6, 4, F4>(wmat, g, false),
        Variant::F5 => weight_transform::<T, 7, 5, F5>(wmat, g, false),
    }
}

/// `dW (cout, 9 cin)` from the transformed-domain gradient `dU (cin, N * N, cout)`: the
/// adjoint of [`weights`].
pub(crate) fn weights_adjoint<T: Elem>(du: &[T], g: &Wino) -> Vec<T> {
    let kt = match g.variant {
        Variant::F2 => weight_transform::<T, 4, 2, F2>(du, g, true),
        Variant::F4 => weight_transform::<T, 6, 4, F4>(du, g, true),
        Variant::F5 => weight_transform::<T, 7, 5, F5>(du, g, true),
    };
    // (cin, 9, cout) -> wmat's (cout, 9, cin).
    let (cin, cout) = (g.cin, g.cout);
    let mut dw = vec![T::ZERO; cout * 9 * cin];
    for (ct, row) in kt.chunks_exact(cout).enumerate() {
        let (c, t) = (ct / 9, ct % 9);
        for (co, &v) in row.iter().enumerate() {
            dw[(co * 9 + t) * cin + c] = v;
        }
    }
    dw
}

/// [`weights`] (`adjoint` false: `wmat (cout, 9 cin)` to `U (cin, N * N, cout)`) or the
/// transform of [`weights_adjoint`] (`dU (cin, N * N, cout)` to `(cin, 9, cout)`), input
/// channels in two halves on two threads, each inside `pulp`'s dispatch.
fn weight_transform<T: Elem, const N: usize, const O: usize, X: Tile<N, O>>(
    src: &[T],
    g: &Wino,
    adjoint: bool,
) -> Vec<T> {
    let per = if adjoint { 9 } else { N * N } * g.cout;
    let half = g.cin.div_ceil(2);
    let run = |c0: usize, part: Part<'_, T>| {
        let dst = part.zeroed();
        let job = WeightJob::<T, X, N, O> {
            src,
            g,
            c0,
            dst,
            adjoint,
            tile: PhantomData,
        };
        pulp::Arch::new().dispatch(job);
    };
    fill(g.cin * per, |all| {
        let (a, b) = all.split_at(half * per);
        join(|| run(0, a), || run(half, b));
    })
    .0
}

/// Input channels `c0..` of a weight transform, their outputs in `dst`.
struct WeightJob<'a, T: Elem, X, const N: usize, const O: usize> {
    src: &'a [T],
    g: &'a Wino,
    c0: usize,
    dst: &'a mut [T],
    adjoint: bool,
    tile: PhantomData<X>,
}

impl<T: Elem, X: Tile<N, O>, const N: usize, const O: usize> pulp::WithSimd
    for WeightJob<'_, T, X, N, O>
{
    type Output = ();
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _simd: S) {
        let (cin, cout, p) = (self.g.cin, self.g.cout, N * N);
        let mut tmp = vec![T::ZERO; 3 * N * cout];
        if self.adjoint {
            // dU[c] (N x N vectors) -> G^T dU[c] G (3 x 3).
            for (i, d) in self.dst.chunks_exact_mut(9 * cout).enumerate() {
                let src = (&self.src[(self.c0 + i) * p * cout..], Grid::packed(N, cout));
                tile_pass(src, &mut tmp, (d, Grid::packed(3, cout)), cout, X::gt);
            }
            return;
        }
        // The channel's nine taps as vectors over the output channels, then G k G^T.
        let mut k9 = vec![T::ZERO; 9 * cout];
        for (i, d) in self.dst.chunks_exact_mut(p * cout).enumerate() {
            let c = self.c0 + i;
            for (co, row) in self.src.chunks_exact(9 * cin).take(cout).enumerate() {
                for t in 0..9 {
                    k9[t * cout + co] = row[t * cin + c];
                }
            }
            let src = (&k9[..], Grid::packed(3, cout));
            tile_pass(src, &mut tmp, (d, Grid::packed(N, cout)), cout, X::g);
        }
    }
}

/// Per-thread buffers for one chunk (reused between calls: see [`SPARE`]).
pub(crate) struct Buffers<T: Elem> {
    /// `V (t, P, cin)`, `P` the variant's transformed positions.
    v: Vec<T>,
    /// `gM (t, P, cout)`.
    gm: Vec<T>,
    /// A gemm result `(t, P, max(cin, cout))`.
    out: Vec<T>,
    /// The chunk's images in a zero frame, for the input transforms.
    frame: Vec<T>,
    /// Per-tile intermediates `(P, max(cin, cout))` each.
    tmp: Vec<T>,
    scratch: Vec<T>,
}

thread_local! {
    /// Each thread's spare [`Buffers`] vectors, kept between calls: a buffer is zero-filled as
    /// it grows, and a fresh set for every call cost ~50 MB of `memset` per training step of
    /// the Fashion-MNIST model. Holds the largest chunk buffers a thread has used (a few MB).
    static SPARE: std::cell::RefCell<Vec<Box<dyn std::any::Any>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Most spare buffer sets one thread keeps.
const MAX_SPARE: usize = 2;

impl<T: Elem> Buffers<T> {
    /// Buffers for one layer's chunks: a spare set of this thread's if there is one (the
    /// chunk buffers grow on first use).
    pub fn new(g: &Wino) -> Self {
        let spare = SPARE.with(|s| {
            let mut s = s.borrow_mut();
            let i = s.iter().position(|b| b.is::<[Vec<T>; 6]>())?;
            s.swap_remove(i).downcast::<[Vec<T>; 6]>().ok()
        });
        let [v, gm, out, frame, mut tmp, mut scratch] = spare.map_or_else(Default::default, |b| *b);
        let len = g.positions() * g.cin.max(g.cout);
        sized(&mut tmp, len);
        sized(&mut scratch, len);
        Self {
            v,
            gm,
            out,
            frame,
            tmp,
            scratch,
        }
    }
}

impl<T: Elem> Drop for Buffers<T> {
    fn drop(&mut self) {
        use std::mem::take;
        let kept = [
            take(&mut self.v),
            take(&mut self.gm),
            take(&mut self.out),
            take(&mut self.frame),
            take(&mut self.tmp),
            take(&mut self.scratch),
        ];
        // `try_with`: a thread being torn down frees the buffers instead.
        let _ = SPARE.try_with(|s| {
            let mut s = s.borrow_mut();
            if s.len() < MAX_SPARE {
                s.push(Box::new(kept));
            }
        });
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

/// The transformed tiles `(t, N * N, c)` of `n` images `data (n, ih, iw, c)`: tile
/// `(ty, tx)`'s `S x S` window starts at row `m ty - off`, column `m tx - off` of its image,
/// zeros outside the image, and goes through the 2-D form of `f`. The images are first copied
/// into a zero frame wide enough for every window (`frame`), so that each transform reads its
/// window in place, without a bounds check or a copy per pixel.
#[inline(always)]
fn transform_tiles<T: Elem, const S: usize, const N: usize>(
    (data, (ih, iw, c)): (&[T], (usize, usize, usize)),
    (n, off): (usize, usize),
    g: &Wino,
    (frame, tmp): (&mut Vec<T>, &mut [T]),
    out: &mut Vec<T>,
    f: impl Fn([T; S]) -> [T; N] + Copy,
) {
    let m = g.m();
    let (ph, pw) = ((g.th() - 1) * m + S, (g.tw() - 1) * m + S);
    let frame = sized(frame, n * ph * pw * c);
    // Each frame row written once: the image's row between zeros, or zeros (the buffer is
    // reused, so the border is rewritten every time).
    let images = data.chunks_exact(ih * iw * c).take(n);
    for (img, fimg) in images.zip(frame.chunks_exact_mut(ph * pw * c)) {
        for (r, frow) in fimg.chunks_exact_mut(pw * c).enumerate() {
            match r.checked_sub(off).filter(|&y| y < ih) {
                Some(y) => {
                    let (left, rest) = frow.split_at_mut(off * c);
                    let (mid, right) = rest.split_at_mut(iw * c);
                    left.fill(T::ZERO);
                    mid.copy_from_slice(&img[y * iw * c..][..iw * c]);
                    right.fill(T::ZERO);
                }
                None => frow.fill(T::ZERO),
            }
        }
    }
    let grid = Grid {
        row: pw * c,
        col: c,
    };
    for (t, block) in sized(out, n * g.tiles() * N * N * c)
        .chunks_exact_mut(N * N * c)
        .enumerate()
    {
        let (i, ty, tx) = g.tile(t);
        let src = &frame[((i * ph + m * ty) * pw + m * tx) * c..];
        tile_pass((src, grid), tmp, (block, Grid::packed(N, c)), c, f);
    }
}

/// `V (t, N * N, cin)` of the `n` images `x (n, h, w, cin)`.
#[inline(always)]
fn input_transform<T: Elem, const N: usize, const O: usize, X: Tile<N, O>>(
    x: &[T],
    n: usize,
    g: &Wino,
    scratch: (&mut Vec<T>, &mut [T]),
    v: &mut Vec<T>,
) {
    let data = (x, (g.h, g.w, g.cin));
    transform_tiles(data, (n, g.pad), g, scratch, v, X::bt);
}

/// `gM (t, N * N, cout)` of the output gradients `gy (n, oh, ow, cout)`.
#[inline(always)]
fn grad_output_transform<T: Elem, const N: usize, const O: usize, X: Tile<N, O>>(
    gy: &[T],
    n: usize,
    g: &Wino,
    scratch: (&mut Vec<T>, &mut [T]),
    gm: &mut Vec<T>,
) {
    let data = (gy, (g.oh, g.ow, g.cout));
    transform_tiles(data, (n, 0), g, scratch, gm, X::a);
}

/// The `P = N * N` gemms `out[:, xi, :] (t, n) = lhs[:, xi, :] (t, k) @ rhs[xi] (k, n)`,
/// `lhs (t, P, k)`, `out (t, P, n)` (a tile's transformed vectors consecutive, as the output
/// transform reads them), `rhs[xi]` at `xi * step` with strides `rhs_strides`.
fn gemms<T: Elem>(
    (tiles, p): (usize, usize),
    (k, n): (usize, usize),
    lhs: &[T],
    (rhs, step, rhs_strides): (&[T], usize, (usize, usize)),
    out: &mut Vec<T>,
) {
    let out = sized(out, tiles * p * n);
    for xi in 0..p {
        gemm_rows(
            (tiles, n, k),
            &lhs[xi * k..],
            (p * k, 1),
            &rhs[xi * step..],
            rhs_strides,
            (&mut out[xi * n..], p * n),
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
    input_transform::<T, N, O, X>(x, n, g, (&mut bufs.frame, &mut bufs.tmp), &mut bufs.v);
    // U[xi] (cin, cout) at xi * cout, rows N * N * cout apart.
    let rhs = (u, c, (N * N * c, 1));
    gemms((tiles, N * N), (g.cin, c), &bufs.v, rhs, &mut bufs.out);
    let (m, tmp, scratch) = (&bufs.out, &mut bufs.tmp, &mut bufs.scratch);
    for t in 0..tiles {
        let (i, ty, tx) = g.tile(t);
        let img = &mut y[i * g.out_len()..(i + 1) * g.out_len()];
        let src = (&m[t * N * N * c..], Grid::packed(N, c));
        match (g.out_pixel(ty, tx, 0, 0), g.out_pixel(ty, tx, O - 1, O - 1)) {
            // Inside the output: written in place.
            (Some(first), Some(_)) => {
                let dst = Grid {
                    row: g.ow * c,
                    col: c,
                };
                tile_pass(src, tmp, (&mut img[first * c..], dst), c, X::at);
            }
            // Over the border: through `scratch`, the pixels inside copied.
            _ => {
                tile_pass(src, tmp, (&mut scratch[..], Grid::packed(O, c)), c, X::at);
                for (p, val) in scratch.chunks_exact(c).take(O * O).enumerate() {
                    if let Some(px) = g.out_pixel(ty, tx, p / O, p % O) {
                        img[px * c..(px + 1) * c].copy_from_slice(val);
                    }
                }
            }
        }
    }
}

/// `gx (n, h, w, cin) += conv^T(gy (n, oh, ow, cout))` with transformed weights `u` (the
/// caller zero-fills `gx`).
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
    grad_output_transform::<T, N, O, X>(gy, n, g, (&mut bufs.frame, &mut bufs.tmp), &mut bufs.gm);
    // gV[xi] = gM[:, xi, :] @ U[xi]^T: U[xi] (cin, cout) read transposed.
    let p = N * N;
    let rhs = (u, g.cout, (1, p * g.cout));
    gemms((tiles, p), (g.cout, c), &bufs.gm, rhs, &mut bufs.out);
    let (gv, tmp, scratch) = (&bufs.out, &mut bufs.tmp, &mut bufs.scratch);
    for t in 0..tiles {
        let (i, ty, tx) = g.tile(t);
        let img = &mut gx[i * g.in_len()..(i + 1) * g.in_len()];
        let src = (&gv[t * p * c..], Grid::packed(N, c));
        tile_pass(src, tmp, (&mut scratch[..], Grid::packed(N, c)), c, X::b);
        for (q, val) in scratch.chunks_exact(c).take(p).enumerate() {
            if let Some(px) = g.in_pixel(ty, tx, q / N, q % N) {
                for (d, &v) in img[px * c..(px + 1) * c].iter_mut().zip(val) {
                    *d += v;
                }
            }
        }
    }
}

/// `du (cin, N * N, cout) += sum_tiles V[:, xi]^T gM[:, xi]` for the images
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
    input_transform::<T, N, O, X>(x, n, g, (&mut bufs.frame, &mut bufs.tmp), &mut bufs.v);
    grad_output_transform::<T, N, O, X>(gy, n, g, (&mut bufs.frame, &mut bufs.tmp), &mut bufs.gm);
    // dU (cin, P, cout): position xi's (cin, cout) at xi * cout, rows P * cout apart.
    for xi in 0..p {
        gemm_strided(
            (cin, cout, tiles),
            &bufs.v[xi * cin..],
            (1, p * cin),
            &bufs.gm[xi * cout..],
            (p * cout, 1),
            (&mut du[xi * cout..], p * cout),
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
    /// `gx (n, h, w, cin) += conv^T(gy (n, oh, ow, cout))` with transformed weights `u`
    /// (zero-filled by the caller).
    ConvT {
        gy: &'a [T],
        u: &'a [T],
        gx: &'a mut [T],
    },
    /// `du (cin, N * N, cout) +=` the transformed weight gradient of `x` and `gy`.
    WeightGrad {
        x: &'a [T],
        gy: &'a [T],
        du: &'a mut [T],
    },
}

/// A chunk's kernel inside `pulp`'s target-feature context: the transforms (all
/// `#[inline(always)]`) are compiled and vectorised for the best SIMD level of the CPU at hand.
struct Job<'a, T: Elem, X, const N: usize, const O: usize> {
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
