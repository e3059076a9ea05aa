//! Batch selectors over features: batches that are diverse or representative, not a pile of
//! near-duplicates, and good first batches when nothing is labeled.
//!
//! - [`Badge`] (Ash et al. 2020): k-means++ seeding on the gradient embeddings
//!   `g_i = (p_i - e_{argmax p_i}) (x) h_i`. Distances are taken in factorised form,
//!   `|g_i - g_j|^2 = |q_i|^2 |h_i|^2 + |q_j|^2 |h_j|^2 - 2 (q_i . q_j)(h_i . h_j)` with
//!   `q = p - e`, so memory is `O(n (c + d))`, never the `n x (c d)` embeddings.
//! - [`CoreSet`] (Sener & Savarese 2018): k-center greedy on the features, the distance of
//!   every candidate to the labeled set and the picks so far kept incrementally.
//! - [`TypiClust`] (Hacohen et al. 2022): k-means of the unit-length features into
//!   `labeled + k` clusters (at most 500),
//!   then from the least-covered, largest clusters the most typical point (highest inverse
//!   mean squared distance to its 20 nearest cluster mates), as the authors' code does
//!   (clusters of at most 5 items are used only once the others are exhausted, where the
//!   authors' code has no pick).
//! - [`ProbCover`] (Yehuda et al. 2022): max coverage of `delta`-balls around the unit-length
//!   features, greedy; `delta` given, or the largest one whose balls are `alpha`-pure
//!   (0.95) with respect to a k-means clustering into as many clusters as classes.
//!
//! All read [`Features`] (the penultimate features; for a head on embeddings they are the
//! embeddings themselves). Core-set, TypiClust and ProbCover also read the labeled items'
//! features from [`Evidence::reference`] (empty at a cold start). Randomness (BADGE's
//! sampling, k-means++ seeding, a cold start's first core-set centre, ProbCover once every
//! point is covered) comes from the caller's RNG through [`crate::linalg::unit`]; with the
//! same draws the selections are exactly reproducible.

use crate::kernels::{dot, par_rows_costing, sq_dist};
use crate::linalg::{normalized, row_sq_norms, softmax, sq_distances, unit};
use crate::{BatchSelector, Evidence, Features, Needs, Reference, ScoreError};
use rand::RngCore;

fn check_k(k: usize, n: usize) -> Result<(), ScoreError> {
    if k > n {
        return Err(ScoreError::TooMany { k, n });
    }
    Ok(())
}

/// The labeled items' features (empty when nothing is labeled), checked against the
/// candidates' dimension.
fn labeled<'a>(ev: &'a Evidence, name: &str, f: &Features) -> Result<&'a [f32], ScoreError> {
    let r: &Reference = ev.reference.as_deref().ok_or(ScoreError::Missing {
        scorer: name.to_string(),
        evidence: "the labeled items' features (reference evidence)",
    })?;
    if !r.is_empty() && r.features().dim() != f.dim() {
        return Err(ScoreError::Shape {
            what: "labeled features",
            expected: format!("(m, {})", f.dim()),
            got: format!("(m, {})", r.features().dim()),
        });
    }
    Ok(r.features().as_slice())
}

/// What core-set, TypiClust and ProbCover read: the candidates' features and the labeled
/// items' (the reference).
const FEATURES_AND_LABELED: Needs = Needs {
    reference: true,
    ..Needs::FEATURES
};

/// The labeled rows then the candidates' rows, each scaled to unit length: `(all (m + n, d),
/// m)`, with the candidates' features; `k` checked against the candidates.
fn unit_rows<'a>(
    ev: &'a Evidence,
    name: &str,
    k: usize,
) -> Result<(Vec<f32>, usize, &'a Features), ScoreError> {
    let f = ev.features(name)?;
    let lab = labeled(ev, name, f)?;
    check_k(k, f.n())?;
    let mut all = Vec::with_capacity(lab.len() + f.as_slice().len());
    all.extend_from_slice(lab);
    all.extend_from_slice(f.as_slice());
    Ok((normalized(&all, f.dim(), 0.0), lab.len() / f.dim(), f))
}

/// Position of the largest value among those `allowed` (first on ties).
fn argmax(values: &[f64], allowed: impl Fn(usize) -> bool) -> Option<usize> {
    let mut best: Option<usize> = None;
    for (i, &v) in values.iter().enumerate() {
        if allowed(i) && best.is_none_or(|b| v > values[b]) {
            best = Some(i);
        }
    }
    best
}

