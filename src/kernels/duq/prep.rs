//! A block's batch statistics and argmax map ([`Prep`]): the per-channel moments of the
//! convolution output, the normalisation constants, and each pooling window's active argmax,
//! computed once by the first kernel that needs them and [`Shared`] by the ops of one pair.

use super::super::elem::Elem;
use super::dims::{Dims, INACTIVE};
use super::rows::block_sums;
use super::split::{split_run, split_sum, Half};
use candle_core::{Result, WithDType};
use std::ops::Range;
use std::sync::OnceLock;

/// Batch-norm epsilon (PyTorch's default).
pub(super) const EPS: f64 = 1e-5;

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

/// What every kernel recomputes from `y` and the parameters.
pub(super) struct Block<T> {
    d: Dims,
    /// Per channel, `f64`: `s`, `gamma`, and the batch mean and biased variance.
    pub(super) s: Vec<f64>,
    pub(super) gamma: Vec<f64>,
    pub(super) mean: Vec<f64>,
    pub(super) var: Vec<f64>,
    /// Per channel, `T`: `mu`, `beta`.
    pub(super) mu_t: Vec<T>,
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
    pub(super) fn argmax(&self, y: &[T]) -> (Vec<u8>, Vec<T>) {
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
pub(super) struct Prep<T> {
    pub(super) block: Block<T>,
    pub(super) map: Vec<u8>,
}

/// [`Prep`] of either float type.
pub(super) enum Prepared {
    F32(Prep<f32>),
    F64(Prep<f64>),
}

/// The float types of the kernels, with access to their [`Prepared`] variant.
pub(super) trait Float: Elem + WithDType {
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
pub(super) struct Shared(pub(super) OnceLock<Prepared>);

impl Shared {
    /// The preparation for `y`, `params` (computed now if this is the first use; with the
    /// pooled output when computed here).
    pub(super) fn prep<T: Float>(
        &self,
        y: &[T],
        params: &[T],
        d: Dims,
    ) -> Result<(&Prep<T>, Option<Vec<T>>)> {
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
