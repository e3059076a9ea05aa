//! ONNX Runtime: the process's environment, opened once from the library `ORT_DYLIB_PATH`
//! names, a session built from a model's bytes, and what a session says of its outputs.

use crate::error::{contain, Error, Result};
use ort::session::Session;
use ort::value::{TensorElementType, ValueType};
use std::path::Path;
use std::sync::{Mutex, OnceLock};

/// The environment variable naming ONNX Runtime's shared library.
pub const ORT_DYLIB_PATH: &str = "ORT_DYLIB_PATH";

/// The process's ONNX Runtime environment, created once (the library opened from
/// `ORT_DYLIB_PATH`, its log silenced: the library never prints).
fn runtime() -> Result<&'static ort::environment::Environment> {
    static ENV: OnceLock<ort::environment::Environment> = OnceLock::new();
    static INIT: Mutex<()> = Mutex::new(());
    if let Some(env) = ENV.get() {
        return Ok(env);
    }
    let _guard = INIT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(env) = ENV.get() {
        return Ok(env);
    }
    let how = "ONNX models run in ONNX Runtime, whose shared library this variable names: \
               scripts/onnxruntime.sh DIR installs it from PyPI and writes DIR/env.sh, which sets it";
    let path = std::env::var_os(ORT_DYLIB_PATH).unwrap_or_default();
    if path.is_empty() {
        return Err(Error::env(ORT_DYLIB_PATH, "", format!("not set; {how}")));
    }
    let shown = path.to_string_lossy().into_owned();
    if !Path::new(&path).is_file() {
        return Err(Error::env(
            ORT_DYLIB_PATH,
            shown,
            format!("names no file; {how}"),
        ));
    }
    let builder = ort::init_from(&path).map_err(|e| {
        Error::env(
            ORT_DYLIB_PATH,
            shown.clone(),
            format!("not ONNX Runtime's library ({e}); {how}"),
        )
    })?;
    let env = contain(Path::new(&path), "ONNX Runtime", || {
        builder
            .with_name("alkit")
            .with_logger(std::sync::Arc::new(|_, _, _, _, _| {}))
            .build()
            .map_err(|e| {
                Error::env(
                    ORT_DYLIB_PATH,
                    shown.clone(),
                    format!("ONNX Runtime did not start: {e}"),
                )
            })
    })?;
    Ok(ENV.get_or_init(|| env))
}

/// A dimension of an input or output as ONNX Runtime reports it: `None` when dynamic.
pub(super) fn fixed(d: i64) -> Option<usize> {
    usize::try_from(d).ok().filter(|&d| d > 0)
}

/// An output's dims as ONNX Runtime reports them, checked to be f32 of rank 2.
pub(super) fn output_dims(
    session: &Session,
    name: &str,
    path: &Path,
    what: &str,
) -> Result<Vec<i64>> {
    let outlet = session
        .outputs()
        .iter()
        .find(|o| o.name() == name)
        .ok_or_else(|| Error::state(path, format!("ONNX Runtime lists no output `{name}`")))?;
    match outlet.dtype() {
        ValueType::Tensor { ty, shape, .. } if *ty == TensorElementType::Float32 => {
            if shape.len() != 2 {
                return Err(Error::state(
                    path,
                    format!(
                        "output `{name}` ({what}) has dimensions {:?}; alkit reads (batch, {what})",
                        &shape[..]
                    ),
                ));
            }
            Ok(shape.to_vec())
        }
        other => Err(Error::state(
            path,
            format!("output `{name}` ({what}) is {other}, not a float32 tensor"),
        )),
    }
}

/// A session of the model `bytes` (read from `path`), run on the pool's threads; its external
/// data (checked before) are read from `dir`, the model's folder, wherever in the graph a
/// tensor names them, as a model given as bytes has no folder of its own.
pub(super) fn session(path: &Path, dir: &Path, bytes: &[u8]) -> Result<Session> {
    let env = runtime()?;
    let threads = rayon::current_num_threads().max(1);
    contain(path, "ONNX Runtime", || {
        let refused = |e: String| Error::state(path, format!("ONNX Runtime refused it: {e}"));
        Session::builder(env)
            .map_err(|e| refused(e.to_string()))?
            .with_intra_threads(threads)
            .map_err(|e| refused(e.to_string()))?
            .with_config_entry(
                "session.model_external_initializers_file_folder_path",
                dir.to_string_lossy(),
            )
            .map_err(|e| refused(e.to_string()))?
            .commit_from_memory(bytes)
            .map_err(|e| refused(e.to_string()))
    })
}
