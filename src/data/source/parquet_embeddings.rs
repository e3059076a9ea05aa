//! Parquet tables of embeddings (what pyarrow or pandas write from a list of vectors): a
//! column of lists of floats (`list<float>`, `list<double>`, or `fixed_size_list`, which
//! Parquet stores as a list) read as a pool `(n, d)`, with an optional integer label column
//! (negative: unlabeled, as for image tables), an optional string `id` column and an optional
//! string column showing each item to a person, `display` (its text) or `display_image` (its
//! image file's path, relative to the table's folder or absolute). The schema
//! tells such a table from a Hub-style image table ([`is_embedding_table`]): any top-level list
//! column makes it one. The features column is the one named `features` or `embedding`, or the
//! only list column; the label column is `label` or `labels`, or the only integer column.
//!
//! Opening scans every row once (lengths equal, no null, every value finite and, for doubles,
//! within f32's range; labels; ids distinct and non-empty, the checks safetensors' embedding
//! layout makes, shared with it); the stream then reads the rows again a chunk at a time with
//! the same per-row code, and the whole read drains that stream, so both give the same items
//! bit for bit. The file passes [`parquet_check`](super::parquet_check)'s checks before the
//! `parquet` crate reads it, as image tables do.

use super::numeric::{self, check_names, NumericTable, TargetPart};
use super::parquet_check::{check_parquet_footer, check_parquet_pages};
use super::safetensors::check_ids;
use crate::data::display::{DisplayKind, Displays};
use crate::data::labels::LabelCheck;
use crate::data::stream::{drain, position_ids, Chunk, ItemStream, Items, PoolLabels, StreamIds};
use crate::error::{contain, DataProblem, Error, Result};
use parquet::basic::{ConvertedType, LogicalType, Type as Physical};
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::Field;
use parquet::schema::types::Type;
use std::path::{Path, PathBuf};

fn bad(path: &Path, m: impl Into<String>) -> Error {
    Error::data(path, DataProblem::Other(m.into()))
}

/// A checked reader of `path`.
fn reader(path: &Path) -> Result<SerializedFileReader<std::fs::File>> {
    contain(path, "the Parquet reader", || {
        check_parquet_footer(path)?;
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        let reader =
            SerializedFileReader::new(file).map_err(|e| bad(path, format!("not Parquet: {e}")))?;
        check_parquet_pages(path, reader.metadata())?;
        Ok(reader)
    })
}

/// True when a top-level column is a list: an embedding table, not an image table.
pub(super) fn is_embedding_table(path: &Path) -> Result<bool> {
    let r = reader(path)?;
    let root = r.metadata().file_metadata().schema();
    Ok(root.get_fields().iter().any(|f| is_list(f)))
}

fn is_list(t: &Type) -> bool {
    let info = t.get_basic_info();
    t.is_group()
        && (info.converted_type() == ConvertedType::LIST
            || matches!(info.logical_type_ref(), Some(LogicalType::List)))
}

/// The first primitive leaf under a list column: its element type.
fn leaf(t: &Type) -> Option<&Type> {
    if t.is_primitive() {
        return Some(t);
    }
    t.get_fields().first().and_then(|f| leaf(f))
}

/// Which top-level columns hold what, by their position in a row.
#[derive(Clone, PartialEq)]
struct Columns {
    features: usize,
    features_name: String,
    label: Option<usize>,
    id: Option<usize>,
    /// The string column showing each item to a person: `display` (its text) or
    /// `display_image` (its image file's path).
    display: Option<(usize, DisplayKind)>,
    /// Numeric target columns a regression run reads, in the order it names them.
    targets: Vec<usize>,
}

