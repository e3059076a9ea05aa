//! Answers read back from Label Studio: every export format of a project whose labeling
//! configuration has a `Choices` tag (JSON, JSON_MIN, CSV, TSV), and alkit's own `id,label`
//! answer files.
//!
//! Rows are matched to pool items by `alkit_id`, the id alkit wrote into each task's data,
//! never by Label Studio's `id` (its own task number, which the CSV and JSON_MIN exports also
//! call `id`); tasks without it (imported from the pool's image folder, through Label
//! Studio's local-files storage) by the image path their data holds, when the caller gives
//! the pool's rule for that ([`read_export_with`], the rule of [`super::image_path`], the one
//! the ML backend follows). JSON is told by its content, whatever the file's name: a list
//! starting with `[` is the JSON export (tasks holding `annotations`) or JSON_MIN (one flat
//! row per annotation, `alkit_id` or `annotation_id` and the choice at the top level).
//! Anything else is a table, TSV when the name ends in `.tsv`, CSV otherwise: Label Studio's
//! export when its header has `alkit_id` (or Label Studio's annotation columns and image
//! paths), alkit's answers when it has `id,label` and none of Label Studio's annotation
//! columns, and refused otherwise, naming what it looked like. The choices read are those of
//! the `Choices` tag named `label`, as in the labeling configuration alkit writes; an export
//! without any is refused rather than read as unanswered.
//!
//! Per task, an annotation Label Studio marks as ground truth (the star; only the JSON export
//! carries the mark) decides; otherwise the annotators' single choices are resolved by
//! majority (cancelled annotations and results of other types ignored), and a tie is an
//! error naming Label Studio's task, because a person must decide. One item in several tasks
//! (a task file imported twice) is taught once when the tasks agree and refused, naming both
//! tasks, when they do not.

use super::project::FROM_NAME;
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

/// The pool's rule for a task without `alkit_id`: the id of the item an image URL or path
/// names, if any.
pub type ImageNamer<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Label Studio's own fields of a JSON_MIN row or a flat export's columns: never an image
/// path of the task's data.
const LS_FIELDS: &[&str] = &[
    "id",
    "annotation_id",
    "annotator",
    "created_at",
    "updated_at",
    "lead_time",
    FROM_NAME,
];

/// Reads the answers in `path` (see the module docs), matching tasks by `alkit_id` only.
/// Errors name the file and row, and Label Studio's task where there is one.
pub fn read_export(path: &Path) -> Result<Export> {
    read_export_with(path, None)
}

/// [`read_export`], with tasks that carry no `alkit_id` matched by the image path their
/// data holds through `images` (an image-folder pool's rule).
pub fn read_export_with(path: &Path, images: Option<ImageNamer<'_>>) -> Result<Export> {
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
        return read_json(path, items, images);
    }
    let tsv = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("tsv"));
    read_table(path, &bytes, tsv, images)
}

/// The field of a flat export (JSON_MIN's keys, a table's header) that holds the choices,
/// given every row's `(field, value)` pairs: `label`, the name alkit's labeling
/// configuration gives its `Choices` tag; else, for tasks matched by image path (imported
/// from the pool's folder into a labeling configuration of the person's own), the one field
/// that is neither Label Studio's own nor one whose value names a pool image in any row.
/// `None` when there is no such single field.
fn choices_field<'a>(
    rows: impl IntoIterator<Item = (&'a str, &'a str)>,
    images: Option<ImageNamer<'_>>,
) -> Option<String> {
    let mut fields: Vec<(&str, bool)> = Vec::new();
    for (k, v) in rows {
        let image = images.is_some_and(|f| f(v).is_some());
        match fields.iter_mut().find(|(f, _)| *f == k) {
            Some((_, seen)) => *seen |= image,
            None => fields.push((k, image)),
        }
    }
    if fields.iter().any(|(k, _)| *k == FROM_NAME) {
        return Some(FROM_NAME.to_string());
    }
    images?;
    let rest: Vec<&str> = fields
        .iter()
        .filter(|(k, image)| !LS_FIELDS.contains(k) && *k != "alkit_id" && !image)
        .map(|(k, _)| *k)
        .collect();
    match rest.as_slice() {
        [one] => Some(one.to_string()),
        _ => None,
    }
}

