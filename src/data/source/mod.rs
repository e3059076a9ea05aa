//! Item sources, the dispatcher: where a pool (and, for benchmark data sets, a test split)
//! comes from, and the two ways to read it, [`open`] (a chunk at a time) and [`load`] (whole).
//!
//! A [`Source`] is parsed from what a user types after `--data` or `--pool`:
//!
//! | form | what it is | ids | labels it carries |
//! |---|---|---|---|
//! | a folder with `train-images-idx3-ubyte[.gz]` ... | IDX (MNIST layout), train + `t10k` test split | index | all |
//! | a folder with only `train/` and `test/` subfolders | PNG/JPEG images in `train/CLASS/` (the pool) and `test/CLASS/` (the test split) | relative path | all |
//! | any other folder | PNG/JPEG images; those in `CLASS/` subfolders are labeled | relative path | subfolder items |
//! | `FILE.safetensors` | tensor `x` `(n, ...)` f32 or u8 (u8 is scaled by 1/255), optional integer `y` `(n,)`, optional metadata `classes` (comma-separated) | index | `y` |
//! | `FILE.npy` | one array `(n, d)` of float32, float16 or float64 (narrowed to f32), C order | index | none |
//! | `FILE.npz` | `np.savez[_compressed]` arrays: `features` `(n, d)` as in `.npy`, optional integer `labels` `(n,)` (negative: unlabeled), unicode or integer `ids` `(n,)`, unicode `classes`, `test_features`/`test_labels` | `ids` or index | non-negative `labels` |
//! | `FILE.csv` | tabular: a header, optional `id` and `label` columns, every other column a number | `id` or row index | non-empty `label` cells |
//! | `FILE.parquet` | a Hub-style table: an image column (struct with `bytes`, or raw bytes) and an integer label column | index | all |
//! | `FILE.parquet` with a list column | embeddings: a `list<float>`/`list<double>`/`fixed_size_list` column (`features`, `embedding` or the only list) `(n, d)`, optional integer `label`, optional string `id` | `id` or index | non-negative labels |
//! | `hf:OWNER/NAME[@REV]` | a Hub dataset: its `*train*` and `*test*` Parquet shards, or the four IDX files | index | all |
//!
//! Every item has a stable id that does not depend on the session: an index into the source's
//! fixed order, a relative path, or the CSV's own `id`. Image folders are read in sorted path
//! order. Images are scaled to `[0, 1]` and shaped `(c, h, w)`; all items of a source must agree.
//!
//! Each kind is one file here implementing the crate's `Format` trait
//! ([`stream`](crate::data::stream)) for both ways of reading; `Source::format` is the one
//! place a source's kind picks its file. A new kind is its file, its `mod` line, its
//! [`Source`] variant, its arm in `Source::format` and how [`Source::parse`] knows it.

mod csv;
mod folder;
mod hub;
mod idx;
mod numeric;
mod numpy;
mod parquet;
mod parquet_check;
mod parquet_embeddings;
mod safetensors;

pub use self::csv::read_indices;
pub(crate) use self::csv::{read_csv, read_delimited};
pub(crate) use self::numeric::NumericTable;
pub(crate) use self::numpy::NpzHead;
pub(crate) use self::safetensors::{listed_classes, CheckedHeader, TensorEntry};

use crate::data::dataset::Splits;
use crate::data::image::Preprocess;
use crate::data::plan::ImagePlan;
use crate::data::prepared::{prepare_items, preprocessed};
use crate::data::stream::{Format, ItemStream, Items, Listed, Loaded, PoolLabels};
use crate::error::{DataProblem, Error, Result, ResultExt};
use crate::hub::{Hub, HubRepo};
use crate::observe::Observer;
use std::path::{Path, PathBuf};

/// The items of an embedding file with numeric targets `target`, for regression (the
/// [`numeric`] layout): a safetensors, `.npz` or Parquet file, by its extension; `None` for
/// any other path, which the caller reads as a CSV table.
pub(crate) fn numeric_table(path: &Path, target: &[String]) -> Result<Option<NumericTable>> {
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "safetensors" => self::safetensors::safetensors_numeric(path, target).map(Some),
        "npz" => numpy::npz_numeric(path, target).map(Some),
        "parquet" if parquet_embeddings::is_embedding_table(path)? => {
            parquet_embeddings::parquet_numeric(path, target).map(Some)
        }
        "parquet" => Err(Error::data(
            path,
            DataProblem::Other(
                "a Parquet table of a regression run needs a list column of features (and \
                 the target columns); this one has none"
                    .into(),
            ),
        )),
        "npy" => Err(Error::data(
            path,
            DataProblem::Other(
                "an .npy file holds one array, so no targets beside the features: save both \
                 in an .npz (np.savez(path, features=x, y=y))"
                    .into(),
            ),
        )),
        _ => Ok(None),
    }
}

