//! Item sources: where a pool (and, for benchmark data sets, a test split) comes from.
//!
//! A [`Source`] is parsed from what a user types after `--data` or `--pool`:
//!
//! | form | what it is | ids | labels it carries |
//! |---|---|---|---|
//! | a folder with `train-images-idx3-ubyte[.gz]` ... | IDX (MNIST layout), train + `t10k` test split | index | all |
//! | a folder with only `train/` and `test/` subfolders | PNG/JPEG images in `train/CLASS/` (the pool) and `test/CLASS/` (the test split) | relative path | all |
//! | any other folder | PNG/JPEG images; those in `CLASS/` subfolders are labeled | relative path | subfolder items |
//! | `FILE.safetensors` | tensor `x` `(n, ...)` f32 or u8 (u8 is scaled by 1/255), optional integer `y` `(n,)`, optional metadata `classes` (comma-separated) | index | `y` |
//! | `FILE.csv` | tabular: a header, optional `id` and `label` columns, every other column a number | `id` or row index | non-empty `label` cells |
//! | `FILE.parquet` | a Hub-style table: an image column (struct with `bytes`, or raw bytes) and an integer label column | index | all |
//! | `hf:OWNER/NAME[@REV]` | a Hub dataset: its `*train*` and `*test*` Parquet shards, or the four IDX files | index | all |
//!
//! Every item has a stable id that does not depend on the session: an index into the source's
//! fixed order, a relative path, or the CSV's own `id`. Image folders are read in sorted path
//! order. Images are scaled to `[0, 1]` and shaped `(c, h, w)`; all items of a source must agree.

use super::dataset::{find, idx_classes, load_idx_dir, Dataset, LabelTally, Splits, MAX_CLASSES};
use super::image::{decode, Image, Preprocess};
use crate::error::{contain, DataProblem, Error, Result};
use crate::hub::{Hub, HubRepo, RepoKind};
use crate::observe::Observer;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// Where items come from (see the module docs for the accepted forms).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A folder with the four MNIST-layout IDX files.
    Idx(PathBuf),
    /// A folder of PNG/JPEG images, labeled ones in one subfolder per class.
    Images(PathBuf),
    /// A safetensors file with `x` and optionally `y`.
    Safetensors(PathBuf),
    /// A CSV file of numeric features.
    Csv(PathBuf),
    /// One Parquet file with an image and a label column.
    Parquet(PathBuf),
    /// A dataset repository on the Hugging Face Hub.
    Hub(HubRepo),
}

/// The four files of an IDX folder (each plain or `.gz`).
const IDX_FILES: [&str; 4] = [
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
];

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
            let idx = IDX_FILES
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
            "csv" => Ok(Source::Csv(p)),
            "parquet" => Ok(Source::Parquet(p)),
            _ if !p.exists() => Err(Error::io(
                &p,
                std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or folder"),
            )),
            _ => Err(Error::data(
                &p,
                DataProblem::Other(
                    "unsupported source: expected a folder (IDX or images), .safetensors, .csv, \
                     .parquet or hf:OWNER/NAME"
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
        matches!(self, Source::Images(_) | Source::Csv(_))
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Hub(r) => write!(f, "{r}"),
            Source::Idx(p)
            | Source::Images(p)
            | Source::Safetensors(p)
            | Source::Csv(p)
            | Source::Parquet(p) => write!(f, "{}", p.display()),
        }
    }
}

/// Items from one source, with stable ids and the labels the source carries.
#[derive(Debug, Clone, PartialEq)]
pub struct Items {
    /// Stable id of each item `(n,)`.
    pub ids: Vec<String>,
    /// Features `(n, *item_shape)`, row-major; images in `[0, 1]`.
    pub x: Vec<f32>,
    /// Shape of one item: `(c, h, w)` for images, `(d,)` for tabular rows.
    pub item_shape: Vec<usize>,
    /// Label of each item, when the source has one `(n,)`.
    pub labels: Vec<Option<u32>>,
    /// Class names; a label is an index into this list.
    pub classes: Vec<String>,
}

impl Items {
    /// Number of items.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// True when there are no items.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The items as a [`Dataset`]; unlabeled items get label 0, so train only on indices
    /// whose label is known.
    pub fn dataset(&self) -> Result<Dataset> {
        let y = self.labels.iter().map(|l| l.unwrap_or(0)).collect();
        Dataset::new(
            self.x.clone(),
            y,
            self.item_shape.clone(),
            self.classes.len().max(1),
        )
    }

    fn from_dataset(ds: &Dataset, classes: Vec<String>) -> Items {
        Items {
            ids: (0..ds.len()).map(|i| i.to_string()).collect(),
            x: ds.features().to_vec(),
            item_shape: ds.item_shape().to_vec(),
            labels: ds.labels().iter().map(|&l| Some(l)).collect(),
            classes,
        }
    }

    /// `(id, class name)` of every item the source labels: a session's seed labels when
    /// the source's labels were given by a person ([`Source::labels_are_given`]).
    pub fn given_labels(&self) -> Vec<(String, String)> {
        self.ids
            .iter()
            .zip(&self.labels)
            .filter_map(|(id, l)| l.map(|l| (id.clone(), self.classes[l as usize].clone())))
            .collect()
    }

    /// Position of each id.
    pub fn index_of(&self) -> HashMap<&str, usize> {
        self.ids
            .iter()
            .enumerate()
            .map(|(i, id)| (id.as_str(), i))
            .collect()
    }
}

/// A loaded source: the pool, and a labeled test split when the source has one.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The pool (a data set's train split).
    pub pool: Items,
    /// The test split (IDX and Hub data sets).
    pub test: Option<Items>,
}

impl Loaded {
    /// Both splits as labeled datasets (what `curve`, `train`, `ood` need). Errors when the
    /// source has no test split or unlabeled items.
    pub fn splits(&self, source: &Source) -> Result<Splits> {
        let problem = |what: &str| {
            Error::data(
                PathBuf::from(source.to_string()),
                DataProblem::Other(what.into()),
            )
        };
        let test = self.test.as_ref().ok_or_else(|| {
            problem(
                "has no test split (use an IDX folder, a folder with train/ and test/ \
                     subfolders, or a Hub dataset)",
            )
        })?;
        for items in [&self.pool, test] {
            if let Some(i) = items.labels.iter().position(Option::is_none) {
                return Err(problem(&format!("item `{}` has no label", items.ids[i])));
            }
        }
        Ok(Splits {
            train: self.pool.dataset()?,
            test: test.dataset()?,
            source: PathBuf::from(source.to_string()),
        })
    }
}

/// The class names of labels whose source may declare them (`declared`: safetensors
/// metadata, a dataset card). Without a declaration the labels declare the classes, `0..k`
/// with none skipped ([`classes_from_labels`](super::dataset::classes_from_labels)); with
/// one, every label must be below its length. Either way at most [`MAX_CLASSES`]. `path` (with
/// `item` positions) names the culprit.
fn declared_classes(
    labels: &[Option<u32>],
    declared: Option<Vec<String>>,
    declared_by: &str,
    path: &Path,
) -> Result<Vec<String>> {
    let mut check = LabelCheck::new(declared, declared_by, path)?;
    for &l in labels {
        check.add(l)?;
    }
    check.finish()
}

/// [`declared_classes`] over labels seen one at a time, for pools read in chunks.
pub(crate) struct LabelCheck {
    declared: Option<Vec<String>>,
    declared_by: String,
    path: PathBuf,
    tally: LabelTally,
    item: usize,
}

impl LabelCheck {
    /// Checks the declared names (none empty, none twice).
    pub(crate) fn new(
        declared: Option<Vec<String>>,
        declared_by: &str,
        path: &Path,
    ) -> Result<LabelCheck> {
        if let Some(names) = &declared {
            let mut seen = std::collections::HashSet::new();
            if let Some(c) = names
                .iter()
                .find(|c| c.is_empty() || !seen.insert(c.as_str()))
            {
                return Err(Error::data(
                    path,
                    DataProblem::Other(format!(
                        "class name `{c}` in {declared_by} is empty or given twice"
                    )),
                ));
            }
        }
        Ok(LabelCheck {
            declared,
            declared_by: declared_by.to_string(),
            path: path.to_path_buf(),
            tally: LabelTally::default(),
            item: 0,
        })
    }

    /// The next item's label.
    pub(crate) fn add(&mut self, label: Option<u32>) -> Result<()> {
        match (&self.declared, label) {
            (Some(names), Some(l)) if l as usize >= names.len() => {
                return Err(Error::data(
                    &self.path,
                    DataProblem::Other(format!(
                        "label {l} at item {} is not one of the {} classes {} names",
                        self.item,
                        names.len(),
                        self.declared_by
                    )),
                ))
            }
            (Some(_), _) => {}
            (None, l) => self.tally.add(l),
        }
        self.item += 1;
        Ok(())
    }

    /// The class names, once every label was seen.
    pub(crate) fn finish(self) -> Result<Vec<String>> {
        let classes = match self.declared {
            Some(names) => names,
            None => {
                let k = self.tally.classes().map_err(|s| s.error(&self.path))?;
                (0..k).map(|c| c.to_string()).collect()
            }
        };
        check_class_count(classes.len(), &self.path)?;
        Ok(classes)
    }
}

/// Refuses more than [`MAX_CLASSES`] classes.
fn check_class_count(n: usize, path: &Path) -> Result<()> {
    if n > MAX_CLASSES {
        return Err(Error::data(
            path,
            DataProblem::Other(format!(
                "declares {n} classes; alkit supports at most {MAX_CLASSES}"
            )),
        ));
    }
    Ok(())
}

fn digits(n: usize) -> Vec<String> {
    (0..n).map(|c| c.to_string()).collect()
}

/// Loads `source` (downloading Hub files through `hub` when not cached).
pub fn load(source: &Source, hub: &Hub, observer: &mut dyn Observer) -> Result<Loaded> {
    load_planned(source, hub, observer, None)
}

