//! Answers read back from Label Studio: every export format of a project whose labeling
//! configuration has a `Choices` tag (JSON, JSON_MIN, CSV, TSV), and alkit's own `id,label`
//! answer files.
//!
//! Rows are matched to pool items by `alkit_id`, the id alkit wrote into each task's data,
//! never by Label Studio's `id` (its own task number, which the CSV and JSON_MIN exports also
//! call `id`). JSON is told by its content, whatever the file's name: a list starting with
//! `[` is the JSON export (tasks holding `annotations`) or JSON_MIN (one flat row per
//! annotation, `alkit_id` and the choice at the top level). Anything else is a table, TSV
//! when the name ends in `.tsv`, CSV otherwise: Label Studio's export when its header has
//! `alkit_id`, alkit's answers when it has `id,label` and none of Label Studio's annotation
//! columns, and refused otherwise, naming what it looked like. The choices read are those
//! of the `Choices` tag named `label`, as in the labeling configuration alkit writes; an
//! export without any is refused rather than read as unanswered.
//!
//! Per task, the annotators' single choices are resolved by majority (cancelled annotations
//! and results of other types ignored); a tie is an error naming Label Studio's task, because
//! a person must decide. One item in several tasks (a task file imported twice) is taught
//! once when the tasks agree and refused, naming both tasks, when they do not.

use super::FROM_NAME;
use crate::data::source::read_delimited;
use crate::error::{Error, Result};
use crate::session::read_answers_from;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// The format an answer file was read as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    /// Label Studio's JSON export: tasks with their `annotations`.
    Json,
    /// Label Studio's JSON_MIN export: one row per annotation.
    JsonMin,
    /// Label Studio's CSV export (one row per annotation).
    Csv,
    /// Label Studio's TSV export.
    Tsv,
    /// alkit's answers: `id,label` (and an optional `note`) as CSV or TSV.
    Answers,
}

impl ExportFormat {
    /// The name Label Studio's export dialog gives the format.
    pub fn name(self) -> &'static str {
        match self {
            ExportFormat::Json => "Label Studio JSON",
            ExportFormat::JsonMin => "Label Studio JSON_MIN",
            ExportFormat::Csv => "Label Studio CSV",
            ExportFormat::Tsv => "Label Studio TSV",
            ExportFormat::Answers => "id,label answers",
        }
    }
}

/// One answer: an item and its class, with where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportRow {
    /// The task's position in a JSON file (from 1), or the line of a table's first row
    /// for it: what errors name after the file.
    pub row: usize,
    /// Label Studio's task id, when the file has one.
    pub task: Option<u64>,
    /// alkit's item id.
    pub id: String,
    /// The class name chosen.
    pub label: String,
    /// A note on the answer (alkit's answer files only).
    pub note: Option<String>,
}

/// Answers read from an export or answer file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Export {
    /// What the file was read as.
    pub format: ExportFormat,
    /// One row per item answered, in file order.
    pub rows: Vec<ExportRow>,
    /// Tasks without an answer (no annotation, all cancelled, or no choice). Label Studio
    /// leaves unannotated tasks out of its JSON_MIN, CSV and TSV exports, so there it counts
    /// only tasks whose annotations hold no choice.
    pub unanswered: usize,
}

impl Export {
    /// The Label Studio task of a row number, for errors found after reading.
    pub fn task_of(&self, row: usize) -> Option<u64> {
        self.rows.iter().find(|r| r.row == row).and_then(|r| r.task)
    }
}

/// The largest file read (a task is a few hundred bytes; images are referenced, or inline
/// in files alkit wrote, a few KB each).
const MAX_EXPORT: u64 = 1 << 30;

/// Label Studio's own columns in its flat exports: a table with them but without `alkit_id`
/// is an export of tasks alkit did not write, whose `id` is not an alkit id.
const LS_COLUMNS: &[&str] = &["annotation_id", "annotator", "lead_time"];

