//! A repository on the Hub as `hf:` names it ([`HubRepo`]) and what kind it is ([`RepoKind`]):
//! the names every other file of the folder checks and fetches by.

use crate::error::{Error, Result};
use hf_hub::RepoType;

/// A repository on the Hub, as written after `hf:`: `OWNER/NAME` or `OWNER/NAME@REVISION`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubRepo {
    /// `OWNER/NAME` (or a bare `NAME` for the few legacy repos without an owner).
    pub id: String,
    /// Branch, tag or commit; `main` by default.
    pub revision: String,
}

impl HubRepo {
    /// Parses `OWNER/NAME[@REVISION]` (without the `hf:` prefix).
    pub fn parse(s: &str) -> Result<HubRepo> {
        let (id, revision) = match s.split_once('@') {
            Some((id, rev)) => (id, rev),
            None => (s, "main"),
        };
        // Names and revisions become folders and files of the cache (`refs/REVISION`,
        // `snapshots/...`): one safe component each, never `.` or `..`, so no name can point
        // outside the cache. Revisions may hold `/` (branch names), each part checked alike.
        let valid = |p: &str| {
            !p.is_empty()
                && p != "."
                && p != ".."
                && p.len() <= 96
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        };
        let parts: Vec<&str> = id.split('/').collect();
        if parts.len() > 2 || !parts.iter().all(|p| valid(p)) {
            return Err(Error::config(
                "data",
                format!("`hf:{s}` is not a Hub repository (expected hf:OWNER/NAME[@REVISION])"),
            ));
        }
        if revision.len() > 256 || !revision.split('/').all(valid) {
            return Err(Error::config(
                "data",
                format!(
                    "`hf:{s}`: `{revision}` is not a revision (a branch, tag or commit: letters, \
                     digits, `-`, `_`, `.` and `/` between them, no `..`)"
                ),
            ));
        }
        Ok(HubRepo {
            id: id.to_string(),
            revision: revision.to_string(),
        })
    }
}

impl std::fmt::Display for HubRepo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "hf:{}", self.id)?;
        if self.revision != "main" {
            write!(f, "@{}", self.revision)?;
        }
        Ok(())
    }
}

/// What kind of repository: the Hub keeps datasets and models apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepoKind {
    /// A dataset repository.
    Dataset,
    /// A model repository.
    Model,
}

impl RepoKind {
    pub(super) fn hf(self) -> RepoType {
        match self {
            RepoKind::Dataset => RepoType::Dataset,
            RepoKind::Model => RepoType::Model,
        }
    }
}
