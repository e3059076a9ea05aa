//! IDX folders: labels out of range, truncated and lying headers.

use super::*;

pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(
            "idx-train-label-255",
            |d, fx| {
                let i = idx_copy(d, fx);
                edit_idx(&i, "train-labels-idx1-ubyte", |b| b[8 + 17] = 255);
            },
            ["train", "--data", "{d}/idx", "--steps", "1", "--out", "{d}/o"],
            1,
            [
                "train-labels-idx1-ubyte",
                "label 255 at item 17",
                "skips class 10"
            ]
        ),
        case!(
            "idx-test-label-200",
            |d, fx| {
                let i = idx_copy(d, fx);
                edit_idx(&i, "t10k-labels-idx1-ubyte", |b| b[8 + 3] = 200);
            },
            ["train", "--data", "{d}/idx", "--steps", "1", "--out", "{d}/o"],
            1,
            ["t10k-labels-idx1-ubyte", "label 200 at item 3"]
        ),
        case!(
            "idx-only-test-files",
            |d, fx| {
                let i = idx_copy(d, fx);
                std::fs::remove_file(i.join("train-images-idx3-ubyte.gz")).unwrap();
                std::fs::remove_file(i.join("train-labels-idx1-ubyte.gz")).unwrap();
            },
            ["train", "--data", "{d}/idx", "--steps", "1", "--out", "{d}/o"],
            1,
            ["train-images-idx3-ubyte", "neither"]
        ),
        case!(
            "idx-bad-magic",
            |d, fx| {
                let i = idx_copy(d, fx);
                edit_idx(&i, "train-images-idx3-ubyte", |b| b[3] = 0x01);
            },
            ["train", "--data", "{d}/idx", "--steps", "1", "--out", "{d}/o"],
            1,
            ["train-images-idx3-ubyte", "magic"]
        ),
        case!(
            "idx-truncated",
            |d, fx| {
                let i = idx_copy(d, fx);
                edit_idx(&i, "t10k-images-idx3-ubyte", |b| b.truncate(b.len() - 7));
            },
            ["train", "--data", "{d}/idx", "--steps", "1", "--out", "{d}/o"],
            1,
            ["t10k-images-idx3-ubyte", "truncated"]
        ),
        case!(
            "idx-trailing",
            |d, fx| {
                let i = idx_copy(d, fx);
                edit_idx(&i, "t10k-labels-idx1-ubyte", |b| b.extend([1, 2, 3]));
            },
            ["train", "--data", "{d}/idx", "--steps", "1", "--out", "{d}/o"],
            1,
            ["t10k-labels-idx1-ubyte", "3"]
        ),
        case!(
            "idx-count-mismatch",
            |d, fx| {
                let i = idx_copy(d, fx);
                edit_idx(&i, "train-labels-idx1-ubyte", |b| {
                    b.truncate(b.len() - 1);
                    b[7] -= 1;
                });
            },
            ["train", "--data", "{d}/idx", "--steps", "1", "--out", "{d}/o"],
            1,
            ["train-labels-idx1-ubyte", "2000", "1999"]
        ),
        case!(
            "idx-gzip-bomb",
            |d, fx| {
                let i = idx_copy(d, fx);
                let mut b = gunzip(&i.join("t10k-labels-idx1-ubyte.gz"));
                b.resize(b.len() + (256 << 20), 0);
                alkit::data::idx::write_gz(&i.join("t10k-labels-idx1-ubyte.gz"), &b).unwrap();
            },
            ["train", "--data", "{d}/idx", "--steps", "1", "--out", "{d}/o"],
            1,
            ["t10k-labels-idx1-ubyte.gz", "trailing"]
        ),
        case!(
            "idx-gzip-liar",
            |d, fx| {
                let i = idx_copy(d, fx);
                let mut h = 0x0803u32.to_be_bytes().to_vec();
                for x in [60_000u32, 10_000, 10_000] {
                    h.extend(x.to_be_bytes());
                }
                alkit::data::idx::write_gz(&i.join("train-images-idx3-ubyte.gz"), &h).unwrap();
            },
            ["train", "--data", "{d}/idx", "--steps", "1", "--out", "{d}/o"],
            1,
            ["train-images-idx3-ubyte.gz", "promises"]
        ),
        case!(
            "idx-corrupt-gzip",
            |d, fx| {
                let i = idx_copy(d, fx);
                let p = i.join("t10k-images-idx3-ubyte.gz");
                let mut b = std::fs::read(&p).unwrap();
                let n = b.len();
                b[n / 2..n / 2 + 64].fill(0xAB);
                std::fs::write(&p, b).unwrap();
            },
            ["train", "--data", "{d}/idx", "--steps", "1", "--out", "{d}/o"],
            1,
            ["t10k-images-idx3-ubyte.gz", "gzip"]
        ),
        case!(
            "idx-test-images-other-size",
            |d, fx| {
                let i = idx_copy(d, fx);
                let px = vec![3u8; 500 * 27 * 28];
                std::fs::remove_file(i.join("t10k-images-idx3-ubyte.gz")).unwrap();
                std::fs::write(
                    i.join("t10k-images-idx3-ubyte"),
                    alkit::data::idx::encode_images(&px, 500, 27, 28),
                )
                .unwrap();
            },
            ["train", "--data", "{d}/idx", "--steps", "1", "--out", "{d}/o"],
            1,
            ["t10k-images-idx3-ubyte", "27"]
        ),
    ]
}