/// Reads the answers in `path` (see the module docs). Errors name the file and row, and
/// Label Studio's task where there is one.
pub fn read_export(path: &Path) -> Result<Export> {
    let size = std::fs::metadata(path)
        .map_err(|e| Error::io(path, e))?
        .len();
    if size > MAX_EXPORT {
        return Err(Error::state(
            path,
            format!("{size} bytes; an answer file alkit reads is at most {MAX_EXPORT}"),
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace() && !matches!(b, 0xEF | 0xBB | 0xBF))
        .map(|k| bytes[k]);
    if matches!(start, Some(b'[' | b'{')) {
        let text = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&bytes);
        let v: Value = serde_json::from_slice(text)
            .map_err(|e| Error::state(path, format!("invalid JSON: {e}")))?;
        let Some(items) = v.as_array() else {
            return Err(Error::state(
                path,
                "JSON, but not a Label Studio export (JSON or JSON_MIN: a list of tasks)",
            ));
        };
        return read_json(path, items);
    }
    let tsv = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("tsv"));
    read_table(path, &bytes, tsv)
}

/// A task's votes and where it came from, before the majority is taken.
struct Task {
    /// Label Studio's task id, when the file has one.
    task: Option<u64>,
    row: usize,
    id: String,
    votes: BTreeMap<String, usize>,
}

/// The tasks of a file in order, the rows of one Label Studio task (JSON_MIN, CSV and TSV
/// have one per annotation) gathered into one.
#[derive(Default)]
struct Tasks {
    list: Vec<Task>,
    at: HashMap<u64, usize>,
}

impl Tasks {
    /// Counts `votes` of the row at `row` (its `unit`: "row" or "line") for item `id` into
    /// its task: the one of Label Studio task `task` seen before, or a new one. A task that
    /// names another item than before is an error.
    fn add(
        &mut self,
        task: Option<u64>,
        row: usize,
        unit: &str,
        id: String,
        votes: BTreeMap<String, usize>,
    ) -> std::result::Result<(), String> {
        if let Some((t, &j)) = task.and_then(|t| self.at.get(&t).map(|j| (t, j))) {
            let prev = &mut self.list[j];
            if prev.id != id {
                return Err(format!(
                    "Label Studio task {t} holds `{}` here and `{id}` on {unit} {}",
                    prev.id, prev.row
                ));
            }
            for (c, n) in votes {
                *prev.votes.entry(c).or_default() += n;
            }
            return Ok(());
        }
        if let Some(t) = task {
            self.at.insert(t, self.list.len());
        }
        self.list.push(Task {
            task,
            row,
            id,
            votes,
        });
        Ok(())
    }
}

/// Why a flat export without the `label` choice is refused (`found`: what is missing).
fn without_choices(found: &str) -> String {
    format!(
        "{found}: alkit reads the choices of the `Choices` tag named `{FROM_NAME}` (the \
         labeling configuration alkit wrote beside its tasks), and Label Studio leaves it out \
         when no annotation chose a class"
    )
}

fn row_err(path: &Path, row: usize, problem: String) -> Error {
    Error::Row {
        path: path.to_path_buf(),
        row,
        problem,
    }
}

/// "Label Studio task 12 (`id`)", or "`id`" when the file has no task ids.
fn who(task: Option<u64>, id: &str) -> String {
    match task {
        Some(t) => format!("Label Studio task {t} (`{id}`)"),
        None => format!("`{id}`"),
    }
}

