//! Multi-label targets: a set of labels per item ([`LabelSets`], multi-hot `(n, L)`), read with
//! the items' features from a CSV table or an embedding file by [`read_label_table`].
//!
//! Three layouts carry label sets:
//! - a CSV column of label names joined by a separator (`cat|dog`, `|` by default): the
//!   label set is every name the file uses, sorted; an empty cell is the empty set;
//! - two or more CSV columns of 0/1, one per label, named by their headers;
//! - an `(n, L)` 0/1 tensor of a safetensors file or array of an `.npz` (or 0/1 number columns
//!   of a Parquet embedding table), labels named `NAME[j]`.
//!
//! The empty set is refused unless the data may hold it (setting `empty_sets`): an item with
//! no label is more often a row someone forgot than a fact. A label name may not hold the
//! separator (the name would split when written back). A test file's sets are read against
//! the pool's labels: a label the pool never names is refused.

use crate::data::source::{numeric_table, read_csv};
use crate::error::{DataProblem, Error, Result};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// How label sets are written, declared once with the run's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct LabelFormat {
    /// The separator between names in one cell.
    pub sep: String,
    /// Whether an item may have no label.
    pub empty_sets: bool,
}

impl Default for LabelFormat {
    fn default() -> Self {
        LabelFormat {
            sep: "|".into(),
            empty_sets: false,
        }
    }
}

/// Label sets as a multi-hot matrix `(n, L)` over named labels.
#[derive(Debug, Clone, PartialEq)]
pub struct LabelSets {
    names: Vec<String>,
    hot: Vec<u8>,
}

impl LabelSets {
    /// Wraps row-major `hot (n, L)` of 0/1 over `names (L,)`.
    pub fn new(names: Vec<String>, hot: Vec<u8>) -> Result<LabelSets> {
        let l = names.len();
        if l == 0 || !hot.len().is_multiple_of(l) || hot.iter().any(|&v| v > 1) {
            return Err(Error::config(
                "labels",
                format!("{} 0/1 values for {l} labels", hot.len()),
            ));
        }
        Ok(LabelSets { names, hot })
    }

    /// The labels' names `(L,)`.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Labels `L`.
    pub fn labels(&self) -> usize {
        self.names.len()
    }

    /// Items `n`.
    pub fn len(&self) -> usize {
        self.hot.len() / self.names.len()
    }

    /// True when there are no items.
    pub fn is_empty(&self) -> bool {
        self.hot.is_empty()
    }

    /// Item `i`'s set as 0/1 `(L,)`.
    pub fn row(&self, i: usize) -> &[u8] {
        let l = self.labels();
        &self.hot[i * l..(i + 1) * l]
    }

    /// Item `i`'s labels by name, joined by `sep`.
    pub fn joined(&self, i: usize, sep: &str) -> String {
        let names: Vec<&str> = (self.row(i).iter().zip(&self.names))
            .filter(|(&v, _)| v == 1)
            .map(|(_, n)| n.as_str())
            .collect();
        names.join(sep)
    }

    /// The mean label count over rows `rows`.
    pub fn mean_cardinality(&self, rows: &[usize]) -> f64 {
        if rows.is_empty() {
            return 0.0;
        }
        let sum: usize = rows
            .iter()
            .map(|&i| self.row(i).iter().map(|&v| usize::from(v)).sum::<usize>())
            .sum();
        sum as f64 / rows.len() as f64
    }

