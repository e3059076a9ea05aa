//! The library's error type.
//!
//! One `thiserror` enum with structured fields: every variant says which file, row, field or
//! cycle it is about, so the binary can add context and pick an exit code without parsing
//! strings. Library code never panics on bad input; it returns one of these.

use std::path::{Path, PathBuf};

/// Result alias for alkit's library code.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in alkit's library code.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Reading or writing a file failed.
    // The cause is part of the message and deliberately not chained as `source()`: printers
    // that walk the chain (anyhow's `{:#}`) would say it twice.
    #[error("{}: {cause}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        cause: std::io::Error,
    },
    /// A data file is malformed (bad magic, truncated, inconsistent dimensions, ...).
    #[error("{}: {problem}", path.display())]
    Data {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        problem: DataProblem,
    },
    /// A configuration value is out of range or inconsistent.
    #[error("invalid setting `{field}`: {problem}")]
    Config {
        /// The setting's name, as in the config struct and the CLI flag.
        field: &'static str,
        /// Why it is invalid.
        problem: String,
    },
    /// An environment variable a scheduler (or its user) set is invalid or inconsistent with
    /// another: the variable, as the user's words, not a setting.
    #[error("environment variable {name}={value}: {problem}")]
    Env {
        /// The variable, e.g. `SLURM_ARRAY_TASK_COUNT`.
        name: &'static str,
        /// Its value, as set.
        value: String,
        /// Why it is refused.
        problem: String,
    },
    /// A saved run state or checkpoint is unreadable or does not match the current run.
    #[error("{}: {problem}", path.display())]
    State {
        /// The state or checkpoint file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// A Hugging Face Hub repository could not be listed or a file fetched.
    #[error("{repo}: {problem} (hub cache: {})", cache.display())]
    Hub {
        /// The repository, as `hf:OWNER/NAME[@REV]`.
        repo: String,
        /// The cache folder in use.
        cache: PathBuf,
        /// What went wrong.
        problem: String,
    },
    /// A row of a CSV file a person wrote (labels, answers) is invalid; nothing was changed.
    #[error("{}:{row}: {problem}", path.display())]
    Row {
        /// The file.
        path: PathBuf,
        /// 1-based line number (the header is line 1).
        row: usize,
        /// What is wrong with it.
        problem: String,
    },
    /// The observer asked the run to stop; everything up to the last completed cycle is saved.
    #[error("stopped by the caller; completed cycles are saved")]
    Interrupted,
    /// Scoring or selection failed.
    #[error(transparent)]
    Score(#[from] alkit_acquisition::ScoreError),
    /// A tensor operation failed.
    #[error("tensor operation failed: {0}")]
    Candle(#[from] candle_core::Error),
    /// What the library was doing when `inner` happened (which data, checkpoint or run).
    // The inner error is part of the message, as with `Io`, so printing this error alone says
    // everything; [`Error::kind`] reaches the inner one.
    #[error("{context}: {inner}")]
    Context {
        /// What was being done: `loading the data DIR`, `scoring hf:OWNER/NAME`, ...
        context: String,
        /// What went wrong.
        inner: Box<Error>,
    },
}

/// What is wrong with a data file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DataProblem {
    /// The magic number is not the expected one.
    #[error("bad IDX magic {found:#010x}, expected {expected:#010x} ({kind})")]
    BadMagic {
        /// What the file starts with.
        found: u32,
        /// What was expected.
        expected: u32,
        /// `images` or `labels`.
        kind: &'static str,
    },
    /// The file ends before its header says it should.
    #[error("truncated: header promises {expected} bytes of data, file has {got}")]
    Truncated {
        /// Bytes promised by the header.
        expected: usize,
        /// Bytes present.
        got: usize,
    },
    /// The file has more bytes than its header describes.
    #[error("{extra} trailing bytes after the data the header describes")]
    Trailing {
        /// Extra bytes.
        extra: usize,
    },
    /// Image dimensions differ between files that must agree (e.g. train and test).
    #[error("image size {got:?} differs from {expected:?}")]
    DimensionMismatch {
        /// Expected `(h, w)`.
        expected: (usize, usize),
        /// Found `(h, w)`.
        got: (usize, usize),
    },
    /// Image and label files hold different numbers of items.
    #[error("{labels} labels for {images} images")]
    CountMismatch {
        /// Items in the image file.
        images: usize,
        /// Items in the label file.
        labels: usize,
    },
    /// A label is not below the class count.
    #[error("label {label} at item {item} is not one of the {classes} declared classes (0 to {max})", max = classes.saturating_sub(1))]
    LabelOutOfRange {
        /// The item.
        item: usize,
        /// Its label.
        label: u32,
        /// The number of classes.
        classes: usize,
    },
    /// The file is empty or otherwise unusable.
    #[error("{0}")]
    Other(String),
}

impl Error {
    /// Wraps an IO error with the path it concerns.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            cause: source,
        }
    }

    /// A data-format error for `path`.
    pub fn data(path: impl Into<PathBuf>, problem: DataProblem) -> Self {
        Error::Data {
            path: path.into(),
            problem,
        }
    }

    /// A configuration error.
    pub fn config(field: &'static str, problem: impl Into<String>) -> Self {
        Error::Config {
            field,
            problem: problem.into(),
        }
    }

    /// The error under any [`Error::Context`] layers: what decides how a caller reacts (bad
    /// settings, an interruption) whatever was being done.
    pub fn kind(&self) -> &Error {
        match self {
            Error::Context { inner, .. } => inner.kind(),
            e => e,
        }
    }

    /// `self`, saying it happened while doing `context`.
    pub fn context(self, context: impl Into<String>) -> Self {
        Error::Context {
            context: context.into(),
            inner: Box::new(self),
        }
    }

    /// An error about environment variable `name`, set to `value`.
    pub fn env(name: &'static str, value: impl Into<String>, problem: impl Into<String>) -> Self {
        Error::Env {
            name,
            value: value.into(),
            problem: problem.into(),
        }
    }

    /// A state/checkpoint error for `path`.
    pub fn state(path: impl Into<PathBuf>, problem: impl Into<String>) -> Self {
        Error::State {
            path: path.into(),
            problem: problem.into(),
        }
    }
}

