//! Decoding PNG and JPEG images into `(c, h, w)` pixels, and writing grayscale PNGs.
//!
//! Pools of images (a folder a person labels, or the image column of a Hub dataset) arrive as
//! encoded files. Decoding normalises every supported colour type to 8 bits per channel:
//! grayscale (with or without alpha) becomes one channel, RGB/RGBA/palette/CMYK become three
//! (alpha is dropped). Errors name the file and say what is wrong; nothing panics on a corrupt
//! file.

pub use crate::data::resample::Filter;
use crate::error::{contain, DataProblem, Error, Result};
use serde::{Deserialize, Serialize};
use std::io::Cursor;
use std::path::Path;

/// One decoded image: 8-bit pixels in channel-major `(c, h, w)` order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// Channels: 1 (grayscale) or 3 (RGB).
    pub channels: usize,
    /// Rows.
    pub height: usize,
    /// Columns.
    pub width: usize,
    /// Pixels `(c, h, w)`, row-major.
    pub pixels: Vec<u8>,
}

impl Image {
    /// The same image with `channels` channels: grayscale is replicated into RGB; RGB is never
    /// reduced (the caller picks the larger count for a whole pool).
    pub fn with_channels(self, channels: usize) -> Image {
        if self.channels == channels || self.channels != 1 {
            return self;
        }
        let mut pixels = Vec::with_capacity(self.pixels.len() * channels);
        for _ in 0..channels {
            pixels.extend_from_slice(&self.pixels);
        }
        Image {
            channels,
            pixels,
            ..self
        }
    }
}

/// The most pixels (height x width) an image may declare: 64 Mi, far beyond any pool item a
/// classifier here trains on, and small enough that decoding one never takes more than a few
/// hundred MB. Checked from the header, before anything is decoded.
pub const MAX_PIXELS: u64 = 1 << 26;

/// Refuses a header's `width x height` above [`MAX_PIXELS`] (or zero), naming the file.
fn check_size(path: &Path, width: u64, height: u64) -> Result<()> {
    if width == 0 || height == 0 || width.saturating_mul(height) > MAX_PIXELS {
        return Err(bad(
            path,
            format!("declares {width}x{height} pixels; at most {MAX_PIXELS} are read"),
        ));
    }
    Ok(())
}

fn bad(path: &Path, what: impl Into<String>) -> Error {
    Error::data(path, DataProblem::Other(what.into()))
}

/// Decodes a PNG or JPEG (detected from the content, not the name). `path` names the image in
/// errors (a file, or `file.parquet#row` for embedded bytes).
pub fn decode(bytes: &[u8], path: &Path) -> Result<Image> {
    if bytes.starts_with(&[0x89, b'P', b'N', b'G']) {
        check_png_chunks(bytes, path)?;
        contain(path, "the PNG decoder", || decode_png(bytes, path))
    } else if bytes.starts_with(&[0xff, 0xd8]) {
        contain(path, "the JPEG decoder", || decode_jpeg(bytes, path))
    } else {
        Err(bad(path, "neither a PNG nor a JPEG image"))
    }
}

/// What a PNG's or JPEG's header says of the image [`decode`] would give.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Header {
    /// Rows.
    pub height: usize,
    /// Columns.
    pub width: usize,
    /// Channels after decoding: 1 (grayscale, with or without alpha) or 3 (the rest).
    pub channels: usize,
}

/// The [`Header`] of a PNG or JPEG, without decoding the pixels (and after the same checks as
/// [`decode`]).
pub fn header(bytes: &[u8], path: &Path) -> Result<Header> {
    if bytes.starts_with(&[0x89, b'P', b'N', b'G']) {
        check_png_chunks(bytes, path)?;
        contain(path, "the PNG decoder", || {
            let reader = png::Decoder::new(Cursor::new(bytes))
                .read_info()
                .map_err(|e| bad(path, format!("invalid PNG: {e}")))?;
            let h = reader.info();
            check_size(path, u64::from(h.width), u64::from(h.height))?;
            let channels = match h.color_type {
                png::ColorType::Grayscale | png::ColorType::GrayscaleAlpha => 1,
                png::ColorType::Rgb | png::ColorType::Rgba | png::ColorType::Indexed => 3,
            };
            Ok(Header {
                height: h.height as usize,
                width: h.width as usize,
                channels,
            })
        })
    } else if bytes.starts_with(&[0xff, 0xd8]) {
        contain(path, "the JPEG decoder", || {
            let mut d = jpeg_decoder::Decoder::new(Cursor::new(bytes));
            d.read_info()
                .map_err(|e| bad(path, format!("invalid JPEG: {e}")))?;
            let h = d.info().ok_or_else(|| bad(path, "JPEG without a header"))?;
            check_size(path, u64::from(h.width), u64::from(h.height))?;
            let channels = match h.pixel_format {
                jpeg_decoder::PixelFormat::L8 | jpeg_decoder::PixelFormat::L16 => 1,
                jpeg_decoder::PixelFormat::RGB24 | jpeg_decoder::PixelFormat::CMYK32 => 3,
            };
            Ok(Header {
                height: usize::from(h.height),
                width: usize::from(h.width),
                channels,
            })
        })
    } else {
        Err(bad(path, "neither a PNG nor a JPEG image"))
    }
}

