//! The greedy selection rules of Holzmüller et al. (2023) in feature space, each an `add`
//! (condition the state on one more selected row) and a `next` (the row to add), run by one
//! loop: in TP mode the labeled rows are added first, in the order given; then `k` pool rows.
//! When a rule finds no row worth adding (its best score is not positive, or its sampling
//! weights are all zero) the batch is filled with pool rows drawn uniformly from the rest,
//! as the reference implementation does.
//!
//! Every step reads each row at most once (`O((n + m) p)`; MaxDet only when its near rows no
//! longer hold the largest variance): no `n x n` matrix is ever formed.
//! Ties go to the lowest position, as `argmax` does in the reference. The distance rules
//! (MaxDist, k-means++, LCMD) are in `distance.rs`.

use super::distance::dot;
use super::transform::{gram, Rows, BLOCK};
use crate::kernels::matmul_nt;
use crate::linalg::unit;
use crate::ScoreError;
use rand::RngCore;

/// A rule's state over the rows (pool first, then labeled rows in TP mode).
pub(super) trait Greedy {
    /// The next pool row, or `None` when the rule has no row worth adding.
    fn next(&mut self, chosen: &[bool], added: usize, rng: &mut dyn RngCore) -> Option<usize>;
    /// Conditions on row `j` (a pool row, or `n + i` for labeled row `i`), the `added`-th.
    fn add(&mut self, j: usize, added: usize);
    /// Conditions on rows `first..first + m` in order, the first of them the `added`-th.
    fn add_many(&mut self, first: usize, m: usize, added: usize) {
        for i in 0..m {
            self.add(first + i, added + i);
        }
    }
}

/// Runs `state` for `k` picks among the first `n` rows, after adding rows `n..n + m`: the
/// picks, and whether the rule stopped early and the rest were drawn at random.
pub(super) fn run(
    state: &mut dyn Greedy,
    (n, m): (usize, usize),
    k: usize,
    rng: &mut dyn RngCore,
) -> (Vec<usize>, bool) {
    state.add_many(n, m, 0);
    let mut added = m;
    let mut chosen = vec![false; n];
    let mut picks = Vec::with_capacity(k);
    while picks.len() < k {
        match state.next(&chosen, added, rng) {
            Some(j) if j < n && !chosen[j] => {
                state.add(j, added);
                added += 1;
                chosen[j] = true;
                picks.push(j);
            }
            _ => {
                fill_random(&mut picks, &mut chosen, k, rng);
                return (picks, true);
            }
        }
    }
    (picks, false)
}

/// Fills `picks` up to `k` with rows not yet chosen, uniformly at random.
pub(super) fn fill_random(
    picks: &mut Vec<usize>,
    chosen: &mut [bool],
    k: usize,
    rng: &mut dyn RngCore,
) {
    let mut rest: Vec<usize> = (0..chosen.len()).filter(|&i| !chosen[i]).collect();
    while picks.len() < k && !rest.is_empty() {
        let at = ((unit(rng) * rest.len() as f64) as usize).min(rest.len() - 1);
        let j = rest.swap_remove(at);
        chosen[j] = true;
        picks.push(j);
    }
}

/// Position of the largest `score(i)` over the first `n` rows not `chosen` (the first on
/// ties; NaN never wins), with its value.
pub(super) fn argmax(
    n: usize,
    chosen: &[bool],
    score: impl Fn(usize) -> f64,
) -> Option<(usize, f64)> {
    let mut best: Option<(usize, f64)> = None;
    for i in (0..n).filter(|&i| !chosen[i]) {
        let s = score(i);
        if best.is_none_or(|(_, b)| s > b) && !s.is_nan() {
            best = Some((i, s));
        }
    }
    best
}

