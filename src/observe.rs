//! Progress reporting: the library never prints; it tells an [`Observer`].
//!
//! The binary implements `Observer` with indicatif progress bars; tests implement it to
//! interrupt a run at an exact point. Returning [`Control::Stop`] ends the run cleanly with
//! [`crate::Error::Interrupted`]; every cycle completed before it is already saved.

use serde::{Deserialize, Serialize};

/// Something the library is doing or has done.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Event<'a> {
    /// A run (one strategy, one seed) begins or resumes.
    RunStarted {
        /// Strategy name.
        strategy: &'a str,
        /// The seed.
        seed: u64,
        /// First cycle that will be computed (0 for a fresh run).
        from_cycle: usize,
        /// Last cycle.
        cycles: usize,
    },
    /// Training of a cycle's model begins.
    CycleStarted {
        /// The cycle.
        cycle: usize,
        /// Labeled items it trains on.
        labeled: usize,
    },
    /// One optimiser step finished (`step` counts from 1).
    TrainStep {
        /// Steps done.
        step: usize,
        /// Steps in all.
        steps: usize,
        /// Training loss of this batch, read every few steps (reading it costs a device sync).
        loss: Option<f32>,
    },
    /// Items scored so far while scoring a pool or evaluating.
    Scoring {
        /// Items done.
        done: usize,
        /// Items in all.
        total: usize,
    },
    /// Bytes of a file downloaded from the Hub so far.
    Download {
        /// Path of the file inside its repository.
        file: &'a str,
        /// Bytes done.
        done: u64,
        /// Bytes in all (0 while unknown).
        total: u64,
    },
    /// A pool was scored: one score per candidate, before selection.
    Scored {
        /// The cycle whose model scored (its picks are labeled in `cycle + 1`).
        cycle: usize,
        /// Dataset indices of the candidates `(m,)`.
        indices: &'a [usize],
        /// Their scores `(m,)`, higher = label first.
        scores: &'a [f32],
    },
    /// A cycle finished, its record saved.
    CycleFinished {
        /// The record.
        record: &'a CycleRecord,
    },
    /// A cycle of a run whose record is not a classifier's finished (a regression curve's),
    /// with its headline figure on the test split.
    CycleMeasured {
        /// The cycle.
        cycle: usize,
        /// What the figure is (`rmse`).
        metric: &'a str,
        /// Its value.
        value: f64,
    },
    /// Files of a data source left out of its items because they are not images (an image
    /// folder's notes, metadata, sidecar files), told once per read so that nothing is
    /// skipped unsaid; the binary names them in one line.
    LeftOut {
        /// The data source (a folder).
        source: &'a str,
        /// The files, relative to `source`, in its order.
        files: &'a [String],
    },
    /// Something alkit chose for a model or source that nothing named (an ONNX model's
    /// features, found in its graph as its last layer's input), told once per open so that
    /// nothing is chosen unsaid; the binary prints it in one line.
    Chose {
        /// The model or source (a path).
        source: &'a str,
        /// What was chosen, and from what, in words.
        what: &'a str,
    },
}

/// What the observer wants the library to do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Go on.
    Continue,
    /// Stop as soon as possible (completed cycles stay saved).
    Stop,
}

/// Receives progress events.
pub trait Observer {
    /// Called for each event; the default ignores it.
    fn on(&mut self, event: &Event<'_>) -> Control {
        let _ = event;
        Control::Continue
    }
}

/// Tells `observer` about `event`; `Err(Interrupted)` when it asks to stop.
pub fn check(observer: &mut dyn Observer, event: &Event<'_>) -> crate::Result<()> {
    match observer.on(event) {
        Control::Continue => Ok(()),
        Control::Stop => Err(crate::Error::Interrupted),
    }
}

/// An observer that ignores everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct Silent;

impl Observer for Silent {}

/// One row of an acquisition curve: what a finished cycle reports (it lives here, with the
/// events that carry it, so that reporting sits below the loop that produces it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CycleRecord {
    /// Cycle (0 = trained on the seed set).
    pub cycle: usize,
    /// Labeled items the cycle's model was trained on.
    pub labeled: usize,
    /// Test accuracy.
    pub acc: f64,
    /// Test NLL (nats).
    pub nll: f64,
    /// Test balanced accuracy: the mean recall over the classes with test items (`None` in a
    /// run recorded before it was kept).
    #[serde(default)]
    pub balanced_acc: Option<f64>,
    /// Test recall per class (`None` for a class without test items; empty in a run recorded
    /// before it was kept).
    #[serde(default)]
    pub recall: Vec<Option<f64>>,
    /// Seconds spent training.
    pub train_s: f64,
    /// Seconds spent scoring and selecting the items this cycle added (0 for cycle 0).
    pub score_s: f64,
    /// What the cycle's predictions on the run's stop set say for the stopping rules (`None`
    /// in a run recorded before they were kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopping: Option<crate::metrics::stopping::StopMeasure>,
}

#[cfg(test)]
mod tests {
    use super::CycleRecord;

    #[test]
    fn a_record_from_before_recall_was_kept_still_loads() {
        let old = r#"{"cycle":1,"labeled":40,"acc":0.5,"nll":1.2,"train_s":0.1,"score_s":0.0}"#;
        let r: CycleRecord = serde_json::from_str(old).unwrap();
        assert_eq!((r.acc, r.balanced_acc, r.recall.len()), (0.5, None, 0));
    }
}
