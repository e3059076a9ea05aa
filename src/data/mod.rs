//! Data: item sources read whole or in chunks, in-memory datasets, normalisation and the
//! labeled/unlabeled pool.
//!
//! A [`Dataset`] holds `f32` features `(n, *item_shape)` (images as `(c, h, w)` scaled to
//! `[0, 1]`, vectors as `(d,)`) and `u32` labels. Normalisation statistics are fitted on the
//! training split only ([`Normalizer::fit`]) and applied unchanged to test and OOD data.
//!
//! The files form one direction, each using only those listed before it: `resample`, `idx`,
//! `pool`; `dataset` (IDX folders as data sets), `moons`, `image`, `labels`, `plan`; `stream`
//! (the item-stream contract); `prepared`; `source/` (one file per source kind, and the
//! dispatcher in `source/mod.rs`); `reader` (what a round reads of a pool); `target` (regression targets, read through the
//! CSV reader of `source/` or, for an embedding file, its format's file there); `label_sets`
//! (multi-label targets, read as `target` reads numbers).

pub mod dataset;
pub mod display;
pub mod idx;
pub mod image;
pub mod label_sets;
mod labels;
pub mod moons;
mod plan;
pub mod pool;
mod prepared;
pub mod reader;
pub mod resample;
pub mod source;
pub mod stream;
pub mod target;

pub use dataset::{load_idx_dir, Dataset, Fnv1a, Normalizer, NormalizerFit, Splits};
pub use label_sets::{LabelFormat, LabelSets, LabelTable};
pub use pool::{Candidates, Pool};
pub use reader::{PoolReader, StreamedPool};
pub use source::Source;
pub use stream::{Items, Loaded};
pub use target::{Standardizer, Table, Targets, Task};
