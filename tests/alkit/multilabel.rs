//! Multi-label runs: the metrics equal scikit-learn's on its own example
//! (tests/fixtures/multilabel_sklearn.json, written by tests/reference/multilabel_sklearn.py,
//! which the test also runs live), the shipped tag tables read alike from a label-set column,
//! 0/1 columns, numpy's `.npz` and safetensors (tests/reference/multilabel_files.py), and
//! `alkit curve --labels` reproducible, its figures the same whichever layout holds the sets.

use super::feature_methods::{python, reference};
use super::{alkit_cmd, json_flat, tmp};
use alkit::data::label_sets::{read_label_table, LabelFormat, LabelTable};
use alkit::metrics::multilabel::label_metrics;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn shipped(split: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("data/multilabel/tags_{split}.csv"))
}

fn tags() -> Vec<String> {
    vec!["tags".to_string()]
}

#[test]
fn metrics_equal_scikit_learns_on_its_example() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/multilabel_sklearn.json");
    let fx: Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
    let labels = fx["labels"].as_u64().unwrap() as usize;
    let truth: Vec<u8> = json_flat(&fx["truth"]).iter().map(|&v| v as u8).collect();
    let probs = json_flat(&fx["probs"]);
    let t = fx["threshold"].as_f64().unwrap();
    let m = label_metrics(&truth, &probs, labels, t).unwrap();
    let check = |want: &Value| {
        let got = [
            ("subset_accuracy", m.subset_accuracy),
            ("hamming_loss", m.hamming_loss),
            ("micro_f1", m.micro_f1),
            ("macro_f1", m.macro_f1),
            ("map", m.map),
            ("ece", m.ece),
        ];
        for (name, v) in got {
            let w = want[name].as_f64().unwrap();
            assert!((v - w).abs() < 1e-12, "{name}: alkit {v}, scikit-learn {w}");
        }
    };
    check(&fx["figures"]);
    // The example's label 4 is never present: scikit-learn counts its AP as 0, so does alkit.
    assert!(m.map < 0.8, "{}", m.map);
    let Some(py) = python() else { return };
    let dir = tmp("multilabel-sklearn");
    let input = serde_json::json!({
        "labels": labels, "threshold": t, "truth": fx["truth"], "probs": fx["probs"],
    });
    check(&reference(&py, "multilabel_sklearn.py", &input, &dir));
}