fn read_json(path: &Path, items: &[Value]) -> Result<Export> {
    // JSON_MIN's rows hold `alkit_id` at the top level and no `annotations` (a task's own
    // data may well have a field named `data`); the JSON export's tasks hold it in `data`.
    // An empty list is an export of nothing.
    let min = items
        .first()
        .is_some_and(|t| t.get("alkit_id").is_some() && t.get("annotations").is_none());
    let mut tasks = Tasks::default();
    for (k, t) in items.iter().enumerate() {
        let row = k + 1;
        let bad = |m: String| row_err(path, row, m);
        let task = match t.get("id") {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.as_u64().ok_or_else(|| {
                bad(format!(
                    "Label Studio's task `id` is {}, not a task number",
                    json_kind(v)
                ))
            })?),
        };
        let id_at = if min { "/alkit_id" } else { "/data/alkit_id" };
        let id = match t.pointer(id_at) {
            Some(Value::String(s)) => s.clone(),
            Some(other) => {
                return Err(bad(format!(
                    "`{}` is {}, not a string",
                    &id_at[1..].replace('/', "."),
                    json_kind(other)
                )))
            }
            None if min => {
                return Err(bad(format!(
                    "a JSON_MIN row without `alkit_id` ({}); every row of one export has it",
                    who(task, "?")
                )))
            }
            None => {
                return Err(bad(format!(
                    "{} has no `data.alkit_id`: alkit matches answers by its own ids, never \
                     by Label Studio's task id (import the task file alkit wrote for a query)",
                    task.map_or("the task".to_string(), |t| format!("Label Studio task {t}"))
                )))
            }
        };
        let whom = who(task, &id);
        let mut votes = BTreeMap::new();
        if min {
            if let Some(c) = min_choice(t.get(FROM_NAME), &whom).map_err(&bad)? {
                *votes.entry(c).or_default() += 1;
            }
        } else {
            json_votes(t, &whom, &mut votes).map_err(&bad)?;
        }
        tasks.add(task, row, "row", id, votes).map_err(&bad)?;
    }
    if min && items.iter().all(|t| t.get(FROM_NAME).is_none()) {
        return Err(row_err(
            path,
            1,
            without_choices(&format!("no row has `{FROM_NAME}`")),
        ));
    }
    let format = if min {
        ExportFormat::JsonMin
    } else {
        ExportFormat::Json
    };
    decide(path, format, tasks)
}

/// The choices of one task of the JSON export, counted into `votes`.
fn json_votes(
    t: &Value,
    whom: &str,
    votes: &mut BTreeMap<String, usize>,
) -> std::result::Result<(), String> {
    // A field of the wrong JSON type is refused, not read as "no answer": an export edited
    // or produced by another tool would otherwise teach nothing and succeed.
    let annotations = match t.get("annotations") {
        None | Some(Value::Null) => &[][..],
        Some(Value::Array(a)) => a.as_slice(),
        Some(other) => {
            return Err(format!(
                "{whom}: `annotations` is {}, not a list",
                json_kind(other)
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
                return Err(format!(
                    "{whom}: an annotation's `result` is {}, not a list",
                    json_kind(other)
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
                    return Err(format!(
                        "{whom}: `value.choices` is {}, not a list of class names",
                        json_kind(other)
                    ))
                }
                None => return Err(format!("{whom}: a `choices` result has no `value.choices`")),
            };
            for c in list {
                choices.push(
                    c.as_str()
                        .ok_or_else(|| format!("{whom}: a choice is not a string"))?,
                );
            }
        }
        match choices.as_slice() {
            [] => {}
            [c] => *votes.entry(c.to_string()).or_default() += 1,
            many => {
                return Err(format!(
                    "{whom}: one annotation chose {many:?}; alkit takes one class per item"
                ))
            }
        }
    }
    Ok(())
}

/// The choice of one JSON_MIN row (or a table's cell, parsed): a class name, `{"choices":
/// [...]}` when the annotation chose several, absent when it chose none.
fn min_choice(v: Option<&Value>, whom: &str) -> std::result::Result<Option<String>, String> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Object(o)) => match o.get("choices") {
            Some(Value::Array(list)) => match list.as_slice() {
                [] => Ok(None),
                [Value::String(c)] => Ok(Some(c.clone())),
                [_] => Err(format!("{whom}: a choice is not a string")),
                many => Err(format!(
                    "{whom}: one annotation chose {} classes; alkit takes one class per item",
                    many.len()
                )),
            },
            _ => Err(format!(
                "{whom}: `{FROM_NAME}` is an object without a `choices` list"
            )),
        },
        Some(Value::Array(_)) => Err(format!(
            "{whom}: `{FROM_NAME}` is a list; alkit takes one class per item"
        )),
        Some(other) => Err(format!(
            "{whom}: `{FROM_NAME}` is {}, not a class name",
            json_kind(other)
        )),
    }
}

