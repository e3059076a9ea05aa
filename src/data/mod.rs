//! Data: IDX files, in-memory datasets, normalisation and the labeled/unlabeled pool.
//!
//! A [`Dataset`] holds `f32` features `(n, *item_shape)` (images as `(c, h, w)` scaled to
//! `[0, 1]`, vectors as `(d,)`) and `u32` labels. Normalisation statistics are fitted on the
//! training split only ([`Normalizer::fit`]) and applied unchanged to test and OOD data.

pub mod dataset;
pub mod idx;
pub mod image;
pub mod moons;
pub mod pool;
pub mod reader;
pub mod resample;
pub mod source;
pub mod stream;

pub use dataset::{load_idx_dir, Dataset, Fnv1a, Normalizer, NormalizerFit, Splits};
pub use pool::{Candidates, Pool};
pub use reader::{PoolReader, StreamedPool};
pub use source::{Items, Loaded, Source};