/// The `floor(u r)`-th of the `r` positions not yet `taken`, ascending.
fn uniform_untaken(taken: &[bool], rng: &mut dyn RngCore) -> Option<usize> {
    let r = taken.iter().filter(|t| !**t).count();
    if r == 0 {
        return None;
    }
    let nth = ((unit(rng) * r as f64) as usize).min(r - 1);
    taken
        .iter()
        .enumerate()
        .filter(|(_, t)| !**t)
        .nth(nth)
        .map(|(i, _)| i)
}

/// BADGE: k-means++ seeding on gradient embeddings (module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Badge;

impl BatchSelector for Badge {
    fn name(&self) -> &str {
        "badge"
    }
    fn needs(&self) -> Needs {
        Needs::FEATURES
    }
    fn select(
        &self,
        ev: &Evidence,
        k: usize,
        rng: &mut dyn RngCore,
    ) -> Result<Vec<usize>, ScoreError> {
        let f = ev.features(self.name())?;
        let (n, d, c) = (f.n(), f.dim(), f.classes());
        check_k(k, n)?;
        if k == 0 {
            return Ok(vec![]);
        }
        // q_i = p_i - e_{argmax p_i}, (n, c).
        let mut q = vec![0f32; n * c];
        par_rows_costing(&mut q, c, c * d, |first, part| {
            let mut h = Vec::with_capacity(d);
            for (i, qi) in part.chunks_mut(c).enumerate() {
                h.clear();
                h.extend(f.row(first + i).iter().map(|&v| f64::from(v)));
                let z = crate::linalg::logits(&h, f.weight(), f.bias());
                let mut top = 0;
                for (j, (o, p)) in qi.iter_mut().zip(softmax(&z)).enumerate() {
                    *o = p as f32;
                    if z[j] > z[top] {
                        top = j;
                    }
                }
                qi[top] -= 1.0;
            }
        });
        let nq = row_sq_norms(&q, c);
        let nh = row_sq_norms(f.as_slice(), d);
        let norms: Vec<f64> = nq.iter().zip(&nh).map(|(a, b)| a * b).collect();
        let mut chosen = vec![false; n];
        let first = argmax(&norms, |_| true).unwrap_or(0);
        let mut picks = vec![first];
        chosen[first] = true;
        let mut d2 = vec![f64::INFINITY; n];
        let mut last = first;
        while picks.len() < k {
            let (qj, hj) = (&q[last * c..(last + 1) * c], f.row(last));
            let own = norms[last];
            par_rows_costing(&mut d2, 1, c + d, |start, part| {
                for (i, slot) in part.iter_mut().enumerate() {
                    let i = start + i;
                    let qq = f64::from(dot(&q[i * c..(i + 1) * c], qj));
                    let hh = f64::from(dot(f.row(i), hj));
                    let dist = (norms[i] + own - 2.0 * qq * hh).max(0.0);
                    if dist < *slot {
                        *slot = dist;
                    }
                }
            });
            for (i, v) in d2.iter_mut().enumerate() {
                if chosen[i] {
                    *v = 0.0;
                }
            }
            let total: f64 = d2.iter().sum();
            let u = unit(rng);
            let next = if total > 0.0 {
                let target = u * total;
                let mut acc = 0.0;
                let mut pick = None;
                for (i, &v) in d2.iter().enumerate() {
                    acc += v;
                    if acc > target {
                        pick = Some(i);
                        break;
                    }
                }
                // Rounding can leave the target at the very end: take the last positive.
                pick.or_else(|| d2.iter().rposition(|&v| v > 0.0))
            } else {
                let r = chosen.iter().filter(|t| !**t).count();
                let nth = ((u * r as f64) as usize).min(r.saturating_sub(1));
                chosen
                    .iter()
                    .enumerate()
                    .filter(|(_, t)| !**t)
                    .nth(nth)
                    .map(|(i, _)| i)
            };
            let next = next.ok_or(ScoreError::TooMany { k, n })?;
            chosen[next] = true;
            picks.push(next);
            last = next;
        }
        Ok(picks)
    }
}

/// Core-set: k-center greedy over the features (module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CoreSet;

