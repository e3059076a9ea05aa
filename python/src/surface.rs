//! Two-moons uncertainty surfaces (`alkit surface`): the settings come as one JSON object read
//! into the library's [`SurfaceSettings`] (each setting's name, type, default and range
//! declared there), the surfaces go out as numpy arrays, and with `out` the same files as
//! the command's are written.

use crate::errors::PyAlkitResult;
use alkit::error::{Error, Result};
use alkit::jobs::surface::{
    check_beside, moons_surface, run, Surface, SurfaceModelKind, SurfaceSettings,
};
use numpy::ndarray::Array2;
use numpy::IntoPyArray;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::path::PathBuf;

/// One surface as a dict: its figures and its arrays (`grid` and `gradient` `(n, n)`, row 0
/// at the top; `train_points` `(m, 3)`: x, y, label).
fn to_dict<'py>(py: Python<'py>, s: Surface) -> PyAlkitResult<Bound<'py, PyDict>> {
    let shaped = |v: Vec<f64>, shape: (usize, usize)| {
        Array2::from_shape_vec(shape, v).map_err(|e| Error::config("surface", e.to_string()))
    };
    let points: Vec<f64> = s
        .train_points
        .iter()
        .flat_map(|&(x, y, l)| [x, y, f64::from(l)])
        .collect();
    let d = PyDict::new(py);
    d.set_item("model", &s.model)?;
    d.set_item("scorer", &s.scorer)?;
    d.set_item("accuracy", s.accuracy)?;
    d.set_item("auroc_far", s.auroc_far)?;
    d.set_item("extent", s.extent.to_vec())?;
    d.set_item("grid", shaped(s.grid, (s.n, s.n))?.into_pyarray(py))?;
    d.set_item("gradient", shaped(s.gradient, (s.n, s.n))?.into_pyarray(py))?;
    let m = s.train_points.len();
    d.set_item("train_points", shaped(points, (m, 3))?.into_pyarray(py))?;
    Ok(d)
}

/// The surface of the model `settings` names (a JSON object of settings by name; `None`:
/// the defaults), and of each of `beside` on the same moons under the key `"beside"`; with
/// `out`, the command's files written there too.
#[pyfunction]
#[pyo3(signature = (settings=None, beside=Vec::new(), out=None))]
pub fn surface<'py>(
    py: Python<'py>,
    settings: Option<&str>,
    beside: Vec<String>,
    out: Option<PathBuf>,
) -> PyAlkitResult<Bound<'py, PyDict>> {
    let given = match settings {
        None => serde_json::Map::new(),
        Some(j) => serde_json::from_str(j)
            .map_err(|e| Error::config("surface", format!("not a JSON object: {e}")))?,
    };
    let settings = SurfaceSettings::with_given(given)?;
    let spec = settings.spec()?;
    let others = beside
        .iter()
        .map(|m| {
            let kind = m.parse::<SurfaceModelKind>().map_err(|_| {
                let known: Vec<&str> = SurfaceModelKind::ALL.iter().map(|k| k.name()).collect();
                Error::config(
                    "beside",
                    format!("unknown model `{m}`; expected one of: {}", known.join(", ")),
                )
            })?;
            settings.spec_of(kind, None)
        })
        .collect::<Result<Vec<_>>>()?;
    check_beside(&spec, &others)?;
    let device = candle_core::Device::Cpu;
    let (first, rest) = py.detach(move || -> Result<(Surface, Vec<Surface>)> {
        match out {
            Some(dir) => {
                alkit::output::check_output_dir("out", &dir, &[], false)?;
                run(&spec, &others, &dir, &device)
            }
            None => Ok((
                moons_surface(&spec, &device)?,
                others
                    .iter()
                    .map(|s| moons_surface(s, &device))
                    .collect::<Result<_>>()?,
            )),
        }
    })?;
    let d = to_dict(py, first)?;
    let rest = rest
        .into_iter()
        .map(|s| to_dict(py, s))
        .collect::<PyAlkitResult<Vec<_>>>()?;
    d.set_item("beside", rest)?;
    Ok(d)
}

/// Every surface setting by name with its default, as the command line's flags have them.
#[pyfunction]
pub fn surface_settings() -> PyAlkitResult<String> {
    serde_json::to_string(&SurfaceSettings::default())
        .map_err(|e| Error::config("surface", e.to_string()).into())
}