/// Parses the data source named `name` (a folder, a file or `hf:OWNER/NAME`) and loads it, read
/// through `pre` when given (a checkpoint's preprocessing: a timm model's resize, crop and
/// channels); errors say which source.
pub fn load_named(
    name: &str,
    pre: Option<&Preprocess>,
    hub: &Hub,
    observer: &mut dyn Observer,
) -> Result<(Source, Loaded)> {
    use crate::error::ResultExt;
    let source = Source::parse(name).context_with(|| format!("data source {name}"))?;
    let loaded = match pre {
        Some(p) => super::stream::load_prepared(&source, hub, observer, p),
        None => load(&source, hub, observer),
    }
    .context_with(|| format!("loading the data {name}"))?;
    Ok((source, loaded))
}

/// The train and test splits of the source named `name` ([`load_named`]).
pub fn load_splits(
    name: &str,
    pre: Option<&Preprocess>,
    hub: &Hub,
    observer: &mut dyn Observer,
) -> Result<Splits> {
    use crate::error::ResultExt;
    let (source, loaded) = load_named(name, pre, hub, observer)?;
    loaded
        .splits(&source)
        .context_with(|| format!("loading the data {name}"))
}

/// [`load`], image sources (folders, Parquet, Hub Parquet) decoded by `plan` when given instead
/// of the plan their headers suggest (a checkpoint's preprocessing, say).
pub(crate) fn load_planned(
    source: &Source,
    hub: &Hub,
    observer: &mut dyn Observer,
    plan: Option<&ImagePlan>,
) -> Result<Loaded> {
    match source {
        Source::Idx(dir) => {
            let s = load_idx_dir(dir)?;
            let classes = digits(s.train.classes());
            Ok(Loaded {
                pool: Items::from_dataset(&s.train, classes.clone()),
                test: Some(Items::from_dataset(&s.test, classes)),
            })
        }
        Source::Images(dir) if split_folder(dir)? => load_split_folder(dir, plan),
        // Not a split folder (the arm above): listed as it is, without asking again.
        Source::Images(dir) => Ok(Loaded {
            pool: folder_items(ImageFolder::list_plain(dir)?.planned(plan))?,
            test: None,
        }),
        Source::Safetensors(p) => Ok(Loaded {
            pool: load_safetensors(p)?,
            test: None,
        }),
        Source::Csv(p) => Ok(Loaded {
            pool: load_csv(p)?,
            test: None,
        }),
        Source::Parquet(p) => Ok(Loaded {
            pool: ParquetPool::scan(vec![p.clone()], None, p, true)?
                .planned(plan)
                .items()?,
            test: None,
        }),
        Source::Hub(repo) => load_hub(repo, hub, observer, plan),
    }
}

fn is_image(p: &Path) -> bool {
    p.extension()
        .map(|e| {
            matches!(
                e.to_string_lossy().to_ascii_lowercase().as_str(),
                "png" | "jpg" | "jpeg"
            )
        })
        .unwrap_or(false)
}

/// The largest side an image folder's images keep as they are (when all share one size).
pub const MAX_SIDE_AS_IS: usize = 256;

/// The square side images are scaled to (shorter side, then the centre) when a folder's images
/// differ in size or exceed [`MAX_SIDE_AS_IS`].
pub const FIT_SIDE: usize = 64;

/// Images at the top of `dir` are unlabeled; those in `dir/CLASS/` carry the label `CLASS`.
/// Other files are ignored. Class names are the names of the (visible) subfolders, sorted,
/// empty ones included. Images of one size up to [`MAX_SIDE_AS_IS`] are read as they are;
/// otherwise each is scaled to [`FIT_SIDE`] x [`FIT_SIDE`] (see
/// [`Image::preprocess`](crate::data::image::Image::preprocess) with
/// [`Preprocess::square`]).
pub fn load_image_folder(dir: &Path) -> Result<Items> {
    folder_items(ImageFolder::list(dir)?)
}

/// Every image of a listed folder decoded.
fn folder_items(folder: ImageFolder) -> Result<Items> {
    let mut x = Vec::with_capacity(folder.len() * folder.plan.item_len());
    for i in 0..folder.len() {
        x.extend(folder.item(i)?);
    }
    Ok(Items {
        x,
        item_shape: folder.plan.item_shape(),
        ids: folder.ids,
        labels: folder.labels,
        classes: folder.classes,
    })
}

/// Whether `dir` is a split folder: no images at its top and exactly two visible subfolders,
/// `train` and `test` (the layout of Hugging Face's `imagefolder` and of many published image
/// sets), each holding one subfolder per class. Such a folder is a benchmark data set: its
/// pool is the train split, and `curve`, `train`, `ood` and `calibrate` evaluate on the test
/// split. A labeled folder whose only two classes are called `train` and `test` is read this
/// way too.
pub(crate) fn split_folder(dir: &Path) -> Result<bool> {
    let mut subfolders = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let p = e.map_err(|e| Error::io(dir, e))?.path();
        let name = p
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        if p.is_dir() && !name.starts_with('.') {
            subfolders.push(name);
        } else if p.is_file() && is_image(&p) {
            return Ok(false);
        }
    }
    subfolders.sort();
    let has = |n: &str| subfolders.iter().any(|s| s == n);
    if has("train") && has("test") && subfolders.len() > 2 {
        // Read as classes, `train`, `test` and the rest would each hold only subfolders: no
        // images at all, and an error that would not say why.
        let others: Vec<&String> = subfolders
            .iter()
            .filter(|s| *s != "train" && *s != "test")
            .collect();
        return Err(Error::data(
            dir,
            DataProblem::Other(format!(
                "holds train/ and test/ beside {others:?}: a split folder holds only train/ and \
                 test/ (move the others out, or point at a folder of class subfolders)"
            )),
        ));
    }
    Ok(subfolders == ["test", "train"])
}

/// Both splits of a [split folder](split_folder), ids `train/CLASS/FILE` and `test/CLASS/FILE`,
/// classes those of `train/` (the test split may lack some, not add any) and one item shape in
/// both, or an error naming the folder.
fn load_split_folder(dir: &Path, plan: Option<&ImagePlan>) -> Result<Loaded> {
    let read = |split: &str| folder_items(ImageFolder::list_split(dir, split)?.planned(plan));
    let pool = read("train")?;
    let test = onto_train(dir, &pool.classes, &pool.item_shape, read("test")?)?;
    Ok(Loaded {
        pool,
        test: Some(test),
    })
}

/// A split folder's `test/` items with their labels mapped by name onto `train/`'s classes
/// (a class the test split lacks is fine, one the model never trains on is not).
fn onto_train(dir: &Path, classes: &[String], shape: &[usize], mut test: Items) -> Result<Items> {
    let problem = |what: String| Error::data(dir, DataProblem::Other(what));
    let mut to_train = Vec::with_capacity(test.classes.len());
    for name in &test.classes {
        match classes.iter().position(|c| c == name) {
            Some(c) => to_train.push(c as u32),
            None => {
                return Err(problem(format!(
                    "test/{name}/ is a class train/ does not have (train/ has {classes:?})"
                )))
            }
        }
    }
    for l in test.labels.iter_mut().flatten() {
        *l = to_train[*l as usize];
    }
    test.classes = classes.to_vec();
    if shape != test.item_shape {
        return Err(problem(format!(
            "train/ images are {shape:?}, test/ images {:?}",
            test.item_shape
        )));
    }
    Ok(test)
}

/// An image folder's class names and the labels its class subfolders give, `(id, class
/// name)`, from its listing alone (no image decoded): the classes and seed labels of a session
/// started on the folder without reading it into memory, equal to [`Items::given_labels`] of
/// the loaded folder. `None` for other sources.
pub fn listed_labels(source: &Source) -> Result<Option<Listed>> {
    let Source::Images(dir) = source else {
        return Ok(None);
    };
    let folder = pool_listing(dir)?;
    let given = folder
        .ids
        .iter()
        .zip(&folder.labels)
        .filter_map(|(id, l)| l.map(|l| (id.clone(), folder.classes[l as usize].clone())))
        .collect();
    Ok(Some(Listed {
        classes: folder.classes,
        given,
    }))
}

/// The listing of an image folder's pool: `train/` of a split folder, else the folder itself.
fn pool_listing(dir: &Path) -> Result<ImageFolder> {
    if split_folder(dir)? {
        ImageFolder::list_split(dir, "train")
    } else {
        ImageFolder::list_plain(dir)
    }
}

/// What an image folder's listing says about its labels (see [`listed_labels`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The class names (subfolders), sorted.
    pub classes: Vec<String>,
    /// `(id, class name)` of every item in a class subfolder.
    pub given: Vec<(String, String)>,
}

/// Every pool item's label and the class names, as [`load`] gives them, without decoding an
/// item: the IDX label files, an image folder's listing (`train/`'s for a split folder), the
/// label column of Parquet files and Hub shards. What a simulated run over a streamed pool
/// takes its oracle's answers from. Safetensors and CSV pools keep their labels beside their
/// values and are refused (read them whole).
pub fn pool_labels(source: &Source, hub: &Hub, observer: &mut dyn Observer) -> Result<PoolLabels> {
    match source {
        Source::Idx(dir) => {
            let train_labels = find(dir, "train-labels-idx1-ubyte")?;
            let test_labels = find(dir, "t10k-labels-idx1-ubyte")?;
            let read = |p: &Path| -> Result<Vec<u32>> {
                Ok(super::idx::read_labels(p)?
                    .into_iter()
                    .map(u32::from)
                    .collect())
            };
            let (train, test) = (read(&train_labels)?, read(&test_labels)?);
            let k = idx_classes(&train, &train_labels, &test, &test_labels)?;
            Ok(PoolLabels {
                labels: train.into_iter().map(Some).collect(),
                classes: digits(k),
            })
        }
        Source::Images(dir) => {
            let folder = pool_listing(dir)?;
            Ok(PoolLabels {
                labels: folder.labels,
                classes: folder.classes,
            })
        }
        Source::Parquet(p) => {
            let pool = ParquetPool::scan(vec![p.clone()], None, p, true)?;
            Ok(PoolLabels {
                labels: pool.labels.unwrap_or_default(),
                classes: pool.classes,
            })
        }
        Source::Hub(repo) => match hub_layout(repo, hub, observer)? {
            HubLayout::Parquet { train, classes, .. } => {
                let paths = train
                    .iter()
                    .map(|f| hub.get(repo, RepoKind::Dataset, f, observer))
                    .collect::<Result<Vec<_>>>()?;
                let pool =
                    ParquetPool::scan(paths, classes, &PathBuf::from(repo.to_string()), true)?;
                Ok(PoolLabels {
                    labels: pool.labels.unwrap_or_default(),
                    classes: pool.classes,
                })
            }
            HubLayout::Idx(dir) => pool_labels(&Source::Idx(dir), hub, observer),
        },
        Source::Safetensors(p) | Source::Csv(p) => Err(Error::data(
            p,
            DataProblem::Other(
                "keeps its labels beside its values: read it whole (drop --stream)".into(),
            ),
        )),
    }
}