/// The id of the item `values` (a task's data, or an export row's own fields) name by image
/// path; `None` when none names one, an error when they name different items (the rule the
/// ML backend follows: [`super::image_path::one_item`]).
fn by_image<'v>(
    values: impl IntoIterator<Item = &'v str>,
    images: Option<ImageNamer<'_>>,
) -> std::result::Result<Option<String>, String> {
    let Some(images) = images else {
        return Ok(None);
    };
    super::image_path::one_item(values.into_iter().map(images))
}

/// A task's votes and where it came from, before the majority is taken.
struct Task {
    /// Label Studio's task id, when the file has one.
    task: Option<u64>,
    row: usize,
    id: String,
    votes: BTreeMap<String, usize>,
    /// The choices of annotations marked as ground truth (the JSON export's `ground_truth`).
    truth: BTreeMap<String, usize>,
}

/// A row's or task's choices: every annotation's, and those marked as ground truth.
#[derive(Default)]
struct Votes {
    all: BTreeMap<String, usize>,
    truth: BTreeMap<String, usize>,
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
        votes: Votes,
    ) -> std::result::Result<(), String> {
        if let Some((t, &j)) = task.and_then(|t| self.at.get(&t).map(|j| (t, j))) {
            let prev = &mut self.list[j];
            if prev.id != id {
                return Err(format!(
                    "Label Studio task {t} holds `{}` here and `{id}` on {unit} {}",
                    prev.id, prev.row
                ));
            }
            for (c, n) in votes.all {
                *prev.votes.entry(c).or_default() += n;
            }
            for (c, n) in votes.truth {
                *prev.truth.entry(c).or_default() += n;
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
            votes: votes.all,
            truth: votes.truth,
        });
        Ok(())
    }
}

