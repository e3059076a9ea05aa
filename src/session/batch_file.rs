//! A query's batch as a file a person (or Label Studio) works from: which format, and where it
//! may be written. [`crate::label_studio::write_batch`] writes it and
//! [`crate::label_studio::teach_file`] reads the answers back; each caller (the command line,
//! the Python package) goes through these so that a session's files are the same whoever
//! wrote them.

use super::state::STATE_FILE;
use crate::error::Result;
use std::path::Path;

/// What a batch file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BatchFormat {
    /// `id,index,path,score` rows, best first ([`super::Learner::write_batch`]).
    #[default]
    Csv,
    /// Label Studio's task JSON, with the labeling configuration beside it as `OUT.xml`
    /// ([`crate::label_studio::write_tasks`]).
    LabelStudio,
}

impl BatchFormat {
    /// The format named `s` (`csv` or `label-studio`).
    pub fn parse(s: &str) -> Result<BatchFormat> {
        match s {
            "csv" => Ok(BatchFormat::Csv),
            "label-studio" => Ok(BatchFormat::LabelStudio),
            other => Err(crate::Error::config(
                "format",
                format!("unknown batch format `{other}`; expected csv or label-studio"),
            )),
        }
    }
}

/// Refuses a batch file `out` (with Label Studio, also its `.xml`) that would overwrite the
/// session `dir`'s state or model: checked before the session is opened.
pub fn check_batch_out(dir: &Path, out: &Path, format: BatchFormat) -> Result<()> {
    let (state, model) = (dir.join(STATE_FILE), dir.join("model"));
    crate::fsutil::check_output("out", out, &[&state, &model])?;
    if format == BatchFormat::LabelStudio {
        crate::fsutil::check_output("out", &out.with_extension("xml"), &[&state, &model])?;
    }
    Ok(())
}
