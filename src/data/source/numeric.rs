//! Items with numeric targets read from an embedding file (safetensors, `.npz`, Parquet), for
//! regression: what each format's file hands the target reader
//! ([`crate::data::target::read_table`]), which checks the task and builds its table.
//!
//! A target names a tensor, array or column of the file: `(n,)` is one output, `(n, k)` is
//! `k` outputs named `NAME[0]` to `NAME[k-1]`; NaN (or a Parquet null) marks an item whose
//! target is not known yet.

use crate::error::{DataProblem, Error, Result};
use std::path::Path;

/// Features, ids and targets of one file.
#[derive(Debug)]
pub(crate) struct NumericTable {
    /// Stable ids `(n,)`: the file's own, or positions.
    pub(crate) ids: Vec<String>,
    /// Features `(n, d)`.
    pub(crate) x: Vec<f32>,
    /// `d`.
    pub(crate) dim: usize,
    /// The outputs' names `(k,)`.
    pub(crate) names: Vec<String>,
    /// Targets `(n, k)`, row-major.
    pub(crate) values: Vec<f64>,
    /// True when every target came from a float tensor or column: the file itself says
    /// "numbers", even where every value happens to be whole.
    pub(crate) floats: bool,
}

/// One target tensor, array or column as read: `(n, width)` row-major values.
pub(crate) struct TargetPart {
    pub(crate) name: String,
    pub(crate) width: usize,
    pub(crate) values: Vec<f64>,
    pub(crate) float: bool,
}

impl TargetPart {
    /// Checks `shape` (the part's own) against `n` items and gives its width: `(n,)` is 1,
    /// `(n, k)` is `k`.
    pub(crate) fn width(shape: &[usize], n: usize, name: &str, path: &Path) -> Result<usize> {
        match *shape {
            [m] if m == n => Ok(1),
            [m, k] if m == n && k > 0 => Ok(k),
            _ => Err(bad(
                path,
                format!(
                    "target `{name}` has shape {shape:?}; expected ({n},) or ({n}, k) with \
                     k > 0, one row per item of the features"
                ),
            )),
        }
    }
}

impl NumericTable {
    /// Joins the features and the parts (in the order named) into one table.
    pub(crate) fn new(
        ids: Vec<String>,
        (x, dim): (Vec<f32>, usize),
        parts: Vec<TargetPart>,
    ) -> NumericTable {
        let n = ids.len();
        let k: usize = parts.iter().map(|p| p.width).sum();
        let mut values = Vec::with_capacity(n * k);
        for i in 0..n {
            for p in &parts {
                values.extend_from_slice(&p.values[i * p.width..(i + 1) * p.width]);
            }
        }
        let names = parts
            .iter()
            .flat_map(|p| {
                (0..p.width).map(move |j| match p.width {
                    1 => p.name.clone(),
                    _ => format!("{}[{j}]", p.name),
                })
            })
            .collect();
        NumericTable {
            ids,
            x,
            dim,
            names,
            values,
            floats: parts.iter().all(|p| p.float),
        }
    }
}

/// Refuses an empty or repeated target name, or one naming what the file keeps for something
/// else (`reserved`: its features, ids, labels).
pub(crate) fn check_names(target: &[String], reserved: &[&str], path: &Path) -> Result<()> {
    if target.is_empty() {
        return Err(Error::config(
            "target",
            format!(
                "{}: name the target tensor, array or column(s) of a regression file (setting \
                 `target`, e.g. y)",
                path.display()
            ),
        ));
    }
    for (i, t) in target.iter().enumerate() {
        let problem = if target[..i].contains(t) {
            "is named twice: name each target once"
        } else if reserved.contains(&t.as_str()) {
            "holds the file's items, ids or labels, not targets: name the tensor, array or \
             column of the numbers to predict"
        } else {
            continue;
        };
        return Err(Error::config(
            "target",
            format!("{}: `{t}` {problem}", path.display()),
        ));
    }
    Ok(())
}

/// The error for a target the file does not hold, listing what it holds.
pub(crate) fn missing(path: &Path, name: &str, kind: &str, have: &[String]) -> Error {
    Error::config(
        "target",
        format!(
            "{} has no {kind} `{name}`; it holds {}",
            path.display(),
            have.join(", ")
        ),
    )
}

pub(crate) fn bad(path: &Path, m: impl Into<String>) -> Error {
    Error::data(path, DataProblem::Other(m.into()))
}
