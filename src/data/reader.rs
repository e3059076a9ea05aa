//! The pool as an acquisition round reads it: held in memory, or read again from its source a
//! part at a time.
//!
//! A round needs two things from the pool: the labeled items, gathered into one small data set
//! to train on, and the candidates, visited a part at a time to be scored. [`PoolReader`] is
//! that contract. A [`Dataset`] in memory is one; a [`StreamedPool`] is the other, which keeps
//! only the pool's labels (four bytes an item) and re-opens its source's [`ItemStream`] for
//! every gather or visit, so peak memory is set by the part size, not the pool. Both hand the
//! same normalised values to the same calls, so a round over either picks the same items.

use crate::data::dataset::{Dataset, Fnv1a, Normalizer, NormalizerFit};
use crate::data::source::{self, Source};
use crate::data::stream::ItemStream;
use crate::error::{DataProblem, Error, Result};
use crate::hub::Hub;
use crate::observe::{Observer, Silent};
use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::Arc;

/// Reads a pool for a round: normalised features and one label per item (a session's taught
/// labels; 0 where none is known, which only labeled items' training reads). A reader is
/// shared by the runs a curve carries out at once, hence `Sync`.
pub trait PoolReader: Sync {
    /// Items in the pool.
    fn len(&self) -> usize;

    /// True when the pool has no items.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Items `indices` (any order, each at most once) as one data set, in that order.
    fn gather(&self, indices: &[usize]) -> Result<Dataset>;

    /// Visits `candidates` (ascending pool indices) `step` at a time, in order: `visit(data,
    /// rows)` where `data[rows]` are the part's items.
    fn parts(
        &self,
        candidates: &[usize],
        step: usize,
        visit: &mut dyn FnMut(&Dataset, &[usize]) -> Result<()>,
    ) -> Result<()>;

    /// A data set holding items `indices` and the rows of it that are those items, in order:
    /// the pool itself and `indices` when it is in memory, else the items gathered. Training on
    /// either trains the same model (the same items in the same order).
    fn rows(&self, indices: &[usize]) -> Result<(Cow<'_, Dataset>, Vec<usize>)> {
        Ok((
            Cow::Owned(self.gather(indices)?),
            (0..indices.len()).collect(),
        ))
    }

    /// [`Dataset::fingerprint`] of the whole pool (normalised features, labels, shape).
    fn fingerprint(&self) -> Result<u64>;
}

impl PoolReader for Dataset {
    fn len(&self) -> usize {
        Dataset::len(self)
    }

    fn gather(&self, indices: &[usize]) -> Result<Dataset> {
        let mut x = Vec::with_capacity(indices.len() * self.item_len());
        for &i in indices {
            x.extend_from_slice(self.item(i));
        }
        let y = indices.iter().map(|&i| self.labels()[i]).collect();
        Dataset::new(x, y, self.item_shape().to_vec(), self.classes())
    }

    fn parts(
        &self,
        candidates: &[usize],
        step: usize,
        visit: &mut dyn FnMut(&Dataset, &[usize]) -> Result<()>,
    ) -> Result<()> {
        for part in candidates.chunks(step.max(1)) {
            visit(self, part)?;
        }
        Ok(())
    }

    fn rows(&self, indices: &[usize]) -> Result<(Cow<'_, Dataset>, Vec<usize>)> {
        Ok((Cow::Borrowed(self), indices.to_vec()))
    }

    fn fingerprint(&self) -> Result<u64> {
        Ok(Dataset::fingerprint(self))
    }
}

/// Opens the pool's source afresh, at its first item; Hub downloads, if any, are reported to
/// the observer.
pub type Opener = Arc<dyn Fn(&mut dyn Observer) -> Result<Box<dyn ItemStream>> + Send + Sync>;

/// Opens `source`'s pool afresh whenever called (a [`StreamedPool`] reads it once per pass);
/// Hub files come from `hub`'s cache, fetched if missing (reported to the observer the call is
/// given).
pub fn opener(source: Source, hub: Hub) -> Opener {
    Arc::new(move |observer| source::open(&source, &hub, observer, None))
}

/// Items read from the source per stream call.
const READ_CHUNK: usize = 4096;

