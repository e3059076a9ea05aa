//! alkit's one integration test binary: real CPU tensors, the real MNIST subset in `data/`,
//! and reference values from independent sources (finite differences, hand-worked formulas).

use alkit::acquire::{run, LoopConfig, RunContext, RunState, Strategy};
use alkit::curve::{run_curve, state_path, CurveSpec, StrategyKind};
use alkit::data::idx::{encode_images, encode_labels, write_gz};
use alkit::data::{load_idx_dir, Dataset, Normalizer};
use alkit::error::DataProblem;
use alkit::nn::init::seeded;
use alkit::nn::layers::{im2col, log_probs, max_pool2x2};
use alkit::nn::{kernels, Arch, CnnConfig, MlpConfig, Mode, ModelBuilder};
use alkit::observe::{Control, Event, Observer, Silent};
use alkit::rng::{stream, Purpose};
use alkit::train::TrainConfig;
use alkit::Error;
use candle_core::{DType, Device, Tensor, Var};
use std::path::{Path, PathBuf};
use std::process::Command;

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data")
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("alkit-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

// ------------------------------------------------------------------------------------ data

#[test]
fn shipped_subset_loads_with_expected_counts() {
    // data/README.md: 2,000 train and 500 test items, 28x28, 10 classes.
    let s = load_idx_dir(&data_dir()).unwrap();
    assert_eq!((s.train.len(), s.test.len()), (2000, 500));
    assert_eq!(s.train.item_shape(), &[1, 28, 28]);
    assert_eq!(s.train.classes(), 10);
    assert!(s.train.features().iter().all(|v| (0.0..=1.0).contains(v)));
}

fn write_idx_dir(
    dir: &Path,
    train: (usize, usize, usize),
    train_labels: &[u8],
    test: (usize, usize, usize),
    test_labels: &[u8],
) {
    let (n, h, w) = train;
    write_gz(
        &dir.join("train-images-idx3-ubyte.gz"),
        &encode_images(&vec![7; n * h * w], n, h, w),
    )
    .unwrap();
    write_gz(
        &dir.join("train-labels-idx1-ubyte.gz"),
        &encode_labels(train_labels),
    )
    .unwrap();
    let (n, h, w) = test;
    // Plain (not gzipped) test files: both encodings must be read.
    std::fs::write(
        dir.join("t10k-images-idx3-ubyte"),
        encode_images(&vec![9; n * h * w], n, h, w),
    )
    .unwrap();
    std::fs::write(
        dir.join("t10k-labels-idx1-ubyte"),
        encode_labels(test_labels),
    )
    .unwrap();
}

fn data_problem(e: Error) -> (PathBuf, DataProblem) {
    match e {
        Error::Data { path, problem } => (path, problem),
        other => panic!("expected a data error, got {other}"),
    }
}

#[test]
fn idx_plain_and_gzip_read_alike_and_errors_name_the_file() {
    let dir = tmp("idx");
    write_idx_dir(&dir, (3, 4, 5), &[0, 1, 2], (2, 4, 5), &[2, 0]);
    let s = load_idx_dir(&dir).unwrap();
    assert_eq!((s.train.len(), s.test.len(), s.train.classes()), (3, 2, 3));
    assert_eq!(s.test.item(1)[0], 9.0 / 255.0);

    // Label count != image count.
    write_idx_dir(&dir, (3, 4, 5), &[0, 1], (2, 4, 5), &[0, 1]);
    let (path, p) = data_problem(load_idx_dir(&dir).unwrap_err());
    assert!(path.ends_with("train-labels-idx1-ubyte.gz"));
    assert_eq!(
        p,
        DataProblem::CountMismatch {
            images: 3,
            labels: 2
        }
    );

    // Test label not below the class count (3 classes seen in train).
    write_idx_dir(&dir, (3, 4, 5), &[0, 1, 2], (2, 4, 5), &[0, 3]);
    let (path, p) = data_problem(load_idx_dir(&dir).unwrap_err());
    assert!(path.ends_with("t10k-labels-idx1-ubyte"));
    assert_eq!(
        p,
        DataProblem::LabelOutOfRange {
            item: 1,
            label: 3,
            classes: 3
        }
    );

    // Test images of another size.
    write_idx_dir(&dir, (3, 4, 5), &[0, 1, 2], (2, 5, 5), &[0, 1]);
    let (_, p) = data_problem(load_idx_dir(&dir).unwrap_err());
    assert_eq!(
        p,
        DataProblem::DimensionMismatch {
            expected: (4, 5),
            got: (5, 5)
        }
    );

    // Bad magic: a label file where an image file belongs.
    write_idx_dir(&dir, (3, 4, 5), &[0, 1, 2], (2, 4, 5), &[0, 1]);
    std::fs::write(dir.join("t10k-images-idx3-ubyte"), encode_labels(&[1, 2])).unwrap();
    let (path, p) = data_problem(load_idx_dir(&dir).unwrap_err());
    assert!(path.ends_with("t10k-images-idx3-ubyte"));
    assert!(
        matches!(
            p,
            DataProblem::BadMagic {
                found: 0x801,
                expected: 0x803,
                ..
            }
        ),
        "{p:?}"
    );

    // Truncated: header promises 2*4*5 = 40 bytes, 30 present.
    let mut bytes = encode_images(&[0; 40], 2, 4, 5);
    bytes.truncate(16 + 30);
    std::fs::write(dir.join("t10k-images-idx3-ubyte"), bytes).unwrap();
    let (_, p) = data_problem(load_idx_dir(&dir).unwrap_err());
    assert_eq!(
        p,
        DataProblem::Truncated {
            expected: 40,
            got: 30
        }
    );

    // A missing folder is an IO error naming the file looked for.
    let e = load_idx_dir(&dir.join("nope")).unwrap_err();
    assert!(e.to_string().contains("train-images-idx3-ubyte"), "{e}");
}

#[test]
fn normalisation_uses_training_statistics_only() {
    // Two 1x1x2 train items [0, 2] and [4, 6]: mean 3, population std sqrt(5).
    let train = Dataset::new(vec![0.0, 2.0, 4.0, 6.0], vec![0, 1], vec![1, 1, 2], 2).unwrap();
    let test = Dataset::new(vec![3.0, 8.0], vec![0], vec![1, 1, 2], 2).unwrap();
    let n = Normalizer::fit(&train);
    assert!((n.mean[0] - 3.0).abs() < 1e-6 && (n.std[0] - 5f32.sqrt()).abs() < 1e-6);
    let t = n.apply(&test).unwrap();
    assert!(t.item(0)[0].abs() < 1e-6);
    assert!((t.item(0)[1] - 5.0 / 5f32.sqrt()).abs() < 1e-5);
}

// ------------------------------------------------------------------ gradients & kernels

/// Central finite differences of `f` w.r.t. `var` at `k` evenly spread coordinates,
/// compared with `analytic` (same shape); returns the max relative error.
fn fd_check(var: &Var, analytic: &Tensor, f: &dyn Fn() -> f64, k: usize) -> f64 {
    let base: Vec<f64> = var.as_tensor().flatten_all().unwrap().to_vec1().unwrap();
    let grad: Vec<f64> = analytic.flatten_all().unwrap().to_vec1().unwrap();
    let shape = var.as_tensor().shape().clone();
    let eps = 1e-6;
    let mut worst = 0f64;
    for j in 0..k.min(base.len()) {
        let i = j * base.len() / k.min(base.len());
        let mut v = base.clone();
        v[i] = base[i] + eps;
        var.set(&Tensor::from_vec(v.clone(), &shape, &Device::Cpu).unwrap())
            .unwrap();
        let up = f();
        v[i] = base[i] - eps;
        var.set(&Tensor::from_vec(v, &shape, &Device::Cpu).unwrap())
            .unwrap();
        let down = f();
        var.set(&Tensor::from_vec(base.clone(), &shape, &Device::Cpu).unwrap())
            .unwrap();
        let fd = (up - down) / (2.0 * eps);
        let rel = (fd - grad[i]).abs() / (fd.abs().max(grad[i].abs()).max(1e-3));
        worst = worst.max(rel);
    }
    worst
}

fn randn64(shape: &[usize], seed: u64) -> Tensor {
    let mut rng = stream(seed, Purpose::Tool, 0);
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n).map(|_| alkit::rng::normal(&mut rng)).collect();
    Tensor::from_vec(v, shape, &Device::Cpu).unwrap()
}