/// Checks that `x` holds whole rows of `d > 0` values: their count.
fn rows_of(x: &[f32], d: usize, what: &'static str) -> Result<usize, ScoreError> {
    if d == 0 || !x.len().is_multiple_of(d) {
        return Err(ScoreError::Shape {
            what,
            expected: format!("rows of d = {d} > 0 values"),
            got: format!("{} values", x.len()),
        });
    }
    Ok(x.len() / d)
}

/// Rows whose distances to `others` rows are computed at once: at most 1024, and at most
/// 2^24 distances (64 MiB) in all.
fn block_rows(others: usize) -> usize {
    ((1usize << 24) / others.max(1)).clamp(1, 1024)
}

impl CoreSet {
    /// The picks and the covering radius they leave: the largest Euclidean distance from a
    /// candidate to its nearest labeled item or pick.
    pub fn select_with_radius(
        &self,
        ev: &Evidence,
        k: usize,
        rng: &mut dyn RngCore,
    ) -> Result<(Vec<usize>, f64), ScoreError> {
        let f = ev.features("coreset")?;
        let lab = labeled(ev, "coreset", f)?;
        let (n, d) = (f.n(), f.dim());
        check_k(k, n)?;
        let x = f.as_slice();
        let mut min_d = vec![f64::INFINITY; n];
        if !lab.is_empty() {
            let m = lab.len() / d;
            let rows = block_rows(m);
            for (b, block) in x.chunks(rows * d).enumerate() {
                let dist = sq_distances(block, lab, d);
                for (i, row) in dist.chunks(m).enumerate() {
                    min_d[b * rows + i] =
                        row.iter().fold(f64::INFINITY, |a, &v| a.min(f64::from(v)));
                }
            }
        }
        let mut chosen = vec![false; n];
        let mut picks = Vec::with_capacity(k);
        while picks.len() < k {
            let next = if lab.is_empty() && picks.is_empty() {
                ((unit(rng) * n as f64) as usize).min(n - 1)
            } else {
                argmax(&min_d, |i| !chosen[i]).ok_or(ScoreError::TooMany { k, n })?
            };
            chosen[next] = true;
            picks.push(next);
            let centre = f.row(next);
            par_rows_costing(&mut min_d, 1, d, |start, part| {
                for (i, slot) in part.iter_mut().enumerate() {
                    let dist = f64::from(sq_dist(f.row(start + i), centre));
                    if dist < *slot {
                        *slot = dist;
                    }
                }
            });
        }
        let radius = min_d.iter().fold(0f64, |a, &v| a.max(v)).sqrt();
        Ok((picks, radius))
    }
}

impl BatchSelector for CoreSet {
    fn name(&self) -> &str {
        "coreset"
    }
    fn needs(&self) -> Needs {
        FEATURES_AND_LABELED
    }
    fn cold_start(&self) -> bool {
        true
    }
    fn select(
        &self,
        ev: &Evidence,
        k: usize,
        rng: &mut dyn RngCore,
    ) -> Result<Vec<usize>, ScoreError> {
        Ok(self.select_with_radius(ev, k, rng)?.0)
    }
}

/// Lloyd iterations at most, after k-means++ seeding.
const KMEANS_ITERATIONS: usize = 100;

