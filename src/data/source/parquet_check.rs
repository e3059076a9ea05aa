//! The checks a Parquet file passes before the `parquet` crate reads it: its footer and every
//! page header walked as Thrift compact protocol, typed as the crate reads them, every length
//! within the bytes left. Each guards against a crash or hang of the crate that fuzzing found.

use crate::error::{DataProblem, Error, Result};
use std::path::Path;

/// Checks a Parquet file's footer before the `parquet` crate reads it: the metadata length
/// fits the file, and the Thrift compact-protocol metadata, walked as the crate reads it (see
/// [`Ty`]), is well formed with every list and binary no longer than the bytes left to hold it
/// (each element takes at least one byte) and nesting at most 64 deep. The crate allocates a list's declared length up
/// front, so a 4-byte count of 2^31 in a small file aborted the program (found by fuzzing:
/// `memory allocation of 51913936800 bytes failed`), which no `catch_unwind` can contain.
pub(super) fn check_parquet_footer(path: &Path) -> Result<()> {
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
pub(super) fn check_parquet_pages(
    path: &Path,
    meta: &parquet::file::metadata::ParquetMetaData,
) -> Result<()> {
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
