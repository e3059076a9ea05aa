//! `alkit._alkit`, the native module of alkit's Python package: a thin layer over the
//! library. numpy arrays come in as `float32` buffers and go out as arrays that own the
//! library's vectors (no copy on the way out); the work runs without the GIL; every library
//! error becomes an exception of `alkit.errors` carrying its message, kind and the setting or
//! file it names. The package's Python code (`alkit/__init__.py`) converts inputs and shapes
//! results; the stubs are `alkit/_alkit.pyi`.

use pyo3::prelude::*;

mod arrays;
mod curve;
mod errors;
mod metrics;
mod regression;
mod scoring;
mod selecting;
mod session;
mod settings;
mod surface;

/// Registers the module's functions and classes.
#[pymodule]
fn _alkit(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // Before any call could start the thread pool with a count it cannot survive.
    alkit::limits::check_thread_env().map_err(errors::PyAlkitError::from)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(scoring::score_arrays, m)?)?;
    m.add_function(wrap_pyfunction!(scoring::score_data, m)?)?;
    m.add_function(wrap_pyfunction!(scoring::registry, m)?)?;
    m.add_function(wrap_pyfunction!(selecting::select, m)?)?;
    m.add_function(wrap_pyfunction!(selecting::select_batch, m)?)?;
    m.add_function(wrap_pyfunction!(metrics::ood_metrics, m)?)?;
    m.add_function(wrap_pyfunction!(metrics::calibration, m)?)?;
    m.add_function(wrap_pyfunction!(metrics::fit_temperature, m)?)?;
    m.add_function(wrap_pyfunction!(metrics::fit_platt, m)?)?;
    m.add_function(wrap_pyfunction!(metrics::conformal, m)?)?;
    m.add_function(wrap_pyfunction!(regression::score_gaussian, m)?)?;
    m.add_function(wrap_pyfunction!(regression::regression, m)?)?;
    m.add_function(wrap_pyfunction!(regression::conformal_intervals, m)?)?;
    m.add_function(wrap_pyfunction!(curve::curve, m)?)?;
    m.add_function(wrap_pyfunction!(settings::scorer_settings, m)?)?;
    m.add_function(wrap_pyfunction!(surface::surface, m)?)?;
    m.add_function(wrap_pyfunction!(surface::surface_settings, m)?)?;
    m.add_class::<session::Session>()?;
    Ok(())
}
