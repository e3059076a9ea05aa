//! The fidelity pack (data/fidelity/, written by tests/reference/fidelity_data.py) against
//! CDALBench's published generators: the point counts, where the points lie, and the files
//! being what the script writes; and the loop features its protocols need: seed labels drawn
//! class by class, runs carried out several at once writing the same bytes as one at a
//! time, and class-balanced batches: the quotas and picks against a numpy reference on the
//! same scores (tests/reference/class_balance.py), and a curve over imbalanced classes whose
//! balanced strategy labels more of the rare ones.

use super::*;
use alkit::hub::Hub;
use alkit::jobs::curve::Execution;

fn pack(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("data/fidelity/{name}.safetensors"))
}

/// Every point of both splits as `(x, y, label)`.
fn points(name: &str) -> Vec<(f64, f64, u32)> {
    let path = pack(name).to_string_lossy().to_string();
    let s = alkit::data::source::load_splits(&path, None, &Hub::from_env(), &mut Silent).unwrap();
    [&s.train, &s.test]
        .into_iter()
        .flat_map(|d| {
            (0..d.len()).map(move |i| {
                let p = d.item(i);
                (f64::from(p[0]), f64::from(p[1]), d.labels()[i])
            })
        })
        .collect()
}

/// Mean and covariance `(xx, yy, xy)` of the points of class `c`.
fn moments(pts: &[(f64, f64, u32)], c: u32) -> ((f64, f64), (f64, f64, f64), usize) {
    let of: Vec<_> = pts.iter().filter(|p| p.2 == c).collect();
    let n = of.len() as f64;
    let (mx, my) = (
        of.iter().map(|p| p.0).sum::<f64>() / n,
        of.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let cov = |f: &dyn Fn(&&(f64, f64, u32)) -> f64| of.iter().map(f).sum::<f64>() / (n - 1.0);
    let xx = cov(&|p| (p.0 - mx).powi(2));
    let yy = cov(&|p| (p.1 - my).powi(2));
    let xy = cov(&|p| (p.0 - mx) * (p.1 - my));
    ((mx, my), (xx, yy, xy), of.len())
}

#[test]
fn threeclust_lies_where_cdalbench_puts_it() {
    let s = alkit::data::source::load_splits(
        &pack("threeclust").to_string_lossy(),
        None,
        &Hub::from_env(),
        &mut Silent,
    )
    .unwrap();
    assert_eq!((s.train.len(), s.test.len()), (480, 120));
    let pts = points("threeclust");
    // Label 1: unit Gaussians at (0, 0) and (4, 3); label 0: at (0, 6) and (4, 3). An even
    // mixture of two unit Gaussians a apart has mean (m1 + m2) / 2 and covariance
    // I + a a^T / 4: (5, 3.25, +-3) here.
    for (class, mean, xy) in [(1, (2.0, 1.5), 3.0), (0, (2.0, 4.5), -3.0)] {
        let ((mx, my), (vxx, vyy, vxy), n) = moments(&pts, class);
        assert_eq!(n, 300, "class {class}");
        // The mean's standard error is below 0.13 on each axis: 0.4 is 3 of them.
        assert!(
            (mx - mean.0).abs() < 0.4 && (my - mean.1).abs() < 0.4,
            "{mx} {my}"
        );
        for (got, want) in [(vxx, 5.0), (vyy, 3.25), (vxy, xy)] {
            assert!(
                (got - want).abs() < 0.2 * want.abs(),
                "class {class}: {got} vs {want}"
            );
        }
    }
    // The honeypot: as many points of each label within 1.5 of (4, 3).
    let near = |c: u32| {
        let close = |p: &&(f64, f64, u32)| (p.0 - 4.0).hypot(p.1 - 3.0) < 1.5 && p.2 == c;
        pts.iter().filter(close).count() as f64
    };
    let (a, b) = (near(0), near(1));
    assert!(
        a > 80.0 && b > 80.0 && (a - b).abs() < 0.25 * a.max(b),
        "{a} {b}"
    );
}

#[test]
fn divergingsin_lies_where_cdalbench_puts_it() {
    let pts = points("divergingsin");
    assert_eq!(pts.len(), 2000);
    // x: 1,000 points evenly spaced on [0, 10] in each band; y: sin(2x) +- 0.5x plus
    // N(0, 0.3^2) noise.
    for (class, sign) in [(1u32, 1.0), (0, -1.0)] {
        let mut band: Vec<_> = pts.iter().filter(|p| p.2 == class).collect();
        band.sort_by(|a, b| a.0.total_cmp(&b.0));
        assert_eq!(band.len(), 1000, "class {class}");
        let resid: Vec<f64> = band
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let x = 10.0 * i as f64 / 999.0;
                assert!(
                    (p.0 - x).abs() < 1e-5,
                    "class {class} point {i}: x {} vs {x}",
                    p.0
                );
                p.1 - ((2.0 * x).sin() + sign * 0.5 * x)
            })
            .collect();
        let mean = resid.iter().sum::<f64>() / 1000.0;
        let sd = (resid.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / 999.0).sqrt();
        // Standard errors: 0.0095 for the mean, about 0.0067 for the deviation.
        assert!(
            mean.abs() < 0.04 && (sd - 0.3).abs() < 0.03,
            "class {class}: {mean} {sd}"
        );
    }
}

