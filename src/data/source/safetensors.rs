//! Safetensors files, in two layouts. A pool: a tensor `x` `(n, ...)` of F32 or U8 (U8 scaled
//! by 1/255; `(n, h, w)` is one-channel images) and an optional integer `y` `(n,)`. An
//! embedding file (features computed elsewhere, e.g. by a PyTorch encoder): `features`
//! `(n, d)` of F32 or F16 and optional integer `labels` `(n,)`. Either may carry a test split
//! (`x_test`/`y_test`, or `test_features`/`test_labels`, every item labeled), and metadata:
//! `classes` (comma-separated) and `ids` (a JSON array of the pool's `n` distinct, non-empty
//! ids; positions otherwise). Read whole through the `safetensors` crate; streamed, by
//! positioned reads of the pool's tensor after the header was checked against the file's
//! length (every tensor's byte range inside the data section, ranges tiling it, sizes
//! matching shapes), so no chunk read can leave the file. Both share the per-value code, so
//! their items are equal bit for bit.

use super::numeric::{self, check_names, NumericTable, TargetPart};
use crate::data::display::{self, Displays};
use crate::data::labels::{declared_classes, LabelCheck};
use crate::data::plan::ImagePlan;
use crate::data::stream::{
    position_ids, Chunk, Format, ItemStream, Items, Loaded, PoolLabels, StreamIds,
};
use crate::error::{DataProblem, Error, Result};
use crate::hub::Hub;
use crate::observe::Observer;
use serde_json::Value;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// A safetensors file.
pub(crate) struct Safetensors<'a>(pub(crate) &'a Path);

impl Format for Safetensors<'_> {
    fn name(&self) -> String {
        self.0.display().to_string()
    }

    fn open(
        &self,
        _hub: &Hub,
        _observer: &mut dyn Observer,
        _plan: Option<&ImagePlan>,
    ) -> Result<Box<dyn ItemStream>> {
        Ok(Box::new(SafetensorsStream::open(self.0)?))
    }

    fn load(
        &self,
        _hub: &Hub,
        _observer: &mut dyn Observer,
        _plan: Option<&ImagePlan>,
    ) -> Result<Loaded> {
        load_safetensors(self.0)
    }

    fn load_test(&self, _hub: &Hub, _observer: &mut dyn Observer) -> Result<Option<Items>> {
        load_test_split(self.0)
    }

    /// The labels read in blocks, as a stream checks them when it opens: no item is read.
    fn pool_labels(&self, _hub: &Hub, _observer: &mut dyn Observer) -> Result<PoolLabels> {
        let mut labels = Vec::new();
        let (_, classes) = SafetensorsStream::open_with(self.0, |l| labels.push(l))?;
        Ok(PoolLabels { labels, classes })
    }

    fn displays(&self) -> Result<Option<Displays>> {
        displays_of(self.0, None)
    }
}

/// What a safetensors embedding file shows of its items (its metadata `display`, or with
/// `display_root` the images below that folder named by the items' ids). The root is the
/// caller's `trusted` folder when given (a session that embedded an image folder the person
/// named), else the file's own `display_root`, which must lie inside the file's folder: a
/// file may name no image above it, through its root no more than through its paths.
pub fn displays_of(path: &Path, trusted: Option<&Path>) -> Result<Option<Displays>> {
    let h = CheckedHeader::read(path)?;
    let meta = |key: &str| {
        h.header
            .get("__metadata__")
            .and_then(|m| m.get(key))
            .and_then(Value::as_str)
    };
    let (text, root) = (meta("display"), meta("display_root"));
    if text.is_none() && root.is_none() {
        return Ok(None);
    }
    let kind = display::kind_named(meta("display_kind"), path)?;
    let (names, _) = layout(|n| h.header.contains_key(n), path)?;
    let n = h
        .tensors
        .iter()
        .find(|t| t.name == names.x)
        .and_then(|t| t.shape.first().copied())
        .ok_or_else(|| bad(path, format!("has no tensor `{}` (items, ...)", names.x)))?
        as usize;
    let values: Vec<String> = match text {
        Some(text) => serde_json::from_str(text).map_err(|e| {
            bad(
                path,
                format!("metadata `display` is not a JSON array of strings: {e}"),
            )
        })?,
        // An image folder's embeddings: each item's image is its id below the folder.
        None => metadata_ids(meta("ids"), n, path)?,
    };
    let shown = Displays::new(kind, values, n, path, "metadata `display`")?;
    Ok(Some(match (trusted, root) {
        (Some(t), _) => shown.rooted(t.to_path_buf()),
        (None, Some(r)) => shown.rooted(root_inside(path, r)?),
        (None, None) => shown,
    }))
}

