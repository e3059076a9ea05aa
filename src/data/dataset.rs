//! In-memory datasets, per-channel normalisation, and loading a folder of IDX files.

use crate::data::idx;
use crate::error::{DataProblem, Error, Result};
use candle_core::{Device, Tensor};
use serde::{Deserialize, Serialize};
use std::hash::Hasher;
use std::path::{Path, PathBuf};

/// The most classes a source may declare: far above any real label set (ImageNet-21k has
/// 21,841) and small enough that per-class tables and class lists stay small. A larger count
/// is refused rather than allocated.
pub const MAX_CLASSES: usize = 1 << 16;

/// Where labels without a class list break the rule that they are `0, 1, ..., k-1` with none
/// skipped: `item` holds `label`, the smallest label above the first class `gap` that no item
/// has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Skipped {
    pub item: usize,
    pub label: u32,
    pub gap: u32,
}

/// The class count that labels declare when a source has no class list: one more than the
/// largest label, provided no class below it is skipped (so one stray label of 255 or 2^31 is
/// an error, not a 256-class or 2-billion-class model). Never allocates more than the
/// distinct labels.
pub(crate) fn classes_from_labels(
    labels: impl Iterator<Item = Option<u32>>,
) -> std::result::Result<usize, Skipped> {
    let mut tally = LabelTally::default();
    labels.for_each(|l| tally.add(l));
    tally.classes()
}

/// Labels seen one at a time (a pool read in chunks), for [`classes_from_labels`]'s rule:
/// each distinct label with the first item that holds it.
#[derive(Debug, Clone, Default)]
pub(crate) struct LabelTally {
    first: std::collections::BTreeMap<u32, usize>,
    items: usize,
}

impl LabelTally {
    /// Counts the next item's label.
    pub(crate) fn add(&mut self, label: Option<u32>) {
        if let Some(l) = label {
            self.first.entry(l).or_insert(self.items);
        }
        self.items += 1;
    }

    /// The class count the labels so far declare, or where they skip a class.
    pub(crate) fn classes(&self) -> std::result::Result<usize, Skipped> {
        let Some((&max, _)) = self.first.last_key_value() else {
            return Ok(0);
        };
        if self.first.len() as u64 == u64::from(max) + 1 {
            return Ok(max as usize + 1);
        }
        let gap = (0..)
            .zip(self.first.keys())
            .find(|(k, &l)| *k != l)
            .map_or(0, |(k, _)| k);
        let (&label, &item) = self
            .first
            .range(gap + 1..)
            .next()
            .expect("a label above the gap exists");
        Err(Skipped { item, label, gap })
    }
}

impl Skipped {
    /// The error for `path`, which holds the items.
    pub(crate) fn error(self, path: &Path) -> Error {
        Error::data(
            path,
            DataProblem::Other(format!(
                "label {} at item {} skips class {}, which no item has: without a class list \
                 the labels must be 0, 1, ..., k-1 with none skipped",
                self.label, self.item, self.gap
            )),
        )
    }
}

/// A labeled dataset held in memory.
#[derive(Debug, Clone, PartialEq)]
pub struct Dataset {
    /// Features `(n, *item_shape)`, row-major.
    x: Vec<f32>,
    /// Labels `(n,)`, each below `classes`.
    y: Vec<u32>,
    item_shape: Vec<usize>,
    classes: usize,
}

impl Dataset {
    /// Builds a dataset from features `(n, *item_shape)` and labels `(n,)`, validating sizes and
    /// label range.
    pub fn new(x: Vec<f32>, y: Vec<u32>, item_shape: Vec<usize>, classes: usize) -> Result<Self> {
        if classes == 0 || classes > MAX_CLASSES {
            return Err(Error::config(
                "classes",
                format!("{classes} classes; expected 1 to {MAX_CLASSES}"),
            ));
        }
        let item: usize = item_shape.iter().product();
        if item == 0 || item_shape.is_empty() {
            return Err(Error::config(
                "item_shape",
                format!("{item_shape:?} is empty"),
            ));
        }
        if x.len() != item * y.len() {
            return Err(Error::config(
                "x",
                format!(
                    "{} values for {} items of shape {item_shape:?}",
                    x.len(),
                    y.len()
                ),
            ));
        }
        if let Some((i, &l)) = y.iter().enumerate().find(|(_, &l)| l as usize >= classes) {
            return Err(Error::config(
                "y",
                format!("label {l} at item {i} is not below the class count {classes}"),
            ));
        }
        Ok(Self {
            x,
            y,
            item_shape,
            classes,
        })
    }