#[test]
fn maxpool_and_im2col_kernels_match_finite_differences_in_f64() {
    // Workaround for candle 0.11's wrong `max_pool2d` backward and slow conv: our kernels'
    // gradients against central differences, odd sizes included (floor semantics).
    let x = Var::from_tensor(&randn64(&[2, 7, 5, 3], 1)).unwrap();
    let coef = randn64(&[2, 3, 2, 3], 2);
    let loss = || {
        max_pool2x2(x.as_tensor())
            .unwrap()
            .mul(&coef)
            .unwrap()
            .sum_all()
            .unwrap()
    };
    let g = loss().backward().unwrap();
    let err = fd_check(
        &x,
        g.get(&x).unwrap(),
        &|| loss().to_scalar::<f64>().unwrap(),
        60,
    );
    assert!(err < 1e-7, "maxpool gradient relative error {err}");

    let y = Var::from_tensor(&randn64(&[2, 6, 5, 4], 3)).unwrap();
    let coef = randn64(&[2, 6, 5, 36], 4); // k = 3, pad = 1: same spatial size
    let loss = || {
        im2col(y.as_tensor(), 3, 1)
            .unwrap()
            .mul(&coef)
            .unwrap()
            .sum_all()
            .unwrap()
    };
    let g = loss().backward().unwrap();
    let err = fd_check(
        &y,
        g.get(&y).unwrap(),
        &|| loss().to_scalar::<f64>().unwrap(),
        60,
    );
    assert!(err < 1e-6, "im2col gradient relative error {err}");
}

#[test]
fn log_softmax_gradient_matches_finite_differences() {
    // `softmax_last_dim` has no backward in candle 0.11; alkit uses log_softmax everywhere.
    let z = Var::from_tensor(&randn64(&[3, 5], 5)).unwrap();
    let coef = randn64(&[3, 5], 6);
    let loss = || {
        log_probs(z.as_tensor())
            .unwrap()
            .exp()
            .unwrap()
            .mul(&coef)
            .unwrap()
            .sum_all()
            .unwrap()
    };
    let g = loss().backward().unwrap();
    let err = fd_check(
        &z,
        g.get(&z).unwrap(),
        &|| loss().to_scalar::<f64>().unwrap(),
        15,
    );
    assert!(
        err < 1e-7,
        "softmax-via-log_softmax gradient relative error {err}"
    );
}

