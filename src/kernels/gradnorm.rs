//! The sparse per-candidate gradient-norm kernel of the standard CNN (REGrad, ExGrad and their
//! baselines on `nn::Cnn`): one candidate per task (parallel over candidates), all rows at
//! once. Max-pooling routes each pooled unit's gradient to a single conv position, so a row's
//! conv weight gradient is a sum of ~`pooled units` scaled im2col rows: the backward is a
//! sparse scatter instead of dense products (~15 MMAC per candidate and copy instead of ~50).
//! Fully connected layers use Gram identities
//! `||sum_i g_i a_i^T||^2 = sum_ij (g_i . g_j)(a_i . a_j)`, which also cover the average over
//! REGrad*'s perturbed copies exactly. `nn::gradnorm::autograd_grad_norms` is the generic
//! reference it is tested against.

use super::elem::Elem;
use super::gemm::gemm_nt;
use super::im2col::im2col_one;
use rayon::prelude::*;

/// Raw gradient evidence: squared norms `(n, rows, layers)` and GradNorm's L1 values `(n,)`.
#[derive(Debug, Clone, PartialEq)]
pub struct GradOut {
    /// Squared norms, row-major `(n, rows, layers)`, in `f64` (exact comparisons in tests;
    /// evidence stores `f32`).
    pub sq: Vec<f64>,
    /// Rows per candidate: classes, plus one for the expected gradient when requested.
    pub rows: usize,
    /// Number of layers.
    pub layers: usize,
    /// `||d KL(u || p) / d W_last||_1` per candidate `(n,)`, from the unperturbed copy.
    pub kl_l1: Vec<f64>,
}

/// The standard CNN's weights, reordered for the kernel (all row-major):
/// `w1 (c1, k*k*cin)`, `w2 (c2, k*k*c1)` in im2col's `(ki, kj, c)` column order,
/// `w3t (f, h)` = fc1 weight transposed, `w3 (h, f)`, `w4t (h, classes)`, `w4 (classes, h)`.
pub(crate) struct CnnWeights<T> {
    pub w1: Vec<T>,
    pub b1: Vec<T>,
    pub w2: Vec<T>,
    pub b2: Vec<T>,
    pub w3: Vec<T>,
    pub w3t: Vec<T>,
    pub b3: Vec<T>,
    pub w4: Vec<T>,
    pub w4t: Vec<T>,
    pub b4: Vec<T>,
    /// Input `(h, w, cin)`.
    pub input: (usize, usize, usize),
    /// Channels of conv1 and conv2, hidden width, classes.
    pub c1: usize,
    pub c2: usize,
    pub hidden: usize,
    pub classes: usize,
    pub k: usize,
}

/// Scratch buffers of one worker, reused across candidates.
struct Scratch<T> {
    dw1: Vec<T>,
    db1: Vec<T>,
    dw2: Vec<T>,
    db2: Vec<T>,
    dp1: Vec<T>,
    gz: Vec<Vec<T>>,
    h1: Vec<Vec<T>>,
    gh: Vec<Vec<T>>,
    flat: Vec<Vec<T>>,
}

/// Per-candidate activations of one forward pass.
struct Fwd<T> {
    u1: Vec<T>,
    amax1: Vec<u32>,
    u2: Vec<T>,
    amax2: Vec<u32>,
    flat: Vec<T>,
    h1: Vec<T>,
    p: Vec<T>,
}

/// `out += sum_j v_j * table[row_j]` for rows of length `len`, 32 lanes at a time in a
/// register accumulator, so `out` is read and written once per call.
#[inline(always)]
fn accumulate_rows<T: Elem>(
    out: &mut [T],
    terms: impl Iterator<Item = (T, usize)> + Clone,
    table: &[T],
    len: usize,
) {
    const L: usize = 96;
    let mut q = 0;
    while q + L <= len {
        let mut acc = [T::ZERO; L];
        for (v, row) in terms.clone() {
            let src: &[T; L] = table[row * len + q..row * len + q + L]
                .try_into()
                .expect("lane block");
            for j in 0..L {
                acc[j] = v.mul_add(src[j], acc[j]);
            }
        }
        for (o, a) in out[q..q + L].iter_mut().zip(acc) {
            *o += a;
        }
        q += L;
    }
    if q < len {
        for (v, row) in terms {
            for (o, &x) in out[q..len]
                .iter_mut()
                .zip(&table[row * len + q..row * len + len])
            {
                *o += v * x;
            }
        }
    }
}

