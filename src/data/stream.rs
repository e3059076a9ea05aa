//! The item-stream contract every source kind implements: its pool read in chunks
//! ([`ItemStream`], [`Chunk`]), what reading it whole gives ([`Items`], both splits in
//! [`Loaded`]), and what a run over a streamed pool reads besides ([`PoolLabels`], [`Listed`]).
//!
//! An [`ItemStream`] hands out consecutive chunks of a pool's items (ids and features, in the
//! pool's order); a scorer keeps only what it needs from each. Peak memory is then set by the
//! chunk size, not the pool. Each source kind's file under `data/source/` implements the
//! crate's `Format` trait for both ways of reading, sharing its per-item code, so a streamed
//! item equals the loaded one bit for bit; every check the whole read makes is made (those that
//! need every item, such as the class rule of labels, once the last chunk was read).

use crate::data::dataset::{Dataset, Splits};
use crate::data::plan::ImagePlan;
use crate::error::{DataProblem, Error, Result};
use crate::hub::Hub;
use crate::observe::Observer;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Items held at a time from a pool that can be streamed, when the caller does not
/// say: peak memory follows this, not the pool.
pub const DEFAULT_CHUNK: usize = 16384;
/// Consecutive items of a pool.
#[derive(Debug, Clone, PartialEq)]
pub struct Chunk {
    /// Position of the first item in the pool.
    pub start: usize,
    /// Ids `(k,)`.
    pub ids: Vec<String>,
    /// Features `(k, *item_shape)`, as the in-memory loader gives them.
    pub x: Vec<f32>,
}

/// A pool read chunk by chunk (on any thread: see [`ReadAhead`]).
pub trait ItemStream: Send {
    /// Items in the pool.
    fn len(&self) -> usize;
    /// True when the pool has no items.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Shape of one item.
    fn item_shape(&self) -> &[usize];
    /// The next at most `max` items, `None` once all were read (and the checks that need
    /// every item passed).
    fn next_chunk(&mut self, max: usize) -> Result<Option<Chunk>>;
}

/// A stream's chunks of `max` items read one ahead on a background thread: while the caller
/// works on one chunk, the next is read (decoded, resized, normalised as the stream does).
/// At most two chunks are held at once, the caller's and the one read ahead; chunks come in
/// the stream's order, so what the caller computes does not change.
pub struct ReadAhead {
    /// Taken on drop, which stops the reader at its next chunk.
    rx: Option<std::sync::mpsc::Receiver<Result<Option<Chunk>>>>,
    worker: Option<std::thread::JoinHandle<()>>,
}

impl ReadAhead {
    /// Starts reading `inner` in chunks of `max` items.
    pub fn new(mut inner: Box<dyn ItemStream>, max: usize) -> Result<ReadAhead> {
        // A rendezvous channel: the reader holds one finished chunk until it is taken.
        let (tx, rx) = std::sync::mpsc::sync_channel(0);
        let worker = std::thread::Builder::new()
            .name("alkit-read-ahead".into())
            .spawn(move || loop {
                let got = inner.next_chunk(max);
                let more = matches!(got, Ok(Some(_)));
                // A closed channel: the caller stopped (an error, an interrupt).
                if tx.send(got).is_err() || !more {
                    break;
                }
            })
            .map_err(|e| Error::io("(a thread reading ahead)", e))?;
        Ok(ReadAhead {
            rx: Some(rx),
            worker: Some(worker),
        })
    }

    /// The next chunk, `None` once all were read.
    pub fn next_chunk(&mut self) -> Result<Option<Chunk>> {
        let Some(rx) = &self.rx else {
            return Ok(None);
        };
        match rx.recv() {
            Ok(got) => got,
            Err(_) => match self.worker.take().map(std::thread::JoinHandle::join) {
                Some(Err(_)) => Err(Error::data(
                    PathBuf::from("(a thread reading ahead)"),
                    DataProblem::Other("stopped by a panic while reading the pool".into()),
                )),
                _ => Ok(None),
            },
        }
    }
}

