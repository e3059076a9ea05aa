//! The input of `alkit metrics`: a CSV of scores computed anywhere (another tool, another
//! model) with the ground truth beside them, and the OOD and calibration metrics computed from
//! it with the same code as `ood` and `calibrate`.
//!
//! Columns (a header names them, in any order; other columns are ignored): `score` (higher =
//! more uncertain), `is_ood` (0/1) for OOD metrics and/or `correct` (0/1) for calibration
//! metrics, and optionally `confidence` (the max probability, in `[0, 1]`) for ECE/MCE.

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
    /// Reads and checks `path` (the shared CSV reader: quoting, a BOM, blank lines): every row
    /// has the header's field count, scores are finite, flags are 0 or 1, confidences lie in
    /// `[0, 1]`; errors name the file's line.
    pub fn read(path: &Path) -> Result<ScoresFile> {
        let (header, rows) = read_csv(path)?;
        let col = |name: &str| header.iter().position(|c| c == name);
        let score_col =
            col("score").ok_or_else(|| Error::state(path, "no `score` column in the header"))?;
        let (ood_col, correct_col, conf_col) = (col("is_ood"), col("correct"), col("confidence"));
        if ood_col.is_none() && correct_col.is_none() {
            return Err(Error::state(
                path,
                "needs an `is_ood` and/or a `correct` column",
            ));
        }
        let mut out = ScoresFile {
            path: path.to_path_buf(),
            score: Vec::with_capacity(rows.len()),
            is_ood: ood_col.map(|_| Vec::new()),
            correct: correct_col.map(|_| Vec::new()),
            confidence: conf_col.map(|_| Vec::new()),
        };
        for (line, fields) in &rows {
            let row_err = |problem: String| Error::Row {
                path: path.to_path_buf(),
                row: *line,
                problem,
            };
            let num = |c: usize, range: Option<(f32, f32)>| -> Result<f32> {
                let v = fields[c].as_str();
                match (v.parse::<f32>(), range) {
                    (Ok(x), None) if x.is_finite() => Ok(x),
                    (Ok(x), Some((lo, hi))) if (lo..=hi).contains(&x) => Ok(x),
                    (Ok(_), Some((lo, hi))) => Err(row_err(format!(
                        "`{v}` in column {} must lie in [{lo}, {hi}]",
                        header[c]
                    ))),
                    _ => Err(row_err(format!(
                        "`{v}` in column {} is not a finite number",
                        header[c]
                    ))),
                }
            };
            let flag = |c: usize| -> Result<bool> {
                match fields[c].as_str() {
                    "0" => Ok(false),
                    "1" => Ok(true),
                    v => Err(row_err(format!(
                        "`{v}` in column {} must be 0 or 1",
                        header[c]
                    ))),
                }
            };
            out.score.push(num(score_col, None)?);
            if let (Some(c), Some(v)) = (ood_col, out.is_ood.as_mut()) {
                v.push(flag(c)?);
            }
            if let (Some(c), Some(v)) = (correct_col, out.correct.as_mut()) {
                v.push(flag(c)?);
            }
            if let (Some(c), Some(v)) = (conf_col, out.confidence.as_mut()) {
                v.push(num(c, Some((0.0, 1.0)))?);
            }
        }
        if out.score.is_empty() {
            return Err(Error::state(path, "no rows after the header"));
        }
        Ok(out)
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
