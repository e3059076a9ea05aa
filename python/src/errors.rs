//! The library's errors as Python exceptions, through one newtype: every function of the
//! module returns [`PyAlkitError`] on failure, into which `?` converts an [`alkit::Error`], a
//! scorer's [`ScoreError`] or a [`PyErr`] (polars' `PyPolarsErr` is the model). Each library
//! error becomes an instance of one of the classes of `alkit.errors` (written in Python so
//! that they can also derive from `ValueError` and `OSError`), chosen by what the error is
//! about under any context layers ([`alkit::Error::kind`]): a setting, the data, a session's
//! state, a file, the Hub. The message is the library's own, context included; the setting,
//! file and line it names are attributes too, so a program can react without parsing the
//! message.

use alkit::acquisition::ScoreError;
use alkit::observe::{Control, Event, Observer};
use alkit::Error;
use pyo3::exceptions::PyKeyboardInterrupt;
use pyo3::prelude::*;

/// The names under which the library and this module refer to arrays a caller passed (the
/// functions' array arguments, and the metrics' own names for theirs). `weight` is not one:
/// its errors say the last layer is missing or partial, a choice of arguments.
const ARRAYS: &[&str] = &[
    "probs",
    "draws",
    "features",
    "bias",
    "train_features",
    "train_labels",
    "labels",
    "cal_probs",
    "cal_labels",
    "logits",
    "scores",
    "labeled",
    "reference",
    "in-distribution scores",
    "OOD scores",
    "correct",
    "confidence",
    "train items",
    "train labels",
    "test items",
    "test labels",
];

/// An error on its way to Python: the library's, kept until PyO3 raises it (as the exception
/// of its kind), or one Python already raised.
pub enum PyAlkitError {
    /// The library's error.
    Alkit(Error),
    /// An exception raised by Python or PyO3 (a failed conversion, an import).
    Python(PyErr),
}

/// What the module's functions return.
pub type PyAlkitResult<T> = std::result::Result<T, PyAlkitError>;

impl From<Error> for PyAlkitError {
    fn from(e: Error) -> Self {
        PyAlkitError::Alkit(e)
    }
}

impl From<ScoreError> for PyAlkitError {
    fn from(e: ScoreError) -> Self {
        PyAlkitError::Alkit(Error::Score(e))
    }
}

impl From<PyErr> for PyAlkitError {
    fn from(e: PyErr) -> Self {
        PyAlkitError::Python(e)
    }
}

impl From<PyAlkitError> for PyErr {
    fn from(e: PyAlkitError) -> Self {
        match e {
            PyAlkitError::Alkit(e) => {
                Python::attach(|py| build(py, &e).unwrap_or_else(|failed| failed))
            }
            PyAlkitError::Python(e) => e,
        }
    }
}

/// The exception for `e`: class, message and attributes.
fn build(py: Python<'_>, e: &Error) -> PyResult<PyErr> {
    let message = e.to_string();
    // Attributes: the setting, the file and the line the error names.
    let mut field: Option<String> = None;
    let mut path: Option<String> = None;
    let mut row: Option<usize> = None;
    let class = match e.kind() {
        // A "setting" that is one of the arrays passed in is a problem with the data.
        Error::Config { field: f, .. } if ARRAYS.contains(f) => {
            field = Some((*f).to_string());
            "DataError"
        }
        Error::Config { field: f, .. } | Error::Env { name: f, .. } => {
            field = Some((*f).to_string());
            "SettingsError"
        }
        Error::Score(s) => match s {
            ScoreError::Setting { setting, .. } => {
                field = Some((*setting).to_string());
                "SettingsError"
            }
            ScoreError::TooMany { .. } => {
                field = Some("k".to_string());
                "SettingsError"
            }
            ScoreError::Missing { .. } => "SettingsError",
            _ => "DataError",
        },
        Error::Data { path: p, .. } => {
            path = Some(p.display().to_string());
            "DataError"
        }
        Error::Row {
            path: p, row: r, ..
        } => {
            path = Some(p.display().to_string());
            row = Some(*r);
            "DataError"
        }
        Error::State { path: p, .. } => {
            path = Some(p.display().to_string());
            "StateError"
        }
        Error::Io { path: p, .. } => {
            path = Some(p.display().to_string());
            "FileError"
        }
        Error::Hub { .. } => "HubError",
        Error::Interrupted => return Ok(PyKeyboardInterrupt::new_err(message)),
        _ => "AlkitError",
    };
    let errors = py.import("alkit.errors")?;
    let exc = errors.getattr(class)?.call1((message,))?;
    exc.setattr("field", field)?;
    exc.setattr("path", path)?;
    exc.setattr("row", row)?;
    Ok(PyErr::from_value(exc))
}

/// An observer that stops the library's work when Python has a signal to handle (Ctrl-C in a
/// notebook): the work ends with [`Error::Interrupted`], raised as `KeyboardInterrupt`.
pub struct Signals;

impl Observer for Signals {
    fn on(&mut self, _event: &Event<'_>) -> Control {
        match Python::attach(|py| py.check_signals()) {
            Ok(()) => Control::Continue,
            Err(_) => Control::Stop,
        }
    }
}