/// What one pass over a pool's source found (see [`survey`]).
pub struct Survey {
    /// Shape of one item.
    pub item_shape: Vec<usize>,
    /// Ids `(n,)`, in the source's order.
    pub ids: Vec<String>,
    /// The normaliser of every item, when asked for.
    pub normalizer: Option<Normalizer>,
    /// The item-by-item fingerprint (each item's id, a zero byte, its values' bits), when
    /// asked for.
    pub fingerprint: Option<u64>,
    /// Each item's content hash ([`content_hash`]) `(n,)`, when asked for: what names the
    /// items that changed once a fingerprint differs.
    pub item_hashes: Option<Vec<u64>>,
}

/// What [`survey`] computes beside the ids.
#[derive(Debug, Clone, Copy, Default)]
pub struct SurveyOf {
    /// Fit the normaliser.
    pub normalizer: bool,
    /// The item-by-item fingerprint.
    pub fingerprint: bool,
    /// Each item's content hash.
    pub item_hashes: bool,
}

/// Reads the pool of `open` once, collecting its ids and what `of` asks for: the normaliser
/// fitted, every item hashed into the fingerprint, each item's content hash. What a streamed
/// session or run needs before its first round.
pub fn survey(open: &Opener, observer: &mut dyn Observer, of: SurveyOf) -> Result<Survey> {
    let mut stream = open(observer)?;
    let item_shape = stream.item_shape().to_vec();
    let d: usize = item_shape.iter().product();
    let mut fitted = of.normalizer.then(|| NormalizerFit::new(&item_shape));
    let mut h = of.fingerprint.then(Fnv1a::default);
    let mut each = of.item_hashes.then(|| Vec::with_capacity(stream.len()));
    let mut ids = Vec::with_capacity(stream.len());
    while let Some(c) = stream.next_chunk(READ_CHUNK)? {
        if let Some(f) = fitted.as_mut() {
            f.add(&c.x);
        }
        for (id, x) in c.ids.iter().zip(c.x.chunks_exact(d.max(1))) {
            if let Some(h) = h.as_mut() {
                hash_item(h, id, x);
            }
            if let Some(e) = each.as_mut() {
                e.push(content_hash(x));
            }
        }
        ids.extend(c.ids);
    }
    Ok(Survey {
        item_shape,
        ids,
        normalizer: fitted.map(|f| f.finish()),
        fingerprint: h.map(|h| std::hash::Hasher::finish(&h)),
        item_hashes: each,
    })
}

/// The hash of one item's values (their bits), without its id: the same content under
/// another id hashes the same.
pub fn content_hash(x: &[f32]) -> u64 {
    use std::hash::Hasher;
    let mut h = Fnv1a::default();
    for v in x {
        h.write(&v.to_bits().to_le_bytes());
    }
    h.finish()
}

/// Adds one item to an item-by-item pool fingerprint: its id, a zero byte, its values' bits.
pub(crate) fn hash_item(h: &mut Fnv1a, id: &str, x: &[f32]) {
    use std::hash::Hasher;
    h.write(id.as_bytes());
    h.write(&[0]);
    for v in x {
        h.write(&v.to_bits().to_le_bytes());
    }
}

/// A pool's source and what it was found to hold (its ids in order, the item shape): reads
/// items back by position, as the source gives them, checking on every read that the source
/// still gives these ids in this order.
pub struct SourceReader {
    open: Opener,
    name: String,
    ids: Vec<String>,
    item_shape: Vec<usize>,
}

impl SourceReader {
    /// The items `ids` of `item_shape` read through `open`; `name` names the source in errors.
    pub fn new(
        open: Opener,
        name: impl Into<String>,
        ids: Vec<String>,
        item_shape: Vec<usize>,
    ) -> SourceReader {
        SourceReader {
            open,
            name: name.into(),
            ids,
            item_shape,
        }
    }

    /// Ids `(n,)`.
    pub fn ids(&self) -> &[String] {
        &self.ids
    }

    /// Items in the pool.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// True when the pool has no items.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Shape of one item.
    pub fn item_shape(&self) -> &[usize] {
        &self.item_shape
    }