/// k-means of the rows of `x (n, d)` into `k` clusters (`1 <= k <= n`): k-means++ seeding
/// (the first centre uniform, each next one drawn with probability proportional to the
/// squared distance to the nearest centre so far) from `rng`, then Lloyd iterations until no
/// assignment changes (at most 100). A cluster left empty keeps its centre. Returns each
/// row's cluster (the nearest centre, lowest index on ties).
pub fn kmeans(
    x: &[f32],
    d: usize,
    k: usize,
    rng: &mut dyn RngCore,
) -> Result<Vec<usize>, ScoreError> {
    let n = rows_of(x, d, "k-means rows")?;
    if k == 0 || k > n {
        return Err(ScoreError::TooMany { k, n });
    }
    let row = |i: usize| &x[i * d..(i + 1) * d];
    let mut centres: Vec<f32> = Vec::with_capacity(k * d);
    let first = ((unit(rng) * n as f64) as usize).min(n - 1);
    centres.extend_from_slice(row(first));
    let mut d2 = vec![f64::INFINITY; n];
    while centres.len() < k * d {
        let centre = centres[centres.len() - d..].to_vec();
        par_rows_costing(&mut d2, 1, d, |start, part| {
            for (i, slot) in part.iter_mut().enumerate() {
                let dist = f64::from(sq_dist(row(start + i), &centre));
                *slot = slot.min(dist);
            }
        });
        let total: f64 = d2.iter().sum();
        let u = unit(rng);
        let next = if total > 0.0 {
            let target = u * total;
            let mut acc = 0.0;
            d2.iter()
                .position(|&v| {
                    acc += v;
                    acc > target
                })
                .or_else(|| d2.iter().rposition(|&v| v > 0.0))
                .unwrap_or(0)
        } else {
            // Fewer distinct rows than clusters: repeat a row (that cluster stays empty).
            ((u * n as f64) as usize).min(n - 1)
        };
        centres.extend_from_slice(row(next));
    }
    let mut assign = vec![usize::MAX; n];
    for _ in 0..KMEANS_ITERATIONS {
        let mut changed = false;
        let rows = block_rows(k);
        for (b, block) in x.chunks(rows * d).enumerate() {
            let dist = sq_distances(block, &centres, d);
            for (i, r) in dist.chunks(k).enumerate() {
                let mut best = 0;
                for (j, &v) in r.iter().enumerate() {
                    if v < r[best] {
                        best = j;
                    }
                }
                let slot = &mut assign[b * rows + i];
                changed |= *slot != best;
                *slot = best;
            }
        }
        if !changed {
            break;
        }
        let mut sums = vec![0f64; k * d];
        let mut counts = vec![0usize; k];
        for (i, &a) in assign.iter().enumerate() {
            counts[a] += 1;
            for (s, &v) in sums[a * d..(a + 1) * d].iter_mut().zip(row(i)) {
                *s += f64::from(v);
            }
        }
        for j in 0..k {
            if counts[j] > 0 {
                for (c, s) in centres[j * d..(j + 1) * d]
                    .iter_mut()
                    .zip(&sums[j * d..(j + 1) * d])
                {
                    *c = (s / counts[j] as f64) as f32;
                }
            }
        }
    }
    Ok(assign)
}

/// TypiClust (module docs), with the authors' constants as defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TypiClust {
    /// Most clusters (500).
    pub max_clusters: usize,
    /// Clusters of at most this many items are never picked from (5).
    pub min_cluster_size: usize,
    /// Neighbours in the typicality estimate (20).
    pub knn: usize,
}

impl Default for TypiClust {
    fn default() -> Self {
        Self {
            max_clusters: 500,
            min_cluster_size: 5,
            knn: 20,
        }
    }
}

