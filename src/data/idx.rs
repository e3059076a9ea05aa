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

/// Reads a file fully, un-gzipping it when it starts with the gzip magic. A gzip stream is
/// inflated no further than its IDX header (`rank` dimensions) promises plus one byte, so a
/// small file that inflates to gigabytes is refused by `parse_header` (trailing bytes) without
/// ever holding them; a promise no gzip stream of this size can keep (deflate expands at most
/// ~1032x) is refused before anything is allocated.
fn read_maybe_gz(path: &Path, magic: u32, rank: usize) -> Result<Vec<u8>> {
    let raw = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    if !raw.starts_with(&[0x1f, 0x8b]) {
        return Ok(raw);
    }
    let corrupt = |e: std::io::Error| {
        Error::data(
            path,
            DataProblem::Other(format!("corrupt or truncated gzip stream: {e}")),
        )
    };
    let mut gz = GzDecoder::new(&raw[..]);
    let header_len = 4 * (1 + rank);
    let mut header = Vec::with_capacity(header_len);
    (&mut gz)
        .take(header_len as u64)
        .read_to_end(&mut header)
        .map_err(corrupt)?;
    // The data size the header promises (magic and dimensions are checked by `parse_header`).
    let promised = (header.len() == header_len && word(&header, 0) == magic)
        .then(|| data_len(&dims(&header, rank)))
        .flatten();
    let limit = match promised.and_then(|d| d.checked_add(header_len)) {
        Some(total) => {
            if total / 1100 > raw.len() {
                return Err(Error::data(
                    path,
                    DataProblem::Other(format!(
                        "the header promises {total} bytes, more than a {}-byte gzip stream \
                         can hold",
                        raw.len()
                    )),
                ));
            }
            total
        }
        // A short, foreign or overflowing header: `parse_header` reports it from what was read.
        None => header_len,
    };
    let mut out = header;
    out.reserve(
        limit
            .saturating_sub(out.len())
            .min(raw.len().saturating_mul(8)),
    );
    gz.take((limit - out.len()) as u64 + 1)
        .read_to_end(&mut out)
        .map_err(corrupt)?;
    Ok(out)
}

/// The big-endian word `i` of an IDX header (`bytes` holds at least `4 (i + 1)` bytes).
fn word(bytes: &[u8], i: usize) -> u32 {
    u32::from_be_bytes([
        bytes[4 * i],
        bytes[4 * i + 1],
        bytes[4 * i + 2],
        bytes[4 * i + 3],
    ])
}

/// The `rank` dimensions of a complete header.
fn dims(bytes: &[u8], rank: usize) -> Vec<usize> {
    (1..=rank).map(|i| word(bytes, i) as usize).collect()
}