fn rows(t: &LabelTable) -> Vec<Vec<u8>> {
    (0..t.len()).map(|i| t.sets.row(i).to_vec()).collect()
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

/// The shipped table with its sets as one 0/1 column per label (`t0`..`t5`).
fn indicator_copy(from: &Path, to: &Path) {
    let text = std::fs::read_to_string(from).unwrap();
    let mut lines = text.lines();
    let header = lines.next().unwrap().replace(",tags", ",t0,t1,t2,t3,t4,t5");
    let mut out = vec![header];
    for line in lines {
        let (head, tags) = line.rsplit_once(',').unwrap();
        let set: Vec<&str> = tags.split('|').collect();
        let hot: Vec<&str> = (0..6)
            .map(|j| {
                if set.contains(&format!("t{j}").as_str()) {
                    "1"
                } else {
                    "0"
                }
            })
            .collect();
        out.push(format!("{head},{}", hot.join(",")));
    }
    std::fs::write(to, out.join("\n") + "\n").unwrap();
}

#[test]
fn every_layout_reads_the_same_items_and_sets() {
    let f = LabelFormat::default();
    let csv = read_label_table(&shipped("train"), &tags(), &f, None).unwrap();
    assert_eq!((csv.len(), csv.dim(), csv.sets.labels()), (1000, 20, 6));
    assert_eq!(csv.sets.names(), ["t0", "t1", "t2", "t3", "t4", "t5"]);
    assert_eq!(csv.sets.joined(0, "|"), "t2|t3");
    let dir = tmp("multilabel-layouts");
    let hot_path = dir.join("hot.csv");
    indicator_copy(&shipped("train"), &hot_path);
    let cols: Vec<String> = (0..6).map(|j| format!("t{j}")).collect();
    let hot = read_label_table(&hot_path, &cols, &f, None).unwrap();
    assert_eq!((rows(&hot), bits(&hot.x)), (rows(&csv), bits(&csv.x)));
    let Some(py) = python() else { return };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference/multilabel_files.py");
    let o = std::process::Command::new(py)
        .arg(script)
        .arg(&*dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for file in ["train.npz", "train.safetensors"] {
        let t = read_label_table(&dir.join(file), &["y".into()], &f, None).unwrap();
        assert_eq!(t.ids, csv.ids, "{file}");
        assert_eq!(bits(&t.x), bits(&csv.x), "{file}");
        assert_eq!(rows(&t), rows(&csv), "{file}");
        assert_eq!(t.sets.names()[5], "y[5]", "{file}");
    }
    let e = read_label_table(&dir.join("half.npz"), &["y".into()], &f, None).unwrap_err();
    assert!(
        e.to_string().contains("item `m0002`: label `y[0]` is 0.5"),
        "{e}"
    );
}

/// `alkit curve` on the pool `data` (label sets `labels`) and test split `test`, into `out`;
/// the rows of curve.csv without its timing columns.
fn curve(data: &Path, test: &Path, labels: &str, out: &Path, extra: &[&str]) -> Vec<String> {
    let o = alkit_cmd()
        .args(["-q", "curve", "--data"])
        .arg(data)
        .arg("--test")
        .arg(test)
        .args(["--labels", labels, "--cycles", "2", "--steps", "150"])
        .args(["--initial", "30", "--query", "30", "--out"])
        .arg(out)
        .args(extra)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(out.join("curve.csv")).unwrap();
    text.lines()
        .map(|l| l.rsplitn(3, ',').nth(2).unwrap().to_string())
        .collect()
}

#[test]
fn a_curve_on_the_shipped_tags_is_reproducible_and_the_same_from_either_layout() {
    let dir = tmp("multilabel-curve");
    let scorers = "entropy-mean,entropy-max,margin-mean,entropy-cardinality,bald-sum,random";
    let extra = ["--scorer", scorers, "--mc-samples", "8"];
    let (train, test) = (shipped("train"), shipped("test"));
    let a = curve(&train, &test, "tags", &dir.join("a"), &extra);
    assert_eq!(
        a[0],
        "scorer,seed,cycle,labeled,map,micro_f1,macro_f1,subset_acc,hamming,ece"
    );
    assert_eq!(a.len(), 1 + 6 * 3);
    for row in &a[1..] {
        let v: Vec<f64> = row.split(',').skip(4).map(|c| c.parse().unwrap()).collect();
        assert!(v.iter().all(|x| (0.0..=1.0).contains(x)), "{row}");
        // Six labels, about 2.3 per item, from 30 to 90 labeled items: far above chance.
        assert!(v[0] > 0.5, "{row}");
    }
    // Every strategy of a seed starts from the same seed set: cycle 0 is the same model.
    let first: Vec<&str> = a[1..]
        .iter()
        .filter(|r| r.contains(",0,0,30,"))
        .map(|r| r.split_once(',').unwrap().1)
        .collect();
    assert!(first.windows(2).all(|w| w[0] == w[1]), "{first:?}");
    let again = curve(&train, &test, "tags", &dir.join("b"), &extra);
    assert_eq!(a, again);
    let (hot_train, hot_test) = (dir.join("hot_train.csv"), dir.join("hot_test.csv"));
    indicator_copy(&train, &hot_train);
    indicator_copy(&test, &hot_test);
    let cols = "t0,t1,t2,t3,t4,t5";
    let hot = curve(&hot_train, &hot_test, cols, &dir.join("c"), &extra);
    assert_eq!(a, hot);
    let summary = std::fs::read_to_string(dir.join("a/summary.csv")).unwrap();
    assert!(
        summary.starts_with("scorer,seeds,map_mean,map_std,micro_f1_mean"),
        "{summary}"
    );
    assert!(dir.join("a/curve.png").is_file() && dir.join("a/curve.svg").is_file());
}

#[test]
fn a_multi_label_run_refuses_what_it_cannot_read() {
    let dir = tmp("multilabel-refusals");
    let run = |extra: &[&str]| {
        let o = alkit_cmd()
            .args(["-q", "curve", "--data"])
            .arg(shipped("train"))
            .arg("--test")
            .arg(shipped("test"))
            .args(["--labels", "tags", "--cycles", "1", "--out"])
            .arg(dir.join("o"))
            .args(extra)
            .output()
            .unwrap();
        assert!(!o.status.success());
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let e = run(&["--model", "linear-sigmoid", "--scorer", "bald-sum"]);
    assert!(
        e.contains("`bald-sum` reads the disagreement of several draws"),
        "{e}"
    );
    let e = run(&["--target", "x1"]);
    assert!(
        e.contains("--target is not available for a multi-label curve"),
        "{e}"
    );
    let e = run(&["--model", "cnn"]);
    assert!(e.contains("--model cnn is not a sigmoid head"), "{e}");
    let e = run(&["--label-threshold", "1.5"]);
    assert!(e.contains("1.5; expected a probability in (0, 1)"), "{e}");
    // A classification run refuses the multi-label settings instead of ignoring them.
    let o = alkit_cmd()
        .args(["-q", "calibrate", "--label-threshold", "0.3", "--out"])
        .arg(dir.join("c"))
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    let said = e.contains("`--label-threshold`: is read by a multi-label run only");
    assert!(!o.status.success() && said, "{e}");
}

/// A seeded example of `n` items and 4 labels: probabilities multiples of 1/64 (exact in
/// `f32` and `f64`, with ties), truth correlated with them, every item with a label.
fn conformal_example(n: usize) -> (Vec<u8>, Vec<f64>) {
    let (mut truth, mut probs) = (Vec::new(), Vec::new());
    for i in 0..n {
        let row: Vec<f64> = (0..4)
            .map(|l| ((i * 37 + l * 11 + i * l) % 65) as f64 / 64.0)
            .collect();
        let mut y: Vec<u8> = row
            .iter()
            .enumerate()
            .map(|(l, &p)| u8::from(p + ((i * (l + 3) * 7) % 10) as f64 / 20.0 - 0.22 > 0.5))
            .collect();
        if y.iter().all(|&v| v == 0) {
            y[0] = 1;
        }
        truth.extend(y);
        probs.extend(row);
    }
    (truth, probs)
}

#[test]
fn conformal_sets_and_recall_control_equal_mapies() {
    use alkit::acquisition::{control_recall, default_lambdas, LabelLac};
    let (truth, probs) = conformal_example(300);
    let (cal_y, cal_p) = (&truth[..4 * 150], &probs[..4 * 150]);
    let eval_p = &probs[4 * 150..];
    for alpha in [0.1, 0.2] {
        let c = control_recall(cal_y, cal_p, 4, alpha, &default_lambdas()).unwrap();
        assert!(c.bound < alpha && c.risk <= c.bound, "{c:?}");
        let lac = LabelLac::calibrate(cal_y, cal_p, 4, alpha).unwrap();
        let Some(py) = python() else { return };
        let dir = tmp("multilabel-mapie");
        let input = serde_json::json!({
            "labels": 4, "alpha": alpha, "cal_truth": cal_y, "cal_probs": cal_p,
            "eval_probs": eval_p,
        });
        let want = reference(&py, "multilabel_conformal.py", &input, &dir);
        assert_eq!(c.lambda, want["lambda"].as_f64().unwrap(), "alpha {alpha}");
        for l in 0..4 {
            let sets: Vec<Vec<usize>> = (0..150).map(|i| lac.set(l, eval_p[i * 4 + l])).collect();
            let mapie: Vec<Vec<usize>> = serde_json::from_value(want["lac"][l].clone()).unwrap();
            assert_eq!(sets, mapie, "alpha {alpha}, label {l}");
        }
    }
}

#[test]
fn calibrate_reports_per_label_figures_and_conformal_guarantees() {
    let dir = tmp("multilabel-calibrate");
    let o = alkit_cmd()
        .args(["-q", "calibrate", "--data"])
        .arg(shipped("train"))
        .arg("--test")
        .arg(shipped("test"))
        .args([
            "--labels",
            "tags",
            "--steps",
            "300",
            "--conformal",
            "0.1",
            "--out",
        ])
        .arg(&*dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let m: Value =
        serde_json::from_slice(&std::fs::read(dir.join("metrics.json")).unwrap()).unwrap();
    assert_eq!(m["test_items"], 500);
    assert!(m["metrics"]["map"].as_f64().unwrap() > 0.7, "{m}");
    assert_eq!(m["labels"].as_array().unwrap().len(), 6);
    let c = &m["conformal"];
    assert_eq!(
        (c["calibration"].as_u64(), c["evaluation"].as_u64()),
        (Some(250), Some(250))
    );
    for l in c["lac"].as_array().unwrap() {
        // 250 items at 90%: a label covered below 80% would be a broken guarantee.
        assert!(l["coverage"].as_f64().unwrap() > 0.8, "{l}");
    }
    let r = &c["recall"];
    assert!(r["bound"].as_f64().unwrap() < 0.1, "{r}");
    assert!(r["evaluation_fnr"].as_f64().unwrap() < 0.2, "{r}");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("conformal recall alpha 0.1: threshold"),
        "{stdout}"
    );
}