impl TypiClust {
    /// The selection half given a clustering: `features (m + n, d)` hold the `m` labeled
    /// rows first and then the `n` candidates, `clusters (m + n,)` their cluster ids; returns
    /// `k` candidate positions (into the `n`).
    pub fn select_from_clusters(
        &self,
        features: &[f32],
        d: usize,
        clusters: &[usize],
        m: usize,
        k: usize,
    ) -> Result<Vec<usize>, ScoreError> {
        let total = clusters.len();
        if features.len() != total * d || m > total {
            return Err(ScoreError::Shape {
                what: "typiclust clusters",
                expected: format!(
                    "one cluster per feature row ({} rows)",
                    features.len() / d.max(1)
                ),
                got: format!("{total} clusters, {m} labeled"),
            });
        }
        check_k(k, total - m)?;
        let ids = clusters.iter().copied().max().map_or(0, |v| v + 1);
        let mut size = vec![0usize; ids];
        let mut existing = vec![0usize; ids];
        for (i, &c) in clusters.iter().enumerate() {
            size[c] += 1;
            if i < m {
                existing[c] += 1;
            }
        }
        let key = |a: &usize, b: &usize| {
            existing[*a]
                .cmp(&existing[*b])
                .then(size[*b].cmp(&size[*a]))
                .then(a.cmp(b))
        };
        // The authors' clusters: more than `min_cluster_size` items, fewest labeled first,
        // then largest. The small ones are visited only once those have no untaken item left
        // (where the authors' code stops), in the same order.
        let (mut order, mut small): (Vec<usize>, Vec<usize>) =
            (0..ids).partition(|&c| size[c] > self.min_cluster_size);
        order.sort_by(key);
        small.sort_by(key);
        let mut taken: Vec<bool> = (0..total).map(|i| i < m).collect();
        let mut picks = Vec::with_capacity(k);
        for i in 0..k {
            let mut members = Vec::new();
            for list in [&order, &small] {
                for shift in 0..list.len() {
                    let c = list[(i + shift) % list.len()];
                    members = (0..total)
                        .filter(|&j| !taken[j] && clusters[j] == c)
                        .collect();
                    if !members.is_empty() {
                        break;
                    }
                }
                if !members.is_empty() {
                    break;
                }
            }
            if members.is_empty() {
                return Err(ScoreError::TooMany { k, n: picks.len() });
            }
            let kk = self.knn.min(members.len() / 2);
            let best = if kk == 0 {
                members[0]
            } else {
                let rows: Vec<f32> = members
                    .iter()
                    .flat_map(|&j| features[j * d..(j + 1) * d].iter().copied())
                    .collect();
                let s = members.len();
                let mut typ = Vec::with_capacity(s);
                let mut buf = Vec::with_capacity(s);
                // Members' rows a block at a time against all members: memory follows
                // `block_rows`, not the cluster's size squared.
                for part in rows.chunks(block_rows(s) * d) {
                    let dist = sq_distances(part, &rows, d);
                    for r in dist.chunks(s) {
                        buf.clear();
                        buf.extend(r.iter().map(|&v| f64::from(v)));
                        // The kk + 1 smallest (the member itself first), in ascending order.
                        buf.select_nth_unstable_by(kk, f64::total_cmp);
                        buf[..=kk].sort_by(f64::total_cmp);
                        let mean = buf[1..=kk].iter().sum::<f64>() / kk as f64;
                        typ.push(1.0 / (mean + 1e-5));
                    }
                }
                members[argmax(&typ, |_| true).unwrap_or(0)]
            };
            taken[best] = true;
            picks.push(best - m);
        }
        Ok(picks)
    }
}

impl BatchSelector for TypiClust {
    fn name(&self) -> &str {
        "typiclust"
    }
    fn needs(&self) -> Needs {
        FEATURES_AND_LABELED
    }
    fn cold_start(&self) -> bool {
        true
    }
    fn select(
        &self,
        ev: &Evidence,
        k: usize,
        rng: &mut dyn RngCore,
    ) -> Result<Vec<usize>, ScoreError> {
        let (all, m, f) = unit_rows(ev, self.name(), k)?;
        if k == 0 {
            return Ok(vec![]);
        }
        let d = f.dim();
        // The authors cluster unit-length self-supervised features.
        let clusters = kmeans(&all, d, (m + k).min(self.max_clusters).min(m + f.n()), rng)?;
        self.select_from_clusters(&all, d, &clusters, m, k)
    }
}

/// ProbCover (module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProbCover {
    /// The ball radius on unit-length features; `None`: chosen by the purity rule.
    pub delta: Option<f32>,
    /// The purity the chosen radius keeps (0.95).
    pub alpha: f32,
}

impl Default for ProbCover {
    fn default() -> Self {
        Self {
            delta: None,
            alpha: 0.95,
        }
    }
}

/// Most edges ProbCover's graph may hold (8 bytes each, twice).
pub const MAX_EDGES: usize = 200_000_000;