#[test]
fn the_pack_is_what_its_script_writes() {
    let Some(py) = feature_methods::python() else {
        return;
    };
    let dir = tmp("fidelity-script");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference/fidelity_data.py");
    let out = Command::new(py).arg(script).arg(&*dir).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for name in ["threeclust", "divergingsin"] {
        let written = std::fs::read(dir.join(format!("{name}.safetensors"))).unwrap();
        assert!(
            written == std::fs::read(pack(name)).unwrap(),
            "{name} differs"
        );
    }
}

/// A small ThreeClust curve of `strategies`, `seeds` seeds.
fn spec(strategies: &str, seeds: Vec<u64>, balanced: bool) -> CurveSpec {
    CurveSpec {
        data: pack("threeclust"),
        model: Arch::Mlp(MlpConfig {
            inputs: 2,
            hidden: vec![],
            classes: 2,
            dropout: 0.0,
        }),
        strategies: strategies.split(',').map(|s| s.parse().unwrap()).collect(),
        seeds,
        config: LoopConfig {
            initial: 4,
            query: 2,
            cycles: 4,
            train: TrainConfig {
                steps: 10,
                batch_size: 32,
                lr: 0.05,
                anchor: None,
            },
            batch: 256,
            balanced_start: balanced,
            ..LoopConfig::default()
        },
        scorers: Default::default(),
    }
}

fn splits() -> (Dataset, Dataset) {
    let path = pack("threeclust").to_string_lossy().to_string();
    let s = alkit::data::source::load_splits(&path, None, &Hub::from_env(), &mut Silent).unwrap();
    let n = Normalizer::fit(&s.train);
    (n.apply(&s.train).unwrap(), n.apply(&s.test).unwrap())
}

fn curve(spec: &CurveSpec, out: &Path, jobs: usize) -> alkit::Result<Vec<RunState>> {
    let (train, test) = splits();
    let how = Execution {
        jobs,
        ..Execution::default()
    };
    run_curve(
        spec,
        &train,
        &test,
        &[1.0],
        out,
        how,
        &Device::Cpu,
        &mut Silent,
    )
}

