//! NumPy's files as embedding sources. An `.npy` file (`np.save`) is one array `(n, d)` of
//! little-endian `f4`, `f2` or `f8` in C order: an unlabeled pool whose ids are positions. An
//! `.npz` file (`np.savez`, stored members, or `np.savez_compressed`, deflated ones) holds the
//! safetensors embedding layout as arrays: `features` `(n, d)` (required), `labels` `(n,)` of
//! any integer type (a negative label is an unlabeled item, as `datasets` and scikit-learn
//! write "no label"), `ids` `(n,)` of unicode strings or integers, `classes` `(C,)` of unicode
//! strings, a test split `test_features` `(m, d)` and `test_labels` `(m,)`, every test item
//! labeled, and what a person is shown of each item: `display` `(n,)` (its text) or
//! `display_image` `(n,)` (its image file's path). Other members are ignored.
//!
//! Headers (format versions 1.0, 2.0 and 3.0, `numpy.lib.format`) are parsed as the literal
//! dictionary they are, never evaluated; an object dtype is refused, so nothing is unpickled.
//! Every size is checked before anything is allocated: a header within numpy's own 10000-byte
//! limit, the shape's product without overflow, the bytes the shape needs equal to the bytes
//! the file or member holds (a zip member's declared size, checked against the deflate ratio
//! and against what inflates, whose CRC-32 is checked once read). `f8` values are narrowed to
//! f32 and refused by position when not finite or beyond f32's range. A Fortran-order array is
//! refused with the fix (`np.ascontiguousarray`): rows are read as they lie in the file.
//!
//! Both ways of reading share one reader: the whole read drains the stream of the pool, so a
//! streamed item equals the loaded one bit for bit; the ids, labels and classes are read and
//! checked when the stream opens (the checks safetensors' embedding layout makes, shared with
//! it). Deflated members are inflated by `flate2` from the byte range the `zip` crate locates,
//! so the `zip` crate keeps no decompressor of its own (see Cargo.toml).

use super::numeric::{self, check_names, NumericTable, TargetPart};
use super::safetensors::{check_ids, check_test_split};
use crate::data::display::{DisplayKind, Displays};
use crate::data::labels::LabelCheck;
use crate::data::plan::ImagePlan;
use crate::data::stream::{
    drain, position_ids, Chunk, Format, ItemStream, Items, Loaded, PoolLabels, StreamIds,
};
use crate::error::{DataProblem, Error, Result};
use crate::hub::Hub;
use crate::observe::Observer;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// An `.npy` file: one array `(n, d)`, an unlabeled pool.
pub(crate) struct Npy<'a>(pub(crate) &'a Path);

/// An `.npz` file: the embedding layout's arrays (see the module docs).
pub(crate) struct Npz<'a>(pub(crate) &'a Path);

impl Format for Npy<'_> {
    fn name(&self) -> String {
        self.0.display().to_string()
    }

    fn open(
        &self,
        _hub: &Hub,
        _observer: &mut dyn Observer,
        _plan: Option<&ImagePlan>,
    ) -> Result<Box<dyn ItemStream>> {
        Ok(Box::new(npy_stream(self.0)?))
    }

    fn load(
        &self,
        _hub: &Hub,
        _observer: &mut dyn Observer,
        _plan: Option<&ImagePlan>,
    ) -> Result<Loaded> {
        let mut stream = npy_stream(self.0)?;
        Ok(Loaded {
            pool: stream.drained(Vec::new(), Vec::new())?,
            test: None,
        })
    }

    fn pool_labels(&self, _hub: &Hub, _observer: &mut dyn Observer) -> Result<PoolLabels> {
        let stream = npy_stream(self.0)?;
        Ok(PoolLabels {
            labels: vec![None; stream.n],
            classes: Vec::new(),
        })
    }
}

