//! The fidelity pack (data/fidelity/, written by tests/reference/fidelity_data.py) against
//! CDALBench's published generators: the point counts, where the points lie, and the files
//! being what the script writes; and the loop features its protocols need: seed labels drawn
//! class by class, and runs carried out several at once writing the same bytes as one at a
//! time.

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