#[test]
fn runs_at_once_write_what_runs_one_by_one_write() {
    let spec = spec("random,entropy,coreset,typiclust", vec![3, 4, 5], false);
    let dir = tmp("fidelity-jobs");
    let (one, three) = (dir.join("one"), dir.join("three"));
    let a = curve(&spec, &one, 1).unwrap();
    let b = curve(&spec, &three, 3).unwrap();
    let order = |s: &[RunState]| {
        s.iter()
            .map(|r| (r.seed, r.strategy.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(order(&a), order(&b));
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.labeled, y.labeled, "{} seed {}", x.strategy, x.seed);
    }
    for f in ["curve.csv", "recall.csv", "batches.csv", "summary.csv"] {
        let read = |d: &Path| strip_timings(&std::fs::read_to_string(d.join(f)).unwrap());
        assert_eq!(read(&one), read(&three), "{f}");
    }
}

#[test]
fn a_balanced_start_draws_an_equal_share_of_each_class() {
    let dir = tmp("fidelity-balanced");
    let (train, _) = splits();
    let states = curve(
        &spec("random,entropy", vec![0, 1, 2, 3], true),
        &dir.join("run"),
        0,
    )
    .unwrap();
    for s in &states {
        let first: Vec<u32> = s.labeled[..4]
            .iter()
            .map(|&(i, _)| train.labels()[i])
            .collect();
        let ones = first.iter().filter(|&&c| c == 1).count();
        assert_eq!(ones, 2, "{} seed {}: {first:?}", s.strategy, s.seed);
    }
    // The same seed draws the same seed set for every strategy.
    assert_eq!(states[0].labeled[..4], states[1].labeled[..4]);
    // A share larger than a class is refused by name.
    let mut big = spec("random", vec![0], true);
    big.config.initial = 478;
    big.config.cycles = 0;
    let e = curve(&big, &dir.join("big"), 0).unwrap_err().to_string();
    assert!(
        e.contains("balanced_start") && e.contains("share of the 478"),
        "{e}"
    );
}

#[test]
fn class_balanced_batches_match_a_numpy_reference() {
    use rand::{seq::SliceRandom, Rng, SeedableRng};
    let Some(py) = feature_methods::python() else {
        return;
    };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
    let mut cases = Vec::new();
    for case in 0..40 {
        let classes = [2, 3, 5, 10][case % 4];
        let m = rng.random_range(1..150);
        // Skewed predictions, some classes never predicted; scores rounded so that ties occur.
        let predicted: Vec<u32> = (0..m)
            .map(|_| {
                let u: f64 = rng.random();
                ((u * u * classes as f64) as u32).min(classes as u32 - 1)
            })
            .collect();
        let scores: Vec<f32> = (0..m)
            .map(|_| (rng.random::<f32>() * 20.0).round() / 20.0)
            .collect();
        let labeled: Vec<usize> = (0..classes).map(|_| rng.random_range(0..12)).collect();
        let mut order: Vec<usize> = (0..classes).collect();
        order.shuffle(&mut rng);
        let n = rng.random_range(1..=m);
        cases.push((scores, predicted, labeled, n, order));
    }
    let input = serde_json::json!({"cases": cases.iter().map(|(s, p, l, n, o)| serde_json::json!(
        {"scores": s, "predicted": p, "labeled": l, "n": n, "order": o})).collect::<Vec<_>>()});
    let dir = tmp("class-balance");
    let out = feature_methods::reference(&py, "class_balance.py", &input, &dir);
    for (k, ((scores, predicted, labeled, n, order), want)) in cases
        .iter()
        .zip(out["cases"].as_array().unwrap())
        .enumerate()
    {
        let mut counts = vec![0; labeled.len()];
        for &c in predicted {
            counts[c as usize] += 1;
        }
        let quotas = alkit_acquisition::class_quotas(labeled, &counts, *n, order).unwrap();
        let want_q: Vec<usize> = serde_json::from_value(want["quotas"].clone()).unwrap();
        assert_eq!(quotas, want_q, "case {k}");
        let mut draw = rand_chacha::ChaCha8Rng::seed_from_u64(0);
        let picks = alkit_acquisition::balanced_select(
            scores,
            predicted,
            labeled,
            *n,
            (&alkit_acquisition::Selection::TopK, order),
            &mut draw,
        )
        .unwrap();
        let want_p: Vec<usize> = serde_json::from_value(want["picks"].clone()).unwrap();
        assert_eq!(picks, want_p, "case {k}");
    }
}

/// Five well-separated blobs of 300, 150, 60, 30 and 15 training points (40 each to test).
fn imbalanced_blobs(path: &Path) {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    let mut split = |counts: &[usize]| {
        let (mut x, mut y) = (Vec::new(), Vec::new());
        for (c, &k) in counts.iter().enumerate() {
            let angle = c as f32 * std::f32::consts::TAU / 5.0;
            for _ in 0..k {
                x.push(3.0 * angle.cos() + rng.random_range(-0.8..0.8f32));
                x.push(3.0 * angle.sin() + rng.random_range(-0.8..0.8f32));
                y.push(c as i64);
            }
        }
        let n = y.len();
        (
            Tensor::from_vec(x, (n, 2), &Device::Cpu).unwrap(),
            Tensor::from_vec(y, n, &Device::Cpu).unwrap(),
        )
    };
    let (x, y) = split(&[300, 150, 60, 30, 15]);
    let (tx, ty) = split(&[40; 5]);
    let map: std::collections::HashMap<String, Tensor> = [
        ("features", x),
        ("labels", y),
        ("test_features", tx),
        ("test_labels", ty),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    candle_core::safetensors::save(&map, path).unwrap();
}

#[test]
fn a_class_balanced_curve_labels_more_of_the_rare_classes() {
    let dir = tmp("fidelity-class-balance");
    let data = dir.join("blobs.safetensors");
    imbalanced_blobs(&data);
    let source = data.to_string_lossy().to_string();
    let s = alkit::data::source::load_splits(&source, None, &Hub::from_env(), &mut Silent).unwrap();
    let norm = Normalizer::fit(&s.train);
    let (train, test) = (norm.apply(&s.train).unwrap(), norm.apply(&s.test).unwrap());
    let run = |balance: bool, out: &str| {
        let mut spec = spec("random,entropy,coreset", vec![0, 1, 2, 3], false);
        spec.data = data.clone();
        spec.model = Arch::Mlp(MlpConfig {
            inputs: 2,
            hidden: vec![],
            classes: 5,
            dropout: 0.0,
        });
        spec.config.initial = 10;
        spec.config.query = 5;
        spec.config.cycles = 6;
        spec.config.train.steps = 60;
        spec.scorers.class_balance = balance;
        let how = Execution::default();
        run_curve(
            &spec,
            &train,
            &test,
            &[1.0],
            &dir.join(out),
            how,
            &Device::Cpu,
            &mut Silent,
        )
        .unwrap()
    };
    let (plain, balanced) = (run(false, "plain"), run(true, "balanced"));
    // `compare` finds the runs under the names the curve gave them.
    let twice = run(true, "balanced-again");
    let c = alkit::jobs::compare::run(&[dir.join("balanced"), dir.join("balanced-again")]).unwrap();
    assert_eq!(
        c.strategies,
        ["random", "balanced-entropy", "balanced-coreset"]
    );
    assert_eq!(twice.len(), balanced.len());
    let names: std::collections::BTreeSet<&str> =
        balanced.iter().map(|s| s.strategy.as_str()).collect();
    assert_eq!(
        names,
        ["balanced-coreset", "balanced-entropy", "random"].into()
    );
    // The rare classes' share of what each strategy labeled after the seed set, over seeds.
    let rare = |states: &[RunState], strategy: &str| -> usize {
        states
            .iter()
            .filter(|s| s.strategy.ends_with(strategy))
            .flat_map(|s| s.labeled[10..].iter())
            .filter(|&&(i, _)| train.labels()[i] >= 2)
            .count()
    };
    for name in ["entropy", "coreset"] {
        let (p, b) = (rare(&plain, name), rare(&balanced, name));
        assert!(b > p, "{name}: {b} rare picks balanced vs {p} without");
    }
    // Random picks are the yardstick and do not change.
    let random = |s: &[RunState]| -> Vec<Vec<(usize, usize)>> {
        s.iter()
            .filter(|s| s.strategy == "random")
            .map(|s| s.labeled.clone())
            .collect()
    };
    assert_eq!(random(&plain), random(&balanced));
}

#[test]
fn a_stopping_rule_ends_each_run_where_it_first_says_stop() {
    use alkit::metrics::stopping::{StopMeasure, StopRule};
    let dir = tmp("fidelity-stop");
    let out = dir.join("run");
    let mut spec = spec("entropy,random", vec![0, 1, 2], false);
    spec.config.cycles = 20;
    spec.config.train.steps = 60;
    spec.config.stop = Some(StopRule::ClassificationChange);
    let states = curve(&spec, &out, 0).unwrap();
    let budget = spec.config.initial + spec.config.cycles * spec.config.query;
    let mut ended = 0;
    for s in &states {
        let measures: Vec<StopMeasure> = s.records.iter().filter_map(|r| r.stopping).collect();
        let first = (0..measures.len())
            .find(|&k| StopRule::ClassificationChange.says_stop(&measures[..=k]));
        let at = format!("{} seed {}", s.strategy, s.seed);
        match first {
            Some(k) => {
                assert_eq!(s.records.len(), k + 1, "{at}: ran past its stop");
                ended += 1;
            }
            None => assert_eq!(s.records.len(), spec.config.cycles + 1, "{at}"),
        }
        // Every label belongs to a recorded cycle: the stopped cycle's picks are dropped.
        assert_eq!(s.labeled.len(), s.records.last().unwrap().labeled, "{at}");
        assert!(s.is_complete(), "{at}");
        // The AUBC carries the last model to the end of the budget.
        let mut x: Vec<f64> = s.records.iter().map(|r| r.labeled as f64).collect();
        let mut y: Vec<f64> = s.records.iter().map(|r| r.acc).collect();
        if x.last().is_some_and(|&l| l < budget as f64) {
            x.push(budget as f64);
            y.push(*y.last().unwrap());
        }
        let want = alkit::metrics::stats::aubc(&x, &y);
        let got = alkit::jobs::curve::aubc_by_seed(std::slice::from_ref(s), &s.strategy);
        assert!((got[&s.seed] - want).abs() < 1e-12, "{at}");
    }
    assert!(ended > 0, "no run stopped early: the test checks nothing");
    // Resuming finds every run complete and changes nothing.
    let how = Execution {
        resume: true,
        ..Execution::default()
    };
    let (train, test) = splits();
    let again = run_curve(
        &spec,
        &train,
        &test,
        &[1.0],
        &out,
        how,
        &Device::Cpu,
        &mut Silent,
    )
    .unwrap();
    for (a, b) in states.iter().zip(&again) {
        assert_eq!(a.records.len(), b.records.len());
        assert_eq!(a.labeled, b.labeled);
    }
    // Another rule on resume is refused, naming the setting and the run's own.
    let o = alkit_cmd()
        .args(["curve", "--resume"])
        .arg(&out)
        .args(["--stop", "kappa-average", "-q"])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(
        e.contains("--stop") && e.contains("classification-change"),
        "{e}"
    );
    let o = alkit_cmd()
        .args(["curve", "--stop", "kappa", "--out"])
        .arg(dir.join("bad"))
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("kappa-average, classification-change"), "{e}");
    // The change in F needs two classes: refused on the ten digits.
    let o = alkit_cmd()
        .args(["curve", "--data", "data", "--stop", "delta-f", "--out"])
        .arg(dir.join("digits"))
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("--stop") && e.contains("has 10"), "{e}");
}