/// A pool's labels and class names (see [`pool_labels`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolLabels {
    /// Each item's label `(n,)`, `None` where it has none.
    pub labels: Vec<Option<u32>>,
    /// The class names; a label indexes them.
    pub classes: Vec<String>,
}

/// The test split of `source` alone, with its pool listed or its labels read but no pool item
/// decoded (what a session over a streamed pool evaluates on): the IDX test files, a split
/// folder's `test/`, a Hub data set's test shards; `None` for sources without one. The items,
/// labels and classes are [`load`]'s, and so are the checks on the test split.
pub fn load_test(source: &Source, hub: &Hub, observer: &mut dyn Observer) -> Result<Option<Items>> {
    match source {
        Source::Idx(dir) => {
            let train_images = find(dir, "train-images-idx3-ubyte")?;
            let train_labels = find(dir, "train-labels-idx1-ubyte")?;
            let test_images = find(dir, "t10k-images-idx3-ubyte")?;
            let test_labels = find(dir, "t10k-labels-idx1-ubyte")?;
            let mut test = Dataset::from_idx(&test_images, &test_labels, Some(256))?;
            let train_y: Vec<u32> = super::idx::read_labels(&train_labels)?
                .into_iter()
                .map(u32::from)
                .collect();
            let classes = idx_classes(&train_y, &train_labels, test.labels(), &test_labels)?;
            test = Dataset::new(
                test.features().to_vec(),
                test.labels().to_vec(),
                test.item_shape().to_vec(),
                classes,
            )?;
            let train = super::idx::ImagesReader::open(&train_images)?;
            if test.item_shape() != [1, train.h, train.w] {
                let b = test.item_shape();
                return Err(Error::data(
                    test_images,
                    DataProblem::DimensionMismatch {
                        expected: (train.h, train.w),
                        got: (b[1], b[2]),
                    },
                ));
            }
            Ok(Some(Items::from_dataset(&test, digits(classes))))
        }
        Source::Images(dir) if split_folder(dir)? => {
            let train = ImageFolder::list_split(dir, "train")?;
            let shape = train.plan.item_shape();
            let test = folder_items(ImageFolder::list_split(dir, "test")?.planned(None))?;
            onto_train(dir, &train.classes, &shape, test).map(Some)
        }
        Source::Hub(repo) => match hub_layout(repo, hub, observer)? {
            HubLayout::Parquet { test, classes, .. } if !test.is_empty() => {
                let paths = test
                    .iter()
                    .map(|f| hub.get(repo, RepoKind::Dataset, f, observer))
                    .collect::<Result<Vec<_>>>()?;
                let name = PathBuf::from(repo.to_string());
                ParquetPool::scan(paths, classes, &name, true)?
                    .items()
                    .map(Some)
            }
            HubLayout::Parquet { .. } => Ok(None),
            HubLayout::Idx(dir) => load_test(&Source::Idx(dir), hub, observer),
        },
        _ => Ok(None),
    }
}

/// An image folder listed and its headers read, nothing decoded: what [`load_image_folder`]
/// and a streamed read share. Ids in sorted order; the file of id `i` is `dir/ids[i]`.
pub(crate) struct ImageFolder {
    pub(crate) dir: PathBuf,
    pub(crate) ids: Vec<String>,
    pub(crate) labels: Vec<Option<u32>>,
    pub(crate) classes: Vec<String>,
    pub(crate) plan: ImagePlan,
}

impl ImageFolder {
    /// Lists `dir` (see [`load_image_folder`]) and reads every image's header: the `train/`
    /// split of a [split folder](split_folder), ids prefixed with `train/`.
    pub(crate) fn list(dir: &Path) -> Result<ImageFolder> {
        match split_folder(dir)? {
            true => Self::list_split(dir, "train"),
            false => Self::list_plain(dir),
        }
    }

    /// Decoded by `plan` when given instead of the plan of its headers.
    fn planned(mut self, plan: Option<&ImagePlan>) -> ImageFolder {
        if let Some(p) = plan {
            self.plan = *p;
        }
        self
    }

    /// The `split` subfolder of a split folder, ids relative to `dir`.
    fn list_split(dir: &Path, split: &str) -> Result<ImageFolder> {
        let mut f = Self::list_plain(&dir.join(split))?;
        if f.labels.iter().any(Option::is_none) {
            return Err(Error::data(
                dir.join(split),
                DataProblem::Other(
                    "a split of a train/test folder holds its images in class subfolders only"
                        .into(),
                ),
            ));
        }
        f.ids = f.ids.iter().map(|id| format!("{split}/{id}")).collect();
        f.dir = dir.to_path_buf();
        Ok(f)
    }

    fn list_plain(dir: &Path) -> Result<ImageFolder> {
        let read = |d: &Path| -> Result<Vec<PathBuf>> {
            let mut v: Vec<PathBuf> = std::fs::read_dir(d)
                .map_err(|e| Error::io(d, e))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .collect();
            v.sort();
            Ok(v)
        };
        let entries = read(dir)?;
        // Every visible subfolder is a class, empty ones included: a person declares the class
        // list by creating the folders.
        let classes: Vec<String> = entries
            .iter()
            .filter(|p| p.is_dir())
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .filter(|n| !n.starts_with('.'))
            .collect();
        check_class_count(classes.len(), dir)?;
        let mut files: Vec<(String, Option<u32>)> = Vec::new();
        for p in entries.iter().filter(|p| p.is_file() && is_image(p)) {
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            files.push((name.into_owned(), None));
        }
        for (c, class) in classes.iter().enumerate() {
            for p in read(&dir.join(class))?
                .into_iter()
                .filter(|p| p.is_file() && is_image(p))
            {
                let name = p.file_name().unwrap_or_default().to_string_lossy();
                files.push((format!("{class}/{name}"), Some(c as u32)));
            }
        }
        files.sort_by(|a, b| a.0.cmp(&b.0));
        if files.is_empty() {
            return Err(Error::data(
                dir,
                DataProblem::Other("holds no .png/.jpg/.jpeg images".into()),
            ));
        }
        // Headers first: a folder of photos of mixed (or large) sizes is scaled to one square
        // size as each image is decoded, so a full-size photo is never held beside the others.
        let mut plan = PlanBuilder::default();
        for (id, _) in &files {
            let p = dir.join(id);
            let bytes = std::fs::read(&p).map_err(|e| Error::io(&p, e))?;
            plan.add(crate::data::image::header(&bytes, &p)?);
        }
        let (ids, labels) = files.into_iter().unzip();
        Ok(ImageFolder {
            dir: dir.to_path_buf(),
            ids,
            labels,
            classes,
            plan: plan.plan(true),
        })
    }

    /// Images in the folder.
    pub(crate) fn len(&self) -> usize {
        self.ids.len()
    }

    /// Item `i` decoded `(c, h, w)` in `[0, 1]`.
    pub(crate) fn item(&self, i: usize) -> Result<Vec<f32>> {
        let p = self.dir.join(&self.ids[i]);
        let bytes = std::fs::read(&p).map_err(|e| Error::io(&p, e))?;
        self.plan.item(decode(&bytes, &p)?, &p)
    }
}

/// How a pool's decoded images become items of one shape, set from every image's header
/// before any is decoded (grayscale is promoted to RGB when any image is RGB; with `fit`,
/// each is preprocessed to that square first), or by a checkpoint's own [`Preprocess`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ImagePlan {
    pub(crate) fit: Option<Preprocess>,
    pub(crate) channels: usize,
    pub(crate) height: usize,
    pub(crate) width: usize,
}

/// The headers of a pool's images, seen one at a time, for its [`ImagePlan`].
#[derive(Debug, Default)]
pub(crate) struct PlanBuilder {
    first: Option<(usize, usize)>,
    mixed: bool,
    largest: usize,
    channels: usize,
}

impl PlanBuilder {
    pub(crate) fn add(&mut self, h: crate::data::image::Header) {
        let size = (h.height, h.width);
        self.mixed |= self.first.is_some_and(|f| f != size);
        self.first.get_or_insert(size);
        self.largest = self.largest.max(h.height).max(h.width);
        self.channels = self.channels.max(h.channels);
    }

    /// The plan; with `fits`, images of mixed sizes or larger than [`MAX_SIDE_AS_IS`] are
    /// scaled to [`FIT_SIDE`], else every image must have the first one's size.
    pub(crate) fn plan(&self, fits: bool) -> ImagePlan {
        let (height, width) = self.first.unwrap_or((0, 0));
        let channels = self.channels.max(1);
        if fits && (self.mixed || self.largest > MAX_SIDE_AS_IS) {
            return ImagePlan::preprocessed(Preprocess::square(FIT_SIDE, channels));
        }
        ImagePlan {
            fit: None,
            channels,
            height,
            width,
        }
    }
}

impl ImagePlan {
    /// Every image through `pre`, whatever its size.
    pub(crate) fn preprocessed(pre: Preprocess) -> ImagePlan {
        ImagePlan {
            fit: Some(pre),
            channels: pre.channels,
            height: pre.size,
            width: pre.size,
        }
    }

    /// Shape of one item `(c, h, w)`.
    pub(crate) fn item_shape(&self) -> Vec<usize> {
        vec![self.channels, self.height, self.width]
    }

    /// Values per item.
    pub(crate) fn item_len(&self) -> usize {
        self.channels * self.height * self.width
    }

