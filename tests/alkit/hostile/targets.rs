//! Regression targets: cells that are not finite numbers, integers that could be classes,
//! a constant target, a missing column, a test table that does not match the pool.

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

pub(super) fn cases() -> Vec<Case> {
    vec![
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
    ]
}