    /// Items `indices` (any order, each at most once) as the source gives them, not
    /// normalised: `(k, *item_shape)` row-major.
    pub fn raw(&self, indices: &[usize]) -> Result<Vec<f32>> {
        let d: usize = self.item_shape.iter().product();
        let mut order: Vec<(usize, usize)> = indices.iter().copied().zip(0..).collect();
        order.sort_unstable();
        if let Some(w) = order.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(Error::config(
                "indices",
                format!("item {} asked for twice", w[0].0),
            ));
        }
        let wanted: Vec<usize> = order.iter().map(|&(i, _)| i).collect();
        let mut x = vec![0f32; indices.len() * d];
        self.each(&wanted, &mut |k, item| {
            let at = order[k].1;
            x[at * d..(at + 1) * d].copy_from_slice(item);
            Ok(())
        })?;
        Ok(x)
    }

    /// Calls `f(k, item)` for the `k`-th of `wanted` (ascending pool indices) as the stream
    /// reaches it, checking on the way that the source still is the pool it was.
    fn each(&self, wanted: &[usize], f: &mut dyn FnMut(usize, &[f32]) -> Result<()>) -> Result<()> {
        let len = self.len();
        if let Some(w) = wanted.windows(2).find(|w| w[0] >= w[1]) {
            return Err(Error::config(
                "candidates",
                format!("pool indices must ascend, got {} then {}", w[0], w[1]),
            ));
        }
        if let Some(&i) = wanted.last().filter(|&&i| i >= len) {
            return Err(Error::config(
                "candidates",
                format!("item {i} of a pool of {len}"),
            ));
        }
        if wanted.is_empty() {
            return Ok(());
        }
        let changed = |what: String| {
            Error::data(
                PathBuf::from(&self.name),
                DataProblem::Other(format!("changed since the session read it: {what}")),
            )
        };
        let mut stream = (self.open)(&mut Silent)?;
        if stream.len() != len || stream.item_shape() != self.item_shape.as_slice() {
            return Err(changed(format!(
                "{} items of {:?} now, {len} of {:?} then",
                stream.len(),
                stream.item_shape(),
                self.item_shape
            )));
        }
        let d: usize = self.item_shape.iter().product();
        let mut k = 0;
        while k < wanted.len() {
            let Some(chunk) = stream.next_chunk(READ_CHUNK)? else {
                return Err(changed("it ended early".into()));
            };
            let end = chunk.start + chunk.ids.len();
            let held = self
                .ids
                .get(chunk.start..end)
                .ok_or_else(|| changed(format!("more than {len} items")))?;
            if let Some((got, want)) = chunk.ids.iter().zip(held).find(|(a, b)| a != b) {
                return Err(changed(format!("item `{got}` where `{want}` was")));
            }
            while k < wanted.len() && wanted[k] < end {
                let at = wanted[k] - chunk.start;
                f(k, &chunk.x[at * d..(at + 1) * d])?;
                k += 1;
            }
        }
        Ok(())
    }
}

/// A pool read from its source whenever a round needs items (see the module docs): it holds
/// the labels and the normaliser, and shares its [`SourceReader`] (ids, never features).
pub struct StreamedPool {
    source: Arc<SourceReader>,
    normalizer: Normalizer,
    labels: Vec<u32>,
    classes: usize,
}

impl StreamedPool {
    /// The pool of `source` normalised by `normalizer`, all labels 0 until
    /// [`StreamedPool::set_labels`].
    pub fn new(
        source: Arc<SourceReader>,
        normalizer: Normalizer,
        classes: usize,
    ) -> Result<StreamedPool> {
        normalizer
            .check(source.item_shape.first().copied().unwrap_or(0))
            .map_err(|m| Error::config("normalizer", m))?;
        Ok(StreamedPool {
            labels: vec![0; source.len()],
            source,
            normalizer,
            classes: classes.max(1),
        })
    }

    /// The source it reads.
    pub fn source(&self) -> &Arc<SourceReader> {
        &self.source
    }

    /// Shape of one item.
    pub fn item_shape(&self) -> &[usize] {
        &self.source.item_shape
    }

    /// Sets the labels of items `(index, class)`; all are checked before any is set.
    pub fn set_labels(&mut self, labels: &[(usize, u32)]) -> Result<()> {
        let len = self.source.len();
        if let Some(&(i, c)) = labels
            .iter()
            .find(|&&(i, c)| i >= len || c as usize >= self.classes)
        {
            return Err(Error::config(
                "labels",
                format!(
                    "item {i} class {c}: the pool has {len} items and {} classes",
                    self.classes
                ),
            ));
        }
        for &(i, c) in labels {
            self.labels[i] = c;
        }
        Ok(())
    }

    /// `x` (raw items) with the labels of `indices`, normalised.
    fn dataset(&self, x: Vec<f32>, indices: &[usize]) -> Result<Dataset> {
        let y = indices.iter().map(|&i| self.labels[i]).collect();
        let raw = Dataset::new(x, y, self.source.item_shape.clone(), self.classes)?;
        self.normalizer.apply(&raw)
    }
}

impl PoolReader for StreamedPool {
    fn len(&self) -> usize {
        self.source.len()
    }

