//! Decoding PNG, JPEG and WebP images into `(c, h, w)` pixels as Pillow decodes them, and
//! writing grayscale PNGs.
//!
//! Pools of images (a folder a person labels, or the image column of a Hub dataset) arrive as
//! encoded files, and a model trained in PyTorch saw them through timm's loader,
//! `Image.open(f).convert("RGB")`: so every file gives Pillow's pixels of that call, byte for
//! byte (measured on the corpus of `tests/reference/pillow_images.py`; docs/data.md has the
//! table). Grayscale files (PNG `1`, `L`, `LA`, `I;16`; grayscale JPEG) stay one channel, which
//! is Pillow's `convert("L")` of them too and replicates into its `convert("RGB")`; the rest
//! become three: alpha dropped (not composited), palettes looked up (their transparency
//! ignored), 16-bit gray saturated at 255 and 16-bit colour cut to its high byte, CMYK and YCCK
//! JPEGs through Pillow's inverted-CMYK formula. The EXIF orientation tag is not applied:
//! neither Pillow's `open`/`convert` nor timm's loader applies it. What cannot be decoded as
//! Pillow would (GIF, BMP, TIFF and the like; 12-bit, lossless or arithmetic-coded JPEGs; an
//! animated WebP; a truncated or corrupt file) is refused with an error naming the file and
//! the reason, never turned into black or grey pixels. Nothing panics on a corrupt file.

pub use crate::data::resample::Filter;
use crate::error::{contain, DataProblem, Error, Result};
use serde::{Deserialize, Serialize};
use std::cell::Cell;
use std::io::Cursor;
use std::path::Path;
use std::rc::Rc;
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

/// The image formats alkit decodes, told by their first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoded {
    Png,
    Jpeg,
    WebP,
}

/// What the first bytes say the file is, or an error naming the format alkit does not read
/// (or saying it is no image alkit knows).
fn sniff(bytes: &[u8], path: &Path) -> Result<Encoded> {
    if bytes.starts_with(b"\x89PNG") {
        return Ok(Encoded::Png);
    }
    if bytes.starts_with(&[0xff, 0xd8]) {
        return Ok(Encoded::Jpeg);
    }
    if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        return Ok(Encoded::WebP);
    }
    let other = if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        "a GIF image"
    } else if bytes.starts_with(b"BM") {
        "a BMP image"
    } else if bytes.starts_with(b"II*\0") || bytes.starts_with(b"MM\0*") {
        "a TIFF image"
    } else if bytes.len() >= 12 && &bytes[4..8] == b"ftyp" {
        "an HEIF/AVIF image"
    } else if bytes.starts_with(b"\0\0\0\x0cjP  ") || bytes.starts_with(&[0xff, 0x4f, 0xff, 0x51]) {
        "a JPEG 2000 image"
    } else if bytes.starts_with(&[0xff, 0x0a]) || bytes.starts_with(b"\0\0\0\x0cJXL ") {
        "a JPEG XL image"
    } else {
        return Err(bad(path, "neither a PNG, a JPEG nor a WebP image"));
    };
    Err(bad(
        path,
        format!("{other}: alkit reads PNG, JPEG and WebP images (convert it to PNG)"),
    ))
}

/// Decodes a PNG, JPEG or WebP (detected from the content, not the name) into Pillow's pixels
/// of it (see the module docs). `path` names the image in errors (a file, or
/// `file.parquet#row` for embedded bytes).
pub fn decode(bytes: &[u8], path: &Path) -> Result<Image> {
    match sniff(bytes, path)? {
        Encoded::Png => {
            check_png_chunks(bytes, path)?;
            contain(path, "the PNG decoder", || decode_png(bytes, path))
        }
        Encoded::Jpeg => contain(path, "the JPEG decoder", || decode_jpeg(bytes, path)),
        Encoded::WebP => contain(path, "the WebP decoder", || decode_webp(bytes, path)),
    }
}