/// One pass over the rows: for each row `x_i`, its products with each vector of `with` (taken
/// before the update) into `out[i * with.len()..]`, then `x_i -= step(x_i . with[0]) v`. The
/// rows are split over the cores in contiguous runs; each row is read and written once.
fn project_out(
    rows: &mut Rows,
    with: &[&[f64]],
    v: &[f64],
    step: impl Fn(f64) -> f64 + Sync,
) -> Vec<f64> {
    let (p, w, n) = (rows.p, with.len(), rows.len());
    let mut out = vec![0f64; n * w];
    let threads = crate::kernels::cores();
    let per = n.div_ceil(threads.min(n / 512).max(1)).max(1);
    let step = &step;
    std::thread::scope(|s| {
        for (xs, os) in rows.x.chunks_mut(per * p).zip(out.chunks_mut(per * w)) {
            s.spawn(move || {
                for (x, o) in xs.chunks_exact_mut(p).zip(os.chunks_exact_mut(w)) {
                    for (slot, u) in o.iter_mut().zip(with) {
                        *slot = dot(x, u);
                    }
                    let c = step(o[0]);
                    x.iter_mut().zip(v).for_each(|(a, b)| *a -= c * b);
                }
            });
        }
    });
    out
}

/// MaxDet: greedy maximisation of `det(K_batch + sigma^2 I)`, by the largest posterior
/// variance given the picks so far (with noise `sigma^2`). Conditioning on a pick `phi` maps
/// every row `x` to `x A` with `A = I - beta phi phi^T`; the factors are kept, and a pick's
/// covariance with row `x_0` is `x_0 . w` with `w = A_1 ... A_t phi`, so the rows are never
/// rewritten and a row's variance is brought up to date by subtracting `(x_0 . w)^2 / d` for
/// each pick it has not seen.
///
/// Variances only fall, so a stale one bounds the current one from above. Only the [`NEAR`]
/// rows of largest variance are kept current after each pick; while the best of them beats
/// every stale bound it is the exact argmax, and when it does not, every row is brought up to
/// date at once (one matrix product against the pending picks' `w`, instead of one pass over
/// the rows per pick) and the near rows are chosen again.
pub(super) struct MaxDet {
    rows: Rows,
    /// Row `i`'s variance given the first `upto[i]` factors.
    diag: Vec<f64>,
    upto: Vec<usize>,
    factors: Vec<Factor>,
    /// Each factor's `w (p)`, one after another: a factor's covariance with row `x_0` is
    /// `x_0 . w`.
    ws: Vec<f64>,
    /// The pool rows kept current, in position order, and the largest stale variance of the
    /// other rows not chosen.
    near: Vec<usize>,
    bound: f64,
    /// Whether every pool row is current (no pick since the last refresh).
    fresh: bool,
    /// How many near rows a refresh keeps ([`NEAR`]).
    keep: usize,
    sigma: f64,
    n: usize,
}

/// One conditioning: the added row as it was then, its `beta`, and the variance `d` it had.
struct Factor {
    phi: Vec<f64>,
    beta: f64,
    d: f64,
}

impl Factor {
    /// `v <- A v` with `A = I - beta phi phi^T` (symmetric, so also `v A`).
    fn apply(&self, v: &mut [f64]) {
        let c = self.beta * dot(v, &self.phi);
        v.iter_mut().zip(&self.phi).for_each(|(a, b)| *a -= c * b);
    }
}

/// Lowers variance `g` by `t^2 / d` for each of `factors` and its product `t` with the row.
fn lower(g: &mut f64, products: impl Iterator<Item = f64>, factors: &[Factor]) {
    for (t, f) in products.zip(factors) {
        *g -= t * t / f.d;
    }
}

/// The pool rows MaxDet keeps current between refreshes.
const NEAR: usize = 1024;

impl MaxDet {
    pub(super) fn new(rows: Rows, n: usize, sigma: f64) -> Self {
        let diag: Vec<f64> = rows.diag().iter().map(|d| d + sigma * sigma).collect();
        Self {
            upto: vec![0; diag.len()],
            rows,
            diag,
            factors: Vec::new(),
            ws: Vec::new(),
            near: Vec::new(),
            bound: f64::INFINITY,
            fresh: false,
            keep: NEAR,
            sigma,
            n,
        }
    }

