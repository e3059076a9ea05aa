//! Access to a custom op's CPU storage: the contiguous `T` slice under a layout (for
//! `cpu_fwd`), the slices behind tensors (for `bwd`), the NHWC dimensions of a layout, and a
//! kernel's output vector back as a storage. Kernels never see strided data.

use candle_core::{CpuStorage, Layout, Result, Tensor, WithDType};

/// The contiguous slice of `s` under `l`; a strided layout is refused.
pub(crate) fn contiguous<'a, T>(s: &'a [T], l: &Layout, op: &str) -> Result<&'a [T]> {
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&s[a..b]),
        None => candle_core::bail!("{op} needs a contiguous input"),
    }
}

/// The contiguous `T` slice of a CPU storage under `l` (for custom ops' `cpu_fwd`).
pub(crate) fn storage_slice<'a, T: WithDType>(
    s: &'a CpuStorage,
    l: &Layout,
    op: &str,
) -> Result<&'a [T]> {
    contiguous(s.as_slice::<T>()?, l, op)
}

/// Runs `f` on the contiguous CPU slices of `ts`, all of dtype `T` (for custom ops' `bwd`,
/// which receive tensors).
pub(crate) fn with_cpu_slices<T: WithDType, R>(
    ts: &[&Tensor],
    op: &str,
    f: impl FnOnce(&[&[T]]) -> R,
) -> Result<R> {
    let guards: Vec<_> = ts.iter().map(|t| t.storage_and_layout()).collect();
    let mut slices = Vec::with_capacity(ts.len());
    for (g, l) in &guards {
        let candle_core::Storage::Cpu(cs) = &**g else {
            candle_core::bail!("{op} runs on the CPU only");
        };
        slices.push(storage_slice::<T>(cs, l, op)?);
    }
    Ok(f(&slices))
}

/// The `(b, h, w, c)` of a rank-4 NHWC layout.
pub(crate) fn dims4(l: &Layout, op: &str) -> Result<(usize, usize, usize, usize)> {
    match l.dims() {
        &[a, b, c, d] => Ok((a, b, c, d)),
        d => candle_core::bail!("{op} expects a rank-4 NHWC tensor, got {d:?}"),
    }
}

/// A kernel's output as a CPU storage of its element type.
pub(crate) fn into_storage<T: WithDType>(v: Vec<T>) -> CpuStorage {
    T::to_cpu_storage_owned(v)
}