/// Adds what was being done to a library error, as `anyhow::Context` does in a binary.
pub trait ResultExt<T> {
    /// On an error, says it happened while doing `context()`.
    fn context_with<C: Into<String>>(self, context: impl FnOnce() -> C) -> Result<T>;
}

impl<T, E: Into<Error>> ResultExt<T> for std::result::Result<T, E> {
    fn context_with<C: Into<String>>(self, context: impl FnOnce() -> C) -> Result<T> {
        self.map_err(|e| e.into().context(context()))
    }
}

thread_local! {
    /// How deep this thread is inside [`contain`].
    static CONTAINING: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Runs `f`, a call into a third-party decoder (PNG, JPEG, Parquet's record reader), so that a
/// panic inside it on a malformed file becomes an error naming `path` instead of ending the
/// program. alkit's own checks run first and are meant to make this unreachable; the Parquet
/// record reader, though, panics by design on some corrupt pages (`Cannot extract value`), and
/// no check short of decoding can foresee it.
pub fn contain<T>(path: &Path, what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    CONTAINING.with(|c| c.set(c.get() + 1));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    CONTAINING.with(|c| c.set(c.get().saturating_sub(1)));
    r.unwrap_or_else(|payload| {
        let msg = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Err(Error::data(
            path,
            DataProblem::Other(format!("{what} failed on malformed data ({msg})")),
        ))
    })
}

/// True while this thread runs inside [`contain`]: a panic then becomes an error, so a panic
/// hook can stay silent (the `alkit` binary's does; see [`quiet_contained_panics`]).
pub fn is_contained() -> bool {
    CONTAINING.with(|c| c.get() > 0)
}

/// Wraps the current panic hook so that it stays silent for panics [`contain`] turns into
/// errors and runs as before for every other panic. The `alkit` binary installs it at start;
/// a program embedding the library may do the same.
pub fn quiet_contained_panics() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !is_contained() {
            previous(info)
        }
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_layers_keep_the_cause_in_the_message_and_in_kind() {
        let e: Result<()> = Err(Error::config("seeds", "0 is not in 1..=100000"));
        let e = e
            .context_with(|| "loading the data d")
            .context_with(|| "curve run in out")
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "curve run in out: loading the data d: invalid setting `seeds`: 0 is not in 1..=100000"
        );
        assert!(matches!(e.kind(), Error::Config { field: "seeds", .. }));
        // Not chained as a source: a printer walking `source()` says the cause once.
        assert!(std::error::Error::source(&e).is_none());
        let io = Error::io("f.csv", std::io::Error::other("gone"));
        assert!(matches!(io.kind(), Error::Io { .. }));
    }
}