    /// Row `j` conditioned on every factor so far: `x_0 A_1 ... A_t`.
    fn current_row(&self, j: usize) -> Vec<f64> {
        let mut x = self.rows.row(j).to_vec();
        self.factors.iter().for_each(|f| f.apply(&mut x));
        x
    }

    /// `A_1 ... A_t v`, applied from the last factor back.
    fn pulled_back(&self, v: &[f64]) -> Vec<f64> {
        let mut v = v.to_vec();
        self.factors.iter().rev().for_each(|f| f.apply(&mut v));
        v
    }

    /// Conditions on row `j` of variance `d` (noise included) with noise `s`: a factor that
    /// every other row's variance is brought up to date with later.
    fn push(&mut self, j: usize, d: f64, s: f64) {
        let beta = 1.0 / (d.sqrt() * (d.sqrt() + s));
        let phi = self.current_row(j);
        let w = self.pulled_back(&phi);
        self.ws.extend_from_slice(&w);
        self.factors.push(Factor { phi, beta, d });
    }

    /// The Gaussian-process posterior given rows `first..first + m` with noise `s`: each
    /// row conditioned on in turn. With `s = 0` a row in the span of those before it leaves
    /// nothing to condition on (its variance, noise included, under `1e-12` of its prior one)
    /// and is passed over rather than divided by zero.
    pub(super) fn condition(&mut self, first: usize, m: usize, s: f64) {
        let noise = self.sigma * self.sigma;
        for j in first..first + m {
            let prior = self.diag[j] - noise;
            self.bring(j);
            let d = self.diag[j] - noise;
            if d + s * s > 1e-12 * prior {
                self.push(j, d + s * s, s);
            }
        }
        self.fresh = false;
    }

    /// Brings row `i`'s variance up to date, one factor at a time.
    fn bring(&mut self, i: usize) {
        let (x, p, from) = (self.rows.row(i), self.rows.p, self.upto[i]);
        let products = self.ws[from * p..].chunks_exact(p).map(|w| dot(x, w));
        lower(&mut self.diag[i], products, &self.factors[from..]);
        self.upto[i] = self.factors.len();
    }

    /// Brings every pool row up to date (a block of rows at a time against the `w` of the
    /// factors it has not seen: one matrix product instead of a pass over the rows per pick),
    /// then keeps the [`NEAR`] largest variances not chosen as the near rows. The product
    /// rounds differently from [`MaxDet::bring`]'s dot products, so two identical rows, one
    /// near and one not, may differ in the last bit until the next refresh.
    fn refresh(&mut self, chosen: &[bool]) {
        let (p, n, len) = (self.rows.p, self.n, self.factors.len());
        let from = self.upto[..n].iter().copied().min().unwrap_or(len);
        if from < len {
            let (w, b) = (&self.ws[from * p..], len - from);
            for (at, block) in self.rows.x[..n * p].chunks(BLOCK * p).enumerate() {
                let prods = matmul_nt(block, w, (block.len() / p, b, p));
                for (r, t) in prods.chunks_exact(b).enumerate() {
                    let i = at * BLOCK + r;
                    let seen = self.upto[i] - from;
                    let unseen = &self.factors[from + seen..];
                    lower(&mut self.diag[i], t[seen..].iter().copied(), unseen);
                    self.upto[i] = len;
                }
            }
        }
        let diag = &self.diag;
        let mut order: Vec<usize> = (0..n)
            .filter(|&i| !chosen[i] && !diag[i].is_nan())
            .collect();
        let first = |a: &usize, b: &usize| diag[*b].total_cmp(&diag[*a]).then(a.cmp(b));
        let keep = self.keep.min(order.len());
        if keep < order.len() {
            order.select_nth_unstable_by(keep, first);
        }
        let rest = order[keep..].iter().map(|&i| diag[i]);
        self.bound = rest.fold(f64::NEG_INFINITY, f64::max);
        order.truncate(keep);
        order.sort_unstable();
        self.near = order;
        self.fresh = true;
    }
}