    /// Reads an idx3 image file and an idx1 label file of the same length. Images become
    /// `(1, h, w)` items scaled to `[0, 1]`. `classes` defaults to what the labels declare
    /// (`max label + 1`, none skipped).
    pub fn from_idx(images: &Path, labels: &Path, classes: Option<usize>) -> Result<Self> {
        let im = idx::read_images(images)?;
        let lb = idx::read_labels(labels)?;
        check_idx_split(im.n, lb.len(), images, labels)?;
        let classes = match classes {
            Some(c) => c,
            None => classes_from_labels(lb.iter().map(|&l| Some(u32::from(l))))
                .map_err(|s| s.error(labels))?,
        };
        if let Some((item, &l)) = lb.iter().enumerate().find(|(_, &l)| l as usize >= classes) {
            return Err(Error::data(
                labels,
                DataProblem::LabelOutOfRange {
                    item,
                    label: u32::from(l),
                    classes,
                },
            ));
        }
        let x = im.pixels.iter().map(|&p| f32::from(p) / 255.0).collect();
        let y = lb.iter().map(|&l| u32::from(l)).collect();
        Ok(Self {
            x,
            y,
            item_shape: vec![1, im.h, im.w],
            classes,
        })
    }

    /// Number of items.
    pub fn len(&self) -> usize {
        self.y.len()
    }

    /// True when there are no items.
    pub fn is_empty(&self) -> bool {
        self.y.is_empty()
    }

    /// Shape of one item: `(c, h, w)` for images, `(d,)` for vectors.
    pub fn item_shape(&self) -> &[usize] {
        &self.item_shape
    }

    /// Number of values in one item.
    pub fn item_len(&self) -> usize {
        self.item_shape.iter().product()
    }

    /// Number of classes.
    pub fn classes(&self) -> usize {
        self.classes
    }

    /// The same items with label `k` renamed `map[k]`, among `classes` classes (a data set's
    /// labels put in a model's class order).
    pub fn relabeled(&self, map: &[u32], classes: usize) -> Result<Dataset> {
        let y = self
            .y
            .iter()
            .map(|&l| {
                map.get(l as usize).copied().ok_or_else(|| {
                    Error::config("classes", format!("label {l} has no class to go to"))
                })
            })
            .collect::<Result<Vec<u32>>>()?;
        Dataset::new(self.x.clone(), y, self.item_shape.clone(), classes)
    }

    /// Labels `(n,)`.
    pub fn labels(&self) -> &[u32] {
        &self.y
    }

    /// Features `(n, *item_shape)`, row-major.
    pub fn features(&self) -> &[f32] {
        &self.x
    }

    /// Sets the labels of items `(index, class)` in place (a session teaching one answer
    /// does not copy the features); all are checked before any is set.
    pub fn set_labels(&mut self, labels: &[(usize, u32)]) -> Result<()> {
        if let Some(&(i, c)) = labels
            .iter()
            .find(|&&(i, c)| i >= self.y.len() || c as usize >= self.classes)
        {
            return Err(Error::config(
                "labels",
                format!(
                    "item {i} class {c}: the dataset has {} items and {} classes",
                    self.y.len(),
                    self.classes
                ),
            ));
        }
        for &(i, c) in labels {
            self.y[i] = c;
        }
        Ok(())
    }

    /// Item `i`'s features.
    pub fn item(&self, i: usize) -> &[f32] {
        let d = self.item_len();
        &self.x[i * d..(i + 1) * d]
    }

    /// Gathers items into a tensor `(b, *item_shape)` on `device`.
    pub fn batch(&self, indices: &[usize], device: &Device) -> Result<Tensor> {
        let d = self.item_len();
        let mut buf = Vec::with_capacity(indices.len() * d);
        for &i in indices {
            buf.extend_from_slice(self.item(i));
        }
        let mut shape = vec![indices.len()];
        shape.extend_from_slice(&self.item_shape);
        Ok(Tensor::from_vec(buf, shape, device)?)
    }

    /// Labels of `indices` as a `u32` tensor `(b,)` on `device`.
    pub fn batch_labels(&self, indices: &[usize], device: &Device) -> Result<Tensor> {
        let y: Vec<u32> = indices.iter().map(|&i| self.y[i]).collect();
        Ok(Tensor::from_vec(y, indices.len(), device)?)
    }