/// Where items come from (see the module docs for the accepted forms).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A folder with the four MNIST-layout IDX files.
    Idx(PathBuf),
    /// A folder of PNG/JPEG images, labeled ones in one subfolder per class.
    Images(PathBuf),
    /// A safetensors file with `x` and optionally `y`.
    Safetensors(PathBuf),
    /// A NumPy `.npy` file: one array of embeddings `(n, d)`.
    Npy(PathBuf),
    /// A NumPy `.npz` file: the embedding layout's arrays.
    Npz(PathBuf),
    /// A CSV file of numeric features.
    Csv(PathBuf),
    /// One Parquet file: an image and a label column, or a list column of embeddings.
    Parquet(PathBuf),
    /// A dataset repository on the Hugging Face Hub.
    Hub(HubRepo),
}

impl Source {
    /// Parses `hf:OWNER/NAME[@REV]` or a path (its kind from the file extension, or for a
    /// folder from whether it holds IDX files).
    pub fn parse(s: &str) -> Result<Source> {
        if let Some(repo) = s.strip_prefix("hf:") {
            return Ok(Source::Hub(HubRepo::parse(repo)?));
        }
        let p = PathBuf::from(s);
        if p.is_dir() {
            // Any one of the four files makes it an IDX folder, so that a missing one is
            // reported by name instead of the folder being read as images.
            let idx = idx::IDX_FILES
                .iter()
                .any(|n| p.join(n).is_file() || p.join(format!("{n}.gz")).is_file());
            return Ok(if idx {
                Source::Idx(p)
            } else {
                Source::Images(p)
            });
        }
        let ext = p
            .extension()
            .map(|e| e.to_string_lossy().to_ascii_lowercase())
            .unwrap_or_default();
        match ext.as_str() {
            "safetensors" => Ok(Source::Safetensors(p)),
            "npy" => Ok(Source::Npy(p)),
            "npz" => Ok(Source::Npz(p)),
            "csv" => Ok(Source::Csv(p)),
            "parquet" => Ok(Source::Parquet(p)),
            _ if !p.exists() => Err(Error::io(
                &p,
                std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or folder"),
            )),
            _ => Err(Error::data(
                &p,
                DataProblem::Other(
                    "unsupported source: expected a folder (IDX or images), .safetensors, .npy, \
                     .npz, .csv, .parquet or hf:OWNER/NAME"
                        .into(),
                ),
            )),
        }
    }

    /// True for sources whose labels a person gave (class subfolders, CSV `label` cells):
    /// a labeling session starts from them. Benchmark data sets (IDX, safetensors `y`,
    /// Parquet, Hub) carry complete ground truth, which a session treats as the oracle's
    /// answers, not as labels already given.
    pub fn labels_are_given(&self) -> bool {
        self.format().labels_are_given()
    }

    /// The file that reads this kind of source.
    fn format(&self) -> Box<dyn Format + '_> {
        match self {
            Source::Idx(dir) => Box::new(idx::Idx(dir)),
            Source::Images(dir) => Box::new(folder::Folder(dir)),
            Source::Safetensors(p) => Box::new(self::safetensors::Safetensors(p)),
            Source::Npy(p) => Box::new(numpy::Npy(p)),
            Source::Npz(p) => Box::new(numpy::Npz(p)),
            Source::Csv(p) => Box::new(self::csv::Csv(p)),
            Source::Parquet(p) => Box::new(self::parquet::Parquet(p)),
            Source::Hub(repo) => Box::new(hub::HubDataset(repo)),
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.format().name())
    }
}

/// The image plan of a checkpoint's preprocessing, once it was checked.
fn plan_of(pre: &Preprocess) -> Result<ImagePlan> {
    pre.check()
        .map_err(|m| Error::config("preprocess", format!("the checkpoint asks for {m}")))?;
    Ok(ImagePlan::preprocessed(*pre))
}