/// Why a flat export without the `label` choice is refused (`found`: what is missing).
fn without_choices(found: &str) -> String {
    format!(
        "{found}: alkit reads the choices of the `Choices` tag named `{FROM_NAME}` (the \
         labeling configuration alkit wrote beside its tasks; for tasks imported from the \
         pool's image folder, the one column besides Label Studio's own and the image's), and \
         Label Studio leaves it out when no annotation chose a class; the JSON export always \
         names it"
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

fn read_json(path: &Path, items: &[Value], images: Option<ImageNamer<'_>>) -> Result<Export> {
    // JSON_MIN's rows hold `alkit_id` (or, for tasks alkit did not write, Label Studio's
    // `annotation_id`) at the top level and no `annotations` (a task's own data may well
    // have a field named `data`); the JSON export's tasks hold the id in `data`. An empty
    // list is an export of nothing.
    let min = items.first().is_some_and(|t| {
        (t.get("alkit_id").is_some() || t.get("annotation_id").is_some())
            && t.get("annotations").is_none()
    });
    let every = items.iter().filter_map(Value::as_object).flat_map(|o| {
        o.iter()
            .map(|(k, v)| (k.as_str(), v.as_str().unwrap_or("")))
    });
    let choices = if min {
        choices_field(every, images)
    } else {
        None
    };
    let key = choices.as_deref().unwrap_or(FROM_NAME);
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
        let id = json_item(t, min, task, images).map_err(&bad)?;
        let whom = who(task, &id);
        let mut votes = Votes::default();
        if min {
            if let Some(c) = min_choice(t.get(key), key, &whom).map_err(&bad)? {
                *votes.all.entry(c).or_default() += 1;
            }
        } else {
            json_votes(t, &whom, &mut votes).map_err(&bad)?;
        }
        tasks.add(task, row, "row", id, votes).map_err(&bad)?;
    }
    if min && items.iter().all(|t| t.get(key).is_none()) {
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

/// The item of one task of the JSON export (`min`: a JSON_MIN row): its `alkit_id`, else
/// the image its data (a row's own fields) names.
fn json_item(
    t: &Value,
    min: bool,
    task: Option<u64>,
    images: Option<ImageNamer<'_>>,
) -> std::result::Result<String, String> {
    let id_at = if min { "/alkit_id" } else { "/data/alkit_id" };
    match t.pointer(id_at) {
        Some(Value::String(s)) => return Ok(s.clone()),
        Some(other) => {
            return Err(format!(
                "`{}` is {}, not a string",
                &id_at[1..].replace('/', "."),
                json_kind(other)
            ))
        }
        None => {}
    }
    let fields = if min {
        t.as_object()
    } else {
        t.get("data").and_then(Value::as_object)
    };
    let values = fields.into_iter().flatten().filter_map(|(k, v)| {
        (!min || !LS_FIELDS.contains(&k.as_str()))
            .then_some(v.as_str())
            .flatten()
    });
    let the_task = task.map_or("the task".to_string(), |t| format!("Label Studio task {t}"));
    if let Some(id) = by_image(values, images).map_err(|e| format!("{the_task}: {e}"))? {
        return Ok(id);
    }
    Err(match (min, images.is_some()) {
        (true, false) => format!(
            "a JSON_MIN row without `alkit_id` ({}); every row of one export has it",
            who(task, "?")
        ),
        (false, false) => format!(
            "{the_task} has no `data.alkit_id`: alkit matches answers by its own ids, never by \
             Label Studio's task id (import the task file alkit wrote for a query)"
        ),
        (_, true) => format!(
            "{the_task} has no `alkit_id` and no image path of the pool's folder: alkit matches \
             answers by its own ids or by the image a task shows, never by Label Studio's task \
             id"
        ),
    })
}

/// Every answer of a whole project's JSON export `tasks` as the ML backend reads it (one
/// task after another, no file): each task's ground truth, else its majority, and a
/// description of each task that gives none it can teach (no item of the pool, a tie,
/// malformed annotations), instead of refusing the whole project for one task. Tasks
/// without an answer are left out.
pub fn project_answers(
    tasks: &[Value],
    images: Option<ImageNamer<'_>>,
) -> (Vec<ExportRow>, Vec<String>) {
    let mut found = ProjectAnswers::default();
    for (k, t) in tasks.iter().enumerate() {
        found.add(k, t, images);
    }
    (found.rows, found.problems)
}

/// [`project_answers`] of the export `bytes` (a JSON list of tasks), each task parsed and
/// decided before the next is read, so that memory holds one task's JSON at a time and the
/// answers, whatever the export's size.
pub fn project_answers_of(
    bytes: &[u8],
    images: Option<ImageNamer<'_>>,
) -> std::result::Result<(Vec<ExportRow>, Vec<String>), serde_json::Error> {
    use serde::de::{Deserializer, SeqAccess, Visitor};
    struct Each<'a, 'n>(&'a mut ProjectAnswers, Option<ImageNamer<'n>>);
    impl<'de> Visitor<'de> for Each<'_, '_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a list of Label Studio tasks")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<(), A::Error> {
            let mut k = 0;
            while let Some(t) = seq.next_element::<Value>()? {
                self.0.add(k, &t, self.1);
                k += 1;
            }
            Ok(())
        }
    }
    let mut found = ProjectAnswers::default();
    let mut de = serde_json::Deserializer::from_slice(bytes);
    de.deserialize_seq(Each(&mut found, images))?;
    de.end()?;
    Ok((found.rows, found.problems))
}

/// The answers of a project's tasks so far, and what kept a task from giving one.
#[derive(Default)]
struct ProjectAnswers {
    rows: Vec<ExportRow>,
    problems: Vec<String>,
}

impl ProjectAnswers {
    /// Task `k` (from 0) of the export.
    fn add(&mut self, k: usize, t: &Value, images: Option<ImageNamer<'_>>) {
        let task = t.get("id").and_then(Value::as_u64);
        let decided = (|| -> std::result::Result<Option<(String, String)>, String> {
            let id = json_item(t, false, task, images)?;
            let mut votes = Votes::default();
            json_votes(t, &who(task, &id), &mut votes)?;
            let one = Task {
                task,
                row: k + 1,
                id,
                votes: votes.all,
                truth: votes.truth,
            };
            Ok(decision(&one, ExportFormat::Json)?.map(|label| (one.id, label)))
        })();
        match decided {
            Ok(Some((id, label))) => self.rows.push(ExportRow {
                row: k + 1,
                task,
                id,
                label,
                note: None,
            }),
            Ok(None) => {}
            Err(m) => {
                let name = task.map_or(format!("task {}", k + 1), |t| {
                    format!("Label Studio task {t}")
                });
                // Messages about a task's item or votes begin with its name already.
                let m = if m.starts_with(&name) {
                    m
                } else {
                    format!("{name}: {m}")
                };
                self.problems.push(m);
            }
        }
    }
}

/// The choices of one task of the JSON export, counted into `votes` (those of annotations
/// marked as ground truth into its `truth` too).
fn json_votes(t: &Value, whom: &str, votes: &mut Votes) -> std::result::Result<(), String> {
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
        let truth = a.get("ground_truth").and_then(Value::as_bool) == Some(true);
        match choices.as_slice() {
            [] => {}
            [c] => {
                *votes.all.entry(c.to_string()).or_default() += 1;
                if truth {
                    *votes.truth.entry(c.to_string()).or_default() += 1;
                }
            }
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
fn min_choice(
    v: Option<&Value>,
    key: &str,
    whom: &str,
) -> std::result::Result<Option<String>, String> {
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
                "{whom}: `{key}` is an object without a `choices` list"
            )),
        },
        Some(Value::Array(_)) => Err(format!(
            "{whom}: `{key}` is a list; alkit takes one class per item"
        )),
        Some(other) => Err(format!(
            "{whom}: `{key}` is {}, not a class name",
            json_kind(other)
        )),
    }
}

