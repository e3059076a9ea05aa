//! The kernels of the input-gradient pass: the block's vector-Jacobian product for a pooled
//! gradient ([`vjp_k`]) and its backward for an adjoint of the result ([`vjp_bwd_k`]), each a
//! pass of per-channel sums and a pass writing the outputs (see the notation in [`super`]).

use super::super::elem::Elem;
use super::dims::{Dims, INACTIVE};
use super::prep::Prep;
use super::rows::{pick, write_row, Partials, Routed};
use super::split::{split_run_filled, split_sum, Half};
use std::ops::Range;

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
pub(super) fn vjp_k<T: Elem>(
    gp: &[T],
    y: &[T],
    prep: &Prep<T>,
    d: Dims,
) -> (Vec<T>, Vec<f64>, Vec<f64>) {
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
pub(super) fn vjp_bwd_k<T: Elem>(
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