/// `source`'s pool (a data set's train split) read a chunk at a time; Hub files are fetched
/// through `hub` when not cached. With `pre`, a checkpoint's preprocessing, items are made into
/// the model's input: image sources (folders, Parquet, Hub Parquet) put every image through
/// `pre` as it is decoded, whatever its size, as timm's evaluation transform does for any
/// photo; tensor sources (IDX, safetensors, CSV) whose items already have `pre`'s shape are
/// taken as prepared; other tensor items must be 8-bit images (values `k / 255`, one or three
/// channels), which go through `pre` too; anything else is refused naming the item.
pub fn open(
    source: &Source,
    hub: &Hub,
    observer: &mut dyn Observer,
    pre: Option<&Preprocess>,
) -> Result<Box<dyn ItemStream>> {
    let Some(pre) = pre else {
        return source.format().open(hub, observer, None);
    };
    let plan = plan_of(pre)?;
    let inner = source.format().open(hub, observer, Some(&plan))?;
    preprocessed(inner, pre, &source.to_string())
}

/// Both splits of `source` whole (downloading Hub files through `hub` when not cached), made
/// into a model's input by `pre` when given, as [`open`] makes a stream. What `ood`,
/// `calibrate` and `score --split test` read for a checkpoint that carries its own
/// preprocessing (a timm model's).
pub fn load(
    source: &Source,
    hub: &Hub,
    observer: &mut dyn Observer,
    pre: Option<&Preprocess>,
) -> Result<Loaded> {
    let Some(pre) = pre else {
        return source.format().load(hub, observer, None);
    };
    let plan = plan_of(pre)?;
    let loaded = source.format().load(hub, observer, Some(&plan))?;
    let name = source.to_string();
    Ok(Loaded {
        pool: prepare_items(loaded.pool, pre, &name)?,
        test: loaded
            .test
            .map(|t| prepare_items(t, pre, &name))
            .transpose()?,
    })
}

/// Parses the data source named `name` (a folder, a file or `hf:OWNER/NAME`) and [`load`]s it;
/// errors say which source.
pub fn load_named(
    name: &str,
    pre: Option<&Preprocess>,
    hub: &Hub,
    observer: &mut dyn Observer,
) -> Result<(Source, Loaded)> {
    let source = Source::parse(name).context_with(|| format!("data source {name}"))?;
    let loaded =
        load(&source, hub, observer, pre).context_with(|| format!("loading the data {name}"))?;
    Ok((source, loaded))
}

/// The train and test splits of the source named `name` ([`load_named`]).
pub fn load_splits(
    name: &str,
    pre: Option<&Preprocess>,
    hub: &Hub,
    observer: &mut dyn Observer,
) -> Result<Splits> {
    let (source, loaded) = load_named(name, pre, hub, observer)?;
    loaded
        .splits(&source)
        .context_with(|| format!("loading the data {name}"))
}

/// Every pool item's label and the class names, as [`load`] gives them, without decoding an
/// item: the IDX label files, an image folder's listing (`train/`'s for a split folder), the
/// label column of Parquet files and Hub shards, a safetensors file's labels tensor read in
/// blocks, an embedding file's labels. What a simulated run over a streamed pool takes its
/// oracle's answers from. A CSV pool keeps its labels in the rows beside its values and is
/// refused (read it whole).
pub fn pool_labels(source: &Source, hub: &Hub, observer: &mut dyn Observer) -> Result<PoolLabels> {
    source.format().pool_labels(hub, observer)
}

/// The test split of `source` alone, with its pool listed or its labels read but no pool item
/// decoded (what a session over a streamed pool evaluates on): the IDX test files, a split
/// folder's `test/`, a Hub data set's test shards; `None` for sources without one. The items,
/// labels and classes are [`load`]'s, and so are the checks on the test split.
pub fn load_test(source: &Source, hub: &Hub, observer: &mut dyn Observer) -> Result<Option<Items>> {
    source.format().load_test(hub, observer)
}

/// An image folder's class names and the labels its class subfolders give, `(id, class
/// name)`, from its listing alone (no image decoded): the classes and seed labels of a session
/// started on the folder without reading it into memory, equal to [`Items::given_labels`] of
/// the loaded folder. `None` for other sources.
pub fn listed_labels(source: &Source) -> Result<Option<Listed>> {
    source.format().listed_labels()
}

/// What a person is shown of each pool item of `source` when its values are not an image: an
/// embedding file's metadata `display` (texts, or with `display_kind` `image` image paths),
/// checked against its items; `None` for sources without one.
pub fn displays(source: &Source) -> Result<Option<crate::data::display::Displays>> {
    source.format().displays()
}

/// [`displays`], with an embedding file's images taken below `trusted` (a folder the person
/// named) instead of the folder its metadata `display_root` names.
pub fn displays_below(
    source: &Source,
    trusted: Option<&std::path::Path>,
) -> Result<Option<crate::data::display::Displays>> {
    match (source, trusted) {
        (Source::Safetensors(p), Some(t)) => self::safetensors::displays_of(p, Some(t)),
        _ => displays(source),
    }
}