impl Format for Npz<'_> {
    fn name(&self) -> String {
        self.0.display().to_string()
    }

    fn open(
        &self,
        _hub: &Hub,
        _observer: &mut dyn Observer,
        _plan: Option<&ImagePlan>,
    ) -> Result<Box<dyn ItemStream>> {
        let npz = NpzFile::open(self.0)?;
        let (stream, _) = npz.pool()?;
        Ok(Box::new(stream))
    }

    fn load(
        &self,
        _hub: &Hub,
        _observer: &mut dyn Observer,
        _plan: Option<&ImagePlan>,
    ) -> Result<Loaded> {
        let npz = NpzFile::open(self.0)?;
        let (mut stream, labels) = npz.pool()?;
        let pool = stream.drained(labels.labels, labels.classes)?;
        let test = npz.test(&pool)?;
        Ok(Loaded { pool, test })
    }

    fn load_test(&self, _hub: &Hub, _observer: &mut dyn Observer) -> Result<Option<Items>> {
        let npz = NpzFile::open(self.0)?;
        let (stream, labels) = npz.pool()?;
        // The test split is checked against the pool's shape and classes; no pool item is read.
        let pool = Items {
            ids: Vec::new(),
            x: Vec::new(),
            item_shape: vec![stream.d],
            labels: Vec::new(),
            classes: labels.classes,
        };
        npz.test(&pool)
    }

    fn pool_labels(&self, _hub: &Hub, _observer: &mut dyn Observer) -> Result<PoolLabels> {
        let npz = NpzFile::open(self.0)?;
        npz.pool().map(|(_, labels)| labels)
    }

    fn displays(&self) -> Result<Option<Displays>> {
        let npz = NpzFile::open(self.0)?;
        let (name, kind) = match (
            npz.members.contains_key(DISPLAY),
            npz.members.contains_key(DISPLAY_IMAGE),
        ) {
            (false, false) => return Ok(None),
            (true, true) => {
                return Err(bad(
                    self.0,
                    format!("has both `{DISPLAY}` and `{DISPLAY_IMAGE}` arrays; keep one"),
                ))
            }
            (true, false) => (DISPLAY, DisplayKind::Text),
            (false, true) => (DISPLAY_IMAGE, DisplayKind::Image),
        };
        let mut features = npz.bytes(FEATURES)?.ok_or_else(|| npz.missing(FEATURES))?;
        let h = features.header()?;
        let (n, _) = features_shape(&h, &features)?;
        let values = npz.strings(name, Some(n))?.unwrap_or_default();
        Displays::new(kind, values, n, self.0, &format!("array `{name}`")).map(Some)
    }
}

fn bad(path: &Path, m: impl Into<String>) -> Error {
    Error::data(path, DataProblem::Other(m.into()))
}

/// numpy's own limit on a header it reads (`max_header_size`): no array alkit reads needs more.
const MAX_HEADER: usize = 10_000;

/// deflate's largest expansion (a 258-byte match per 2 bits, about 1032 to 1): a member whose
/// declared size exceeds its compressed bytes times this lies about its size.
const MAX_DEFLATE_RATIO: u64 = 1032;

/// The element types alkit reads from an array (all little-endian).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Dtype {
    F16,
    F32,
    F64,
    /// An integer of `size` bytes.
    Int {
        size: usize,
        signed: bool,
    },
    /// numpy's `<U{chars}`: UTF-32 code points, padded with zeros.
    Unicode {
        chars: usize,
    },
}

impl std::fmt::Display for Dtype {
    /// numpy's name of the dtype.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Dtype::F16 => f.write_str("float16"),
            Dtype::F32 => f.write_str("float32"),
            Dtype::F64 => f.write_str("float64"),
            Dtype::Int { size, signed } => {
                write!(f, "{}int{}", if signed { "" } else { "u" }, size * 8)
            }
            Dtype::Unicode { chars } => write!(f, "<U{chars}"),
        }
    }
}

impl Dtype {
    /// Bytes per element (`None` past `usize`).
    fn size(self) -> Option<usize> {
        match self {
            Dtype::F16 => Some(2),
            Dtype::F32 => Some(4),
            Dtype::F64 => Some(8),
            Dtype::Int { size, .. } => Some(size),
            Dtype::Unicode { chars } => chars.checked_mul(4),
        }
    }

    /// The dtype a header's `descr` names, or why alkit does not read it.
    fn parse(descr: &str) -> std::result::Result<Dtype, String> {
        // By character: a hostile descr may start with a multi-byte one.
        let mut chars = descr.chars();
        let order = chars.next().map(String::from).unwrap_or_default();
        let (order, code) = (order.as_str(), chars.as_str());
        if descr.contains('O') {
            return Err(format!(
                "has dtype `{descr}` (Python objects): refused, alkit never unpickles"
            ));
        }
        if order == ">" {
            return Err(format!(
                "has big-endian dtype `{descr}`; save it little-endian (`a.astype('<{code}')`)"
            ));
        }
        if !matches!(order, "<" | "|") {
            return Err(format!("has dtype `{descr}`, which alkit does not read"));
        }
        Ok(match code {
            "f2" => Dtype::F16,
            "f4" => Dtype::F32,
            "f8" => Dtype::F64,
            "i1" | "i2" | "i4" | "i8" | "u1" | "u2" | "u4" | "u8" => Dtype::Int {
                size: usize::from(code.as_bytes()[1] - b'0'),
                signed: code.starts_with('i'),
            },
            _ if code.starts_with('U') => match code[1..].parse::<usize>() {
                Ok(chars) if chars > 0 => Dtype::Unicode { chars },
                _ => return Err(format!("has dtype `{descr}`, which alkit does not read")),
            },
            _ => return Err(format!("has dtype `{descr}`, which alkit does not read")),
        })
    }
}

/// One array's header: what its `descr`, `fortran_order` and `shape` say.
#[derive(Debug)]
struct Header {
    dtype: Dtype,
    shape: Vec<usize>,
    /// Bytes of the data after the header: the shape's product times the element size.
    data_len: u64,
}

