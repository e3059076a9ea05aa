//! Images decoded as Pillow decodes them: every file of the corpus that
//! `tests/reference/pillow_images.py` wrote (PNG of every bit depth and colour type, JPEG of
//! every subsampling, gray, progressive, CMYK, YCCK and EXIF-tagged, WebP lossy and lossless)
//! gives exactly the pixels of Pillow 13's `Image.open(f).convert("RGB")`, timm's loader, as
//! recorded in `pillow_images.json`; files alkit does not decode are refused by name; nested
//! image folders are read whole, and files that are not images are named in one note.

use super::tmp;
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

/// The events of a read that say which files were left out.
#[derive(Default)]
struct LeftOut(Vec<(String, Vec<String>)>);

impl alkit::observe::Observer for LeftOut {
    fn on(&mut self, event: &alkit::observe::Event<'_>) -> alkit::observe::Control {
        if let alkit::observe::Event::LeftOut { source, files } = event {
            self.0.push((source.to_string(), files.to_vec()));
        }
        alkit::observe::Control::Continue
    }
}

/// A small RGB PNG at `dir/rel`, its pixels from `k`.
fn photo(dir: &Path, rel: &str, k: usize) {
    let item: Vec<f32> = (0..3 * 6 * 5)
        .map(|i| ((i * 7 + k * 31) % 256) as f32 / 255.0)
        .collect();
    alkit::data::image::save_png(&dir.join(rel), &item, &[3, 6, 5]).unwrap();
}

/// The photo tree of issue 39: ten photos in nested folders, one at the top, and files that
/// are not images among them.
fn photo_tree(dir: &Path) -> Vec<&'static str> {
    let photos = [
        "2024/garden/rose.png",
        "2024/garden/tulip.png",
        "2024/garden/z/deep.png",
        "2024/holiday/beach.png",
        "2024/holiday/hill.png",
        "2024/holiday/sea.png",
        "misc/a.png",
        "misc/b.png",
        "misc/c.png",
        "top.png",
    ];
    for (k, p) in photos.iter().enumerate() {
        photo(dir, p, k);
    }
    std::fs::write(dir.join("2024/holiday/notes.txt"), "sunny").unwrap();
    std::fs::write(dir.join("misc/meta.json"), "{}").unwrap();
    std::fs::write(dir.join("README"), "photos").unwrap();
    // Hidden entries are not part of the pool and not worth a note.
    std::fs::write(dir.join("misc/.DS_Store"), "x").unwrap();
    std::fs::create_dir_all(dir.join(".thumbnails")).unwrap();
    photo(dir, ".thumbnails/t.png", 99);
    photos.to_vec()
}

#[test]
fn a_nested_photo_folder_is_read_whole_with_the_class_of_its_first_level() {
    use alkit::data::source::{listed_labels, load, open, Source};
    let dir = tmp("nested-photos");
    let root = dir.join("photos");
    let photos = photo_tree(&root);
    let src = Source::parse(&root.to_string_lossy()).unwrap();
    let hub = alkit::hub::Hub::new(dir.join("nohub"), true);
    let mut seen = LeftOut::default();
    let items = load(&src, &hub, &mut seen, None).unwrap().pool;
    // All ten, ids relative paths in sorted order; the class is the first folder level.
    assert_eq!(items.ids, photos);
    assert_eq!(items.classes, vec!["2024", "misc"]);
    let want: Vec<Option<u32>> = photos
        .iter()
        .map(|p| match p.split('/').next() {
            Some("2024") => Some(0),
            Some("misc") => Some(1),
            _ => None,
        })
        .collect();
    assert_eq!(items.labels, want);
    assert_eq!(items.item_shape, vec![3, 6, 5]);
    // The files that are not images, in one event, hidden ones not among them.
    let files = ["2024/holiday/notes.txt", "README", "misc/meta.json"];
    assert_eq!(
        seen.0,
        vec![(
            root.display().to_string(),
            files.iter().map(|s| s.to_string()).collect()
        )]
    );
    // A streamed read finds the same items and says the same.
    let mut streamed = LeftOut::default();
    let mut stream = open(&src, &hub, &mut streamed, None).unwrap();
    let mut ids = Vec::new();
    while let Some(chunk) = stream.next_chunk(4).unwrap() {
        ids.extend(chunk.ids);
    }
    assert_eq!(ids, photos);
    assert_eq!(streamed.0, seen.0);
    // The listing alone gives the same labels.
    let listed = listed_labels(&src).unwrap().unwrap();
    assert_eq!(listed.classes, items.classes);
    assert_eq!(listed.given.len(), 9);
    // A flat folder keeps its ids.
    let flat = dir.join("flat");
    for rel in ["cat/1.png", "cat/2.png", "dog/1.png", "x.png"] {
        photo(&flat, rel, 1);
    }
    let flat_src = Source::parse(&flat.to_string_lossy()).unwrap();
    let mut none = LeftOut::default();
    let flat_items = load(&flat_src, &hub, &mut none, None).unwrap().pool;
    assert_eq!(
        flat_items.ids,
        ["cat/1.png", "cat/2.png", "dog/1.png", "x.png"]
    );
    assert!(none.0.is_empty());
}

#[test]
fn a_folder_holding_an_image_alkit_cannot_decode_is_refused_naming_it() {
    use alkit::data::source::{load, Source};
    let dir = tmp("nested-gif");
    let root = dir.join("photos");
    photo_tree(&root);
    std::fs::write(root.join("2024/garden/anim.gif"), b"GIF89a").unwrap();
    std::fs::write(root.join("scan.TIFF"), b"II*\0").unwrap();
    let src = Source::parse(&root.to_string_lossy()).unwrap();
    let hub = alkit::hub::Hub::new(dir.join("nohub"), true);
    let e = load(&src, &hub, &mut LeftOut::default(), None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("photos")
            && e.contains("2 image(s)")
            && e.contains("2024/garden/anim.gif, scan.TIFF"),
        "{e}"
    );
    // A .png that is a GIF inside is refused when decoded, naming the file and the format.
    let other = dir.join("other");
    photo(&other, "cat/a.png", 1);
    std::fs::write(other.join("cat/b.png"), b"GIF89a\x01\x00\x01\x00").unwrap();
    let src = Source::parse(&other.to_string_lossy()).unwrap();
    let e = load(&src, &hub, &mut LeftOut::default(), None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("b.png") && e.contains("a GIF image"), "{e}");
}

#[test]
fn the_binary_names_the_files_left_out_in_one_line() {
    let dir = tmp("nested-cli");
    let root = dir.join("photos");
    photo_tree(&root);
    for k in 0..25 {
        std::fs::write(root.join(format!("misc/sidecar{k:02}.xmp")), "x").unwrap();
    }
    let out = super::alkit_cmd()
        .args(["init", "--pool"])
        .arg(&root)
        .arg("--state")
        .arg(dir.join("s"))
        .args(["--steps", "2", "--quiet"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let notes: Vec<&str> = err.lines().filter(|l| l.starts_with("note:")).collect();
    assert_eq!(notes.len(), 1, "{err}");
    assert!(
        notes[0].contains("28 file(s) left out, not images: 2024/holiday/notes.txt, README, misc/meta.json, misc/sidecar00.xmp, misc/sidecar01.xmp and 23 more"),
        "{}",
        notes[0]
    );
}
