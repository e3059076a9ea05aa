//! Scoring a split chunk by chunk: each chunk's items (this shard's) normalised and scored,
//! their rows written as scored or kept (a running best `top` by the selection's keys, with
//! the first scorer's draws for a joint choice), so memory is the chunk, the model and what is
//! kept, not the split.

use super::super::shard::{self, Shard};
use crate::data::stream::Chunk;
use crate::data::{Dataset, Normalizer};
use crate::error::{Error, Result};
use crate::fsutil::CsvFile;
use crate::observe::Silent;
use crate::predict::Scoring;
use crate::rng::{stream, Purpose};
use alkit_acquisition::{Scorer, Selection};
use std::sync::Arc;

/// Every item of `ds` scored by each scorer: `(scorer, item)`. Each scorer draws its noise
/// from the same stream `(seed, Perturb, 0)`, so a scorer's scores do not depend on which
/// others run beside it.
pub fn score_all(
    scoring: &Scoring<'_>,
    ds: &Dataset,
    scorers: &[Arc<dyn Scorer>],
    seed: u64,
) -> Result<Vec<Vec<f32>>> {
    Ok(score_keeping_draws(scoring, ds, scorers, seed, false)?.0)
}

/// True when a scorer's evidence draws noise over its whole batch (input or weight noise,
/// MC-dropout masks, REGrad*'s copies): its scores then depend on how the pool is cut into
/// batches, so such scorers see the pool whole and cannot be sharded.
pub(super) fn draws_noise(scorer: &dyn Scorer) -> bool {
    let n = scorer.needs();
    n.grads.is_some_and(|g| g.perturbations > 0)
        || n.samples
            .is_some_and(|r| !matches!(r, alkit_acquisition::SampleRequest::Members))
}

/// Stochastic predictions of items, item by item: what BatchBALD chooses from.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Draws {
    /// `(n, s, c)`: item `i`'s `s` draws of `c` class probabilities, contiguous.
    pub values: Vec<f32>,
    /// Draws per item.
    pub draws: usize,
    /// Classes per draw.
    pub classes: usize,
}

impl Draws {
    /// Values per item.
    pub fn width(&self) -> usize {
        self.draws * self.classes
    }

    /// The draws of the items at `order`.
    fn pick(self, order: &[usize]) -> Draws {
        let w = self.width();
        Draws {
            values: order
                .iter()
                .flat_map(|&i| self.values[i * w..(i + 1) * w].iter().copied())
                .collect(),
            ..self
        }
    }
}

/// What scoring a split kept: the items' positions, ids, scores `(scorer, item)` and, when a
/// selection will rank them, their selection keys (see [`shard::selection_keys`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Scored {
    /// Positions in the split.
    pub indices: Vec<usize>,
    /// Ids.
    pub ids: Vec<String>,
    /// One column per scorer.
    pub cols: Vec<Vec<f32>>,
    /// Selection keys, when ranked.
    pub keys: Option<Vec<f64>>,
    /// Items scored (this shard's, all when unsharded), before any were dropped for `top`.
    pub count: usize,
    /// With [`ChunkPlan::draws`], each kept item's draws.
    pub draws: Option<Draws>,
    /// When sharded, the fingerprint of every item read (the whole split, not only the
    /// shard's: each item's id and values, as a streamed session fingerprints its pool).
    pub fingerprint: Option<u64>,
}

/// How [`score_chunks`] scores and what it keeps.
pub(super) struct ChunkPlan<'a> {
    /// The scorers; the first ranks.
    pub scorers: &'a [Arc<dyn Scorer>],
    /// Seed of the scorers' noise and of the selection's.
    pub seed: u64,
    /// Normalisation of the model's inputs.
    pub normalizer: &'a Normalizer,
    /// Shape of one item.
    pub item_shape: &'a [usize],
    /// Only this shard's items (by id).
    pub shard: Option<Shard>,
    /// How items are ranked when `top` is set or the run is sharded.
    pub selection: Selection,
    /// Keep only the best `top` by key.
    pub top: Option<usize>,
    /// Keep the first scorer's draws of every kept item (for a joint choice).
    pub draws: bool,
}