/// `sum_i a_i b_i` in `f64`, accumulated in 16 lanes of `T` first so that it vectorises.
#[inline(always)]
fn dot<T: Elem>(a: &[T], b: &[T]) -> f64 {
    let mut acc = [T::ZERO; 16];
    let (ca, cb) = (a.chunks_exact(16), b.chunks_exact(16));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for j in 0..16 {
            acc[j] = x[j].mul_add(y[j], acc[j]);
        }
    }
    let tail: f64 = ra
        .iter()
        .zip(rb)
        .map(|(x, y)| x.to_f64() * y.to_f64())
        .sum();
    acc.iter().map(|v| v.to_f64()).sum::<f64>() + tail
}

#[inline(always)]
fn relu_pool<T: Elem>(y: &[T], bias: &[T], (h, w, c): (usize, usize, usize)) -> (Vec<T>, Vec<u32>) {
    let (h2, w2) = (h / 2, w / 2);
    let mut out = vec![T::ZERO; h2 * w2 * c];
    let mut amax = vec![u32::MAX; h2 * w2 * c];
    for py in 0..h2 {
        for px in 0..w2 {
            let cand = [
                (2 * py) * w + 2 * px,
                (2 * py) * w + 2 * px + 1,
                (2 * py + 1) * w + 2 * px,
                (2 * py + 1) * w + 2 * px + 1,
            ];
            // Branch-free over channels (vectorised with masked selects): first maximum wins.
            let rows = cand.map(|q| &y[q * c..(q + 1) * c]);
            let o = (py * w2 + px) * c;
            for ch in 0..c {
                let (mut bv, mut bi) = (rows[0][ch], 0u32);
                for (k, row) in rows.iter().enumerate().skip(1) {
                    let gt = row[ch] > bv;
                    bv = if gt { row[ch] } else { bv };
                    bi = if gt { k as u32 } else { bi };
                }
                let v = bv + bias[ch];
                let active = v > T::ZERO;
                out[o + ch] = if active { v } else { T::ZERO };
                // Active units route their gradient to conv position `cand[bi]`.
                amax[o + ch] = if active {
                    cand[bi as usize] as u32
                } else {
                    u32::MAX
                };
            }
        }
    }
    (out, amax)
}

impl<T: Elem> CnnWeights<T> {
    #[inline(always)]
    fn forward(&self, x: &[T]) -> Fwd<T> {
        let (h, w, cin) = self.input;
        let k = self.k;
        let (oh1, ow1) = (h + 1 - k, w + 1 - k);
        let u1 = im2col_one(x, (h, w, cin), k);
        let mut y1 = vec![T::ZERO; oh1 * ow1 * self.c1];
        gemm_nt(oh1 * ow1, self.c1, k * k * cin, &u1, &self.w1, &mut y1);
        let (p1, amax1) = relu_pool(&y1, &self.b1, (oh1, ow1, self.c1));
        let (h2, w2) = (oh1 / 2, ow1 / 2);
        let u2 = im2col_one(&p1, (h2, w2, self.c1), k);
        let (oh2, ow2) = (h2 + 1 - k, w2 + 1 - k);
        let mut y2 = vec![T::ZERO; oh2 * ow2 * self.c2];
        gemm_nt(oh2 * ow2, self.c2, k * k * self.c1, &u2, &self.w2, &mut y2);
        let (p2, amax2) = relu_pool(&y2, &self.b2, (oh2, ow2, self.c2));
        let s = (oh2 / 2) * (ow2 / 2);
        // PyTorch's NCHW flatten order: index ch * s + spatial.
        let mut flat = vec![T::ZERO; s * self.c2];
        for sp in 0..s {
            for ch in 0..self.c2 {
                flat[ch * s + sp] = p2[sp * self.c2 + ch];
            }
        }
        let mut h1 = vec![T::ZERO; self.hidden];
        gemm_nt(1, self.hidden, flat.len(), &flat, &self.w3, &mut h1);
        for (v, &b) in h1.iter_mut().zip(&self.b3) {
            let t = *v + b;
            *v = if t > T::ZERO { t } else { T::ZERO };
        }
        let mut z = vec![T::ZERO; self.classes];
        gemm_nt(1, self.classes, self.hidden, &h1, &self.w4, &mut z);
        for (v, &b) in z.iter_mut().zip(&self.b4) {
            *v += b;
        }
        let m = z.iter().fold(z[0], |a, &v| if v > a { v } else { a });
        let e: Vec<T> = z
            .iter()
            .map(|&v| (v + T::from_f64(-m.to_f64())).exp())
            .collect();
        let sum: f64 = e.iter().map(|v| v.to_f64()).sum();
        let p = e.iter().map(|v| T::from_f64(v.to_f64() / sum)).collect();
        Fwd {
            u1,
            amax1,
            u2,
            amax2,
            flat,
            h1,
            p,
        }
    }

