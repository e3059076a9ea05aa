//! Regression: conformal intervals and metrics against MAPIE, crepes, properscoring,
//! scikit-learn and SciPy (recorded, and live where the reference venv is); the regression
//! curve end to end on the shipped Friedman #1 tables, its bytes repeated by a second run; bad
//! targets and settings refused by name.

use super::feature_methods::python;
use super::{alkit_cmd, tmp};
use alkit::acquisition::{ConformalIntervals, IntervalScore, Prediction};
use alkit::metrics::regression::regression_metrics;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn fixture() -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/regression_libs.json");
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

/// A number, or `"inf"` / `"-inf"` as the reference writes infinities.
fn num(v: &Value) -> f64 {
    match v {
        Value::String(s) if s == "inf" => f64::INFINITY,
        Value::String(s) if s == "-inf" => f64::NEG_INFINITY,
        v => v.as_f64().unwrap_or_else(|| panic!("not a number: {v}")),
    }
}

fn nums(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(num).collect()
}

/// An input value: the reference rounds its inputs to `f32` and computes from those.
fn inp(v: &Value) -> f64 {
    num(v) as f32 as f64
}

fn inps(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(inp).collect()
}

fn close(a: f64, b: f64, tol: f64, what: &str) {
    let ok = a == b || (a - b).abs() <= tol * (1.0 + a.abs().max(b.abs()));
    assert!(ok, "{what}: alkit {a} vs reference {b}");
}

/// alkit's intervals of one form on the fixture's split: `(threshold by group, lower, upper)`.
/// Thresholds by group (`None`: one for every item), lower and upper bounds.
type Bounds = (Vec<(Option<u32>, f64)>, Vec<f64>, Vec<f64>);

fn intervals(input: &Value, form: &str) -> Bounds {
    let (cal, test) = (&input["cal"], &input["test"]);
    let preds = |s: &Value, score: IntervalScore| -> Vec<Prediction> {
        let n = s["y"].as_array().unwrap().len();
        (0..n)
            .map(|i| match score {
                IntervalScore::Cqr => Prediction::Quantiles {
                    lower: inp(&s["lower"][i]),
                    upper: inp(&s["upper"][i]),
                },
                _ => Prediction::Gaussian {
                    mean: inp(&s["mean"][i]),
                    std: inp(&s["std"][i]),
                },
            })
            .collect()
    };
    let groups = |s: &Value| -> Vec<u32> {
        s["group"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g.as_u64().unwrap() as u32)
            .collect()
    };
    let (score, mondrian) = match form {
        "absolute" => (IntervalScore::Absolute, false),
        "normalized" => (IntervalScore::Normalized, false),
        "cqr" => (IntervalScore::Cqr, false),
        "mondrian_absolute" => (IntervalScore::Absolute, true),
        "mondrian_normalized" => (IntervalScore::Normalized, true),
        other => panic!("no form {other}"),
    };
    let cal_groups = groups(cal);
    let c = ConformalIntervals::calibrate(
        score,
        &preds(cal, score),
        &inps(&cal["y"]),
        num(&input["alpha"]),
        mondrian.then_some(&cal_groups[..]),
    )
    .unwrap();
    let test_groups = groups(test);
    let (mut lo, mut hi) = (Vec::new(), Vec::new());
    for (i, p) in preds(test, score).iter().enumerate() {
        let (l, h) = c.interval(p, mondrian.then(|| test_groups[i])).unwrap();
        lo.push(l);
        hi.push(h);
    }
    let thresholds = if mondrian {
        (0..4).map(|g| (Some(g), c.threshold(Some(g)))).collect()
    } else {
        vec![(None, c.threshold(None))]
    };
    (thresholds, lo, hi)
}

