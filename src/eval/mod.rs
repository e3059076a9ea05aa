//! The scorers evaluated standalone: out-of-distribution detection ([`ood`]) and calibration
//! ([`calibrate`]), each a library experiment like `curve`: it takes a model and data, writes
//! its tables and plots into a folder and returns what it measured, and the binary only prints.
//!
//! This module holds what both share: where the model comes from ([`ModelSource`]: a
//! checkpoint, or one trained here and saved at once, so a long training is never lost),
//! and scoring a whole split with several scorers.

pub mod calibrate;
pub mod ood;
pub mod score;
pub mod scores_file;
pub mod shard;

use crate::checkpoint::{self, Checkpoint};
use crate::data::source::load_splits;
use crate::data::{Dataset, Normalizer, Splits};
use crate::error::{Error, Result, ResultExt};
use crate::fsutil::write_csv;
use crate::hub::Hub;
use crate::models::{Arch, ModelKind};
use crate::observe::{Observer, Silent};
use crate::predict::Scoring;
use crate::rng::{stream, Purpose};
use crate::train::train;
use alkit_acquisition::Scorer;
use candle_core::Device;
use std::path::Path;
use std::sync::Arc;

/// Where an experiment's model comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSource {
    /// A checkpoint folder or `hf:OWNER/NAME[@REV]`; `None`: train `model` here.
    pub checkpoint: Option<String>,
    /// The built-in model to train when no checkpoint is given.
    pub model: ModelKind,
    /// Optimiser steps when training here.
    pub steps: usize,
    /// Mini-batch size when training here (`None`: 32, or DUQ's own 128).
    pub batch_size: Option<usize>,
    /// Seed of the training and of the scorers' noise.
    pub seed: u64,
}