/// The literal dictionary of a header, parsed (never evaluated): `descr` a string,
/// `fortran_order` a boolean, `shape` a tuple of integers, each exactly once.
fn parse_dict(text: &str) -> std::result::Result<(String, bool, Vec<u64>), String> {
    let mut p = Lit {
        s: text.as_bytes(),
        at: 0,
    };
    p.ws();
    p.eat(b'{')?;
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    loop {
        p.ws();
        if p.peek() == Some(b'}') {
            p.at += 1;
            break;
        }
        let key = p.string()?;
        p.ws();
        p.eat(b':')?;
        p.ws();
        let repeated = match key.as_str() {
            "descr" => {
                if p.peek() == Some(b'[') {
                    return Err("a structured dtype (alkit reads plain arrays)".into());
                }
                descr.replace(p.string()?).is_some()
            }
            "fortran_order" => fortran.replace(p.boolean()?).is_some(),
            "shape" => shape.replace(p.tuple()?).is_some(),
            k => return Err(format!("an unknown key `{k}`")),
        };
        if repeated {
            return Err(format!("the key `{key}` twice"));
        }
        p.ws();
        match p.peek() {
            Some(b',') => p.at += 1,
            Some(b'}') => {}
            _ => return Err("no `,` or `}` after a value".into()),
        }
    }
    // numpy pads the dictionary with spaces up to a newline.
    if p.s[p.at..].iter().any(|b| !b.is_ascii_whitespace()) {
        return Err("text after the dictionary".into());
    }
    match (descr, fortran, shape) {
        (Some(d), Some(f), Some(s)) => Ok((d, f, s)),
        _ => Err("not all of `descr`, `fortran_order` and `shape`".into()),
    }
}

/// A cursor over a header's literal.
struct Lit<'a> {
    s: &'a [u8],
    at: usize,
}

impl Lit<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.at).copied()
    }

    fn ws(&mut self) {
        while self.peek().is_some_and(|b| b == b' ' || b == b'\t') {
            self.at += 1;
        }
    }

    fn eat(&mut self, b: u8) -> std::result::Result<(), String> {
        if self.peek() != Some(b) {
            return Err(format!("no `{}` at byte {}", b as char, self.at));
        }
        self.at += 1;
        Ok(())
    }

    /// A quoted string without escapes (no key or dtype numpy writes has any).
    fn string(&mut self) -> std::result::Result<String, String> {
        let q = self.peek().filter(|&q| q == b'\'' || q == b'"');
        let q = q.ok_or_else(|| format!("no string at byte {}", self.at))?;
        self.at += 1;
        let start = self.at;
        while let Some(b) = self.peek() {
            if b == q {
                let s = String::from_utf8_lossy(&self.s[start..self.at]).into_owned();
                self.at += 1;
                return Ok(s);
            }
            if b == b'\\' {
                return Err("an escape in a string".into());
            }
            self.at += 1;
        }
        Err("an unterminated string".into())
    }

    fn boolean(&mut self) -> std::result::Result<bool, String> {
        for (word, v) in [(&b"True"[..], true), (&b"False"[..], false)] {
            if self.s[self.at..].starts_with(word) {
                self.at += word.len();
                return Ok(v);
            }
        }
        Err(format!("no True or False at byte {}", self.at))
    }

    /// `()`, `(n,)`, `(n, d)`, ... of non-negative integers.
    fn tuple(&mut self) -> std::result::Result<Vec<u64>, String> {
        self.eat(b'(')?;
        let mut dims = Vec::new();
        loop {
            self.ws();
            if self.peek() == Some(b')') {
                self.at += 1;
                return Ok(dims);
            }
            let start = self.at;
            while self.peek().is_some_and(|b| b.is_ascii_digit()) {
                self.at += 1;
            }
            let digits = std::str::from_utf8(&self.s[start..self.at]).unwrap_or("");
            let d = digits
                .parse::<u64>()
                .map_err(|_| format!("a shape entry that is not a size at byte {start}"))?;
            dims.push(d);
            if dims.len() > 32 {
                return Err("a shape of more than 32 dimensions".into());
            }
            self.ws();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b')') => {}
                _ => return Err(format!("no `,` or `)` in the shape at byte {}", self.at)),
            }
        }
    }
}

/// The uncompressed bytes of one array (an `.npy` file, or an `.npz` member), read in order,
/// their CRC-32 checked against the zip's once all were read.
struct ArrayBytes {
    /// The file, for errors.
    path: PathBuf,
    /// How errors name the array: "array `features`" or "the array".
    what: String,
    inner: flate2::CrcReader<Box<dyn Read + Send>>,
    /// Bytes the array holds, header included, and how many were read.
    size: u64,
    read: u64,
    /// The CRC-32 the zip declares (none for an `.npy` file).
    crc: Option<u32>,
}

impl ArrayBytes {
    fn bad(&self, m: impl std::fmt::Display) -> Error {
        bad(&self.path, format!("{} {m}", self.what))
    }

