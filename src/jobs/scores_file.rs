//! The input of `alkit metrics`: a CSV of scores computed anywhere (another tool, another
//! model) with the ground truth beside them, and the OOD and calibration metrics computed from
//! it with the same code as `ood` and `calibrate`.
//!
//! Columns (a header names them, in any order; other columns are ignored): `score` (higher =
//! more uncertain), `is_ood` (0/1) for OOD metrics and/or `correct` (0/1) for calibration
//! metrics, and optionally `confidence` (the max probability, in `[0, 1]`) for ECE/MCE.
//!
//! The `scores.csv` that `alkit ood` writes reads too: without a `score` column but with a
//! `split` column (`id` or `ood`), every column but `split`, `index`, `id`, `is_ood`,
//! `correct` and `confidence` is one scorer's scores, and `split` gives `is_ood` where there
//! is no such column.

use crate::data::source::read_csv;
use crate::error::{Error, Result};
use crate::metrics::{auroc, ece_mce, ood_metrics, raulc};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The columns of a scores file, one value per row.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoresFile {
    /// Where it was read from (named in errors).
    pub path: PathBuf,
    /// `score`.
    pub score: Vec<f32>,
    /// `is_ood`, when present.
    pub is_ood: Option<Vec<bool>>,
    /// `correct`, when present.
    pub correct: Option<Vec<bool>>,
    /// `confidence`, when present.
    pub confidence: Option<Vec<f32>>,
}

impl ScoresFile {
    /// Reads and checks `path` with one score column (`score`, or a single scorer's): see
    /// [`ScoresFile::read_all`].
    pub fn read(path: &Path) -> Result<ScoresFile> {
        let mut all = Self::read_all(path)?;
        if all.len() > 1 {
            return Err(Error::state(
                path,
                format!("holds {} score columns; read it with read_all", all.len()),
            ));
        }
        Ok(all.remove(0).1)
    }

    /// Reads and checks `path` (the shared CSV reader: quoting, a BOM, blank lines), one
    /// [`ScoresFile`] per score column (module docs), by the column's name: every row has the
    /// header's field count, scores are finite, flags are 0 or 1, `split` is `id` or `ood`,
    /// confidences lie in `[0, 1]`; errors name the file's line.
    pub fn read_all(path: &Path) -> Result<Vec<(String, ScoresFile)>> {
        let (header, rows) = read_csv(path)?;
        let col = |name: &str| header.iter().position(|c| c == name);
        let score_cols: Vec<usize> = match (col("score"), col("split")) {
            (Some(c), _) => vec![c],
            (None, Some(_)) => (0..header.len())
                .filter(|&c| !NOT_SCORES.contains(&header[c].as_str()))
                .collect(),
            (None, None) => Vec::new(),
        };
        if score_cols.is_empty() {
            return Err(Error::state(
                path,
                "no `score` column in the header (nor a scorer's column beside `split`, as an \
                 OOD evaluation's scores.csv has)",
            ));
        }
        let ood_col = col("is_ood")
            .map(Flag::Bit)
            .or(col("split").map(Flag::Split));
        let (correct_col, conf_col) = (col("correct"), col("confidence"));
        if ood_col.is_none() && correct_col.is_none() {
            return Err(Error::state(
                path,
                "needs an `is_ood` and/or a `correct` column (or `split`, as an OOD evaluation's \
                 scores.csv has)",
            ));
        }
        let mut files: Vec<ScoresFile> = score_cols
            .iter()
            .map(|_| ScoresFile {
                path: path.to_path_buf(),
                score: Vec::with_capacity(rows.len()),
                is_ood: ood_col.map(|_| Vec::new()),
                correct: correct_col.map(|_| Vec::new()),
                confidence: conf_col.map(|_| Vec::new()),
            })
            .collect();
        for (line, fields) in &rows {
            let cells = Row {
                path,
                line: *line,
                header: &header,
                fields,
            };
            let is_ood = ood_col.map(|c| cells.flag(c)).transpose()?;
            let correct = correct_col.map(|c| cells.flag(Flag::Bit(c))).transpose()?;
            let conf = conf_col
                .map(|c| cells.num(c, Some((0.0, 1.0))))
                .transpose()?;
            for (file, &c) in files.iter_mut().zip(&score_cols) {
                file.score.push(cells.num(c, None)?);
                if let Some((v, x)) = file.is_ood.as_mut().zip(is_ood) {
                    v.push(x);
                }
                if let Some((v, x)) = file.correct.as_mut().zip(correct) {
                    v.push(x);
                }
                if let Some((v, x)) = file.confidence.as_mut().zip(conf) {
                    v.push(x);
                }
            }
        }
        if rows.is_empty() {
            return Err(Error::state(path, "no rows after the header"));
        }
        Ok(score_cols
            .iter()
            .map(|&c| header[c].clone())
            .zip(files)
            .collect())
    }

