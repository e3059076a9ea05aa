//! Regression targets: cells that are not finite numbers, integers that could be classes,
//! a constant target, a missing column, a test table that does not match the pool; the same
//! in embedding files (a safetensors tensor, an `.npz` array of the wrong kind or shape).

use super::*;

/// A table of `rows` rows (`a` a feature, `y` the target), `y` as `cell(i)` gives it.
fn table(d: &Path, name: &str, rows: usize, cell: fn(usize) -> String) {
    let mut text = String::from("id,a,y\n");
    for i in 0..rows {
        text.push_str(&format!("r{i},{},{}\n", i as f32 / 7.0, cell(i)));
    }
    std::fs::write(d.join(name), text).unwrap();
}

fn good(i: usize) -> String {
    format!("{}", i as f32 * 0.37 + 0.5)
}

/// A safetensors pool `x (50, 2)` beside a target tensor `y` of `dtype`, `shape`, `bytes`.
fn st_target(d: &Path, dtype: &str, shape: &[usize], bytes: Vec<u8>) {
    let x: Vec<f32> = (0..100).map(|i| i as f32 / 9.0).collect();
    let file = st(
        &[("x", "F32", &[50, 2], f32s(&x)), ("y", dtype, shape, bytes)],
        None,
    );
    std::fs::write(d.join("t.safetensors"), file).unwrap();
}

/// An `.npz` pool `features (50, 2)` beside an array `y` (`descr`, `shape`, `bytes`).
fn npz_target(d: &Path, descr: &str, shape: &str, bytes: Vec<u8>) {
    let x: Vec<f32> = (0..100).map(|i| i as f32 / 9.0).collect();
    let file = npz(&[
        ("features.npy", npy("<f4", "(50, 2)", &f32s(&x))),
        ("y.npy", npy(descr, shape, &bytes)),
    ]);
    std::fs::write(d.join("t.npz"), file).unwrap();
}

fn f64s(v: impl Iterator<Item = f64>) -> Vec<u8> {
    v.flat_map(f64::to_le_bytes).collect()
}

fn embedding_file_cases() -> Vec<Case> {
    vec![
        case!(
            "target-safetensors-bool",
            |d, _| st_target(d, "BOOL", &[50], vec![1; 50]),
            [
                "curve",
                "--data",
                "{d}/t.safetensors",
                "--test",
                "{d}/t.safetensors",
                "--target",
                "y",
                "--out",
                "{d}/o"
            ],
            1,
            ["t.safetensors", "tensor `y` is BOOL; expected numbers"]
        ),
        case!(
            "target-safetensors-shape",
            |d, _| st_target(d, "F64", &[49], f64s((0..49).map(f64::from))),
            [
                "curve",
                "--data",
                "{d}/t.safetensors",
                "--test",
                "{d}/t.safetensors",
                "--target",
                "y",
                "--out",
                "{d}/o"
            ],
            1,
            ["t.safetensors", "target `y` has shape [49]; expected (50,)"]
        ),
        case!(
            "target-safetensors-infinite",
            |d, _| st_target(
                d,
                "F64",
                &[50],
                f64s((0..50).map(|i| if i == 7 { f64::INFINITY } else { f64::from(i) }))
            ),
            [
                "curve",
                "--data",
                "{d}/t.safetensors",
                "--test",
                "{d}/t.safetensors",
                "--target",
                "y",
                "--out",
                "{d}/o"
            ],
            1,
            ["t.safetensors", "item `7`: target `y` is inf"]
        ),
        case!(
            "target-npz-integers",
            |d, _| npz_target(d, "<i8", "(50,)", i64s(&(0..50).collect::<Vec<_>>())),
            [
                "curve",
                "--data",
                "{d}/t.npz",
                "--test",
                "{d}/t.npz",
                "--target",
                "y",
                "--out",
                "{d}/o"
            ],
            2,
            ["t.npz", "hold only integers", "--task"]
        ),
        case!(
            "target-npz-unicode",
            |d, _| npz_target(d, "<U2", "(50,)", unicode(&["ab"; 50], 2)),
            [
                "curve",
                "--data",
                "{d}/t.npz",
                "--test",
                "{d}/t.npz",
                "--target",
                "y",
                "--out",
                "{d}/o"
            ],
            1,
            ["t.npz", "array `y` is <U2; expected numbers"]
        ),
        case!(
            "target-npz-missing",
            |d, _| npz_target(d, "<f8", "(50,)", f64s((0..50).map(f64::from))),
            [
                "curve",
                "--data",
                "{d}/t.npz",
                "--test",
                "{d}/t.npz",
                "--target",
                "z",
                "--out",
                "{d}/o"
            ],
            2,
            ["t.npz has no array `z`; it holds features, y"]
        ),
        case!(
            "target-npy",
            |d, _| std::fs::write(d.join("t.npy"), npy("<f4", "(2, 2)", &f32s(&[0.5; 4]))).unwrap(),
            [
                "curve",
                "--data",
                "{d}/t.npy",
                "--test",
                "{d}/t.npy",
                "--target",
                "y",
                "--out",
                "{d}/o"
            ],
            1,
            ["t.npy", "no targets beside the features", "np.savez"]
        ),
    ]
}

