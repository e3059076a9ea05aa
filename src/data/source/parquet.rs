//! Hub-style Parquet tables (one file, or a Hub dataset's shards): an image column (a struct
//! with `bytes`, or raw bytes) and an integer label column; ids are positions across the files.
//! A single file whose schema has a list column is a table of embeddings instead, read by
//! [`parquet_embeddings`](super::parquet_embeddings).
//! One pass reads the labels and image headers; the whole read then decodes every row, a
//! stream a chunk at a time, the `parquet` crate reading one row group at a time.

use super::parquet_check::{check_parquet_footer, check_parquet_pages};
use super::parquet_embeddings::{is_embedding_table, EmbeddingTable};
use crate::data::image::decode;
use crate::data::labels::LabelCheck;
use crate::data::plan::{ImagePlan, PlanBuilder};
use crate::data::stream::{
    drain, position_ids, Chunk, Format, ItemStream, Items, Loaded, PoolLabels,
};
use crate::error::{contain, DataProblem, Error, Result};
use crate::hub::Hub;
use crate::observe::Observer;
use std::path::{Path, PathBuf};

/// One Parquet file.
pub(crate) struct Parquet<'a>(pub(crate) &'a Path);

impl Format for Parquet<'_> {
    fn name(&self) -> String {
        self.0.display().to_string()
    }

    fn open(
        &self,
        _hub: &Hub,
        _observer: &mut dyn Observer,
        plan: Option<&ImagePlan>,
    ) -> Result<Box<dyn ItemStream>> {
        let p = self.0;
        if is_embedding_table(p)? {
            return Ok(Box::new(EmbeddingTable::open(p)?));
        }
        Ok(Box::new(
            ParquetStream::open(vec![p.to_path_buf()], None, p)?.with(plan),
        ))
    }

    fn load(
        &self,
        _hub: &Hub,
        _observer: &mut dyn Observer,
        plan: Option<&ImagePlan>,
    ) -> Result<Loaded> {
        let p = self.0;
        if is_embedding_table(p)? {
            return Ok(Loaded {
                pool: EmbeddingTable::open(p)?.items()?,
                test: None,
            });
        }
        Ok(Loaded {
            pool: ParquetPool::scan(vec![p.to_path_buf()], None, p, true)?
                .planned(plan)
                .items()?,
            test: None,
        })
    }

    fn pool_labels(&self, _hub: &Hub, _observer: &mut dyn Observer) -> Result<PoolLabels> {
        let p = self.0;
        if is_embedding_table(p)? {
            return Ok(EmbeddingTable::open(p)?.pool_labels());
        }
        ParquetPool::scan(vec![p.to_path_buf()], None, p, true).map(ParquetPool::labels)
    }

    fn displays(&self) -> Result<Option<crate::data::display::Displays>> {
        let p = self.0;
        if is_embedding_table(p)? {
            return Ok(EmbeddingTable::open(p)?.displays());
        }
        Ok(None)
    }
}

/// One row of a Hub-style Parquet table.
struct ParquetRow {
    /// The encoded image.
    image: Vec<u8>,
    /// The label (a negative one, `datasets`' "no label", is `None`).
    label: Option<u32>,
    /// `FILE#rowR`, naming the row in errors.
    name: PathBuf,
}

/// The rows of one or more Hub-style Parquet files (a dataset's shards), in order, read with
/// the row API one row group at a time: the image column is the first struct with a `bytes`
/// field (what `datasets` writes for `Image()` features) or the first binary column; the label
/// column is the first integer column. Each file's footer and page headers are checked before
/// the `parquet` crate reads it; a panic of the crate's record reader on a corrupt page (found
/// by fuzzing: a definition level of 43 where the schema allows 2) is an error naming the file.
struct ParquetRows {
    files: Vec<PathBuf>,
    /// The file being read, and its row iterator.
    at: usize,
    rows: Option<parquet::record::reader::RowIter<'static>>,
    row: usize,
}

impl ParquetRows {
    /// Rows of `files`, in order; nothing is read yet.
    fn new(files: Vec<PathBuf>) -> ParquetRows {
        ParquetRows {
            files,
            at: 0,
            rows: None,
            row: 0,
        }
    }

    /// The next row, `None` after the last file's last.
    fn next_row(&mut self) -> Result<Option<ParquetRow>> {
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
/// what the whole read and a streamed read share. Ids are positions across the files.
pub(super) struct ParquetPool {
    files: Vec<PathBuf>,
    len: usize,
    classes: Vec<String>,
    plan: ImagePlan,
    /// Every row's label, when asked for.
    labels: Option<Vec<Option<u32>>>,
}

impl ParquetPool {
    /// Scans `files`: labels against the `declared` class names (a dataset card) or the rule
    /// for undeclared ones, and each image's header (every image must have the first one's
    /// size). `name` names the pool in label errors; `keep_labels` keeps every row's label.
    pub(super) fn scan(
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
    pub(super) fn planned(mut self, plan: Option<&ImagePlan>) -> ParquetPool {
        if let Some(p) = plan {
            self.plan = *p;
        }
        self
    }

    /// The whole pool in memory: its stream drained.
    pub(super) fn items(mut self) -> Result<Items> {
        let labels = self.labels.take().unwrap_or_default();
        let classes = std::mem::take(&mut self.classes);
        let mut stream = ParquetStream::of(self);
        let item_shape = stream.item_shape.clone();
        let (ids, x) = drain(&mut stream)?.map_or_else(Default::default, |c| (c.ids, c.x));
        Ok(Items {
            ids,
            x,
            item_shape,
            labels,
            classes,
        })
    }
}

impl ParquetPool {
    /// Every row's label and the class names (scanned with `keep_labels`).
    pub(super) fn labels(self) -> PoolLabels {
        PoolLabels {
            labels: self.labels.unwrap_or_default(),
            classes: self.classes,
        }
    }
}

/// Hub-style Parquet files (one file, or a Hub dataset's train shards), decoded a chunk at a
/// time.
pub(super) struct ParquetStream {
    pool: ParquetPool,
    rows: ParquetRows,
    item_shape: Vec<usize>,
    next: usize,
}

impl ParquetStream {
    /// Scans `files` once (labels against the `declared` class names, image headers); `name`
    /// names the pool in label errors.
    pub(super) fn open(
        files: Vec<PathBuf>,
        declared: Option<Vec<String>>,
        name: &Path,
    ) -> Result<ParquetStream> {
        ParquetPool::scan(files, declared, name, false).map(ParquetStream::of)
    }

    /// The rows of a scanned pool, decoded by its plan.
    fn of(pool: ParquetPool) -> ParquetStream {
        ParquetStream {
            rows: ParquetRows::new(pool.files.clone()),
            item_shape: pool.plan.item_shape(),
            pool,
            next: 0,
        }
    }
}

impl ParquetStream {
    /// Every image decoded by `plan` when given (see [`Format::open`]).
    pub(super) fn with(mut self, plan: Option<&ImagePlan>) -> ParquetStream {
        if let Some(plan) = plan {
            self.pool.plan = *plan;
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
            let img = decode(&row.image, &row.name)?;
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