    /// A decoded image as an item `(c, h, w)` in `[0, 1]`; `name` names it in errors.
    pub(crate) fn item(&self, img: Image, name: &Path) -> Result<Vec<f32>> {
        let img = match &self.fit {
            Some(pre) => img.preprocess(pre, name)?,
            None => img,
        };
        if (img.height, img.width) != (self.height, self.width) {
            return Err(Error::data(
                name,
                DataProblem::DimensionMismatch {
                    expected: (self.height, self.width),
                    got: (img.height, img.width),
                },
            ));
        }
        let img = img.with_channels(self.channels);
        if img.channels != self.channels {
            return Err(Error::data(
                name,
                DataProblem::Other(format!(
                    "decodes to {} channels where its header said at most {}",
                    img.channels, self.channels
                )),
            ));
        }
        Ok(img.pixels.iter().map(|&p| f32::from(p) / 255.0).collect())
    }
}

/// Values of a safetensors pool's `x` from its little-endian bytes (`u8s`: U8 scaled by
/// 1/255, else F32), checked finite; `first` is the flat position of `bytes`' first value in
/// the tensor, for the error (a streamed chunk starts past 0).
pub(crate) fn x_values(bytes: &[u8], u8s: bool, first: usize, path: &Path) -> Result<Vec<f32>> {
    let x: Vec<f32> = if u8s {
        bytes.iter().map(|&b| f32::from(b) / 255.0).collect()
    } else {
        bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    };
    if let Some(i) = x.iter().position(|v| !v.is_finite()) {
        return Err(Error::data(
            path,
            DataProblem::Other(format!(
                "tensor `x` holds a non-finite value at flat position {}",
                first + i
            )),
        ));
    }
    Ok(x)
}

/// The item shape of a safetensors pool's `x` of shape `(n, ...)`: `(n, h, w)` is one-channel
/// images `(1, h, w)`.
pub(crate) fn x_item_shape(shape: &[usize]) -> Vec<usize> {
    match &shape[1..] {
        [h, w] => vec![1, *h, *w],
        rest => rest.to_vec(),
    }
}

/// Reads `x` (f32 or u8, `(n, ...)`) and optional `y` (any integer type, `(n,)`).
pub fn load_safetensors(path: &Path) -> Result<Items> {
    use safetensors::{Dtype, SafeTensors};
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let bad = |m: String| Error::data(path, DataProblem::Other(m));
    let st = SafeTensors::deserialize(&bytes)
        .map_err(|e| bad(format!("not a safetensors file: {e}")))?;
    let (_, meta) = SafeTensors::read_metadata(&bytes)
        .map_err(|e| bad(format!("not a safetensors file: {e}")))?;
    let xv = st
        .tensor("x")
        .map_err(|_| bad("has no tensor `x` (items, ...)".into()))?;
    let shape = xv.shape().to_vec();
    if shape.len() < 2 || shape[0] == 0 {
        return Err(bad(format!(
            "tensor `x` has shape {shape:?}; expected (n, ...) with n > 0"
        )));
    }
    let n = shape[0];
    let u8s = match xv.dtype() {
        Dtype::F32 => false,
        Dtype::U8 => true,
        d => return Err(bad(format!("tensor `x` is {d:?}; expected F32 or U8"))),
    };
    let x = x_values(xv.data(), u8s, 0, path)?;
    let item_shape = x_item_shape(&shape);
    let labels: Vec<Option<u32>> = match st.tensor("y") {
        Err(_) => vec![None; n],
        Ok(yv) => {
            if yv.shape() != [n] {
                return Err(bad(format!(
                    "tensor `y` has shape {:?}; expected ({n},)",
                    yv.shape()
                )));
            }
            let dtype = format!("{:?}", yv.dtype());
            y_labels(yv.data(), &dtype, 0, path)?
                .into_iter()
                .map(Some)
                .collect()
        }
    };
    let listed = listed_classes(
        meta.metadata()
            .as_ref()
            .and_then(|m| m.get("classes"))
            .map(String::as_str),
    );
    let classes = declared_classes(&labels, listed, "the metadata `classes`", path)?;
    Ok(Items {
        ids: (0..n).map(|i| i.to_string()).collect(),
        x,
        item_shape,
        labels,
        classes,
    })
}

/// Labels from the little-endian bytes of a safetensors pool's `y` of dtype `dtype` (`U8`,
/// `I32`, `U32` or `I64`), each in `0..=u32::MAX`; `first` is the item of `bytes`' first value,
/// for the error (a streamed read starts past 0).
pub(crate) fn y_labels(bytes: &[u8], dtype: &str, first: usize, path: &Path) -> Result<Vec<u32>> {
    let bad = |m: String| Error::data(path, DataProblem::Other(m));
    let vals: Vec<i64> = match dtype {
        "U8" => bytes.iter().map(|&b| i64::from(b)).collect(),
        "I32" => bytes
            .chunks_exact(4)
            .map(|b| i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])))
            .collect(),
        "U32" => bytes
            .chunks_exact(4)
            .map(|b| i64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])))
            .collect(),
        "I64" => bytes
            .chunks_exact(8)
            .map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes")))
            .collect(),
        t => return Err(bad(format!("tensor `y` is {t}; expected an integer type"))),
    };
    if let Some(i) = vals
        .iter()
        .position(|&v| !(0..=i64::from(u32::MAX)).contains(&v))
    {
        return Err(bad(format!(
            "label {} of item {} is negative or too large",
            vals[i],
            first + i
        )));
    }
    Ok(vals.into_iter().map(|v| v as u32).collect())
}

/// The class names a safetensors pool's metadata lists (`classes`, comma-separated).
pub(crate) fn listed_classes(classes: Option<&str>) -> Option<Vec<String>> {
    classes
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.split(',').map(|c| c.trim().to_string()).collect())
}

/// A CSV data row: its 1-based line number and its fields.
pub(crate) type CsvRow = (usize, Vec<String>);

/// A header and data rows through the `csv` crate: RFC 4180 quoting (a quoted comma or line
/// break stays in its field), a UTF-8 byte-order mark skipped, fields trimmed, blank lines
/// skipped; a row whose field count differs from the header's is an error naming its line.
pub(crate) fn read_csv(path: &Path) -> Result<(Vec<String>, Vec<CsvRow>)> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    read_csv_from(path, &bytes)
}

/// [`read_csv`] over bytes in memory (`path` names them in errors).
pub(crate) fn read_csv_from(path: &Path, bytes: &[u8]) -> Result<(Vec<String>, Vec<CsvRow>)> {
    let mut rd = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(bytes);
    let bad = |line: u64, problem: String| Error::Row {
        path: path.to_path_buf(),
        row: line as usize,
        problem,
    };
    // The crate positions a record where the previous one ended, before any blank lines it
    // skipped: step over those line breaks so that errors name the record's own line.
    let line_of = |pos: &csv::Position| -> u64 {
        let start = usize::try_from(pos.byte()).unwrap_or(usize::MAX);
        let skipped = bytes
            .get(start..)
            .unwrap_or_default()
            .iter()
            .take_while(|b| matches!(b, b'\r' | b'\n'))
            .filter(|&&b| b == b'\n')
            .count();
        pos.line() + skipped as u64
    };
    let mut header: Option<Vec<String>> = None;
    let mut rows = Vec::new();
    for rec in rd.records() {
        let rec = rec.map_err(|e| {
            let line = e.position().map_or(0, line_of);
            bad(line, format!("unreadable CSV: {e}"))
        })?;
        if rec.iter().all(str::is_empty) {
            continue;
        }
        let line = rec.position().map_or(0, line_of);
        let fields: Vec<String> = rec.iter().map(str::to_string).collect();
        match &header {
            None => header = Some(fields),
            Some(h) if h.len() != fields.len() => {
                return Err(bad(
                    line,
                    format!("{} fields, the header has {}", fields.len(), h.len()),
                ))
            }
            Some(_) => rows.push((line as usize, fields)),
        }
    }
    let header = header
        .ok_or_else(|| Error::data(path, DataProblem::Other("is empty (no header)".into())))?;
    Ok((header, rows))
}

/// Item indices into a split of `n` items: one per line, or the `index` column of a CSV with
/// a header (what `alkit score` and `query` write). Errors name the line.
pub fn read_indices(path: &Path, n: usize) -> Result<Vec<usize>> {
    let (header, rows) = read_csv(path)?;
    let headerless = header.len() == 1 && header[0].parse::<usize>().is_ok();
    let col = if headerless {
        0
    } else {
        header.iter().position(|h| h == "index").ok_or_else(|| {
            Error::data(
                path,
                DataProblem::Other("the header has no `index` column".into()),
            )
        })?
    };
    let first = headerless.then(|| (1, header.clone()));
    let mut out = Vec::with_capacity(rows.len() + 1);
    for (line, fields) in first.into_iter().chain(rows) {
        let f = fields.get(col).map_or("", String::as_str);
        let i: usize = f.parse().map_err(|_| Error::Row {
            path: path.to_path_buf(),
            row: line,
            problem: format!("`{f}` is not an item index"),
        })?;
        if i >= n {
            return Err(Error::Row {
                path: path.to_path_buf(),
                row: line,
                problem: format!("index {i} is outside the split of {n} items"),
            });
        }
        out.push(i);
    }
    if out.is_empty() {
        return Err(Error::data(path, DataProblem::Other("no indices".into())));
    }
    Ok(out)
}

/// Tabular items: optional `id` and `label` columns, every other column a number.
pub fn load_csv(path: &Path) -> Result<Items> {
    let (header, rows) = read_csv(path)?;
    let layout = CsvLayout::of(&header);
    layout.check(rows.len(), path)?;
    let classes: Vec<String> = layout
        .label
        .map(|c| {
            rows.iter()
                .map(|(_, r)| r[c].clone())
                .filter(|v| !v.is_empty())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect()
        })
        .unwrap_or_default();
    check_class_count(classes.len(), path)?;
    let mut x = Vec::with_capacity(rows.len() * layout.features.len());
    let mut ids = Vec::with_capacity(rows.len());
    let mut labels = Vec::with_capacity(rows.len());
    let mut seen = HashMap::new();
    for (i, (line, r)) in rows.iter().enumerate() {
        let row_error = |problem: String| Error::Row {
            path: path.to_path_buf(),
            row: *line,
            problem,
        };
        layout.values(&header, r, &mut x).map_err(row_error)?;
        let id = layout.id(r, i).map_err(row_error)?;
        if let Some(prev) = seen.insert(id.clone(), *line) {
            return Err(row_error(format!("id `{id}` already used on line {prev}")));
        }
        ids.push(id);
        labels.push(layout.label.and_then(|c| {
            let v = &r[c];
            (!v.is_empty()).then(|| classes.iter().position(|k| k == v).expect("collected") as u32)
        }));
    }
    Ok(Items {
        ids,
        x,
        item_shape: vec![layout.features.len()],
        labels,
        classes,
    })
}