/// How the resize before the crop keeps the aspect ratio.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CropMode {
    /// The shorter side becomes `resize`, the longer keeps the aspect ratio (torchvision's
    /// `Resize(int)`, timm's `crop_mode = "center"`).
    Center,
    /// Both sides become `resize` (timm's `crop_mode = "squash"`).
    Squash,
}

/// How a photo becomes a model's input of `channels x size x size` 8-bit pixels: resized (see
/// [`CropMode`]) with `filter`, then its centre `size x size` cut out, grayscale replicated to
/// RGB where the model takes three channels. This is torchvision's `Resize(resize)` +
/// `CenterCrop(size)` on a Pillow image, the evaluation transform of timm, pixel for pixel:
/// Pillow's resampling, the longer side `floor(resize * long / short)`, the crop's offset
/// `(scaled - size) / 2` rounded half to even, as Python's `round` does. Normalisation comes after, from the checkpoint's
/// [`Normalizer`](crate::data::Normalizer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Preprocess {
    /// Side of the square the model takes.
    pub size: usize,
    /// The side the image is resized to before the crop (`>= size`).
    pub resize: usize,
    /// How the aspect ratio is kept.
    pub mode: CropMode,
    /// The resampling filter.
    pub filter: Filter,
    /// Channels of the result: 1 or 3.
    pub channels: usize,
}

impl Preprocess {
    /// The largest side a preprocessed item may have (a model input, not a photo).
    pub const MAX_SIZE: usize = 2048;

    /// Shorter side to `side` (triangle filter), then the centre `side x side`: what a pool of
    /// photos of mixed sizes becomes when no checkpoint says otherwise.
    pub fn square(side: usize, channels: usize) -> Preprocess {
        Preprocess {
            size: side,
            resize: side,
            mode: CropMode::Center,
            filter: Filter::Bilinear,
            channels,
        }
    }

    /// Checks the sizes and channels, saying what is wrong.
    pub fn check(&self) -> std::result::Result<(), String> {
        if self.size == 0 || self.size > Self::MAX_SIZE {
            return Err(format!(
                "an input side of {} pixels (1 to {} are taken)",
                self.size,
                Self::MAX_SIZE
            ));
        }
        if self.resize < self.size || self.resize > 2 * Self::MAX_SIZE {
            return Err(format!(
                "a resize to {} pixels before a crop of {} (the crop must fit, at most {})",
                self.resize,
                self.size,
                2 * Self::MAX_SIZE
            ));
        }
        if self.channels != 1 && self.channels != 3 {
            return Err(format!(
                "{} input channels (images give 1 or 3)",
                self.channels
            ));
        }
        Ok(())
    }

    /// Shape of one preprocessed item `(channels, size, size)`.
    pub fn item_shape(&self) -> Vec<usize> {
        vec![self.channels, self.size, self.size]
    }
}

/// Python's `round(d / 2)` for a non-negative integer `d`: halves go to the even neighbour.
fn half_to_even(d: usize) -> usize {
    let k = d / 2;
    if d % 2 == 1 && k % 2 == 1 {
        k + 1
    } else {
        k
    }
}

