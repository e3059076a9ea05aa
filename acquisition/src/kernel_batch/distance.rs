//! The distance rules of the kernel framework (MaxDist, k-means++, LCMD): each reads every
//! pool row's squared distance to its nearest added row. Without a kernel transform the rows
//! are the `f32` features as given (read widened to `f64`: the same values, half the memory
//! traffic of an `f64` copy); after the posterior transform they are its `f64` rows.

use super::greedy::{argmax, Greedy};
use super::transform::BLOCK;
use super::KernelRule;
use crate::kernels::Real;
use crate::linalg::unit;
use rand::RngCore;

/// The element types rows are stored in: `f32` (features as given) or `f64` (transformed).
pub(super) trait Elem: Real + Into<f64> {}

impl Elem for f32 {}

impl Elem for f64 {}

/// `a . b` in `f64` over eight lane accumulators (summed in a fixed order), so that the
/// per-pick passes over the rows vectorise.
pub(super) fn dot<T: Elem>(a: &[T], b: &[f64]) -> f64 {
    let mut acc = [0f64; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f64 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(&x, y)| x.into() * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for l in 0..8 {
            acc[l] += x[l].into() * y[l];
        }
    }
    acc.iter().sum::<f64>() + tail
}

/// Row-major rows of `p` values: the pool's first, then (in TP mode) the labeled items'.
pub(super) struct Table<T> {
    pub(super) x: Vec<T>,
    pub(super) p: usize,
}

impl<T: Elem> Table<T> {
    fn row(&self, i: usize) -> &[T] {
        &self.x[i * self.p..(i + 1) * self.p]
    }

    /// `|x_i|^2` in `f64` for every row.
    fn diag(&self) -> Vec<f64> {
        self.x
            .chunks_exact(self.p)
            .map(|r| r.iter().map(|&v| v.into() * v.into()).sum())
            .collect()
    }
}

/// The distance rules' shared state: every pool row's smallest squared distance to a row
/// added so far, and which added row that is (0 = none yet, else its order + 1).
///
/// A new row `j` can only come closer to pool row `i` than `i`'s nearest added row `c` when
/// `|c - j| < 2 |x_i - c|` (the triangle inequality): the other rows are skipped without
/// being read, which is what makes a pick cheap once the added rows cover the pool. The
/// labeled rows are added at once, their distances to the pool in blocks of one product.
struct Nearest<T> {
    rows: Table<T>,
    diag: Vec<f64>,
    min_sq: Vec<f64>,
    closest: Vec<usize>,
    centres: Vec<usize>,
    n: usize,
}

impl<T: Elem> Nearest<T> {
    fn new(rows: Table<T>, n: usize) -> Self {
        let diag = rows.diag();
        Self {
            rows,
            diag,
            min_sq: vec![f64::INFINITY; n],
            closest: vec![0; n],
            centres: Vec::new(),
            n,
        }
    }

    /// Squared distances `|x_j|^2 + |x_i|^2 - 2 x_j . x_i` from row `j` to the pool rows
    /// (the kernel form the reference computes them in), folded into the minima, skipping
    /// the rows the triangle inequality rules out (with a margin for rounding).
    fn add(&mut self, j: usize, added: usize) {
        let xj: Vec<f64> = self.rows.row(j).iter().map(|&v| v.into()).collect();
        let dj = self.diag[j];
        let gaps: Vec<f64> = self
            .centres
            .iter()
            .map(|&c| {
                let sq: f64 = self
                    .rows
                    .row(c)
                    .iter()
                    .zip(&xj)
                    .map(|(&a, b)| (a.into() - b) * (a.into() - b))
                    .sum();
                sq.sqrt()
            })
            .collect();
        let (rows, diag) = (&self.rows, &self.diag);
        let update = |i: usize, min: &mut f64, near: &mut usize| {
            if *near > 0 {
                let (gap, r) = (gaps[*near - 1], min.max(0.0).sqrt());
                let slack = 1e-6 * (diag[i] + dj).sqrt() + 1e-9 * gap;
                if gap > 2.0 * r + slack {
                    return;
                }
            }
            let k = dot(rows.row(i), &xj);
            let sq = dj + diag[i] - 2.0 * k;
            if sq < *min {
                *min = sq;
                *near = added + 1;
            }
        };
        par_pairs(&mut self.min_sq, &mut self.closest, |start, mins, nears| {
            for (o, (m, c)) in mins.iter_mut().zip(nears.iter_mut()).enumerate() {
                update(start + o, m, c);
            }
        });
        self.centres.push(j);
    }