/// Compares alkit's intervals with one library's output for `form` (its key `key`).
fn same_intervals(input: &Value, lib: &Value, form: &str, key: &str) {
    let want = &lib["conformal"][key];
    assert!(want.is_object(), "{key} missing: {lib}");
    let (thresholds, lo, hi) = intervals(input, form);
    for (g, q) in thresholds {
        let w = match g {
            None => num(&want["threshold"]),
            Some(g) => match want["threshold"].get(g.to_string()) {
                Some(v) if !v.is_null() => num(v),
                // A group the calibration split lacks: the library has no threshold for it.
                _ => continue,
            },
        };
        close(q, w, 1e-9, &format!("{key} threshold (group {g:?})"));
    }
    // crepes gives the items of a group it never saw the interval [0, 0], unsaid (alkit and
    // the definition: an infinite interval); those items are left out for it.
    let unseen: Vec<u64> = want
        .get("unseen_groups")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    let groups = &input["test"]["group"];
    for (i, (l, h)) in lo.iter().zip(&hi).enumerate() {
        if unseen.contains(&groups[i].as_u64().unwrap()) {
            continue;
        }
        // Bounds are written as float32: equal once rounded as they were.
        let f32_eq = |a: f64, b: &Value, what: &str| {
            assert_eq!(a as f32, num(b) as f32, "{key} {what} {i}");
        };
        f32_eq(*l, &want["lower"][i], "lower");
        f32_eq(*h, &want["upper"][i], "upper");
    }
}

/// The pairs (library, its key, alkit's form) that state the same definition; the
/// libraries' other conventions (MAPIE's StdConformityScore, its asymmetric CQR) are left
/// out as the reference script's docstring explains.
const SAME: [(&str, &str, &str); 12] = [
    ("definition", "absolute", "absolute"),
    ("definition", "normalized", "normalized"),
    ("definition", "cqr", "cqr"),
    ("definition", "mondrian_absolute", "mondrian_absolute"),
    ("definition", "mondrian_normalized", "mondrian_normalized"),
    ("mapie", "absolute", "absolute"),
    ("mapie", "normalized_residual", "normalized"),
    ("mapie", "cqr", "cqr"),
    ("mapie", "mondrian_absolute", "mondrian_absolute"),
    ("crepes", "absolute", "absolute"),
    ("crepes", "normalized", "normalized"),
    ("crepes", "mondrian_absolute", "mondrian_absolute"),
];

fn check_metrics(input: &Value, out: &Value) {
    let test = &input["test"];
    let (y, mean, std) = (inps(&test["y"]), inps(&test["mean"]), inps(&test["std"]));
    let levels = nums(&input["levels"]);
    let m = regression_metrics(&y, &mean, &std, &levels).unwrap();
    let def = &out["definition"]["metrics"];
    close(
        m.rmse,
        num(&out["sklearn"]["metrics"]["rmse"]),
        1e-12,
        "rmse",
    );
    close(m.mae, num(&out["sklearn"]["metrics"]["mae"]), 1e-12, "mae");
    close(m.nll, num(&out["scipy"]["metrics"]["nll"]), 1e-12, "nll");
    close(
        m.crps,
        num(&out["properscoring"]["metrics"]["crps"]),
        1e-12,
        "crps",
    );
    let qce = num(&out["scipy"]["metrics"]["quantile_calibration_error"]);
    close(m.quantile_calibration_error, qce, 1e-12, "qce");
    let rho = num(&out["scipy"]["metrics"]["spearman"]);
    close(m.spearman.unwrap(), rho, 1e-12, "spearman");
    for (i, iv) in m.intervals.iter().enumerate() {
        close(
            iv.coverage,
            num(&out["scipy"]["metrics"]["coverage"][i]),
            1e-12,
            "coverage",
        );
        close(
            iv.width,
            num(&out["scipy"]["metrics"]["width"][i]),
            1e-12,
            "width",
        );
    }
    let s = m.sparsification.unwrap();
    let want = &def["sparsification"];
    close(s.ause, num(&want["ause"]), 1e-12, "ause");
    for (k, (a, b)) in s.model.iter().zip(nums(&want["model"])).enumerate() {
        close(*a, b, 1e-12, &format!("sparsification {k}"));
    }
}

#[test]
fn intervals_and_metrics_equal_mapie_crepes_properscoring_and_scipy() {
    // Recorded by tests/reference/regression_libs.py --example (MAPIE 1.6.0, crepes,
    // properscoring, scikit-learn and SciPy on 500 + 300 seeded rows): thresholds, every
    // interval and every metric equal alkit's.
    let fx = fixture();
    let input = &fx["input"];
    for (lib, key, form) in SAME {
        same_intervals(input, &fx[lib], form, key);
    }
    check_metrics(input, &fx);
    // The libraries themselves, installed from PyPI in the reference venv
    // (scripts/refpython.sh), on the same input now.
    if let Some(py) = python() {
        let dir = tmp("regression-libs");
        let (i, o) = (dir.join("in.json"), dir.join("out.json"));
        std::fs::write(&i, serde_json::to_vec(input).unwrap()).unwrap();
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference/regression_libs.py");
        let run = std::process::Command::new(py)
            .arg(script)
            .arg(&i)
            .arg(&o)
            .output()
            .unwrap();
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        let live: Value = serde_json::from_slice(&std::fs::read(&o).unwrap()).unwrap();
        for (lib, key, form) in SAME {
            same_intervals(input, &live[lib], form, key);
        }
        check_metrics(input, &live);
    }
}