/// Scores a split read chunk by chunk from `next` (called with nothing; `None` ends it),
/// keeping per chunk only the plan's shard and, with `top`, a running best `top` by key:
/// memory is the chunk, the model and what is kept, not the split. Scores equal those of
/// the whole split in one chunk for scorers that draw no noise ([`draws_noise`]); the caller
/// passes such scorers one chunk holding everything. Given a `table` (its header written),
/// each chunk's rows `index,id,<scores>` are written to it as scored and none is kept (only
/// the count): a plan that ranks (`top`, a shard) or keeps draws has no such rows.
pub(super) fn score_chunks(
    scoring: &Scoring<'_>,
    plan: &ChunkPlan<'_>,
    next: &mut dyn FnMut() -> Result<Option<Chunk>>,
    mut table: Option<&mut CsvFile>,
) -> Result<Scored> {
    let sharded = plan.shard.is_some();
    let ranked = plan.top.is_some() || sharded;
    if table.is_some() && (ranked || plan.draws) {
        return Err(Error::config(
            if sharded { "shard" } else { "top" },
            "a table written as it is scored holds every item: it keeps no best items, shard \
             nor draws",
        ));
    }
    // Keys of one item alone allow a running best-`top`; softrank's need every score.
    let running = plan
        .top
        .filter(|_| plan.selection.log_weight(0.5).is_some());
    let mut out = Scored {
        cols: vec![Vec::new(); plan.scorers.len()],
        keys: ranked.then(Vec::new),
        ..Scored::default()
    };
    let len: usize = plan.item_shape.iter().product();
    let mut fingerprint = sharded.then(crate::data::Fnv1a::default);
    while let Some(Chunk { start, ids, x }) = next()? {
        if let Some(h) = fingerprint.as_mut() {
            for (id, x) in ids.iter().zip(x.chunks_exact(len.max(1))) {
                crate::data::reader::hash_item(h, id, x);
            }
        }
        let keep: Vec<usize> = (0..ids.len())
            .filter(|&i| plan.shard.is_none_or(|s| s.holds(&ids[i])))
            .collect();
        if keep.is_empty() {
            continue;
        }
        out.count += keep.len();
        let (cols, draws) = score_kept(scoring, plan, x, &keep, ids.len())?;
        out.add_draws(draws);
        if let Some(t) = table.as_mut() {
            for (r, &i) in keep.iter().enumerate() {
                t.row(table_row(start + i, &ids[i], cols.iter().map(|c| c[r])))?;
            }
            continue;
        }
        let ids: Vec<String> = keep.iter().map(|&i| ids[i].clone()).collect();
        if running.is_some() || sharded {
            out.add_keys(&cols, &ids, plan)?;
        }
        out.indices.extend(keep.iter().map(|&i| start + i));
        out.ids.extend(ids);
        for (o, c) in out.cols.iter_mut().zip(cols) {
            o.extend(c);
        }
        if let Some(k) = running {
            out.keep_best(k);
        }
    }
    out.fingerprint = fingerprint.map(|h| std::hash::Hasher::finish(&h));
    if ranked && running.is_none() && !sharded {
        // Softrank: every score is kept, the keys come from the ranks of all of them.
        if let Some(first) = out.cols.first() {
            out.keys = Some(shard::selection_keys(
                first,
                &out.ids,
                &plan.selection,
                plan.seed,
                false,
            )?);
        }
    }
    Ok(out)
}

/// The `keep` items of a chunk of `n` items whose values are `x`, normalised and scored:
/// `(scorer, item)` and, with the plan's `draws`, the first scorer's draws.
fn score_kept(
    scoring: &Scoring<'_>,
    plan: &ChunkPlan<'_>,
    x: Vec<f32>,
    keep: &[usize],
    n: usize,
) -> Result<(Vec<Vec<f32>>, Option<Draws>)> {
    let len: usize = plan.item_shape.iter().product();
    let x: Vec<f32> = if keep.len() == n {
        x
    } else {
        keep.iter()
            .flat_map(|&i| x[i * len..(i + 1) * len].iter().copied())
            .collect()
    };
    let raw = Dataset::new(x, vec![0; keep.len()], plan.item_shape.to_vec(), 1)?;
    let ds = plan.normalizer.apply(&raw)?;
    drop(raw);
    score_keeping_draws(scoring, &ds, plan.scorers, plan.seed, plan.draws)
}