impl Image {
    /// The image as `pre` says (see [`Preprocess`]); `path` names it in errors.
    pub fn preprocess(&self, pre: &Preprocess, path: &Path) -> Result<Image> {
        let (h, w) = (self.height, self.width);
        pre.check()
            .map_err(|m| bad(path, format!("cannot preprocess: {m}")))?;
        if h == 0 || w == 0 || self.pixels.len() != self.channels * h * w {
            return Err(bad(
                path,
                format!(
                    "cannot preprocess a {h}x{w} image of {} bytes",
                    self.pixels.len()
                ),
            ));
        }
        if self.channels > pre.channels {
            return Err(bad(
                path,
                format!(
                    "a {}-channel image for a model of {} channel(s)",
                    self.channels, pre.channels
                ),
            ));
        }
        let r = pre.resize;
        // torchvision's `_compute_resized_output_size`: the longer side truncated.
        let (sh, sw) = match pre.mode {
            CropMode::Squash => (r, r),
            CropMode::Center if w <= h => (r * h / w, r),
            CropMode::Center => (r, r * w / h),
        };
        let (sh, sw) = (sh.max(pre.size), sw.max(pre.size));
        let (top, left) = (half_to_even(sh - pre.size), half_to_even(sw - pre.size));
        let side = pre.size;
        let mut pixels = Vec::with_capacity(self.channels * side * side);
        if (sh, sw) == (h, w) {
            for plane in self.pixels.chunks_exact(h * w) {
                for y in top..top + side {
                    pixels.extend_from_slice(&plane[y * w + left..y * w + left + side]);
                }
            }
        } else {
            for plane in self.pixels.chunks_exact(h * w) {
                let scaled = crate::data::resample::resample(plane, (h, w), (sh, sw), pre.filter);
                for y in top..top + side {
                    pixels.extend_from_slice(&scaled[y * sw + left..y * sw + left + side]);
                }
            }
        }
        Ok(Image {
            channels: self.channels,
            height: side,
            width: side,
            pixels,
        }
        .with_channels(pre.channels))
    }
}

/// Walks a PNG's chunks (as far as the bytes go) and refuses what the `png` crate does not
/// check itself: a `PLTE` chunk whose length is not 3 to 768 bytes in whole RGB entries
/// (png 0.18.1 indexes past the end of such a palette and panics; found by fuzzing).
fn check_png_chunks(bytes: &[u8], path: &Path) -> Result<()> {
    let mut at = 8;
    while at + 8 <= bytes.len() {
        let len = u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
        let kind = &bytes[at + 4..at + 8];
        if kind == b"PLTE" && (len == 0 || !len.is_multiple_of(3) || len > 768) {
            return Err(bad(
                path,
                format!("invalid PNG: a palette (PLTE) of {len} bytes, not 1 to 256 RGB entries"),
            ));
        }
        if kind == b"IDAT" || kind == b"IEND" {
            break;
        }
        at = at.saturating_add(12).saturating_add(len as usize);
    }
    Ok(())
}

/// Interleaved `(h, w, c_in)` to channel-major `(c_out, h, w)`, keeping the first `c_out`
/// input channels.
fn planar(interleaved: &[u8], hw: usize, c_in: usize, c_out: usize) -> Vec<u8> {
    let mut out = vec![0u8; c_out * hw];
    for (p, px) in interleaved.chunks_exact(c_in).take(hw).enumerate() {
        for c in 0..c_out {
            out[c * hw + p] = px[c];
        }
    }
    out
}

fn decode_png(bytes: &[u8], path: &Path) -> Result<Image> {
    let mut decoder = png::Decoder::new(Cursor::new(bytes));
    decoder.set_transformations(png::Transformations::normalize_to_color8());
    let mut reader = decoder
        .read_info()
        .map_err(|e| bad(path, format!("invalid PNG: {e}")))?;
    let header = reader.info();
    check_size(path, u64::from(header.width), u64::from(header.height))?;
    let size = reader
        .output_buffer_size()
        .ok_or_else(|| bad(path, "PNG too large"))?;
    let mut buf = vec![0u8; size];
    let info = reader
        .next_frame(&mut buf)
        .map_err(|e| bad(path, format!("invalid PNG: {e}")))?;
    let (h, w) = (info.height as usize, info.width as usize);
    let (c_in, c_out) = match info.color_type {
        png::ColorType::Grayscale => (1, 1),
        png::ColorType::GrayscaleAlpha => (2, 1),
        png::ColorType::Rgb => (3, 3),
        png::ColorType::Rgba => (4, 3),
        png::ColorType::Indexed => return Err(bad(path, "palette PNG was not expanded")),
    };
    let pixels = planar(&buf[..info.buffer_size()], h * w, c_in, c_out);
    Ok(Image {
        channels: c_out,
        height: h,
        width: w,
        pixels,
    })
}

