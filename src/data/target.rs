//! What a data set's targets are ([`Task`]) and numeric targets for regression ([`Targets`],
//! read from a CSV table by [`read_table`]; standardised for training by [`Standardizer`]).
//!
//! A label of a classification data set is a class index ([`Items`](crate::data::Items));
//! a regression target is one or more numbers per item, kept in `f64` so that targets as
//! large as `1e30` are standardised without overflow and reported back in their own units.
//! The task is taken from the data where it is unambiguous: a target column holding a value
//! that is not an integer (or an integer beyond any class index) is numbers; a column of
//! integers could be classes or numbers, and is refused until the caller says which (setting
//! `task`).

use crate::data::source::{numeric_table, read_csv};
use crate::error::{DataProblem, Error, Result};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The kind of question a run answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Task {
    /// One class per item.
    #[default]
    Classification,
    /// One or more numbers per item.
    Regression,
    /// A set of labels per item, drawn from a declared set (see
    /// [`label_sets`](crate::data::label_sets)).
    MultiLabel,
}

impl Task {
    /// Every task's name.
    pub const NAMES: [&'static str; 3] = ["classification", "regression", "multi-label"];

    /// The name users type.
    pub fn name(self) -> &'static str {
        match self {
            Task::Classification => "classification",
            Task::Regression => "regression",
            Task::MultiLabel => "multi-label",
        }
    }
}

impl std::str::FromStr for Task {
    type Err = Error;
    fn from_str(s: &str) -> Result<Task> {
        match s {
            "classification" => Ok(Task::Classification),
            "regression" => Ok(Task::Regression),
            "multi-label" => Ok(Task::MultiLabel),
            other => Err(Error::config(
                "task",
                format!(
                    "unknown task `{other}`; expected {}",
                    Task::NAMES.join(", ")
                ),
            )),
        }
    }
}

/// Numeric targets `(n, k)`: `k` named outputs per item; `NaN` marks an item whose target
/// is not known yet (an unlabeled pool item).
#[derive(Debug, Clone, PartialEq)]
pub struct Targets {
    names: Vec<String>,
    values: Vec<f64>,
}

impl Targets {
    /// Wraps row-major `values (n, k)` for outputs `names (k,)`; every value finite or NaN.
    pub fn new(names: Vec<String>, values: Vec<f64>) -> Result<Targets> {
        let k = names.len();
        if k == 0 || !values.len().is_multiple_of(k) {
            return Err(Error::config(
                "target",
                format!("{} values for {k} outputs", values.len()),
            ));
        }
        if values.iter().any(|v| v.is_infinite()) {
            return Err(Error::config("target", "an infinite target value"));
        }
        Ok(Targets { names, values })
    }

    /// The outputs' names `(k,)`.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Outputs per item `k`.
    pub fn outputs(&self) -> usize {
        self.names.len()
    }

    /// Items `n`.
    pub fn len(&self) -> usize {
        self.values.len() / self.names.len()
    }

    /// True when there are no items.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Item `i`'s targets `(k,)`.
    pub fn row(&self, i: usize) -> &[f64] {
        let k = self.outputs();
        &self.values[i * k..(i + 1) * k]
    }

