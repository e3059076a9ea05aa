//! Joint choices of a batch: BatchBALD's greedy choice among BALD's best candidates
//! ([`JointPlan`], [`joint_rows`]), and a feature-space selector's picks from the whole split
//! ([`select_jointly`]).

use super::super::shard;
use super::chunks::Scored;
use super::job::{ScoreJob, ScoreReport};
use super::read::{batch, check_item_shape, open_checkpoint, read_whole, source};
use crate::data::stream::Chunk;
use crate::data::Dataset;
use crate::error::{Error, Result, ResultExt};
use crate::fsutil::write_csv;
use crate::hub::Hub;
use crate::observe::Observer;
use crate::rng::{stream, Purpose};
use crate::strategies::StrategyKind;
use alkit_acquisition::BatchSelector;
use candle_core::Device;
use std::sync::Arc;

/// `alkit score --select batchbald`: BALD scored per item, the best `candidates` kept with
/// their draws, then BatchBALD's greedy choice of `top` among them (see [`shard`]'s docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct JointPlan {
    /// Items chosen.
    pub top: usize,
    /// Candidates of the greedy choice.
    pub candidates: usize,
}

impl JointPlan {
    /// Checks the settings: the one scorer `bald`, `top` given, `candidates` (default
    /// `10 top`) at least `top`.
    pub fn new(
        scorers: &[StrategyKind],
        top: Option<usize>,
        candidates: Option<usize>,
    ) -> Result<JointPlan> {
        if scorers.len() != 1 || scorers[0].name() != "bald" {
            return Err(Error::config(
                "select",
                "selection `batchbald` chooses from BALD's draws: give the scorer `bald` alone (setting `scorer`)",
            ));
        }
        let top = top.filter(|&k| k > 0).ok_or_else(|| {
            Error::config(
                "select",
                "selection `batchbald` chooses a batch: give its size (setting `top`)",
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

/// The unsharded joint choice from a scoring that kept its best candidates with their draws:
/// rows `index,id,<scores>` of the `top` items picked, in the order picked, each field as a
/// shard file writes it (so the merge of shards gives the same bytes).
pub(super) fn joint_rows(
    scored: &Scored,
    joint: &shard::Joint,
    top: usize,
) -> Result<Vec<Vec<String>>> {
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
    Ok(shard::joint_pick(
        cands,
        joint,
        top,
        alkit_acquisition::BatchBald::DEFAULT_CONFIGS,
    )?
    .into_iter()
    .map(|c| c.fields)
    .collect())
}

/// `job` with one feature-space batch selector (checked by its plan): the split read whole
/// through the checkpoint (one model), the selector's `top` picks written as rows
/// `index,id,<selector>` in the order chosen, the last column the pick's rank (1 = first).
/// Nothing of the pool is labeled here, so core-set, TypiClust and ProbCover start cold (an
/// empty labeled set); the selection draws from `(seed, Select, 0)`.
pub(super) fn select_jointly(
    job: &ScoreJob,
    (selector, top): (&dyn BatchSelector, usize),
    hub: &Hub,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<ScoreReport> {
    let name = selector.name();
    let ck = open_checkpoint(job, hub, device, observer)?;
    ck.config.arch.check_needs(name, &selector.needs())?;
    let data = job.data.as_str();
    let source = source(job)?;
    let mut st = read_whole(job, &source, ck.config.preprocess.as_ref(), hub, observer)?;
    let shape = st.item_shape().to_vec();
    check_item_shape(&ck, data, &shape)?;
    let whole = crate::data::stream::drain(st.as_mut())
        .context_with(|| format!("loading the data {data}"))?
        .unwrap_or(Chunk {
            start: 0,
            ids: Vec::new(),
            x: Vec::new(),
        });
    let n = whole.ids.len();
    let raw = Dataset::new(whole.x, vec![0; n], shape.clone(), 1)?;
    let ds = ck.config.normalizer.apply(&raw)?;
    // The items' shape is the checkpoint's (checked above); a selector draws no perturbed copies.
    let batch = batch(job, &ck, &[])?;
    let mut scoring = super::super::model::scoring(&ck, device);
    scoring.batch = batch;
    let all: Vec<usize> = (0..n).collect();
    let nothing =
        crate::predict::reference_of(ck.model.as_ref(), &ds, &[], batch, device, observer)?;
    scoring.reference = Some(Arc::new(nothing));
    let mut noise = stream(job.seed, Purpose::Perturb, 0);
    let ev = scoring
        .evidence(&ds, &all, selector.needs(), &mut noise, observer)
        .context_with(|| format!("scoring {data}"))?;
    let mut rng = stream(job.seed, Purpose::Select, 0);
    let picks = selector.select(&ev, top.min(n), &mut rng)?;
    let rows = picks.iter().enumerate().map(|(rank, &p)| {
        vec![
            (whole.start + p).to_string(),
            whole.ids[p].clone(),
            (rank + 1).to_string(),
        ]
    });
    write_csv(&job.out, &["index", "id", name], rows)?;
    Ok(ScoreReport {
        scored: n,
        rows: picks.len(),
    })
}