fn decode_jpeg(bytes: &[u8], path: &Path) -> Result<Image> {
    let mut decoder = jpeg_decoder::Decoder::new(Cursor::new(bytes));
    decoder
        .read_info()
        .map_err(|e| bad(path, format!("invalid JPEG: {e}")))?;
    let header = decoder
        .info()
        .ok_or_else(|| bad(path, "JPEG without a header"))?;
    check_size(path, u64::from(header.width), u64::from(header.height))?;
    let data = decoder
        .decode()
        .map_err(|e| bad(path, format!("invalid JPEG: {e}")))?;
    let info = decoder
        .info()
        .ok_or_else(|| bad(path, "JPEG without a header"))?;
    let (h, w) = (usize::from(info.height), usize::from(info.width));
    let hw = h * w;
    let (channels, pixels) = match info.pixel_format {
        jpeg_decoder::PixelFormat::L8 => (1, data[..hw.min(data.len())].to_vec()),
        jpeg_decoder::PixelFormat::L16 => (1, data.chunks_exact(2).map(|p| p[0]).collect()),
        jpeg_decoder::PixelFormat::RGB24 => (3, planar(&data, hw, 3, 3)),
        jpeg_decoder::PixelFormat::CMYK32 => {
            let rgb: Vec<u8> = data
                .chunks_exact(4)
                .flat_map(|p| {
                    let k = u16::from(p[3]);
                    [0, 1, 2].map(|i| (u16::from(p[i]) * k / 255) as u8)
                })
                .collect();
            (3, planar(&rgb, hw, 3, 3))
        }
    };
    if pixels.len() != channels * hw {
        return Err(bad(path, "JPEG data shorter than its header says"));
    }
    Ok(Image {
        channels,
        height: h,
        width: w,
        pixels,
    })
}

/// Writes an item `(c, h, w)` with values in `[0, 1]` as an 8-bit PNG (grayscale for one
/// channel, RGB for three), atomically.
pub fn save_png(path: &Path, item: &[f32], shape: &[usize]) -> Result<()> {
    let bytes = encode_png(item, shape).map_err(|e| match e {
        Error::Data { problem, .. } => Error::data(path, problem),
        e => e,
    })?;
    crate::fsutil::write_atomic(path, &bytes)
}

/// An item `(c, h, w)` with values in `[0, 1]` as the bytes of an 8-bit PNG (grayscale for
/// one channel, RGB for three).
pub fn encode_png(item: &[f32], shape: &[usize]) -> Result<Vec<u8>> {
    let path = Path::new("PNG");
    let (c, h, w) = match shape {
        [c, h, w] if *c == 1 || *c == 3 => (*c, *h, *w),
        [h, w] => (1, *h, *w),
        _ => {
            return Err(Error::config(
                "item_shape",
                format!("{shape:?} is not an image shape (1 or 3 channels, h, w)"),
            ))
        }
    };
    if item.len() != c * h * w {
        return Err(Error::config(
            "item",
            format!("{} values for shape {shape:?}", item.len()),
        ));
    }
    let hw = h * w;
    let mut interleaved = vec![0u8; c * hw];
    for p in 0..hw {
        for ch in 0..c {
            interleaved[p * c + ch] = (item[ch * hw + p].clamp(0.0, 1.0) * 255.0).round() as u8;
        }
    }
    let mut bytes = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut bytes, w as u32, h as u32);
        enc.set_color(if c == 1 {
            png::ColorType::Grayscale
        } else {
            png::ColorType::Rgb
        });
        enc.set_depth(png::BitDepth::Eight);
        let mut writer = enc
            .write_header()
            .map_err(|e| bad(path, format!("cannot encode PNG: {e}")))?;
        writer
            .write_image_data(&interleaved)
            .map_err(|e| bad(path, format!("cannot encode PNG: {e}")))?;
    }
    Ok(bytes)
}

