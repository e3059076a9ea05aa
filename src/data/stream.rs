//! Pools read in chunks, for scoring pools larger than memory.
//!
//! An [`ItemStream`] hands out consecutive chunks of a pool's items (ids and features, in the
//! pool's order); a scorer keeps only what it needs from each. Peak memory is then set by the
//! chunk size, not the pool. Every source kind streams its pool (a data set's train split):
//!
//! - safetensors: positioned reads of `x` after its header was checked against the file's
//!   length (every tensor's byte range inside the data section, ranges tiling it, sizes
//!   matching shapes), so no chunk read can leave the file;
//! - IDX: the train images front to back (through gzip when compressed), after both label
//!   files (small) and the test images' header were read and checked as the whole-folder
//!   loader checks them;
//! - an image folder: listed and every header read first (the plan of sizes and channels
//!   needs them all), then decoded a chunk at a time; the ids (paths) are held, a few dozen
//!   bytes per item;
//! - Parquet and Hub Parquet shards: one pass for labels and image headers, then rows decoded
//!   a chunk at a time, the `parquet` crate reading one row group at a time;
//! - CSV: records parsed a chunk at a time; a file with an `id` column holds its ids to refuse
//!   duplicates.
//!
//! Values come from the in-memory loaders' own per-item code, so a streamed item equals the
//! loaded one bit for bit; every check the loaders make is made (those that need every item,
//! such as the class rule of labels, once the last chunk was read).

use super::dataset::{check_idx_split, find, idx_classes};
use super::idx::{self, ImagesReader};
use super::image::{Image, Preprocess};
use super::source::{
    hub_layout, HubLayout, ImageFolder, ImagePlan, LabelCheck, ParquetPool, ParquetRows, Source,
};
use crate::error::{DataProblem, Error, Result};
use crate::hub::{Hub, RepoKind};
use crate::observe::Observer;
use serde_json::Value;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// The largest safetensors header read (the format's own limit is 100 MB).
const MAX_HEADER: u64 = 100 << 20;

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