/// The data bytes `dims` promise (one byte per value); `None` when the product overflows.
fn data_len(dims: &[usize]) -> Option<usize> {
    dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
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
    let found = word(bytes, 0);
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
    let dims = dims(bytes, rank);
    let expected = data_len(&dims).ok_or_else(|| {
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
    let mut r = ImagesReader::open(path)?;
    let pixels = r.read(r.n)?;
    r.finish()?;
    Ok(IdxImages {
        pixels,
        n: r.n,
        h: r.h,
        w: r.w,
    })
}

/// An idx3 `u8` image file (plain or gzip) read front to back, a few images at a time, with
/// the checks and errors of [`read_images`]: a plain file's length is checked against its
/// header when it is opened; a gzip stream is refused when its header promises more than the
/// stream can hold, and is inflated no further than the promise plus one byte.
pub struct ImagesReader {
    path: std::path::PathBuf,
    src: Box<dyn Read + Send>,
    gz: bool,
    /// Images in the file.
    pub n: usize,
    /// Rows per image.
    pub h: usize,
    /// Columns per image.
    pub w: usize,
    /// Data bytes the header promises.
    data: usize,
    /// Data bytes not read yet.
    left: usize,
}

impl ImagesReader {
    /// Opens `path` and checks its header; reads no image yet.
    pub fn open(path: &Path) -> Result<ImagesReader> {
        use std::io::BufRead;
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        let raw_len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        let mut buf = std::io::BufReader::new(file);
        let gz = buf
            .fill_buf()
            .map_err(|e| Error::io(path, e))?
            .starts_with(&[0x1f, 0x8b]);
        let mut src: Box<dyn Read + Send> = if gz {
            Box::new(flate2::bufread::GzDecoder::new(buf))
        } else {
            Box::new(buf)
        };
        let mut header = Vec::with_capacity(16);
        (&mut src)
            .take(16)
            .read_to_end(&mut header)
            .map_err(|e| read_error(path, gz, e))?;
        let truncated =
            |got: usize| Error::data(path, DataProblem::Truncated { expected: 16, got });
        if header.len() < 4 {
            return Err(truncated(header.len()));
        }
        let found = word(&header, 0);
        if found != IMAGES_MAGIC {
            return Err(Error::data(
                path,
                DataProblem::BadMagic {
                    found,
                    expected: IMAGES_MAGIC,
                    kind: "images",
                },
            ));
        }
        if header.len() < 16 {
            return Err(truncated(header.len()));
        }
        let d = dims(&header, 3);
        let data = data_len(&d).ok_or_else(|| {
            Error::data(
                path,
                DataProblem::Other(format!("dimensions {d:?} overflow")),
            )
        })?;
        let raw = usize::try_from(raw_len).unwrap_or(usize::MAX);
        if gz {
            let total = data.saturating_add(16);
            if total / 1100 > raw {
                return Err(Error::data(
                    path,
                    DataProblem::Other(format!(
                        "the header promises {total} bytes, more than a {raw}-byte gzip stream \
                         can hold"
                    )),
                ));
            }
        } else {
            let got = raw - 16;
            if got < data {
                return Err(Error::data(
                    path,
                    DataProblem::Truncated {
                        expected: data,
                        got,
                    },
                ));
            }
            if got > data {
                return Err(Error::data(
                    path,
                    DataProblem::Trailing { extra: got - data },
                ));
            }
        }
        Ok(ImagesReader {
            path: path.to_path_buf(),
            src,
            gz,
            n: d[0],
            h: d[1],
            w: d[2],
            data,
            left: data,
        })
    }

    /// The next `k` images' pixels `(k, h, w)`; `k` is at most the images not read yet.
    pub fn read(&mut self, k: usize) -> Result<Vec<u8>> {
        let want = k
            .checked_mul(self.h * self.w)
            .filter(|&b| b <= self.left)
            .ok_or_else(|| {
                Error::data(
                    &self.path,
                    DataProblem::Other(format!("{k} more images asked of the file")),
                )
            })?;
        let mut out = Vec::with_capacity(want);
        (&mut self.src)
            .take(want as u64)
            .read_to_end(&mut out)
            .map_err(|e| read_error(&self.path, self.gz, e))?;
        if out.len() < want {
            return Err(Error::data(
                &self.path,
                DataProblem::Truncated {
                    expected: self.data,
                    got: self.data - self.left + out.len(),
                },
            ));
        }
        self.left -= want;
        Ok(out)
    }

    /// Checks that a gzip stream holds nothing past the promised data (a plain file's
    /// length was checked when it was opened).
    pub fn finish(&mut self) -> Result<()> {
        if self.gz && self.left == 0 {
            let mut one = Vec::with_capacity(1);
            (&mut self.src)
                .take(1)
                .read_to_end(&mut one)
                .map_err(|e| read_error(&self.path, true, e))?;
            if !one.is_empty() {
                return Err(Error::data(
                    &self.path,
                    DataProblem::Trailing { extra: one.len() },
                ));
            }
        }
        Ok(())
    }
}

/// A read error: for a gzip stream a corrupt stream, else the file system's.
fn read_error(path: &Path, gz: bool, e: std::io::Error) -> Error {
    if gz {
        Error::data(
            path,
            DataProblem::Other(format!("corrupt or truncated gzip stream: {e}")),
        )
    } else {
        Error::io(path, e)
    }
}

/// Reads an idx1 `u8` label file (plain or gzip).
pub fn read_labels(path: &Path) -> Result<Vec<u8>> {
    let bytes = read_maybe_gz(path, LABELS_MAGIC, 1)?;
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

/// Writes bytes gzip-compressed (best compression, no timestamp, so output is reproducible),
/// atomically.
pub fn write_gz(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut enc = flate2::GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), flate2::Compression::best());
    let gz = enc
        .write_all(bytes)
        .and_then(|_| enc.finish())
        .map_err(|e| Error::io(path, e))?;
    crate::fsutil::write_atomic(path, &gz)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gz(bytes: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(bytes).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn gzip_inflation_stops_at_what_the_header_promises() {
        let dir = std::env::temp_dir().join(format!("alkit-idx-bomb-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // One 28x28 image promised, 64 MiB of zeros after it: the read stops one byte past the
        // promise and reports trailing data.
        let mut bytes = encode_images(&[7u8; 784], 1, 28, 28);
        bytes.resize(bytes.len() + (64 << 20), 0);
        let bomb = dir.join("bomb-images.gz");
        std::fs::write(&bomb, gz(&bytes)).unwrap();
        let e = read_images(&bomb).unwrap_err();
        assert!(
            matches!(
                &e,
                Error::Data {
                    problem: DataProblem::Trailing { extra: 1 },
                    ..
                }
            ),
            "{e}"
        );
        // A header promising more than any gzip stream of this size can hold: refused before
        // inflating.
        let mut header = encode_images(&[], 0, 0, 0)[..4].to_vec();
        for d in [60_000u32, 10_000, 10_000] {
            header.extend(d.to_be_bytes());
        }
        let liar = dir.join("liar-images.gz");
        std::fs::write(&liar, gz(&header)).unwrap();
        let e = read_images(&liar).unwrap_err().to_string();
        assert!(
            e.contains("liar-images.gz") && e.contains("promises"),
            "{e}"
        );
        // An honest file still reads.
        let ok = dir.join("ok-images.gz");
        std::fs::write(&ok, gz(&encode_images(&[3u8; 2 * 784], 2, 28, 28))).unwrap();
        assert_eq!(read_images(&ok).unwrap().n, 2);
        let _ = std::fs::remove_dir_all(dir);
    }
}