/// What an image's header says of the image [`decode`] would give.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Header {
    /// Rows.
    pub height: usize,
    /// Columns.
    pub width: usize,
    /// Channels after decoding: 1 (grayscale, with or without alpha) or 3 (the rest).
    pub channels: usize,
}

/// The [`Header`] of a PNG, JPEG or WebP, without decoding the pixels (and after the same
/// checks of the header as [`decode`]).
pub fn header(bytes: &[u8], path: &Path) -> Result<Header> {
    match sniff(bytes, path)? {
        Encoded::Png => {
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
        }
        Encoded::Jpeg => {
            let f = jpeg_frame(bytes, path)?;
            Ok(Header {
                height: f.height,
                width: f.width,
                channels: if f.components == 1 { 1 } else { 3 },
            })
        }
        Encoded::WebP => contain(path, "the WebP decoder", || {
            let d = webp_decoder(bytes, path)?;
            let (w, h) = d.dimensions();
            Ok(Header {
                height: h as usize,
                width: w as usize,
                channels: 3,
            })
        }),
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

/// A PNG as Pillow's `convert` sees it: bit depths below 8 scaled to 0..255, palettes looked
/// up (tRNS ignored), alpha dropped, 16-bit gray (Pillow's `I;16`) saturated at 255 and 16-bit
/// colour (and gray with alpha, which Pillow opens as RGBA) cut to its high byte.
fn decode_png(bytes: &[u8], path: &Path) -> Result<Image> {
    let mut decoder = png::Decoder::new(Cursor::new(bytes));
    decoder.set_transformations(png::Transformations::EXPAND);
    let mut reader = decoder
        .read_info()
        .map_err(|e| bad(path, format!("invalid PNG: {e}")))?;
    let header = reader.info();
    check_size(path, u64::from(header.width), u64::from(header.height))?;
    // A tRNS chunk turns plain gray into gray + alpha under EXPAND; Pillow still reads `I;16`.
    let gray_source = header.color_type == png::ColorType::Grayscale;
    let size = reader
        .output_buffer_size()
        .ok_or_else(|| bad(path, "PNG too large"))?;
    let mut buf = vec![0u8; size];
    let info = reader
        .next_frame(&mut buf)
        .map_err(|e| bad(path, format!("invalid PNG: {e}")))?;
    let (h, w) = (info.height as usize, info.width as usize);
    let (color, depth) = reader.output_color_type();
    let samples: Vec<u8> = match depth {
        png::BitDepth::Sixteen if gray_source => buf[..info.buffer_size()]
            .chunks_exact(2)
            .map(|s| u16::from_be_bytes([s[0], s[1]]).min(255) as u8)
            .collect(),
        png::BitDepth::Sixteen => buf[..info.buffer_size()]
            .chunks_exact(2)
            .map(|s| s[0])
            .collect(),
        _ => {
            buf.truncate(info.buffer_size());
            buf
        }
    };
    let (c_in, c_out) = match color {
        png::ColorType::Grayscale => (1, 1),
        png::ColorType::GrayscaleAlpha => (2, 1),
        png::ColorType::Rgb => (3, 3),
        png::ColorType::Rgba => (4, 3),
        png::ColorType::Indexed => return Err(bad(path, "palette PNG was not expanded")),
    };
    if samples.len() < h * w * c_in {
        return Err(bad(path, "PNG data shorter than its header says"));
    }
    Ok(Image {
        channels: c_out,
        height: h,
        width: w,
        pixels: planar(&samples, h * w, c_in, c_out),
    })
}

/// What a JPEG's frame header (SOF) says, read by walking its marker segments.
#[derive(Debug, Clone, Copy)]
struct JpegFrame {
    height: usize,
    width: usize,
    components: u8,
}

/// Walks a JPEG's marker segments up to its first scan and reads the frame header, refusing by
/// name what Pillow refuses or alkit's libjpeg does not decode (every JPEG process but the
/// baseline, extended and progressive Huffman ones: lossless, hierarchical, arithmetic-coded;
/// a sample precision other than 8 bits; 2 or more than 4 components) and a size above
/// [`MAX_PIXELS`], before anything is decoded.
fn jpeg_frame(bytes: &[u8], path: &Path) -> Result<JpegFrame> {
    let invalid = |what: String| bad(path, format!("invalid JPEG: {what}"));
    let mut at = 2;
    let mut frame = None;
    loop {
        // Fill bytes (0xff) may precede a marker; anything else between segments is what
        // libjpeg warns about, and a warning refuses the file (see `decode_jpeg`).
        while bytes.get(at) == Some(&0xff) && bytes.get(at + 1) == Some(&0xff) {
            at += 1;
        }
        let marker = match bytes.get(at..at + 2) {
            Some([0xff, m]) => *m,
            Some(_) => return Err(invalid(format!("no marker at byte {at}"))),
            None => return Err(invalid("the file ends before its first scan".into())),
        };
        at += 2;
        if matches!(marker, 0x01 | 0xd0..=0xd8) {
            continue;
        }
        if marker == 0xd9 {
            return Err(invalid("the image ends (EOI) before its first scan".into()));
        }
        let len = match bytes.get(at..at + 2) {
            Some(l) => usize::from(u16::from_be_bytes([l[0], l[1]])),
            None => return Err(invalid("the file ends inside a marker".into())),
        };
        let Some(body) = bytes.get(at + 2..at + len).filter(|_| len >= 2) else {
            return Err(invalid(format!(
                "the segment of marker 0xff{marker:02x} runs past the end of the file"
            )));
        };
        if marker == 0xda {
            return frame.ok_or_else(|| invalid("a scan before the frame header".into()));
        }
        if (0xc0..=0xcf).contains(&marker) && !matches!(marker, 0xc4 | 0xc8 | 0xcc) {
            let process = match marker {
                0xc0..=0xc2 => None,
                0xc3 => Some("lossless"),
                0xc5..=0xc7 => Some("hierarchical"),
                _ => Some("arithmetic-coded"),
            };
            if let Some(process) = process {
                return Err(bad(
                    path,
                    format!(
                        "a {process} JPEG (frame type 0xff{marker:02x}): alkit decodes baseline \
                         and progressive Huffman-coded JPEGs (re-save it as one)"
                    ),
                ));
            }
            if body.len() < 6 {
                return Err(invalid("a frame header of fewer than 6 bytes".into()));
            }
            let precision = body[0];
            let height = u16::from_be_bytes([body[1], body[2]]);
            let width = u16::from_be_bytes([body[3], body[4]]);
            let components = body[5];
            if precision != 8 {
                return Err(bad(
                    path,
                    format!("a {precision}-bit JPEG: Pillow and alkit read 8-bit JPEGs only"),
                ));
            }
            if !matches!(components, 1 | 3 | 4) {
                return Err(bad(
                    path,
                    format!(
                        "a JPEG of {components} components: Pillow and alkit read 1 (gray), 3 \
                         (colour) or 4 (CMYK)"
                    ),
                ));
            }
            check_size(path, u64::from(width), u64::from(height))?;
            frame.get_or_insert(JpegFrame {
                height: usize::from(height),
                width: usize::from(width),
                components,
            });
        }
        at += len;
    }
}

thread_local! {
    /// libjpeg's warnings during this thread's current JPEG decode (see [`jpeg_errors`]).
    static JPEG_WARNINGS: Cell<u32> = const { Cell::new(0) };
}

/// libjpeg stops on a fatal error by unwinding (mozjpeg's `unwinding` build); the message is
/// recovered by a second decode under mozjpeg's own error manager (see [`decode_jpeg`]).
extern "C-unwind" fn jpeg_fatal(_cinfo: &mut mozjpeg_sys::jpeg_common_struct) {
    std::panic::resume_unwind(Box::new("libjpeg stopped"));
}

/// Counts warnings (level -1: corrupt data libjpeg decodes past, a premature end); trace
/// messages (levels 0 and up) are ignored.
extern "C-unwind" fn jpeg_message(
    _cinfo: &mut mozjpeg_sys::jpeg_common_struct,
    level: std::os::raw::c_int,
) {
    if level < 0 {
        JPEG_WARNINGS.with(|w| w.set(w.get().saturating_add(1)));
    }
}

extern "C-unwind" fn jpeg_nothing(_cinfo: &mut mozjpeg_sys::jpeg_common_struct) {}

/// An error manager that counts libjpeg's warnings where mozjpeg's own silences them, built
/// without `unsafe`: libjpeg calls only `error_exit`, `emit_message`, `output_message` and
/// `reset_error_mgr`; `format_message` and the message tables serve printing, which alkit does
/// not ask of it.
fn jpeg_errors() -> mozjpeg_sys::jpeg_error_mgr {
    mozjpeg_sys::jpeg_error_mgr {
        error_exit: Some(jpeg_fatal),
        emit_message: Some(jpeg_message),
        output_message: Some(jpeg_nothing),
        format_message: None,
        reset_error_mgr: Some(jpeg_nothing),
        msg_code: 0,
        msg_parm: Default::default(),
        trace_level: 0,
        num_warnings: 0,
        jpeg_message_table: std::ptr::null(),
        last_jpeg_message: 0,
        addon_message_table: std::ptr::null(),
        first_addon_message: 0,
        last_addon_message: 0,
    }
}

/// The JPEG's bytes as libjpeg reads them, noting whether it asked for more than there is (a
/// truncated file: mozjpeg then feeds libjpeg an end-of-image marker and a warning, and the
/// rest of the image would come out grey).
struct Watched<'a> {
    rest: &'a [u8],
    ran_out: Rc<Cell<bool>>,
}

impl std::io::Read for Watched<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.rest.read(buf)
    }
}