/// Which columns of a tabular pool are what.
struct CsvLayout {
    id: Option<usize>,
    label: Option<usize>,
    features: Vec<usize>,
}

impl CsvLayout {
    /// The layout of `header`.
    fn of(header: &[String]) -> CsvLayout {
        let id = header.iter().position(|h| h == "id");
        let label = header.iter().position(|h| h == "label");
        let features: Vec<usize> = (0..header.len())
            .filter(|&c| Some(c) != id && Some(c) != label)
            .collect();
        CsvLayout {
            id,
            label,
            features,
        }
    }

    /// A pool needs a feature column and a row.
    fn check(&self, rows: usize, path: &Path) -> Result<()> {
        if self.features.is_empty() || rows == 0 {
            return Err(Error::data(
                path,
                DataProblem::Other("needs at least one feature column and one row".into()),
            ));
        }
        Ok(())
    }

    /// Appends a row's features to `x`, or says which field is not a finite number.
    fn values(
        &self,
        header: &[String],
        r: &[String],
        x: &mut Vec<f32>,
    ) -> std::result::Result<(), String> {
        for &c in &self.features {
            let v: f32 = r[c]
                .parse()
                .ok()
                .filter(|v: &f32| v.is_finite())
                .ok_or_else(|| {
                    format!("column `{}`: `{}` is not a finite number", header[c], r[c])
                })?;
            x.push(v);
        }
        Ok(())
    }

    /// Row `i`'s id: its `id` field (not empty), else its position.
    fn id(&self, r: &[String], i: usize) -> std::result::Result<String, String> {
        let id = self
            .id
            .map(|c| r[c].clone())
            .unwrap_or_else(|| i.to_string());
        if id.is_empty() {
            return Err("empty id".into());
        }
        Ok(id)
    }
}

/// The records of a CSV file read front to back with [`read_csv`]'s settings, each with its
/// line (computed only when asked: the file is read again at the record's start).
struct CsvRecords {
    path: PathBuf,
    rd: csv::Reader<std::io::BufReader<std::fs::File>>,
    peek: std::fs::File,
    header_len: Option<usize>,
}

impl CsvRecords {
    fn open(path: &Path) -> Result<CsvRecords> {
        let open = || std::fs::File::open(path).map_err(|e| Error::io(path, e));
        let rd = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .trim(csv::Trim::All)
            .from_reader(std::io::BufReader::new(open()?));
        Ok(CsvRecords {
            path: path.to_path_buf(),
            rd,
            peek: open()?,
            header_len: None,
        })
    }

    /// The 1-based line of the record the crate positions at `pos` (where the previous
    /// record ended: the line breaks of blank lines skipped since are counted, as
    /// [`read_csv`] does).
    fn line_of(&mut self, pos: &csv::Position) -> usize {
        use std::io::{Read, Seek, SeekFrom};
        let mut skipped = 0u64;
        if self.peek.seek(SeekFrom::Start(pos.byte())).is_ok() {
            let mut buf = [0u8; 4096];
            'read: while let Ok(n) = self.peek.read(&mut buf) {
                if n == 0 {
                    break;
                }
                for &b in &buf[..n] {
                    match b {
                        b'\n' => skipped += 1,
                        b'\r' => {}
                        _ => break 'read,
                    }
                }
            }
        }
        (pos.line() + skipped) as usize
    }

    /// The next non-blank record with its position; the first is the header. A record whose
    /// field count differs from the header's is an error naming its line.
    fn next_record(&mut self) -> Result<Option<(csv::Position, csv::StringRecord)>> {
        let mut rec = csv::StringRecord::new();
        loop {
            let more = match self.rd.read_record(&mut rec) {
                Ok(more) => more,
                Err(e) => {
                    let line = e.position().cloned().map_or(0, |p| self.line_of(&p));
                    return Err(Error::Row {
                        path: self.path.clone(),
                        row: line,
                        problem: format!("unreadable CSV: {e}"),
                    });
                }
            };
            if !more {
                return Ok(None);
            }
            if rec.iter().all(str::is_empty) {
                continue;
            }
            let pos = rec.position().cloned().unwrap_or_else(csv::Position::new);
            match self.header_len {
                None => self.header_len = Some(rec.len()),
                Some(h) if h != rec.len() => {
                    let row = self.line_of(&pos);
                    return Err(Error::Row {
                        path: self.path.clone(),
                        row,
                        problem: format!("{} fields, the header has {h}", rec.len()),
                    });
                }
                Some(_) => {}
            }
            return Ok(Some((pos, rec)));
        }
    }
}

/// A CSV pool read a chunk of rows at a time, with [`load_csv`]'s checks: a first pass checks
/// every row (in the order [`load_csv`] reports problems) and counts them, holding the label
/// names and, with an `id` column, the ids; the second gives the values.
pub(crate) struct CsvStream {
    records: CsvRecords,
    header: Vec<String>,
    layout: CsvLayout,
    shape: Vec<usize>,
    n: usize,
    next: usize,
}

impl CsvStream {
    pub(crate) fn open(path: &Path) -> Result<CsvStream> {
        let mut rec = CsvRecords::open(path)?;
        let header: Vec<String> = match rec.next_record()? {
            Some((_, h)) => h.iter().map(str::to_string).collect(),
            None => {
                return Err(Error::data(
                    path,
                    DataProblem::Other("is empty (no header)".into()),
                ))
            }
        };
        let layout = CsvLayout::of(&header);
        let mut labels = BTreeSet::new();
        // Row problems wait until every record was read: a malformed record later in the file
        // is reported first, as the whole-file reader does.
        let mut first_problem: Option<(csv::Position, String)> = None;
        let mut seen: HashMap<String, csv::Position> = HashMap::new();
        let mut n = 0usize;
        let mut scratch = Vec::new();
        while let Some((pos, r)) = rec.next_record()? {
            let fields: Vec<String> = r.iter().map(str::to_string).collect();
            if let Some(c) = layout.label.filter(|&c| !fields[c].is_empty()) {
                if !labels.contains(&fields[c]) {
                    labels.insert(fields[c].clone());
                }
            }
            if first_problem.is_none() {
                scratch.clear();
                let problem = layout
                    .values(&header, &fields, &mut scratch)
                    .and_then(|()| layout.id(&fields, n))
                    .and_then(|id| match layout.id {
                        Some(_) => match seen.get(&id) {
                            Some(prev) => Err(format!("id `{id}` already used on line {}", {
                                let prev = prev.clone();
                                rec.line_of(&prev)
                            })),
                            None => {
                                seen.insert(id, pos.clone());
                                Ok(())
                            }
                        },
                        None => Ok(()),
                    });
                if let Err(p) = problem {
                    first_problem = Some((pos, p));
                    seen = HashMap::new();
                }
            }
            n += 1;
        }
        layout.check(n, path)?;
        check_class_count(labels.len(), path)?;
        if let Some((pos, problem)) = first_problem {
            return Err(Error::Row {
                path: path.to_path_buf(),
                row: rec.line_of(&pos),
                problem,
            });
        }
        drop(seen);
        let mut records = CsvRecords::open(path)?;
        records.next_record()?;
        Ok(CsvStream {
            records,
            shape: vec![layout.features.len()],
            header,
            layout,
            n,
            next: 0,
        })
    }
}

impl super::stream::ItemStream for CsvStream {
    fn len(&self) -> usize {
        self.n
    }

    fn item_shape(&self) -> &[usize] {
        &self.shape
    }

    fn next_chunk(&mut self, max: usize) -> Result<Option<super::stream::Chunk>> {
        if self.next >= self.n || max == 0 {
            return Ok(None);
        }
        let (start, k) = (self.next, max.min(self.n - self.next));
        let mut x = Vec::with_capacity(k * self.layout.features.len());
        let mut ids = Vec::with_capacity(k);
        let path = self.records.path.clone();
        let changed = || {
            Error::data(
                &path,
                DataProblem::Other("the file changed while it was read".into()),
            )
        };
        for i in start..start + k {
            let (_, r) = self.records.next_record()?.ok_or_else(changed)?;
            let fields: Vec<String> = r.iter().map(str::to_string).collect();
            self.layout
                .values(&self.header, &fields, &mut x)
                .map_err(|_| changed())?;
            ids.push(self.layout.id(&fields, i).map_err(|_| changed())?);
        }
        self.next += k;
        Ok(Some(super::stream::Chunk { start, ids, x }))
    }
}

/// One row of a Hub-style Parquet table.
pub(crate) struct ParquetRow {
    /// The encoded image.
    pub(crate) image: Vec<u8>,
    /// The label (a negative one, `datasets`' "no label", is `None`).
    pub(crate) label: Option<u32>,
    /// `FILE#rowR`, naming the row in errors.
    pub(crate) name: PathBuf,
}

/// The rows of one or more Hub-style Parquet files (a dataset's shards), in order, read with
/// the row API one row group at a time: the image column is the first struct with a `bytes`
/// field (what `datasets` writes for `Image()` features) or the first binary column; the label
/// column is the first integer column. Each file's footer and page headers are checked before
/// the `parquet` crate reads it; a panic of the crate's record reader on a corrupt page (found
/// by fuzzing: a definition level of 43 where the schema allows 2) is an error naming the file.
pub(crate) struct ParquetRows {
    files: Vec<PathBuf>,
    /// The file being read, and its row iterator.
    at: usize,
    rows: Option<parquet::record::reader::RowIter<'static>>,
    row: usize,
}

impl ParquetRows {
    /// Rows of `files`, in order; nothing is read yet.
    pub(crate) fn new(files: Vec<PathBuf>) -> ParquetRows {
        ParquetRows {
            files,
            at: 0,
            rows: None,
            row: 0,
        }
    }