/// A pool read chunk by chunk.
pub trait ItemStream {
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

/// A streaming reader for `source`'s items (its training split); Hub files are fetched
/// through `hub` when not cached.
pub fn open(
    source: &Source,
    hub: &Hub,
    observer: &mut dyn Observer,
) -> Result<Box<dyn ItemStream>> {
    open_with(source, hub, observer, None)
}

/// Opens `source`'s pool afresh whenever called (a [`StreamedPool`](super::StreamedPool)
/// reads it once per pass); Hub files come from `hub`'s cache, fetched if missing (reported to
/// the observer the call is given).
pub fn opener(source: Source, hub: Hub) -> super::reader::Opener {
    std::sync::Arc::new(move |observer| open(&source, &hub, observer))
}

/// A streaming reader for `source`'s items (its training split) made into a model's input by
/// `pre`, a checkpoint's preprocessing. Image sources (folders, Parquet, Hub Parquet) put
/// every image through `pre` as it is decoded, whatever its size, as timm's evaluation
/// transform does for any photo. Tensor sources (IDX, safetensors, CSV) whose items already
/// have `pre`'s shape are taken as prepared; other tensor items must be 8-bit images (values
/// `k / 255`, one or three channels), which go through `pre` too; anything else is refused
/// naming the item.
pub fn open_preprocessed(
    source: &Source,
    hub: &Hub,
    observer: &mut dyn Observer,
    pre: &Preprocess,
) -> Result<Box<dyn ItemStream>> {
    pre.check()
        .map_err(|m| Error::config("preprocess", format!("the checkpoint asks for {m}")))?;
    let inner = open_with(source, hub, observer, Some(pre))?;
    preprocessed(inner, pre, &source.to_string())
}

/// `inner`'s items as `pre` prepares a tensor source's (see [`open_preprocessed`]): as they
/// are when they already have `pre`'s shape, else 8-bit images put through `pre`; `name`
/// names the source in errors.
pub fn preprocessed(
    inner: Box<dyn ItemStream>,
    pre: &Preprocess,
    name: &str,
) -> Result<Box<dyn ItemStream>> {
    if inner.item_shape() == pre.item_shape().as_slice() {
        return Ok(inner);
    }
    Ok(Box::new(Prepared::new(inner, *pre, name.to_string())?))
}

/// Both splits of `source` (as [`super::source::load`] reads them) made into a model's input
/// by `pre`, as [`open_preprocessed`] makes a stream: images decoded straight through `pre`,
/// tensor items taken as they are when they have `pre`'s shape, else put through it as 8-bit
/// images. What `ood`, `calibrate` and `score --split test` read for a checkpoint that carries
/// its own preprocessing (a timm model's).
pub fn load_prepared(
    source: &Source,
    hub: &Hub,
    observer: &mut dyn Observer,
    pre: &Preprocess,
) -> Result<super::source::Loaded> {
    pre.check()
        .map_err(|m| Error::config("preprocess", format!("the checkpoint asks for {m}")))?;
    let plan = ImagePlan::preprocessed(*pre);
    let loaded = super::source::load_planned(source, hub, observer, Some(&plan))?;
    let name = source.to_string();
    let prepare = |items: super::Items| -> Result<super::Items> {
        if items.item_shape == pre.item_shape() {
            return Ok(items);
        }
        let (labels, classes) = (items.labels.clone(), items.classes.clone());
        let mut st = preprocessed(in_memory(items), pre, &name)?;
        let item_shape = st.item_shape().to_vec();
        let whole = drain(st.as_mut())?.ok_or_else(|| {
            Error::data(
                PathBuf::from(&name),
                DataProblem::Other("holds no items".into()),
            )
        })?;
        Ok(super::Items {
            ids: whole.ids,
            x: whole.x,
            item_shape,
            labels,
            classes,
        })
    };
    Ok(super::source::Loaded {
        pool: prepare(loaded.pool)?,
        test: loaded.test.map(prepare).transpose()?,
    })
}

/// Items already in memory, as a stream (to put a loaded split through the same steps).
pub fn in_memory(items: super::Items) -> Box<dyn ItemStream> {
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
    items: super::Items,
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

fn open_with(
    source: &Source,
    hub: &Hub,
    observer: &mut dyn Observer,
    pre: Option<&Preprocess>,
) -> Result<Box<dyn ItemStream>> {
    Ok(match source {
        Source::Safetensors(p) => Box::new(SafetensorsStream::open(p)?),
        Source::Idx(dir) => Box::new(IdxStream::open(dir)?),
        Source::Images(dir) => Box::new(FolderStream::open(dir)?.with(pre)),
        Source::Parquet(p) => Box::new(ParquetStream::open(vec![p.clone()], None, p)?.with(pre)),
        Source::Csv(p) => Box::new(super::source::CsvStream::open(p)?),
        Source::Hub(repo) => match hub_layout(repo, hub, observer)? {
            HubLayout::Idx(dir) => Box::new(IdxStream::open(&dir)?),
            HubLayout::Parquet { train, classes, .. } => {
                let paths = train
                    .iter()
                    .map(|f| hub.get(repo, RepoKind::Dataset, f, observer))
                    .collect::<Result<Vec<_>>>()?;
                Box::new(
                    ParquetStream::open(paths, classes, &PathBuf::from(repo.to_string()))?
                        .with(pre),
                )
            }
        },
    })
}

/// A tensor source's 8-bit image items put through a [`Preprocess`] a chunk at a time.
struct Prepared {
    inner: Box<dyn ItemStream>,
    pre: Preprocess,
    /// The source's item shape `(c, h, w)`.
    from: [usize; 3],
    shape: Vec<usize>,
    /// The source, in errors.
    name: PathBuf,
}

impl Prepared {
    fn new(inner: Box<dyn ItemStream>, pre: Preprocess, name: String) -> Result<Prepared> {
        let name = PathBuf::from(name);
        let from = match *inner.item_shape() {
            [c @ (1 | 3), h, w] if h > 0 && w > 0 => [c, h, w],
            ref other => {
                return Err(Error::data(
                    &name,
                    DataProblem::Other(format!(
                        "items of shape {other:?} are not images of 1 or 3 channels, and the \
                         checkpoint takes {:?}",
                        pre.item_shape()
                    )),
                ))
            }
        };
        Ok(Prepared {
            shape: pre.item_shape(),
            inner,
            pre,
            from,
            name,
        })
    }
}

impl ItemStream for Prepared {
    fn len(&self) -> usize {
        self.inner.len()
    }

    fn item_shape(&self) -> &[usize] {
        &self.shape
    }

    fn next_chunk(&mut self, max: usize) -> Result<Option<Chunk>> {
        let Some(chunk) = self.inner.next_chunk(max)? else {
            return Ok(None);
        };
        let [c, h, w] = self.from;
        let mut x = Vec::with_capacity(chunk.ids.len() * self.shape.iter().product::<usize>());
        for (id, item) in chunk.ids.iter().zip(chunk.x.chunks_exact(c * h * w)) {
            let mut pixels = Vec::with_capacity(item.len());
            for &v in item {
                let p = (v * 255.0).round();
                if !((0.0..=255.0).contains(&p) && (v * 255.0 - p).abs() <= 1e-3) {
                    return Err(Error::data(
                        &self.name,
                        DataProblem::Other(format!(
                            "item `{id}` holds {v}, not an 8-bit pixel (k/255): only 8-bit \
                             images are resized; give items of shape {:?}, already prepared",
                            self.shape
                        )),
                    ));
                }
                pixels.push(p as u8);
            }
            let img = Image {
                channels: c,
                height: h,
                width: w,
                pixels,
            };
            let at = self.name.join(id);
            let img = img.preprocess(&self.pre, &at)?;
            x.extend(img.pixels.iter().map(|&p| f32::from(p) / 255.0));
        }
        Ok(Some(Chunk { x, ..chunk }))
    }
}

/// Ids `start..start + k` as strings (sources whose ids are positions).
fn position_ids(start: usize, k: usize) -> Vec<String> {
    (start..start + k).map(|i| i.to_string()).collect()
}

/// An IDX folder's train images.
pub struct IdxStream {
    images: ImagesReader,
    item_shape: Vec<usize>,
    next: usize,
}

impl IdxStream {
    /// Opens the four files of `dir` and checks what the whole-folder loader checks, short of
    /// the test images' pixels: labels (counts, the class rule over both splits), the train
    /// images' header (and a plain file's length), the test images' size.
    pub fn open(dir: &Path) -> Result<IdxStream> {
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

/// An image folder, decoded a chunk at a time.
pub struct FolderStream {
    folder: ImageFolder,
    item_shape: Vec<usize>,
    next: usize,
}

impl FolderStream {
    /// Lists `dir` and reads every image's header (see
    /// [`load_image_folder`](super::source::load_image_folder)).
    pub fn open(dir: &Path) -> Result<FolderStream> {
        let folder = ImageFolder::list(dir)?;
        Ok(FolderStream {
            item_shape: folder.plan.item_shape(),
            folder,
            next: 0,
        })
    }
}

impl FolderStream {
    /// Every image through `pre` when given (see [`open_preprocessed`]).
    fn with(mut self, pre: Option<&Preprocess>) -> FolderStream {
        if let Some(pre) = pre {
            self.folder.plan = ImagePlan::preprocessed(*pre);
            self.item_shape = self.folder.plan.item_shape();
        }
        self
    }
}

impl ItemStream for FolderStream {
    fn len(&self) -> usize {
        self.folder.len()
    }

    fn item_shape(&self) -> &[usize] {
        &self.item_shape
    }

    fn next_chunk(&mut self, max: usize) -> Result<Option<Chunk>> {
        let n = self.folder.len();
        if self.next >= n || max == 0 {
            return Ok(None);
        }
        let (start, k) = (self.next, max.min(n - self.next));
        let mut x = Vec::with_capacity(k * self.folder.plan.item_len());
        for i in start..start + k {
            x.extend(self.folder.item(i)?);
        }
        self.next += k;
        Ok(Some(Chunk {
            start,
            ids: self.folder.ids[start..start + k].to_vec(),
            x,
        }))
    }
}

/// Hub-style Parquet files (one file, or a Hub dataset's train shards), decoded a chunk at a
/// time.
pub struct ParquetStream {
    pool: ParquetPool,
    rows: ParquetRows,
    item_shape: Vec<usize>,
    next: usize,
}

impl ParquetStream {
    /// Scans `files` once (labels against the `declared` class names, image headers); `name`
    /// names the pool in label errors.
    pub fn open(
        files: Vec<PathBuf>,
        declared: Option<Vec<String>>,
        name: &Path,
    ) -> Result<ParquetStream> {
        let pool = ParquetPool::scan(files, declared, name, false)?;
        Ok(ParquetStream {
            rows: ParquetRows::new(pool.files.clone()),
            item_shape: pool.plan.item_shape(),
            pool,
            next: 0,
        })
    }
}

impl ParquetStream {
    /// Every image through `pre` when given (see [`open_preprocessed`]).
    fn with(mut self, pre: Option<&Preprocess>) -> ParquetStream {
        if let Some(pre) = pre {
            self.pool.plan = ImagePlan::preprocessed(*pre);
            self.item_shape = self.pool.plan.item_shape();
        }
        self
    }
}

impl ItemStream for ParquetStream {
    fn len(&self) -> usize {
        self.pool.len
    }

    fn item_shape(&self) -> &[usize] {
        &self.item_shape
    }

    fn next_chunk(&mut self, max: usize) -> Result<Option<Chunk>> {
        if self.next >= self.pool.len || max == 0 {
            return Ok(None);
        }
        let (start, k) = (self.next, max.min(self.pool.len - self.next));
        let mut x = Vec::with_capacity(k * self.pool.plan.item_len());
        for _ in 0..k {
            let row = self.rows.next_row()?.ok_or_else(|| {
                Error::data(
                    self.pool
                        .files
                        .last()
                        .map_or(Path::new(""), PathBuf::as_path),
                    DataProblem::Other("rows changed while the pool was read".into()),
                )
            })?;
            let img = super::image::decode(&row.image, &row.name)?;
            x.extend(self.pool.plan.item(img, &row.name)?);
        }
        self.next += k;
        Ok(Some(Chunk {
            start,
            ids: position_ids(start, k),
            x,
        }))
    }
}

#[derive(Clone, Copy)]
enum Dtype {
    F32,
    U8,
}

/// The `x` tensor of a safetensors file, read in chunks.
pub struct SafetensorsStream {
    path: PathBuf,
    file: std::fs::File,
    dtype: Dtype,
    n: usize,
    item_shape: Vec<usize>,
    /// Byte offset of `x`'s first item in the file.
    base: u64,
    next: usize,
}

fn bad(path: &Path, m: impl Into<String>) -> Error {
    Error::data(path, DataProblem::Other(m.into()))
}

fn elem_size(dtype: &str) -> Option<u64> {
    Some(match dtype {
        "BOOL" | "U8" | "I8" | "F8_E5M2" | "F8_E4M3" => 1,
        "U16" | "I16" | "F16" | "BF16" => 2,
        "U32" | "I32" | "F32" => 4,
        "U64" | "I64" | "F64" => 8,
        _ => return None,
    })
}

impl SafetensorsStream {
    /// Opens `path` and checks its header (see the module docs); reads no item yet.
    pub fn open(path: &Path) -> Result<SafetensorsStream> {
        let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        let mut n8 = [0u8; 8];
        file.read_exact(&mut n8).map_err(|_| {
            bad(
                path,
                "not a safetensors file: shorter than its 8-byte header size",
            )
        })?;
        let hlen = u64::from_le_bytes(n8);
        if hlen > MAX_HEADER || hlen > len - 8 {
            return Err(bad(
                path,
                format!("not a safetensors file: a header of {hlen} bytes in a file of {len}"),
            ));
        }
        let mut header = vec![0u8; hlen as usize];
        file.read_exact(&mut header)
            .map_err(|e| Error::io(path, e))?;
        let v: Value = serde_json::from_slice(&header)
            .map_err(|e| bad(path, format!("not a safetensors file: header: {e}")))?;
        let obj = v
            .as_object()
            .ok_or_else(|| bad(path, "not a safetensors file: the header is not an object"))?;
        let data_len = len - 8 - hlen;
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        let mut x = None;
        let mut y = None;
        for (name, t) in obj {
            if name == "__metadata__" {
                continue;
            }
            let dtype = t.get("dtype").and_then(Value::as_str).unwrap_or("");
            let shape: Option<Vec<u64>> = t
                .get("shape")
                .and_then(Value::as_array)
                .and_then(|a| a.iter().map(Value::as_u64).collect());
            let offs: Option<Vec<u64>> = t
                .get("data_offsets")
                .and_then(Value::as_array)
                .and_then(|a| a.iter().map(Value::as_u64).collect());
            let (Some(size), Some(shape), Some([b, e])) = (
                elem_size(dtype),
                shape,
                offs.as_deref()
                    .map(<[u64]>::to_vec)
                    .and_then(|o| <[u64; 2]>::try_from(o).ok()),
            ) else {
                return Err(bad(
                    path,
                    format!("not a safetensors file: tensor `{name}` has no valid dtype, shape or offsets"),
                ));
            };
            let bytes = shape
                .iter()
                .try_fold(size, |a, &d| a.checked_mul(d))
                .ok_or_else(|| bad(path, format!("tensor `{name}`: its shape overflows")))?;
            if b > e || e > data_len || e - b != bytes {
                return Err(bad(
                    path,
                    format!(
                        "not a safetensors file: tensor `{name}` at bytes {b}..{e} of a \
                         {data_len}-byte data section, for {bytes} bytes of {shape:?}"
                    ),
                ));
            }
            ranges.push((b, e));
            if name == "x" {
                x = Some((dtype.to_string(), shape, b));
            } else if name == "y" {
                y = Some((dtype.to_string(), shape, b, e - b));
            }
        }
        ranges.sort_unstable();
        let mut at = 0;
        for &(b, e) in &ranges {
            if b != at {
                return Err(bad(
                    path,
                    "not a safetensors file: tensors overlap or leave gaps",
                ));
            }
            at = e;
        }
        if at != data_len {
            return Err(bad(
                path,
                format!("not a safetensors file: tensors cover {at} of {data_len} data bytes"),
            ));
        }
        let (dtype, shape, b) = x.ok_or_else(|| bad(path, "has no tensor `x` (items, ...)"))?;
        let dtype = match dtype.as_str() {
            "F32" => Dtype::F32,
            "U8" => Dtype::U8,
            d => return Err(bad(path, format!("tensor `x` is {d}; expected F32 or U8"))),
        };
        if shape.len() < 2 || shape[0] == 0 {
            return Err(bad(
                path,
                format!("tensor `x` has shape {shape:?}; expected (n, ...) with n > 0"),
            ));
        }
        let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
        let item_shape = super::source::x_item_shape(&dims);
        // Labels, as the whole loader checks them: read in blocks, never all at once.
        let listed = super::source::listed_classes(
            obj.get("__metadata__")
                .and_then(|m| m.get("classes"))
                .and_then(Value::as_str),
        );
        let mut check = LabelCheck::new(listed, "the metadata `classes`", path)?;
        if let Some((ydtype, yshape, yb, ylen)) = y {
            if yshape != [shape[0]] {
                return Err(bad(
                    path,
                    format!("tensor `y` has shape {yshape:?}; expected ({},)", shape[0]),
                ));
            }
            let size = elem_size(&ydtype).unwrap_or(1);
            let block = (1u64 << 20) / size * size;
            let mut at = 0u64;
            let mut buf = Vec::new();
            while at < ylen {
                buf.clear();
                file.seek(SeekFrom::Start(8 + hlen + yb + at))
                    .and_then(|_| (&mut file).take(block.min(ylen - at)).read_to_end(&mut buf))
                    .map_err(|e| Error::io(path, e))?;
                if buf.is_empty() {
                    return Err(Error::io(
                        path,
                        std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "tensor `y`"),
                    ));
                }
                let first = (at / size) as usize;
                for l in super::source::y_labels(&buf, &ydtype, first, path)? {
                    check.add(Some(l))?;
                }
                at += buf.len() as u64;
            }
        }
        // Without `y` every label is absent, which no class rule can refuse.
        check.finish()?;
        Ok(SafetensorsStream {
            path: path.to_path_buf(),
            file,
            dtype,
            n: dims[0],
            item_shape,
            base: 8 + hlen + b,
            next: 0,
        })
    }
}

impl ItemStream for SafetensorsStream {
    fn len(&self) -> usize {
        self.n
    }

    fn item_shape(&self) -> &[usize] {
        &self.item_shape
    }

    fn next_chunk(&mut self, max: usize) -> Result<Option<Chunk>> {
        if self.next >= self.n || max == 0 {
            return Ok(None);
        }
        let (start, k) = (self.next, max.min(self.n - self.next));
        let item: usize = self.item_shape.iter().product();
        let size = match self.dtype {
            Dtype::F32 => 4,
            Dtype::U8 => 1,
        };
        let mut buf = vec![0u8; k * item * size];
        self.file
            .seek(SeekFrom::Start(self.base + (start * item * size) as u64))
            .and_then(|_| self.file.read_exact(&mut buf))
            .map_err(|e| Error::io(&self.path, e))?;
        let u8s = matches!(self.dtype, Dtype::U8);
        let x = super::source::x_values(&buf, u8s, start * item, &self.path)?;
        self.next += k;
        Ok(Some(Chunk {
            start,
            ids: position_ids(start, k),
            x,
        }))
    }
}