    /// The first `n` items (all when `n >= len`).
    pub fn head(&self, n: usize) -> Dataset {
        let n = n.min(self.len());
        Dataset {
            x: self.x[..n * self.item_len()].to_vec(),
            y: self.y[..n].to_vec(),
            item_shape: self.item_shape.clone(),
            classes: self.classes,
        }
    }

    /// A 64-bit FNV-1a fingerprint of features, labels and shape, to detect that a saved run
    /// is being resumed on different data.
    pub fn fingerprint(&self) -> u64 {
        let mut h = Fnv1a::default();
        for &d in &self.item_shape {
            h.write(&(d as u64).to_le_bytes());
        }
        for v in &self.x {
            h.write(&v.to_bits().to_le_bytes());
        }
        for v in &self.y {
            h.write(&v.to_le_bytes());
        }
        h.finish()
    }
}

/// The 64-bit FNV-1a hash: the one fingerprint of data sets, pools and sessions (stable across
/// platforms and releases, unlike `std`'s `DefaultHasher`, so saved fingerprints stay valid).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Self {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }
}

impl std::hash::Hasher for Fnv1a {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// [`Normalizer::fit`] item by item, for a pool read in chunks: the same sums in the same
/// order, so the same normaliser.
#[derive(Debug, Clone)]
pub struct NormalizerFit {
    sum: Vec<f64>,
    sq: Vec<f64>,
    per: usize,
    values: usize,
}

impl NormalizerFit {
    /// Nothing added yet, for items of `item_shape` (channels first).
    pub fn new(item_shape: &[usize]) -> NormalizerFit {
        let ch = item_shape.first().copied().unwrap_or(1).max(1);
        let len: usize = item_shape.iter().product();
        NormalizerFit {
            sum: vec![0.0; ch],
            sq: vec![0.0; ch],
            per: (len / ch).max(1),
            values: 0,
        }
    }

    /// Adds whole items `x` `(k, *item_shape)`.
    pub fn add(&mut self, x: &[f32]) {
        let ch = self.sum.len();
        for item in x.chunks_exact(self.per * ch) {
            for (c, block) in item.chunks_exact(self.per).enumerate() {
                for &v in block {
                    self.sum[c] += f64::from(v);
                    self.sq[c] += f64::from(v) * f64::from(v);
                }
            }
            self.values += self.per;
        }
    }

    /// The normaliser of every item added.
    pub fn finish(&self) -> Normalizer {
        let count = self.values as f64;
        let mean: Vec<f64> = self.sum.iter().map(|s| s / count).collect();
        let std = self
            .sq
            .iter()
            .zip(&mean)
            .map(|(s, m)| ((s / count - m * m).max(0.0).sqrt() as f32).max(1e-6))
            .collect();
        Normalizer {
            mean: mean.iter().map(|&m| m as f32).collect(),
            std,
        }
    }
}

/// Per-channel standardisation `(x - mean_ch) / std_ch`; the channel is an item's first axis.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Normalizer {
    /// Mean per channel.
    pub mean: Vec<f32>,
    /// Standard deviation per channel (never below `1e-6`).
    pub std: Vec<f32>,
}

impl Normalizer {
    /// Checks statistics read from a file against items of `channels` channels: one mean and
    /// one standard deviation per channel, means finite, deviations positive and finite.
    pub fn check(&self, channels: usize) -> std::result::Result<(), String> {
        if self.mean.len() != channels || self.std.len() != channels {
            return Err(format!(
                "the normaliser has {} means and {} standard deviations for {channels} channels",
                self.mean.len(),
                self.std.len(),
            ));
        }
        if let Some(s) = self.std.iter().find(|s| !(s.is_finite() && **s > 0.0)) {
            return Err(format!(
                "normaliser standard deviation {s} is not a positive number"
            ));
        }
        if let Some(m) = self.mean.iter().find(|m| !m.is_finite()) {
            return Err(format!("normaliser mean {m} is not finite"));
        }
        Ok(())
    }

    /// Fits mean and standard deviation per channel over every item of `ds` (use the training
    /// split only).
    pub fn fit(ds: &Dataset) -> Normalizer {
        let mut fit = NormalizerFit::new(&ds.item_shape);
        fit.add(&ds.x);
        fit.finish()
    }

    /// A normalised copy of `ds`. Errors when the channel count differs from the fitted one.
    pub fn apply(&self, ds: &Dataset) -> Result<Dataset> {
        let ch = ds.item_shape[0];
        self.check(ch).map_err(|m| Error::config("normalizer", m))?;
        let per = ds.item_len() / ch;
        let mut x = ds.x.clone();
        for item in x.chunks_exact_mut(ds.item_len()) {
            for (c, block) in item.chunks_exact_mut(per).enumerate() {
                let (m, s) = (self.mean[c], self.std[c]);
                for v in block {
                    *v = (*v - m) / s;
                }
            }
        }
        Ok(Dataset { x, ..ds.clone() })
    }
}