    /// The next row, `None` after the last file's last.
    pub(crate) fn next_row(&mut self) -> Result<Option<ParquetRow>> {
        use parquet::file::reader::SerializedFileReader;
        loop {
            let Some(path) = self.files.get(self.at).cloned() else {
                return Ok(None);
            };
            let bad = |m: String| Error::data(&path, DataProblem::Other(m));
            if self.rows.is_none() {
                let rows = contain(&path, "the Parquet reader", || {
                    check_parquet_footer(&path)?;
                    let file = std::fs::File::open(&path).map_err(|e| Error::io(&path, e))?;
                    let reader = SerializedFileReader::new(file)
                        .map_err(|e| bad(format!("not Parquet: {e}")))?;
                    check_parquet_pages(
                        &path,
                        parquet::file::reader::FileReader::metadata(&reader),
                    )?;
                    Ok(reader.into_iter())
                })?;
                self.rows = Some(rows);
                self.row = 0;
            }
            let rows = self.rows.as_mut().expect("opened");
            let r = self.row;
            let next = contain(&path, "the Parquet reader", || {
                rows.next()
                    .transpose()
                    .map_err(|e| bad(format!("row {r}: {e}")))
            })?;
            let Some(row) = next else {
                if self.row == 0 {
                    return Err(bad("holds no rows".into()));
                }
                self.rows = None;
                self.at += 1;
                continue;
            };
            self.row += 1;
            return parquet_row(&row, r, &path).map(Some);
        }
    }
}

/// The image bytes and label of row `r` of `path`.
fn parquet_row(row: &parquet::record::Row, r: usize, path: &Path) -> Result<ParquetRow> {
    use parquet::record::Field;
    let bad = |m: String| Error::data(path, DataProblem::Other(m));
    let mut image = None;
    let mut label = None;
    for (_, field) in row.get_column_iter() {
        match field {
            Field::Group(g) if image.is_none() => {
                image = g.get_column_iter().find_map(|(n, f)| match f {
                    Field::Bytes(b) if n == "bytes" => Some(b.data().to_vec()),
                    _ => None,
                })
            }
            Field::Bytes(b) if image.is_none() => image = Some(b.data().to_vec()),
            Field::Long(v) if label.is_none() => label = Some(*v),
            Field::Int(v) if label.is_none() => label = Some(i64::from(*v)),
            Field::Short(v) if label.is_none() => label = Some(i64::from(*v)),
            Field::Byte(v) if label.is_none() => label = Some(i64::from(*v)),
            Field::UByte(v) if label.is_none() => label = Some(i64::from(*v)),
            _ => {}
        }
    }
    let image = image.ok_or_else(|| bad(format!("row {r} has no image bytes")))?;
    let label = match label {
        Some(v) if v < 0 => None,
        Some(v) => Some(u32::try_from(v).map_err(|_| bad(format!("row {r}: label {v}")))?),
        None => None,
    };
    Ok(ParquetRow {
        image,
        label,
        name: PathBuf::from(format!("{}#row{r}", path.display())),
    })
}

/// Hub-style Parquet files scanned once (labels checked, image headers read), nothing decoded:
/// what [`load`] and a streamed read share. Ids are positions across the files.
pub(crate) struct ParquetPool {
    pub(crate) files: Vec<PathBuf>,
    pub(crate) len: usize,
    pub(crate) classes: Vec<String>,
    pub(crate) plan: ImagePlan,
    /// Every row's label, when asked for.
    pub(crate) labels: Option<Vec<Option<u32>>>,
}

impl ParquetPool {
    /// Scans `files`: labels against the `declared` class names (a dataset card) or the rule
    /// for undeclared ones, and each image's header (every image must have the first one's
    /// size). `name` names the pool in label errors; `keep_labels` keeps every row's label.
    pub(crate) fn scan(
        files: Vec<PathBuf>,
        declared: Option<Vec<String>>,
        name: &Path,
        keep_labels: bool,
    ) -> Result<ParquetPool> {
        let mut check = LabelCheck::new(declared, "the dataset card", name)?;
        let mut plan = PlanBuilder::default();
        let mut labels = keep_labels.then(Vec::new);
        let mut rows = ParquetRows::new(files.clone());
        let mut len = 0;
        while let Some(row) = rows.next_row()? {
            check.add(row.label)?;
            plan.add(crate::data::image::header(&row.image, &row.name)?);
            if let Some(l) = labels.as_mut() {
                l.push(row.label);
            }
            len += 1;
        }
        Ok(ParquetPool {
            files,
            len,
            classes: check.finish()?,
            plan: plan.plan(false),
            labels,
        })
    }

    /// Decoded by `plan` when given instead of the plan of its headers.
    fn planned(mut self, plan: Option<&ImagePlan>) -> ParquetPool {
        if let Some(p) = plan {
            self.plan = *p;
        }
        self
    }

    /// The whole pool in memory.
    fn items(self) -> Result<Items> {
        let mut rows = ParquetRows::new(self.files);
        let mut x = Vec::with_capacity(self.len * self.plan.item_len());
        while let Some(row) = rows.next_row()? {
            x.extend(self.plan.item(decode(&row.image, &row.name)?, &row.name)?);
        }
        Ok(Items {
            ids: (0..self.len).map(|i| i.to_string()).collect(),
            x,
            item_shape: self.plan.item_shape(),
            labels: self.labels.unwrap_or_default(),
            classes: self.classes,
        })
    }
}

/// Checks a Parquet file's footer before the `parquet` crate reads it: the metadata length
/// fits the file, and the Thrift compact-protocol metadata, walked as the crate reads it (see
/// [`Ty`]), is well formed with every list and binary no longer than the bytes left to hold it
/// (each element takes at least one byte) and nesting at most 64 deep. The crate allocates a list's declared length up
/// front, so a 4-byte count of 2^31 in a small file aborted the program (found by fuzzing:
/// `memory allocation of 51913936800 bytes failed`), which no `catch_unwind` can contain.
fn check_parquet_footer(path: &Path) -> Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let bad = |m: String| Error::data(path, DataProblem::Other(format!("not Parquet: {m}")));
    let mut f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let len = f.metadata().map_err(|e| Error::io(path, e))?.len();
    if len < 12 {
        return Err(bad(format!("{len} bytes, too short for a Parquet file")));
    }
    let mut tail = [0u8; 8];
    f.seek(SeekFrom::End(-8))
        .and_then(|_| f.read_exact(&mut tail))
        .map_err(|e| Error::io(path, e))?;
    if &tail[4..] != b"PAR1" {
        return Err(bad("no PAR1 magic at the end".into()));
    }
    let meta_len = u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]));
    if meta_len + 12 > len {
        return Err(bad(format!(
            "a footer of {meta_len} bytes in a file of {len}"
        )));
    }
    let mut meta = vec![0u8; meta_len as usize];
    f.seek(SeekFrom::End(-8 - meta_len as i64))
        .and_then(|_| f.read_exact(&mut meta))
        .map_err(|e| Error::io(path, e))?;
    let mut walk = ThriftWalk {
        bytes: &meta,
        at: 0,
    };
    walk.typed(PQ_FILE_META, 0, &mut |_, _| {})
        .map_err(|m| bad(format!("malformed footer metadata ({m})")))
}

/// Checks every page header of every column chunk the way [`check_parquet_footer`] checks the
/// footer, and that the pages tile their chunk: the `parquet` crate reads page headers from a
/// stream, and a declared count of 2^31 in one made it spin on end-of-file reads for minutes
/// (found by fuzzing) before failing.
fn check_parquet_pages(path: &Path, meta: &parquet::file::metadata::ParquetMetaData) -> Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let bad = |m: String| Error::data(path, DataProblem::Other(format!("not Parquet: {m}")));
    // One column chunk in memory at a time (what the reader itself then holds), not the file.
    let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let file_len = file.metadata().map_err(|e| Error::io(path, e))?.len();
    let mut chunk = Vec::new();
    for (g, rg) in meta.row_groups().iter().enumerate() {
        for (c, col) in rg.columns().iter().enumerate() {
            let (start, len) = col.byte_range();
            if start.checked_add(len).is_none_or(|end| end > file_len) {
                return Err(bad(format!(
                    "row group {g} column {c} spans bytes {start}+{len}, past the file's {file_len}"
                )));
            }
            chunk.clear();
            file.seek(SeekFrom::Start(start))
                .and_then(|_| (&mut file).take(len).read_to_end(&mut chunk))
                .map_err(|e| Error::io(path, e))?;
            let mut at = 0usize;
            while at < chunk.len() {
                let mut w = ThriftWalk {
                    bytes: &chunk[at..],
                    at: 0,
                };
                let body = w.page_header().map_err(|m| {
                    bad(format!(
                        "row group {g} column {c}: malformed page header ({m})"
                    ))
                })?;
                at = at
                    .checked_add(w.at)
                    .and_then(|a| a.checked_add(body))
                    .filter(|&a| a <= chunk.len())
                    .ok_or_else(|| {
                        bad(format!(
                            "row group {g} column {c}: a page of {body} bytes past its chunk"
                        ))
                    })?;
            }
        }
    }
    Ok(())
}

