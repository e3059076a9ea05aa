//! Images decoded as Pillow decodes them: every file of the corpus that
//! `tests/reference/pillow_images.py` wrote (PNG of every bit depth and colour type, JPEG of
//! every subsampling, gray, progressive, CMYK, YCCK and EXIF-tagged, WebP lossy and lossless)
//! gives exactly the pixels of Pillow 13's `Image.open(f).convert("RGB")`, timm's loader, as
//! recorded in `pillow_images.json`; files alkit does not decode are refused by name.

use alkit::data::image::{decode, header, Image, Preprocess};
use base64::Engine;
use std::path::{Path, PathBuf};

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pillow_images")
}

/// The reference: per file its name, Pillow's mode on open and `convert("RGB")`'s bytes.
fn reference() -> Vec<(String, String, Vec<u8>)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference/pillow_images.json");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(json["pillow"], "13.0.0");
    json["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let rgb = base64::engine::general_purpose::STANDARD
                .decode(f["rgb_base64"].as_str().unwrap())
                .unwrap();
            (
                f["file"].as_str().unwrap().to_string(),
                f["mode"].as_str().unwrap().to_string(),
                rgb,
            )
        })
        .collect()
}

/// An image as Pillow's RGB bytes: rows of `(r, g, b)`, gray replicated.
fn interleaved_rgb(img: Image) -> Vec<u8> {
    let img = img.with_channels(3);
    let hw = img.height * img.width;
    (0..hw)
        .flat_map(|p| [0, 1, 2].map(|c| img.pixels[c * hw + p]))
        .collect()
}

#[test]
fn every_corpus_image_decodes_to_pillows_pixels() {
    let files = reference();
    assert_eq!(files.len(), 40, "the corpus has 40 files");
    let mut failures = Vec::new();
    for (name, mode, want) in &files {
        let path = corpus().join(name);
        let bytes = std::fs::read(&path).unwrap();
        let img = match decode(&bytes, &path) {
            Ok(img) => img,
            Err(e) => {
                failures.push(format!("{name}: {e}"));
                continue;
            }
        };
        // One channel exactly for Pillow's gray modes (its convert("L") is the same pixels),
        // and for 16-bit gray + alpha, which Pillow opens as RGBA with gray replicated.
        let gray = matches!(mode.as_str(), "1" | "L" | "LA" | "I;16") || name == "png_la16.png";
        assert_eq!(img.channels, if gray { 1 } else { 3 }, "{name} ({mode})");
        let h = header(&bytes, &path).unwrap();
        assert_eq!(
            (h.height, h.width, h.channels),
            (img.height, img.width, img.channels),
            "{name}: header and pixels disagree"
        );
        let got = interleaved_rgb(img);
        assert_eq!(got.len(), want.len(), "{name}");
        let max = got.iter().zip(want).map(|(a, b)| a.abs_diff(*b)).max();
        if max != Some(0) {
            failures.push(format!("{name} ({mode}): max difference {max:?}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn the_exif_orientation_is_not_applied_as_timms_loader_does_not() {
    // Pillow's pixels of the EXIF-tagged files are the stored ones (the reference records
    // them unrotated; a rotation by tag 6 would also swap height and width).
    for (name, _, want) in reference().iter().filter(|f| f.0.contains("exif")) {
        let path = corpus().join(name);
        let img = decode(&std::fs::read(&path).unwrap(), &path).unwrap();
        assert_eq!((img.height, img.width), (40, 37), "{name}");
        assert_eq!(&interleaved_rgb(img), want, "{name}");
    }
}

#[test]
fn timms_transform_of_a_decoded_image_is_that_of_pillows_pixels() {
    // Preprocessing (resize + centre crop, Pillow's resampling bit for bit: timm::) starts
    // from the decoded pixels, so exact pixels give timm's input exactly, to the byte.
    let pre = Preprocess::square(24, 3);
    for (name, _, want) in reference() {
        let path = corpus().join(&name);
        let img = decode(&std::fs::read(&path).unwrap(), &path).unwrap();
        let (h, w) = (img.height, img.width);
        let pillow = Image {
            channels: 3,
            height: h,
            width: w,
            pixels: (0..3)
                .flat_map(|c| want.iter().skip(c).step_by(3).copied())
                .collect(),
        };
        assert_eq!(
            img.preprocess(&pre, &path).unwrap(),
            pillow.preprocess(&pre, &path).unwrap(),
            "{name}"
        );
    }
}

/// `decode` and `header` both refuse `bytes` with a message naming the file and holding
/// `words`.
fn refused(bytes: &[u8], name: &str, words: &str) {
    let path = Path::new("pool/cat").join(name);
    let e = decode(bytes, &path).expect_err(name).to_string();
    assert!(e.contains(name) && e.contains(words), "{name}: {e}");
    if let Err(e) = header(bytes, &path) {
        assert!(e.to_string().contains(name), "{name}: {e}");
    }
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(corpus().join(name)).unwrap()
}

#[test]
fn truncated_corrupt_and_unsupported_images_are_refused_by_name() {
    // A JPEG cut anywhere after its headers: libjpeg would fill the rest grey.
    let jpeg = fixture("jpeg_420.jpg");
    for cut in [jpeg.len() - 2, jpeg.len() - 40, jpeg.len() / 2, 700] {
        refused(&jpeg[..cut], &format!("cut{cut}.jpg"), "truncated");
    }
    let progressive = fixture("jpeg_progressive.jpg");
    refused(
        &progressive[..progressive.len() - 100],
        "prog.jpg",
        "truncated",
    );
    // Cut inside the headers: no scan at all.
    refused(&jpeg[..120], "head.jpg", "invalid JPEG");
    // Damaged entropy data (a marker in the middle of the scan): libjpeg warns and zero-fills.
    let mut damaged = jpeg.clone();
    let mid = damaged.len() - 300;
    damaged[mid..mid + 2].copy_from_slice(&[0xff, 0xd9]);
    refused(&damaged, "damaged.jpg", "corrupt JPEG");
    // A frame header the decoder does not take: 12-bit, arithmetic-coded, lossless.
    let sof = jpeg.windows(2).position(|w| w == [0xff, 0xc0]).unwrap();
    let mut twelve = jpeg.clone();
    twelve[sof + 4] = 12;
    refused(&twelve, "twelve.jpg", "12-bit");
    for (kind, words) in [(0xc9, "arithmetic"), (0xc3, "lossless")] {
        let mut other = jpeg.clone();
        other[sof + 1] = kind;
        refused(&other, "other.jpg", words);
    }
    // PNG: cut inside its data, and a broken CRC.
    let png = fixture("png_rgb.png");
    refused(&png[..png.len() / 2], "cut.png", "invalid PNG");
    // WebP cut short.
    let webp = fixture("webp_lossy.webp");
    refused(&webp[..webp.len() / 2], "cut.webp", "WebP");
    // Formats alkit does not decode, named.
    refused(
        b"GIF89a\x01\x00\x01\x00\x00\x00\x00;",
        "a.gif",
        "a GIF image",
    );
    refused(b"BM\x3a\x00\x00\x00\x00\x00", "a.bmp", "a BMP image");
    refused(b"II*\x00\x08\x00\x00\x00", "a.tif", "a TIFF image");
    refused(b"hello", "notes.png", "neither a PNG");
    refused(b"", "empty.jpg", "neither a PNG");
}