    /// Accumulates the conv gradients of `rows` output gradients `gz (rows, classes)` for one
    /// copy into the scratch; returns `(g_h1 (rows, hidden))` for the Gram terms.
    #[inline(always)]
    fn backward(&self, f: &Fwd<T>, gz: &[T], rows: usize, s: &mut Scratch<T>) -> Vec<T> {
        let (h, w, cin) = self.input;
        let k = self.k;
        let (oh1, ow1) = (h + 1 - k, w + 1 - k);
        let (h2, w2) = (oh1 / 2, ow1 / 2);
        let (oh2, ow2) = (h2 + 1 - k, w2 + 1 - k);
        let sp2 = (oh2 / 2) * (ow2 / 2);
        let (c1, c2) = (self.c1, self.c2);
        let (k1, k2) = (k * k * cin, k * k * c1);
        // fc2 -> h1 (relu) -> fc1 -> flat.
        let mut gh = vec![T::ZERO; rows * self.hidden];
        gemm_nt(rows, self.hidden, self.classes, gz, &self.w4t, &mut gh);
        for r in 0..rows {
            for (g, &a) in gh[r * self.hidden..(r + 1) * self.hidden]
                .iter_mut()
                .zip(&f.h1)
            {
                if a <= T::ZERO {
                    *g = T::ZERO;
                }
            }
        }
        let fl = sp2 * c2;
        let mut gf = vec![T::ZERO; rows * fl];
        gemm_nt(rows, fl, self.hidden, &gh, &self.w3t, &mut gf);
        // conv2 through pool2's argmaxes, accumulating each output in registers and writing
        // it once: dW2[r][ch] = sum over ch's active windows of v * U2[pos] (32 lanes at a
        // time); dCols2[r][pos] = sum over the channels routed to pos of v * W2[ch], then added
        // to dP1 at pos's patch (col2im).
        s.dp1.iter_mut().for_each(|v| *v = T::ZERO);
        let p1len = h2 * w2 * c1;
        let p2 = oh2 * ow2;
        // (sp, pos) per channel and (ch, sp) per conv position, as flat counting-sort
        // (CSR) arrays: offsets `och` / `opos`, entries `ech` / `epos`.
        let mut och = vec![0usize; c2 + 1];
        let mut opos = vec![0usize; p2 + 1];
        for (i, &pos) in f.amax2.iter().enumerate() {
            if pos != u32::MAX {
                och[i % c2 + 1] += 1;
                opos[pos as usize + 1] += 1;
            }
        }
        for i in 0..c2 {
            och[i + 1] += och[i];
        }
        for i in 0..p2 {
            opos[i + 1] += opos[i];
        }
        let total = och[c2];
        let (mut ech, mut epos) = (vec![(0u32, 0u32); total], vec![(0u32, 0u32); total]);
        let (mut cch, mut cpos) = (och.clone(), opos.clone());
        for (i, &pos) in f.amax2.iter().enumerate() {
            if pos != u32::MAX {
                let (sp, ch) = (i / c2, i % c2);
                ech[cch[ch]] = (sp as u32, pos);
                cch[ch] += 1;
                epos[cpos[pos as usize]] = (ch as u32, sp as u32);
                cpos[pos as usize] += 1;
            }
        }
        let mut cols = vec![T::ZERO; k2];
        for r in 0..rows {
            let g = &gf[r * fl..(r + 1) * fl];
            let dw2 = &mut s.dw2[r * c2 * k2..(r + 1) * c2 * k2];
            for ch in 0..c2 {
                let list = &ech[och[ch]..och[ch + 1]];
                if list.is_empty() {
                    continue;
                }
                s.db2[r * c2 + ch] += list
                    .iter()
                    .fold(T::ZERO, |a, &(sp, _)| a + g[ch * sp2 + sp as usize]);
                let out = &mut dw2[ch * k2..(ch + 1) * k2];
                accumulate_rows(
                    out,
                    list.iter()
                        .map(|&(sp, pos)| (g[ch * sp2 + sp as usize], pos as usize)),
                    &f.u2,
                    k2,
                );
            }
            let dp = &mut s.dp1[r * p1len..(r + 1) * p1len];
            for pos in 0..p2 {
                let list = &epos[opos[pos]..opos[pos + 1]];
                if list.is_empty() {
                    continue;
                }
                cols.iter_mut().for_each(|v| *v = T::ZERO);
                accumulate_rows(
                    &mut cols,
                    list.iter()
                        .map(|&(ch, sp)| (g[ch as usize * sp2 + sp as usize], ch as usize)),
                    &self.w2,
                    k2,
                );
                let (py, px) = (pos / ow2, pos % ow2);
                for ki in 0..k {
                    // k consecutive input pixels of one patch row are contiguous in dp.
                    let o = ((py + ki) * w2 + px) * c1;
                    for (d, &v) in dp[o..o + k * c1]
                        .iter_mut()
                        .zip(&cols[ki * k * c1..(ki + 1) * k * c1])
                    {
                        *d += v;
                    }
                }
            }
        }
        // conv1: scatter through pool1's argmaxes.
        for r in 0..rows {
            let dp = &s.dp1[r * p1len..(r + 1) * p1len];
            let dw1 = &mut s.dw1[r * c1 * k1..(r + 1) * c1 * k1];
            let db1 = &mut s.db1[r * c1..(r + 1) * c1];
            for sp in 0..h2 * w2 {
                for ch in 0..c1 {
                    let pos = f.amax1[sp * c1 + ch];
                    let v = dp[sp * c1 + ch];
                    if pos == u32::MAX || v == T::ZERO {
                        continue;
                    }
                    let urow = &f.u1[pos as usize * k1..(pos as usize + 1) * k1];
                    for (d, &u) in dw1[ch * k1..(ch + 1) * k1].iter_mut().zip(urow) {
                        *d += v * u;
                    }
                    db1[ch] += v;
                }
            }
        }
        gh
    }