impl std::io::BufRead for Watched<'_> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        if self.rest.is_empty() {
            self.ran_out.set(true);
        }
        Ok(self.rest)
    }

    fn consume(&mut self, n: usize) {
        self.rest = &self.rest[n.min(self.rest.len())..];
    }
}

/// Pillow's CMYK to RGB (`Convert.c`, `cmyk2rgb`), on samples as Pillow reads a JPEG's:
/// inverted first (`CMYK;I`, the Adobe convention, which Pillow assumes for every CMYK JPEG).
fn cmyk_to_rgb(stored: [u8; 4]) -> [u8; 3] {
    let muldiv255 = |a: u32, b: u32| {
        let t = a * b + 128;
        ((t >> 8) + t) >> 8
    };
    let nk = u32::from(stored[3]); // 255 - k, k = 255 - stored
    [0, 1, 2].map(|i| (nk - muldiv255(255 - u32::from(stored[i]), nk)) as u8)
}

/// Pixels of one JPEG through libjpeg as Pillow asks for them: gray as gray, three components
/// as RGB (libjpeg's YCbCr conversion and fancy upsampling, as in Pillow), four as CMYK (YCCK
/// converted by libjpeg) and then Pillow's formula.
fn jpeg_pixels<R: std::io::BufRead>(
    d: mozjpeg::Decompress<R>,
    frame: JpegFrame,
) -> std::io::Result<(usize, Vec<u8>)> {
    use mozjpeg::ColorSpace as C;
    let hw = frame.height * frame.width;
    let (channels, interleaved, c_in) = match frame.components {
        1 => {
            let mut s = d.to_colorspace(C::JCS_GRAYSCALE)?;
            let px: Vec<u8> = s.read_scanlines()?;
            s.finish()?;
            (1, px, 1)
        }
        4 => {
            let mut s = d.to_colorspace(C::JCS_CMYK)?;
            let px: Vec<[u8; 4]> = s.read_scanlines()?;
            s.finish()?;
            (3, px.into_iter().flat_map(cmyk_to_rgb).collect(), 3)
        }
        _ => {
            let mut s = d.rgb()?;
            let px: Vec<u8> = s.read_scanlines()?;
            s.finish()?;
            (3, px, 3)
        }
    };
    if interleaved.len() != hw * c_in {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok((channels, planar(&interleaved, hw, c_in, channels)))
}

/// A JPEG through libjpeg (mozjpeg's build of libjpeg-turbo, the decoder inside Pillow): the
/// frame header checked first ([`jpeg_frame`]), then decoded under an error manager that
/// counts warnings. A truncated file is refused, as Pillow refuses it; so is a file libjpeg
/// warns about (corrupt entropy data, stray bytes between segments), which Pillow would decode
/// with the damaged part grey or shifted: alkit refuses it rather than score such pixels.
fn decode_jpeg(bytes: &[u8], path: &Path) -> Result<Image> {
    let frame = jpeg_frame(bytes, path)?;
    let ran_out = Rc::new(Cell::new(false));
    let source = Watched {
        rest: bytes,
        ran_out: Rc::clone(&ran_out),
    };
    JPEG_WARNINGS.with(|w| w.set(0));
    let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let d = mozjpeg::Decompress::with_err(jpeg_errors()).from_reader(source)?;
        if (d.height(), d.width()) != (frame.height, frame.width) {
            return Err(std::io::Error::other("two frame headers disagree"));
        }
        jpeg_pixels(d, frame)
    }));
    let warnings = JPEG_WARNINGS.with(Cell::get);
    if ran_out.get() {
        return Err(bad(
            path,
            "truncated JPEG: the file ends before the image does (Pillow refuses it too)",
        ));
    }
    let (channels, pixels) = match decoded {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => return Err(bad(path, format!("invalid JPEG: {e}"))),
        Err(_) => {
            // libjpeg's own words, from a second run under mozjpeg's error manager.
            contain(path, "libjpeg", || {
                let d = mozjpeg::Decompress::new_mem(bytes)
                    .map_err(|e| bad(path, format!("invalid JPEG: {e}")))?;
                jpeg_pixels(d, frame).map_err(|e| bad(path, format!("invalid JPEG: {e}")))
            })?;
            return Err(bad(path, "invalid JPEG: libjpeg stopped on it"));
        }
    };
    if warnings > 0 {
        return Err(bad(
            path,
            format!(
                "corrupt JPEG data: libjpeg warned {warnings} time(s) (damaged entropy data or \
                 stray bytes between segments); Pillow would decode it with the damaged part \
                 grey or shifted, alkit refuses it (re-save the image to read it)"
            ),
        ));
    }
    Ok(Image {
        channels,
        height: frame.height,
        width: frame.width,
        pixels,
    })
}