/// Picks the columns of an embedding table (see the module docs).
fn columns(root: &Type, path: &Path) -> Result<Columns> {
    let fields = root.get_fields();
    let lists: Vec<usize> = (0..fields.len()).filter(|&i| is_list(&fields[i])).collect();
    let named = |names: &[&str], among: &[usize]| {
        among
            .iter()
            .copied()
            .find(|&i| names.contains(&fields[i].name()))
    };
    let features = match (named(&["features", "embedding"], &lists), lists.as_slice()) {
        (Some(i), _) | (None, &[i]) => i,
        _ => {
            let names: Vec<&str> = lists.iter().map(|&i| fields[i].name()).collect();
            return Err(bad(
                path,
                format!(
                    "has several list columns ({}) and none named `features` or `embedding`",
                    names.join(", ")
                ),
            ));
        }
    };
    let name = fields[features].name().to_string();
    match leaf(&fields[features]).map(Type::get_physical_type) {
        Some(Physical::FLOAT | Physical::DOUBLE) => {}
        other => {
            return Err(bad(
                path,
                format!(
                    "column `{name}` is a list of {}; expected float or double",
                    other.map_or("nothing".to_string(), |t| format!("{t:?}"))
                ),
            ))
        }
    }
    let ints: Vec<usize> = (0..fields.len())
        .filter(|&i| {
            fields[i].is_primitive()
                && matches!(
                    fields[i].get_physical_type(),
                    Physical::INT32 | Physical::INT64
                )
        })
        .collect();
    let label = match (named(&["label", "labels"], &ints), ints.as_slice()) {
        (Some(i), _) | (None, &[i]) => Some(i),
        _ => None,
    };
    let strings: Vec<usize> = (0..fields.len())
        .filter(|&i| {
            fields[i].is_primitive() && fields[i].get_physical_type() == Physical::BYTE_ARRAY
        })
        .collect();
    let display = match (
        named(&["display"], &strings),
        named(&["display_image"], &strings),
    ) {
        (Some(_), Some(_)) => {
            return Err(bad(
                path,
                "has both a `display` and a `display_image` column; keep one",
            ))
        }
        (Some(i), None) => Some((i, DisplayKind::Text)),
        (None, Some(i)) => Some((i, DisplayKind::Image)),
        (None, None) => None,
    };
    Ok(Columns {
        features,
        features_name: name,
        label,
        id: named(&["id"], &strings),
        display,
        targets: Vec::new(),
    })
}

/// One row's parts.
struct Row {
    x: Vec<f32>,
    label: Option<u32>,
    id: Option<String>,
    display: Option<String>,
    /// The target columns' values (NaN for a null), in `Columns::targets`' order.
    targets: Vec<f64>,
}