    /// Refuses a label no item carries, or that every item carries: nothing to learn of it.
    pub fn check_varies(&self, source: &Path) -> Result<()> {
        for (j, name) in self.names.iter().enumerate() {
            let on = (0..self.len()).filter(|&i| self.row(i)[j] == 1).count();
            if on == 0 || on == self.len() {
                let how = if on == 0 { "no item" } else { "every item" };
                return Err(Error::config(
                    "labels",
                    format!(
                        "{}: {how} carries label `{name}`: there is nothing to learn of it; \
                         drop it from the data",
                        source.display()
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// Tabular items with label sets.
#[derive(Debug, Clone, PartialEq)]
pub struct LabelTable {
    /// The file it was read from.
    pub path: PathBuf,
    /// Stable ids `(n,)`.
    pub ids: Vec<String>,
    /// Feature names `(d,)`.
    pub features: Vec<String>,
    /// Features `(n, d)`.
    pub x: Vec<f32>,
    /// Label sets `(n, L)`.
    pub sets: LabelSets,
}

impl LabelTable {
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

/// Reads items and their label sets from `path` (module docs): `columns` names the column of
/// joined names, or the 0/1 columns, or the tensor. With `declared`, the labels must be those
/// (a test file read against its pool); otherwise the file declares them.
pub fn read_label_table(
    path: &Path,
    columns: &[String],
    format: &LabelFormat,
    declared: Option<&[String]>,
) -> Result<LabelTable> {
    if format.sep.is_empty() {
        return Err(Error::config(
            "label_sep",
            "an empty separator; give the text between two labels of one cell, e.g. |",
        ));
    }
    if columns.is_empty() {
        return Err(Error::config(
            "labels",
            format!(
                "{}: name the column of label sets (names joined by `{}`), the 0/1 column of \
                 each label, or the (n, L) tensor",
                path.display(),
                format.sep
            ),
        ));
    }
    let table = match numeric_table(path, columns)? {
        Some(t) => from_numeric(path, t, format)?,
        None => read_csv_sets(path, columns, format, declared)?,
    };
    check_names(path, &table.sets, format, declared)?;
    Ok(table)
}

/// A label set of an embedding file: every target value 0 or 1.
fn from_numeric(
    path: &Path,
    t: crate::data::source::NumericTable,
    format: &LabelFormat,
) -> Result<LabelTable> {
    let l = t.names.len();
    check_label_count(path, l)?;
    let mut hot = Vec::with_capacity(t.values.len());
    for (at, &v) in t.values.iter().enumerate() {
        if v != 0.0 && v != 1.0 {
            return Err(Error::data(
                path,
                DataProblem::Other(format!(
                    "item `{}`: label `{}` is {v}; a multi-label target holds 0 or 1 for \
                     each label",
                    t.ids[at / l],
                    t.names[at % l]
                )),
            ));
        }
        hot.push(u8::from(v == 1.0));
    }
    let sets = LabelSets::new(t.names, hot)?;
    if !format.empty_sets {
        if let Some(i) = (0..sets.len()).find(|&i| sets.row(i).iter().all(|&v| v == 0)) {
            return Err(Error::data(
                path,
                DataProblem::Other(empty_set(&format!("item `{}`", t.ids[i]))),
            ));
        }
    }
    Ok(LabelTable {
        path: path.to_path_buf(),
        ids: t.ids,
        features: (0..t.dim).map(|j| format!("x[{j}]")).collect(),
        x: t.x,
        sets,
    })
}

/// Why an item without a label is refused; `item` names it.
fn empty_set(item: &str) -> String {
    format!(
        "{item} has no label; label it, or allow items without labels (setting \
         `empty_sets`) if the task has them"
    )
}

/// Refuses a label name holding the separator, and labels other than the declared ones.
fn check_names(
    path: &Path,
    sets: &LabelSets,
    format: &LabelFormat,
    declared: Option<&[String]>,
) -> Result<()> {
    if let Some(n) = sets.names().iter().find(|n| n.contains(&format.sep)) {
        return Err(Error::config(
            "label_sep",
            format!(
                "{}: label `{n}` holds the separator `{}`; rename the label or choose another \
                 separator",
                path.display(),
                format.sep
            ),
        ));
    }
    match declared {
        Some(want) if want != sets.names() => Err(Error::config(
            "labels",
            format!(
                "{} has the labels {}, its pool {}: give both the same 0/1 columns or tensor",
                path.display(),
                sets.names().join(", "),
                want.join(", ")
            ),
        )),
        _ => Ok(()),
    }
}

/// A CSV table's items and label sets ([`read_label_table`]).
fn read_csv_sets(
    path: &Path,
    columns: &[String],
    format: &LabelFormat,
    declared: Option<&[String]>,
) -> Result<LabelTable> {
    let (header, rows) = read_csv(path)?;
    let cols = crate::data::target::columns_named(path, &header, columns, "labels")?;
    let id = header.iter().position(|h| h == "id");
    let feats: Vec<usize> = (0..header.len())
        .filter(|c| Some(*c) != id && !cols.contains(c))
        .collect();
    if feats.is_empty() || rows.is_empty() {
        return Err(Error::Row {
            path: path.to_path_buf(),
            row: 1,
            problem: "needs at least one feature column beside the labels, and one row".into(),
        });
    }
    let cells: Vec<(usize, Vec<&str>)> = rows
        .iter()
        .map(|(line, r)| (*line, cols.iter().map(|&c| r[c].as_str()).collect()))
        .collect();
    if cols.len() == 1 && cells.iter().all(|(_, c)| c[0] == "0" || c[0] == "1") {
        return Err(Error::config(
            "labels",
            format!(
                "{}: column `{}` holds only 0 and 1: one label per column needs two or more \
                 columns (a single yes/no label is a classification task)",
                path.display(),
                header[cols[0]]
            ),
        ));
    }
    check_label_count(path, cols.len())?;
    let sets = if cols.len() == 1 {
        joined_sets(path, &cells, format, declared)?
    } else {
        let names = cols.iter().map(|&c| header[c].clone()).collect();
        indicator_sets(path, &cells, names, format)?
    };
    let mut x = Vec::with_capacity(rows.len() * feats.len());
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
        let id = id.map_or_else(|| i.to_string(), |c| r[c].clone());
        if id.is_empty() {
            return Err(bad("empty id".into()));
        }
        if let Some(prev) = seen.insert(id.clone(), *line) {
            return Err(bad(format!("id `{id}` already used on line {prev}")));
        }
        ids.push(id);
    }
    Ok(LabelTable {
        path: path.to_path_buf(),
        ids,
        features: feats.iter().map(|&c| header[c].clone()).collect(),
        x,
        sets,
    })
}

/// The most labels a data set may declare: a tag vocabulary is hundreds to a few thousand; a
/// column of ids named as the labels by mistake would make as many labels as items.
pub const MAX_LABELS: usize = 10_000;

/// Refuses more than [`MAX_LABELS`] labels before the `(n, L)` matrix is allocated.
fn check_label_count(path: &Path, l: usize) -> Result<()> {
    if l > MAX_LABELS {
        return Err(Error::config(
            "labels",
            format!(
                "{}: {l} distinct labels, more than the limit of {MAX_LABELS}; is the column \
                 an id or a free-text column rather than label sets?",
                path.display()
            ),
        ));
    }
    Ok(())
}

/// Label sets from one column of names joined by the separator.
fn joined_sets(
    path: &Path,
    cells: &[(usize, Vec<&str>)],
    format: &LabelFormat,
    declared: Option<&[String]>,
) -> Result<LabelSets> {
    let bad = |row: usize, problem: String| Error::Row {
        path: path.to_path_buf(),
        row,
        problem,
    };
    let mut parsed: Vec<(usize, Vec<&str>)> = Vec::with_capacity(cells.len());
    for (line, cell) in cells {
        let cell = cell[0];
        let mut set: Vec<&str> = Vec::new();
        if !cell.is_empty() {
            for name in cell.split(format.sep.as_str()).map(str::trim) {
                if name.is_empty() {
                    return Err(bad(
                        *line,
                        format!("`{cell}` holds an empty label name between two separators"),
                    ));
                }
                if set.contains(&name) {
                    return Err(bad(
                        *line,
                        format!("label `{name}` given twice in `{cell}`"),
                    ));
                }
                set.push(name);
            }
        }
        if set.is_empty() && !format.empty_sets {
            return Err(bad(*line, empty_set("this item")));
        }
        parsed.push((*line, set));
    }
    let names: Vec<String> = match declared {
        Some(d) => d.to_vec(),
        None => {
            let all: BTreeSet<&str> = parsed.iter().flat_map(|(_, s)| s.iter().copied()).collect();
            check_label_count(path, all.len())?;
            all.into_iter().map(str::to_string).collect()
        }
    };
    if names.is_empty() {
        return Err(Error::config(
            "labels",
            format!("{}: no item carries a label", path.display()),
        ));
    }
    let index: HashMap<&str, usize> = names
        .iter()
        .enumerate()
        .map(|(j, n)| (n.as_str(), j))
        .collect();
    let mut hot = vec![0u8; parsed.len() * names.len()];
    for (i, (line, set)) in parsed.iter().enumerate() {
        for name in set {
            let j = *index.get(name).ok_or_else(|| {
                bad(
                    *line,
                    format!(
                        "label `{name}` is not one of the pool's labels ({})",
                        names.join(", ")
                    ),
                )
            })?;
            hot[i * names.len() + j] = 1;
        }
    }
    LabelSets::new(names, hot)
}

/// Label sets from one 0/1 column per label.
fn indicator_sets(
    path: &Path,
    cells: &[(usize, Vec<&str>)],
    names: Vec<String>,
    format: &LabelFormat,
) -> Result<LabelSets> {
    let mut hot = Vec::with_capacity(cells.len() * names.len());
    for (line, row) in cells {
        for (v, name) in row.iter().zip(&names) {
            hot.push(match *v {
                "0" => 0,
                "1" => 1,
                other => {
                    return Err(Error::Row {
                        path: path.to_path_buf(),
                        row: *line,
                        problem: format!("label column `{name}`: `{other}` is not 0 or 1"),
                    })
                }
            });
        }
        if !format.empty_sets && hot[hot.len() - names.len()..].iter().all(|&v| v == 0) {
            return Err(Error::Row {
                path: path.to_path_buf(),
                row: *line,
                problem: empty_set("this item"),
            });
        }
    }
    LabelSets::new(names, hot)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str, cols: &[&str], format: &LabelFormat) -> Result<LabelTable> {
        let dir = std::env::temp_dir().join(format!("alkit-sets-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(format!("t{}.csv", text.len()));
        std::fs::write(&p, text).unwrap();
        let cols: Vec<String> = cols.iter().map(|c| c.to_string()).collect();
        read_label_table(&p, &cols, format, None)
    }

    #[test]
    fn reads_joined_names_and_indicator_columns_alike() {
        let f = LabelFormat::default();
        let a = table("id,x,tags\na,1,dog|cat\nb,2,cat\n", &["tags"], &f).unwrap();
        assert_eq!(a.sets.names(), ["cat", "dog"]);
        assert_eq!((a.sets.row(0), a.sets.row(1)), (&[1, 1][..], &[1, 0][..]));
        assert_eq!(a.sets.joined(0, "|"), "cat|dog");
        let b = table("id,x,cat,dog\na,1,1,1\nb,2,1,0\n", &["cat", "dog"], &f).unwrap();
        assert_eq!(a.sets, b.sets);
        assert_eq!(a.x, b.x);
    }

    #[test]
    fn refuses_bad_sets_by_line() {
        let f = LabelFormat::default();
        let e = |text: &str, cols: &[&str]| table(text, cols, &f).unwrap_err().to_string();
        let m = e("x,tags\n1,a|a\n", &["tags"]);
        assert!(m.contains(":2:") && m.contains("given twice"), "{m}");
        let m = e("x,tags\n1,a\n2,\n", &["tags"]);
        assert!(m.contains(":3:") && m.contains("empty_sets"), "{m}");
        let m = e("x,tags\n1,a||b\n", &["tags"]);
        assert!(m.contains("empty label name"), "{m}");
        let m = e("x,a,b\n1,1,2\n", &["a", "b"]);
        assert!(m.contains("`2` is not 0 or 1"), "{m}");
        let m = e("x,a|b,c\n1,1,0\n", &["a|b", "c"]);
        assert!(m.contains("holds the separator"), "{m}");
        let allow = LabelFormat {
            empty_sets: true,
            ..LabelFormat::default()
        };
        let t = table("x,tags\n1,a\n2,\n", &["tags"], &allow).unwrap();
        assert_eq!(t.sets.row(1), &[0]);
    }

    #[test]
    fn a_test_file_is_read_against_the_pools_labels() {
        let dir = std::env::temp_dir().join(format!("alkit-sets-d{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("test.csv");
        std::fs::write(&p, "x,tags\n1,b\n2,zebra\n").unwrap();
        let declared = ["a".to_string(), "b".to_string()];
        let f = LabelFormat::default();
        let e = read_label_table(&p, &["tags".into()], &f, Some(&declared)).unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains(":3:") && m.contains("`zebra` is not one of"),
            "{m}"
        );
        std::fs::write(&p, "x,tags\n1,b\n").unwrap();
        let t = read_label_table(&p, &["tags".into()], &f, Some(&declared)).unwrap();
        assert_eq!(t.sets.row(0), &[0, 1]);
    }
}