    /// The metrics its columns allow, by name: `auroc`, `aupr_in`, `aupr_out`, `fpr95` (with
    /// `is_ood`); `raulc`, `misclassification_auroc` (with `correct`); `ece`, `mce` (with
    /// `correct` and `confidence`).
    pub fn metrics(&self) -> Result<BTreeMap<&'static str, f64>> {
        let named = |what: &str, e: Error| Error::state(&self.path, format!("{what}: {e}"));
        let mut out = BTreeMap::new();
        if let Some(is_ood) = &self.is_ood {
            let pick = |want: bool| -> Vec<f32> {
                self.score
                    .iter()
                    .zip(is_ood)
                    .filter(|p| *p.1 == want)
                    .map(|p| *p.0)
                    .collect()
            };
            let m = ood_metrics(&pick(false), &pick(true)).map_err(|e| named("OOD metrics", e))?;
            out.insert("auroc", m.auroc);
            out.insert("aupr_in", m.aupr_in);
            out.insert("aupr_out", m.aupr_out);
            out.insert("fpr95", m.fpr95);
        }
        if let Some(correct) = &self.correct {
            let wrong: Vec<bool> = correct.iter().map(|c| !c).collect();
            out.insert(
                "raulc",
                raulc(&self.score, correct).map_err(|e| named("rAULC", e))?,
            );
            out.insert(
                "misclassification_auroc",
                auroc(&self.score, &wrong).map_err(|e| named("misclassification AUROC", e))?,
            );
            if let Some(conf) = &self.confidence {
                let (ece, mce) = ece_mce(conf, correct).map_err(|e| named("ECE", e))?;
                out.insert("ece", ece);
                out.insert("mce", mce);
            }
        }
        Ok(out)
    }
}

/// Columns that are never a scorer's scores.
const NOT_SCORES: &[&str] = &["split", "index", "id", "is_ood", "correct", "confidence"];

/// Where a row's OOD flag comes from: an `is_ood` 0/1 column, or `alkit ood`'s `split`.
#[derive(Clone, Copy)]
enum Flag {
    Bit(usize),
    Split(usize),
}

/// One row's cells, read with the file's line in errors.
struct Row<'a> {
    path: &'a Path,
    line: usize,
    header: &'a [String],
    fields: &'a [String],
}

impl Row<'_> {
    fn err(&self, problem: String) -> Error {
        Error::Row {
            path: self.path.to_path_buf(),
            row: self.line,
            problem,
        }
    }

    /// Column `c` as a finite number, within `range` when given.
    fn num(&self, c: usize, range: Option<(f32, f32)>) -> Result<f32> {
        let v = self.fields[c].as_str();
        match (v.parse::<f32>(), range) {
            (Ok(x), None) if x.is_finite() => Ok(x),
            (Ok(x), Some((lo, hi))) if (lo..=hi).contains(&x) => Ok(x),
            (Ok(_), Some((lo, hi))) => Err(self.err(format!(
                "`{v}` in column {} must lie in [{lo}, {hi}]",
                self.header[c]
            ))),
            _ => Err(self.err(format!(
                "`{v}` in column {} is not a finite number",
                self.header[c]
            ))),
        }
    }

    fn flag(&self, f: Flag) -> Result<bool> {
        let (c, no, yes) = match f {
            Flag::Bit(c) => (c, "0", "1"),
            Flag::Split(c) => (c, "id", "ood"),
        };
        match self.fields[c].as_str() {
            v if v == no => Ok(false),
            v if v == yes => Ok(true),
            v => Err(self.err(format!(
                "`{v}` in column {} must be {no} or {yes}",
                self.header[c]
            ))),
        }
    }
}
