//! Label Studio: a session's batch as tasks to import, answers read back from every export
//! format, and what the ML backend ([`crate::serve::backend`]) sends for a task.
//!
//! **Tasks** ([`tasks::write_tasks`]): a JSON list with one task per queried item, best
//! first. Each task's `data` holds the item (`image`: a PNG data URI of the pixels the model
//! sees, for image pools; `text`: the feature values, for tabular pools), `alkit_id` (the
//! item's stable id, which answers are matched by), and the round, rank and acquisition
//! score. Its `predictions` hold the last model's most probable class as a pre-annotation.
//! The prediction's `score` is what Label Studio shows as a confidence: in [0, 1], higher =
//! more sure, and ordered as alkit orders the batch, lowest first, because Label Studio's
//! Data Manager and uncertainty sampling show the lowest first ([`ordered_confidence`]).
//! Every round's predictions carry one `model_version` per session ([`model_version`]),
//! so that a project keeps showing them round after round; the round is in the result's
//! `meta`. The labeling configuration to paste into the project ([`labeling_config`]) is a
//! `Choices` tag `label` over `image` (or `text`) with one `Choice` per class name.
//!
//! **Answers** ([`export`]): Label Studio's JSON, JSON_MIN, CSV and TSV exports, matched by
//! `alkit_id` (or, for tasks of an image-folder pool imported from that folder, by image
//! path: [`image_path`]), and alkit's own `id,label` files; [`teach_file`] teaches them through the
//! session's checks, where an answer an item already has is a no-op and another label for a
//! labeled item an error.

pub mod export;
pub mod image_path;
mod project;
pub mod tasks;

pub use export::{read_export, read_export_with, Export, ExportFormat, ExportRow, ImageNamer};
pub(crate) use project::short;
pub use project::{
    image_folder, labeling_config, model_version, ordered_confidence, prediction, FROM_NAME,
};
pub use tasks::{tasks, write_batch, write_tasks};

use crate::error::{Error, Result};
use crate::session::{Answer, Learner, Taught};
use std::path::Path;

/// Teaches `learner` the answers in `path`: any Label Studio export with choices (JSON,
/// JSON_MIN, CSV, TSV) of tasks alkit wrote, or alkit's `id,label` answers (see [`export`]);
/// checked whole, one bad row changes nothing. Errors about a row name Label Studio's task
/// too.
pub fn teach_file(learner: &mut Learner, path: &Path) -> Result<TaughtFile> {
    let items = learner.shared_items();
    let namer = |url: &str| image_path::item_of_image(&items, url).map(|i| items.ids()[i].clone());
    let images = image_folder(learner.state()).then_some(&namer as ImageNamer<'_>);
    let export = read_export_with(path, images)?;
    let answers: Vec<Answer> = export
        .rows
        .iter()
        .map(|r| Answer {
            row: r.row,
            id: r.id.clone(),
            label: r.label.clone(),
            note: r.note.clone(),
            guess: None,
            round: None,
        })
        .collect();
    let taught = learner
        .teach_file_answers(&answers, path)
        .map_err(|e| match e {
            Error::Row { path, row, problem } => match export.task_of(row) {
                Some(t) if !problem.contains("Label Studio task") => Error::Row {
                    path,
                    row,
                    problem: format!("Label Studio task {t}: {problem}"),
                },
                _ => Error::Row { path, row, problem },
            },
            e => e,
        })?;
    Ok(TaughtFile {
        format: export.format,
        taught,
        unanswered: export.unanswered,
    })
}

/// What [`teach_file`] read and taught.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaughtFile {
    /// What the file was read as.
    pub format: ExportFormat,
    /// Answers taught, and those repeating a label the item already had.
    pub taught: Taught,
    /// Tasks of an export without an answer.
    pub unanswered: usize,
}

#[cfg(test)]
mod tests {
    use super::ordered_confidence;

    #[test]
    fn ordered_confidence_pools_adjacent_violators_and_rises_strictly() {
        // Worked by hand: 0.9 > 0.5 pool to 0.7; 0.7 joins them (0.7 <= 0.7 keeps order);
        // 0.8 stays. Each value then gains 1e-4 (k + 1) / (n + 1) and loses 1e-4 of itself.
        let s = ordered_confidence(&[0.9, 0.5, 0.7, 0.8]);
        let fit = [0.7, 0.7, 0.7, 0.8];
        for (k, (got, f)) in s.iter().zip(fit).enumerate() {
            let want = f * (1.0 - 1e-4) + 1e-4 * (k as f64 + 1.0) / 5.0;
            assert!((got - want).abs() < 1e-6, "{k}: {got} vs {want}");
        }
        assert!(s.windows(2).all(|w| w[0] < w[1]));
        // Already rising: each item keeps its own confidence (within the nudge).
        let up = ordered_confidence(&[0.1, 0.4, 0.95]);
        for (got, c) in up.iter().zip([0.1, 0.4, 0.95]) {
            assert!((got - c).abs() < 1e-4, "{got} vs {c}");
        }
        // Non-finite confidences count as 0; every value stays within [0, 1].
        let odd = ordered_confidence(&[f32::NAN, 1.0, 1.0, 1.0]);
        assert!(odd.iter().all(|v| (0.0..1.0).contains(v)), "{odd:?}");
        assert!(odd.windows(2).all(|w| w[0] < w[1]));
        assert!(ordered_confidence(&[]).is_empty());
    }
}