impl Drop for ReadAhead {
    /// Stops the reader and waits for it (at most the chunk it is reading), so that no read
    /// outlives the job that started it.
    fn drop(&mut self) {
        self.rx.take();
        if let Some(w) = self.worker.take() {
            let _ = w.join();
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

    /// A data set's items, ids their positions.
    pub(crate) fn from_dataset(ds: &Dataset, classes: Vec<String>) -> Items {
        Items {
            ids: (0..ds.len()).map(|i| i.to_string()).collect(),
            x: ds.features().to_vec(),
            item_shape: ds.item_shape().to_vec(),
            labels: ds.labels().iter().map(|&l| Some(l)).collect(),
            classes,
        }
    }

    /// `(id, class name)` of every item the source labels: a session's seed labels when
    /// the source's labels were given by a person ([`Source::labels_are_given`](crate::data::Source::labels_are_given)).
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
    pub fn splits(&self, source: &impl std::fmt::Display) -> Result<Splits> {
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

/// A pool's labels and class names (see [`pool_labels`](crate::data::source::pool_labels)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolLabels {
    /// Each item's label `(n,)`, `None` where it has none.
    pub labels: Vec<Option<u32>>,
    /// The class names; a label indexes them.
    pub classes: Vec<String>,
}

/// What an image folder's listing says about its labels (see [`listed_labels`](crate::data::source::listed_labels)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The class names (subfolders), sorted.
    pub classes: Vec<String>,
    /// `(id, class name)` of every item in a class subfolder.
    pub given: Vec<(String, String)>,
}

/// Items already in memory, as a stream (to put a loaded split through the same steps).
pub fn in_memory(items: Items) -> Box<dyn ItemStream> {
    Box::new(Memory {
        n: items.len(),
        items,
        next: 0,
    })
}

/// Every remaining item of `stream` as one chunk (`None` when none remain).
pub fn drain(stream: &mut dyn ItemStream) -> Result<Option<Chunk>> {
    let mut whole: Option<Chunk> = None;
    while let Some(c) = stream.next_chunk(usize::MAX)? {
        match whole.as_mut() {
            None => whole = Some(c),
            Some(w) => {
                w.ids.extend(c.ids);
                w.x.extend(c.x);
            }
        }
    }
    Ok(whole)
}

struct Memory {
    items: Items,
    n: usize,
    next: usize,
}

impl ItemStream for Memory {
    fn len(&self) -> usize {
        self.n
    }

    fn item_shape(&self) -> &[usize] {
        &self.items.item_shape
    }

    fn next_chunk(&mut self, max: usize) -> Result<Option<Chunk>> {
        let n = self.n;
        if self.next >= n || max == 0 {
            return Ok(None);
        }
        let (start, k) = (self.next, max.min(n - self.next));
        let d: usize = self.items.item_shape.iter().product();
        self.next += k;
        if k == n {
            // The whole pool in one chunk: handed over, not copied.
            return Ok(Some(Chunk {
                start,
                ids: std::mem::take(&mut self.items.ids),
                x: std::mem::take(&mut self.items.x),
            }));
        }
        Ok(Some(Chunk {
            start,
            ids: self.items.ids[start..start + k].to_vec(),
            x: self.items.x[start * d..(start + k) * d].to_vec(),
        }))
    }
}

/// Ids `start..start + k` as strings (sources whose ids are positions).
pub(crate) fn position_ids(start: usize, k: usize) -> Vec<String> {
    (start..start + k).map(|i| i.to_string()).collect()
}

/// A streamed pool's ids: those its file lists, or its positions, made per chunk so that a
/// file without ids costs no memory per item.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum StreamIds {
    /// Item `i`'s id is `i`.
    Positions,
    /// The file's ids, one per item.
    Listed(Vec<String>),
}

impl StreamIds {
    /// The ids of items `start..start + k`.
    pub(crate) fn range(&self, start: usize, k: usize) -> Vec<String> {
        match self {
            StreamIds::Positions => position_ids(start, k),
            StreamIds::Listed(ids) => ids[start..start + k].to_vec(),
        }
    }
}

/// What a source kind implements, in its own file under `data/source/`; the dispatcher
/// ([`crate::data::source`]) picks the kind of a [`Source`](crate::data::Source). Hub files are
/// fetched through `hub` when not cached, reported to `observer`.
pub(crate) trait Format {
    /// The source as errors and messages name it: its path, or `hf:OWNER/NAME`.
    fn name(&self) -> String;

    /// True for sources whose labels a person gave (see
    /// [`Source::labels_are_given`](crate::data::Source::labels_are_given)).
    fn labels_are_given(&self) -> bool {
        false
    }

    /// The pool (a data set's train split) read a chunk at a time; image kinds decode every
    /// image through `plan` when given instead of the plan their headers suggest.
    fn open(
        &self,
        hub: &Hub,
        observer: &mut dyn Observer,
        plan: Option<&ImagePlan>,
    ) -> Result<Box<dyn ItemStream>>;

    /// The pool and the test split, if any, whole (images through `plan` as in [`Format::open`]).
    fn load(
        &self,
        hub: &Hub,
        observer: &mut dyn Observer,
        plan: Option<&ImagePlan>,
    ) -> Result<Loaded>;

    /// Every pool item's label and the class names, as [`Format::load`] gives them, without
    /// decoding an item.
    fn pool_labels(&self, hub: &Hub, observer: &mut dyn Observer) -> Result<PoolLabels>;

    /// The test split alone, no pool item decoded; `None` for sources without one.
    fn load_test(&self, _hub: &Hub, _observer: &mut dyn Observer) -> Result<Option<Items>> {
        Ok(None)
    }

    /// What a person is shown of each pool item when its values are not an image (an
    /// embedding file's texts or image paths); `None` for kinds that have none.
    fn displays(&self) -> Result<Option<crate::data::display::Displays>> {
        Ok(None)
    }

    /// The classes and given labels of the pool's listing, when the kind has one (image
    /// folders).
    fn listed_labels(&self) -> Result<Option<Listed>> {
        Ok(None)
    }
}

/// Why a pool whose labels sit in its rows beside its values (CSV) has no labels to give
/// without reading it whole.
pub(crate) fn labels_beside_values(path: &Path) -> Error {
    Error::data(
        path,
        DataProblem::Other(
            "keeps its labels beside its values: read it whole (setting `stream` off)".into(),
        ),
    )
}
