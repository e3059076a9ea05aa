//! Image folders: undecodable, oversized and mislabelled images.

use super::*;

pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(
            "png-declares-40000x40000",
            |d, _| {
                let dir = d.join("imgs/cat");
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(dir.join("big.png"), png_declaring(40_000, 40_000)).unwrap();
                png_of(&d.join("imgs/small.png"), 4, 4);
                std::fs::create_dir_all(d.join("imgs/dog")).unwrap();
            },
            ["init", "--pool", "{d}/imgs", "--state", "{d}/s"],
            1,
            ["big.png", "40000"]
        ),
        case!(
            "png-garbage",
            |d, _| {
                let dir = d.join("imgs/cat");
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::create_dir_all(d.join("imgs/dog")).unwrap();
                png_of(&dir.join("a.png"), 4, 4);
                std::fs::write(dir.join("b.png"), b"\x89PNG\r\n\x1a\nnot really").unwrap();
            },
            ["init", "--pool", "{d}/imgs", "--state", "{d}/s"],
            1,
            ["b.png"]
        ),
        case!(
            "jpg-garbage",
            |d, _| {
                let dir = d.join("imgs/cat");
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::create_dir_all(d.join("imgs/dog")).unwrap();
                png_of(&dir.join("a.png"), 4, 4);
                std::fs::write(dir.join("c.jpg"), b"\xff\xd8\xff\xe0 truncated").unwrap();
            },
            ["init", "--pool", "{d}/imgs", "--state", "{d}/s"],
            1,
            ["c.jpg"]
        ),
        case!(
            // Found by fuzzing (fuzz/README.md): a palette of 47 bytes made png 0.18.1 panic.
            "png-palette-of-47-bytes",
            |d, _| {
                let dir = d.join("imgs/cat");
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::create_dir_all(d.join("imgs/dog")).unwrap();
                std::fs::copy(
                    Path::new(env!("CARGO_MANIFEST_DIR"))
                        .join("tests/fixtures/fuzz/png-plte-47-bytes.png"),
                    dir.join("p.png"),
                )
                .unwrap();
            },
            ["init", "--pool", "{d}/imgs", "--state", "{d}/s"],
            1,
            ["p.png", "PLTE", "47 bytes"]
        ),
        case!(
            // Mixed sizes are scaled (a photo folder); a truncated image among them is still
            // named, after its header was read for the size.
            "images-mixed-sizes-one-truncated",
            |d, _| {
                let dir = d.join("imgs/cat");
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::create_dir_all(d.join("imgs/dog")).unwrap();
                png_of(&dir.join("a.png"), 4, 4);
                png_of(&dir.join("b.png"), 5, 4);
                let b = std::fs::read(dir.join("b.png")).unwrap();
                std::fs::write(dir.join("b.png"), &b[..40]).unwrap();
            },
            ["init", "--pool", "{d}/imgs", "--state", "{d}/s"],
            1,
            ["b.png"]
        ),
        case!(
            // A photo cut short: libjpeg would fill the rest grey; refused as Pillow refuses it.
            "jpg-truncated",
            |d, _| {
                let dir = d.join("imgs/cat");
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::create_dir_all(d.join("imgs/dog")).unwrap();
                let jpeg = std::fs::read(
                    Path::new(env!("CARGO_MANIFEST_DIR"))
                        .join("tests/fixtures/pillow_images/jpeg_420.jpg"),
                )
                .unwrap();
                std::fs::write(dir.join("cut.jpg"), &jpeg[..jpeg.len() * 2 / 3]).unwrap();
            },
            ["init", "--pool", "{d}/imgs", "--state", "{d}/s"],
            1,
            ["cut.jpg", "truncated"]
        ),
        case!(
            // A GIF deep in a class folder: the folder is refused naming it, not read without it.
            "images-nested-gif",
            |d, _| {
                let dir = d.join("imgs/cat/2024/garden");
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::create_dir_all(d.join("imgs/dog")).unwrap();
                png_of(&dir.join("a.png"), 4, 4);
                std::fs::write(dir.join("b.gif"), b"GIF89a").unwrap();
            },
            ["init", "--pool", "{d}/imgs", "--state", "{d}/s"],
            1,
            ["imgs", "cat/2024/garden/b.gif", "does not decode"]
        ),
        case!(
            // A link inside a class folder back to another class: its images would be read
            // again under this class (or, read first, never under their own).
            "images-link-into-the-tree",
            |d, _| {
                std::fs::create_dir_all(d.join("imgs/cat")).unwrap();
                std::fs::create_dir_all(d.join("imgs/dog")).unwrap();
                png_of(&d.join("imgs/cat/a.png"), 4, 4);
                png_of(&d.join("imgs/dog/b.png"), 4, 4);
                std::os::unix::fs::symlink("../dog", d.join("imgs/cat/more")).unwrap();
            },
            ["init", "--pool", "{d}/imgs", "--state", "{d}/s"],
            1,
            ["imgs", "cat/more -> dog", "inside itself"]
        ),
        case!(
            "images-dangling-link",
            |d, _| {
                std::fs::create_dir_all(d.join("imgs/cat")).unwrap();
                std::fs::create_dir_all(d.join("imgs/dog")).unwrap();
                png_of(&d.join("imgs/cat/a.png"), 4, 4);
                png_of(&d.join("imgs/dog/b.png"), 4, 4);
                std::os::unix::fs::symlink("gone.png", d.join("imgs/dog/c.png")).unwrap();
            },
            ["init", "--pool", "{d}/imgs", "--state", "{d}/s"],
            1,
            ["imgs", "dog/c.png", "link(s) to nothing"]
        ),
        case!(
            "images-none",
            |d, _| {
                std::fs::create_dir_all(d.join("imgs/cat")).unwrap();
                std::fs::write(d.join("imgs/notes.txt"), "x").unwrap();
            },
            ["init", "--pool", "{d}/imgs", "--state", "{d}/s"],
            1,
            ["imgs", "no .png"]
        ),
    ]
}