    /// Exactly `len` bytes; the buffer grows with the bytes that arrive, never ahead of them,
    /// so a member that declares more than it holds allocates only what it holds.
    fn take(&mut self, len: u64) -> Result<Vec<u8>> {
        let mut buf = Vec::with_capacity(len.min(1 << 24) as usize);
        (&mut self.inner)
            .take(len)
            .read_to_end(&mut buf)
            .map_err(|e| self.bad(format!("is unreadable ({e})")))?;
        if (buf.len() as u64) < len {
            return Err(self.bad(format!(
                "is truncated: {} bytes where {} were declared",
                self.read + buf.len() as u64,
                self.size
            )));
        }
        self.read += len;
        Ok(buf)
    }

    /// Parses the header (the file's prefix) and checks the data's length against the shape.
    fn header(&mut self) -> Result<Header> {
        let pre = self.take(8)?;
        if &pre[..6] != b"\x93NUMPY" {
            return Err(self.bad("is not an .npy array (no \\x93NUMPY magic)"));
        }
        let (major, minor) = (pre[6], pre[7]);
        let hlen = match (major, minor) {
            (1, 0) => {
                let b = self.take(2)?;
                u64::from(u16::from_le_bytes([b[0], b[1]]))
            }
            (2, 0) | (3, 0) => {
                let b = self.take(4)?;
                u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            }
            _ => {
                return Err(self.bad(format!(
                    "has format version {major}.{minor}; alkit reads 1.0, 2.0 and 3.0"
                )))
            }
        };
        if hlen > MAX_HEADER as u64 || self.read + hlen > self.size {
            return Err(self.bad(format!(
                "has a header of {hlen} bytes (at most {MAX_HEADER}, within the {} bytes held)",
                self.size
            )));
        }
        let text = self.take(hlen)?;
        let text = std::str::from_utf8(&text)
            .map_err(|_| self.bad("has a header that is not text"))?
            .to_string();
        let (descr, fortran, shape) = parse_dict(&text)
            .map_err(|m| self.bad(format!("has a malformed header ({m}): {}", text.trim())))?;
        let dtype = Dtype::parse(&descr).map_err(|m| self.bad(m))?;
        let shape: Vec<usize> = shape
            .iter()
            .map(|&d| usize::try_from(d))
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| self.bad(format!("has a shape {shape:?} past this machine's sizes")))?;
        let data_len = dtype
            .size()
            .and_then(|s| crate::limits::product(&shape)?.checked_mul(s as u64))
            .ok_or_else(|| {
                self.bad(format!("has shape {shape:?} of `{descr}`, which overflows"))
            })?;
        if fortran && shape.iter().filter(|&&d| d > 1).count() > 1 {
            return Err(self.bad(format!(
                "is stored in Fortran (column) order, shape {shape:?}; save \
                 `np.ascontiguousarray(a)` instead"
            )));
        }
        let held = self.size - self.read;
        if held != data_len {
            return Err(self.bad(format!(
                "has shape {shape:?} of `{descr}`, which needs {data_len} bytes after its \
                 header; the file holds {held}"
            )));
        }
        Ok(Header {
            dtype,
            shape,
            data_len,
        })
    }

    /// Every byte was read: checks the CRC-32 the zip declares.
    fn finish(&mut self) -> Result<()> {
        let mut more = [0u8; 1];
        let extra = self.inner.read(&mut more).unwrap_or(0);
        let bad_end = self.read != self.size || extra != 0;
        let crc = self.inner.crc().sum();
        if bad_end || self.crc.is_some_and(|c| c != crc) {
            return Err(self.bad(format!(
                "does not match the zip's CRC-32 or size (CRC {crc:08x}, declared {})",
                self.crc.map_or("none".into(), |c| format!("{c:08x}"))
            )));
        }
        Ok(())
    }

    /// The whole data of an array whose header was read.
    fn rest(&mut self, h: &Header) -> Result<Vec<u8>> {
        let b = self.take(h.data_len)?;
        self.finish()?;
        Ok(b)
    }
}

/// An `.npy` file's bytes.
fn npy_bytes(path: &Path) -> Result<ArrayBytes> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let size = file.metadata().map_err(|e| Error::io(path, e))?.len();
    if size < 10 {
        return Err(bad(path, format!("not an .npy file: {size} bytes")));
    }
    Ok(ArrayBytes {
        path: path.to_path_buf(),
        what: "the array".into(),
        inner: flate2::CrcReader::new(Box::new(std::io::BufReader::new(file))),
        size,
        read: 0,
        crc: None,
    })
}