impl Greedy for MaxDet {
    fn next(&mut self, chosen: &[bool], _: usize, _: &mut dyn RngCore) -> Option<usize> {
        loop {
            // The first largest variance among the near rows (NaN never wins).
            let best = self
                .near
                .iter()
                .filter(|&&i| !chosen[i] && !self.diag[i].is_nan())
                .fold(None, |best: Option<(usize, f64)>, &i| match best {
                    Some((_, b)) if self.diag[i] <= b => best,
                    _ => Some((i, self.diag[i])),
                });
            // Fresh, the near rows hold the largest variances, ties to the lowest position.
            match best {
                Some((i, s)) if self.fresh || s > self.bound => return (s > 0.0).then_some(i),
                None if self.fresh => return None,
                _ => self.refresh(chosen),
            }
        }
    }

    fn add(&mut self, j: usize, _: usize) {
        self.bring(j);
        self.push(j, self.diag[j], self.sigma);
        let near = std::mem::take(&mut self.near);
        for &i in &near {
            self.bring(i);
        }
        self.near = near;
        self.fresh = false;
    }
}

/// BAIT (Ash et al. 2021) in feature space for regression: greedily the row that most reduces
/// `tr(C_post)`-weighted uncertainty, `phi^T C phi / (|phi|^2 + sigma^2)` with `C` the
/// second-moment matrix of the pool (and labeled) rows, both conditioned after each pick; the
/// forward-backward variant over-selects and then drops the rows whose removal costs least.
pub(super) struct Bait {
    rows: Rows,
    diag: Vec<f64>,
    cov: Vec<f64>,
    numer: Vec<f64>,
    sigma: f64,
    n: usize,
}

impl Bait {
    /// `rows`: the pool's (and in TP mode the labeled rows after them); `extra`: labeled rows
    /// that join `C` only (P mode).
    pub(super) fn new(rows: Rows, extra: Option<&Rows>, n: usize, sigma: f64) -> Self {
        let mut cov = gram(&rows);
        if let Some(t) = extra.filter(|t| t.len() > 0) {
            cov.iter_mut().zip(gram(t)).for_each(|(a, b)| *a += b);
        }
        let numer = quad_forms(&rows, &cov);
        let diag = rows.diag();
        Self {
            rows,
            diag,
            cov,
            numer,
            sigma,
            n,
        }
    }

    fn update(&mut self, j: usize, denom: f64, sign: f64) {
        let (p, sigma) = (self.rows.p, self.sigma);
        let beta = 1.0 / (denom.sqrt() * (denom.sqrt() + sigma));
        let phi = self.rows.row(j).to_vec();
        let cov_phi: Vec<f64> = self
            .cov
            .chunks_exact(p)
            .map(|r| r.iter().zip(&phi).map(|(a, b)| a * b).sum())
            .collect();
        let phi_cov_phi = self.numer[j];
        let mult = 1.0 / denom;
        // Products with phi and with C phi from the rows before the update, in the same pass.
        let both = project_out(&mut self.rows, &[&phi, &cov_phi], &phi, |t| sign * beta * t);
        let dot: Vec<f64> = both.chunks_exact(2).map(|c| c[0]).collect();
        for (s, c) in self.numer.iter_mut().zip(both.chunks_exact(2)) {
            let (t, xc) = (c[0], c[1]);
            *s += sign * -2.0 * mult * xc * t;
            *s += mult * mult * phi_cov_phi * t * t;
        }
        for a in 0..p {
            for b in 0..p {
                let outer = cov_phi[a] * phi[b] + phi[a] * cov_phi[b];
                self.cov[a * p + b] += sign * -beta * outer;
                self.cov[a * p + b] += beta * beta * phi_cov_phi * phi[a] * phi[b];
            }
        }
        for (g, t) in self.diag.iter_mut().zip(&dot) {
            *g -= sign * t * t / denom;
        }
    }