/// The metadata `display_root` `root` of the file `path`, resolved from the file's folder and
/// required to lie inside it.
fn root_inside(path: &Path, root: &str) -> Result<PathBuf> {
    let folder = path.parent().unwrap_or(Path::new("."));
    let folder = if folder.as_os_str().is_empty() {
        Path::new(".")
    } else {
        folder
    };
    let joined = folder.join(root);
    let (real, base) = (
        std::fs::canonicalize(&joined),
        std::fs::canonicalize(folder),
    );
    match (real, base) {
        (Ok(r), Ok(b)) if r.starts_with(&b) => Ok(r),
        _ => Err(bad(
            path,
            format!(
                "metadata `display_root` `{root}` is not a folder inside the file's folder: a \
                 file shows images below its own folder only. A session started on an image \
                 folder through a backbone shows that folder's images; for a file of your own, \
                 keep it beside the images or give their paths relative to it"
            ),
        )),
    }
}

/// The largest safetensors header read (the format's own limit is 100 MB).
const MAX_HEADER: u64 = 100 << 20;

/// The value types an items tensor may have.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Dtype {
    F32,
    F16,
    U8,
}

impl Dtype {
    /// The items tensor `name`'s dtype: U8 only in the pool layout (pixels), F16 only in an
    /// embedding file.
    fn of(dtype: &str, names: &Names, path: &Path) -> Result<Dtype> {
        match (dtype, names.embeddings) {
            ("F32", _) => Ok(Dtype::F32),
            ("U8", false) => Ok(Dtype::U8),
            ("F16", true) => Ok(Dtype::F16),
            (d, false) => Err(bad(
                path,
                format!("tensor `{}` is {d}; expected F32 or U8", names.x),
            )),
            (d, true) => Err(bad(
                path,
                format!("tensor `{}` is {d}; expected F32 or F16", names.x),
            )),
        }
    }

    fn size(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::F16 => 2,
            Dtype::U8 => 1,
        }
    }
}

/// Values of an items tensor `name` from its little-endian bytes (U8 scaled by 1/255),
/// checked finite; `first` is the flat position of `bytes`' first value in the tensor, for
/// the error (a streamed chunk starts past 0).
fn x_values(bytes: &[u8], dtype: Dtype, name: &str, first: usize, path: &Path) -> Result<Vec<f32>> {
    let x: Vec<f32> = match dtype {
        Dtype::U8 => bytes.iter().map(|&b| f32::from(b) / 255.0).collect(),
        Dtype::F32 => bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        Dtype::F16 => bytes
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
    };
    if let Some(i) = x.iter().position(|v| !v.is_finite()) {
        return Err(Error::data(
            path,
            DataProblem::Other(format!(
                "tensor `{name}` holds a non-finite value at flat position {}",
                first + i
            )),
        ));
    }
    Ok(x)
}