/// A float array `(n, d)` with `n, d > 0`, as an embedding's features must be.
fn features_shape(h: &Header, b: &ArrayBytes) -> Result<(usize, usize)> {
    match (h.dtype, h.shape.as_slice()) {
        (Dtype::F16 | Dtype::F32 | Dtype::F64, &[n, d]) if n > 0 && d > 0 => Ok((n, d)),
        (Dtype::F16 | Dtype::F32 | Dtype::F64, s) => Err(b.bad(format!(
            "has shape {s:?}; expected (n, d) with n > 0 and d > 0"
        ))),
        (t, _) => Err(b.bad(format!("is {t}; expected float32, float16 or float64"))),
    }
}

/// Values from little-endian bytes, checked finite and (for f8) within f32's range; `first` is
/// the flat position of the first value, for the error.
fn float_values(bytes: &[u8], dtype: Dtype, first: usize, b: &ArrayBytes) -> Result<Vec<f32>> {
    let at = |i: usize, v: f64| {
        b.bad(format!(
            "holds {v} at flat position {}, not finite or beyond float32's range",
            first + i
        ))
    };
    let x: Vec<f32> = match dtype {
        Dtype::F32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        Dtype::F16 => bytes
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        Dtype::F64 => {
            let mut x = Vec::with_capacity(bytes.len() / 8);
            for (i, c) in bytes.chunks_exact(8).enumerate() {
                let v = f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
                // Narrowed as numpy's astype(float32) does (round to nearest); a finite f8
                // past f32's range would become infinite.
                let f = v as f32;
                if !f.is_finite() {
                    return Err(at(i, v));
                }
                x.push(f);
            }
            x
        }
        t => return Err(b.bad(format!("is {t}; expected float32, float16 or float64"))),
    };
    if let Some(i) = x.iter().position(|v| !v.is_finite()) {
        return Err(at(i, f64::from(x[i])));
    }
    Ok(x)
}

/// The pool's features read in order, a chunk at a time.
struct NumpyStream {
    bytes: ArrayBytes,
    dtype: Dtype,
    n: usize,
    d: usize,
    item_shape: Vec<usize>,
    /// The file's ids, or positions.
    ids: StreamIds,
    next: usize,
}

/// An `.npy` file's stream, its header checked.
fn npy_stream(path: &Path) -> Result<NumpyStream> {
    let mut bytes = npy_bytes(path)?;
    let h = bytes.header()?;
    let (n, d) = features_shape(&h, &bytes)?;
    Ok(NumpyStream {
        bytes,
        dtype: h.dtype,
        n,
        d,
        item_shape: vec![d],
        ids: StreamIds::Positions,
        next: 0,
    })
}

impl NumpyStream {
    /// Every item, with the pool's `labels` and `classes` (read when the stream opened).
    fn drained(&mut self, labels: Vec<Option<u32>>, classes: Vec<String>) -> Result<Items> {
        let labels = if labels.is_empty() {
            vec![None; self.n]
        } else {
            labels
        };
        let (ids, x) = drain(self)?.map_or_else(Default::default, |c| (c.ids, c.x));
        Ok(Items {
            ids,
            x,
            item_shape: self.item_shape.clone(),
            labels,
            classes,
        })
    }
}

impl ItemStream for NumpyStream {
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
        let Some(size) = self.dtype.size() else {
            return Err(self.bytes.bad("holds no float array"));
        };
        // k * d * size fits: the header's product was checked against the bytes held.
        let buf = self.bytes.take((k * self.d * size) as u64)?;
        let x = float_values(&buf, self.dtype, start * self.d, &self.bytes)?;
        self.next += k;
        if self.next == self.n {
            self.bytes.finish()?;
        }
        Ok(Some(Chunk {
            start,
            ids: self.ids.range(start, k),
            x,
        }))
    }
}

/// The arrays of an embedding `.npz` (see the module docs).
const FEATURES: &str = "features";
const LABELS: &str = "labels";
const IDS: &str = "ids";
const CLASSES: &str = "classes";
const TEST_FEATURES: &str = "test_features";
const TEST_LABELS: &str = "test_labels";
/// Each item's text, shown to a person instead of its features.
const DISPLAY: &str = "display";
/// Each item's image file (relative to the `.npz`'s folder, or absolute), shown instead.
const DISPLAY_IMAGE: &str = "display_image";

/// An `.npz` embedding file that keeps a classifier's last layer beside its `features`: the
/// arrays `crate::checkpoint` reads to open it as a checkpoint (`head.weight`, `head.bias`,
/// `logits`, `classes`). Every present array's header is read and checked when it opens; values
/// are read only when asked for, after the caller has checked the shapes.
pub(crate) struct NpzHead {
    file: NpzFile,
    shapes: std::collections::HashMap<&'static str, Vec<usize>>,
}