/// The compact-protocol type a field of a Parquet Thrift struct must have, as the `parquet`
/// crate reads it: the crate reads each field it knows by its id as the type it expects,
/// whatever wire type the bytes declare, so a walk that follows wire types could see other
/// structure than the crate does. [`ThriftWalk::typed`] refuses any known field whose wire type
/// differs, and then both read the same bytes the same way.
#[derive(Clone, Copy)]
enum Ty {
    Bool,
    Byte,
    I16,
    I32,
    I64,
    Double,
    Bin,
    /// A struct the crate reads with `skip_empty_struct`: nothing but its stop byte.
    Empty,
    Struct(&'static [(i16, Ty)]),
    List(&'static Ty),
}

impl Ty {
    /// The compact-protocol wire types that carry this type.
    fn wire(self) -> &'static [u8] {
        match self {
            Ty::Bool => &[1, 2],
            Ty::Byte => &[3],
            Ty::I16 => &[4],
            Ty::I32 => &[5],
            Ty::I64 => &[6],
            Ty::Double => &[7],
            Ty::Bin => &[8],
            Ty::List(_) => &[9],
            Ty::Empty | Ty::Struct(_) => &[12],
        }
    }
}

// The footer and page structs of parquet.thrift as parquet 57 reads them (fields it skips are
// left out: they are skipped by wire type, as the crate does).
const PQ_DECIMAL: &[(i16, Ty)] = &[(1, Ty::I32), (2, Ty::I32)];
const PQ_TIME_UNIT: &[(i16, Ty)] = &[(1, Ty::Empty), (2, Ty::Empty), (3, Ty::Empty)];
const PQ_TIME: &[(i16, Ty)] = &[(1, Ty::Bool), (2, Ty::Struct(PQ_TIME_UNIT))];
const PQ_INT: &[(i16, Ty)] = &[(1, Ty::Byte), (2, Ty::Bool)];
const PQ_VARIANT: &[(i16, Ty)] = &[(1, Ty::Byte)];
const PQ_GEOMETRY: &[(i16, Ty)] = &[(1, Ty::Bin)];
const PQ_GEOGRAPHY: &[(i16, Ty)] = &[(1, Ty::Bin), (2, Ty::I32)];
const PQ_LOGICAL: &[(i16, Ty)] = &[
    (1, Ty::Empty),
    (2, Ty::Empty),
    (3, Ty::Empty),
    (4, Ty::Empty),
    (5, Ty::Struct(PQ_DECIMAL)),
    (6, Ty::Empty),
    (7, Ty::Struct(PQ_TIME)),
    (8, Ty::Struct(PQ_TIME)),
    (10, Ty::Struct(PQ_INT)),
    (11, Ty::Empty),
    (12, Ty::Empty),
    (13, Ty::Empty),
    (14, Ty::Empty),
    (15, Ty::Empty),
    (16, Ty::Struct(PQ_VARIANT)),
    (17, Ty::Struct(PQ_GEOMETRY)),
    (18, Ty::Struct(PQ_GEOGRAPHY)),
];
const PQ_SCHEMA_ELEMENT: &[(i16, Ty)] = &[
    (1, Ty::I32),
    (2, Ty::I32),
    (3, Ty::I32),
    (4, Ty::Bin),
    (5, Ty::I32),
    (6, Ty::I32),
    (7, Ty::I32),
    (8, Ty::I32),
    (9, Ty::I32),
    (10, Ty::Struct(PQ_LOGICAL)),
];
const PQ_STATISTICS: &[(i16, Ty)] = &[
    (1, Ty::Bin),
    (2, Ty::Bin),
    (3, Ty::I64),
    (4, Ty::I64),
    (5, Ty::Bin),
    (6, Ty::Bin),
    (7, Ty::Bool),
    (8, Ty::Bool),
];
const PQ_PAGE_ENCODING_STATS: &[(i16, Ty)] = &[(1, Ty::I32), (2, Ty::I32), (3, Ty::I32)];
const PQ_SIZE_STATS: &[(i16, Ty)] = &[
    (1, Ty::I64),
    (2, Ty::List(&Ty::I64)),
    (3, Ty::List(&Ty::I64)),
];
const PQ_BBOX: &[(i16, Ty)] = &[
    (1, Ty::Double),
    (2, Ty::Double),
    (3, Ty::Double),
    (4, Ty::Double),
    (5, Ty::Double),
    (6, Ty::Double),
    (7, Ty::Double),
    (8, Ty::Double),
];
const PQ_GEO_STATS: &[(i16, Ty)] = &[(1, Ty::Struct(PQ_BBOX)), (2, Ty::List(&Ty::I32))];
const PQ_COLUMN_META: &[(i16, Ty)] = &[
    (1, Ty::I32),
    (2, Ty::List(&Ty::I32)),
    (4, Ty::I32),
    (5, Ty::I64),
    (6, Ty::I64),
    (7, Ty::I64),
    (9, Ty::I64),
    (10, Ty::I64),
    (11, Ty::I64),
    (12, Ty::Struct(PQ_STATISTICS)),
    (13, Ty::List(&Ty::Struct(PQ_PAGE_ENCODING_STATS))),
    (14, Ty::I64),
    (15, Ty::I32),
    (16, Ty::Struct(PQ_SIZE_STATS)),
    (17, Ty::Struct(PQ_GEO_STATS)),
];
const PQ_COLUMN_CHUNK: &[(i16, Ty)] = &[
    (1, Ty::Bin),
    (2, Ty::I64),
    (3, Ty::Struct(PQ_COLUMN_META)),
    (4, Ty::I64),
    (5, Ty::I32),
    (6, Ty::I64),
    (7, Ty::I32),
];
const PQ_SORTING_COLUMN: &[(i16, Ty)] = &[(1, Ty::I32), (2, Ty::Bool), (3, Ty::Bool)];
const PQ_ROW_GROUP: &[(i16, Ty)] = &[
    (1, Ty::List(&Ty::Struct(PQ_COLUMN_CHUNK))),
    (2, Ty::I64),
    (3, Ty::I64),
    (4, Ty::List(&Ty::Struct(PQ_SORTING_COLUMN))),
    (5, Ty::I64),
    (7, Ty::I16),
];
const PQ_KEY_VALUE: &[(i16, Ty)] = &[(1, Ty::Bin), (2, Ty::Bin)];
const PQ_COLUMN_ORDER: &[(i16, Ty)] = &[(1, Ty::Empty)];
const PQ_FILE_META: &[(i16, Ty)] = &[
    (1, Ty::I32),
    (2, Ty::List(&Ty::Struct(PQ_SCHEMA_ELEMENT))),
    (3, Ty::I64),
    (4, Ty::List(&Ty::Struct(PQ_ROW_GROUP))),
    (5, Ty::List(&Ty::Struct(PQ_KEY_VALUE))),
    (6, Ty::Bin),
    (7, Ty::List(&Ty::Struct(PQ_COLUMN_ORDER))),
];
const PQ_DATA_PAGE: &[(i16, Ty)] = &[
    (1, Ty::I32),
    (2, Ty::I32),
    (3, Ty::I32),
    (4, Ty::I32),
    (5, Ty::Struct(PQ_STATISTICS)),
];
const PQ_DICT_PAGE: &[(i16, Ty)] = &[(1, Ty::I32), (2, Ty::I32), (3, Ty::Bool)];
const PQ_DATA_PAGE_V2: &[(i16, Ty)] = &[
    (1, Ty::I32),
    (2, Ty::I32),
    (3, Ty::I32),
    (4, Ty::I32),
    (5, Ty::I32),
    (6, Ty::I32),
    (7, Ty::Bool),
    (8, Ty::Struct(PQ_STATISTICS)),
];
const PQ_PAGE_HEADER: &[(i16, Ty)] = &[
    (1, Ty::I32),
    (2, Ty::I32),
    (3, Ty::I32),
    (4, Ty::I32),
    (5, Ty::Struct(PQ_DATA_PAGE)),
    (6, Ty::Struct(&[])),
    (7, Ty::Struct(PQ_DICT_PAGE)),
    (8, Ty::Struct(PQ_DATA_PAGE_V2)),
];

/// A walk over Thrift compact-protocol bytes that checks sizes without building anything.
struct ThriftWalk<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl ThriftWalk<'_> {
    /// Walks a `PageHeader` (typed, see [`Ty`]) and returns its `compressed_page_size`
    /// (field 3), the length of the page body that follows.
    fn page_header(&mut self) -> std::result::Result<usize, String> {
        let mut size = None;
        self.typed(PQ_PAGE_HEADER, 0, &mut |id, v| {
            if id == 3 {
                size = Some(v)
            }
        })?;
        let v = size.ok_or("no compressed_page_size")?;
        usize::try_from(v).map_err(|_| format!("page size {v}"))
    }

    /// Walks a struct of `fields` the way the `parquet` crate reads it (see [`Ty`]): a known
    /// field must carry its type's wire type and is walked as that type, an unknown one is
    /// skipped by its wire type. `top` sees the top-level integer fields `(id, value)`.
    fn typed(
        &mut self,
        fields: &[(i16, Ty)],
        depth: usize,
        top: &mut dyn FnMut(i16, i64),
    ) -> std::result::Result<(), String> {
        if depth > 64 {
            return Err("nested more than 64 deep".into());
        }
        let mut id: i16 = 0;
        loop {
            let h = self.byte()?;
            if h == 0 {
                return Ok(());
            }
            id = match h >> 4 {
                0 => {
                    let z = self.varint()?;
                    let v = ((z >> 1) as i64) ^ -((z & 1) as i64);
                    i16::try_from(v).map_err(|_| format!("field id {v}"))?
                }
                d => id.checked_add(i16::from(d)).ok_or("field id overflow")?,
            };
            let wire = h & 0x0f;
            match fields.iter().find(|f| f.0 == id) {
                None => self.value(wire, depth + 1)?,
                Some(&(_, ty)) => {
                    if !ty.wire().contains(&wire) {
                        return Err(format!(
                            "field {id} has wire type {wire}, the format says {:?}",
                            ty.wire()
                        ));
                    }
                    if let Ty::I16 | Ty::I32 | Ty::I64 = ty {
                        let z = self.varint()?;
                        top(id, ((z >> 1) as i64) ^ -((z & 1) as i64));
                    } else {
                        self.typed_value(ty, depth + 1)?;
                    }
                }
            }
        }
    }

    /// A value of type `ty` whose wire type was checked (booleans as struct fields carry no
    /// payload).
    fn typed_value(&mut self, ty: Ty, depth: usize) -> std::result::Result<(), String> {
        match ty {
            Ty::Bool => Ok(()),
            Ty::Byte => self.skip(1),
            Ty::I16 | Ty::I32 | Ty::I64 => self.varint().map(|_| ()),
            Ty::Double => self.skip(8),
            Ty::Bin => {
                let n = self.varint()?;
                self.skip(n)
            }
            Ty::Empty => match self.byte()? {
                0 => Ok(()),
                _ => Err("an empty struct has fields".into()),
            },
            Ty::Struct(fields) => self.typed(fields, depth, &mut |_, _| {}),
            Ty::List(elem) => {
                let h = self.byte()?;
                let n = match h >> 4 {
                    15 => self.varint()?,
                    n => u64::from(n),
                };
                // The crate reads an empty list's header byte 0 without an element type.
                if h != 0 && !elem.wire().contains(&(h & 0x0f)) {
                    return Err(format!(
                        "a list of wire type {}, the format says {:?}",
                        h & 0x0f,
                        elem.wire()
                    ));
                }
                self.fits(n, 1)?;
                for _ in 0..n {
                    match elem {
                        Ty::Bool => self.skip(1)?,
                        _ => self.typed_value(*elem, depth + 1)?,
                    }
                }
                Ok(())
            }
        }
    }