    /// Refuses an output that takes one value on every item whose target is known: nothing
    /// to learn. `source` names the data in the message.
    pub fn check_varies(&self, source: &Path) -> Result<()> {
        for (o, name) in self.names.iter().enumerate() {
            let mut known = (0..self.len())
                .map(|i| self.row(i)[o])
                .filter(|v| !v.is_nan());
            let Some(first) = known.next() else { continue };
            if known.all(|v| v == first) {
                return Err(Error::config(
                    "target",
                    format!(
                        "{}: target `{name}` takes one value ({first}) on every item: there is \
                         nothing to learn; choose another target column",
                        source.display()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Whether item `i`'s targets are known.
    pub fn known(&self, i: usize) -> bool {
        !self.row(i).iter().any(|v| v.is_nan())
    }
}

/// Per-output standardisation `(y - mean) / std`, fitted on the items a model trains on, in
/// `f64` (targets of `1e30` square without overflow once centred and scaled by their own
/// magnitude).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Standardizer {
    /// Mean per output `(k,)`.
    pub mean: Vec<f64>,
    /// Standard deviation per output `(k,)`, positive.
    pub std: Vec<f64>,
}

impl Standardizer {
    /// Fits on the rows `rows` of `targets` (an output they hold one value of gets scale 1).
    pub fn fit(targets: &Targets, rows: &[usize]) -> Result<Standardizer> {
        let k = targets.outputs();
        if rows.is_empty() {
            return Err(Error::config(
                "labeled",
                "no labeled items to fit targets on",
            ));
        }
        let mut mean = vec![0f64; k];
        let mut std = vec![0f64; k];
        for o in 0..k {
            // Scaled by the largest magnitude first: sums of 1e30-sized values stay finite.
            let scale = rows
                .iter()
                .map(|&i| targets.row(i)[o].abs())
                .fold(0f64, f64::max);
            let scale = if scale > 0.0 { scale } else { 1.0 };
            let m =
                rows.iter().map(|&i| targets.row(i)[o] / scale).sum::<f64>() / rows.len() as f64;
            let var = rows
                .iter()
                .map(|&i| (targets.row(i)[o] / scale - m).powi(2))
                .sum::<f64>()
                / rows.len() as f64;
            mean[o] = m * scale;
            // Labeled items that share one value teach a constant: their targets standardise
            // to 0 with a unit scale (a pool whose target never varies is refused where it is
            // read: `Targets::check_varies`).
            std[o] = if var > 1e-24 { var.sqrt() * scale } else { 1.0 };
        }
        Ok(Standardizer { mean, std })
    }

    /// Output `o`'s value `y` in standard units.
    pub fn forward(&self, o: usize, y: f64) -> f64 {
        (y - self.mean[o]) / self.std[o]
    }

    /// A standardised mean and variance of output `o` back in the target's units.
    pub fn back(&self, o: usize, mean: f64, var: f64) -> (f64, f64) {
        (
            mean * self.std[o] + self.mean[o],
            var * self.std[o] * self.std[o],
        )
    }
}

/// A table of tabular items with numeric targets.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// The file it was read from.
    pub path: PathBuf,
    /// Stable ids `(n,)`.
    pub ids: Vec<String>,
    /// Feature names `(d,)`.
    pub features: Vec<String>,
    /// Features `(n, d)`.
    pub x: Vec<f32>,
    /// Targets `(n, k)`.
    pub targets: Targets,
}

impl Table {
    /// Items `n`.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// True when the table has no items.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Feature columns `d`.
    pub fn dim(&self) -> usize {
        self.features.len()
    }
}

/// Parses one target cell: empty is unknown (NaN); anything else a finite number.
fn target_cell(v: &str) -> std::result::Result<f64, String> {
    if v.is_empty() {
        return Ok(f64::NAN);
    }
    match v.parse::<f64>() {
        Ok(x) if x.is_finite() => Ok(x),
        Ok(x) => Err(format!("`{v}` is {x}, not a finite number")),
        Err(_) => Err(format!("`{v}` is not a number")),
    }
}

/// Reads a table whose targets `target` are numbers: a CSV table (an optional `id` column,
/// every other column but the targets a feature), or an embedding file (safetensors, `.npz`
/// or Parquet: its features, ids and the tensors, arrays or columns `target`, see
/// `source::numeric_table`). `task` says what the targets are when the data cannot: integers only
/// (a CSV column, or an integer tensor) are refused without it (classes or numbers?), a float
/// tensor or column is numbers, and a table read for classification is refused here
/// (classification reads a `label` column, or a file's labels).
pub fn read_table(path: &Path, target: &[String], task: Option<Task>) -> Result<Table> {
    if matches!(task, Some(Task::Classification | Task::MultiLabel)) {
        return Err(Error::config(
            "task",
            "targets read as numbers are for regression; a classification table names its \
             classes in a `label` column, a multi-label table its label sets (setting `labels`)",
        ));
    }
    let Some(t) = numeric_table(path, target)? else {
        return read_csv_table(path, target, task);
    };
    if let Some(at) = t.values.iter().position(|v| v.is_infinite()) {
        let k = t.names.len();
        return Err(Error::data(
            path,
            DataProblem::Other(format!(
                "item `{}`: target `{}` is {}, not a finite number; fix the value, or make \
                 it NaN if it is not known yet",
                t.ids[at / k],
                t.names[at % k],
                t.values[at]
            )),
        ));
    }
    let task = task.or(t.floats.then_some(Task::Regression));
    check_task(path, &t.names, &t.values, task)?;
    Ok(Table {
        path: path.to_path_buf(),
        ids: t.ids,
        features: (0..t.dim).map(|j| format!("x[{j}]")).collect(),
        x: t.x,
        targets: Targets::new(t.names, t.values)?,
    })
}

/// A CSV table's items and targets ([`read_table`]).
fn read_csv_table(path: &Path, target: &[String], task: Option<Task>) -> Result<Table> {
    let (header, rows) = read_csv(path)?;
    let cols = columns_named(path, &header, target, "target")?;
    let id = header.iter().position(|h| h == "id");
    let feats: Vec<usize> = (0..header.len())
        .filter(|c| Some(*c) != id && !cols.contains(c))
        .collect();
    if feats.is_empty() || rows.is_empty() {
        return Err(Error::Row {
            path: path.to_path_buf(),
            row: 1,
            problem: "needs at least one feature column beside the targets, and one row".into(),
        });
    }
    let mut x = Vec::with_capacity(rows.len() * feats.len());
    let mut values = Vec::with_capacity(rows.len() * cols.len());
    let mut ids = Vec::with_capacity(rows.len());
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (i, (line, r)) in rows.iter().enumerate() {
        let bad = |problem: String| Error::Row {
            path: path.to_path_buf(),
            row: *line,
            problem,
        };
        for &c in &feats {
            let v: f32 = r[c]
                .parse()
                .ok()
                .filter(|v: &f32| v.is_finite())
                .ok_or_else(|| {
                    bad(format!(
                        "column `{}`: `{}` is not a finite number",
                        header[c], r[c]
                    ))
                })?;
            x.push(v);
        }
        for &c in &cols {
            values.push(
                target_cell(&r[c])
                    .map_err(|p| bad(format!("target column `{}`: {p}", header[c])))?,
            );
        }
        let id = id.map_or_else(|| i.to_string(), |c| r[c].clone());
        if id.is_empty() {
            return Err(bad("empty id".into()));
        }
        if let Some(prev) = seen.insert(id.clone(), *line) {
            return Err(bad(format!("id `{id}` already used on line {prev}")));
        }
        ids.push(id);
    }
    let names: Vec<String> = cols.iter().map(|&c| header[c].clone()).collect();
    check_task(path, &names, &values, task)?;
    Ok(Table {
        path: path.to_path_buf(),
        ids,
        features: feats.iter().map(|&c| header[c].clone()).collect(),
        x,
        targets: Targets::new(names, values)?,
    })
}

/// The positions of the columns `names` (setting `setting`: the targets, or the labels), each
/// named in the header once and none of them the id column.
pub(crate) fn columns_named(
    path: &Path,
    header: &[String],
    names: &[String],
    setting: &'static str,
) -> Result<Vec<usize>> {
    if names.is_empty() {
        return Err(Error::config(
            setting,
            format!(
                "{}: name the column(s) to read; its columns: {}",
                path.display(),
                header.join(", ")
            ),
        ));
    }
    let mut cols = Vec::with_capacity(names.len());
    for t in names {
        let c = header.iter().position(|h| h == t).ok_or_else(|| {
            Error::config(
                setting,
                format!(
                    "{} has no column `{t}`; its columns: {}",
                    path.display(),
                    header.join(", ")
                ),
            )
        })?;
        if cols.contains(&c) || t == "id" {
            return Err(Error::config(
                setting,
                format!("column `{t}` named twice, or the id column"),
            ));
        }
        cols.push(c);
    }
    Ok(cols)
}

/// Refuses targets whose task is ambiguous (integers only, no `task` given) or that hold no
/// known value.
fn check_task(path: &Path, names: &[String], values: &[f64], task: Option<Task>) -> Result<()> {
    let known: Vec<f64> = values.iter().copied().filter(|v| !v.is_nan()).collect();
    if known.is_empty() {
        return Err(Error::config(
            "target",
            format!("{}: no item has a target", path.display()),
        ));
    }
    // Integers small enough to be class indices; 1e30 is an integer in f64 but not a class.
    let class_like = |v: &f64| v.fract() == 0.0 && v.abs() <= f64::from(u32::MAX);
    if task.is_none() && known.iter().all(class_like) {
        return Err(Error::config(
            "task",
            format!(
                "{}: target(s) {} hold only integers, which could be classes or \
                 numbers; say which with setting `task` (classification or regression)",
                path.display(),
                names.join(", ")
            ),
        ));
    }
    Ok(())
}

/// Features of a pool `(n, d)` and a test split `(m, d)` standardised per feature by the
/// pool's mean and standard deviation (every pool input is known before any label is).
pub(crate) fn standardize_features(pool: &[f32], test: &[f32], d: usize) -> (Vec<f32>, Vec<f32>) {
    let (mean, std) = feature_stats(pool, d);
    (
        standardize(pool, &mean, &std),
        standardize(test, &mean, &std),
    )
}

/// Per-feature mean and standard deviation of `x (n, d)` in `f64` (a constant feature
/// gets 1, so it standardises to 0).
fn feature_stats(x: &[f32], d: usize) -> (Vec<f64>, Vec<f64>) {
    let n = (x.len() / d) as f64;
    let mut mean = vec![0f64; d];
    for row in x.chunks_exact(d) {
        for (m, &v) in mean.iter_mut().zip(row) {
            *m += f64::from(v) / n;
        }
    }
    let mut var = vec![0f64; d];
    for row in x.chunks_exact(d) {
        for ((s, &v), m) in var.iter_mut().zip(row).zip(&mean) {
            *s += (f64::from(v) - m).powi(2) / n;
        }
    }
    let std = var
        .into_iter()
        .map(|v| if v > 0.0 { v.sqrt() } else { 1.0 })
        .collect();
    (mean, std)
}

fn standardize(x: &[f32], mean: &[f64], std: &[f64]) -> Vec<f32> {
    x.chunks_exact(mean.len())
        .flat_map(|row| {
            row.iter()
                .zip(mean.iter().zip(std))
                .map(|(&v, (m, s))| ((f64::from(v) - m) / s) as f32)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str, task: Option<Task>) -> Result<Table> {
        let dir = std::env::temp_dir().join(format!("alkit-target-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(format!("t{}.csv", text.len()));
        std::fs::write(&p, text).unwrap();
        read_table(&p, &["y".to_string()], task)
    }

    #[test]
    fn reads_targets_and_refuses_bad_cells_by_row_and_column() {
        let t = table("id,a,y\nx,1,0.5\nz,2,\n", None).unwrap();
        assert_eq!(t.targets.row(0), &[0.5]);
        assert!(!t.targets.known(1));
        let e = table("a,y\n1,0.5\n2,nan\n", None).unwrap_err().to_string();
        assert!(e.contains(":3:") && e.contains("`y`"), "{e}");
        let e = table("a,y\n1,0.5\n2,abc\n", None).unwrap_err().to_string();
        assert!(e.contains("not a number"), "{e}");
        let e = table("a,y\n1,1\n2,3\n", None).unwrap_err().to_string();
        assert!(e.contains("only integers"), "{e}");
        assert!(table("a,y\n1,1\n2,3\n", Some(Task::Regression)).is_ok());
    }

    #[test]
    fn standardizes_huge_targets_and_refuses_a_constant_pool() {
        let t = Targets::new(vec!["y".into()], vec![1e30, 3e30, 2e30]).unwrap();
        let s = Standardizer::fit(&t, &[0, 1, 2]).unwrap();
        assert!((s.mean[0] - 2e30).abs() < 1e16);
        assert!((s.std[0] / (2f64 / 3.0).sqrt() / 1e30 - 1.0).abs() < 1e-12);
        assert!((s.forward(0, 3e30) - 1.5f64.sqrt()).abs() < 1e-12);
        let c = Targets::new(vec!["y".into(), "z".into()], vec![4.0, 1.0, 4.0, 2.0]).unwrap();
        let e = c.check_varies(Path::new("t.csv")).unwrap_err().to_string();
        assert!(e.contains("`y` takes one value (4)"), "{e}");
        // Labeled items sharing one value: a unit scale, not an error.
        let s = Standardizer::fit(&c, &[0, 1]).unwrap();
        assert_eq!((s.mean[0], s.std[0]), (4.0, 1.0));
    }
}
