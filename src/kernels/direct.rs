//! Direct kernels for a 3x3 convolution with one input channel (a network's first layer on
//! grey images): the convolution and its weight gradient, NHWC, stride 1, zero padding.
//!
//! Why: im2col + gemm, the general path of [`super::conv`], has only nine columns here (one
//! per tap), too few for gemm's blocking to pay; it ran at a fifth of the machine's peak and
//! was ~5 ms of a Fashion-MNIST DUQ training step. Here the nine taps' weights for a block of
//! [`LANES`] output channels stay in registers while the kernel walks an image's pixels (the
//! image first copied into a zero frame, so no tap needs a bounds check), and the loops over
//! the block's lanes vectorise inside `pulp`'s dispatch (fused multiply-adds).
//!
//! Each function handles a chunk of images on the calling thread; [`super::conv`] splits the
//! batch.

use super::elem::Elem;

/// Output channels per register block; the kernels apply when `cout` is a multiple of it.
pub(crate) const LANES: usize = 16;

/// Whether the direct kernels handle a `k x k` convolution from `cin` to `cout` channels.
pub(crate) fn applies(cin: usize, k: usize, cout: usize) -> bool {
    cin == 1 && k == 3 && cout.is_multiple_of(LANES)
}

/// Image geometry: input `h x w`, zero padding `pad`, output `oh x ow` (`h + 2 pad - 2`), and
/// `cout` output channels.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Geometry {
    pub h: usize,
    pub w: usize,
    pub pad: usize,
    pub cout: usize,
}

impl Geometry {
    fn out(&self) -> (usize, usize) {
        (self.h + 2 * self.pad - 2, self.w + 2 * self.pad - 2)
    }
    /// The frame's width.
    fn fw(&self) -> usize {
        self.w + 2 * self.pad
    }
    /// Copies image `img (h, w)` into the interior of `frame` (its border stays zero).
    fn frame<T: Elem>(&self, img: &[T], frame: &mut [T]) {
        let fw = self.fw();
        for (r, row) in img.chunks_exact(self.w).enumerate() {
            frame[(r + self.pad) * fw + self.pad..][..self.w].copy_from_slice(row);
        }
    }
    fn frame_len(&self) -> usize {
        (self.h + 2 * self.pad) * self.fw()
    }
}

/// The block `blk`'s weights for the nine taps, from `wt (9, cout)`.
#[inline(always)]
fn tap_weights<T: Elem>(wt: &[T], cout: usize, blk: usize) -> [[T; LANES]; 9] {
    std::array::from_fn(|t| {
        let mut a = [T::ZERO; LANES];
        a.copy_from_slice(&wt[t * cout + blk * LANES..][..LANES]);
        a
    })
}

/// `y (n, oh, ow, cout) = conv(x (n, h, w))` with `wt (9, cout)` (tap `3 ki + kj`); every
/// element of `y` is written.
pub(crate) fn conv<T: Elem>(x: &[T], wt: &[T], g: Geometry, y: &mut [T]) {
    pulp::Arch::new().dispatch(Conv { x, wt, g, y });
}

struct Conv<'a, T> {
    x: &'a [T],
    wt: &'a [T],
    g: Geometry,
    y: &'a mut [T],
}

impl<T: Elem> pulp::WithSimd for Conv<'_, T> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _simd: S) {
        let (g, fw) = (self.g, self.g.fw());
        let (oh, ow) = g.out();
        let mut frame = vec![T::ZERO; g.frame_len()];
        let images = self.x.chunks_exact(g.h * g.w);
        for (img, yb) in images.zip(self.y.chunks_exact_mut(oh * ow * g.cout)) {
            g.frame(img, &mut frame);
            for blk in 0..g.cout / LANES {
                let wr = tap_weights(self.wt, g.cout, blk);
                for (p, out) in yb.chunks_exact_mut(g.cout).enumerate() {
                    let (oy, ox) = (p / ow, p % ow);
                    let mut acc = [T::ZERO; LANES];
                    for (t, w) in wr.iter().enumerate() {
                        let v = frame[(oy + t / 3) * fw + ox + t % 3];
                        for j in 0..LANES {
                            acc[j] = v.mul_add(w[j], acc[j]);
                        }
                    }
                    out[blk * LANES..][..LANES].copy_from_slice(&acc);
                }
            }
        }
    }
}

/// `acc (9, cout) += sum over images and pixels of x_tap * gy` for images `x (n, h, w)` and
/// output gradients `gy (n, oh, ow, cout)`: the weight gradient, tap-major.
pub(crate) fn weight_grad<T: Elem>(x: &[T], gy: &[T], g: Geometry, acc: &mut [T]) {
    pulp::Arch::new().dispatch(WeightGrad { x, gy, g, acc });
}

struct WeightGrad<'a, T> {
    x: &'a [T],
    gy: &'a [T],
    g: Geometry,
    acc: &'a mut [T],
}

impl<T: Elem> pulp::WithSimd for WeightGrad<'_, T> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _simd: S) {
        let (g, fw) = (self.g, self.g.fw());
        let (oh, ow) = g.out();
        let mut frame = vec![T::ZERO; g.frame_len()];
        let images = self.x.chunks_exact(g.h * g.w);
        for (img, gyb) in images.zip(self.gy.chunks_exact(oh * ow * g.cout)) {
            g.frame(img, &mut frame);
            for blk in 0..g.cout / LANES {
                // One image's sums in registers, then added into the running total.
                let mut a = [[T::ZERO; LANES]; 9];
                for (p, d) in gyb.chunks_exact(g.cout).enumerate() {
                    let (oy, ox) = (p / ow, p % ow);
                    let mut dv = [T::ZERO; LANES];
                    dv.copy_from_slice(&d[blk * LANES..][..LANES]);
                    for (t, at) in a.iter_mut().enumerate() {
                        let v = frame[(oy + t / 3) * fw + ox + t % 3];
                        for j in 0..LANES {
                            at[j] = v.mul_add(dv[j], at[j]);
                        }
                    }
                }
                for (t, at) in a.iter().enumerate() {
                    let dst = &mut self.acc[t * g.cout + blk * LANES..][..LANES];
                    for (d, &v) in dst.iter_mut().zip(at) {
                        *d += v;
                    }
                }
            }
        }
    }
}
