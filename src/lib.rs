//! # alkit
//!
//! Active learning and uncertainty on candle: train a classifier from a small labeled seed
//! set, score the unlabeled pool, label the top points, retrain, repeat.
//!
//! - [`data`]: IDX files, datasets, normalisation, the labeled/unlabeled [`data::Pool`];
//! - [`nn`]: the [`nn::Classifier`] trait, built-in CNN and MLP, seeded initialisation;
//! - [`train`] and [`predict`]: fitting from scratch, batched inference and test metrics;
//! - [`acquire`]: the acquisition loop with resumable run state;
//! - [`curve`]: many strategies x seeds into CSV tables and plots;
//! - [`session`], [`label_studio`] and [`serve`]: labeling sessions with a person as the
//!   oracle, from the command line, Label Studio files or a page in the browser;
//! - [`observe`]: progress reporting (the library never prints);
//! - scorers, evidence and selection live in the `alkit-acquisition` crate, re-exported as
//!   [`acquisition`].
//!
//! See `ARCHITECTURE.md` for how the pieces fit.

pub use alkit_acquisition as acquisition;

pub mod acquire;
pub mod bench;
pub mod checkpoint;
pub mod curve;
pub mod data;
pub mod duq;
pub mod error;
pub mod eval;
mod fsutil;
pub mod hub;
mod kernels;
pub mod label_studio;
pub mod limits;
pub mod metrics;
pub mod models;
pub mod nn;
pub mod observe;
pub mod output;
pub mod plot;
pub mod predict;
pub mod rng;
pub mod round;
pub mod serve;
pub mod session;
pub mod strategies;
pub mod surface;
pub mod train;

pub use error::{Error, Result};

/// Runs `f` with alkit's hand-written CPU kernels turned off on the calling thread: CPU
/// tensors then take the device-agnostic candle compositions that CUDA and Metal tensors take,
/// so those paths can be checked against the kernels on a machine without a GPU. Results agree
/// with the kernels' up to summation order (the test suite's `device` module bounds the
/// difference). Everything `f` computes on this thread is affected; other threads are not.
pub fn without_cpu_kernels<T>(f: impl FnOnce() -> T) -> T {
    kernels::without(f)
}

/// Keeps candle's large, short-lived buffers in the heap instead of fresh `mmap`s (glibc
/// only; a no-op elsewhere). Training allocates and frees tens of megabytes every step, and
/// glibc's default serves each with a new mapping: page faults were ~30% of training time
/// (notes). Call it once at the start of a program, before other threads exist; the `alkit`
/// binary, the examples and the tests do. It changes process-wide allocator thresholds, so a
/// library never calls it on its own.
pub fn tune_allocator() {
    kernels::sys::raise_mmap_threshold();
}