    fn fingerprint(&self) -> Result<u64> {
        use std::hash::Hasher;
        let mut h = Fnv1a::default();
        for &d in self.item_shape() {
            h.write(&(d as u64).to_le_bytes());
        }
        let all: Vec<usize> = (0..self.source.len()).collect();
        self.parts(&all, READ_CHUNK, &mut |part, _| {
            for v in part.features() {
                h.write(&v.to_bits().to_le_bytes());
            }
            Ok(())
        })?;
        for v in &self.labels {
            h.write(&v.to_le_bytes());
        }
        Ok(h.finish())
    }

    fn gather(&self, indices: &[usize]) -> Result<Dataset> {
        let x = self.source.raw(indices)?;
        self.dataset(x, indices)
    }

    fn parts(
        &self,
        candidates: &[usize],
        step: usize,
        visit: &mut dyn FnMut(&Dataset, &[usize]) -> Result<()>,
    ) -> Result<()> {
        let step = step.max(1);
        let d: usize = self.item_shape().iter().product();
        let mut x = Vec::with_capacity(step.min(candidates.len()) * d);
        let mut from = 0;
        let rows: Vec<usize> = (0..step.min(candidates.len())).collect();
        let mut flush = |x: &mut Vec<f32>, upto: usize, from: &mut usize| -> Result<()> {
            let part = &candidates[*from..upto];
            let ds = self.dataset(std::mem::take(x), part)?;
            visit(&ds, &rows[..part.len()])?;
            *from = upto;
            Ok(())
        };
        self.source.each(candidates, &mut |k, item| {
            x.extend_from_slice(item);
            if k + 1 - from == step {
                flush(&mut x, k + 1, &mut from)?;
                x.reserve(step.min(candidates.len() - from) * d);
            }
            Ok(())
        })?;
        if from < candidates.len() {
            flush(&mut x, candidates.len(), &mut from)?;
        }
        Ok(())
    }
}

/// A data set's splits for a simulated run whose pool stays with its source (`curve
/// --stream`): the training split as a [`StreamedPool`] holding every item's label (from the
/// label files or listing, [`pool_labels`](source::pool_labels)), the test split and the
/// normaliser fitted on the training split (one pass, which also collects the ids).
pub struct StreamedSplits {
    /// The training split, normalised, every label set.
    pub train: StreamedPool,
    /// The test split, normalised.
    pub test: Dataset,
    /// Fitted on the training split.
    pub normalizer: Normalizer,
    /// Number of classes.
    pub classes: usize,
}

/// Opens `source` as [`StreamedSplits`]; Hub files through `hub`. Every item of both splits
/// must be labeled, as [`Loaded::splits`](crate::data::Loaded::splits) asks.
pub fn stream_splits(
    source: &Source,
    hub: &Hub,
    observer: &mut dyn Observer,
) -> Result<StreamedSplits> {
    let name = source.to_string();
    let problem = |what: String| Error::data(PathBuf::from(&name), DataProblem::Other(what));
    let labels = source::pool_labels(source, hub, observer)?;
    let test = source::load_test(source, hub, observer)?.ok_or_else(|| {
        problem(
            "has no test split (use an IDX folder, a folder with train/ and test/ subfolders, \
             or a Hub dataset)"
                .into(),
        )
    })?;
    if let Some(i) = test.labels.iter().position(Option::is_none) {
        return Err(problem(format!("item `{}` has no label", test.ids[i])));
    }
    let open = opener(source.clone(), hub.clone());
    let found = survey(
        &open,
        observer,
        SurveyOf {
            normalizer: true,
            ..SurveyOf::default()
        },
    )?;
    let ids = found.ids;
    if ids.len() != labels.labels.len() {
        return Err(problem(format!(
            "{} items but {} labels",
            ids.len(),
            labels.labels.len()
        )));
    }
    let all = labels
        .labels
        .iter()
        .enumerate()
        .map(|(i, l)| {
            l.map(|l| (i, l))
                .ok_or_else(|| problem(format!("item `{}` has no label", ids[i])))
        })
        .collect::<Result<Vec<_>>>()?;
    let normalizer = found.normalizer.expect("asked for");
    let classes = labels.classes.len().max(1);
    let reader = SourceReader::new(open, name, ids, found.item_shape);
    let mut train = StreamedPool::new(Arc::new(reader), normalizer.clone(), classes)?;
    train.set_labels(&all)?;
    Ok(StreamedSplits {
        train,
        test: normalizer.apply(&test.dataset()?)?,
        normalizer,
        classes,
    })
}