impl NpzHead {
    /// The arrays a head is read from.
    const ARRAYS: [&'static str; 4] = [FEATURES, "head.weight", "head.bias", "logits"];

    /// `None` when `path` is not a readable `.npz` holding both `features` and `head.weight`
    /// (it then opens, and fails, as whatever else it is); a present array whose header is
    /// bad is an error naming it.
    pub(crate) fn open(path: &Path) -> Result<Option<NpzHead>> {
        let Ok(file) = NpzFile::open(path) else {
            return Ok(None);
        };
        if !(file.members.contains_key(FEATURES) && file.members.contains_key("head.weight")) {
            return Ok(None);
        }
        let mut shapes = std::collections::HashMap::new();
        for name in Self::ARRAYS {
            if let Some(mut b) = file.bytes(name)? {
                let h = b.header()?;
                if !matches!(h.dtype, Dtype::F16 | Dtype::F32 | Dtype::F64) {
                    return Err(b.bad(format!(
                        "is {}; expected float32, float16 or float64",
                        h.dtype
                    )));
                }
                shapes.insert(name, h.shape);
            }
        }
        Ok(Some(NpzHead { file, shapes }))
    }

    /// The shape of array `name`, `None` when the file has none.
    pub(crate) fn shape(&self, name: &str) -> Option<&[usize]> {
        self.shapes.get(name).map(Vec::as_slice)
    }

    /// The values of array `name` (one of the head's arrays), as `f32`: every one, or with
    /// `rows` only the first rows of a two-dimensional array.
    pub(crate) fn values(&self, name: &str, rows: Option<usize>) -> Result<Vec<f32>> {
        let mut b = self
            .file
            .bytes(name)?
            .ok_or_else(|| self.file.missing(name))?;
        let h = b.header()?;
        let data = match (rows, h.shape.as_slice()) {
            (Some(r), &[n, d]) => {
                // Within the array's bytes, whose size the header check bounded.
                let size = h.dtype.size().unwrap_or(1) as u64;
                let len = (r.min(n) as u64)
                    .checked_mul(d as u64)
                    .and_then(|v| v.checked_mul(size))
                    .unwrap_or(h.data_len)
                    .min(h.data_len);
                b.take(len)?
            }
            _ => b.rest(&h)?,
        };
        float_values(&data, h.dtype, 0, &b)
    }

    /// The class names of the array `classes`, `None` when absent.
    pub(crate) fn classes(&self) -> Result<Option<Vec<String>>> {
        self.file.strings(CLASSES, None)
    }
}

/// Where one member's bytes lie in the zip.
#[derive(Clone)]
struct Member {
    /// The offset of its (maybe compressed) bytes, and their length.
    start: u64,
    stored_len: u64,
    /// Its uncompressed size and CRC-32, as the central directory declares them.
    size: u64,
    crc: u32,
    deflated: bool,
}

/// An `.npz` file's members, located (nothing read yet).
struct NpzFile {
    path: PathBuf,
    members: std::collections::HashMap<String, Member>,
}

impl NpzFile {
    /// Reads the zip's directory and locates every `NAME.npy` member: each within the file,
    /// stored or deflated, not encrypted, with a size deflate can reach.
    fn open(path: &Path) -> Result<NpzFile> {
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        let file_len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        let mut zip = zip::ZipArchive::new(std::io::BufReader::new(file))
            .map_err(|e| bad(path, format!("not an .npz (zip) file: {e}")))?;
        let mut members = std::collections::HashMap::new();
        for i in 0..zip.len() {
            let f = zip
                .by_index_raw(i)
                .map_err(|e| bad(path, format!("not an .npz (zip) file: member {i}: {e}")))?;
            let Some(name) = f.name().strip_suffix(".npy").map(str::to_string) else {
                continue;
            };
            let what = format!("array `{name}`");
            let deflated = match f.compression() {
                zip::CompressionMethod::Stored => false,
                // The constant, not the variant: the variant exists only with the crate's
                // deflate features, which alkit leaves off (it inflates members itself).
                m if m == zip::CompressionMethod::DEFLATE => true,
                m => {
                    return Err(bad(
                        path,
                        format!("{what} is compressed by {m:?}; alkit reads stored or deflated members (np.savez, np.savez_compressed)"),
                    ))
                }
            };
            if f.encrypted() {
                return Err(bad(path, format!("{what} is encrypted")));
            }
            let start = f.data_start().unwrap_or(u64::MAX);
            let (stored_len, size) = (f.compressed_size(), f.size());
            if start.checked_add(stored_len).is_none_or(|e| e > file_len)
                || (!deflated && stored_len != size)
                || (deflated && size > stored_len.saturating_mul(MAX_DEFLATE_RATIO))
            {
                return Err(bad(
                    path,
                    format!(
                        "{what}: a member of {stored_len} bytes ({size} uncompressed) at byte \
                         {start} of a {file_len}-byte file"
                    ),
                ));
            }
            let m = Member {
                start,
                stored_len,
                size,
                crc: f.crc32(),
                deflated,
            };
            if members.insert(name, m).is_some() {
                return Err(bad(path, format!("{what} is in the zip twice")));
            }
        }
        Ok(NpzFile {
            path: path.to_path_buf(),
            members,
        })
    }