    /// Adds rows `first..first + m` in order, as `m` calls of [`Nearest::add`] would (ties
    /// to the earlier row), their distances to the pool taken a block of rows at a time.
    fn add_many(&mut self, first: usize, m: usize, added: usize) {
        let p = self.rows.p;
        let wide = |x: &[T]| -> Vec<f64> { x.iter().map(|&v| v.into()).collect() };
        // In f64 whatever the rows' type: the products decide which labeled row is nearest.
        let lab = wide(&self.rows.x[first * p..(first + m) * p]);
        let lab_diag = &self.diag[first..first + m];
        let pool = &self.rows.x[..self.n * p];
        for (b, block) in pool.chunks(BLOCK * p).enumerate() {
            let rows = block.len() / p;
            let k = crate::kernels::matmul_nt(&wide(block), &lab, (rows, m, p));
            for (r, kr) in k.chunks_exact(m.max(1)).enumerate().take(rows) {
                let i = b * BLOCK + r;
                for (l, &kil) in kr.iter().enumerate() {
                    let sq = lab_diag[l] + self.diag[i] - 2.0 * kil;
                    if sq < self.min_sq[i] {
                        self.min_sq[i] = sq;
                        self.closest[i] = added + l + 1;
                    }
                }
            }
        }
        self.centres.extend(first..first + m);
    }

    /// The pool row of largest `|x|^2`: the first pick when nothing was added.
    fn largest(&self, chosen: &[bool]) -> Option<usize> {
        argmax(self.n, chosen, |i| self.diag[i]).map(|(i, _)| i)
    }
}

/// Runs `f(first, a_part, b_part)` over `a` and `b` (one value per row each) split into the
/// same contiguous runs, one per core (one run below 4096 rows).
fn par_pairs<A: Send, B: Send>(
    a: &mut [A],
    b: &mut [B],
    f: impl Fn(usize, &mut [A], &mut [B]) + Sync,
) {
    let n = a.len();
    let threads = crate::kernels::cores();
    let per = n.div_ceil(threads.min(n / 4096).max(1)).max(1);
    let f = &f;
    std::thread::scope(|s| {
        for (r, (pa, pb)) in a.chunks_mut(per).zip(b.chunks_mut(per)).enumerate() {
            s.spawn(move || f(r * per, pa, pb));
        }
    });
}

/// A distance rule over the rows: MaxDist (greedy core-set: the pool row farthest from
/// every row added so far), k-means++ seeding (the next row drawn with probability
/// proportional to its squared distance to the rows added so far, the first uniformly when
/// nothing was added) or LCMD (largest cluster maximum distance, Holzmüller et al. 2023:
/// every pool row belongs to its nearest added row; from the cluster of largest summed
/// squared distance, the row farthest from its centre).
pub(super) struct Distance<T> {
    near: Nearest<T>,
    rule: KernelRule,
}

impl<T: Elem> Distance<T> {
    /// `rule` (MaxDist, KMeansPP or Lcmd) over `rows`, the first `n` of them the pool.
    pub(super) fn new(rule: KernelRule, rows: Table<T>, n: usize) -> Self {
        debug_assert!(matches!(
            rule,
            KernelRule::MaxDist | KernelRule::KMeansPP | KernelRule::Lcmd
        ));
        Self {
            near: Nearest::new(rows, n),
            rule,
        }
    }

    fn k_means_pp(&self, chosen: &[bool], added: usize, rng: &mut dyn RngCore) -> Option<usize> {
        let s = &self.near;
        let weight = |i: usize| {
            if chosen[i] {
                0.0
            } else if added == 0 {
                1.0
            } else {
                s.min_sq[i].max(0.0)
            }
        };
        let total: f64 = (0..s.n).map(weight).sum();
        if !(total.is_finite() && total > 0.0) {
            return None;
        }
        let mut u = unit(rng) * total;
        let mut last = None;
        for i in 0..s.n {
            let w = weight(i);
            if w > 0.0 {
                last = Some(i);
                if u < w {
                    return Some(i);
                }
                u -= w;
            }
        }
        last
    }

    fn lcmd(&self, chosen: &[bool], added: usize) -> Option<usize> {
        let s = &self.near;
        let mut sums = vec![0f64; added + 1];
        for (c, w) in s.closest.iter().zip(&s.min_sq) {
            sums[*c] += w;
        }
        let top = sums.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        argmax(s.n, chosen, |i| {
            if sums[s.closest[i]] == top {
                s.min_sq[i]
            } else {
                f64::NEG_INFINITY
            }
        })
        .map(|(i, _)| i)
    }
}

impl<T: Elem> Greedy for Distance<T> {
    fn next(&mut self, chosen: &[bool], added: usize, rng: &mut dyn RngCore) -> Option<usize> {
        match self.rule {
            KernelRule::KMeansPP => self.k_means_pp(chosen, added, rng),
            _ if added == 0 => self.near.largest(chosen),
            KernelRule::Lcmd => self.lcmd(chosen, added),
            _ => argmax(self.near.n, chosen, |i| self.near.min_sq[i]).map(|(i, _)| i),
        }
    }

    fn add(&mut self, j: usize, added: usize) {
        self.near.add(j, added);
    }

    fn add_many(&mut self, first: usize, m: usize, added: usize) {
        self.near.add_many(first, m, added);
    }
}
