//! # alkit
//!
//! Active learning and uncertainty on candle: train a classifier from a small labeled seed
//! set, score the unlabeled pool, label the top points, retrain, repeat.
//!
//! ## Code map, by layer (bottom first; a module imports only its own layer or lower ones)
//!
//! - **core**: [`error`] (one error enum; settings named as ``setting `NAME` ``), [`limits`]
//!   (size bounds checked before allocating), [`rng`] (seeded streams per
//!   `(seed, purpose, key)`), [`observe`] (progress events: the library never prints),
//!   [`output`] (checked output paths and CSV), [`metrics`] (OOD and calibration), [`plot`];
//! - **kernels**: the hand-written CPU kernels (private; the crate's only `unsafe`);
//! - **data**: [`data`] (sources read whole or a chunk at a time, [`data::Pool`]), [`hub`];
//! - **model**: [`nn`] (the [`nn::Classifier`] trait, layers, ResNets);
//! - **duq**: [`duq`] (DUQ on any extractor);
//! - **fit**: [`train`] (the one training entry);
//! - **registry**: [`models`] (built-in architectures) and [`checkpoint`] (every kind of
//!   checkpoint behind one door);
//! - **evidence**: [`predict`] (batched inference and what scorers need);
//! - **round**: [`round`] (the one acquisition round) and [`strategies`] (the registry of
//!   named strategies and their [`strategies::ScorerSettings`], declared once);
//! - **loops**: [`acquire`] (the simulated loop), [`session`] and [`label_studio`] (a person
//!   as the oracle);
//! - **experiments**: [`jobs`], what the commands that train, score and measure call, one file
//!   (or folder) per command, each entered by `run`: [`jobs::train`], [`jobs::embed`],
//!   [`jobs::score`], [`jobs::merge`], [`jobs::ood`], [`jobs::calibrate`],
//!   [`jobs::scores_file`], [`jobs::curve`], [`jobs::bench`](mod@jobs::bench),
//!   [`jobs::surface`];
//! - **serve**: [`serve`] (the labeling page and the Label Studio backend).
//!
//! Scorers, evidence and selection live in the `alkit-acquisition` crate, re-exported as
//! [`acquisition`]. `ARCHITECTURE.md` says how the pieces fit and where to add things.
//!
//! ## Scoring by name
//!
//! Every command looks strategies up in one registry with one settings type; a program does
//! the same:
//!
//! ```
//! use alkit::acquisition::{Evidence, Probs};
//! use alkit::strategies::{per_item_scorers, ScorerSettings, StrategyKind};
//!
//! // Settings by name, as the command line's flags and Python's keywords give them.
//! let given = serde_json::json!({ "select": "softmax", "beta": 2.0 });
//! let settings = ScorerSettings::with_given(given.as_object().unwrap().clone(), "settings")?;
//! assert_eq!(settings.first_given(), Some("select"));
//!
//! let kinds: Vec<StrategyKind> = vec!["entropy".parse().unwrap(), "margin".parse().unwrap()];
//! let scorers = per_item_scorers(&kinds, &settings)?;
//! // Three candidates, two classes: probabilities (n, c) = (3, 2).
//! let probs = Probs::new(vec![0.5, 0.5, 0.9, 0.1, 0.99, 0.01], 3, 2).unwrap();
//! let evidence = Evidence::from_probs(probs);
//! for scorer in &scorers {
//!     let scores = scorer.score(&evidence).unwrap();
//!     // Higher = label first: the 50/50 candidate leads.
//!     assert!(scores[0] > scores[1] && scores[1] > scores[2]);
//! }
//! # Ok::<(), alkit::Error>(())
//! ```

pub use alkit_acquisition as acquisition;

pub mod acquire;
pub mod checkpoint;
pub mod data;
pub mod duq;
pub mod error;
mod fsutil;
pub mod hub;
pub mod jobs;
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