/// Refuses an items tensor that is not `(n, ...)` (a pool) or `(n, d)` (an embedding file)
/// with `n > 0` and `d > 0`.
fn check_items_shape(shape: &[usize], names: &Names, path: &Path) -> Result<()> {
    let rank_ok = if names.embeddings {
        shape.len() == 2 && shape[1] > 0
    } else {
        shape.len() >= 2
    };
    if !rank_ok || shape.first() == Some(&0) {
        let want = if names.embeddings {
            "(n, d)"
        } else {
            "(n, ...)"
        };
        return Err(bad(
            path,
            format!(
                "tensor `{}` has shape {shape:?}; expected {want} with n > 0",
                names.x
            ),
        ));
    }
    Ok(())
}

/// The tensor names of one split in one layout.
#[derive(Clone, Copy)]
struct Names {
    x: &'static str,
    y: &'static str,
    embeddings: bool,
}

const POOL: Names = Names {
    x: "x",
    y: "y",
    embeddings: false,
};
const POOL_TEST: Names = Names {
    x: "x_test",
    y: "y_test",
    embeddings: false,
};
const EMBEDDINGS: Names = Names {
    x: "features",
    y: "labels",
    embeddings: true,
};
const EMBEDDINGS_TEST: Names = Names {
    x: "test_features",
    y: "test_labels",
    embeddings: true,
};

/// The layout a file's tensor names say (`has` tells whether a tensor is there): the pool's
/// and its test split's names. A file naming tensors of both layouts is refused, not read as
/// one of them.
fn layout(has: impl Fn(&str) -> bool, path: &Path) -> Result<(Names, Names)> {
    let pool = [POOL.x, POOL.y, POOL_TEST.x, POOL_TEST.y]
        .iter()
        .find(|n| has(n));
    let emb = [
        EMBEDDINGS.x,
        EMBEDDINGS.y,
        EMBEDDINGS_TEST.x,
        EMBEDDINGS_TEST.y,
    ]
    .iter()
    .find(|n| has(n));
    match (pool, emb) {
        (Some(a), Some(b)) => Err(bad(
            path,
            format!(
                "names tensors of both layouts (`{a}` and `{b}`): a pool has `x` and `y`, an \
                 embedding file `features` and `labels`"
            ),
        )),
        (None, Some(_)) => Ok((EMBEDDINGS, EMBEDDINGS_TEST)),
        _ => Ok((POOL, POOL_TEST)),
    }
}

/// The pool's ids from the metadata `ids` (a JSON array of `n` distinct non-empty strings),
/// or positions when absent.
fn metadata_ids(ids: Option<&str>, n: usize, path: &Path) -> Result<Vec<String>> {
    let Some(text) = ids else {
        return Ok(position_ids(0, n));
    };
    let ids: Vec<String> = serde_json::from_str(text).map_err(|e| {
        bad(
            path,
            format!("metadata `ids` is not a JSON array of strings: {e}"),
        )
    })?;
    check_ids(&ids, n, "metadata `ids`", path)?;
    Ok(ids)
}

/// Refuses ids that an embedding file's pool of `n` items cannot have: another count, an empty
/// one, one with a control character (ids go into CSV rows and batch files), one given twice.
/// `what` names where they came from (the metadata or an array `ids`); shared by every
/// embedding-file kind so that all refuse the same ids with the same words.
pub(super) fn check_ids(ids: &[String], n: usize, what: &str, path: &Path) -> Result<()> {
    if ids.len() != n {
        return Err(bad(
            path,
            format!("{what} lists {} ids for {n} items", ids.len()),
        ));
    }
    let mut seen = std::collections::HashMap::with_capacity(n);
    for (i, id) in ids.iter().enumerate() {
        if id.is_empty() || id.chars().any(char::is_control) {
            return Err(bad(
                path,
                format!("{what}: id {i} is empty or holds a control character"),
            ));
        }
        if let Some(prev) = seen.insert(id.as_str(), i) {
            return Err(bad(
                path,
                format!("{what}: id `{id}` is given to items {prev} and {i}"),
            ));
        }
    }
    Ok(())
}