#[test]
fn cnn_parameter_gradients_match_finite_differences_in_f64() {
    let cfg = CnnConfig {
        in_channels: 1,
        height: 14,
        width: 13,
        classes: 4,
        dropout: 0.5,
    };
    let (vb, params) = seeded(stream(7, Purpose::Init, 0), DType::F64, &Device::Cpu);
    let model = Arch::Cnn(cfg).build(vb).unwrap();
    let x = randn64(&[3, 1, 14, 13], 8);
    let y = Tensor::from_vec(vec![0u32, 3, 1], 3, &Device::Cpu).unwrap();
    let loss = || {
        let lp = log_probs(&model.forward(&x, &mut Mode::Eval).unwrap()).unwrap();
        candle_nn::loss::nll(&lp, &y).unwrap()
    };
    let grads = loss().backward().unwrap();
    for (name, var) in params.named() {
        let err = fd_check(
            &var,
            grads.get(&var).unwrap(),
            &|| loss().to_scalar::<f64>().unwrap(),
            12,
        );
        assert!(err < 1e-6, "{name}: relative error {err}");
    }
}

#[test]
fn kernels_agree_with_generic_compositions() {
    // The CPU kernels against plain candle ops (the path other devices take).
    let x = randn64(&[2, 9, 7, 3], 9);
    let cols = im2col(&x, 3, 1).unwrap();
    let padded = x
        .pad_with_zeros(1, 1, 1)
        .unwrap()
        .pad_with_zeros(2, 1, 1)
        .unwrap();
    let mut slices = Vec::new();
    for i in 0..3 {
        for j in 0..3 {
            slices.push(padded.narrow(1, i, 9).unwrap().narrow(2, j, 7).unwrap());
        }
    }
    let want = Tensor::cat(&slices, 3).unwrap();
    let diff = (cols - want)
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f64>()
        .unwrap();
    assert_eq!(diff, 0.0);
    let pooled = max_pool2x2(&x).unwrap();
    let want = x
        .narrow(1, 0, 8)
        .unwrap()
        .narrow(2, 0, 6)
        .unwrap()
        .reshape((2, 4, 2, 3, 2, 3))
        .unwrap()
        .max(4)
        .unwrap()
        .max(2)
        .unwrap();
    let diff = (pooled - want)
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f64>()
        .unwrap();
    assert_eq!(diff, 0.0);
    assert!(kernels::supported(&x));
}

#[test]
fn fused_predict_matches_forward() {
    let s = load_idx_dir(&data_dir()).unwrap();
    let ds = Normalizer::fit(&s.train).apply(&s.train).unwrap();
    for dtype in [DType::F32, DType::F64] {
        let (vb, _) = seeded(stream(1, Purpose::Init, 0), dtype, &Device::Cpu);
        let m = Arch::Cnn(CnnConfig::standard(ds.item_shape(), 10))
            .build(vb)
            .unwrap();
        let idx: Vec<usize> = (0..40).collect();
        let x = ds
            .batch(&idx, &Device::Cpu)
            .unwrap()
            .to_dtype(dtype)
            .unwrap();
        let a = m.forward(&x, &mut Mode::Eval).unwrap();
        let b = m.predict(&x).unwrap();
        let d = (a - b)
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_dtype(DType::F64)
            .unwrap()
            .to_scalar::<f64>()
            .unwrap();
        let tol = if dtype == DType::F32 { 1e-5 } else { 1e-12 };
        assert!(d < tol, "{dtype:?}: {d}");
    }
}

// ------------------------------------------------------------------------ randomness

#[test]
fn seeded_init_and_dropout_are_reproducible() {
    let arch = Arch::Mlp(MlpConfig {
        inputs: 6,
        hidden: vec![8],
        classes: 3,
        dropout: 0.5,
    });
    let weights = |seed| {
        let (vb, p) = seeded(stream(seed, Purpose::Init, 0), DType::F32, &Device::Cpu);
        let m = arch.build(vb).unwrap();
        let x = Tensor::ones((4, 6), DType::F32, &Device::Cpu).unwrap();
        let mut rng = stream(seed, Purpose::Train, 0);
        let out: Vec<f32> = m
            .forward(&x, &mut Mode::Train(&mut rng))
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let w: Vec<f32> = p.vars()[0]
            .as_tensor()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        (w, out)
    };
    assert_eq!(weights(3), weights(3));
    assert_ne!(weights(3).0, weights(4).0);
    // PyTorch's default Linear init: U(-1/sqrt(6), 1/sqrt(6)) for 6 inputs.
    let b = 1.0 / 6f32.sqrt();
    assert!(weights(3).0.iter().all(|v| v.abs() <= b));
}

// -------------------------------------------------------------------- the loop, resume

fn small_spec(strategies: Vec<StrategyKind>) -> CurveSpec {
    let s = load_idx_dir(&data_dir()).unwrap();
    CurveSpec {
        data: data_dir(),
        model: Arch::Cnn(CnnConfig::standard(s.train.item_shape(), 10)),
        strategies,
        seeds: vec![5],
        config: LoopConfig {
            initial: 20,
            query: 10,
            cycles: 3,
            train: TrainConfig {
                steps: 25,
                batch_size: 16,
                lr: 1e-3,
                anchor: None,
            },
            batch: 256,
        },
        scorers: Default::default(),
    }
}

fn std_of() -> Vec<f32> {
    Normalizer::fit(&load_idx_dir(&data_dir()).unwrap().train).std
}

fn normalised() -> (Dataset, Dataset) {
    let s = load_idx_dir(&data_dir()).unwrap();
    let n = Normalizer::fit(&s.train);
    (n.apply(&s.train).unwrap(), n.apply(&s.test).unwrap())
}

