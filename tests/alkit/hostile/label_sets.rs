//! Multi-label targets: a label outside the pool's set, an empty set where none is allowed, a
//! separator inside a label name, a label given twice in one answer, a 0/1 column holding
//! something else, a tensor that is not 0/1, and a single-label scorer asked of label sets.

use super::*;

/// A pool of 40 rows (`a` a feature, `tags` a label set) with row `at`'s set `cell`, every
/// other row `x|y`, `x` or `y` in turn.
fn pool(d: &Path, name: &str, at: usize, cell: &str) {
    let mut text = String::from("id,a,tags\n");
    for i in 0..40 {
        let tags = match (i == at, i % 3) {
            (true, _) => cell,
            (false, 0) => "x|y",
            (false, 1) => "x",
            _ => "y",
        };
        text.push_str(&format!("r{i},{},{tags}\n", i as f32 / 7.0));
    }
    std::fs::write(d.join(name), text).unwrap();
}

/// A `curve` over the pool `t.csv` and test table `u.csv` in `{d}`.
macro_rules! ml_case {
    ($name:literal, $setup:expr, [$($extra:literal),*], $code:literal, [$($s:literal),* $(,)?]) => {
        case!(
            $name,
            $setup,
            [
                "curve", "--data", "{d}/t.csv", "--test", "{d}/u.csv", "--labels", "tags",
                "--out", "{d}/o" $(, $extra)*
            ],
            $code,
            [$($s),*]
        )
    };
}

pub(super) fn cases() -> Vec<Case> {
    vec![
        ml_case!(
            "labels-outside-the-pool",
            |d, _| {
                pool(d, "t.csv", 99, "");
                pool(d, "u.csv", 3, "x|zebra");
            },
            [],
            1,
            [
                "u.csv:5",
                "label `zebra` is not one of the pool's labels (x, y)"
            ]
        ),
        ml_case!(
            "labels-empty-set",
            |d, _| {
                pool(d, "t.csv", 6, "");
                pool(d, "u.csv", 99, "");
            },
            [],
            1,
            ["t.csv:8", "this item has no label", "--empty-sets"]
        ),
        ml_case!(
            "labels-given-twice",
            |d, _| {
                pool(d, "t.csv", 2, "x|y|x");
                pool(d, "u.csv", 99, "");
            },
            [],
            1,
            ["t.csv:4", "label `x` given twice in `x|y|x`"]
        ),
        case!(
            "labels-separator-in-name",
            |d, _| std::fs::write(d.join("t.csv"), "a,x|y,z\n1,1,0\n2,0,1\n").unwrap(),
            [
                "curve",
                "--data",
                "{d}/t.csv",
                "--test",
                "{d}/t.csv",
                "--labels",
                "x|y,z",
                "--out",
                "{d}/o"
            ],
            2,
            ["t.csv", "label `x|y` holds the separator `|`"]
        ),
        case!(
            "labels-column-not-0-1",
            |d, _| std::fs::write(d.join("t.csv"), "a,x,y\n1,1,0\n2,0,2\n").unwrap(),
            [
                "curve",
                "--data",
                "{d}/t.csv",
                "--test",
                "{d}/t.csv",
                "--labels",
                "x,y",
                "--out",
                "{d}/o"
            ],
            1,
            ["t.csv:3", "label column `y`: `2` is not 0 or 1"]
        ),
        case!(
            "labels-npz-not-0-1",
            |d, _| {
                let x: Vec<f32> = (0..20).map(|i| i as f32 / 9.0).collect();
                let y: Vec<u8> = (0..20)
                    .flat_map(|i| if i == 7 { 0.5f64 } else { 1.0 }.to_le_bytes())
                    .collect();
                let file = npz(&[
                    ("features.npy", npy("<f4", "(10, 2)", &f32s(&x))),
                    ("y.npy", npy("<f8", "(10, 2)", &y)),
                ]);
                std::fs::write(d.join("t.npz"), file).unwrap();
            },
            [
                "curve",
                "--data",
                "{d}/t.npz",
                "--test",
                "{d}/t.npz",
                "--labels",
                "y",
                "--out",
                "{d}/o"
            ],
            1,
            ["t.npz", "item `3`: label `y[1]` is 0.5", "0 or 1"]
        ),
        ml_case!(
            "labels-with-a-single-label-scorer",
            |d, _| {
                pool(d, "t.csv", 99, "");
                pool(d, "u.csv", 99, "");
            },
            ["--scorer", "entropy"],
            2,
            [
                "`entropy` does not score label sets",
                "entropy-mean",
                "bald-sum"
            ]
        ),
        case!(
            "labels-single-0-1-column",
            |d, _| std::fs::write(d.join("t.csv"), "a,spam\n1,1\n2,0\n3,1\n").unwrap(),
            [
                "curve",
                "--data",
                "{d}/t.csv",
                "--test",
                "{d}/t.csv",
                "--labels",
                "spam",
                "--out",
                "{d}/o"
            ],
            2,
            ["t.csv", "column `spam` holds only 0 and 1", "two or more"]
        ),
        case!(
            "labels-too-many",
            |d, _| {
                let rows: String = (0..10_001).map(|i| format!("{i},tag{i}\n")).collect();
                std::fs::write(d.join("t.csv"), format!("a,tags\n{rows}")).unwrap();
            },
            [
                "curve",
                "--data",
                "{d}/t.csv",
                "--test",
                "{d}/t.csv",
                "--labels",
                "tags",
                "--out",
                "{d}/o"
            ],
            2,
            [
                "t.csv",
                "10001 distinct labels, more than the limit of 10000"
            ]
        ),
    ]
}