/// Refuses a test split that cannot be evaluated beside its pool: items of another shape (for
/// embeddings, another dimension `d`), or an item without a label. `noun` and the names say
/// what the file calls its parts (`tensor`, `array`); shared by every embedding-file kind.
pub(super) fn check_test_split(
    pool: &Items,
    test: &Items,
    noun: &str,
    (x, y): (&str, &str),
    path: &Path,
) -> Result<()> {
    if test.item_shape != pool.item_shape {
        return Err(bad(
            path,
            format!(
                "{noun} `{x}` has items of shape {:?}, the pool {:?}",
                test.item_shape, pool.item_shape
            ),
        ));
    }
    if test.labels.len() != test.len() || test.labels.iter().any(Option::is_none) {
        return Err(bad(
            path,
            format!("a test split needs a label per item ({noun} `{y}`)"),
        ));
    }
    Ok(())
}

/// The item shape of a safetensors pool's `x` of shape `(n, ...)`: `(n, h, w)` is one-channel
/// images `(1, h, w)`.
fn x_item_shape(shape: &[usize]) -> Vec<usize> {
    match &shape[1..] {
        [h, w] => vec![1, *h, *w],
        rest => rest.to_vec(),
    }
}

/// The first name a safetensors header gives twice, if any. A JSON object may repeat a key and
/// parsers keep one of them silently, so a file naming `x` twice would be read as whichever
/// came last.
fn repeated_key(header: &[u8]) -> Option<String> {
    struct FirstRepeat;
    impl<'de> serde::de::Visitor<'de> for FirstRepeat {
        type Value = Option<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> std::result::Result<Option<String>, A::Error> {
            let mut seen = std::collections::HashSet::new();
            let mut repeat = None;
            while let Some(k) = map.next_key::<String>()? {
                map.next_value::<serde::de::IgnoredAny>()?;
                if repeat.is_none() && !seen.insert(k.clone()) {
                    repeat = Some(k);
                }
            }
            Ok(repeat)
        }
    }
    let mut de = serde_json::Deserializer::from_slice(header);
    serde::Deserializer::deserialize_map(&mut de, FirstRepeat)
        .ok()
        .flatten()
}

fn repeated(key: &str) -> String {
    format!("not a valid safetensors file: its header names `{key}` twice")
}

/// Reads the pool and the test split, if the file has one (see the module docs).
fn load_safetensors(path: &Path) -> Result<Loaded> {
    use safetensors::SafeTensors;
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let st = SafeTensors::deserialize(&bytes)
        .map_err(|e| bad(path, format!("not a safetensors file: {e}")))?;
    // The crate checked the header's length against the file.
    let hlen = u64::from_le_bytes(bytes[..8].try_into().unwrap_or_default());
    if let Some(key) = repeated_key(&bytes[8..8 + hlen as usize]) {
        return Err(bad(path, repeated(&key)));
    }
    let (_, meta) = SafeTensors::read_metadata(&bytes)
        .map_err(|e| bad(path, format!("not a safetensors file: {e}")))?;
    let meta = meta.metadata().clone().unwrap_or_default();
    let listed = listed_classes(meta.get("classes").map(String::as_str));
    let (pool_names, test_names) = layout(|n| st.tensor(n).is_ok(), path)?;
    let get = |name: &str| -> Result<Option<Tensor<'_>>> {
        Ok(st.tensor(name).ok().map(|v| {
            (
                format!("{:?}", v.dtype()),
                v.shape().to_vec(),
                std::borrow::Cow::Borrowed(v.data()),
            )
        }))
    };
    let pool = load_split(get, pool_names, listed.clone(), path)?.ok_or_else(|| {
        bad(
            path,
            format!("has no tensor `{}` (items, ...)", pool_names.x),
        )
    })?;
    let pool = Items {
        ids: metadata_ids(meta.get("ids").map(String::as_str), pool.len(), path)?,
        ..pool
    };
    let test = load_split(get, test_names, listed, path)?;
    if let Some(test) = &test {
        check_test_split(&pool, test, "tensor", (test_names.x, test_names.y), path)?;
    }
    Ok(Loaded { pool, test })
}

