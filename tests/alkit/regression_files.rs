//! Regression on embedding files: the shipped Friedman #1 tables written again by numpy
//! (`.npz`), safetensors and pyarrow (Parquet) (tests/reference/regression_files.py) read as
//! the CSV table's items, features and targets bit for bit, and a regression curve with the
//! last-layer kernel's batch rule on each file giving the CSV's figures; the task taken from
//! the dtype (float: numbers; integers refused without `--task`), several outputs from an
//! `(n, k)` tensor, pyarrow's narrow integer columns, a null target as an unknown one.
//!
//! The files need the reference Python (`ALKIT_PYTHON`, scripts/refpython.sh); without it the
//! test skips with a message, and `ALKIT_REQUIRE_NUMPY=1` makes a missing one fail it.

use super::feature_methods::python;
use super::regression::{figures, friedman};
use super::{alkit_cmd, tmp};
use alkit::data::target::read_table;
use alkit::data::{Table, Task};
use std::path::{Path, PathBuf};

const KINDS: [&str; 3] = ["npz", "safetensors", "parquet"];

/// The reference files in `dir`, `None` (a skip) without the reference Python.
fn files(dir: &Path) -> Option<PathBuf> {
    let py = python()?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference/regression_files.py");
    let o = std::process::Command::new(py)
        .arg(script)
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "regression_files.py: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    Some(dir.to_path_buf())
}

fn y() -> Vec<String> {
    vec!["y".to_string()]
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

fn same_items(a: &Table, b: &Table) {
    let what = b.path.display();
    assert_eq!(a.ids, b.ids, "{what}");
    assert_eq!(bits(&a.x), bits(&b.x), "{what}");
    assert_eq!(a.dim(), b.dim(), "{what}");
    let rows = |t: &Table| {
        (0..t.len())
            .map(|i| t.targets.row(i).to_vec())
            .collect::<Vec<_>>()
    };
    assert_eq!(rows(a), rows(b), "{what}");
}

#[test]
fn embedding_files_read_as_the_csv_table_and_take_their_task_from_the_dtype() {
    let dir = tmp("regression-files-read");
    let Some(f) = files(&dir) else { return };
    for split in ["train", "test"] {
        let csv = read_table(&friedman(split), &y(), None).unwrap();
        for kind in KINDS {
            let t = read_table(&f.join(format!("{split}.{kind}")), &y(), None).unwrap();
            same_items(&csv, &t);
            assert_eq!(t.features[0], "x[0]");
            assert_eq!(t.targets.names(), ["y"]);
        }
    }
    let csv = read_table(&friedman("train"), &y(), None).unwrap();
    // Integers could be classes: refused until the task is named, then read as numbers.
    let e = read_table(&f.join("ints.npz"), &y(), None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("only integers") && e.contains("task"), "{e}");
    let ints = read_table(&f.join("ints.npz"), &y(), Some(Task::Regression)).unwrap();
    for i in 0..ints.len() {
        assert_eq!(ints.targets.row(i)[0], csv.targets.row(i)[0].round());
    }
    // An (n, 2) float32 tensor: two outputs, named by position.
    let two = read_table(&f.join("two.safetensors"), &["y2".to_string()], None).unwrap();
    assert_eq!(two.targets.names(), ["y2[0]", "y2[1]"]);
    for i in 0..two.len() {
        let v = csv.targets.row(i)[0];
        let want = [f64::from(v as f32), f64::from((v * v) as f32)];
        assert_eq!(two.targets.row(i), want, "item {i}");
    }
    // pyarrow's narrow integer columns: integers, read once the task is named.
    for (name, lo, hi) in [("uint8", 0.0, 255.0), ("int8", -128.0, 127.0)] {
        let path = f.join(format!("{name}.parquet"));
        let e = read_table(&path, &y(), None).unwrap_err().to_string();
        assert!(e.contains("only integers"), "{e}");
        let t = read_table(&path, &y(), Some(Task::Regression)).unwrap();
        for i in 0..t.len() {
            let want = csv.targets.row(i)[0].round().clamp(lo, hi);
            assert_eq!(t.targets.row(i)[0], want, "{name} item {i}");
        }
    }
    // A null is a target not known yet.
    let nulls = read_table(&f.join("nulls.parquet"), &y(), None).unwrap();
    assert!(!nulls.targets.known(3) && nulls.targets.known(4));
    let e = read_table(&f.join("train.npz"), &y(), Some(Task::Classification))
        .unwrap_err()
        .to_string();
    assert!(e.contains("for regression"), "{e}");
}

/// `curve.csv`'s figures (the timing columns cut) of a curve on `train` and `test`.
fn curve(train: &Path, test: &Path, out: &Path) -> String {
    let o = alkit_cmd()
        .args(["-q", "curve", "--data"])
        .arg(train)
        .arg("--test")
        .arg(test)
        .args([
            "--target",
            "y",
            "--model",
            "linear-gauss",
            "--scorer",
            "lcmd,random",
        ])
        .args(["--kernel", "ll", "--cycles", "2", "--steps", "100", "--out"])
        .arg(out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    figures(&out.join("curve.csv"))
}

#[test]
fn a_regression_curve_on_each_embedding_file_gives_the_csv_table_s_figures() {
    let dir = tmp("regression-files-curve");
    let Some(f) = files(&dir.join("files")) else {
        return;
    };
    let want = curve(&friedman("train"), &friedman("test"), &dir.join("csv"));
    assert_eq!(want.lines().count(), 1 + 2 * 3, "{want}");
    for kind in KINDS {
        let got = curve(
            &f.join(format!("train.{kind}")),
            &f.join(format!("test.{kind}")),
            &dir.join(kind),
        );
        assert_eq!(got, want, "{kind}");
    }
}
