//! IDX folders (the MNIST layout): the four files `train-images-idx3-ubyte`,
//! `train-labels-idx1-ubyte`, `t10k-images-idx3-ubyte`, `t10k-labels-idx1-ubyte` (each plain or
//! `.gz`), a train split (the pool) and a test split; ids are positions. Read whole by
//! [`load_idx_dir`]; streamed, the train images are read front to back (through gzip when
//! compressed), after both label files (small) and the test images' header were read and
//! checked as the whole read checks them.

use crate::data::dataset::{check_idx_split, find, idx_classes, load_idx_dir, Dataset};
use crate::data::idx::{self, ImagesReader};
use crate::data::labels::digits;
use crate::data::plan::ImagePlan;
use crate::data::stream::{position_ids, Chunk, Format, ItemStream, Items, Loaded, PoolLabels};
use crate::error::{DataProblem, Error, Result};
use crate::hub::Hub;
use crate::observe::Observer;
use std::path::Path;

/// The four files of an IDX folder (each plain or `.gz`).
pub(crate) const IDX_FILES: [&str; 4] = [
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
];

/// An IDX folder.
pub(crate) struct Idx<'a>(pub(crate) &'a Path);

impl Format for Idx<'_> {
    fn name(&self) -> String {
        self.0.display().to_string()
    }

    fn open(
        &self,
        _hub: &Hub,
        _observer: &mut dyn Observer,
        _plan: Option<&ImagePlan>,
    ) -> Result<Box<dyn ItemStream>> {
        Ok(Box::new(IdxStream::open(self.0)?))
    }

    fn load(
        &self,
        _hub: &Hub,
        _observer: &mut dyn Observer,
        _plan: Option<&ImagePlan>,
    ) -> Result<Loaded> {
        let s = load_idx_dir(self.0)?;
        let classes = digits(s.train.classes());
        Ok(Loaded {
            pool: Items::from_dataset(&s.train, classes.clone()),
            test: Some(Items::from_dataset(&s.test, classes)),
        })
    }

    fn pool_labels(&self, _hub: &Hub, _observer: &mut dyn Observer) -> Result<PoolLabels> {
        let dir = self.0;
        let train_labels = find(dir, "train-labels-idx1-ubyte")?;
        let test_labels = find(dir, "t10k-labels-idx1-ubyte")?;
        let read = |p: &Path| -> Result<Vec<u32>> {
            Ok(idx::read_labels(p)?.into_iter().map(u32::from).collect())
        };
        let (train, test) = (read(&train_labels)?, read(&test_labels)?);
        let k = idx_classes(&train, &train_labels, &test, &test_labels)?;
        Ok(PoolLabels {
            labels: train.into_iter().map(Some).collect(),
            classes: digits(k),
        })
    }

    fn load_test(&self, _hub: &Hub, _observer: &mut dyn Observer) -> Result<Option<Items>> {
        let dir = self.0;
        let train_images = find(dir, "train-images-idx3-ubyte")?;
        let train_labels = find(dir, "train-labels-idx1-ubyte")?;
        let test_images = find(dir, "t10k-images-idx3-ubyte")?;
        let test_labels = find(dir, "t10k-labels-idx1-ubyte")?;
        let mut test = Dataset::from_idx(&test_images, &test_labels, Some(256))?;
        let train_y: Vec<u32> = idx::read_labels(&train_labels)?
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
        let train = ImagesReader::open(&train_images)?;
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
}

/// An IDX folder's train images.
pub(crate) struct IdxStream {
    images: ImagesReader,
    item_shape: Vec<usize>,
    next: usize,
}

impl IdxStream {
    /// Opens the four files of `dir` and checks what the whole-folder loader checks, short of
    /// the test images' pixels: labels (counts, the class rule over both splits), the train
    /// images' header (and a plain file's length), the test images' size.
    pub(crate) fn open(dir: &Path) -> Result<IdxStream> {
        let train_images = find(dir, "train-images-idx3-ubyte")?;
        let train_labels = find(dir, "train-labels-idx1-ubyte")?;
        let test_images = find(dir, "t10k-images-idx3-ubyte")?;
        let test_labels = find(dir, "t10k-labels-idx1-ubyte")?;
        let images = ImagesReader::open(&train_images)?;
        let split = |images: &ImagesReader, ipath: &Path, lpath: &Path| -> Result<Vec<u32>> {
            let labels = idx::read_labels(lpath)?;
            check_idx_split(images.n, labels.len(), ipath, lpath)?;
            Ok(labels.into_iter().map(u32::from).collect())
        };
        let train = split(&images, &train_images, &train_labels)?;
        let test_reader = ImagesReader::open(&test_images)?;
        let test = split(&test_reader, &test_images, &test_labels)?;
        idx_classes(&train, &train_labels, &test, &test_labels)?;
        if (test_reader.h, test_reader.w) != (images.h, images.w) {
            return Err(Error::data(
                test_images,
                DataProblem::DimensionMismatch {
                    expected: (images.h, images.w),
                    got: (test_reader.h, test_reader.w),
                },
            ));
        }
        Ok(IdxStream {
            item_shape: vec![1, images.h, images.w],
            images,
            next: 0,
        })
    }
}

impl ItemStream for IdxStream {
    fn len(&self) -> usize {
        self.images.n
    }

    fn item_shape(&self) -> &[usize] {
        &self.item_shape
    }

    fn next_chunk(&mut self, max: usize) -> Result<Option<Chunk>> {
        if self.next >= self.images.n || max == 0 {
            if self.next >= self.images.n {
                self.images.finish()?;
            }
            return Ok(None);
        }
        let (start, k) = (self.next, max.min(self.images.n - self.next));
        let pixels = self.images.read(k)?;
        self.next += k;
        Ok(Some(Chunk {
            start,
            ids: position_ids(start, k),
            x: pixels.iter().map(|&p| f32::from(p) / 255.0).collect(),
        }))
    }
}