pub(super) fn friedman(split: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("data/regression/friedman1_{split}.csv"))
}

fn regression_curve(out: &Path, extra: &[&str]) -> std::process::Output {
    regression_curve_steps(out, 200, extra)
}

/// `curve` on the shipped Friedman #1 tables, two cycles of `steps` training steps.
pub(super) fn regression_curve_steps(
    out: &Path,
    steps: usize,
    extra: &[&str],
) -> std::process::Output {
    alkit_cmd()
        .args(["-q", "curve", "--data"])
        .arg(friedman("train"))
        .arg("--test")
        .arg(friedman("test"))
        .args(["--target", "y", "--cycles", "2", "--steps"])
        .arg(steps.to_string())
        .arg("--out")
        .arg(out)
        .args(extra)
        .output()
        .unwrap()
}

/// `curve.csv` without the timing columns.
pub(super) fn figures(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| l.split(',').take(10).collect::<Vec<_>>().join(","))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn regression_curve_runs_on_friedman_and_repeats_its_figures() {
    let dir = tmp("regression-curve");
    let (a, b) = (dir.join("a"), dir.join("b"));
    for out in [&a, &b] {
        let o = regression_curve(out, &["--ensemble", "3"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(
            text.contains("RMSE") && text.contains("epistemic"),
            "{text}"
        );
    }
    let curve = figures(&a.join("curve.csv"));
    assert_eq!(
        curve,
        figures(&b.join("curve.csv")),
        "same seed, same figures"
    );
    let lines: Vec<&str> = curve.lines().collect();
    assert_eq!(
        lines[0],
        "scorer,seed,cycle,labeled,rmse,mae,nll,crps,coverage90,width90"
    );
    // 3 strategies x 3 cycles; the seed set is shared, so cycle 0 is the same for each.
    assert_eq!(lines.len(), 1 + 9);
    let cycle0: Vec<&str> = lines[1..]
        .iter()
        .filter(|l| l.split(',').nth(2) == Some("0"))
        .map(|l| l.split_once(',').unwrap().1)
        .collect();
    assert!(cycle0.windows(2).all(|w| w[0] == w[1]), "{cycle0:?}");
    // The target's spread is about 4.9 (Friedman #1 with noise 1): a model that learnt
    // nothing scores near it, and the noise floor is 1.
    for l in &lines[1..] {
        let rmse: f64 = l.split(',').nth(4).unwrap().parse().unwrap();
        assert!(rmse > 1.0 && rmse < 4.5, "{l}");
    }
    for f in ["summary.csv", "curve.svg", "curve.png", "run.json"] {
        assert!(a.join(f).is_file(), "{f}");
    }
}

#[test]
fn regression_curve_refuses_bad_targets_and_settings_by_name() {
    let dir = tmp("regression-bad");
    let out = dir.join("out");
    let err = |o: std::process::Output| {
        assert!(!o.status.success());
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let e = err(regression_curve(&out, &["--scorer", "entropy"]));
    assert!(
        e.contains("`entropy` scores a classifier") && e.contains("variance"),
        "{e}"
    );
    let e = err(regression_curve(
        &out,
        &["--model", "linear-gauss", "--scorer", "epistemic"],
    ));
    assert!(
        e.contains("several draws") && e.contains("--ensemble"),
        "{e}"
    );
    let e = err(regression_curve(&out, &["--model", "cnn"]));
    assert!(e.contains("--model cnn is not a Gaussian head"), "{e}");
    let e = err(regression_curve(&out, &["--stream"]));
    assert!(e.contains("--stream is not available"), "{e}");
    // A NaN target names the file, its line and the column.
    let bad = dir.join("bad.csv");
    let text = std::fs::read_to_string(friedman("train")).unwrap();
    let mut rows: Vec<String> = text.lines().map(str::to_string).collect();
    let cut = rows[3].rfind(',').unwrap();
    rows[3] = format!("{},nan", &rows[3][..cut]);
    std::fs::write(&bad, rows.join("\n")).unwrap();
    let o = alkit_cmd()
        .args(["-q", "curve", "--data"])
        .arg(&bad)
        .arg("--test")
        .arg(friedman("test"))
        .args(["--target", "y", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let e = err(o);
    assert!(
        e.contains("bad.csv:4") && e.contains("target column `y`"),
        "{e}"
    );
    // Integer targets: classes or numbers? Refused without a task.
    let ints = dir.join("ints.csv");
    std::fs::write(&ints, "a,y\n0.5,1\n0.25,2\n0.75,3\n").unwrap();
    let o = alkit_cmd()
        .args(["-q", "curve", "--data"])
        .arg(&ints)
        .arg("--test")
        .arg(&ints)
        .args(["--target", "y", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let e = err(o);
    assert!(e.contains("only integers") && e.contains("task"), "{e}");
    assert!(!out.join("run.json").exists(), "nothing written");
}

#[test]
fn linear_gauss_head_reaches_the_pytorch_f64_optimum() {
    // Recorded by tests/reference/gauss_head.py: a linear Gaussian head fitted in float64 by
    // PyTorch to the optimum of the NLL (L-BFGS, gradient norm < 1e-10, two inits agreeing)
    // and to beta-NLL's fixed point (beta 0.5). alkit's f32 head, trained full-batch by Adam,
    // must predict the same means and variances on the test inputs.
    use alkit::nn::{GaussLoss, GaussMlpConfig, Mode, Regressor};
    use alkit::train::{train_gauss, Rows, TrainConfig};
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gauss_head.json");
    let fx: Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
    let input = &fx["input"];
    let f32s = |v: &Value| -> Vec<f32> { nums(v).into_iter().map(|x| x as f32).collect() };
    let (x, y, x_test) = (
        f32s(&input["x_train"]),
        f32s(&input["y_train_standardised"]),
        f32s(&input["x_test"]),
    );
    let d = input["d"].as_u64().unwrap() as usize;
    let n = y.len();
    let cfg = GaussMlpConfig {
        inputs: d,
        hidden: vec![],
        outputs: 1,
        dropout: 0.0,
    };
    let params = TrainConfig {
        steps: 4000,
        batch_size: n,
        lr: 0.01,
        anchor: None,
    }
    .validate()
    .unwrap();
    let device = candle_core::Device::Cpu;
    let xt = candle_core::Tensor::from_vec(x_test.clone(), (x_test.len() / d, d), &device).unwrap();
    for (key, loss) in [
        ("nll", GaussLoss::Nll),
        ("beta_nll", GaussLoss::BetaNll { beta: 0.5 }),
    ] {
        let rows = Rows { x: &x, d, y: &y };
        let all: Vec<usize> = (0..n).collect();
        let models = train_gauss(
            &cfg,
            loss,
            1,
            &rows,
            &all,
            &params,
            (0, 0),
            &device,
            &mut alkit::observe::Silent,
        )
        .unwrap();
        let (mean, var) = models[0].forward(&xt, &mut Mode::Eval).unwrap();
        let mean = mean.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let var = var.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let (want_mean, want_var) = (nums(&fx[key]["test_mean"]), nums(&fx[key]["test_var"]));
        for i in 0..mean.len() {
            let (m, v) = (f64::from(mean[i]), f64::from(var[i]));
            assert!(
                (m - want_mean[i]).abs() < 2e-4,
                "{key} mean {i}: {m} vs {}",
                want_mean[i]
            );
            assert!(
                (v / want_var[i] - 1.0).abs() < 5e-4,
                "{key} variance {i}: {v} vs {}",
                want_var[i]
            );
        }
    }
}

#[test]
fn targets_of_1e30_give_the_same_curve_in_their_units() {
    // Standardisation runs in f64 and reports back in the targets' units: the same table with
    // every target times 1e30 gives the same picks and every error figure times 1e30.
    let dir = tmp("regression-1e30");
    let scale = |from: &Path, to: &Path| {
        let text = std::fs::read_to_string(from).unwrap();
        let mut out = String::new();
        for (i, line) in text.lines().enumerate() {
            let (head, y) = line.rsplit_once(',').unwrap();
            let y = if i == 0 {
                y.to_string()
            } else {
                format!("{:e}", y.parse::<f64>().unwrap() * 1e30)
            };
            out.push_str(&format!("{head},{y}\n"));
        }
        std::fs::write(to, out).unwrap();
    };
    let (train, test) = (dir.join("train.csv"), dir.join("test.csv"));
    scale(&friedman("train"), &train);
    scale(&friedman("test"), &test);
    let run = |data: &Path, test: &Path, out: &Path| {
        let o = alkit_cmd()
            .args(["-q", "curve", "--data"])
            .arg(data)
            .arg("--test")
            .arg(test)
            .args([
                "--target", "y", "--cycles", "1", "--steps", "100", "--model",
            ])
            .args(["linear-gauss", "--scorer", "variance", "--out"])
            .arg(out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        std::fs::read_to_string(out.join("curve.csv")).unwrap()
    };
    let plain = run(&friedman("train"), &friedman("test"), &dir.join("a"));
    let huge = run(&train, &test, &dir.join("b"));
    for (p, h) in plain.lines().zip(huge.lines()).skip(1) {
        let (p, h): (Vec<&str>, Vec<&str>) = (p.split(',').collect(), h.split(',').collect());
        for c in [4, 5, 7, 9] {
            let (a, b): (f64, f64) = (p[c].parse().unwrap(), h[c].parse().unwrap());
            assert!((b / 1e30 / a - 1.0).abs() < 1e-4, "column {c}: {a} vs {b}");
        }
        // Coverage has no units; NLL shifts by ln(1e30).
        assert_eq!(p[8], h[8]);
        let (a, b): (f64, f64) = (p[6].parse().unwrap(), h[6].parse().unwrap());
        assert!((b - a - 1e30f64.ln()).abs() < 1e-3, "nll {a} vs {b}");
    }
}

#[test]
fn regression_calibrate_reports_metrics_and_intervals_that_cover() {
    let dir = tmp("regression-calibrate");
    let out = dir.join("cal");
    let o = alkit_cmd()
        .args(["-q", "calibrate", "--data"])
        .arg(friedman("train"))
        .arg("--test")
        .arg(friedman("test"))
        .args([
            "--target",
            "y",
            "--steps",
            "300",
            "--conformal",
            "0.1",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("conformal normalized"), "{text}");
    let m: Value =
        serde_json::from_slice(&std::fs::read(out.join("metrics.json")).unwrap()).unwrap();
    // The predictions as written, and the conformal rule worked by hand on them.
    let csv = std::fs::read_to_string(out.join("predictions.csv")).unwrap();
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("id,part,y,y_mean,y_std"));
    let rows: Vec<(bool, f64, f64, f64)> = lines
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            let v = |i: usize| f[i].parse::<f64>().unwrap();
            (f[1] == "calibration", v(2), v(3), v(4))
        })
        .collect();
    assert_eq!(rows.len(), 500);
    let y: Vec<f64> = rows.iter().map(|r| r.1).collect();
    let mu: Vec<f64> = rows.iter().map(|r| r.2).collect();
    let sd: Vec<f64> = rows.iter().map(|r| r.3).collect();
    let whole = &m["outputs"][0][1];
    close(
        num(&whole["rmse"]),
        alkit::metrics::regression::rmse(&y, &mu),
        1e-12,
        "rmse",
    );
    let nll = alkit::metrics::regression::gaussian_nll(&y, &mu, &sd);
    close(num(&whole["nll"]), nll, 1e-12, "nll");
    for (score, scale) in [("absolute", false), ("normalized", true)] {
        let s = |r: &(bool, f64, f64, f64)| (r.1 - r.2).abs() / if scale { r.3 } else { 1.0 };
        let mut cal: Vec<f64> = rows.iter().filter(|r| r.0).map(s).collect();
        cal.sort_by(f64::total_cmp);
        let n = cal.len();
        assert_eq!(n, 250);
        let k = ((n as f64 + 1.0) * 0.9).ceil() as usize; // 226
        let q = cal[k - 1];
        let eval: Vec<f64> = rows.iter().filter(|r| !r.0).map(s).collect();
        let covered = eval.iter().filter(|&&e| e <= q).count() as f64 / eval.len() as f64;
        let rep = m["conformal"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["score"] == score)
            .unwrap();
        close(num(&rep["threshold"]), q, 1e-12, score);
        close(num(&rep["coverage"]), covered, 1e-12, score);
        // 250 exchangeable evaluation items at alpha 0.1: coverage about 0.9, its binomial
        // spread about 0.02.
        assert!((0.82..=0.98).contains(&covered), "{score}: {covered}");
    }
    for f in ["calibration.svg", "calibration.png"] {
        assert!(out.join(f).is_file(), "{f}");
    }
}
