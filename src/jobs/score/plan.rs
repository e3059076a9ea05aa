//! A [`ScoreJob`] resolved once into a checked [`Plan`]: which way the split is read (streamed
//! a chunk at a time, or whole) and where its rows go (a CSV written as scored, the best `top`,
//! a shard with its manifest, BatchBALD's picks, or a feature-space selector's joint picks).
//! Every check that needs no model or item is made here, before anything is opened, in the
//! order a user meets them.

use super::super::shard::Shard;
use super::chunks::draws_noise;
use super::job::{ScoreJob, Split};
use super::joint::JointPlan;
use super::read::Input;
use crate::error::{Error, Result};
use crate::hub::Hub;
use crate::observe::Silent;
use crate::round::Pick;
use crate::strategies::{per_item_scorers, ScorerSettings, SelectKind};
use alkit_acquisition::{BatchSelector, Scorer, Selection};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What a score job does, checked.
pub(super) enum Plan {
    /// Per-item scorers over the split (boxed: the settings make it the larger variant).
    Scores(Box<Scores>),
    /// One feature-space selector (BADGE, core-set, TypiClust, ProbCover) choosing `top` items
    /// jointly from the whole split, read through one model.
    Joint {
        /// The selector.
        selector: Arc<dyn BatchSelector>,
        /// The batch's size.
        top: usize,
    },
}

/// Per-item scoring, checked: the scorers, how they rank, how the split is read and where the
/// rows go.
pub(super) struct Scores {
    /// The settings as read (`members` set from the checkpoints), for a shard's manifest.
    pub settings: ScorerSettings,
    /// The scorers; the first ranks.
    pub scorers: Vec<Arc<dyn Scorer>>,
    /// How the first scorer's scores rank the items.
    pub selection: Selection,
    /// How the split is read.
    pub input: Input,
    /// Where the rows go.
    pub output: Output,
}

/// Where the scored rows go.
#[derive(Debug, Clone, Copy)]
pub(super) enum Output {
    /// Every item's row written to the CSV as its chunk is scored; nothing per item is held.
    Table,
    /// Every item's row kept in memory ([`super::table`]).
    Memory,
    /// The best `k` rows by the selection's keys.
    Top(usize),
    /// BatchBALD's picks among the best candidates, kept with their draws.
    Picks(JointPlan),
    /// This shard's rows (its best `top` when given: BatchBALD's candidates with their draws
    /// under `joint`) and a manifest for the merge.
    Shard {
        /// The shard.
        shard: Shard,
        /// Rows kept.
        top: Option<usize>,
        /// BatchBALD's plan, when the merge chooses jointly.
        joint: Option<JointPlan>,
    },
}

impl Output {
    /// The best rows kept while scoring; `None` keeps every item.
    pub fn kept(&self) -> Option<usize> {
        match *self {
            Output::Table | Output::Memory => None,
            Output::Top(k) => Some(k),
            Output::Picks(j) => Some(j.candidates),
            Output::Shard { top, .. } => top,
        }
    }

    /// Whether the first scorer's draws are kept with the rows (for BatchBALD's choice).
    pub fn draws(&self) -> bool {
        matches!(
            self,
            Output::Picks(_) | Output::Shard { joint: Some(_), .. }
        )
    }
}

impl Plan {
    /// `job` for [`super::run`], checked against itself and its output file.
    pub fn new(job: &ScoreJob, hub: &Hub) -> Result<Plan> {
        let settings = job.settings()?;
        settings.refuse_class_balance("`score` has no labeled items to balance")?;
        if let [kind] = job.scorers.as_slice() {
            if let Pick::Batch(selector) = kind.build(&settings) {
                if selector.needs().features {
                    let top = check_selector(job, selector.as_ref(), hub)?;
                    return Ok(Plan::Joint { selector, top });
                }
            }
        }
        // BatchBALD chooses among the best `candidates` by BALD, which is scored as usual.
        let joint = (settings.select == SelectKind::BatchBald)
            .then(|| JointPlan::new(&job.scorers, job.top, job.candidates))
            .transpose()?;
        let per_item = match joint {
            Some(_) => ScorerSettings {
                select: SelectKind::TopK,
                ..settings
            },
            None => settings,
        };
        let scorers = per_item_scorers(&job.scorers, &per_item)?;
        check_pool_scoring(job, &scorers)?;
        check_out(job, hub)?;
        let selection = selection(&settings, joint.is_some(), job.top)?;
        let noisy = check_noise(&scorers, job.shard)?;
        let output = match (job.shard, joint, job.top) {
            (Some(shard), joint, top) => Output::Shard {
                shard,
                top: joint.map_or(top, |j| Some(j.candidates)),
                joint,
            },
            (None, Some(j), _) => Output::Picks(j),
            (None, None, Some(k)) => Output::Top(k),
            (None, None, None) => Output::Table,
        };
        Ok(Plan::Scores(Box::new(Scores {
            settings,
            scorers,
            selection,
            input: input(job.split, noisy),
            output,
        })))
    }