fn read_table(
    path: &Path,
    bytes: &[u8],
    tsv: bool,
    images: Option<ImageNamer<'_>>,
) -> Result<Export> {
    let (header, rows) = read_delimited(path, bytes, if tsv { b'\t' } else { b',' })?;
    let col = |name: &str| header.iter().position(|h| h == name);
    let ls = LS_COLUMNS.iter().find(|c| col(c).is_some());
    let ic = match col("alkit_id") {
        Some(c) => Some(c),
        None if ls.is_some() && images.is_some() => None,
        None => {
            return answers_table(path, bytes, tsv, &header, ls.copied());
        }
    };
    read_ls_table(path, tsv, &header, rows, ic, images)
}

/// alkit's `id,label` answers, or an error saying what the table looked like (`ls`: a Label
/// Studio column it has, whose tasks then lack `alkit_id`).
fn answers_table(
    path: &Path,
    bytes: &[u8],
    tsv: bool,
    header: &[String],
    ls: Option<&str>,
) -> Result<Export> {
    let col = |name: &str| header.iter().position(|h| h == name);
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
    Ok(Export {
        format: ExportFormat::Answers,
        rows,
        unanswered: 0,
    })
}

/// Label Studio's CSV or TSV export: each row's item by its `alkit_id` column `ic`, else by
/// the image path one of its own columns holds.
fn read_ls_table(
    path: &Path,
    tsv: bool,
    header: &[String],
    rows: Vec<(usize, Vec<String>)>,
    ic: Option<usize>,
    images: Option<ImageNamer<'_>>,
) -> Result<Export> {
    let col = |name: &str| header.iter().position(|h| h == name);
    let tc = col("id");
    let every = rows.iter().flat_map(|(_, r)| {
        header
            .iter()
            .map(String::as_str)
            .zip(r.iter().map(String::as_str))
    });
    let key = choices_field(every, images);
    let lc = key.as_deref().and_then(col);
    if lc.is_none() && !rows.is_empty() {
        let found = format!("no `{FROM_NAME}` column (the header is {header:?})");
        return Err(row_err(path, 1, without_choices(&found)));
    }
    let mut tasks = Tasks::default();
    for (line, r) in rows {
        let bad = |m: String| row_err(path, line, m);
        let task = match tc.map(|c| r[c].as_str()) {
            None | Some("") => None,
            Some(s) => Some(s.parse::<u64>().map_err(|_| {
                bad(format!(
                    "Label Studio's task `id` is `{s}`, not a task number"
                ))
            })?),
        };
        let id = match ic {
            Some(ic) if r[ic].is_empty() => return Err(bad("an empty `alkit_id`".into())),
            Some(ic) => r[ic].clone(),
            None => {
                let own = header
                    .iter()
                    .zip(&r)
                    .filter_map(|(h, v)| (!LS_FIELDS.contains(&h.as_str())).then_some(v.as_str()));
                let own_task = who(task, "?");
                by_image(own, images)
                    .map_err(|e| bad(format!("{own_task}: {e}")))?
                    .ok_or_else(|| {
                        bad(format!(
                            "{} has no `alkit_id` and no image path of the pool's folder: alkit \
                         matches answers by its own ids or by the image a task shows, never by \
                         Label Studio's task id",
                            who(task, "?")
                        ))
                    })?
            }
        };
        let whom = who(task, &id);
        // Several choices come as the JSON object `{"choices": [...]}`, one as the name.
        let cell = lc.map(|c| r[c].as_str()).unwrap_or("");
        let value = if cell.starts_with('{') {
            serde_json::from_str::<Value>(cell).unwrap_or(Value::String(cell.into()))
        } else {
            Value::String(cell.into())
        };
        let choice =
            min_choice(Some(&value), key.as_deref().unwrap_or(FROM_NAME), &whom).map_err(&bad)?;
        let votes = Votes {
            all: choice.into_iter().map(|c| (c, 1)).collect(),
            truth: BTreeMap::new(),
        };
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
        let label = match decision(&t, format) {
            Ok(Some(l)) => l,
            Ok(None) => {
                unanswered += 1;
                continue;
            }
            Err(m) => return Err(row_err(path, t.row, format!("{whom}: {m}"))),
        };
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

/// A task's answer: its ground truth when an annotation is marked so, else its annotators'
/// majority; `None` without any choice, an error on a tie.
fn decision(t: &Task, format: ExportFormat) -> std::result::Result<Option<String>, String> {
    if !t.truth.is_empty() {
        return match t.truth.keys().collect::<Vec<_>>().as_slice() {
            [one] => Ok(Some((*one).clone())),
            many => Err(format!(
                "annotations marked as ground truth disagree ({many:?}); keep the star on one \
                 in Label Studio and export again"
            )),
        };
    }
    let Some(&top) = t.votes.values().max() else {
        return Ok(None);
    };
    let winners: Vec<&String> = t
        .votes
        .iter()
        .filter(|(_, &n)| n == top)
        .map(|(c, _)| c)
        .collect();
    if let [one] = winners.as_slice() {
        return Ok(Some((*one).clone()));
    }
    let how = if format == ExportFormat::Json {
        "mark the right annotation as ground truth (the star) in Label Studio, or resolve it \
         there, and export again"
    } else {
        "mark the right annotation as ground truth (the star) in Label Studio and export as \
         JSON (only the JSON export carries the mark), or resolve it there and export again"
    };
    Err(format!(
        "annotators disagree with no majority ({:?}); {how}",
        t.votes
    ))
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
