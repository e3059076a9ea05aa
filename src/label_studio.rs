//! Label Studio, file based: a session's batch as a task file to import, and the JSON export
//! read back as answers. No Label Studio server is contacted.
//!
//! **Import** ([`write_tasks`]): a JSON list with one task per queried item, best first. Each
//! task's `data` holds the item (`image`: a PNG data URI of the pixels the model sees, for
//! image pools; `text`: the feature values, for tabular pools) and `alkit_id`, the item's
//! stable id. Its `predictions` hold the last model's most probable class as a pre-annotation
//! with `score` = the item's rank / batch size: Label Studio's Data Manager sorts by
//! prediction score and shows the **lowest** first, while alkit's scores are higher = label
//! first, so the rank (0 for the item to label first) is what keeps alkit's order. The
//! labeling configuration to paste into the project ([`labeling_config`]) is a `Choices` tag
//! `label` over `image` (or `text`) with one `Choice` per class name.
//!
//! **Export** ([`read_export`]): Label Studio's JSON export (a list of tasks with
//! `annotations`). Per task: annotations with `was_cancelled: true` (skipped) and results that
//! are not `choices` are ignored; the remaining annotators' single choices are resolved by
//! majority, and a tie is an error naming the task (a person must decide, alkit will not); a
//! task with no usable annotation is not taught. Every answer then goes through `teach`'s
//! checks (known id, known class, not already labeled).

use crate::data::image::encode_png;
use crate::error::{Error, Result};
use crate::session::{BatchFormat, Learner, Query};
use base64::Engine;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;

/// The name of the `Choices` tag, in the labeling configuration and in results.
pub const FROM_NAME: &str = "label";

/// The object tag the choices refer to: `image` for image pools, `text` for tabular ones.
fn object_name(item_shape: &[usize]) -> &'static str {
    if item_shape.len() == 3 {
        "image"
    } else {
        "text"
    }
}