impl Scored {
    /// Appends a chunk's draws.
    fn add_draws(&mut self, draws: Option<Draws>) {
        if let Some(d) = draws {
            let all = self.draws.get_or_insert(Draws {
                values: Vec::new(),
                ..d
            });
            all.values.extend(d.values);
        }
    }

    /// Appends the selection keys of a chunk's kept items `ids`, from its first column.
    fn add_keys(&mut self, cols: &[Vec<f32>], ids: &[String], plan: &ChunkPlan<'_>) -> Result<()> {
        if let (Some(keys), Some(first)) = (self.keys.as_mut(), cols.first()) {
            keys.extend(shard::selection_keys(
                first,
                ids,
                &plan.selection,
                plan.seed,
                plan.shard.is_some(),
            )?);
        }
        Ok(())
    }

    /// The best `k` items by key (ties by position), in the split's order, once more than
    /// `2k + 1024` are held: a running best-`top` whose memory stays bounded.
    fn keep_best(&mut self, k: usize) {
        let Some(keys) = self.keys.as_ref() else {
            return;
        };
        if self.ids.len() <= k.saturating_mul(2).saturating_add(1024) {
            return;
        }
        let mut order: Vec<usize> = (0..self.ids.len()).collect();
        order.sort_by(|&a, &b| {
            keys[b]
                .total_cmp(&keys[a])
                .then(self.indices[a].cmp(&self.indices[b]))
        });
        order.truncate(k);
        order.sort_unstable();
        *self = Scored {
            indices: order.iter().map(|&i| self.indices[i]).collect(),
            ids: order.iter().map(|&i| self.ids[i].clone()).collect(),
            cols: self
                .cols
                .iter()
                .map(|c| order.iter().map(|&i| c[i]).collect())
                .collect(),
            keys: Some(order.iter().map(|&i| keys[i]).collect()),
            count: self.count,
            fingerprint: None,
            draws: self.draws.take().map(|d| d.pick(&order)),
        };
    }
}

/// [`score_all`], and with `draws` the first scorer's stochastic predictions.
fn score_keeping_draws(
    scoring: &Scoring<'_>,
    ds: &Dataset,
    scorers: &[Arc<dyn Scorer>],
    seed: u64,
    draws: bool,
) -> Result<(Vec<Vec<f32>>, Option<Draws>)> {
    let all: Vec<usize> = (0..ds.len()).collect();
    let mut kept = None;
    let cols = scorers
        .iter()
        .enumerate()
        .map(|(k, s)| {
            let mut rng = stream(seed, Purpose::Perturb, 0);
            let ev = scoring.evidence(ds, &all, s.needs(), &mut rng, &mut Silent)?;
            if draws && k == 0 {
                kept = Some(draws_of(&ev, s.name())?);
            }
            Ok(s.score(&ev)?)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((cols, kept))
}

/// The stochastic predictions of `ev`, item by item; scorer `name` must have drawn some.
fn draws_of(ev: &alkit_acquisition::Evidence, name: &str) -> Result<Draws> {
    let samples = ev.samples.as_ref().ok_or_else(|| {
        Error::config(
            "select",
            format!("`{name}` gives no draws to choose a batch from"),
        )
    })?;
    let d = samples.draws();
    let (n, sd, c) = (samples.n(), d.len(), d.first().map_or(0, |p| p.classes()));
    let mut flat = Vec::with_capacity(n * sd * c);
    for i in 0..n {
        for p in d {
            flat.extend_from_slice(p.row(i));
        }
    }
    Ok(Draws {
        values: flat,
        draws: sd,
        classes: c,
    })
}

/// A score table's header: `index,id,<name>...`.
pub(super) fn table_header<'a>(names: &[&'a str]) -> Vec<&'a str> {
    let mut header = vec!["index", "id"];
    header.extend(names);
    header
}

/// One row of a score table: the item's position, its id, then its scores as `f32`'s
/// shortest round-trip text.
pub(super) fn table_row(index: usize, id: &str, scores: impl Iterator<Item = f32>) -> Vec<String> {
    let mut row = vec![index.to_string(), id.to_string()];
    row.extend(scores.map(|v| v.to_string()));
    row
}
