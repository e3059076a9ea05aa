//! How every fused kernel runs: a [`Half`] of the work on a range of images, compiled per SIMD
//! level through `pulp`, run on the batch's two fixed halves in parallel ([`split_run`], with
//! new zero-filled outputs [`split_run_filled`], or summed per channel [`split_sum`]).

use super::super::elem::Elem;
use super::super::output::{fill, Part};
use super::super::threading::join;
use super::dims::Dims;
use std::ops::Range;

/// One kernel's work on a range of images: `run` is compiled once per SIMD level `S` (through
/// `pulp`'s dispatch: AVX-512, AVX2 or the baseline), and the closures inside it are
/// instantiated per level, so they inline there and their loops vectorise for the CPU at hand.
pub(super) trait Half: Sync {
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
pub(super) fn split_run<H: Half>(
    d: &Dims,
    half: &H,
    a: (&mut [H::A], usize),
    b: (&mut [H::B], usize),
) -> [H::Out; 2] {
    let [h0, h1] = d.halves();
    let (a0, a1) = a.0.split_at_mut(h0.len() * a.1);
    let (b0, b1) = b.0.split_at_mut(h0.len() * b.1);
    let job = |imgs, a, b| pulp::Arch::new().dispatch(Job { half, imgs, a, b });
    let (x, y) = join(|| job(h0, a0, b0), || job(h1, a1, b1));
    [x, y]
}

/// [`split_run`] into two new outputs of `a_per` and `b_per` elements per image, each half's
/// parts zero-filled in the thread that writes them (see [`fill`]).
pub(super) fn split_run_filled<T: Elem, H: Half<A = T, B = T>>(
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
            let (x, y) = join(|| job(h0, a0, b0), || job(h1, a1, b1));
            [x, y]
        })
    });
    (a, b, out)
}

/// The sum over the batch's two halves of `half`'s per-channel partial sums, computed in
/// parallel and added in a fixed order (so results do not depend on the thread count).
pub(super) fn split_sum<const K: usize, H: Half<A = (), B = (), Out = [Vec<f64>; K]>>(
    d: &Dims,
    half: &H,
) -> [Vec<f64>; K] {
    let [mut a, b] = split_run(d, half, (&mut [], 0), (&mut [], 0));
    for (x, y) in a.iter_mut().zip(&b) {
        x.iter_mut().zip(y).for_each(|(u, v)| *u += v);
    }
    a
}