    /// The bytes of member `name`, `None` when the file has none.
    fn bytes(&self, name: &str) -> Result<Option<ArrayBytes>> {
        let Some(m) = self.members.get(name) else {
            return Ok(None);
        };
        let path = &self.path;
        let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        file.seek(SeekFrom::Start(m.start))
            .map_err(|e| Error::io(path, e))?;
        let raw = std::io::BufReader::new(file.take(m.stored_len));
        let inner: Box<dyn Read + Send> = if m.deflated {
            Box::new(flate2::read::DeflateDecoder::new(raw))
        } else {
            Box::new(raw)
        };
        Ok(Some(ArrayBytes {
            path: path.clone(),
            what: format!("array `{name}`"),
            inner: flate2::CrcReader::new(inner),
            size: m.size,
            read: 0,
            crc: Some(m.crc),
        }))
    }

    /// A whole one-dimensional array `name` of `n` elements: its bytes and dtype.
    fn vector(&self, name: &str, n: Option<usize>) -> Result<Option<(Vec<u8>, Dtype, usize)>> {
        let Some(mut b) = self.bytes(name)? else {
            return Ok(None);
        };
        let h = b.header()?;
        let len = match (h.shape.as_slice(), n) {
            (&[len], Some(n)) if len == n => len,
            (&[len], None) => len,
            (s, Some(n)) => return Err(b.bad(format!("has shape {s:?}; expected ({n},)"))),
            (s, None) => return Err(b.bad(format!("has shape {s:?}; expected (C,)"))),
        };
        Ok(Some((b.rest(&h)?, h.dtype, len)))
    }

    /// Labels `(n,)` of member `name` (negative: unlabeled), `None` when absent.
    fn labels(&self, name: &str, n: usize) -> Result<Option<Vec<Option<u32>>>> {
        let Some((bytes, dtype, _)) = self.vector(name, Some(n))? else {
            return Ok(None);
        };
        let what = format!("array `{name}`");
        let ints = integers(&bytes, dtype)
            .ok_or_else(|| bad(&self.path, format!("{what} is {dtype}; expected integers")))?;
        ints.into_iter()
            .enumerate()
            .map(|(i, v)| match v {
                v if v < 0 => Ok(None),
                v => u32::try_from(v).map(Some).map_err(|_| {
                    bad(
                        &self.path,
                        format!("{what}: label {v} of item {i} is too large"),
                    )
                }),
            })
            .collect::<Result<_>>()
            .map(Some)
    }

    /// Strings of a unicode member `name` (for `ids`, integers too), `None` when absent.
    fn strings(&self, name: &str, n: Option<usize>) -> Result<Option<Vec<String>>> {
        let Some((bytes, dtype, len)) = self.vector(name, n)? else {
            return Ok(None);
        };
        let what = format!("array `{name}`");
        if let (Some(ints), true) = (integers(&bytes, dtype), name == IDS) {
            return Ok(Some(ints.iter().map(i128::to_string).collect()));
        }
        let Dtype::Unicode { chars } = dtype else {
            return Err(bad(
                &self.path,
                format!("{what} is {dtype}; expected unicode strings (`<U`)"),
            ));
        };
        let mut out = Vec::with_capacity(len);
        for (i, item) in bytes.chunks_exact(4 * chars).enumerate() {
            let s: Option<String> = item
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                // numpy drops trailing zeros: they pad shorter strings.
                .collect::<Vec<u32>>()
                .into_iter()
                .rev()
                .skip_while(|&c| c == 0)
                .collect::<Vec<u32>>()
                .into_iter()
                .rev()
                .map(char::from_u32)
                .collect();
            out.push(s.ok_or_else(|| {
                bad(
                    &self.path,
                    format!("{what}: string {i} is not valid unicode"),
                )
            })?);
        }
        Ok(Some(out))
    }

    /// The pool's stream (features' header checked; ids, labels and classes read and checked)
    /// and its labels with the class names.
    fn pool(&self) -> Result<(NumpyStream, PoolLabels)> {
        let mut bytes = self
            .bytes(FEATURES)?
            .ok_or_else(|| self.missing(FEATURES))?;
        let h = bytes.header()?;
        let (n, d) = features_shape(&h, &bytes)?;
        let ids = match self.strings(IDS, Some(n))? {
            Some(ids) => {
                check_ids(&ids, n, "array `ids`", &self.path)?;
                StreamIds::Listed(ids)
            }
            None => StreamIds::Positions,
        };
        let classes = self.strings(CLASSES, None)?;
        let labels = self.labels(LABELS, n)?.unwrap_or_else(|| vec![None; n]);
        let mut check = LabelCheck::new(classes, "the array `classes`", &self.path)?;
        for &l in &labels {
            check.add(l)?;
        }
        let classes = check.finish()?;
        let stream = NumpyStream {
            bytes,
            dtype: h.dtype,
            n,
            d,
            item_shape: vec![d],
            ids,
            next: 0,
        };
        Ok((stream, PoolLabels { labels, classes }))
    }