    fn scratch(&self, rows: usize) -> Scratch<T> {
        let (h, w, cin) = self.input;
        let k = self.k;
        let (h2, w2) = ((h + 1 - k) / 2, (w + 1 - k) / 2);
        Scratch {
            dw1: vec![T::ZERO; rows * self.c1 * k * k * cin],
            db1: vec![T::ZERO; rows * self.c1],
            dw2: vec![T::ZERO; rows * self.c2 * k * k * self.c1],
            db2: vec![T::ZERO; rows * self.c2],
            dp1: vec![T::ZERO; rows * h2 * w2 * self.c1],
            gz: Vec::new(),
            h1: Vec::new(),
            gh: Vec::new(),
            flat: Vec::new(),
        }
    }

    /// Squared norms `(rows, 4)` and the GradNorm L1 for one candidate given its copies
    /// `(copies, h*w*cin)` (NHWC), copy 0 unperturbed.
    #[inline(always)]
    fn candidate(&self, copies: &[&[T]], expected: bool, s: &mut Scratch<T>) -> (Vec<f64>, f64) {
        let c = self.classes;
        let rows = c + usize::from(expected);
        for buf in [&mut s.dw1, &mut s.db1, &mut s.dw2, &mut s.db2] {
            buf.iter_mut().for_each(|v| *v = T::ZERO);
        }
        s.gz.clear();
        s.h1.clear();
        s.gh.clear();
        s.flat.clear();
        let mut p0: Vec<f64> = Vec::new();
        let mut kl = 0.0;
        for (i, x) in copies.iter().enumerate() {
            let f = self.forward(x);
            let p: Vec<f64> = f.p.iter().map(|v| v.to_f64()).collect();
            if i == 0 {
                p0 = p.clone();
                let u = 1.0 / c as f64;
                kl = p.iter().map(|v| (v - u).abs()).sum::<f64>()
                    * f.h1.iter().map(|v| v.to_f64().abs()).sum::<f64>();
            }
            // Rows: e_c - p for each class; expected row sum_c p0_c (e_c - p).
            let mut gz = vec![T::ZERO; rows * c];
            for r in 0..c {
                for j in 0..c {
                    gz[r * c + j] = T::from_f64(f64::from(u8::from(r == j)) - p[j]);
                }
            }
            if expected {
                for j in 0..c {
                    let v: f64 = (0..c)
                        .map(|r| p0[r] * (f64::from(u8::from(r == j)) - p[j]))
                        .sum();
                    gz[c * c + j] = T::from_f64(v);
                }
            }
            let gh = self.backward(&f, &gz, rows, s);
            s.gz.push(gz);
            s.h1.push(f.h1);
            s.gh.push(gh);
            s.flat.push(f.flat);
        }
        let n = copies.len();
        let inv = 1.0 / (n * n) as f64;
        let sq = |v: &[T]| dot(v, v);
        // Activation Grams (shared by all rows); the +1 accounts for the bias.
        let mut aa_flat = vec![0f64; n * n];
        let mut aa_h1 = vec![0f64; n * n];
        for i in 0..n {
            for j in 0..n {
                aa_flat[i * n + j] = dot(&s.flat[i], &s.flat[j]) + 1.0;
                aa_h1[i * n + j] = dot(&s.h1[i], &s.h1[j]) + 1.0;
            }
        }
        let mut out = vec![0f64; rows * 4];
        let (k1, k2) = (self.k * self.k * self.input.2, self.k * self.k * self.c1);
        let (hd, c) = (self.hidden, self.classes);
        for r in 0..rows {
            out[r * 4] = inv
                * (sq(&s.dw1[r * self.c1 * k1..(r + 1) * self.c1 * k1])
                    + sq(&s.db1[r * self.c1..(r + 1) * self.c1]));
            out[r * 4 + 1] = inv
                * (sq(&s.dw2[r * self.c2 * k2..(r + 1) * self.c2 * k2])
                    + sq(&s.db2[r * self.c2..(r + 1) * self.c2]));
            // Gram terms over copies: sum_ij (g_i . g_j)(a_i . a_j + 1).
            let (mut fc1, mut fc2) = (0.0, 0.0);
            for i in 0..n {
                for j in 0..n {
                    fc1 += dot(
                        &s.gh[i][r * hd..(r + 1) * hd],
                        &s.gh[j][r * hd..(r + 1) * hd],
                    ) * aa_flat[i * n + j];
                    fc2 += dot(&s.gz[i][r * c..(r + 1) * c], &s.gz[j][r * c..(r + 1) * c])
                        * aa_h1[i * n + j];
                }
            }
            out[r * 4 + 2] = inv * fc1;
            out[r * 4 + 3] = inv * fc2;
        }
        (out, kl)
    }
}