fn strip_timings(csv: &str) -> String {
    csv.lines()
        .map(|l| l.split(',').take(6).collect::<Vec<_>>().join(","))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Stops the run at a given training step of a given cycle.
struct KillAt {
    cycle: usize,
    step: usize,
    current: usize,
}

impl Observer for KillAt {
    fn on(&mut self, e: &Event<'_>) -> Control {
        match e {
            Event::CycleStarted { cycle, .. } => self.current = *cycle,
            Event::TrainStep { step, .. } if self.current == self.cycle && *step == self.step => {
                return Control::Stop
            }
            _ => {}
        }
        Control::Continue
    }
}

#[test]
fn same_seed_gives_identical_curves_and_resume_matches_uninterrupted() {
    let (train, test) = normalised();
    let spec = small_spec(vec![StrategyKind::Entropy, StrategyKind::Random]);
    let a = tmp("curve-a");
    let b = tmp("curve-b");
    let c = tmp("curve-c");
    run_curve(
        &spec,
        &train,
        &test,
        &std_of(),
        &a,
        false,
        &Device::Cpu,
        &mut Silent,
    )
    .unwrap();
    run_curve(
        &spec,
        &train,
        &test,
        &std_of(),
        &b,
        false,
        &Device::Cpu,
        &mut Silent,
    )
    .unwrap();
    let csv_a = std::fs::read_to_string(a.join("curve.csv")).unwrap();
    let csv_b = std::fs::read_to_string(b.join("curve.csv")).unwrap();
    assert_eq!(strip_timings(&csv_a), strip_timings(&csv_b));
    assert_eq!(csv_a.lines().count(), 1 + 2 * 4);
    // Learning happens: 50 labels beat 20 on average over strategies.
    let rows: Vec<Vec<String>> = csv_a
        .lines()
        .skip(1)
        .map(|l| l.split(',').map(String::from).collect())
        .collect();
    let acc = |cycle: &str| {
        rows.iter()
            .filter(|r| r[2] == cycle)
            .map(|r| r[4].parse::<f64>().unwrap())
            .sum::<f64>()
    };
    assert!(acc("3") > acc("0"), "{csv_a}");

    // Kill during cycle 2's training of the second strategy, then resume.
    let mut kill = KillAt {
        cycle: 2,
        step: 10,
        current: 0,
    };
    let mut killed_spec = spec.clone();
    killed_spec.strategies = vec![StrategyKind::Random];
    let err = run_curve(
        &killed_spec,
        &train,
        &test,
        &std_of(),
        &c,
        false,
        &Device::Cpu,
        &mut kill,
    )
    .unwrap_err();
    assert!(matches!(err, Error::Interrupted), "{err}");
    let saved: RunState = alkit::fsutil::read_json(&state_path(&c, "random", 5)).unwrap();
    assert_eq!(saved.records.len(), 2, "cycles 0 and 1 saved, cycle 2 not");
    run_curve(
        &killed_spec,
        &train,
        &test,
        &std_of(),
        &c,
        true,
        &Device::Cpu,
        &mut Silent,
    )
    .unwrap();
    let csv_c = std::fs::read_to_string(c.join("curve.csv")).unwrap();
    let random_rows = |csv: &str| -> Vec<String> {
        strip_timings(csv)
            .lines()
            .filter(|l| l.starts_with("random"))
            .map(String::from)
            .collect()
    };
    assert_eq!(random_rows(&csv_a), random_rows(&csv_c));
    assert_eq!(random_rows(&csv_c).len(), 4);

    // A fresh run refuses a folder that holds one; resuming a different experiment is refused.
    let e = run_curve(
        &spec,
        &train,
        &test,
        &std_of(),
        &a,
        false,
        &Device::Cpu,
        &mut Silent,
    )
    .unwrap_err();
    assert!(e.to_string().contains("--resume"), "{e}");
    let mut other = spec.clone();
    other.config.query = 11;
    assert!(run_curve(
        &other,
        &train,
        &test,
        &std_of(),
        &a,
        true,
        &Device::Cpu,
        &mut Silent
    )
    .is_err());
    for d in [a, b, c] {
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn labels_are_never_acquired_twice_and_counts_follow_the_protocol() {
    let (train, test) = normalised();
    let spec = small_spec(vec![StrategyKind::Margin]);
    let params = spec.config.validate(train.len()).unwrap();
    let std = std_of();
    let ctx = RunContext {
        train: &train,
        test: &test,
        model: &spec.model,
        params: &params,
        input_std: &std,
        device: &Device::Cpu,
    };
    let strategy = StrategyKind::Margin.strategy(&Default::default());
    let mut st = RunState::new(&strategy, 1, &spec.config, "cnn".into(), &train, &test);
    run(&ctx, &strategy, &mut st, None, &mut Silent).unwrap();
    let mut idx: Vec<usize> = st.labeled.iter().map(|p| p.0).collect();
    assert_eq!(idx.len(), 20 + 3 * 10);
    idx.sort();
    idx.dedup();
    assert_eq!(idx.len(), 50);
    let labeled: Vec<usize> = st.records.iter().map(|r| r.labeled).collect();
    assert_eq!(labeled, vec![20, 30, 40, 50]);
    for c in 1..=3 {
        assert_eq!(st.labeled.iter().filter(|p| p.1 == c).count(), 10);
    }
    // A pool too small for the protocol is a clear settings error.
    let mut big = spec.config.clone();
    big.cycles = 1000;
    assert!(matches!(
        big.validate(train.len()),
        Err(Error::Config {
            field: "cycles",
            ..
        })
    ));
    let _ = Strategy::random();
}

// ------------------------------------------------------------------------- checkpoints

#[test]
fn checkpoint_round_trip_and_tensor_names_are_stable() {
    let (train, test) = normalised();
    let arch = Arch::Cnn(CnnConfig::standard(train.item_shape(), 10));
    let (vb, params) = seeded(stream(2, Purpose::Init, 0), DType::F32, &Device::Cpu);
    let model = arch.build(vb).unwrap();
    // Golden names and shapes: the documented PyTorch-compatible layout.
    let names: Vec<(String, Vec<usize>)> = params
        .named()
        .iter()
        .map(|(n, v)| (n.clone(), v.dims().to_vec()))
        .collect();
    let want: Vec<(String, Vec<usize>)> = [
        ("conv1.weight", vec![32, 1, 3, 3]),
        ("conv1.bias", vec![32]),
        ("conv2.weight", vec![64, 32, 3, 3]),
        ("conv2.bias", vec![64]),
        ("fc1.weight", vec![128, 1600]),
        ("fc1.bias", vec![128]),
        ("fc2.weight", vec![10, 128]),
        ("fc2.bias", vec![10]),
    ]
    .into_iter()
    .map(|(n, s)| (n.to_string(), s))
    .collect();
    assert_eq!(names, want);
    let dir = tmp("ckpt");
    let norm = Normalizer::fit(&train);
    alkit::checkpoint::save(
        &dir,
        &arch,
        &params,
        &norm,
        train.item_shape(),
        (0..10).map(|c| c.to_string()).collect(),
    )
    .unwrap();
    let ck = alkit::checkpoint::load(&dir, &Device::Cpu).unwrap();
    let idx: Vec<usize> = (0..32).collect();
    let x = test.batch(&idx, &Device::Cpu).unwrap();
    let a: Vec<f32> = model
        .predict(&x)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    let b: Vec<f32> = ck
        .model
        .predict(&x)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    assert_eq!(a, b);
    assert_eq!(ck.config.normalizer, norm);
    // A checkpoint missing a tensor is refused with its name.
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    cfg["tensors"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"name": "fc3.weight", "shape": [1]}));
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    let e = alkit::checkpoint::load(&dir, &Device::Cpu).err().unwrap();
    assert!(e.to_string().contains("fc3.weight"), "{e}");
    let _ = std::fs::remove_dir_all(dir);
}

// -------------------------------------------------------------------------------- CLI

fn alkit_cmd() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_alkit"));
    c.current_dir(env!("CARGO_MANIFEST_DIR"));
    c
}