/// `source.model` trained here on `train_raw[..limit]` (all of it when `limit` is `None`,
/// normalised with statistics of the whole split) and saved as a checkpoint in `save_to`
/// before anything else happens.
fn train_and_save(
    source: &ModelSource,
    train_raw: &Dataset,
    limit: Option<usize>,
    save_to: &Path,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<Checkpoint> {
    let params = source
        .model
        .train_config(source.steps, source.batch_size, None, None)?
        .validate()?;
    let n = limit.unwrap_or(train_raw.len()).min(train_raw.len());
    let ids: Vec<usize> = (0..n).collect();
    fit_and_save(
        source.model,
        train_raw,
        &ids,
        &params,
        source.seed,
        save_to,
        device,
        observer,
    )
}

impl ModelSource {
    /// The model and the data sets named by `data` (each with a test split) read for it. A
    /// checkpoint is opened first and the data read through its preprocessing (a timm model's
    /// resize and crop); without one the data are read as stored and `model` is trained on the
    /// first one's `train[..limit(n)]` and saved to `save_to` (`train_and_save`). Scorers the model
    /// cannot serve (`duq` without DUQ, MC dropout without dropout) are refused before anything
    /// trains. Downloads and training report to `observer`.
    #[allow(clippy::too_many_arguments)]
    pub fn model_and_data(
        &self,
        data: &[&str],
        scorers: &[Arc<dyn Scorer>],
        limit: impl Fn(usize) -> Option<usize>,
        save_to: &Path,
        hub: &Hub,
        device: &Device,
        observer: &mut dyn Observer,
    ) -> Result<(Checkpoint, Vec<Splits>)> {
        let check = |arch: &Arch| -> Result<()> {
            for s in scorers {
                arch.check_needs(s.name(), &s.needs())?;
            }
            Ok(())
        };
        let Some(c) = &self.checkpoint else {
            let splits = data
                .iter()
                .map(|d| load_splits(d, None, hub, observer))
                .collect::<Result<Vec<_>>>()?;
            let first = splits
                .first()
                .ok_or_else(|| Error::config("data", "no data set to evaluate on"))?;
            check(&Arch::for_data(self.model, &first.train))?;
            let limit = limit(first.train.len());
            let ck = train_and_save(self, &first.train, limit, save_to, device, observer)
                .context_with(|| format!("training the model saved to {}", save_to.display()))?;
            return Ok((ck, splits));
        };
        let ck = checkpoint::open_ensemble(std::slice::from_ref(c), hub, device, observer)
            .context_with(|| format!("loading the checkpoint {c}"))?;
        check(&ck.config.arch)?;
        let pre = ck.config.preprocess;
        let splits = data
            .iter()
            .map(|d| load_splits(d, pre.as_ref(), hub, observer))
            .collect::<Result<Vec<_>>>()?;
        // The first data set's labels are scored against the model's classes; the others
        // (OOD data) only need its item shape, which their evaluation checks.
        if let (Some(first), Some(name)) = (splits.first(), data.first()) {
            for split in [&first.train, &first.test] {
                check_fits(&ck, c, split).context_with(|| format!("evaluating on {name}"))?;
            }
        }
        Ok((ck, splits))
    }
}

/// Checks that the checkpoint `name` takes `data`'s items and has a class for each of its
/// labels (a model of 5 classes evaluated on data of 12 is refused, not indexed past its
/// outputs).
pub fn check_fits(ck: &Checkpoint, name: &str, data: &Dataset) -> Result<()> {
    if ck.config.item_shape != data.item_shape() {
        return Err(Error::config(
            "checkpoint",
            format!(
                "{name} expects items {:?}, the data has {:?}",
                ck.config.item_shape,
                data.item_shape()
            ),
        ));
    }
    if data.classes() > ck.model.classes() {
        return Err(Error::config(
            "checkpoint",
            format!(
                "{name} has {} classes, the data {}: its labels would point past the model's outputs",
                ck.model.classes(),
                data.classes()
            ),
        ));
    }
    Ok(())
}

/// Fits `kind` on `train_raw[ids]` (normalised with statistics of the whole split) from the
/// streams of `(seed, 0)` and saves it as a checkpoint in `out` (class names `0..c`) before
/// returning it, so that a long training is never lost to what follows.
#[allow(clippy::too_many_arguments)]
fn fit_and_save(
    kind: ModelKind,
    train_raw: &Dataset,
    ids: &[usize],
    params: &crate::train::TrainParams,
    seed: u64,
    out: &Path,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<Checkpoint> {
    let norm = Normalizer::fit(train_raw);
    let train_ds = norm.apply(train_raw)?;
    let arch = Arch::for_data(kind, &train_ds).with_batch(params.config().batch_size);
    let trained = train(
        &arch,
        None,
        &train_ds,
        ids,
        params,
        (seed, 0),
        device,
        observer,
    )?;
    let classes: Vec<String> = (0..train_ds.classes()).map(|c| c.to_string()).collect();
    let config = checkpoint::save(
        out,
        &arch,
        &trained.params,
        &norm,
        train_ds.item_shape(),
        classes,
    )?;
    Ok(Checkpoint {
        config,
        model: trained.model,
        params: trained.params,
    })
}

/// The scoring context of a checkpoint's model: gradients through its parameters,
/// perturbation scorers through its architecture (inference batch
/// [`crate::predict::default_batch`] of its items).
pub fn scoring<'a>(ck: &'a Checkpoint, device: &'a Device) -> Scoring<'a> {
    Scoring {
        model: ck.model.as_ref(),
        params: Some(&ck.params),
        builder: Some(&ck.config.arch),
        input_std: &ck.config.normalizer.std,
        batch: crate::predict::default_batch(ck.config.item_shape.iter().product()),
        device,
    }
}

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

/// Stochastic predictions of items, item by item: what BatchBALD chooses from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Draws {
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
                let samples = ev.samples.as_ref().ok_or_else(|| {
                    Error::config(
                        "select",
                        format!("`{}` gives no draws to choose a batch from", s.name()),
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
                kept = Some(Draws {
                    values: flat,
                    draws: sd,
                    classes: c,
                });
            }
            Ok(s.score(&ev)?)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((cols, kept))
}

/// True when a scorer's evidence draws noise over its whole batch (input or weight noise,
/// MC-dropout masks, REGrad*'s copies): its scores then depend on how the pool is cut into
/// batches, so such scorers see the pool whole and cannot be sharded.
pub fn draws_noise(scorer: &dyn Scorer) -> bool {
    let n = scorer.needs();
    n.grads.is_some_and(|g| g.perturbations > 0)
        || n.samples
            .is_some_and(|r| !matches!(r, alkit_acquisition::SampleRequest::Members))
}

/// What scoring a pool kept: the items' positions, ids, scores `(scorer, item)` and, when a
/// selection will rank them, their selection keys (see [`shard::selection_keys`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scored {
    /// Positions in the pool.
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
}

/// How [`score_chunks`] scores and what it keeps.
pub struct ChunkPlan<'a> {
    /// The scorers; the first ranks.
    pub scorers: &'a [Arc<dyn Scorer>],
    /// Seed of the scorers' noise and of the selection's.
    pub seed: u64,
    /// Normalisation of the model's inputs.
    pub normalizer: &'a Normalizer,
    /// Shape of one item.
    pub item_shape: &'a [usize],
    /// Only this shard's items (by id).
    pub shard: Option<shard::Shard>,
    /// How items are ranked when `top` is set or the run is sharded.
    pub selection: alkit_acquisition::Selection,
    /// Keep only the best `top` by key.
    pub top: Option<usize>,
    /// Keep the first scorer's draws of every kept item (for a joint choice).
    pub draws: bool,
}

/// Scores a pool read chunk by chunk from `next` (called with nothing; `None` ends it),
/// keeping per chunk only the plan's shard and, with `top`, a running best `top` by key:
/// memory is the chunk, the model and what is kept, not the pool. Scores equal those of
/// the whole pool in one chunk for scorers that draw no noise ([`draws_noise`]); the caller
/// passes such scorers one chunk holding everything.
pub fn score_chunks(
    scoring: &Scoring<'_>,
    plan: &ChunkPlan<'_>,
    next: &mut dyn FnMut() -> Result<Option<crate::data::stream::Chunk>>,
) -> Result<Scored> {
    let sharded = plan.shard.is_some();
    let ranked = plan.top.is_some() || sharded;
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
    while let Some(chunk) = next()? {
        let keep: Vec<usize> = (0..chunk.ids.len())
            .filter(|&i| plan.shard.is_none_or(|s| s.holds(&chunk.ids[i])))
            .collect();
        if keep.is_empty() {
            continue;
        }
        out.count += keep.len();
        let x: Vec<f32> = if keep.len() == chunk.ids.len() {
            chunk.x
        } else {
            keep.iter()
                .flat_map(|&i| chunk.x[i * len..(i + 1) * len].iter().copied())
                .collect()
        };
        let raw = Dataset::new(x, vec![0; keep.len()], plan.item_shape.to_vec(), 1)?;
        let ds = plan.normalizer.apply(&raw)?;
        drop(raw);
        let (cols, draws) = score_keeping_draws(scoring, &ds, plan.scorers, plan.seed, plan.draws)?;
        if let Some(d) = draws {
            let all = out.draws.get_or_insert(Draws {
                values: Vec::new(),
                ..d
            });
            all.values.extend(d.values);
        }
        let ids: Vec<String> = keep.iter().map(|&i| chunk.ids[i].clone()).collect();
        if let (Some(keys), Some(first)) = (out.keys.as_mut(), cols.first()) {
            if running.is_some() || sharded {
                keys.extend(shard::selection_keys(
                    first,
                    &ids,
                    &plan.selection,
                    plan.seed,
                    sharded,
                )?);
            }
        }
        out.indices.extend(keep.iter().map(|&i| chunk.start + i));
        out.ids.extend(ids);
        for (o, c) in out.cols.iter_mut().zip(cols) {
            o.extend(c);
        }
        if let (Some(k), Some(keys)) = (running, out.keys.as_ref()) {
            if out.ids.len() > 2 * k + 1024 {
                let mut order: Vec<usize> = (0..out.ids.len()).collect();
                order.sort_by(|&a, &b| {
                    keys[b]
                        .total_cmp(&keys[a])
                        .then(out.indices[a].cmp(&out.indices[b]))
                });
                order.truncate(k);
                order.sort_unstable();
                out = Scored {
                    indices: order.iter().map(|&i| out.indices[i]).collect(),
                    ids: order.iter().map(|&i| out.ids[i].clone()).collect(),
                    cols: out
                        .cols
                        .iter()
                        .map(|c| order.iter().map(|&i| c[i]).collect())
                        .collect(),
                    keys: Some(order.iter().map(|&i| keys[i]).collect()),
                    count: out.count,
                    draws: out.draws.map(|d| {
                        let w = d.width();
                        Draws {
                            values: order
                                .iter()
                                .flat_map(|&i| d.values[i * w..(i + 1) * w].iter().copied())
                                .collect(),
                            ..d
                        }
                    }),
                };
            }
        }
    }
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

/// `alkit score --select batchbald`: BALD scored per item, the best `candidates` kept with
/// their draws, then BatchBALD's greedy choice of `top` among them (see [`shard`]'s docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JointPlan {
    /// Items chosen.
    pub top: usize,
    /// Candidates of the greedy choice.
    pub candidates: usize,
}

impl JointPlan {
    /// Checks the settings: the one scorer `bald`, `top` given, `candidates` (default
    /// `10 top`) at least `top`.
    pub fn new(
        scorers: &[crate::strategies::StrategyKind],
        top: Option<usize>,
        candidates: Option<usize>,
    ) -> Result<JointPlan> {
        if scorers.len() != 1 || scorers[0].name() != "bald" {
            return Err(Error::config(
                "select",
                "--select batchbald chooses from BALD's draws: give --scorer bald alone",
            ));
        }
        let top = top.filter(|&k| k > 0).ok_or_else(|| {
            Error::config(
                "select",
                "--select batchbald chooses a batch: give its size with --top",
            )
        })?;
        let candidates = candidates.unwrap_or(top.saturating_mul(10));
        if candidates < top {
            return Err(Error::config(
                "candidates",
                format!("{candidates} candidates cannot hold a batch of {top}"),
            ));
        }
        Ok(JointPlan { top, candidates })
    }

    /// The joint choice's record, from what scoring kept (`(members, classes)` when it kept
    /// no item, a shard of none).
    pub fn resolve(
        &self,
        scored: &Scored,
        members: usize,
        classes: usize,
        seed: u64,
    ) -> shard::Joint {
        let (draws, classes) = scored
            .draws
            .as_ref()
            .map_or((members, classes), |d| (d.draws, d.classes));
        shard::Joint {
            candidates: self.candidates,
            draws,
            classes,
            seed,
        }
    }
}

/// The unsharded joint choice from a [`score_chunks`] run that kept its best candidates with
/// their draws: rows `index,id,<scores>` of the `top` items picked, in the order picked, each
/// field as a shard file writes it (so the merge of shards gives the same bytes).
pub fn joint_rows(scored: &Scored, joint: &shard::Joint, top: usize) -> Result<Vec<Vec<String>>> {
    let (draws, keys) = match (&scored.draws, &scored.keys) {
        (Some(d), Some(k)) => (d, k),
        _ => {
            return Err(Error::config(
                "select",
                "scoring kept no draws to choose from",
            ))
        }
    };
    let w = draws.width();
    let cands = (0..scored.ids.len())
        .map(|i| shard::Candidate {
            index: scored.indices[i],
            key: keys[i],
            fields: [scored.indices[i].to_string(), scored.ids[i].clone()]
                .into_iter()
                .chain(scored.cols.iter().map(|c| c[i].to_string()))
                .collect(),
            draws: draws.values[i * w..(i + 1) * w].to_vec(),
        })
        .collect();
    Ok(shard::joint_pick(cands, joint, top)?
        .into_iter()
        .map(|c| c.fields)
        .collect())
}

/// Creates the output folder `out`.
fn create_out(out: &Path) -> Result<()> {
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))
}