/// One candidate's work, run inside `pulp`'s target-feature context so that the kernel's
/// plain loops (all `#[inline(always)]`) are vectorised for the CPU at hand.
struct CandidateJob<'a, T> {
    wts: &'a CnnWeights<T>,
    copies: &'a [&'a [T]],
    expected: bool,
    scratch: &'a mut Scratch<T>,
}

impl<T: Elem> pulp::WithSimd for CandidateJob<'_, T> {
    type Output = (Vec<f64>, f64);
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _simd: S) -> Self::Output {
        self.wts.candidate(self.copies, self.expected, self.scratch)
    }
}

/// Gradient norms of the standard CNN for `x (n * copies, h * w * cin)` NHWC, each candidate's
/// copies adjacent (copy 0 unperturbed), in parallel over candidates.
pub(crate) fn cnn_grad_norms<T: Elem>(
    wts: &CnnWeights<T>,
    x: &[T],
    copies: usize,
    expected: bool,
) -> GradOut {
    let (h, w, cin) = wts.input;
    let item = h * w * cin;
    let n = x.len() / (item * copies);
    let rows = wts.classes + usize::from(expected);
    let per: Vec<(Vec<f64>, f64)> = (0..n)
        .into_par_iter()
        .map_init(
            || wts.scratch(rows),
            |s, i| {
                let cps: Vec<&[T]> = (0..copies)
                    .map(|j| &x[(i * copies + j) * item..(i * copies + j + 1) * item])
                    .collect();
                // Compiled for the best SIMD level the CPU has (AVX-512 / AVX2 / baseline).
                pulp::Arch::new().dispatch(CandidateJob {
                    wts,
                    copies: &cps,
                    expected,
                    scratch: s,
                })
            },
        )
        .collect();
    GradOut {
        sq: per.iter().flat_map(|(v, _)| v.iter().copied()).collect(),
        rows,
        layers: 4,
        kl_l1: per.iter().map(|(_, k)| *k).collect(),
    }
}
