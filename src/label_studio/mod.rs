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
pub mod tasks;

pub use export::{read_export, read_export_with, Export, ExportFormat, ExportRow, ImageNamer};
pub use tasks::{tasks, write_batch, write_tasks};

use crate::error::{Error, Result};
use crate::session::{Answer, Learner, SessionState, Taught};
use serde_json::{json, Value};
use std::path::Path;

/// Whether the session's pool is a folder of images, whose tasks imported into Label Studio
/// from that folder name their items by image path ([`image_path`]).
pub fn image_folder(state: &SessionState) -> bool {
    matches!(
        crate::data::source::Source::parse(&state.source),
        Ok(crate::data::source::Source::Images(_))
    )
}

/// The name of the `Choices` tag, in the labeling configuration and in results.
pub const FROM_NAME: &str = "label";

/// The labeling configuration (Label Studio's XML) matching [`write_tasks`]' files; `obj` is
/// the object tag the choices refer to, `image` or `text`
/// ([`crate::session::PoolItems::object_name`]).
pub fn labeling_config(classes: &[String], obj: &str) -> String {
    let escape = |s: &str| {
        s.replace('&', "&amp;")
            .replace('"', "&quot;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    let tag = if obj == "image" { "Image" } else { "Text" };
    let mut x = format!(
        "<View>\n  <{tag} name=\"{obj}\" value=\"${obj}\"/>\n  <Choices name=\"{FROM_NAME}\" toName=\"{obj}\" choice=\"single\" showInLine=\"true\">\n"
    );
    for c in classes {
        x.push_str(&format!("    <Choice value=\"{}\"/>\n", escape(c)));
    }
    x.push_str("  </Choices>\n</View>\n");
    x
}

/// The `model_version` of every prediction alkit makes for a session: `alkit-` and eight
/// hex digits of the session's pool fingerprint, seed and model, the same in every round.
/// A Label Studio project shows (and samples by) the predictions of one selected model
/// version, so a version per round would hide each new round's pre-annotations.
pub fn model_version(state: &SessionState) -> String {
    // FNV-1a: stable across runs and platforms, unlike the standard library's hasher.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let arch = format!("{:?}", state.config.arch);
    for b in state
        .pool_fingerprint
        .to_le_bytes()
        .iter()
        .chain(state.config.seed.to_le_bytes().iter())
        .chain(arch.as_bytes())
    {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("alkit-{:08x}", (h ^ (h >> 32)) as u32)
}

/// Prediction scores for items in alkit's order (first = label first) whose model gives
/// `confidence` (the probability of its most probable class) each: the nondecreasing
/// sequence closest to the confidences in least squares (isotonic regression, by pooling
/// adjacent violators), made strictly increasing by at most 1e-4. Where the model's
/// confidence already rises along alkit's order (entropy, margin and least-confidence
/// orders mostly do) each item shows its own confidence; where it does not, neighbours
/// show their average. Every value is in [0, 1].
pub fn ordered_confidence(confidence: &[f32]) -> Vec<f64> {
    let n = confidence.len();
    // Blocks of (sum, count), merged while a block's mean is below its predecessor's.
    let mut blocks: Vec<(f64, usize)> = Vec::with_capacity(n);
    for &c in confidence {
        let c = if c.is_finite() {
            f64::from(c).clamp(0.0, 1.0)
        } else {
            0.0
        };
        blocks.push((c, 1));
        while blocks.len() > 1 {
            let (s1, n1) = blocks[blocks.len() - 1];
            let (s0, n0) = blocks[blocks.len() - 2];
            if s0 / n0 as f64 <= s1 / n1 as f64 {
                break;
            }
            blocks.pop();
            let last = blocks.len() - 1;
            blocks[last] = (s0 + s1, n0 + n1);
        }
    }
    const EPS: f64 = 1e-4;
    let mut out = Vec::with_capacity(n);
    for (s, m) in blocks {
        for _ in 0..m {
            let k = out.len();
            out.push((s / m as f64) * (1.0 - EPS) + EPS * (k as f64 + 1.0) / (n as f64 + 1.0));
        }
    }
    out
}

/// One prediction as Label Studio takes it, in a task file or from the ML backend: `class`
/// of `classes` chosen with probability `prob`, the prediction's `score`, and alkit's
/// round, rank (from 1) and acquisition score in the result's `meta`.
pub fn prediction(
    state: &SessionState,
    obj: &str,
    (class, prob): (usize, f32),
    score: f64,
    meta: Value,
) -> Value {
    json!({
        "model_version": model_version(state),
        "score": score,
        "result": [{
            "from_name": FROM_NAME,
            "to_name": obj,
            "type": "choices",
            "value": { "choices": [state.classes[class]] },
            "score": short(prob),
            "meta": meta,
        }],
    })
}

/// An f32 as the JSON number of its shortest decimal form (not its f64 widening, which
/// prints rounding digits the value never had).
pub(crate) fn short(v: f32) -> Value {
    format!("{v}")
        .parse::<f64>()
        .ok()
        .and_then(serde_json::Number::from_f64)
        .map_or(Value::Null, Value::Number)
}

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
