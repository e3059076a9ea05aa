//! IDX files, the format of the original MNIST distribution, plain or gzip-compressed.
//!
//! Layout: a big-endian `u32` magic (`0x00000803` for `u8` images `(n, h, w)`, `0x00000801` for
//! `u8` labels `(n,)`), one big-endian `u32` per dimension, then the raw bytes. Gzip is detected
//! from the content (`1f 8b`), not the file name. Every malformation is reported as a
//! [`DataProblem`] naming the file.

use crate::error::{DataProblem, Error, Result};
use flate2::read::GzDecoder;
use std::io::{Read, Write};
use std::path::Path;

/// Magic of an idx3 `u8` image file.
pub const IMAGES_MAGIC: u32 = 0x0000_0803;
/// Magic of an idx1 `u8` label file.
pub const LABELS_MAGIC: u32 = 0x0000_0801;

/// Images read from an idx3 file: `n` items of `h x w` `u8` pixels, row-major.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdxImages {
    /// Pixels `(n, h, w)`, row-major.
    pub pixels: Vec<u8>,
    /// Number of images.
    pub n: usize,
    /// Rows per image.
    pub h: usize,
    /// Columns per image.
    pub w: usize,
}

/// Reads a file fully, un-gzipping it when it starts with the gzip magic.
fn read_maybe_gz(path: &Path) -> Result<Vec<u8>> {
    let raw = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::with_capacity(raw.len() * 4);
        GzDecoder::new(&raw[..])
            .read_to_end(&mut out)
            .map_err(|e| {
                Error::data(
                    path,
                    DataProblem::Other(format!("corrupt or truncated gzip stream: {e}")),
                )
            })?;
        Ok(out)
    } else {
        Ok(raw)
    }
}

/// Parses the header: checks the magic and returns the dimensions and the data offset.
fn parse_header(
    path: &Path,
    bytes: &[u8],
    magic: u32,
    rank: usize,
    kind: &'static str,
) -> Result<Vec<usize>> {
    let header = 4 * (1 + rank);
    if bytes.len() < 4 {
        return Err(Error::data(
            path,
            DataProblem::Truncated {
                expected: header,
                got: bytes.len(),
            },
        ));
    }
    let word = |i: usize| {
        u32::from_be_bytes([
            bytes[4 * i],
            bytes[4 * i + 1],
            bytes[4 * i + 2],
            bytes[4 * i + 3],
        ])
    };
    let found = word(0);
    if found != magic {
        return Err(Error::data(
            path,
            DataProblem::BadMagic {
                found,
                expected: magic,
                kind,
            },
        ));
    }
    if bytes.len() < header {
        return Err(Error::data(
            path,
            DataProblem::Truncated {
                expected: header,
                got: bytes.len(),
            },
        ));
    }
    let dims: Vec<usize> = (1..=rank).map(|i| word(i) as usize).collect();
    let expected = dims
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| {
            Error::data(
                path,
                DataProblem::Other(format!("dimensions {dims:?} overflow")),
            )
        })?;
    let got = bytes.len() - header;
    if got < expected {
        return Err(Error::data(path, DataProblem::Truncated { expected, got }));
    }
    if got > expected {
        return Err(Error::data(
            path,
            DataProblem::Trailing {
                extra: got - expected,
            },
        ));
    }
    Ok(dims)
}

/// Reads an idx3 `u8` image file (plain or gzip).
pub fn read_images(path: &Path) -> Result<IdxImages> {
    let bytes = read_maybe_gz(path)?;
    let dims = parse_header(path, &bytes, IMAGES_MAGIC, 3, "images")?;
    Ok(IdxImages {
        pixels: bytes[16..].to_vec(),
        n: dims[0],
        h: dims[1],
        w: dims[2],
    })
}

/// Reads an idx1 `u8` label file (plain or gzip).
pub fn read_labels(path: &Path) -> Result<Vec<u8>> {
    let bytes = read_maybe_gz(path)?;
    parse_header(path, &bytes, LABELS_MAGIC, 1, "labels")?;
    Ok(bytes[8..].to_vec())
}

/// Encodes images `(n, h, w)` as idx3 bytes (uncompressed).
pub fn encode_images(pixels: &[u8], n: usize, h: usize, w: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + pixels.len());
    for v in [IMAGES_MAGIC, n as u32, h as u32, w as u32] {
        out.extend_from_slice(&v.to_be_bytes());
    }
    out.extend_from_slice(pixels);
    out
}

/// Encodes labels as idx1 bytes (uncompressed).
pub fn encode_labels(labels: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + labels.len());
    for v in [LABELS_MAGIC, labels.len() as u32] {
        out.extend_from_slice(&v.to_be_bytes());
    }
    out.extend_from_slice(labels);
    out
}

/// Writes bytes gzip-compressed (best compression, no timestamp, so output is reproducible).
pub fn write_gz(path: &Path, bytes: &[u8]) -> Result<()> {
    let file = std::fs::File::create(path).map_err(|e| Error::io(path, e))?;
    let mut enc = flate2::GzBuilder::new()
        .mtime(0)
        .write(file, flate2::Compression::best());
    enc.write_all(bytes)
        .and_then(|_| enc.finish().map(|_| ()))
        .map_err(|e| Error::io(path, e))
}