/// One tensor as a split reads it: dtype (safetensors' name), shape and bytes.
type Tensor<'a> = (String, Vec<usize>, std::borrow::Cow<'a, [u8]>);

/// One split's items (`None` when the file has no tensor `names.x`); ids are positions.
/// `get` gives a tensor by name, `None` when the file has none (read whole through the
/// `safetensors` crate, or from a checked header alone).
fn load_split<'a>(
    mut get: impl FnMut(&str) -> Result<Option<Tensor<'a>>>,
    names: Names,
    listed: Option<Vec<String>>,
    path: &Path,
) -> Result<Option<Items>> {
    let Some((xdtype, shape, xdata)) = get(names.x)? else {
        if get(names.y)?.is_some() {
            return Err(bad(
                path,
                format!("has labels `{}` but no items `{}`", names.y, names.x),
            ));
        }
        return Ok(None);
    };
    check_items_shape(&shape, &names, path)?;
    let n = shape[0];
    let dtype = Dtype::of(&xdtype, &names, path)?;
    let x = x_values(&xdata, dtype, names.x, 0, path)?;
    drop(xdata);
    let item_shape = x_item_shape(&shape);
    let labels: Vec<Option<u32>> = match get(names.y)? {
        None => vec![None; n],
        Some((ydtype, yshape, ydata)) => {
            if yshape != [n] {
                return Err(bad(
                    path,
                    format!("tensor `{}` has shape {yshape:?}; expected ({n},)", names.y,),
                ));
            }
            y_labels(&ydata, &ydtype, names.y, 0, path)?
                .into_iter()
                .map(Some)
                .collect()
        }
    };
    let classes = declared_classes(&labels, listed, "the metadata `classes`", path)?;
    Ok(Some(Items {
        ids: position_ids(0, n),
        x,
        item_shape,
        labels,
        classes,
    }))
}

/// The test split alone, read from the checked header and the test tensors' bytes: no pool
/// item is read. The split and its checks are [`load_safetensors`]'s.
fn load_test_split(path: &Path) -> Result<Option<Items>> {
    let mut h = CheckedHeader::read(path)?;
    let (pool_names, test_names) = layout(|n| h.header.contains_key(n), path)?;
    let listed = listed_classes(
        h.header
            .get("__metadata__")
            .and_then(|m| m.get("classes"))
            .and_then(Value::as_str),
    );
    let pool_x = h.tensor(pool_names.x).cloned().ok_or_else(|| {
        bad(
            path,
            format!("has no tensor `{}` (items, ...)", pool_names.x),
        )
    })?;
    let pool_shape: Vec<usize> = pool_x.shape.iter().map(|&d| d as usize).collect();
    check_items_shape(&pool_shape, &pool_names, path)?;
    let test = load_split(
        |name| {
            let Some(t) = h.tensor(name).cloned() else {
                return Ok(None);
            };
            let bytes = h.bytes(&t, path)?;
            let shape = t.shape.iter().map(|&d| d as usize).collect();
            Ok(Some((t.dtype, shape, std::borrow::Cow::Owned(bytes))))
        },
        test_names,
        listed,
        path,
    )?;
    if let Some(test) = &test {
        // What the check reads of the pool: its item shape.
        let pool = Items {
            ids: Vec::new(),
            x: Vec::new(),
            item_shape: x_item_shape(&pool_shape),
            labels: Vec::new(),
            classes: Vec::new(),
        };
        check_test_split(&pool, test, "tensor", (test_names.x, test_names.y), path)?;
    }
    Ok(test)
}