pub(super) fn cases() -> Vec<Case> {
    let mut cases = embedding_file_cases();
    cases.extend(vec![
        case!(
            "target-nan",
            |d, _| table(d, "t.csv", 50, |i| if i == 1 {
                "nan".into()
            } else {
                good(i)
            }),
            [
                "curve",
                "--data",
                "{d}/t.csv",
                "--test",
                "{d}/t.csv",
                "--target",
                "y",
                "--out",
                "{d}/o"
            ],
            1,
            ["t.csv:3", "target column `y`", "not a finite number"]
        ),
        case!(
            "target-not-a-number",
            |d, _| table(d, "t.csv", 50, |i| if i == 4 {
                "seven".into()
            } else {
                good(i)
            }),
            [
                "curve",
                "--data",
                "{d}/t.csv",
                "--test",
                "{d}/t.csv",
                "--target",
                "y",
                "--out",
                "{d}/o"
            ],
            1,
            ["t.csv:6", "`seven` is not a number"]
        ),
        case!(
            "target-1e400",
            |d, _| table(d, "t.csv", 50, |i| if i == 2 {
                "1e400".into()
            } else {
                good(i)
            }),
            [
                "curve",
                "--data",
                "{d}/t.csv",
                "--test",
                "{d}/t.csv",
                "--target",
                "y",
                "--out",
                "{d}/o"
            ],
            1,
            ["t.csv:4", "`1e400` is inf"]
        ),
        case!(
            "target-integers-without-task",
            |d, _| table(d, "t.csv", 50, |i| (i % 5).to_string()),
            [
                "curve",
                "--data",
                "{d}/t.csv",
                "--test",
                "{d}/t.csv",
                "--target",
                "y",
                "--out",
                "{d}/o"
            ],
            2,
            ["only integers", "--task"]
        ),
        case!(
            "target-constant",
            |d, _| table(d, "t.csv", 50, |_| "4.5".into()),
            [
                "curve",
                "--data",
                "{d}/t.csv",
                "--test",
                "{d}/t.csv",
                "--target",
                "y",
                "--out",
                "{d}/o"
            ],
            2,
            [
                "t.csv: target `y` takes one value (4.5) on every item",
                "nothing to learn"
            ]
        ),
        case!(
            "target-column-missing",
            |d, _| table(d, "t.csv", 50, good),
            [
                "curve",
                "--data",
                "{d}/t.csv",
                "--test",
                "{d}/t.csv",
                "--target",
                "z",
                "--out",
                "{d}/o"
            ],
            2,
            ["has no column `z`", "id, a, y"]
        ),
        case!(
            "target-test-other-columns",
            |d, _| {
                table(d, "t.csv", 50, good);
                std::fs::write(d.join("u.csv"), "id,b,y\nq,1,0.5\n").unwrap();
            },
            [
                "curve",
                "--data",
                "{d}/t.csv",
                "--test",
                "{d}/u.csv",
                "--target",
                "y",
                "--out",
                "{d}/o"
            ],
            2,
            ["u.csv has the feature columns b", "give both the same"]
        ),
        case!(
            "target-pool-item-unlabeled",
            |d, _| table(d, "t.csv", 50, |i| if i == 9 {
                String::new()
            } else {
                good(i)
            }),
            [
                "curve",
                "--data",
                "{d}/t.csv",
                "--test",
                "{d}/t.csv",
                "--target",
                "y",
                "--out",
                "{d}/o"
            ],
            2,
            ["item `r9` has no target"]
        ),
        case!(
            "target-with-task-classification",
            |d, _| table(d, "t.csv", 50, good),
            [
                "curve",
                "--data",
                "{d}/t.csv",
                "--test",
                "{d}/t.csv",
                "--target",
                "y",
                "--task",
                "classification",
                "--out",
                "{d}/o"
            ],
            2,
            ["for regression", "`label` column"]
        ),
    ]);
    cases
}