#[test]
fn cli_runs_a_tiny_curve_and_reports_errors_with_exit_codes() {
    let out = tmp("cli");
    let o = alkit_cmd()
        .args([
            "-q",
            "curve",
            "--scorer",
            "least-confidence",
            "--cycles",
            "1",
            "--steps",
            "5",
            "--query",
            "5",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("least-confidence"), "{stdout}");
    for f in [
        "run.json",
        "curve.csv",
        "summary.csv",
        "curve.svg",
        "curve.png",
        "runs/least-confidence-seed0.json",
    ] {
        assert!(out.join(f).is_file(), "missing {f}");
    }
    // Without --scorer, the four default strategies run (and nothing else).
    let d = out.join("defaults");
    let o = alkit_cmd()
        .args(["-q", "curve", "--cycles", "0", "--steps", "1", "--out"])
        .arg(&d)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut runs: Vec<String> = std::fs::read_dir(d.join("runs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    runs.sort();
    assert_eq!(
        runs,
        [
            "entropy-seed0.json",
            "least-confidence-seed0.json",
            "margin-seed0.json",
            "random-seed0.json"
        ]
    );
    // Rerunning into the same folder is refused (exit 1) and names --resume.
    let o = alkit_cmd()
        .args(["-q", "curve", "--cycles", "1", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--resume"));
    // --resume with a setting flag is refused.
    let o = alkit_cmd()
        .args(["-q", "curve", "--steps", "3", "--resume"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("drop --steps"));
    // Resuming a finished run is a no-op that succeeds.
    let o = alkit_cmd()
        .args(["-q", "curve", "--resume"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Bad flag values: clap's usage error, exit 2, naming the valid scorers.
    let o = alkit_cmd()
        .args(["curve", "--scorer", "bogus"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("least-confidence"));
    // Settings the library rejects: exit 2 too.
    let o = alkit_cmd()
        .args(["-q", "curve", "--cycles", "100000", "--out"])
        .arg(out.join("x"))
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // Missing data folder: exit 1, the message names the file.
    let o = alkit_cmd()
        .args(["-q", "curve", "--data", "/nonexistent", "--out"])
        .arg(out.join("y"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent"));
    let _ = std::fs::remove_dir_all(out);
}

#[test]
fn cli_train_then_score_writes_one_row_per_item() {
    let dir = tmp("cli-score");
    let ck = dir.join("ckpt");
    let o = alkit_cmd()
        .args(["-q", "train", "--steps", "30", "--out"])
        .arg(&ck)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let csv = dir.join("scores.csv");
    let o = alkit_cmd()
        .args([
            "score",
            "--split",
            "test",
            "--scorer",
            "entropy,margin",
            "--checkpoint",
        ])
        .arg(&ck)
        .arg("--out")
        .arg(&csv)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("index,entropy,margin"));
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), 500);
    for r in &rows {
        let v: Vec<f64> = r.split(',').skip(1).map(|x| x.parse().unwrap()).collect();
        assert!(
            v[0] >= 0.0 && v[0] <= 10f64.ln() + 1e-6 && (0.0..=1.0 + 1e-6).contains(&v[1]),
            "{r}"
        );
    }
    // `random` is not a scorer: a settings error.
    let o = alkit_cmd()
        .args([
            "score",
            "--scorer",
            "random",
            "--out",
            "/tmp/x.csv",
            "--checkpoint",
        ])
        .arg(&ck)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(dir);
}

// ----------------------------------------------------------------- gradient evidence

use alkit::acquisition::{Evidence, GradNorms, GradRequest, Needs, Probs, ReGrad, Scorer};
use alkit::nn::gradnorm::{autograd_grad_norms, GradOut};
use alkit::predict::Scoring;

fn named_tensors(p: &alkit::nn::init::Params) -> Vec<(String, Tensor)> {
    p.named()
        .into_iter()
        .map(|(n, v)| (n, v.as_tensor().clone()))
        .collect()
}

/// Max relative error over all rows and GradNorm values. With `zero_expected` (no
/// perturbation) the expected-gradient row is pure rounding noise around 0 and is checked
/// against the class rows' scale instead. (With perturbed copies it is `p0 - p(x_i)`-driven and
/// genuinely non-zero.)
fn max_rel(a: &GradOut, b: &GradOut, classes: usize, zero_expected: bool) -> f64 {
    assert_eq!(
        (a.rows, a.layers, a.sq.len()),
        (b.rows, b.layers, b.sq.len())
    );
    let rel = |x: f64, y: f64| (x - y).abs() / x.abs().max(y.abs()).max(1e-300);
    let per = a.rows * a.layers;
    let mut worst = 0f64;
    for (i, (ca, cb)) in a.sq.chunks(per).zip(b.sq.chunks(per)).enumerate() {
        let scale: f64 = ca[..classes * a.layers].iter().sum();
        for (j, (&x, &y)) in ca.iter().zip(cb).enumerate() {
            if j < classes * a.layers || !zero_expected {
                worst = worst.max(rel(x, y));
            } else {
                assert!(
                    x.abs() <= 1e-20 * scale && y.abs() <= 1e-20 * scale,
                    "expected row of {i}: {x} vs {y}"
                );
            }
        }
    }
    a.kl_l1
        .iter()
        .zip(&b.kl_l1)
        .fold(worst, |w, (&x, &y)| w.max(rel(x, y)))
}

#[test]
fn fast_cnn_gradient_norms_match_per_sample_autograd_in_f64() {
    // Independent reference: one autograd backward per candidate and row, in f64, through
    // candle's own ops. Relative error <= 1e-9 on every class row, layer and GradNorm value.
    let (train, _) = normalised();
    let cfg = CnnConfig::standard(train.item_shape(), 10);
    let (vb, params) = seeded(stream(11, Purpose::Init, 0), DType::F64, &Device::Cpu);
    let model = Arch::Cnn(cfg).build(vb).unwrap();
    let idx: Vec<usize> = (0..4).collect();
    let x = train
        .batch(&idx, &Device::Cpu)
        .unwrap()
        .to_dtype(DType::F64)
        .unwrap();
    let fast = model
        .grad_norms(&x, 1, true)
        .unwrap()
        .expect("CNN has a fast path");
    let slow = autograd_grad_norms(model.as_ref(), &named_tensors(&params), &x, 1, true).unwrap();
    assert_eq!((fast.rows, fast.layers), (11, 4));
    let err = max_rel(&fast, &slow, 10, true);
    assert!(err <= 1e-9, "relative error {err}");
    // Perturbed copies (3 per candidate, averaged before the norm), same inputs both ways.
    let noisy = (x
        .repeat((1, 3, 1, 1))
        .unwrap()
        .reshape((12, 1, 28, 28))
        .unwrap()
        + randn64(&[12, 1, 28, 28], 12).affine(0.05, 0.0).unwrap())
    .unwrap();
    let fast = model.grad_norms(&noisy, 3, true).unwrap().unwrap();
    let slow =
        autograd_grad_norms(model.as_ref(), &named_tensors(&params), &noisy, 3, true).unwrap();
    let err = max_rel(&fast, &slow, 10, false);
    assert!(err <= 1e-9, "relative error with copies {err}");
}

#[test]
fn softmax_regression_gradient_norms_have_the_closed_form() {
    // One linear layer z = W h + b: d log p_c / dW = (e_c - p) h^T, d/db = e_c - p, so
    // ||g_c||^2 = (||h||^2 + 1) ||e_c - p||^2 (computed here by hand from the model's own p).
    let arch = Arch::Mlp(MlpConfig {
        inputs: 5,
        hidden: vec![],
        classes: 3,
        dropout: 0.0,
    });
    let (vb, params) = seeded(stream(3, Purpose::Init, 0), DType::F64, &Device::Cpu);
    let model = arch.build(vb).unwrap();
    let h = randn64(&[2, 5], 14);
    let out = autograd_grad_norms(model.as_ref(), &named_tensors(&params), &h, 1, false).unwrap();
    let p: Vec<Vec<f64>> = log_probs(&model.forward(&h, &mut Mode::Eval).unwrap())
        .unwrap()
        .exp()
        .unwrap()
        .to_vec2()
        .unwrap();
    let hv: Vec<Vec<f64>> = h.to_vec2().unwrap();
    for i in 0..2 {
        let hh: f64 = hv[i].iter().map(|v| v * v).sum();
        for c in 0..3 {
            let ep: f64 = (0..3)
                .map(|j| (f64::from(u8::from(j == c)) - p[i][j]).powi(2))
                .sum();
            let want = (hh + 1.0) * ep;
            let got = out.sq[i * 3 + c];
            assert!((got - want).abs() <= 1e-12 * want, "{got} vs {want}");
        }
        // GradNorm: ||(p - u) h^T||_1 = ||p - u||_1 ||h||_1.
        let want = p[i].iter().map(|v| (v - 1.0 / 3.0).abs()).sum::<f64>()
            * hv[i].iter().map(|v| v.abs()).sum::<f64>();
        assert!((out.kl_l1[i] - want).abs() <= 1e-12 * want);
    }
}

#[test]
fn regrad_star_with_zero_noise_equals_regrad_and_scores_in_the_loop() {
    let (train, test) = normalised();
    let norm = Normalizer::fit(&load_idx_dir(&data_dir()).unwrap().train);
    let (vb, params) = seeded(stream(5, Purpose::Init, 0), DType::F32, &Device::Cpu);
    let model = Arch::Cnn(CnnConfig::standard(train.item_shape(), 10))
        .build(vb)
        .unwrap();
    let arch = Arch::Cnn(CnnConfig::standard(train.item_shape(), 10));
    let scoring = Scoring {
        model: model.as_ref(),
        params: Some(&params),
        builder: Some(&arch),
        input_std: &norm.std,
        batch: 64,
        device: &Device::Cpu,
    };
    let idx: Vec<usize> = (0..24).collect();
    let plain = ReGrad::DEFAULT;
    let star0 = ReGrad {
        lambda: 0.3,
        request: GradRequest {
            perturbations: 4,
            sigma: 0.0,
            expected: false,
        },
    };
    let mut rng = stream(0, Purpose::Perturb, 0);
    let a = plain
        .score(
            &scoring
                .evidence(&train, &idx, plain.needs(), &mut rng, &mut Silent)
                .unwrap(),
        )
        .unwrap();
    let b = star0
        .score(
            &scoring
                .evidence(&train, &idx, star0.needs(), &mut rng, &mut Silent)
                .unwrap(),
        )
        .unwrap();
    for (x, y) in a.iter().zip(&b) {
        assert!((x - y).abs() <= 1e-4 * x.abs(), "{x} vs {y}");
    }
    // With noise the scores move, but stay finite and positive.
    let mut rng = stream(0, Purpose::Perturb, 0);
    let c = ReGrad::STAR
        .score(
            &scoring
                .evidence(&train, &idx, ReGrad::STAR.needs(), &mut rng, &mut Silent)
                .unwrap(),
        )
        .unwrap();
    assert!(c.iter().all(|v| v.is_finite() && *v > 0.0) && c != b);
    // Every gradient strategy runs through the loop (2 cycles, tiny training).
    let mut spec = small_spec(vec![
        StrategyKind::RegradStar,
        StrategyKind::Exgrad,
        StrategyKind::Negrad,
        StrategyKind::Ungrad,
        StrategyKind::Gradnorm,
        StrategyKind::ExgradV,
        StrategyKind::Regrad,
        StrategyKind::PerturbX,
        StrategyKind::PerturbTheta,
    ]);
    spec.config.cycles = 1;
    spec.config.train.steps = 10;
    spec.scorers.perturbations = 2;
    spec.scorers.perturb_samples = 2;
    let out = tmp("grad-loop");
    let states = run_curve(
        &spec,
        &train,
        &test,
        &norm.std,
        &out,
        false,
        &Device::Cpu,
        &mut Silent,
    )
    .unwrap();
    assert_eq!(states.len(), 9);
    assert!(states
        .iter()
        .all(|s| s.records.len() == 2 && s.labeled.len() == 30));
    let _ = std::fs::remove_dir_all(out);
    // Evidence shape errors are caught: 2 candidates of probabilities vs 1 of gradient norms.
    let mut bad = Evidence::from_probs(Probs::new(vec![0.5, 0.5, 0.5, 0.5], 2, 2).unwrap());
    bad.grads = Some(GradNorms::new(vec![1.0; 2], 1, 2, 2, 1, vec![0.0]).unwrap());
    assert!(plain.score(&bad).is_err());
    let _ = Needs::PROBS;
}

// --------------------------------------------------------------------------- MC dropout

#[test]
fn mc_dropout_fast_path_equals_training_mode_forwards() {
    // The CNN computes conv features once and redraws only the dropout head; the generic
    // path runs `forward` in training mode T times. Same RNG stream -> same masks -> the same
    // logits up to the fused kernels' float rounding.
    let (train, _) = normalised();
    let (vb, _) = seeded(stream(21, Purpose::Init, 0), DType::F32, &Device::Cpu);
    let model = Arch::Cnn(CnnConfig::standard(train.item_shape(), 10))
        .build(vb)
        .unwrap();
    let idx: Vec<usize> = (0..16).collect();
    let x = train.batch(&idx, &Device::Cpu).unwrap();
    let fast = model
        .mc_dropout_logits(&x, 5, &mut stream(1, Purpose::Perturb, 0))
        .unwrap();
    let mut rng = stream(1, Purpose::Perturb, 0);
    let slow: Vec<Tensor> = (0..5)
        .map(|_| model.forward(&x, &mut Mode::Train(&mut rng)).unwrap())
        .collect();
    for (a, b) in fast.iter().zip(&slow) {
        let d = (a - b)
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert!(d < 1e-4, "{d}");
    }
    // Draws differ from each other (dropout is on).
    let d01 = (&fast[0] - &fast[1])
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    assert!(d01 > 1e-3);
}

#[test]
fn bald_with_power_selection_runs_in_the_loop() {
    let (train, test) = normalised();
    let mut spec = small_spec(vec![StrategyKind::Bald, StrategyKind::ClassVariance]);
    spec.config.cycles = 2;
    spec.scorers.mc_samples = 4;
    spec.scorers.select = alkit::curve::SelectKind::Power;
    let out = tmp("bald-loop");
    let states = run_curve(
        &spec,
        &train,
        &test,
        &std_of(),
        &out,
        false,
        &Device::Cpu,
        &mut Silent,
    )
    .unwrap();
    let names: Vec<&str> = states.iter().map(|s| s.strategy.as_str()).collect();
    assert_eq!(names, vec!["power-bald", "power-class-variance"]);
    assert!(states.iter().all(|s| s.records.len() == 3));
    let _ = std::fs::remove_dir_all(out);
}

// -------------------------------------------------------------------------------- DUQ

use alkit::duq::{DuqConfig, DuqMlp, Penalty};

#[test]
fn duq_input_gradient_and_penalty_gradients_match_finite_differences_in_f64() {
    // The penalty's parameter gradient needs d/dtheta of grad_x sum_c K_c; alkit writes
    // grad_x explicitly (no candle double backward). Check (1) that explicit gradient against
    // central differences in x, (2) the autograd gradient of BCE + penalty w.r.t. every
    // parameter against central differences of the loss, for each penalty form.
    let mut rng = stream(3, Purpose::Tool, 0);
    let data = alkit::data::moons::moons(12, 0.1, &mut rng).unwrap();
    let x = Tensor::from_vec(
        data.features()
            .iter()
            .map(|&v| f64::from(v))
            .collect::<Vec<_>>(),
        (12, 2),
        &Device::Cpu,
    )
    .unwrap();
    let y = Tensor::from_vec(data.labels().to_vec(), 12, &Device::Cpu).unwrap();
    for penalty in [Penalty::TwoSided, Penalty::Squared, Penalty::OneSided] {
        let cfg = DuqConfig {
            hidden: vec![6, 5],
            centroid_dims: 4,
            sigma: 0.5,
            penalty,
            ..DuqConfig::default()
        };
        let model = DuqMlp::new(
            2,
            2,
            &cfg,
            DType::F64,
            &Device::Cpu,
            stream(4, Purpose::Init, 0),
        )
        .unwrap();
        // (1) grad_x sum_c K_c against central differences.
        let g: Vec<Vec<f64>> = model
            .input_gradient(&model.forward(&x).unwrap())
            .unwrap()
            .to_vec2()
            .unwrap();
        let s = |xv: &Tensor| {
            model
                .forward(xv)
                .unwrap()
                .kernel
                .sum(1)
                .unwrap()
                .to_vec1::<f64>()
                .unwrap()
        };
        for j in 0..2 {
            let mut e = vec![0f64; 24];
            for i in 0..12 {
                e[i * 2 + j] = 1e-6;
            }
            let e = Tensor::from_vec(e, (12, 2), &Device::Cpu).unwrap();
            let (up, down) = (s(&(&x + &e).unwrap()), s(&(&x - &e).unwrap()));
            for i in 0..12 {
                let fd = (up[i] - down[i]) / 2e-6;
                assert!(
                    (fd - g[i][j]).abs() <= 1e-6 * fd.abs().max(1e-3),
                    "dx {i},{j}: {fd} vs {}",
                    g[i][j]
                );
            }
        }
        // (2) parameter gradients of the full loss.
        let loss = || model.loss(&x, &y).unwrap().0;
        let grads = loss().backward().unwrap();
        for v in model.vars() {
            let err = fd_check(
                &v,
                grads.get(&v).unwrap(),
                &|| loss().to_scalar::<f64>().unwrap(),
                10,
            );
            assert!(err < 1e-6, "{penalty:?}: relative error {err}");
        }
    }
}

#[test]
fn cli_surface_writes_png_and_metrics() {
    let out = tmp("surface");
    let o = alkit_cmd()
        .args(["surface", "--model", "duq", "--seed", "1", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("metrics.json")).unwrap()).unwrap();
    assert!(
        m["accuracy"].as_f64().unwrap() > 0.95 && m["auroc_far"].as_f64().unwrap() > 0.9,
        "{m}"
    );
    assert!(std::fs::read(out.join("surface.png"))
        .unwrap()
        .starts_with(b"\x89PNG"));
    let o = alkit_cmd()
        .args(["surface", "--model", "duq", "--scorer", "entropy", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(out);
}

#[test]
fn duq_learns_two_moons() {
    // Short version of the paper's setting (300 points, 10 epochs): well above chance.
    let mut rng = stream(0, Purpose::Tool, 0);
    let train = alkit::data::moons::moons(300, 0.1, &mut rng).unwrap();
    let test = alkit::data::moons::moons(200, 0.1, &mut rng).unwrap();
    let cfg = DuqConfig {
        epochs: 10,
        ..DuqConfig::default()
    };
    let mut model = DuqMlp::new(
        2,
        2,
        &cfg,
        DType::F32,
        &Device::Cpu,
        stream(0, Purpose::Init, 0),
    )
    .unwrap();
    let x = Tensor::from_vec(train.features().to_vec(), (300, 2), &Device::Cpu).unwrap();
    let y = Tensor::from_vec(train.labels().to_vec(), 300, &Device::Cpu).unwrap();
    model
        .fit(&x, &y, &mut stream(0, Purpose::Train, 0))
        .unwrap();
    let xt = Tensor::from_vec(test.features().to_vec(), (200, 2), &Device::Cpu).unwrap();
    let k = model.kernel_values(&xt).unwrap();
    let correct = k
        .chunks(2)
        .zip(test.labels())
        .filter(|(r, &l)| (r[1] > r[0]) as u32 == l)
        .count();
    assert!(correct > 170, "{correct}/200");
}