fn read_table(path: &Path, bytes: &[u8], tsv: bool) -> Result<Export> {
    let (header, rows) = read_delimited(path, bytes, if tsv { b'\t' } else { b',' })?;
    let col = |name: &str| header.iter().position(|h| h == name);
    let Some(ic) = col("alkit_id") else {
        let ls = LS_COLUMNS.iter().find(|c| col(c).is_some());
        if let Some(c) = ls {
            return Err(row_err(
                path,
                1,
                format!(
                    "a Label Studio export (it has `{c}`) of tasks without `alkit_id`: alkit \
                     matches answers by its own ids, never by Label Studio's `id` (import the \
                     task file alkit wrote for a query)"
                ),
            ));
        }
        if col("id").is_none() || col("label").is_none() {
            return Err(row_err(
                path,
                1,
                format!(
                    "neither a Label Studio {} export (an `alkit_id` column) nor alkit's \
                     answers (`id,label` columns); the header is {header:?}",
                    if tsv { "TSV" } else { "CSV" }
                ),
            ));
        }
        let delimiter = if tsv { b'\t' } else { b',' };
        let rows = read_answers_from(path, bytes, delimiter)?
            .into_iter()
            .map(|a| ExportRow {
                row: a.row,
                task: None,
                id: a.id,
                label: a.label,
                note: a.note,
            })
            .collect();
        return Ok(Export {
            format: ExportFormat::Answers,
            rows,
            unanswered: 0,
        });
    };
    let tc = col("id");
    let lc = col(FROM_NAME);
    if lc.is_none() && !rows.is_empty() {
        let found = format!("no `{FROM_NAME}` column (the header is {header:?})");
        return Err(row_err(path, 1, without_choices(&found)));
    }
    let mut tasks = Tasks::default();
    for (line, r) in rows {
        let bad = |m: String| row_err(path, line, m);
        let id = r[ic].clone();
        if id.is_empty() {
            return Err(bad("an empty `alkit_id`".into()));
        }
        let task = match tc.map(|c| r[c].as_str()) {
            None | Some("") => None,
            Some(s) => Some(s.parse::<u64>().map_err(|_| {
                bad(format!(
                    "Label Studio's task `id` is `{s}`, not a task number"
                ))
            })?),
        };
        let whom = who(task, &id);
        // Several choices come as the JSON object `{"choices": [...]}`, one as the name.
        let cell = lc.map(|c| r[c].as_str()).unwrap_or("");
        let value = if cell.starts_with('{') {
            serde_json::from_str::<Value>(cell).unwrap_or(Value::String(cell.into()))
        } else {
            Value::String(cell.into())
        };
        let choice = min_choice(Some(&value), &whom).map_err(&bad)?;
        let votes = choice.into_iter().map(|c| (c, 1)).collect();
        tasks.add(task, line, "line", id, votes).map_err(&bad)?;
    }
    let format = if tsv {
        ExportFormat::Tsv
    } else {
        ExportFormat::Csv
    };
    decide(path, format, tasks)
}

/// Each task's majority, and one answer per item (see the module docs).
fn decide(path: &Path, format: ExportFormat, tasks: Tasks) -> Result<Export> {
    let mut rows: Vec<ExportRow> = Vec::new();
    let mut by_id: HashMap<String, usize> = HashMap::new();
    let mut unanswered = 0;
    for t in tasks.list {
        let task = t.task;
        let whom = who(task, &t.id);
        let Some(&top) = t.votes.values().max() else {
            unanswered += 1;
            continue;
        };
        let winners: Vec<&String> = t
            .votes
            .iter()
            .filter(|(_, &n)| n == top)
            .map(|(c, _)| c)
            .collect();
        if winners.len() > 1 {
            return Err(row_err(
                path,
                t.row,
                format!(
                    "{whom}: annotators disagree with no majority ({:?}); resolve it in Label \
                     Studio and export again",
                    t.votes
                ),
            ));
        }
        let label = winners[0].clone();
        if let Some(&k) = by_id.get(&t.id) {
            let prev = &rows[k];
            if prev.label != label {
                return Err(row_err(
                    path,
                    t.row,
                    format!(
                        "{whom} is answered `{label}`, but {} (row {}) answers the same item \
                         `{}`",
                        who(prev.task, &prev.id),
                        prev.row,
                        prev.label
                    ),
                ));
            }
            continue;
        }
        by_id.insert(t.id.clone(), rows.len());
        rows.push(ExportRow {
            row: t.row,
            task,
            id: t.id,
            label,
            note: None,
        });
    }
    Ok(Export {
        format,
        rows,
        unanswered,
    })
}

/// What a JSON value is, for messages about a field of the wrong type.
pub(super) fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}