/// Row `r`'s features (checked: no null, finite, within f32), label and id.
fn parse_row(row: &parquet::record::Row, r: usize, cols: &Columns, path: &Path) -> Result<Row> {
    let at = |m: String| bad(path, format!("row {r}: {m}"));
    let mut out = Row {
        x: Vec::new(),
        label: None,
        id: None,
        display: None,
        targets: vec![f64::NAN; cols.targets.len()],
    };
    let name = &cols.features_name;
    for (i, (_, field)) in row.get_column_iter().enumerate() {
        if i == cols.features {
            let Field::ListInternal(list) = field else {
                return Err(at(format!("column `{name}` is null")));
            };
            out.x.reserve(list.len());
            for (j, v) in list.elements().iter().enumerate() {
                let v = match v {
                    Field::Float(v) => *v,
                    // Narrowed as numpy's astype(float32) narrows (round to nearest).
                    Field::Double(v) => *v as f32,
                    Field::Null => return Err(at(format!("column `{name}` has a null at {j}"))),
                    other => return Err(at(format!("column `{name}` holds {other} at {j}"))),
                };
                if !v.is_finite() {
                    return Err(at(format!(
                        "column `{name}` holds {} at {j}, not finite or beyond float32's range",
                        match &list.elements()[j] {
                            Field::Double(d) => *d,
                            _ => f64::from(v),
                        }
                    )));
                }
                out.x.push(v);
            }
        } else if Some(i) == cols.label {
            let v = match field {
                Field::Int(v) => i64::from(*v),
                Field::Long(v) => *v,
                Field::Short(v) => i64::from(*v),
                Field::Byte(v) => i64::from(*v),
                Field::UByte(v) => i64::from(*v),
                Field::UShort(v) => i64::from(*v),
                Field::UInt(v) => i64::from(*v),
                Field::ULong(v) => i64::try_from(*v).unwrap_or(i64::MAX),
                _ => -1,
            };
            // Negative (or null): unlabeled, as `datasets` writes "no label".
            out.label = match v {
                v if v < 0 => None,
                v => Some(u32::try_from(v).map_err(|_| at(format!("label {v} is too large")))?),
            };
        } else if let Some(t) = cols.targets.iter().position(|&c| c == i) {
            out.targets[t] = match field {
                Field::Double(v) => *v,
                Field::Float(v) => f64::from(*v),
                Field::Int(v) => f64::from(*v),
                Field::Long(v) => *v as f64,
                Field::Short(v) => f64::from(*v),
                Field::Byte(v) => f64::from(*v),
                Field::UByte(v) => f64::from(*v),
                Field::UShort(v) => f64::from(*v),
                Field::UInt(v) => f64::from(*v),
                Field::ULong(v) => *v as f64,
                Field::Null => f64::NAN,
                other => return Err(at(format!("target column holds {other}"))),
            };
        } else if Some(i) == cols.id {
            out.id = Some(match field {
                Field::Str(s) => s.clone(),
                Field::Bytes(b) => String::from_utf8(b.data().to_vec())
                    .map_err(|_| at("its id is not UTF-8".into()))?,
                _ => return Err(at("its id is null".into())),
            });
        } else if Some(i) == cols.display.map(|(c, _)| c) {
            out.display = Some(match field {
                Field::Str(s) => s.clone(),
                Field::Bytes(b) => String::from_utf8(b.data().to_vec())
                    .map_err(|_| at("its display is not UTF-8".into()))?,
                _ => return Err(at("its display is null".into())),
            });
        }
    }
    Ok(out)
}

/// An embedding table's rows, read in order: one file's, or a Hub dataset's shards' one after
/// another (each shard with the first one's columns).
struct Rows {
    files: Vec<PathBuf>,
    /// The file being read (errors name it), its rows, and the row within it.
    at: usize,
    path: PathBuf,
    cols: Columns,
    rows: parquet::record::reader::RowIter<'static>,
    row: usize,
}

impl Rows {
    /// The rows of `files` (at least one), the first file opened and its columns picked.
    fn open(files: &[PathBuf]) -> Result<Rows> {
        let first = files
            .first()
            .ok_or_else(|| bad(Path::new("."), "no Parquet file to read"))?;
        let (cols, rows) = Self::file(first, None)?;
        Ok(Rows {
            files: files.to_vec(),
            at: 0,
            path: first.clone(),
            cols,
            rows,
            row: 0,
        })
    }

    /// A checked reader of `path` and its columns, which must be `like`'s where given.
    fn file(
        path: &Path,
        like: Option<&Columns>,
    ) -> Result<(Columns, parquet::record::reader::RowIter<'static>)> {
        let r = reader(path)?;
        let cols = columns(r.metadata().file_metadata().schema(), path)?;
        if like.is_some_and(|c| *c != cols) {
            return Err(bad(
                path,
                "has other columns than the first shard's (a dataset's shards share one schema)",
            ));
        }
        let rows = contain(path, "the Parquet reader", || Ok(r.into_iter()))?;
        Ok((cols, rows))
    }