/// Writes items of `ds` as a pool folder: item `i` becomes `dir/CLASS/NNNNN.png` when its
/// entry carries a class name (a label already given) and `dir/NNNNN.png` otherwise, `NNNNN`
/// the zero-padded index. Returns each item's id (its path relative to `dir`). Features must
/// be in `[0, 1]` (not normalised).
pub fn write_image_folder(
    dir: &Path,
    ds: &crate::data::dataset::Dataset,
    items: &[(usize, Option<String>)],
) -> Result<Vec<String>> {
    items
        .iter()
        .map(|(i, class)| {
            let name = format!("{i:05}.png");
            let id = match class {
                Some(c) => format!("{c}/{name}"),
                None => name,
            };
            save_png(&dir.join(&id), ds.item(*i), ds.item_shape())?;
            Ok(id)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn img(
        channels: usize,
        height: usize,
        width: usize,
        f: impl Fn(usize, usize, usize) -> u8,
    ) -> Image {
        let mut pixels = Vec::new();
        for c in 0..channels {
            for y in 0..height {
                for x in 0..width {
                    pixels.push(f(c, y, x));
                }
            }
        }
        Image {
            channels,
            height,
            width,
            pixels,
        }
    }

    #[test]
    fn fitting_a_square_crops_the_centre_and_shrinks_without_aliasing() {
        let p = Path::new("t.png");
        // Shorter side already 2: no scaling, the centre rows 1 and 2 of a 4x2 image.
        let tall = img(1, 4, 2, |_, y, x| (10 * y + x) as u8);
        assert_eq!(
            tall.preprocess(&Preprocess::square(2, 1), p)
                .unwrap()
                .pixels,
            vec![10, 11, 20, 21]
        );
        let wide = img(3, 2, 6, |c, y, x| (100 * c + 10 * y + x) as u8);
        let w = wide.preprocess(&Preprocess::square(2, 3), p).unwrap();
        assert_eq!((w.channels, w.height, w.width), (3, 2, 2));
        assert_eq!(
            w.pixels,
            vec![2, 3, 12, 13, 102, 103, 112, 113, 202, 203, 212, 213]
        );
        // A constant image stays constant at any size.
        let flat = img(1, 37, 91, |_, _, _| 77)
            .preprocess(&Preprocess::square(64, 1), p)
            .unwrap();
        assert_eq!((flat.height, flat.width), (64, 64));
        assert!(flat.pixels.iter().all(|&v| v == 77));
        // A one-pixel checkerboard shrunk 8x is mid-grey everywhere (a sampler without a
        // widened filter would return black or white).
        let board = img(
            1,
            512,
            512,
            |_, y, x| if (x + y) % 2 == 0 { 255 } else { 0 },
        );
        let small = board.preprocess(&Preprocess::square(64, 1), p).unwrap();
        assert!(
            small.pixels.iter().all(|&v| (120..=135).contains(&v)),
            "{:?}",
            &small.pixels[..16]
        );
        assert!(img(1, 0, 5, |_, _, _| 0)
            .preprocess(&Preprocess::square(4, 1), p)
            .is_err());
    }

    #[test]
    fn png_round_trip_is_exact_on_8_bit_values() {
        // Values k/255 survive an 8-bit PNG round trip exactly.
        let dir = std::env::temp_dir().join(format!("alkit-png-{}", std::process::id()));
        let path = dir.join("a.png");
        let item: Vec<f32> = (0..12).map(|k| (k * 20) as f32 / 255.0).collect();
        save_png(&path, &item, &[1, 3, 4]).unwrap();
        let img = decode(&std::fs::read(&path).unwrap(), &path).unwrap();
        assert_eq!((img.channels, img.height, img.width), (1, 3, 4));
        let want: Vec<u8> = (0..12).map(|k| (k * 20) as u8).collect();
        assert_eq!(img.pixels, want);
        let rgb: Vec<f32> = (0..24).map(|k| (k * 10) as f32 / 255.0).collect();
        save_png(&path, &rgb, &[3, 2, 4]).unwrap();
        let img = decode(&std::fs::read(&path).unwrap(), &path).unwrap();
        assert_eq!(img.channels, 3);
        assert_eq!(
            img.pixels,
            (0..24).map(|k| (k * 10) as u8).collect::<Vec<_>>()
        );
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn garbage_is_an_error_naming_the_file() {
        let p = Path::new("pool/x.png");
        let e = decode(b"\x89PNG\r\n\x1a\nbroken", p).unwrap_err();
        assert!(e.to_string().contains("pool/x.png"), "{e}");
        assert!(decode(b"GIF89a", p).is_err());
    }

    /// A PNG chunk: length, type, data, CRC-32 of type and data.
    fn chunk(kind: &[u8; 4], data: &[u8]) -> Vec<u8> {
        let mut crc = flate2::Crc::new();
        crc.update(kind);
        crc.update(data);
        let mut out = (data.len() as u32).to_be_bytes().to_vec();
        out.extend(kind);
        out.extend(data);
        out.extend(crc.sum().to_be_bytes());
        out
    }

    #[test]
    fn a_huge_declared_size_is_refused_before_decoding() {
        // 40000 x 40000 grey pixels declared by a file of a few dozen bytes: refused from the
        // header, naming the file, without allocating 1.6 GB.
        let mut ihdr = Vec::new();
        ihdr.extend(40_000u32.to_be_bytes());
        ihdr.extend(40_000u32.to_be_bytes());
        ihdr.extend([8, 0, 0, 0, 0]); // 8-bit greyscale, deflate, no filter set, no interlace
        let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
        png.extend(chunk(b"IHDR", &ihdr));
        png.extend(chunk(
            b"IDAT",
            &[0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01],
        ));
        png.extend(chunk(b"IEND", &[]));
        let p = Path::new("pool/huge.png");
        let e = decode(&png, p).unwrap_err().to_string();
        assert!(
            e.contains("pool/huge.png") && e.contains("40000x40000"),
            "{e}"
        );
    }
}