/// The largest radius whose balls are `alpha`-pure: with `r_x` the distance from row `x` of
/// `x (n, d)` to the nearest row of another cluster, a ball `{y : |x - y| < delta}` is pure
/// when `delta <= r_x`; the fraction of pure balls is at least `alpha` up to the
/// `ceil(alpha n)`-th largest `r_x`, which is returned. Errors when all rows share a cluster.
pub fn purity_radius(
    x: &[f32],
    d: usize,
    clusters: &[usize],
    alpha: f32,
) -> Result<f64, ScoreError> {
    let n = clusters.len();
    if rows_of(x, d, "purity rows")? != n {
        return Err(ScoreError::Shape {
            what: "purity clusters",
            expected: format!("one cluster per row ({} rows)", x.len() / d),
            got: format!("{n} clusters"),
        });
    }
    if !(alpha > 0.0 && alpha <= 1.0) || n == 0 {
        return Err(ScoreError::Setting {
            setting: "probcover_alpha",
            why: format!("purity {alpha} must be in (0, 1] over at least one item"),
        });
    }
    let mut r = vec![f64::INFINITY; n];
    let rows = block_rows(n);
    for (b, block) in x.chunks(rows * d).enumerate() {
        let dist = sq_distances(block, x, d);
        for (i, row) in dist.chunks(n).enumerate() {
            let ci = clusters[b * rows + i];
            r[b * rows + i] = row
                .iter()
                .zip(clusters)
                .filter(|(_, &cj)| cj != ci)
                .fold(f64::INFINITY, |a, (&v, _)| a.min(f64::from(v)))
                .sqrt();
        }
    }
    r.sort_by(f64::total_cmp);
    let need = (f64::from(alpha) * n as f64).ceil() as usize;
    let delta = r[n - need.clamp(1, n)];
    if !delta.is_finite() {
        return Err(ScoreError::Setting {
            setting: "probcover_delta",
            why: "every item lies in one cluster, so no radius is chosen by purity; give one"
                .into(),
        });
    }
    Ok(delta)
}

impl ProbCover {
    /// The radius used on these unit-length rows: the given one, or the purity rule's over a
    /// k-means clustering into `classes` clusters.
    fn radius(
        &self,
        all: &[f32],
        d: usize,
        classes: usize,
        rng: &mut dyn RngCore,
    ) -> Result<f64, ScoreError> {
        match self.delta {
            Some(delta) if delta.is_finite() && delta > 0.0 => Ok(f64::from(delta)),
            Some(delta) => Err(ScoreError::Setting {
                setting: "probcover_delta",
                why: format!("the ball radius {delta} must be a finite number above 0"),
            }),
            None => {
                let n = all.len() / d;
                let clusters = kmeans(all, d, classes.min(n), rng)?;
                purity_radius(all, d, &clusters, self.alpha)
            }
        }
    }

    /// Greedy max coverage on unit-length `all (m + n, d)` (labeled rows first) with radius
    /// `delta`; `k` candidate positions.
    pub fn select_with_radius(
        all: &[f32],
        d: usize,
        m: usize,
        k: usize,
        delta: f64,
        rng: &mut dyn RngCore,
    ) -> Result<Vec<usize>, ScoreError> {
        let total = rows_of(all, d, "probcover rows")?;
        let n = total.checked_sub(m).ok_or(ScoreError::Shape {
            what: "probcover rows",
            expected: format!("at least the {m} labeled rows"),
            got: format!("{total} rows"),
        })?;
        check_k(k, n)?;
        if k == 0 {
            return Ok(vec![]);
        }
        // Out-edges i -> j for |x_i - x_j| < delta, in CSR form, then their transpose.
        let limit = delta * delta;
        let mut offsets = Vec::with_capacity(total + 1);
        offsets.push(0usize);
        let mut targets: Vec<u32> = Vec::new();
        for block in all.chunks(block_rows(total) * d) {
            let dist = sq_distances(block, all, d);
            for row in dist.chunks(total) {
                targets.extend(
                    row.iter()
                        .enumerate()
                        .filter(|(_, &v)| f64::from(v) < limit)
                        .map(|(j, _)| j as u32),
                );
                if targets.len() > MAX_EDGES {
                    return Err(ScoreError::Setting {
                        setting: "probcover_delta",
                        why: format!(
                            "balls of radius {delta:.4} join more than {MAX_EDGES} pairs of items; \
                             give a smaller radius"
                        ),
                    });
                }
                offsets.push(targets.len());
            }
        }
        let mut in_count = vec![0usize; total + 1];
        for &t in &targets {
            in_count[t as usize + 1] += 1;
        }
        for i in 0..total {
            in_count[i + 1] += in_count[i];
        }
        let mut in_src = vec![0u32; targets.len()];
        let mut fill = in_count.clone();
        for i in 0..total {
            for &t in &targets[offsets[i]..offsets[i + 1]] {
                in_src[fill[t as usize]] = i as u32;
                fill[t as usize] += 1;
            }
        }
        let mut covered = vec![false; total];
        let mut degree: Vec<f64> = (0..total)
            .map(|i| (offsets[i + 1] - offsets[i]) as f64)
            .collect();
        let cover = |j: usize, covered: &mut [bool], degree: &mut [f64]| {
            if !covered[j] {
                covered[j] = true;
                for &i in &in_src[in_count[j]..in_count[j + 1]] {
                    degree[i as usize] -= 1.0;
                }
            }
        };
        for i in 0..m {
            for &j in &targets[offsets[i]..offsets[i + 1]] {
                cover(j as usize, &mut covered, &mut degree);
            }
        }
        let mut picked = vec![false; n];
        let mut picks = Vec::with_capacity(k);
        while picks.len() < k {
            let best = argmax(&degree[m..], |i| !picked[i]);
            let next = match best {
                Some(i) if degree[m + i] > 0.0 => i,
                _ => uniform_untaken(&picked, rng).ok_or(ScoreError::TooMany { k, n })?,
            };
            picked[next] = true;
            picks.push(next);
            for &j in &targets[offsets[m + next]..offsets[m + next + 1]] {
                cover(j as usize, &mut covered, &mut degree);
            }
        }
        Ok(picks)
    }
}

