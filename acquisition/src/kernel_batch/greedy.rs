//! The greedy selection rules of Holzmüller et al. (2023) in feature space, each an `add`
//! (condition the state on one more selected row) and a `next` (the row to add), run by one
//! loop: in TP mode the labeled rows are added first, in the order given; then `k` pool rows.
//! When a rule finds no row worth adding (its best score is not positive, or its sampling
//! weights are all zero) the batch is filled with pool rows drawn uniformly from the rest,
//! as the reference implementation does.
//!
//! Every step reads each row once (`O((n + m) p)`): no `n x n` matrix is ever formed.
//! Ties go to the lowest position, as `argmax` does in the reference. The distance rules
//! (MaxDist, k-means++, LCMD) are in `distance.rs`.

use super::distance::dot;
use super::transform::{gram, Rows, BLOCK};
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
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
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
/// every row `x` to `x A` with `A = I - beta phi phi^T`; instead of rewriting the rows, the
/// factors are kept and each pick's products with the rows are taken against the original
/// rows: `x_0 A_1 ... A_t . phi = x_0 . (A_1 ... A_t phi)`, so a step reads the rows once and
/// writes none.
pub(super) struct MaxDet {
    rows: Rows,
    diag: Vec<f64>,
    /// Every conditioning so far: the added row as it was then, and its `beta`.
    factors: Vec<(Vec<f64>, f64)>,
    sigma: f64,
    n: usize,
}

impl MaxDet {
    pub(super) fn new(rows: Rows, n: usize, sigma: f64) -> Self {
        let diag = rows.diag().iter().map(|d| d + sigma * sigma).collect();
        Self {
            rows,
            diag,
            factors: Vec::new(),
            sigma,
            n,
        }
    }

    /// Row `j` conditioned on every factor so far: `x_0 A_1 ... A_t`.
    fn current_row(&self, j: usize) -> Vec<f64> {
        let mut x = self.rows.row(j).to_vec();
        for (phi, beta) in &self.factors {
            let c = beta * dot(&x, phi);
            x.iter_mut().zip(phi).for_each(|(a, b)| *a -= c * b);
        }
        x
    }

    /// `A_1 ... A_t v`, applied from the last factor back.
    fn pulled_back(&self, v: &[f64]) -> Vec<f64> {
        let mut v = v.to_vec();
        for (phi, beta) in self.factors.iter().rev() {
            let c = beta * dot(&v, phi);
            v.iter_mut().zip(phi).for_each(|(a, b)| *a -= c * b);
        }
        v
    }
}

impl Greedy for MaxDet {
    fn next(&mut self, chosen: &[bool], _: usize, _: &mut dyn RngCore) -> Option<usize> {
        argmax(self.n, chosen, |i| self.diag[i])
            .filter(|&(_, s)| s > 0.0)
            .map(|(i, _)| i)
    }

    fn add(&mut self, j: usize, _: usize) {
        let d = self.diag[j];
        let beta = 1.0 / (d.sqrt() * (d.sqrt() + self.sigma));
        let phi = self.current_row(j);
        let dots = products(&self.rows, &self.pulled_back(&phi));
        for (g, t) in self.diag.iter_mut().zip(&dots) {
            *g -= t * t / d;
        }
        self.factors.push((phi, beta));
    }
}

/// `x_i . v` for every row, the rows split over the cores in contiguous runs (read only).
fn products(rows: &Rows, v: &[f64]) -> Vec<f64> {
    let (p, n) = (rows.p, rows.len());
    let mut out = vec![0f64; n];
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
    let per = n.div_ceil(threads.min(n / 512).max(1)).max(1);
    std::thread::scope(|s| {
        for (xs, os) in rows.x.chunks(per * p).zip(out.chunks_mut(per)) {
            s.spawn(move || {
                for (x, o) in xs.chunks_exact(p).zip(os.iter_mut()) {
                    *o = dot(x, v);
                }
            });
        }
    });
    out
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
