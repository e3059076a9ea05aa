//! Class names of a source's labels: names a source declares (safetensors metadata, a dataset
//! card) checked, or derived from the labels themselves, `0..k` with none skipped; at most
//! [`MAX_CLASSES`] either way. What every source kind that carries labels shares.

use crate::data::dataset::{LabelTally, MAX_CLASSES};
use crate::error::{DataProblem, Error, Result};
use std::path::{Path, PathBuf};

/// The class names of labels whose source may declare them (`declared`: safetensors
/// metadata, a dataset card). Without a declaration the labels declare the classes, `0..k`
/// with none skipped ([`classes_from_labels`](crate::data::dataset::classes_from_labels)); with
/// one, every label must be below its length. Either way at most [`MAX_CLASSES`]. `path` (with
/// `item` positions) names the culprit.
pub(crate) fn declared_classes(
    labels: &[Option<u32>],
    declared: Option<Vec<String>>,
    declared_by: &str,
    path: &Path,
) -> Result<Vec<String>> {
    let mut check = LabelCheck::new(declared, declared_by, path)?;
    for &l in labels {
        check.add(l)?;
    }
    check.finish()
}

/// [`declared_classes`] over labels seen one at a time, for pools read in chunks.
pub(crate) struct LabelCheck {
    declared: Option<Vec<String>>,
    declared_by: String,
    path: PathBuf,
    tally: LabelTally,
    item: usize,
}

impl LabelCheck {
    /// Checks the declared names (none empty, none twice).
    pub(crate) fn new(
        declared: Option<Vec<String>>,
        declared_by: &str,
        path: &Path,
    ) -> Result<LabelCheck> {
        if let Some(names) = &declared {
            let mut seen = std::collections::HashSet::new();
            if let Some(c) = names
                .iter()
                .find(|c| c.is_empty() || !seen.insert(c.as_str()))
            {
                return Err(Error::data(
                    path,
                    DataProblem::Other(format!(
                        "class name `{c}` in {declared_by} is empty or given twice"
                    )),
                ));
            }
        }
        Ok(LabelCheck {
            declared,
            declared_by: declared_by.to_string(),
            path: path.to_path_buf(),
            tally: LabelTally::default(),
            item: 0,
        })
    }

    /// The next item's label.
    pub(crate) fn add(&mut self, label: Option<u32>) -> Result<()> {
        match (&self.declared, label) {
            (Some(names), Some(l)) if l as usize >= names.len() => {
                return Err(Error::data(
                    &self.path,
                    DataProblem::Other(format!(
                        "label {l} at item {} is not one of the {} classes {} names",
                        self.item,
                        names.len(),
                        self.declared_by
                    )),
                ))
            }
            (Some(_), _) => {}
            (None, l) => self.tally.add(l),
        }
        self.item += 1;
        Ok(())
    }

    /// The class names, once every label was seen.
    pub(crate) fn finish(self) -> Result<Vec<String>> {
        let classes = match self.declared {
            Some(names) => names,
            None => {
                let k = self.tally.classes().map_err(|s| s.error(&self.path))?;
                (0..k).map(|c| c.to_string()).collect()
            }
        };
        check_class_count(classes.len(), &self.path)?;
        Ok(classes)
    }
}

/// Refuses more than [`MAX_CLASSES`] classes.
pub(crate) fn check_class_count(n: usize, path: &Path) -> Result<()> {
    if n > MAX_CLASSES {
        return Err(Error::data(
            path,
            DataProblem::Other(format!(
                "declares {n} classes; alkit supports at most {MAX_CLASSES}"
            )),
        ));
    }
    Ok(())
}

/// The class names `0`, `1`, ... of `n` classes that have no other names.
pub(crate) fn digits(n: usize) -> Vec<String> {
    (0..n).map(|c| c.to_string()).collect()
}