/// A train and a test split from one source.
#[derive(Debug, Clone)]
pub struct Splits {
    /// Training split (the pool in active learning).
    pub train: Dataset,
    /// Test split (evaluation only).
    pub test: Dataset,
    /// Where they were read from.
    pub source: PathBuf,
}

/// Finds `stem` or `stem.gz` in `dir`.
pub(crate) fn find(dir: &Path, stem: &str) -> Result<PathBuf> {
    for name in [format!("{stem}.gz"), stem.to_string()] {
        let p = dir.join(&name);
        if p.is_file() {
            return Ok(p);
        }
    }
    Err(Error::io(
        dir.join(format!("{stem}.gz")),
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("neither {stem}.gz nor {stem} found in this folder"),
        ),
    ))
}

/// Loads the four canonical IDX files (`train-images-idx3-ubyte`, `train-labels-idx1-ubyte`,
/// `t10k-images-idx3-ubyte`, `t10k-labels-idx1-ubyte`, each plain or `.gz`) from `dir`.
/// IDX files carry no class list, so the labels of both splits together declare the classes:
/// `0..k` with none skipped, a gap being an error naming the file and item that holds the
/// label above it (one corrupt label of 255 would otherwise train a 256-class model). Test
/// images must have the training images' size.
pub fn load_idx_dir(dir: &Path) -> Result<Splits> {
    let train_images = find(dir, "train-images-idx3-ubyte")?;
    let train_labels = find(dir, "train-labels-idx1-ubyte")?;
    let test_images = find(dir, "t10k-images-idx3-ubyte")?;
    let test_labels = find(dir, "t10k-labels-idx1-ubyte")?;
    // u8 labels: 256 bounds them; the real count is set below.
    let mut train = Dataset::from_idx(&train_images, &train_labels, Some(256))?;
    let mut test = Dataset::from_idx(&test_images, &test_labels, Some(256))?;
    let classes = idx_classes(&train.y, &train_labels, &test.y, &test_labels)?;
    train.classes = classes;
    test.classes = classes;
    if test.item_shape() != train.item_shape() {
        let (a, b) = (train.item_shape(), test.item_shape());
        return Err(Error::data(
            test_images,
            DataProblem::DimensionMismatch {
                expected: (a[1], a[2]),
                got: (b[1], b[2]),
            },
        ));
    }
    Ok(Splits {
        train,
        test,
        source: dir.to_path_buf(),
    })
}

/// Refuses an IDX split of `images` images and `labels` labels unless the counts agree and
/// there is an image; the paths name the files.
pub(crate) fn check_idx_split(
    images: usize,
    labels: usize,
    images_path: &Path,
    labels_path: &Path,
) -> Result<()> {
    if images != labels {
        return Err(Error::data(
            labels_path,
            DataProblem::CountMismatch { images, labels },
        ));
    }
    if images == 0 {
        return Err(Error::data(
            images_path,
            DataProblem::Other("holds no images".into()),
        ));
    }
    Ok(())
}

/// The class count the labels of an IDX folder's two splits declare together (see
/// [`load_idx_dir`]); a gap is reported in the label file and item that holds the label above it.
pub(crate) fn idx_classes(
    train: &[u32],
    train_path: &Path,
    test: &[u32],
    test_path: &Path,
) -> Result<usize> {
    let both = train.iter().chain(test).map(|&l| Some(l));
    classes_from_labels(both).map_err(|s| {
        if s.item < train.len() {
            s.error(train_path)
        } else {
            Skipped {
                item: s.item - train.len(),
                ..s
            }
            .error(test_path)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::Fnv1a;
    use std::hash::Hasher;

    #[test]
    fn fnv1a_matches_the_published_test_vectors() {
        // From the FNV reference (Fowler, Noll, Vo): the empty string, "a" and "foobar".
        for (input, want) in [
            ("", 0xcbf2_9ce4_8422_2325u64),
            ("a", 0xaf63_dc4c_8601_ec8c),
            ("foobar", 0x8594_4171_f739_67e8),
        ] {
            let mut h = Fnv1a::default();
            h.write(input.as_bytes());
            assert_eq!(h.finish(), want, "{input:?}");
        }
    }
}