    fn left(&self) -> usize {
        self.bytes.len() - self.at
    }

    fn byte(&mut self) -> std::result::Result<u8, String> {
        let b = *self.bytes.get(self.at).ok_or("truncated")?;
        self.at += 1;
        Ok(b)
    }

    fn varint(&mut self) -> std::result::Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift.min(63);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("a varint longer than 10 bytes".into())
    }

    fn skip(&mut self, n: u64) -> std::result::Result<(), String> {
        if n > self.left() as u64 {
            return Err(format!("{n} bytes declared, {} left", self.left()));
        }
        self.at += n as usize;
        Ok(())
    }

    /// A container of `n` elements of at least `min` bytes each must fit what is left.
    fn fits(&self, n: u64, min: u64) -> std::result::Result<(), String> {
        if n.saturating_mul(min) > self.left() as u64 {
            return Err(format!("{n} elements declared, {} bytes left", self.left()));
        }
        Ok(())
    }

    /// Skips one value of compact type `t` as the crate skips it (field types 1 and 2 are
    /// booleans with no payload; inside a list the compact protocol gives a boolean one byte,
    /// but the crate's `skip_till_depth` reads none, so neither does this walk: it must stay
    /// where the crate is. A list of `n` such booleans is still bounded by the bytes left,
    /// which bounds the crate's loop over them; a 1.8 KB footer of nested boolean lists with
    /// counts up to 2^31 took 4 s to skip).
    fn value(&mut self, t: u8, depth: usize) -> std::result::Result<(), String> {
        if depth > 64 {
            return Err("nested more than 64 deep".into());
        }
        match t {
            1 | 2 => Ok(()),
            3 => self.skip(1),
            4..=6 => self.varint().map(|_| ()),
            7 => self.skip(8),
            8 => {
                let n = self.varint()?;
                self.skip(n)
            }
            9 | 10 => {
                let h = self.byte()?;
                let n = match h >> 4 {
                    15 => self.varint()?,
                    n => u64::from(n),
                };
                let et = h & 0x0f;
                self.fits(n, 1)?;
                if et != 1 && et != 2 {
                    for _ in 0..n {
                        self.value(et, depth + 1)?;
                    }
                }
                Ok(())
            }
            11 => {
                let n = self.varint()?;
                if n == 0 {
                    return Ok(());
                }
                let kv = self.byte()?;
                self.fits(n, 2)?;
                for _ in 0..n {
                    for et in [kv >> 4, kv & 0x0f] {
                        if et == 1 || et == 2 {
                            self.skip(1)?;
                        } else {
                            self.value(et, depth + 1)?;
                        }
                    }
                }
                Ok(())
            }
            12 => loop {
                let h = self.byte()?;
                if h == 0 {
                    return Ok(());
                }
                if h >> 4 == 0 {
                    self.varint()?;
                }
                self.value(h & 0x0f, depth + 1)?;
            },
            t => Err(format!("unknown type {t}")),
        }
    }
}

/// Class names from a dataset card (`README.md`) written by `datasets`: the lines
/// `'0': name` under `class_label:` / `names:` in the YAML front matter.
fn card_classes(readme: &str) -> Option<Vec<String>> {
    let front = readme.strip_prefix("---")?.split("\n---").next()?;
    let mut names: Vec<(usize, String)> = Vec::new();
    let mut inside = false;
    for line in front.lines() {
        let t = line.trim();
        if t == "names:" {
            inside = true;
            continue;
        }
        if inside {
            let parsed = t.split_once(':').and_then(|(k, v)| {
                let k = k.trim().trim_matches(|c| c == '\'' || c == '"');
                Some((
                    k.parse::<usize>().ok()?,
                    v.trim().trim_matches(|c| c == '\'' || c == '"').to_string(),
                ))
            });
            match parsed {
                Some(p) => names.push(p),
                None if names.is_empty() => inside = false,
                None => break,
            }
        }
    }
    names.sort();
    let ok = !names.is_empty() && names.iter().enumerate().all(|(i, (k, _))| i == *k);
    ok.then(|| names.into_iter().map(|(_, v)| v).collect())
}

/// What a Hub dataset holds: Parquet shards whose path contains `train` / `test` (the layout
/// `datasets` publishes, e.g. `ylecun/mnist`: `mnist/train-00000-of-00001.parquet`) with the
/// class names of its card, or the four IDX files anywhere in the repository (fetched, in one
/// folder of the cache).
pub(crate) enum HubLayout {
    /// Parquet shards of each split (repository paths, not fetched yet).
    Parquet {
        train: Vec<String>,
        test: Vec<String>,
        classes: Option<Vec<String>>,
    },
    /// The folder of the four IDX files.
    Idx(PathBuf),
}

/// Reads a Hub dataset's file list (and its card, or its IDX files) to find its [`HubLayout`].
pub(crate) fn hub_layout(
    repo: &HubRepo,
    hub: &Hub,
    observer: &mut dyn Observer,
) -> Result<HubLayout> {
    let files = hub.files(repo, RepoKind::Dataset)?;
    let split_of = |f: &str, split: &str| {
        let name = f.rsplit('/').next().unwrap_or(f);
        f.ends_with(".parquet") && (name.starts_with(split) || f.contains(&format!("/{split}/")))
    };
    let of = |split: &str| -> Vec<String> {
        files
            .iter()
            .filter(|f| split_of(f, split))
            .cloned()
            .collect()
    };
    let train = of("train");
    if !train.is_empty() {
        let classes = match files.iter().find(|f| *f == "README.md") {
            Some(f) => {
                let p = hub.get(repo, RepoKind::Dataset, f, observer)?;
                let text = std::fs::read_to_string(&p).map_err(|e| Error::io(&p, e))?;
                card_classes(&text)
            }
            None => None,
        };
        return Ok(HubLayout::Parquet {
            train,
            test: of("test"),
            classes,
        });
    }
    let mut dir: Option<PathBuf> = None;
    for stem in IDX_FILES {
        let f = files
            .iter()
            .find(|f| {
                let name = f.rsplit('/').next().unwrap_or(f);
                name == stem || name == format!("{stem}.gz")
            })
            .ok_or_else(|| Error::Hub {
                repo: repo.to_string(),
                cache: hub.cache_dir().to_path_buf(),
                problem: "holds neither train/test Parquet shards nor the four IDX files".into(),
            })?;
        let p = hub.get(repo, RepoKind::Dataset, f, observer)?;
        dir = p.parent().map(Path::to_path_buf);
    }
    Ok(HubLayout::Idx(dir.expect("four files")))
}

/// A Hub dataset, whole (see [`HubLayout`]).
fn load_hub(
    repo: &HubRepo,
    hub: &Hub,
    observer: &mut dyn Observer,
    plan: Option<&ImagePlan>,
) -> Result<Loaded> {
    match hub_layout(repo, hub, observer)? {
        HubLayout::Parquet {
            train,
            test,
            classes,
        } => {
            let name = PathBuf::from(repo.to_string());
            let mut read = |shards: &[String]| -> Result<Option<Items>> {
                if shards.is_empty() {
                    return Ok(None);
                }
                let paths = shards
                    .iter()
                    .map(|f| hub.get(repo, RepoKind::Dataset, f, observer))
                    .collect::<Result<Vec<_>>>()?;
                ParquetPool::scan(paths, classes.clone(), &name, true)?
                    .planned(plan)
                    .items()
                    .map(Some)
            };
            let pool = read(&train)?.expect("non-empty");
            let test = read(&test)?;
            Ok(Loaded { pool, test })
        }
        HubLayout::Idx(dir) => load(&Source::Idx(dir), hub, observer),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_reads_quotes_a_bom_and_blank_lines_and_names_bad_lines() {
        let p = Path::new("t.csv");
        // A BOM, a quoted comma, an escaped quote, a quoted line break, a blank line.
        let text = "\u{feff}id,label\n\"a,b\",1\n\n\"say \"\"hi\"\"\",2\n\"two\nlines\",3\n";
        let (h, rows) = read_csv_from(p, text.as_bytes()).unwrap();
        assert_eq!(h, vec!["id", "label"]);
        let got: Vec<(usize, Vec<&str>)> = rows
            .iter()
            .map(|(n, f)| (*n, f.iter().map(String::as_str).collect()))
            .collect();
        assert_eq!(
            got,
            vec![
                (2, vec!["a,b", "1"]),
                (4, vec!["say \"hi\"", "2"]),
                (5, vec!["two\nlines", "3"]),
            ]
        );
        let e = read_csv_from(p, "id,label\nx,1\ny,2,3\n".as_bytes()).unwrap_err();
        assert!(matches!(e, Error::Row { row: 3, .. }), "{e}");
        let e = read_csv_from(p, "id,label\n\r\n\nx,1,0\n".as_bytes()).unwrap_err();
        assert!(matches!(e, Error::Row { row: 4, .. }), "{e}");
        assert!(read_csv_from(p, "".as_bytes()).is_err());
    }

    #[test]
    fn dataset_card_class_names() {
        // Excerpt of the card `datasets` writes for Fashion-MNIST.
        let card = "---\ndataset_info:\n  features:\n  - name: image\n    dtype: image\n  - name: label\n    dtype:\n      class_label:\n        names:\n          '0': T - shirt / top\n          '1': Trouser\n          '2': Pullover\n  splits:\n  - name: train\n---\n# Fashion";
        assert_eq!(
            card_classes(card).unwrap(),
            vec!["T - shirt / top", "Trouser", "Pullover"]
        );
        assert!(card_classes("# no front matter").is_none());
    }
}
