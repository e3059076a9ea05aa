//! The kernels' one dtype dispatch: [`with_float!`] runs a body written once, generically,
//! with its element type set to `f32` or `f64` after a dtype (or the common dtype of a custom
//! op's storages), and fails with one message for any other dtype.

use candle_core::{backend::BackendStorage, CpuStorage, DType, Result};

/// `with_float!(op, dtype, |T| body)`: `body` with the type `T` bound to `f32` or `f64` after
/// `dtype`; any other dtype fails with `"{op} supports f32 and f64, got {dtype:?}"`.
/// `with_float!(op, [s1, s2, ..], |T| body)`: the same for the common dtype of a custom op's
/// CPU storages (see [`common_dtype`]).
///
/// The body reaches its storages as `T` slices (`storage::storage_slice::<T>`), builds its
/// output with the generic kernel, and hands it back with `storage::into_storage`.
macro_rules! with_float {
    ($op:expr, [$($s:expr),+ $(,)?], |$t:ident| $body:expr) => {
        $crate::kernels::dispatch::with_float!(
            $op,
            $crate::kernels::dispatch::common_dtype($op, &[$($s),+])?,
            |$t| $body
        )
    };
    ($op:expr, $dtype:expr, |$t:ident| $body:expr) => {
        match $dtype {
            candle_core::DType::F32 => {
                type $t = f32;
                $body
            }
            candle_core::DType::F64 => {
                type $t = f64;
                $body
            }
            dt => candle_core::bail!("{} supports f32 and f64, got {dt:?}", $op),
        }
    };
}
pub(crate) use with_float;

/// The dtype that all of `storages` have; storages of different dtypes fail.
pub(crate) fn common_dtype(op: &str, storages: &[&CpuStorage]) -> Result<DType> {
    let dtypes: Vec<DType> = storages.iter().map(|s| s.dtype()).collect();
    match dtypes.split_first() {
        Some((&d, rest)) if rest.iter().all(|&r| r == d) => Ok(d),
        _ => candle_core::bail!("{op} needs inputs of one dtype, f32 or f64, got {dtypes:?}"),
    }
}