/// The items, ids and tensors `target` of a safetensors file for regression (see
/// [`numeric`](super::numeric)): the items tensor of either layout (`x` or `features`), its
/// metadata `ids`; float tensors are numbers, integer ones the caller's task decides.
pub(crate) fn safetensors_numeric(path: &Path, target: &[String]) -> Result<NumericTable> {
    let mut h = CheckedHeader::read(path)?;
    let (names, test) = layout(|n| h.tensor(n).is_some(), path)?;
    check_names(target, &[names.x, test.x], path)?;
    let xt = h
        .tensor(names.x)
        .cloned()
        .ok_or_else(|| bad(path, format!("has no tensor `{}` (items, ...)", names.x)))?;
    let shape = usize_shape(&xt.shape, path)?;
    check_items_shape(&shape, &names, path)?;
    let (n, d) = (shape[0], shape[1..].iter().product());
    let x = x_values(
        &h.bytes(&xt, path)?,
        Dtype::of(&xt.dtype, &names, path)?,
        names.x,
        0,
        path,
    )?;
    let meta = |key: &str| {
        h.header
            .get("__metadata__")
            .and_then(|m| m.get(key))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let ids = metadata_ids(meta("ids").as_deref(), n, path)?;
    let have: Vec<String> = h.tensors.iter().map(|t| t.name.clone()).collect();
    let mut parts = Vec::with_capacity(target.len());
    for name in target {
        let t = h
            .tensor(name)
            .cloned()
            .ok_or_else(|| numeric::missing(path, name, "tensor", &have))?;
        let width = TargetPart::width(&usize_shape(&t.shape, path)?, n, name, path)?;
        let (values, float) = number_values(&h.bytes(&t, path)?, &t.dtype).ok_or_else(|| {
            bad(
                path,
                format!("tensor `{name}` is {}; expected numbers", t.dtype),
            )
        })?;
        parts.push(TargetPart {
            name: name.clone(),
            width,
            values,
            float,
        });
    }
    Ok(NumericTable::new(ids, (x, d), parts))
}

/// A header's shape in this machine's sizes.
fn usize_shape(shape: &[u64], path: &Path) -> Result<Vec<usize>> {
    shape
        .iter()
        .map(|&v| usize::try_from(v))
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| bad(path, format!("a shape {shape:?} past this machine's sizes")))
}

/// The values of a float or integer tensor's little-endian bytes, and whether it was a float
/// one; `None` for another dtype (booleans, 8-bit floats).
fn number_values(bytes: &[u8], dtype: &str) -> Option<(Vec<f64>, bool)> {
    fn each<const N: usize>(bytes: &[u8], f: impl Fn([u8; N]) -> f64) -> Vec<f64> {
        bytes
            .chunks_exact(N)
            .map(|c| f(c.try_into().unwrap_or([0; N])))
            .collect()
    }
    Some(match dtype {
        "F64" => (each(bytes, f64::from_le_bytes), true),
        "F32" => (each(bytes, |b| f64::from(f32::from_le_bytes(b))), true),
        "F16" => (each(bytes, |b| half::f16::from_le_bytes(b).to_f64()), true),
        "BF16" => (each(bytes, |b| half::bf16::from_le_bytes(b).to_f64()), true),
        "I8" => (each(bytes, |b| f64::from(i8::from_le_bytes(b))), false),
        "U8" => (each(bytes, |b| f64::from(u8::from_le_bytes(b))), false),
        "I16" => (each(bytes, |b| f64::from(i16::from_le_bytes(b))), false),
        "U16" => (each(bytes, |b| f64::from(u16::from_le_bytes(b))), false),
        "I32" => (each(bytes, |b| f64::from(i32::from_le_bytes(b))), false),
        "U32" => (each(bytes, |b| f64::from(u32::from_le_bytes(b))), false),
        "I64" => (each(bytes, |b| i64::from_le_bytes(b) as f64), false),
        "U64" => (each(bytes, |b| u64::from_le_bytes(b) as f64), false),
        _ => return None,
    })
}