    /// `job` for [`super::table`]: every item kept in memory, so nothing that chooses rows of
    /// a file (`top`, a shard, a selection other than top-k) is taken.
    pub fn in_memory(job: &ScoreJob) -> Result<Scores> {
        let settings = job.settings()?;
        let chooses = |what: &str| {
            Error::config(
                "scorer",
                format!("{what} chooses a batch; scoring every item keeps them all (select from the scores afterwards)"),
            )
        };
        if job.top.is_some() {
            return Err(chooses("setting `top`"));
        }
        if job.shard.is_some() {
            return Err(Error::config(
                "shard",
                "a shard is written for a merge; score every item in one call",
            ));
        }
        if settings.select != SelectKind::TopK {
            return Err(chooses(&format!("selection `{}`", settings.select.name())));
        }
        let scorers = per_item_scorers(&job.scorers, &settings)?;
        check_pool_scoring(job, &scorers)?;
        let noisy = scorers.iter().any(|s| draws_noise(s.as_ref()) || s.joint());
        Ok(Scores {
            settings,
            scorers,
            selection: Selection::TopK,
            input: input(job.split, noisy),
            output: Output::Memory,
        })
    }
}

/// A train split is streamed for scorers that draw no noise; anything else is read whole.
fn input(split: Split, noisy: bool) -> Input {
    match split {
        Split::Train if !noisy => Input::Streamed,
        _ => Input::Whole,
    }
}

/// The selection ranking the rows (top-k under BatchBALD, whose choice comes after); a
/// stochastic one needs the batch's size.
fn selection(settings: &ScorerSettings, joint: bool, top: Option<usize>) -> Result<Selection> {
    let selection = match (joint, settings.select.selection(settings.beta)) {
        (true, _) => Selection::TopK,
        (false, Some(s)) => s,
        (false, None) => {
            return Err(Error::config(
                "select",
                "batchbald has no per-item selection",
            ))
        }
    };
    if selection.is_stochastic() && top.is_none() {
        return Err(Error::config(
            "select",
            format!(
                "selection `{}` draws a batch: give its size (setting `top`)",
                settings.select.name()
            ),
        ));
    }
    Ok(selection)
}

/// Whether a scorer's scores depend on how the split is cut: it draws noise per batch
/// ([`draws_noise`]) or compares the items with each other ([`Scorer::joint`]); the split is
/// then read whole, and a shard is refused.
fn check_noise(scorers: &[Arc<dyn Scorer>], shard: Option<Shard>) -> Result<bool> {
    let noisy = scorers.iter().find(|s| draws_noise(s.as_ref()));
    if let (Some(s), Some(_)) = (noisy, shard) {
        return Err(Error::config(
            "shard",
            format!(
                "`{}` draws noise per batch, so its scores would depend on the split; shard \
                 deterministic scorers (entropy, margin, regrad, exgrad, an ensemble's bald, ...)",
                s.name()
            ),
        ));
    }
    let joint = scorers.iter().find(|s| s.joint());
    if let (Some(s), Some(_)) = (joint, shard) {
        return Err(Error::config(
            "shard",
            format!(
                "`{}` compares each item with the others, which no shard sees: run it unsharded",
                s.name()
            ),
        ));
    }
    Ok(noisy.is_some() || joint.is_some())
}

/// A feature-space selector's job: a batch's size given, unsharded, one model, a batch of at
/// least one, an output that overwrites no input; its `top`.
fn check_selector(job: &ScoreJob, selector: &dyn BatchSelector, hub: &Hub) -> Result<usize> {
    let name = selector.name();
    let top = job.top.ok_or_else(|| {
        Error::config(
            "top",
            format!("`{name}` chooses a batch jointly: give its size (setting `top`)"),
        )
    })?;
    if job.shard.is_some() {
        return Err(Error::config(
            "shard",
            format!(
                "`{name}` chooses jointly among every item, which no shard sees: run it unsharded \
                 (the per-item scorers shard exactly)"
            ),
        ));
    }
    if job.checkpoints.len() != 1 {
        return Err(Error::config(
            "checkpoint",
            format!("`{name}` reads one model's features; an ensemble has one per member"),
        ));
    }
    if job.batch == Some(0) {
        return Err(Error::config("batch", "must be at least 1"));
    }
    check_out(job, hub)?;
    Ok(top)
}

/// Refuses batch and chunk sizes of 0, and scorers that compare items with the training
/// items' features: scoring a pool reads none.
fn check_pool_scoring(job: &ScoreJob, scorers: &[Arc<dyn Scorer>]) -> Result<()> {
    if job.batch == Some(0) || job.chunk == 0 {
        return Err(Error::config(
            "batch",
            "setting `batch` and setting `chunk` must be at least 1",
        ));
    }
    if job.top == Some(0) {
        return Err(Error::config(
            "top",
            "0 items would be kept: give at least 1, or leave it out to write every item",
        ));
    }
    if let Some(s) = scorers.iter().find(|s| s.needs().reference) {
        return Err(Error::config(
            "scorer",
            format!(
                "`{}` compares each item with the features of the items the model was trained \
                 on (the `la` posterior and setting `posterior` laplace are fitted on them), \
                 and scoring a pool reads none: evaluate it against a train split (OOD \
                 detection or calibration)",
                s.name()
            ),
        ));
    }
    Ok(())
}

/// Refuses an output file that would overwrite the job's checkpoint (any file it is read
/// from: an ONNX model's external data beside it too) or data.
fn check_out(job: &ScoreJob, hub: &Hub) -> Result<()> {
    let mut inputs: Vec<PathBuf> = job.checkpoints.iter().map(PathBuf::from).collect();
    for name in job.checkpoints.iter().filter(|n| !n.starts_with("hf:")) {
        // A checkpoint that cannot be listed is refused when it is opened, by name.
        if let Ok(files) = crate::checkpoint::files(name, hub, &mut Silent) {
            inputs.extend(files);
        }
    }
    inputs.push(PathBuf::from(&job.data));
    let inputs: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
    crate::fsutil::check_output("out", &job.out, &inputs)
}
