//! NumPy `.npy` and `.npz` embedding files: headers, dtypes, members and sizes that lie.

use super::*;

pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(
            "npy-truncated",
            |d, _| {
                let b = npy("<f4", "(4, 3)", &f32s(&[0.5; 12]));
                std::fs::write(d.join("p.npy"), &b[..b.len() - 6]).unwrap();
            },
            ["init", "--pool", "{d}/p.npy", "--state", "{d}/s"],
            1,
            [
                "p.npy",
                "needs 48 bytes after its header; the file holds 42"
            ]
        ),
        case!(
            "npy-shape-lies",
            |d, _| {
                let b = npy("<f4", "(4000000000, 3)", &f32s(&[0.5; 12]));
                std::fs::write(d.join("p.npy"), b).unwrap();
            },
            ["init", "--pool", "{d}/p.npy", "--state", "{d}/s"],
            1,
            ["p.npy", "shape [4000000000, 3]", "the file holds 48"]
        ),
        case!(
            "npy-shape-overflows",
            |d, _| {
                let b = npy("<f4", "(4611686018427387904, 4611686018427387904)", &[]);
                std::fs::write(d.join("p.npy"), b).unwrap();
            },
            ["init", "--pool", "{d}/p.npy", "--state", "{d}/s"],
            1,
            ["p.npy", "which overflows"]
        ),
        case!(
            "npy-object-dtype",
            |d, _| {
                // A pickle's opcodes where the values would be: never read.
                let b = npy("|O", "(2, 1)", b"\x80\x04\x95cos\nsystem\n.");
                std::fs::write(d.join("p.npy"), b).unwrap();
            },
            ["init", "--pool", "{d}/p.npy", "--state", "{d}/s"],
            1,
            ["p.npy", "`|O`", "never unpickles"]
        ),
        case!(
            "npy-header-too-long",
            |d, _| {
                let mut b = b"\x93NUMPY\x02\x00".to_vec();
                b.extend(u32::MAX.to_le_bytes());
                b.extend([b' '; 64]);
                std::fs::write(d.join("p.npy"), b).unwrap();
            },
            ["init", "--pool", "{d}/p.npy", "--state", "{d}/s"],
            1,
            ["p.npy", "a header of 4294967295 bytes"]
        ),
        case!(
            "npz-no-features",
            |d, _| {
                let labels = npy("<i8", "(2,)", &i64s(&[0, 1]));
                std::fs::write(d.join("p.npz"), npz(&[("labels.npy", labels)])).unwrap();
            },
            ["init", "--pool", "{d}/p.npz", "--state", "{d}/s"],
            1,
            ["p.npz", "no array `features`", "it holds labels"]
        ),
        case!(
            "npz-ids-repeated",
            |d, _| {
                let x = npy("<f4", "(2, 2)", &f32s(&[0.5; 4]));
                let ids = npy("<U2", "(2,)", &unicode(&["a1", "a1"], 2));
                let b = npz(&[("features.npy", x), ("ids.npy", ids)]);
                std::fs::write(d.join("p.npz"), b).unwrap();
            },
            ["init", "--pool", "{d}/p.npz", "--state", "{d}/s"],
            1,
            ["p.npz", "array `ids`: id `a1` is given to items 0 and 1"]
        ),
        case!(
            "npz-member-shape-lies",
            |d, _| {
                let x = npy("<f4", "(5, 2)", &f32s(&[0.5; 4]));
                std::fs::write(d.join("p.npz"), npz(&[("features.npy", x)])).unwrap();
            },
            ["init", "--pool", "{d}/p.npz", "--state", "{d}/s"],
            1,
            ["p.npz", "array `features` has shape [5, 2]", "holds 16"]
        ),
        case!(
            "npz-truncated",
            |d, _| {
                let x = npy("<f4", "(2, 2)", &f32s(&[0.5; 4]));
                let b = npz(&[("features.npy", x)]);
                std::fs::write(d.join("p.npz"), &b[..b.len() / 2]).unwrap();
            },
            ["init", "--pool", "{d}/p.npz", "--state", "{d}/s"],
            1,
            ["p.npz", "not an .npz (zip) file"]
        ),
        case!(
            "npz-crc-mismatch",
            |d, _| {
                let x = npy("<f4", "(2, 2)", &f32s(&[0.5; 4]));
                let mut b = npz(&[("features.npy", x)]);
                // The last value's last byte, inside the member: its CRC no longer matches.
                let at = b
                    .windows(4)
                    .position(|w| w == 0.5f32.to_le_bytes())
                    .unwrap()
                    + 15;
                b[at] ^= 1;
                std::fs::write(d.join("p.npz"), b).unwrap();
            },
            ["init", "--pool", "{d}/p.npz", "--state", "{d}/s"],
            1,
            ["p.npz", "array `features` does not match the zip's CRC-32"]
        ),
        case!(
            "npz-labels-length",
            |d, _| {
                let x = npy("<f4", "(2, 2)", &f32s(&[0.5; 4]));
                let y = npy("<i8", "(3,)", &i64s(&[0, 1, 0]));
                let b = npz(&[("features.npy", x), ("labels.npy", y)]);
                std::fs::write(d.join("p.npz"), b).unwrap();
            },
            ["init", "--pool", "{d}/p.npz", "--state", "{d}/s"],
            1,
            ["p.npz", "array `labels` has shape [3]; expected (2,)"]
        ),
        case!(
            "st-display-root-outside-its-folder",
            |d, _| {
                let x = ("x", "F32", &[2usize, 2][..], f32s(&[0.5; 4]));
                let meta = [
                    ("display_kind", "image"),
                    ("display_root", "/"),
                    ("ids", r#"["etc/a.png", "etc/b.png"]"#),
                ];
                std::fs::write(d.join("p.safetensors"), st_meta(&[x], &meta)).unwrap();
            },
            [
                "init",
                "--pool",
                "{d}/p.safetensors",
                "--state",
                "{d}/s",
                "--classes",
                "a,b"
            ],
            1,
            [
                "p.safetensors",
                "`display_root` `/`",
                "inside the file's folder"
            ]
        ),
        case!(
            "teach-label-studio-task-names-two-images",
            |d, _| {
                std::fs::create_dir_all(d.join("photos")).unwrap();
                for n in ["a", "b"] {
                    png_of(&d.join(format!("photos/{n}.png")), 4, 4);
                }
                ok(&[
                    "init",
                    "--pool",
                    &d.join("photos").display().to_string(),
                    "--state",
                    &d.join("s").display().to_string(),
                    "--classes",
                    "cat,dog",
                    "--steps",
                    "2",
                ]);
                let export = serde_json::json!([{
                    "id": 7,
                    "data": {"image": "/data/local-files/?d=photos/a.png",
                             "thumb": "/data/local-files/?d=photos/b.png"},
                    "annotations": [{"result": [{"type": "choices",
                                                 "value": {"choices": ["cat"]}}]}],
                }]);
                std::fs::write(d.join("export.json"), export.to_string()).unwrap();
            },
            ["teach", "--state", "{d}/s", "--labels", "{d}/export.json"],
            1,
            [
                "export.json",
                "task 7",
                "two items of the pool",
                "`a.png`",
                "`b.png`"
            ]
        ),
        case!(
            "npz-display-image-absolute",
            |d, _| {
                let x = npy("<f4", "(2, 2)", &f32s(&[0.5; 4]));
                let shown = npy("<U15", "(2,)", &unicode(&["/etc/passwd.png", "b.png"], 15));
                let b = npz(&[("features.npy", x), ("display_image.npy", shown)]);
                std::fs::write(d.join("p.npz"), b).unwrap();
            },
            [
                "init",
                "--pool",
                "{d}/p.npz",
                "--state",
                "{d}/s",
                "--classes",
                "a,b"
            ],
            1,
            [
                "p.npz",
                "`/etc/passwd.png`",
                "relative to the file's folder"
            ]
        ),
        case!(
            "npz-display-image-link-to-a-text-file",
            |d, _| {
                let x = npy("<f4", "(2, 2)", &f32s(&[0.5, 0.1, 0.2, 0.9]));
                let shown = npy("<U5", "(2,)", &unicode(&["a.png", "b.png"], 5));
                let b = npz(&[("features.npy", x), ("display_image.npy", shown)]);
                std::fs::write(d.join("p.npz"), b).unwrap();
                png_of(&d.join("b.png"), 4, 4);
                std::fs::write(d.join("notes.txt"), "not an image").unwrap();
                #[cfg(unix)]
                std::os::unix::fs::symlink(d.join("notes.txt"), d.join("a.png")).unwrap();
                ok(&[
                    "init",
                    "--pool",
                    &d.join("p.npz").display().to_string(),
                    "--state",
                    &d.join("s").display().to_string(),
                    "--model",
                    "linear",
                    "--steps",
                    "2",
                    "--classes",
                    "a,b",
                ]);
            },
            [
                "query",
                "--state",
                "{d}/s",
                "--n",
                "2",
                "--scorer",
                "random",
                "--format",
                "label-studio",
                "--out",
                "{d}/q.json"
            ],
            1,
            ["a.png", "not a PNG, JPEG or WebP file"]
        ),
        case!(
            "st-negative-label",
            |d, _| {
                std::fs::write(d.join("p.safetensors"), st_pool(&[0, -1])).unwrap();
            },
            ["init", "--pool", "{d}/p.safetensors", "--state", "{d}/s"],
            1,
            ["p.safetensors", "-1", "item 1"]
        ),
        case!(
            "st-x-f64",
            |d, _| {
                std::fs::write(
                    d.join("p.safetensors"),
                    st(&[("x", "F64", &[2, 2], vec![0; 32])], None),
                )
                .unwrap();
            },
            ["init", "--pool", "{d}/p.safetensors", "--state", "{d}/s"],
            1,
            ["p.safetensors", "F64"]
        ),
        // Streamed by `score` (positioned reads after the header is checked): the header
        // must keep every read inside the file, and a bad value is named across chunks.
        case!(
            "score-stream-x-past-the-end",
            |d, _| {
                let mut b = st(&[("x", "F32", &[2, 28, 28], f32s(&[0.5; 2 * 784]))], None);
                b.truncate(b.len() - 100);
                std::fs::write(d.join("p.safetensors"), b).unwrap();
            },
            [
                "score",
                "--checkpoint",
                "{ck}",
                "--data",
                "{d}/p.safetensors",
                "--out",
                "{d}/o.csv"
            ],
            1,
            ["p.safetensors", "data section"]
        ),
        case!(
            "score-stream-tensors-overlap",
            |d, _| {
                let mut b = st(
                    &[
                        ("x", "F32", &[1, 28, 28], f32s(&[0.5; 784])),
                        ("y", "U8", &[4], vec![0; 4]),
                    ],
                    None,
                );
                let h = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
                let header = String::from_utf8(b[8..8 + h].to_vec()).unwrap();
                let moved = header.replace("[3136,3140]", "[3132,3136]");
                assert_ne!(moved, header);
                b.splice(8..8 + h, moved.into_bytes());
                std::fs::write(d.join("p.safetensors"), b).unwrap();
            },
            [
                "score",
                "--checkpoint",
                "{ck}",
                "--data",
                "{d}/p.safetensors",
                "--out",
                "{d}/o.csv"
            ],
            1,
            ["p.safetensors", "overlap"]
        ),
        case!(
            "score-stream-header-of-2^40-bytes",
            |d, _| {
                let mut b = (1u64 << 40).to_le_bytes().to_vec();
                b.extend_from_slice(b"{}");
                std::fs::write(d.join("p.safetensors"), b).unwrap();
            },
            [
                "score",
                "--checkpoint",
                "{ck}",
                "--data",
                "{d}/p.safetensors",
                "--out",
                "{d}/o.csv"
            ],
            1,
            ["p.safetensors", "header of 1099511627776 bytes"]
        ),
        case!(
            "score-stream-nan-in-the-second-chunk",
            |d, _| {
                let mut x = vec![0.5f32; 2 * 784];
                x[785] = f32::NAN;
                std::fs::write(
                    d.join("p.safetensors"),
                    st(&[("x", "F32", &[2, 28, 28], f32s(&x))], None),
                )
                .unwrap();
            },
            [
                "score",
                "--checkpoint",
                "{ck}",
                "--data",
                "{d}/p.safetensors",
                "--chunk",
                "1",
                "--out",
                "{d}/o.csv"
            ],
            1,
            ["p.safetensors", "non-finite", "position 785"]
        ),
        case!(
            "st-x-nan",
            |d, _| {
                std::fs::write(
                    d.join("p.safetensors"),
                    st(
                        &[("x", "F32", &[2, 2], f32s(&[0.0, f32::NAN, 1.0, 2.0]))],
                        None,
                    ),
                )
                .unwrap();
            },
            ["init", "--pool", "{d}/p.safetensors", "--state", "{d}/s"],
            1,
            ["p.safetensors", "non-finite", "position 1"]
        ),
        case!(
            "st-y-shape",
            |d, _| {
                std::fs::write(
                    d.join("p.safetensors"),
                    st(
                        &[
                            ("x", "F32", &[2, 2], f32s(&[0.0; 4])),
                            ("y", "I64", &[3], i64s(&[0, 1, 1])),
                        ],
                        None,
                    ),
                )
                .unwrap();
            },
            ["init", "--pool", "{d}/p.safetensors", "--state", "{d}/s"],
            1,
            ["p.safetensors", "tensor `y` has shape"]
        ),
        case!(
            "st-metadata-too-few-classes",
            |d, _| {
                std::fs::write(
                    d.join("p.safetensors"),
                    st(
                        &[
                            ("x", "F32", &[2, 2], f32s(&[0.0; 4])),
                            ("y", "I64", &[2], i64s(&[0, 2])),
                        ],
                        Some(("classes", "cat,dog")),
                    ),
                )
                .unwrap();
            },
            ["init", "--pool", "{d}/p.safetensors", "--state", "{d}/s"],
            1,
            ["p.safetensors", "label 2 at item 1", "2 classes"]
        ),
        case!(
            "st-metadata-duplicate-class",
            |d, _| {
                std::fs::write(
                    d.join("p.safetensors"),
                    st(
                        &[
                            ("x", "F32", &[2, 2], f32s(&[0.0; 4])),
                            ("y", "I64", &[2], i64s(&[0, 1])),
                        ],
                        Some(("classes", "cat,cat")),
                    ),
                )
                .unwrap();
            },
            ["init", "--pool", "{d}/p.safetensors", "--state", "{d}/s"],
            1,
            ["p.safetensors", "`cat`", "twice"]
        ),
        case!(
            "st-garbage",
            |d, _| {
                std::fs::write(d.join("p.safetensors"), b"definitely not safetensors").unwrap();
            },
            ["init", "--pool", "{d}/p.safetensors", "--state", "{d}/s"],
            1,
            ["p.safetensors", "not a safetensors file"]
        ),
        case!(
            "st-huge-header-length",
            |d, _| {
                let mut b = (1u64 << 60).to_le_bytes().to_vec();
                b.extend(b"{}");
                std::fs::write(d.join("p.safetensors"), b).unwrap();
            },
            ["init", "--pool", "{d}/p.safetensors", "--state", "{d}/s"],
            1,
            ["p.safetensors", "not a safetensors file"]
        ),
        case!(
            "st-no-x",
            |d, _| {
                std::fs::write(
                    d.join("p.safetensors"),
                    st(&[("images", "F32", &[2, 2], f32s(&[0.0; 4]))], None),
                )
                .unwrap();
            },
            ["init", "--pool", "{d}/p.safetensors", "--state", "{d}/s"],
            1,
            ["p.safetensors", "no tensor `x`"]
        ),
        case!(
            "st-offsets-lie",
            |d, _| {
                // The header's shape needs 16 bytes, its offsets give 8.
                let mut b = st(&[("x", "F32", &[2, 2], f32s(&[0.0; 2]))], None);
                b.extend([0u8; 8]);
                std::fs::write(d.join("p.safetensors"), b).unwrap();
            },
            ["init", "--pool", "{d}/p.safetensors", "--state", "{d}/s"],
            1,
            ["p.safetensors", "not a safetensors file"]
        ),
    ]
}
