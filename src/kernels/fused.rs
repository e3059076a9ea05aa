//! Inference-only fusions (no autograd through the first): [`ConvReluPool`], convolution, bias,
//! ReLU and 2x2 max-pool over small chunks of images, so intermediates stay in cache; and
//! [`BiasReluPool`], bias, ReLU and 2x2 max-pool in one pass, with an exact backward built
//! from [`MaxPoolRoute`].

use super::dispatch::with_float;
use super::elem::Elem;
use super::enabled::entry;
use super::gemm::gemm_nt;
use super::im2col::{im2col_k, Im2col};
use super::pool::MaxPoolRoute;
use super::storage::{dims4, into_storage, storage_slice};
use super::threading::par_chunks;
use candle_core::{CpuStorage, CustomOp2, CustomOp3, Layout, Result, Shape, Tensor};

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
        let out = with_float!(name, [s1, s2, s3], |T| into_storage(conv_relu_pool_k(
            storage_slice::<T>(s1, l1, name)?,
            storage_slice::<T>(s2, l2, name)?,
            storage_slice::<T>(s3, l3, name)?,
            d,
            k,
            cout,
        )));
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
        let out = with_float!(self.name(), [s1, s2], |T| into_storage(bias_relu_pool_k(
            storage_slice::<T>(s1, l1, "bias-relu-pool")?,
            storage_slice::<T>(s2, l2, "bias-relu-pool")?,
            d
        )));
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