/// Labels from the little-endian bytes of a labels tensor `name` of dtype `dtype` (`U8`,
/// `I32`, `U32` or `I64`), each in `0..=u32::MAX`; `first` is the item of `bytes`' first value,
/// for the error (a streamed read starts past 0).
fn y_labels(bytes: &[u8], dtype: &str, name: &str, first: usize, path: &Path) -> Result<Vec<u32>> {
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
        t => {
            return Err(bad(format!(
                "tensor `{name}` is {t}; expected an integer type"
            )))
        }
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

/// One tensor of a [`CheckedHeader`].
#[derive(Clone)]
pub(crate) struct TensorEntry {
    /// Its name.
    pub(crate) name: String,
    /// Its dtype as the header spells it (`F32`, `I64`, ...).
    pub(crate) dtype: String,
    /// Its shape.
    pub(crate) shape: Vec<u64>,
    /// Its first byte, counted from the data section's start.
    pub(crate) begin: u64,
    /// Its length in bytes (the shape's product times the dtype's size).
    pub(crate) len: u64,
}

/// A safetensors file's header, checked against the file's length before any tensor is read:
/// every tensor's byte range inside the data section, ranges tiling it, sizes matching
/// shapes, no key named twice. What the streamed pool and a checkpoint kept in an embedding
/// file read tensors through, by positioned reads.
pub(crate) struct CheckedHeader {
    /// The file, open for reading.
    pub(crate) file: std::fs::File,
    /// The header as JSON (tensors and `__metadata__`).
    pub(crate) header: serde_json::Map<String, Value>,
    /// Every tensor, in the header's order.
    pub(crate) tensors: Vec<TensorEntry>,
    /// Byte offset of the data section in the file.
    pub(crate) data_start: u64,
}

impl TensorEntry {
    /// The header's entry `t` for tensor `name`: a dtype alkit knows, a shape and offsets
    /// whose byte count matches, inside the `data_len`-byte data section.
    fn read(path: &Path, name: &str, t: &Value, data_len: u64) -> Result<TensorEntry> {
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
                format!(
                    "not a safetensors file: tensor `{name}` has no valid dtype, shape or offsets"
                ),
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
        Ok(TensorEntry {
            name: name.to_string(),
            dtype: dtype.to_string(),
            shape,
            begin: b,
            len: e - b,
        })
    }
}

impl CheckedHeader {
    /// Reads and checks `path`'s header.
    pub(crate) fn read(path: &Path) -> Result<CheckedHeader> {
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
        if let Some(key) = repeated_key(&header) {
            return Err(bad(path, repeated(&key)));
        }
        let obj = v
            .as_object()
            .ok_or_else(|| bad(path, "not a safetensors file: the header is not an object"))?;
        let data_len = len - 8 - hlen;
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        let mut tensors: Vec<TensorEntry> = Vec::new();
        for (name, t) in obj.iter().filter(|(name, _)| *name != "__metadata__") {
            let entry = TensorEntry::read(path, name, t, data_len)?;
            ranges.push((entry.begin, entry.begin + entry.len));
            tensors.push(entry);
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
        let header = obj.clone();
        Ok(CheckedHeader {
            file,
            header,
            tensors,
            data_start: 8 + hlen,
        })
    }

    /// The tensor `name`, `None` when the file has none.
    pub(crate) fn tensor(&self, name: &str) -> Option<&TensorEntry> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// The bytes of `t`, one of this header's tensors.
    pub(crate) fn bytes(&mut self, t: &TensorEntry, path: &Path) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; t.len as usize];
        self.file
            .seek(SeekFrom::Start(self.data_start + t.begin))
            .and_then(|_| self.file.read_exact(&mut buf))
            .map_err(|e| Error::io(path, e))?;
        Ok(buf)
    }
}

