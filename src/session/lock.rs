//! The lock on a session folder: one process at a time changes a session.

use crate::error::{Error, Result};
use std::path::Path;

/// Name of the lock file inside a session folder (see [`lock`]).
pub const LOCK_FILE: &str = "session.lock";

/// An exclusive hold on a session folder: while it lives, no other process can [`lock`] the
/// same folder. The operating system releases it when the process ends, however it ends, so
/// a killed server leaves nothing to clean up.
#[derive(Debug)]
pub struct SessionLock {
    _file: std::fs::File,
}

/// Takes the session folder `dir` for this process, so that a labeling page and a `teach`
/// in a shell (or two pages) cannot both change `session.json`; an error names the folder
/// when another process holds it.
pub fn lock(dir: &Path) -> Result<SessionLock> {
    let path = dir.join(LOCK_FILE);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| Error::io(&path, e))?;
    match file.try_lock() {
        Ok(()) => Ok(SessionLock { _file: file }),
        Err(std::fs::TryLockError::WouldBlock) => Err(Error::state(
            &path,
            "another process (a labeling page, a query or answers being taught) is using \
             this session; let it finish or stop it first",
        )),
        Err(std::fs::TryLockError::Error(e)) => Err(Error::io(&path, e)),
    }
}