    /// The test split, checked against `pool` (its dimension), `None` when the file has none.
    fn test(&self, pool: &Items) -> Result<Option<Items>> {
        let Some(mut bytes) = self.bytes(TEST_FEATURES)? else {
            if self.members.contains_key(TEST_LABELS) {
                return Err(bad(
                    &self.path,
                    format!("has labels `{TEST_LABELS}` but no items `{TEST_FEATURES}`"),
                ));
            }
            return Ok(None);
        };
        let h = bytes.header()?;
        let (m, d) = features_shape(&h, &bytes)?;
        let data = bytes.rest(&h)?;
        let x = float_values(&data, h.dtype, 0, &bytes)?;
        let labels = self
            .labels(TEST_LABELS, m)?
            .unwrap_or_else(|| vec![None; m]);
        let listed = self.strings(CLASSES, None)?;
        let mut check = LabelCheck::new(listed, "the array `classes`", &self.path)?;
        for &l in &labels {
            check.add(l)?;
        }
        // Class names as safetensors' test split has them: the array's, or 0..k of its own.
        let classes = check.finish()?;
        let test = Items {
            ids: position_ids(0, m),
            x,
            item_shape: vec![d],
            labels,
            classes,
        };
        check_test_split(
            pool,
            &test,
            "array",
            (TEST_FEATURES, TEST_LABELS),
            &self.path,
        )?;
        Ok(Some(test))
    }

    fn missing(&self, name: &str) -> Error {
        let mut have: Vec<&str> = self.members.keys().map(String::as_str).collect();
        have.sort_unstable();
        bad(
            &self.path,
            format!(
                "has no array `{name}` (an embedding .npz needs `features` (n, d); it holds {})",
                if have.is_empty() {
                    "no arrays".to_string()
                } else {
                    have.join(", ")
                }
            ),
        )
    }
}

/// The features, ids and arrays `target` of an `.npz` for regression (see
/// [`numeric`](super::numeric)): float arrays are numbers, integer arrays the caller's task
/// decides.
pub(crate) fn npz_numeric(path: &Path, target: &[String]) -> Result<NumericTable> {
    check_names(target, &[FEATURES, IDS, LABELS, TEST_FEATURES], path)?;
    let npz = NpzFile::open(path)?;
    let mut bytes = npz.bytes(FEATURES)?.ok_or_else(|| npz.missing(FEATURES))?;
    let h = bytes.header()?;
    let (n, d) = features_shape(&h, &bytes)?;
    let x = float_values(&bytes.rest(&h)?, h.dtype, 0, &bytes)?;
    let ids = match npz.strings(IDS, Some(n))? {
        Some(ids) => {
            check_ids(&ids, n, "array `ids`", path)?;
            ids
        }
        None => position_ids(0, n),
    };
    let parts = target
        .iter()
        .map(|name| npz.target(name, n))
        .collect::<Result<Vec<_>>>()?;
    Ok(NumericTable::new(ids, (x, d), parts))
}

impl NpzFile {
    /// The array `name` as targets of `n` items: float or integer, `(n,)` or `(n, k)`.
    fn target(&self, name: &str, n: usize) -> Result<TargetPart> {
        let mut b = self.bytes(name)?.ok_or_else(|| {
            let mut have: Vec<String> = self.members.keys().cloned().collect();
            have.sort_unstable();
            numeric::missing(&self.path, name, "array", &have)
        })?;
        let h = b.header()?;
        let width = TargetPart::width(&h.shape, n, name, &self.path)?;
        let data = b.rest(&h)?;
        let (values, float): (Vec<f64>, bool) = match h.dtype {
            Dtype::F64 => (
                data.chunks_exact(8)
                    .map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                    .collect(),
                true,
            ),
            Dtype::F32 => (
                data.chunks_exact(4)
                    .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                    .collect(),
                true,
            ),
            Dtype::F16 => (
                data.chunks_exact(2)
                    .map(|c| f64::from(half::f16::from_le_bytes([c[0], c[1]]).to_f32()))
                    .collect(),
                true,
            ),
            t => match integers(&data, t) {
                Some(ints) => (ints.into_iter().map(|v| v as f64).collect(), false),
                None => return Err(b.bad(format!("is {t}; expected numbers"))),
            },
        };
        Ok(TargetPart {
            name: name.to_string(),
            width,
            values,
            float,
        })
    }
}

/// The values of an integer array's little-endian bytes, `None` for another dtype.
fn integers(bytes: &[u8], dtype: Dtype) -> Option<Vec<i128>> {
    let Dtype::Int { size, signed } = dtype else {
        return None;
    };
    Some(
        bytes
            .chunks_exact(size)
            .map(|c| {
                let mut b = [0u8; 16];
                b[..size].copy_from_slice(c);
                // Sign-extend a negative signed value.
                if signed && c[size - 1] & 0x80 != 0 {
                    b[size..].fill(0xff);
                }
                i128::from_le_bytes(b)
            })
            .collect(),
    )
}