    fn next_row(&mut self) -> Result<Option<Row>> {
        loop {
            let (path, r) = (&self.path, self.row);
            let rows = &mut self.rows;
            let next = contain(path, "the Parquet reader", || {
                rows.next()
                    .transpose()
                    .map_err(|e| bad(path, format!("row {r}: {e}")))
            })?;
            if let Some(row) = next {
                self.row += 1;
                return parse_row(&row, r, &self.cols, path).map(Some);
            }
            if self.at + 1 >= self.files.len() {
                return Ok(None);
            }
            self.at += 1;
            self.path = self.files[self.at].clone();
            let (_, rows) = Self::file(&self.path, Some(&self.cols))?;
            self.rows = rows;
            self.row = 0;
        }
    }
}

/// The features, ids and numeric columns `target` of an embedding table for regression (see
/// [`numeric`](super::numeric)): float or double columns are numbers, integer ones the
/// caller's task decides; a null is a target not known yet.
pub(crate) fn parquet_numeric(path: &Path, target: &[String]) -> Result<NumericTable> {
    let mut rows = Rows::open(&[path.to_path_buf()])?;
    check_names(target, &[rows.cols.features_name.as_str(), "id"], path)?;
    let schema = reader(path)?.metadata().file_metadata().schema_descr_ptr();
    let fields = schema.root_schema().get_fields();
    let mut parts = Vec::with_capacity(target.len());
    for name in target {
        let Some(c) = fields.iter().position(|f| f.name() == name) else {
            let have: Vec<String> = fields.iter().map(|f| f.name().to_string()).collect();
            return Err(numeric::missing(path, name, "column", &have));
        };
        let float = match fields[c]
            .is_primitive()
            .then(|| fields[c].get_physical_type())
        {
            Some(Physical::FLOAT | Physical::DOUBLE) => true,
            Some(Physical::INT32 | Physical::INT64) => false,
            _ => return Err(bad(path, format!("column `{name}` does not hold numbers"))),
        };
        rows.cols.targets.push(c);
        parts.push(TargetPart {
            name: name.clone(),
            width: 1,
            values: Vec::new(),
            float,
        });
    }
    // Only the features, ids and targets count: an integer column is not labels here.
    (rows.cols.label, rows.cols.display) = (None, None);
    let (mut ids, mut x, mut listed) = (Vec::new(), Vec::new(), true);
    let mut dim = None;
    while let Some(row) = rows.next_row()? {
        let r = ids.len();
        if *dim.get_or_insert(row.x.len()) != row.x.len() || row.x.is_empty() {
            return Err(bad(
                path,
                format!(
                    "row {r}: {} features where row 0 has {}",
                    row.x.len(),
                    dim.unwrap_or(0)
                ),
            ));
        }
        x.extend_from_slice(&row.x);
        listed &= row.id.is_some();
        ids.push(row.id.unwrap_or_else(|| r.to_string()));
        for (p, v) in parts.iter_mut().zip(row.targets) {
            p.values.push(v);
        }
    }
    let n = ids.len();
    if n == 0 {
        return Err(bad(path, "holds no rows"));
    }
    if listed {
        check_ids(&ids, n, "column `id`", path)?;
    } else {
        ids = position_ids(0, n);
    }
    Ok(NumericTable::new(ids, (x, dim.unwrap_or(0)), parts))
}

/// The dimension of an embedding table's items: its first row's length (no other row read).
pub(super) fn first_dim(path: &Path) -> Result<usize> {
    let mut rows = Rows::open(&[path.to_path_buf()])?;
    match rows.next_row()? {
        Some(row) if !row.x.is_empty() => Ok(row.x.len()),
        _ => Err(bad(path, "holds no rows")),
    }
}

/// An embedding table scanned (see the module docs) and read a chunk at a time.
pub(super) struct EmbeddingTable {
    rows: Rows,
    n: usize,
    item_shape: Vec<usize>,
    ids: StreamIds,
    labels: PoolLabels,
    next: usize,
    /// What a person is shown of each item (the display column's), checked.
    displays: Option<Displays>,
}