    /// Drops picks from `picks` until `k` remain, the cheapest removal first; stops early
    /// (keeping the first `k`) when no removal has a negative cost.
    pub(super) fn backward(&mut self, picks: &mut Vec<usize>, k: usize) {
        let s2 = self.sigma * self.sigma;
        while picks.len() > k {
            let score = |&j: &usize| {
                let den = self.diag[j] - s2;
                if den >= 0.0 {
                    f64::NEG_INFINITY
                } else {
                    self.numer[j].max(0.0) / den
                }
            };
            let mut best: Option<(usize, f64)> = None;
            for (at, s) in picks.iter().map(score).enumerate() {
                if best.is_none_or(|(_, b)| s > b) && !s.is_nan() {
                    best = Some((at, s));
                }
            }
            match best {
                Some((at, s)) if s.is_finite() && s < 0.0 => {
                    let j = picks[at];
                    let denom = (s2 - self.diag[j]).max(1e-15);
                    self.update(j, denom, -1.0);
                    picks.remove(at);
                }
                _ => {
                    picks.truncate(k);
                    return;
                }
            }
        }
    }
}

impl Greedy for Bait {
    fn next(&mut self, chosen: &[bool], _: usize, _: &mut dyn RngCore) -> Option<usize> {
        let s2 = self.sigma * self.sigma;
        argmax(self.n, chosen, |i| {
            self.numer[i] / (self.diag[i] + s2 + 1e-8)
        })
        .filter(|&(_, s)| s > 0.0)
        .map(|(i, _)| i)
    }

    fn add(&mut self, j: usize, _: usize) {
        let denom = self.diag[j] + self.sigma * self.sigma;
        self.update(j, denom, 1.0);
    }
}

/// `x_i^T C x_i` for every row (`C` symmetric), a block of rows at a time.
fn quad_forms(rows: &Rows, cov: &[f64]) -> Vec<f64> {
    let p = rows.p;
    let mut out = Vec::with_capacity(rows.len());
    for block in rows.x.chunks(BLOCK * p) {
        let xc = crate::kernels::matmul_nt(block, cov, (block.len() / p, p, p));
        out.extend(
            xc.chunks_exact(p)
                .zip(block.chunks_exact(p))
                .map(|(a, b)| a.iter().zip(b).map(|(u, v)| u * v).sum::<f64>()),
        );
    }
    out
}

/// MaxDiag: the `k` pool rows of largest `|x|^2` (posterior variance), largest first.
pub(super) fn max_diag(rows: &Rows, n: usize, k: usize) -> Result<Vec<usize>, ScoreError> {
    let diag = rows.diag();
    if diag[..n].iter().any(|v| v.is_nan()) {
        return Err(ScoreError::Setting {
            setting: "features",
            why: "a kernel feature is not finite".into(),
        });
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| diag[b].total_cmp(&diag[a]).then(a.cmp(&b)));
    order.truncate(k);
    Ok(order)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// MaxDet's picks on `x` (n rows of 12, the last `m` labeled) with `keep` near rows.
    fn maxdet(x: &[f64], (n, m): (usize, usize), k: usize, keep: usize) -> Vec<usize> {
        let rows = Rows {
            x: x.to_vec(),
            p: 12,
        };
        let mut state = MaxDet::new(rows, n, 1e-3);
        state.keep = keep;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
        run(&mut state, (n, m), k, &mut rng).0
    }

    #[test]
    fn maxdet_picks_the_same_rows_whatever_rows_it_keeps_current() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        // Anisotropic rows, so that variances differ and picks condition their neighbours.
        let x: Vec<f64> = (0..330 * 12)
            .map(|i| rng.random::<f64>() * (1.0 + (i % 12) as f64))
            .collect();
        for (n, m) in [(300, 0), (300, 30)] {
            // Keeping every row current is the plain greedy loop: one pass per pick.
            let every = maxdet(&x[..(n + m) * 12], (n, m), 40, n);
            assert_eq!(every.len(), 40);
            for keep in [1, 5, 37] {
                assert_eq!(
                    maxdet(&x[..(n + m) * 12], (n, m), 40, keep),
                    every,
                    "{keep}"
                );
            }
        }
    }
}
