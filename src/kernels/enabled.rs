//! Whether the kernels run on this thread: [`supported`] (CPU, `f32`/`f64`, not turned off),
//! [`without`] to turn them off while a closure runs (CPU tensors then take the generic candle
//! compositions that GPU tensors take), and [`entry`], which every kernel's CPU entry calls so
//! that a path a GPU tensor would fail on fails on the CPU too.

use candle_core::{Result, Tensor};

thread_local! {
    /// Whether this thread may use the kernels (see [`without`]).
    static ENABLED: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
}

/// True when a tensor can use these kernels (CPU, `f32` or `f64`, and not turned off on this
/// thread by [`without`]).
pub fn supported(x: &Tensor) -> bool {
    ENABLED.with(std::cell::Cell::get)
        && x.device().is_cpu()
        && matches!(x.dtype(), candle_core::DType::F32 | candle_core::DType::F64)
}

/// True when `f32` and `f64` tensors on `device` can use these kernels (the CPU, and not
/// turned off on this thread by [`without`]).
pub fn supported_on(device: &candle_core::Device) -> bool {
    ENABLED.with(std::cell::Cell::get) && device.is_cpu()
}

/// Refuses a kernel's CPU entry while the kernels are off on this thread (see [`without`]):
/// a kernel reached there is a path on which a CUDA or Metal tensor would fail.
pub(crate) fn entry(op: &str) -> Result<()> {
    if !ENABLED.with(std::cell::Cell::get) {
        candle_core::bail!(
            "{op}: a CPU kernel was reached with the kernels off (a GPU tensor would fail here)"
        );
    }
    Ok(())
}

/// Runs `f` with the kernels turned off on this thread: CPU tensors then take the generic
/// candle compositions that CUDA and Metal tensors take. Restored afterwards, also when `f`
/// panics.
pub fn without<T>(f: impl FnOnce() -> T) -> T {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            ENABLED.with(|e| e.set(self.0));
        }
    }
    let _restore = Restore(ENABLED.with(|e| e.replace(false)));
    f()
}