impl BatchSelector for ProbCover {
    fn name(&self) -> &str {
        "probcover"
    }
    fn needs(&self) -> Needs {
        FEATURES_AND_LABELED
    }
    fn cold_start(&self) -> bool {
        true
    }
    fn select(
        &self,
        ev: &Evidence,
        k: usize,
        rng: &mut dyn RngCore,
    ) -> Result<Vec<usize>, ScoreError> {
        let (all, m, f) = unit_rows(ev, self.name(), k)?;
        if k == 0 {
            return Ok(vec![]);
        }
        let d = f.dim();
        let delta = self.radius(&all, d, f.classes(), rng)?;
        Self::select_with_radius(&all, d, m, k, delta, rng)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use std::sync::Arc;

    fn ev(h: Vec<f32>, n: usize, d: usize, lab: Vec<f32>) -> Evidence {
        let w = vec![0.5; 2 * d];
        let f = Features::new(h, n, d, w.clone(), vec![0.0, 0.1]).unwrap();
        let m = lab.len() / d;
        let r = Reference::new(
            Features::new(lab, m, d, w, vec![0.0, 0.1]).unwrap(),
            vec![0; m],
        )
        .unwrap();
        Evidence {
            features: Some(f),
            reference: Some(Arc::new(r)),
            ..Evidence::default()
        }
    }

    #[test]
    fn coreset_picks_the_farthest_point_first() {
        // Labeled at 0; candidates at 1, 5, 2, 9 on a line: 9, then 5 (distance 4 from 9 and
        // 5 from 0... min(5, 4) = 4 vs 2: min(2, 7) = 2, 1: 1), then 2.
        let e = ev(vec![1.0, 5.0, 2.0, 9.0], 4, 1, vec![0.0]);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
        let (picks, radius) = CoreSet.select_with_radius(&e, 3, &mut rng).unwrap();
        assert_eq!(picks, vec![3, 1, 2]);
        assert_eq!(radius, 1.0);
    }

    #[test]
    fn kmeans_separates_far_groups() {
        let x = [0.0f32, 0.1, 0.2, 10.0, 10.1, 10.2];
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let a = kmeans(&x, 1, 2, &mut rng).unwrap();
        assert!(a[0] == a[1] && a[1] == a[2] && a[3] == a[4] && a[4] == a[5] && a[0] != a[3]);
        assert!(kmeans(&x, 1, 7, &mut rng).is_err());
    }

    #[test]
    fn probcover_covers_the_densest_ball_first() {
        // Unit vectors at angles: a tight group of three and a lone one.
        let h: Vec<f32> = [0.0f32, 0.05, 0.1, 2.0]
            .iter()
            .flat_map(|a| [a.cos(), a.sin()])
            .collect();
        let all = normalized(&h, 2, 0.0);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(2);
        let picks = ProbCover::select_with_radius(&all, 2, 0, 2, 0.2, &mut rng).unwrap();
        assert_eq!(picks, vec![0, 3]); // three balls of three: the first wins the tie
    }

    #[test]
    fn badge_starts_at_the_largest_gradient_embedding() {
        let e = ev(vec![0.1, 3.0, 0.2, 0.0], 4, 1, vec![]);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let picks = Badge.select(&e, 4, &mut rng).unwrap();
        assert_eq!(picks[0], 1);
        let mut sorted = picks.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, vec![0, 1, 2, 3]);
    }
}