/// The items tensor of a safetensors file, read in chunks.
struct SafetensorsStream {
    path: PathBuf,
    file: std::fs::File,
    /// The items tensor's name.
    name: &'static str,
    /// The metadata's ids, or positions.
    ids: StreamIds,
    dtype: Dtype,
    n: usize,
    item_shape: Vec<usize>,
    /// Byte offset of the first item in the file.
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
    /// Opens `path` and checks its header and labels (see the module docs); reads no item yet.
    fn open(path: &Path) -> Result<SafetensorsStream> {
        Self::open_with(path, |_| {}).map(|(stream, _)| stream)
    }

    /// [`SafetensorsStream::open`], each item's label (`None` without labels) given to
    /// `label` in order as the labels are read in blocks and checked (never all held here),
    /// with the class names they were checked against.
    fn open_with(
        path: &Path,
        mut label: impl FnMut(Option<u32>),
    ) -> Result<(SafetensorsStream, Vec<String>)> {
        let CheckedHeader {
            mut file,
            header: obj,
            tensors,
            data_start,
        } = CheckedHeader::read(path)?;
        let hlen = data_start - 8;
        let (names, _) = layout(|n| obj.contains_key(n), path)?;
        let mut x = None;
        let mut y = None;
        for t in tensors {
            if t.name == names.x {
                x = Some((t.dtype, t.shape, t.begin));
            } else if t.name == names.y {
                y = Some((t.dtype, t.shape, t.begin, t.len));
            }
        }
        let (dtype, shape, b) =
            x.ok_or_else(|| bad(path, format!("has no tensor `{}` (items, ...)", names.x)))?;
        let dtype = Dtype::of(&dtype, &names, path)?;
        let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
        check_items_shape(&dims, &names, path)?;
        let item_shape = x_item_shape(&dims);
        // Labels, as the whole loader checks them: read in blocks, never all at once.
        let metadata = |key: &str| {
            obj.get("__metadata__")
                .and_then(|m| m.get(key))
                .and_then(Value::as_str)
        };
        let listed = listed_classes(metadata("classes"));
        let ids = match metadata("ids") {
            Some(_) => StreamIds::Listed(metadata_ids(metadata("ids"), dims[0], path)?),
            None => StreamIds::Positions,
        };
        let mut check = LabelCheck::new(listed, "the metadata `classes`", path)?;
        if let Some((ydtype, yshape, yb, ylen)) = y {
            if yshape != [shape[0]] {
                return Err(bad(
                    path,
                    format!(
                        "tensor `{}` has shape {yshape:?}; expected ({},)",
                        names.y, shape[0]
                    ),
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
                        std::io::Error::new(std::io::ErrorKind::UnexpectedEof, names.y),
                    ));
                }
                let first = (at / size) as usize;
                for l in y_labels(&buf, &ydtype, names.y, first, path)? {
                    check.add(Some(l))?;
                    label(Some(l));
                }
                at += buf.len() as u64;
            }
        } else {
            // Without labels every label is absent, which no class rule can refuse.
            (0..dims[0]).for_each(|_| label(None));
        }
        let classes = check.finish()?;
        let stream = SafetensorsStream {
            path: path.to_path_buf(),
            file,
            name: names.x,
            ids,
            dtype,
            n: dims[0],
            item_shape,
            base: 8 + hlen + b,
            next: 0,
        };
        Ok((stream, classes))
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
        let size = self.dtype.size();
        let mut buf = vec![0u8; k * item * size];
        self.file
            .seek(SeekFrom::Start(self.base + (start * item * size) as u64))
            .and_then(|_| self.file.read_exact(&mut buf))
            .map_err(|e| Error::io(&self.path, e))?;
        let x = x_values(&buf, self.dtype, self.name, start * item, &self.path)?;
        self.next += k;
        Ok(Some(Chunk {
            start,
            ids: self.ids.range(start, k),
            x,
        }))
    }
}