/// A WebP's decoder with its headers read and its size checked.
fn webp_decoder<'a>(
    bytes: &'a [u8],
    path: &Path,
) -> Result<image_webp::WebPDecoder<Cursor<&'a [u8]>>> {
    let d = image_webp::WebPDecoder::new(Cursor::new(bytes))
        .map_err(|e| bad(path, format!("invalid WebP: {e}")))?;
    let (w, h) = d.dimensions();
    check_size(path, u64::from(w), u64::from(h))?;
    if d.is_animated() {
        return Err(bad(
            path,
            format!(
                "an animated WebP ({} frames): alkit reads still images (save one frame)",
                d.num_frames()
            ),
        ));
    }
    Ok(d)
}

/// A still WebP (lossy or lossless) as RGB, alpha dropped as Pillow's `convert("RGB")` drops it.
fn decode_webp(bytes: &[u8], path: &Path) -> Result<Image> {
    let mut d = webp_decoder(bytes, path)?;
    let (w, h) = d.dimensions();
    let (h, w) = (h as usize, w as usize);
    let size = d
        .output_buffer_size()
        .ok_or_else(|| bad(path, "WebP too large"))?;
    let mut buf = vec![0u8; size];
    d.read_image(&mut buf)
        .map_err(|e| bad(path, format!("invalid WebP: {e}")))?;
    let c_in = if d.has_alpha() { 4 } else { 3 };
    if buf.len() != h * w * c_in {
        return Err(bad(path, "WebP data shorter than its header says"));
    }
    Ok(Image {
        channels: 3,
        height: h,
        width: w,
        pixels: planar(&buf, h * w, c_in, 3),
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