/// The labeling configuration (Label Studio's XML) matching [`write_tasks`]' files.
pub fn labeling_config(classes: &[String], item_shape: &[usize]) -> String {
    let obj = object_name(item_shape);
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

/// The Label Studio tasks of a query's batch (see the module docs); `predicted` is each
/// item's `(class, probability)` from the model that ranked them, when there is one.
pub fn tasks(
    learner: &Learner,
    batch: &[Query],
    predicted: Option<&[(usize, f32)]>,
) -> Result<Value> {
    let items = learner.items();
    let classes = &learner.state().classes;
    let shape = items.item_shape();
    let obj = object_name(shape);
    let len: usize = shape.iter().product();
    let n = batch.len().max(1);
    let indices: Vec<usize> = batch.iter().map(|q| q.index).collect();
    let values = items.values(&indices)?;
    let mut out = Vec::with_capacity(batch.len());
    for ((rank, q), x) in batch
        .iter()
        .enumerate()
        .zip(values.chunks_exact(len.max(1)))
    {
        let content = if obj == "image" {
            let png = encode_png(x, shape)?;
            format!(
                "data:image/png;base64,{}",
                base64::engine::general_purpose::STANDARD.encode(png)
            )
        } else {
            x.iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut task = json!({
            "data": { obj: content, "alkit_id": q.id, "alkit_index": q.index },
        });
        if let Some(score) = q.score {
            task["data"]["alkit_score"] = short(score);
        }
        if let Some(p) = predicted {
            let (class, prob) = p[rank];
            task["predictions"] = json!([{
                "model_version": format!("alkit round {}", learner.state().rounds.len()),
                "score": rank as f64 / n as f64,
                "result": [{
                    "from_name": FROM_NAME,
                    "to_name": obj,
                    "type": "choices",
                    "value": { "choices": [classes[class]] },
                    "score": short(prob),
                }],
            }]);
        }
        out.push(task);
    }
    Ok(Value::Array(out))
}

/// An f32 as the JSON number of its shortest decimal form (not its f64 widening, which
/// prints rounding digits the value never had).
fn short(v: f32) -> Value {
    format!("{v}")
        .parse::<f64>()
        .ok()
        .and_then(serde_json::Number::from_f64)
        .map_or(Value::Null, Value::Number)
}

/// Writes [`tasks`] to `out` atomically, and the matching labeling configuration beside it as
/// `OUT.xml` (`batch.json` -> `batch.xml`).
pub fn write_tasks(
    learner: &Learner,
    batch: &[Query],
    predicted: Option<&[(usize, f32)]>,
    out: &Path,
) -> Result<()> {
    let t = tasks(learner, batch, predicted)?;
    let mut bytes = serde_json::to_vec_pretty(&t)
        .map_err(|e| Error::state(out, format!("cannot serialise: {e}")))?;
    bytes.push(b'\n');
    crate::fsutil::write_atomic(out, &bytes)?;
    let st = learner.state();
    crate::fsutil::write_atomic(
        &out.with_extension("xml"),
        labeling_config(&st.classes, learner.items().item_shape()).as_bytes(),
    )
}

/// Answers read from a Label Studio export: `(task number from 1, id, class name)` rows for
/// [`Learner::teach_from`], and how many tasks had no usable annotation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Export {
    /// One row per task with an answer.
    pub rows: Vec<(usize, String, String)>,
    /// Tasks without an answer (no annotation, all cancelled, or no choice).
    pub unanswered: usize,
}

/// The largest export read (a task is a few hundred bytes; images are referenced, or inline
/// in files alkit wrote, a few KB each).
const MAX_EXPORT: u64 = 1 << 30;

/// Reads Label Studio's JSON export (see the module docs). Errors name the file and task.
pub fn read_export(path: &Path) -> Result<Export> {
    let size = std::fs::metadata(path)
        .map_err(|e| Error::io(path, e))?
        .len();
    if size > MAX_EXPORT {
        return Err(Error::state(
            path,
            format!("{size} bytes; a Label Studio export alkit reads is at most {MAX_EXPORT}"),
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let v: Value = serde_json::from_slice(&bytes)
        .map_err(|e| Error::state(path, format!("invalid JSON: {e}")))?;
    let Some(tasks) = v.as_array() else {
        return Err(Error::state(
            path,
            "not a Label Studio JSON export (expected a list of tasks)",
        ));
    };
    let bad = |task: usize, m: String| Error::Row {
        path: path.to_path_buf(),
        row: task,
        problem: m,
    };
    let mut rows = Vec::new();
    let mut unanswered = 0;
    for (k, t) in tasks.iter().enumerate() {
        let task = k + 1;
        let id = match t.pointer("/data/alkit_id") {
            Some(Value::String(s)) => s.clone(),
            Some(other) => {
                return Err(bad(
                    task,
                    format!("`data.alkit_id` is {other}, not a string"),
                ))
            }
            None => {
                return Err(bad(
                    task,
                    "has no `data.alkit_id` (import the Label Studio task file alkit \
                     wrote for a query)"
                        .into(),
                ))
            }
        };
        let mut votes: BTreeMap<String, usize> = BTreeMap::new();
        // A field of the wrong JSON type is refused, not read as "no answer": an export
        // edited or produced by another tool would otherwise teach nothing and succeed.
        let annotations = match t.get("annotations") {
            None | Some(Value::Null) => &[][..],
            Some(Value::Array(a)) => a.as_slice(),
            Some(other) => {
                return Err(bad(
                    task,
                    format!("`{id}`: `annotations` is {}, not a list", json_kind(other)),
                ))
            }
        };
        for a in annotations {
            if a.get("was_cancelled").and_then(Value::as_bool) == Some(true) {
                continue;
            }
            let results = match a.get("result") {
                None | Some(Value::Null) => &[][..],
                Some(Value::Array(r)) => r.as_slice(),
                Some(other) => {
                    return Err(bad(
                        task,
                        format!(
                            "`{id}`: an annotation's `result` is {}, not a list",
                            json_kind(other)
                        ),
                    ))
                }
            };
            let mut choices: Vec<&str> = Vec::new();
            for r in results {
                if r.get("type").and_then(Value::as_str) != Some("choices") {
                    continue;
                }
                let list = match r.pointer("/value/choices") {
                    Some(Value::Array(list)) => list,
                    Some(other) => {
                        return Err(bad(
                            task,
                            format!(
                                "`{id}`: `value.choices` is {}, not a list of class names",
                                json_kind(other)
                            ),
                        ))
                    }
                    None => {
                        return Err(bad(
                            task,
                            format!("`{id}`: a `choices` result has no `value.choices`"),
                        ))
                    }
                };
                for c in list {
                    choices.push(
                        c.as_str().ok_or_else(|| {
                            bad(task, format!("`{id}`: a choice is not a string"))
                        })?,
                    );
                }
            }
            match choices.as_slice() {
                [] => {}
                [c] => *votes.entry(c.to_string()).or_default() += 1,
                many => {
                    return Err(bad(
                        task,
                        format!(
                            "`{id}`: one annotation chose {many:?}; alkit takes one class per item"
                        ),
                    ))
                }
            }
        }
        let Some(&top) = votes.values().max() else {
            unanswered += 1;
            continue;
        };
        let winners: Vec<&String> = votes
            .iter()
            .filter(|(_, &n)| n == top)
            .map(|(c, _)| c)
            .collect();
        if winners.len() > 1 {
            return Err(bad(
                task,
                format!(
                    "`{id}`: annotators disagree with no majority ({votes:?}); resolve it in \
                     Label Studio and export again"
                ),
            ));
        }
        rows.push((task, id, winners[0].clone()));
    }
    Ok(Export { rows, unanswered })
}

/// What a JSON value is, for messages about a field of the wrong type.
fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Writes a query's `batch` to `out` in `format` (Label Studio's tasks carry the predictions
/// of the model the query trained, computed on `device`).
pub fn write_batch(
    learner: &Learner,
    format: BatchFormat,
    out: &Path,
    batch: &[Query],
    device: &candle_core::Device,
) -> Result<()> {
    match format {
        BatchFormat::Csv => learner.write_batch(out, batch),
        BatchFormat::LabelStudio => {
            let indices: Vec<usize> = batch.iter().map(|q| q.index).collect();
            let predicted = learner.predicted(&indices, device)?;
            write_tasks(learner, batch, predicted.as_deref(), out)
        }
    }
}

/// Teaches `learner` the answers in `path`: Label Studio's JSON export (a `.json` file) or a
/// CSV of `id,label` rows; checked whole, one bad row changes nothing. Returns the answers
/// taught and the tasks of an export that had no answer.
pub fn teach_file(learner: &mut Learner, path: &Path) -> Result<(usize, usize)> {
    let is_json = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"));
    if is_json {
        let export = read_export(path)?;
        Ok((learner.teach_from(&export.rows, path)?, export.unanswered))
    } else {
        Ok((learner.teach_csv(path)?, 0))
    }
}
