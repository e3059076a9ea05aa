//! The scorers evaluated standalone: out-of-distribution detection ([`ood`]) and calibration
//! ([`calibrate`]), each a library experiment like `curve`: it takes a model and data, writes
//! its tables and plots into a folder and returns what it measured, and the binary only prints.
//!
//! This module holds what both share: where the model comes from ([`ModelSource`]: a
//! checkpoint, or one trained here and saved at once, so a long training is never lost),
//! and scoring a whole split with several scorers.

pub mod calibrate;
pub mod ood;
pub mod scores_file;
pub mod shard;

use crate::checkpoint::{self, Checkpoint};
use crate::data::{Dataset, Normalizer};
use crate::error::{Error, Result};
use crate::fsutil::write_csv;
use crate::hub::Hub;
use crate::models::{Arch, ModelKind};
use crate::observe::{Observer, Silent};
use crate::predict::Scoring;
use crate::rng::{stream, Purpose};
use crate::train::{train, TrainConfig, TrainRngs};
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

/// The checkpoint of `source`, or `source.model` trained here on `train_raw[..limit]` (all of
/// it when `limit` is `None`, normalised with statistics of the whole split) and saved as a
/// checkpoint in `save_to` before anything else happens. A checkpoint must take items of
/// `train_raw`'s shape.
pub fn prepare(
    source: &ModelSource,
    train_raw: &Dataset,
    limit: Option<usize>,
    save_to: &Path,
    hub: &Hub,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<Checkpoint> {
    if let Some(name) = &source.checkpoint {
        let c = checkpoint::open(name, hub, device, observer)?;
        if c.config.item_shape != train_raw.item_shape() {
            return Err(Error::config(
                "checkpoint",
                format!(
                    "{name} expects items {:?}, the data has {:?}",
                    c.config.item_shape,
                    train_raw.item_shape()
                ),
            ));
        }
        return Ok(c);
    }
    let params = TrainConfig {
        steps: source.steps,
        batch_size: source
            .batch_size
            .unwrap_or(source.model.default_batch_size()),
        ..TrainConfig::default()
    }
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
        &train_ds,
        ids,
        params,
        TrainRngs::for_cycle(seed, 0),
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
/// perturbation scorers through its architecture (inference batch 512).
pub fn scoring<'a>(ck: &'a Checkpoint, device: &'a Device) -> Scoring<'a> {
    Scoring {
        model: ck.model.as_ref(),
        params: Some(&ck.params),
        builder: Some(&ck.config.arch),
        input_std: &ck.config.normalizer.std,
        batch: 512,
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
    let all: Vec<usize> = (0..ds.len()).collect();
    scorers
        .iter()
        .map(|s| {
            let mut rng = stream(seed, Purpose::Perturb, 0);
            let ev = scoring.evidence(ds, &all, s.needs(), &mut rng, &mut Silent)?;
            Ok(s.score(&ev)?)
        })
        .collect()
}

/// Creates the output folder `out`.
fn create_out(out: &Path) -> Result<()> {
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))
}

/// Writes a score table to `out` atomically: header `index,id,<name>...`, one row per item
/// (`cols[k][i]` is scorer `k`'s score of item `i`), in item order, or with `top = Some(k)` the
/// `k` items with the highest `keys` (the first scorer's scores when `None`; ties by index).
/// Fields are quoted as RFC 4180 requires, so an id with a comma reads back.
pub fn write_scores(
    out: &Path,
    ids: &[String],
    names: &[&str],
    cols: &[Vec<f32>],
    top: Option<usize>,
    keys: Option<&[f64]>,
) -> Result<()> {
    if cols.len() != names.len() || cols.iter().any(|c| c.len() != ids.len()) {
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
        let mut row = vec![i.to_string(), ids[i].clone()];
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
    let m = crate::predict::evaluate(ck.model.as_ref(), &test, 512, device, &mut Silent)?;
    Ok(m)
}
