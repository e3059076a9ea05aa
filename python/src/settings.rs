//! The scorers' settings as Python gives them: keyword arguments named after the fields of
//! [`ScorerSettings`] (`lambda_` for `lambda`, a Python keyword), sent by the package as one
//! JSON object and read into the library's type by [`ScorerSettings::with_given`], so that a
//! setting's name, type, default and range are declared once, in the library. What each kind
//! of call reads is said here: a setting it would not read is refused, never ignored.

use alkit::error::{Error, Result};
use alkit::strategies::ScorerSettings;
use pyo3::prelude::*;

/// Which of the settings a call reads.
#[derive(Clone, Copy)]
pub enum Reads {
    /// Every setting.
    All,
    /// Every setting but these (a selection the call does not make, say).
    AllBut(&'static [&'static str]),
    /// Only these.
    Only(&'static [&'static str]),
}

impl Reads {
    fn reads(self, name: &str) -> bool {
        match self {
            Reads::All => true,
            Reads::AllBut(not) => !not.contains(&name),
            Reads::Only(only) => only.contains(&name),
        }
    }
}

/// The settings in `json` (a JSON object of some settings by name; `None`: none given) over
/// the defaults, validated; a setting the call does not read is refused, saying `when`
/// it is read instead.
pub fn read(json: Option<&str>, reads: Reads, when: &str) -> Result<ScorerSettings> {
    let Some(json) = json else {
        return Ok(ScorerSettings::default());
    };
    let given: serde_json::Map<String, serde_json::Value> = serde_json::from_str(json)
        .map_err(|e| Error::config("scorer_settings", format!("not a JSON object: {e}")))?;
    if let Some(name) = ScorerSettings::names().find(|n| given.contains_key(*n) && !reads.reads(n))
    {
        return Err(Error::config(
            name,
            format!("not read here: only read {when}"),
        ));
    }
    ScorerSettings::with_given(given, "scorer_settings")
}

/// Every setting a person gives, by name, with its default as JSON (`null`: the data decides),
/// in the order the library declares them.
#[pyfunction]
pub fn scorer_settings() -> crate::errors::PyAlkitResult<String> {
    serde_json::to_string(&ScorerSettings::defaults())
        .map_err(|e| Error::config("scorer_settings", e.to_string()).into())
}