impl EmbeddingTable {
    /// Scans `path` once: every row's length, values, label and id.
    pub(super) fn open(path: &Path) -> Result<EmbeddingTable> {
        Self::open_files(&[path.to_path_buf()], None, path)
    }

    /// Scans `files` once, in order, as one table (a Hub dataset's shards, `name` naming it):
    /// the same checks as [`EmbeddingTable::open`], labels against `classes` where the
    /// dataset card names them.
    pub(super) fn open_files(
        files: &[PathBuf],
        classes: Option<Vec<String>>,
        name: &Path,
    ) -> Result<EmbeddingTable> {
        let mut rows = Rows::open(files)?;
        let path = name;
        // A row of one file; an item across a dataset's shards.
        let unit = if files.len() > 1 { "item" } else { "row" };
        let column = rows.cols.features_name.clone();
        let mut d = None;
        let (mut ids, mut labels, mut shown) = (Vec::new(), Vec::new(), Vec::new());
        let declared_by = if classes.is_some() {
            "the dataset card"
        } else {
            "the label column"
        };
        let mut check = LabelCheck::new(classes, declared_by, path)?;
        while let Some(row) = rows.next_row()? {
            let r = labels.len();
            match d {
                None if row.x.is_empty() => {
                    return Err(bad(
                        &rows.path,
                        format!("row 0: column `{column}` is empty"),
                    ))
                }
                None => d = Some(row.x.len()),
                Some(d) if d != row.x.len() => {
                    return Err(bad(
                        &rows.path,
                        format!(
                            "{unit} {r}: column `{column}` has {} values, {unit} 0 has {d}",
                            row.x.len()
                        ),
                    ))
                }
                Some(_) => {}
            }
            check.add(row.label)?;
            labels.push(row.label);
            if let Some(id) = row.id {
                ids.push(id);
            }
            if let Some(text) = row.display {
                shown.push(text);
            }
        }
        let n = labels.len();
        let d = d.ok_or_else(|| bad(path, "holds no rows"))?;
        let ids = if rows.cols.id.is_some() {
            check_ids(&ids, n, "column `id`", path)?;
            StreamIds::Listed(ids)
        } else {
            StreamIds::Positions
        };
        let displays = match rows.cols.display {
            Some((_, kind)) => {
                let what = match kind {
                    DisplayKind::Text => "column `display`",
                    DisplayKind::Image => "column `display_image`",
                };
                Some(Displays::new(kind, shown, n, path, what)?)
            }
            None => None,
        };
        Ok(EmbeddingTable {
            displays,
            rows: Rows::open(files)?,
            n,
            item_shape: vec![d],
            ids,
            labels: PoolLabels {
                labels,
                classes: check.finish()?,
            },
            next: 0,
        })
    }

    /// What a person is shown of each row, when the table has a display column.
    pub(super) fn displays(self) -> Option<Displays> {
        self.displays
    }

    /// Every row's label and the class names.
    pub(super) fn pool_labels(&self) -> PoolLabels {
        self.labels.clone()
    }

    /// The whole pool: the stream drained.
    pub(super) fn items(mut self) -> Result<Items> {
        let (ids, x) = drain(&mut self)?.map_or_else(Default::default, |c| (c.ids, c.x));
        Ok(Items {
            ids,
            x,
            item_shape: self.item_shape,
            labels: self.labels.labels,
            classes: self.labels.classes,
        })
    }
}

impl ItemStream for EmbeddingTable {
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
        let d = self.item_shape[0];
        let mut x = Vec::with_capacity(k.saturating_mul(d).min(1 << 24));
        for _ in 0..k {
            let row = self.rows.next_row()?.filter(|r| r.x.len() == d);
            let row =
                row.ok_or_else(|| bad(&self.rows.path, "rows changed while the pool was read"))?;
            x.extend(row.x);
        }
        self.next += k;
        Ok(Some(Chunk {
            start,
            ids: self.ids.range(start, k),
            x,
        }))
    }
}