/// Writes a score table to `out` atomically: header `index,id,<name>...`, one row per item
/// (`indices[i]` its position in the pool, `cols[k][i]` scorer `k`'s score), in the given
/// order (the pool's), or with `top = Some(k)` the
/// `k` items with the highest `keys` (the first scorer's scores when `None`; ties by index).
/// Fields are quoted as RFC 4180 requires, so an id with a comma reads back.
pub fn write_scores(
    out: &Path,
    indices: &[usize],
    ids: &[String],
    names: &[&str],
    cols: &[Vec<f32>],
    top: Option<usize>,
    keys: Option<&[f64]>,
) -> Result<()> {
    if cols.len() != names.len()
        || indices.len() != ids.len()
        || cols.iter().any(|c| c.len() != ids.len())
    {
        return Err(Error::config(
            "scores",
            "one column of one score per item per scorer",
        ));
    }
    let mut order: Vec<usize> = (0..ids.len()).collect();
    if let (Some(k), Some(first)) = (top, cols.first()) {
        let by: Vec<f64> = match keys {
            Some(k) if k.len() == ids.len() => k.to_vec(),
            Some(_) => return Err(Error::config("keys", "one key per item")),
            None => first.iter().map(|&v| f64::from(v)).collect(),
        };
        order.sort_by(|&x, &y| by[y].total_cmp(&by[x]).then(x.cmp(&y)));
        order.truncate(k);
    }
    let mut header = vec!["index", "id"];
    header.extend(names);
    let rows = order.into_iter().map(|i| {
        let mut row = vec![indices[i].to_string(), ids[i].clone()];
        row.extend(cols.iter().map(|c| c[i].to_string()));
        row
    });
    write_csv(out, &header, rows)
}

/// `alkit train`: fits `kind` on `splits.train[ids]` (all of it when `ids` is `None`;
/// normalised with the whole train split's statistics) from the streams of `(seed, 0)`,
/// evaluates it on the test split and saves it as a checkpoint in `out` (class names `0..c`).
#[allow(clippy::too_many_arguments)]
pub fn train_checkpoint(
    kind: ModelKind,
    splits: &crate::data::Splits,
    ids: Option<&[usize]>,
    params: &crate::train::TrainParams,
    seed: u64,
    out: &Path,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<crate::predict::TestMetrics> {
    let all: Vec<usize>;
    let ids = match ids {
        Some(ids) => ids,
        None => {
            all = (0..splits.train.len()).collect();
            &all
        }
    };
    let ck = fit_and_save(
        kind,
        &splits.train,
        ids,
        params,
        seed,
        out,
        device,
        observer,
    )?;
    let test = ck.config.normalizer.apply(&splits.test)?;
    let batch = crate::predict::default_batch(test.item_len());
    let m = crate::predict::evaluate(ck.model.as_ref(), &test, batch, device, &mut Silent)?;
    Ok(m)
}
