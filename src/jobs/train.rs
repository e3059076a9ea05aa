//! `alkit train`: a built-in model fitted on a training split and saved as a checkpoint
//! before anything else happens, then evaluated on the test split.

use crate::checkpoint::{self, Checkpoint};
use crate::data::{Dataset, Normalizer};
use crate::error::Result;
use crate::models::{Arch, ModelKind};
use crate::observe::{Observer, Silent};
use crate::train::train;
use candle_core::Device;
use std::path::Path;

/// Fits `kind` on `train_raw[ids]` (normalised with statistics of the whole split) from the
/// streams of `(seed, 0)` and saves it as a checkpoint in `out` (class names `0..c`) before
/// returning it, so that a long training is never lost to what follows.
#[allow(clippy::too_many_arguments)]
pub(super) fn fit_and_save(
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

/// `alkit train`: fits `kind` on `splits.train[ids]` (all of it when `ids` is `None`;
/// normalised with the whole train split's statistics) from the streams of `(seed, 0)`,
/// evaluates it on the test split and saves it as a checkpoint in `out` (class names `0..c`).
#[allow(clippy::too_many_arguments)]
pub fn run(
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
