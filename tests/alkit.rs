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
    // Every test touches the data or a temporary folder first: keep candle's buffers off mmap.
    alkit::tune_allocator();
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data")
}

fn tmp(name: &str) -> PathBuf {
    alkit::tune_allocator();
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
            ensemble: None,
        },
        scorers: Default::default(),
    }
}

/// A fresh (not resumed) curve run on CPU with no observer.
fn run_small(
    spec: &CurveSpec,
    train: &Dataset,
    test: &Dataset,
    out: &Path,
) -> alkit::Result<Vec<alkit::acquire::RunState>> {
    run_curve(
        spec,
        train,
        test,
        &std_of(),
        out,
        false,
        &Device::Cpu,
        &mut Silent,
    )
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
    run_small(&spec, &train, &test, &a).unwrap();
    run_small(&spec, &train, &test, &b).unwrap();
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
    let e = run_small(&spec, &train, &test, &a).unwrap_err();
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
    assert_eq!(lines.next(), Some("index,id,entropy,margin"));
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), 500);
    for r in &rows {
        let v: Vec<f64> = r.split(',').skip(2).map(|x| x.parse().unwrap()).collect();
        assert!(
            v[0] >= 0.0 && v[0] <= 10f64.ln() + 1e-6 && (0.0..=1.0 + 1e-6).contains(&v[1]),
            "{r}"
        );
    }
    // Two checkpoints (another seed) form an ensemble: BALD over its members lies in
    // [0, ln 10] and is not identically zero (the members disagree somewhere).
    let ck2 = dir.join("ckpt2");
    let o = alkit_cmd()
        .args(["-q", "train", "--steps", "30", "--seed", "1", "--out"])
        .arg(&ck2)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let both = format!("{},{}", ck.display(), ck2.display());
    let o = alkit_cmd()
        .args([
            "score",
            "--split",
            "test",
            "--scorer",
            "bald",
            "--checkpoint",
            &both,
            "--out",
        ])
        .arg(&csv)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let bald: Vec<f64> = std::fs::read_to_string(&csv)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.rsplit(',').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(bald.len(), 500);
    assert!(bald
        .iter()
        .all(|&b| (-1e-6..=10f64.ln() + 1e-6).contains(&b)));
    assert!(bald.iter().any(|&b| b > 1e-3));
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
    let states = run_small(&spec, &train, &test, &out).unwrap();
    let names: Vec<&str> = states.iter().map(|s| s.strategy.as_str()).collect();
    assert_eq!(names, vec!["power-bald", "power-class-variance"]);
    assert!(states.iter().all(|s| s.records.len() == 3));
    let _ = std::fs::remove_dir_all(out);
}

#[test]
fn ensembles_and_batchbald_run_in_the_loop() {
    // A 2-member ensemble each cycle; BALD, class variance and BatchBALD read one draw per
    // member. Labels stay distinct and the ensemble's mean prediction is what is evaluated.
    let (train, test) = normalised();
    let mut spec = small_spec(vec![StrategyKind::BatchBald, StrategyKind::Bald]);
    spec.config.cycles = 2;
    spec.config.ensemble = Some(2);
    spec.scorers.members = true;
    let out = tmp("ensemble-loop");
    let states = run_small(&spec, &train, &test, &out).unwrap();
    for s in &states {
        assert_eq!(s.records.len(), 3);
        let ids: std::collections::HashSet<usize> = s.labeled.iter().map(|l| l.0).collect();
        assert_eq!(ids.len(), s.labeled.len());
    }
    // The ensemble and the members flag must agree.
    spec.scorers.members = false;
    let e = run_curve(
        &spec,
        &train,
        &test,
        &std_of(),
        &tmp("ensemble-loop-bad"),
        false,
        &Device::Cpu,
        &mut Silent,
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Config {
                field: "ensemble",
                ..
            }
        ),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(out);
    // `--select batchbald` turns bald into batchbald and is refused (before anything is
    // written) for a scorer without draws.
    let mut spec = small_spec(vec![StrategyKind::Bald]);
    spec.config.cycles = 1;
    spec.scorers.mc_samples = 4;
    spec.scorers.select = alkit::curve::SelectKind::BatchBald;
    let out = tmp("select-batchbald");
    let states = run_small(&spec, &train, &test, &out).unwrap();
    assert_eq!(states[0].strategy, "batchbald");
    spec.strategies = vec![StrategyKind::Entropy];
    let bad = tmp("select-batchbald-bad");
    let e = run_small(&spec, &train, &test, &bad).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Config {
                field: "select",
                ..
            }
        ),
        "{e}"
    );
    assert!(!bad.join("run.json").exists());
    let _ = std::fs::remove_dir_all(out);
}

#[test]
fn ensemble_predicts_the_mean_of_its_members_probabilities() {
    // log mean_k softmax(z_k), checked against the mean of the members' softmaxes in f64.
    let (train, test) = normalised();
    let arch = Arch::Mlp(MlpConfig {
        inputs: 784,
        hidden: vec![16],
        classes: 10,
        dropout: 0.0,
    });
    let members: Vec<Box<dyn alkit::nn::Classifier>> = (0..3)
        .map(|k| {
            let (vb, _) = seeded(stream(k, Purpose::Init, 0), DType::F32, &Device::Cpu);
            arch.build(vb).unwrap()
        })
        .collect();
    let x = test
        .batch(&(0..8).collect::<Vec<_>>(), &Device::Cpu)
        .unwrap();
    let each: Vec<Vec<f32>> = members
        .iter()
        .map(|m| {
            log_probs(&m.predict(&x).unwrap())
                .unwrap()
                .exp()
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap()
        })
        .collect();
    use alkit::nn::Classifier;
    let ens = alkit::nn::Ensemble::new(members).unwrap();
    let got = log_probs(&ens.predict(&x).unwrap())
        .unwrap()
        .exp()
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    for (i, g) in got.iter().enumerate() {
        let want: f64 = each.iter().map(|e| f64::from(e[i])).sum::<f64>() / 3.0;
        assert!((f64::from(*g) - want).abs() < 1e-6, "{i}: {g} vs {want}");
    }
    let draws = ens.member_logits(&x).unwrap().unwrap();
    assert_eq!(draws.len(), 3);
    let _ = train;
}

// -------------------------------------------------------------------------------- DUQ

use alkit::duq::{DuqConfig, DuqLoss, DuqMlp, DuqSettings, Penalty};

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
            settings: DuqSettings {
                centroid_dims: 4,
                sigma: 0.5,
                penalty,
                ..DuqSettings::default()
            },
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
            .input_gradient(&model.forward(&x, true).unwrap())
            .unwrap()
            .to_vec2()
            .unwrap();
        let s = |xv: &Tensor| {
            model
                .forward(xv, true)
                .unwrap()
                .head
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
        let loss = || model.loss(&x, &y).unwrap().0.total;
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
fn duq_cnn_with_batch_norm_gradients_match_finite_differences_in_f64() {
    // The Fashion-MNIST DUQ model, shrunk (channels 2-3-3, 16x16 images, batch 4), in f64 and
    // training mode: batch norm uses the batch's statistics, so perturbing one pixel of one
    // image moves every image's kernel values. (1) The explicit input gradient of
    // sum_{i,c} K_c(x_i) against central differences in x; (2) the autograd gradient of
    // BCE + two-sided penalty w.r.t. every parameter (convolutions, batch norms, fc, W)
    // against central differences of the loss.
    use alkit::duq::cnn::{DuqCnn, DuqCnnConfig};
    let cfg = DuqCnnConfig {
        channels: [2, 3, 3],
        features: 5,
        settings: DuqSettings {
            centroid_dims: 3,
            sigma: 0.5,
            lambda: 0.7,
            ..DuqCnnConfig::default().settings
        },
    };
    let model = DuqCnn::seeded(
        &[1, 16, 16],
        3,
        &cfg,
        DType::F64,
        &Device::Cpu,
        stream(6, Purpose::Init, 0),
    )
    .unwrap();
    let x = randn64(&[4, 1, 16, 16], 11);
    let y = Tensor::from_vec(vec![0u32, 2, 1, 2], 4, &Device::Cpu).unwrap();
    let g = model
        .input_gradient(&model.forward(&x, true).unwrap())
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f64>()
        .unwrap();
    let total = |xv: &Tensor| {
        model
            .forward(xv, true)
            .unwrap()
            .head
            .kernel
            .sum_all()
            .unwrap()
            .to_scalar::<f64>()
            .unwrap()
    };
    let xs = x.flatten_all().unwrap().to_vec1::<f64>().unwrap();
    let mut rng = stream(7, Purpose::Tool, 0);
    for _ in 0..24 {
        let k = (rand::Rng::random::<u64>(&mut rng) % xs.len() as u64) as usize;
        let bump = |d: f64| {
            let mut v = xs.clone();
            v[k] += d;
            Tensor::from_vec(v, (4, 1, 16, 16), &Device::Cpu).unwrap()
        };
        let fd = (total(&bump(1e-6)) - total(&bump(-1e-6))) / 2e-6;
        assert!(
            (fd - g[k]).abs() <= 1e-6 * fd.abs().max(1e-3),
            "dx[{k}]: {fd} vs {}",
            g[k]
        );
    }
    let loss = || model.loss(&x, &y).unwrap().0.total;
    let grads = loss().backward().unwrap();
    let mut checked = 0;
    for (name, v) in model.params().named() {
        if name.contains("running_") || name == "head.m" || name == "head.counts" {
            // Buffers: updated by statistics, not by gradient.
            assert!(grads.get(&v).is_none(), "{name} got a gradient");
            continue;
        }
        let err = fd_check(
            &v,
            grads
                .get(&v)
                .unwrap_or_else(|| panic!("{name} has no gradient")),
            &|| loss().to_scalar::<f64>().unwrap(),
            8,
        );
        assert!(err < 1e-5, "{name}: relative error {err}");
        checked += 1;
    }
    // 3 x (conv weight, bias, bn weight, bias) + fc1 weight, bias + head weight.
    assert_eq!(checked, 15);
}

/// The same seeded, scaled-down Fashion-MNIST DUQ model (channels 16/8/8, 6 features, input
/// 20x20, 3 classes) in f64, on the fused CPU path and on the candle-op composition.
fn small_duq_cnns(settings: DuqSettings) -> (alkit::duq::cnn::DuqCnn, alkit::duq::cnn::DuqCnn) {
    use alkit::duq::cnn::{DuqCnn, DuqCnnConfig};
    let cfg = DuqCnnConfig {
        channels: [16, 8, 8],
        features: 6,
        settings,
    };
    let make = |fused: bool| {
        let mut m = DuqCnn::seeded(
            &[1, 20, 20],
            3,
            &cfg,
            DType::F64,
            &Device::Cpu,
            stream(9, Purpose::Init, 0),
        )
        .unwrap();
        m.set_fused(fused);
        m
    };
    (make(true), make(false))
}

/// `max |a - b| / max |b|` (f64 tensors).
fn rel_max(a: &Tensor, b: &Tensor) -> f64 {
    let d = (a - b).unwrap().abs().unwrap().max_all().unwrap();
    let m = b.abs().unwrap().max_all().unwrap();
    d.to_scalar::<f64>().unwrap() / m.to_scalar::<f64>().unwrap().max(1e-12)
}

/// One SGD step of both models on `(x, y)`; their parameters and state then agree to 1e-9.
fn assert_same_state_after_a_step(
    a: &mut alkit::duq::cnn::DuqCnn,
    b: &mut alkit::duq::cnn::DuqCnn,
    x: &Tensor,
    y: &Tensor,
) {
    use alkit::duq::Sgd;
    let mut sa = Sgd::new(a.vars(), 0.05, 0.9, 1e-4);
    let mut sb = Sgd::new(b.vars(), 0.05, 0.9, 1e-4);
    a.step(&mut sa, x, y).unwrap();
    b.step(&mut sb, x, y).unwrap();
    let (ta, tb) = (a.state().unwrap(), b.state().unwrap());
    for ((name, u), (_, v)) in ta.named().into_iter().zip(tb.named()) {
        let e = rel_max(u.as_tensor(), v.as_tensor());
        assert!(e < 1e-9, "{name} after a step: {e}");
    }
}

#[test]
fn duq_cnn_fused_cpu_kernels_match_the_candle_op_composition_in_f64() {
    // Reference: the same seeded model with `set_fused(false)`, i.e. the composition of candle
    // ops that other devices run (itself checked against finite differences above). In f64,
    // with the paper's channel counts scaled down and odd sizes after the second pool: the loss,
    // every parameter gradient of BCE + penalty, the training-mode input gradient, the running
    // statistics after a step, and eval-mode kernel values (batch norm folded into the
    // convolution) agree to 1e-9 relative.
    let (mut fused, mut composed) = small_duq_cnns(DuqSettings {
        centroid_dims: 4,
        sigma: 0.5,
        lambda: 0.7,
        ..alkit::duq::cnn::DuqCnnConfig::default().settings
    });
    let x = randn64(&[6, 1, 20, 20], 21);
    let y = Tensor::from_vec(vec![0u32, 2, 1, 2, 0, 1], 6, &Device::Cpu).unwrap();
    let rel = rel_max;
    let (DuqLoss { total: lf, .. }, of) = fused.loss(&x, &y).unwrap();
    let (DuqLoss { total: lc, .. }, oc) = composed.loss(&x, &y).unwrap();
    assert!(rel(&lf, &lc) < 1e-12, "loss");
    let gi = rel(
        &fused.input_gradient(&of).unwrap(),
        &composed.input_gradient(&oc).unwrap(),
    );
    assert!(gi < 1e-9, "input gradient: {gi}");
    let (gf, gc) = (lf.backward().unwrap(), lc.backward().unwrap());
    let mut checked = 0;
    for ((name, vf), (_, vc)) in fused
        .params()
        .named()
        .into_iter()
        .zip(composed.params().named())
    {
        match (gf.get(&vf), gc.get(&vc)) {
            (Some(a), Some(b)) => {
                let e = if name.ends_with("conv.bias") {
                    // Zero in training-mode batch norm: exactly (fused) vs rounding (composed).
                    b.abs()
                        .unwrap()
                        .max_all()
                        .unwrap()
                        .to_scalar::<f64>()
                        .unwrap()
                        + a.abs()
                            .unwrap()
                            .max_all()
                            .unwrap()
                            .to_scalar::<f64>()
                            .unwrap()
                } else {
                    rel(a, b)
                };
                assert!(e < 1e-9, "{name}: {e}");
                checked += 1;
            }
            (None, None) => {}
            _ => panic!("{name}: gradient in one path only"),
        }
    }
    assert_eq!(checked, 15);
    assert_same_state_after_a_step(&mut fused, &mut composed, &x, &y);
    let kf = fused.kernel_values(&x).unwrap();
    let kc = composed.kernel_values(&x).unwrap();
    for (a, b) in kf.iter().zip(&kc) {
        assert!(
            (a - b).abs() <= 1e-6 * b.abs().max(1e-3),
            "eval K: {a} vs {b}"
        );
    }
}

#[test]
fn duq_cnn_without_penalty_runs_the_blocks_as_one_op_with_the_same_gradients() {
    // Without a penalty, `Duq::loss` asks the extractor for `forward_without_input_gradient`:
    // on the CPU the three blocks (convolution, batch norm, ReLU, pool each) are then one op,
    // their intermediates kept out of candle's graph. References, in f64: the same model's
    // full training graph (`Duq::forward` + `bce`, the graph the penalty differentiates
    // through), which runs the same kernels, so the loss and every parameter gradient must
    // agree exactly; and the composition of candle ops (`set_fused(false)`, checked against
    // finite differences above) to 1e-9, the parameters and running statistics after a step
    // included. The cache of such a forward has no input gradient: asking for one is an error.
    use alkit::duq::bce;
    let (mut fused, mut composed) = small_duq_cnns(DuqSettings {
        centroid_dims: 4,
        sigma: 0.5,
        lambda: 0.0,
        penalty: Penalty::None,
        ..alkit::duq::cnn::DuqCnnConfig::default().settings
    });
    let x = randn64(&[6, 1, 20, 20], 22);
    let y = Tensor::from_vec(vec![0u32, 2, 1, 2, 0, 1], 6, &Device::Cpu).unwrap();
    let rel = rel_max;
    let (DuqLoss { total: lf, .. }, out) = fused.loss(&x, &y).unwrap();
    assert!(fused.input_gradient(&out).is_err());
    let full = bce(&fused.forward(&x, true).unwrap().head, &y, 3).unwrap();
    let (DuqLoss { total: lc, .. }, _) = composed.loss(&x, &y).unwrap();
    assert_eq!(
        lf.to_scalar::<f64>().unwrap(),
        full.to_scalar::<f64>().unwrap()
    );
    assert!(rel(&lf, &lc) < 1e-12, "loss");
    let (gf, gfull, gc) = (
        lf.backward().unwrap(),
        full.backward().unwrap(),
        lc.backward().unwrap(),
    );
    let mut checked = 0;
    for ((name, vf), (_, vc)) in fused
        .params()
        .named()
        .into_iter()
        .zip(composed.params().named())
    {
        let (Some(a), Some(b), Some(c)) = (gf.get(&vf), gfull.get(&vf), gc.get(&vc)) else {
            assert!(gf.get(&vf).is_none() && gc.get(&vc).is_none(), "{name}");
            continue;
        };
        assert_eq!(
            a.flatten_all().unwrap().to_vec1::<f64>().unwrap(),
            b.flatten_all().unwrap().to_vec1::<f64>().unwrap(),
            "{name}: one op per block vs the full graph"
        );
        if !name.ends_with("conv.bias") {
            // (zero in training-mode batch norm, to rounding in the composition)
            assert!(rel(a, c) < 1e-9, "{name}: {}", rel(a, c));
        }
        checked += 1;
    }
    assert_eq!(checked, 15);
    assert_same_state_after_a_step(&mut fused, &mut composed, &x, &y);
}

#[test]
fn duq_cnn_trains_in_the_loop_and_round_trips_through_a_checkpoint() {
    // `alkit train --model duq` writes a checkpoint (weights, batch-norm running statistics
    // and centroid state); `alkit score --scorer duq` reads 1 - max K from it; the library's
    // model and the reloaded one give identical kernel values; and the acquisition loop runs
    // DUQ with the `duq` scorer.
    let dir = tmp("duq-cli");
    let ck = dir.join("ck");
    let o = alkit_cmd()
        .args(["-q", "train", "--model", "duq", "--steps", "4", "--out"])
        .arg(&ck)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let csv = dir.join("s.csv");
    let o = alkit_cmd()
        .args([
            "score",
            "--split",
            "test",
            "--scorer",
            "duq,entropy",
            "--checkpoint",
        ])
        .arg(&ck)
        .arg("--out")
        .arg(&csv)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rows: Vec<Vec<f64>> = std::fs::read_to_string(&csv)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.split(',').skip(2).map(|v| v.parse().unwrap()).collect())
        .collect();
    assert_eq!(rows.len(), 500);
    assert!(rows.iter().all(|r| (0.0..=1.0).contains(&r[0])));
    // Save/load in-process: identical kernel values, running statistics included.
    let (train, test) = normalised();
    let arch = alkit::duq::cnn::DuqCnnArch {
        item_shape: [1, 28, 28],
        classes: 10,
        duq: alkit::duq::cnn::DuqCnnConfig {
            channels: [4, 8, 8],
            features: 16,
            settings: DuqSettings {
                centroid_dims: 8,
                ..alkit::duq::cnn::DuqCnnConfig::default().settings
            },
        },
    };
    let trained = alkit::train::train(
        &Arch::Duq(arch.clone()),
        &train,
        &(0..64).collect::<Vec<_>>(),
        &TrainConfig {
            steps: 3,
            batch_size: 32,
            ..TrainConfig::default()
        }
        .validate()
        .unwrap(),
        alkit::train::TrainRngs::for_cycle(0, 0),
        &Device::Cpu,
        &mut Silent,
    )
    .unwrap();
    let norm = Normalizer::fit(&train);
    let ck2 = dir.join("ck2");
    alkit::checkpoint::save(
        &ck2,
        &Arch::Duq(arch),
        &trained.params,
        &norm,
        &[1, 28, 28],
        (0..10).map(|c| c.to_string()).collect(),
    )
    .unwrap();
    let loaded = alkit::checkpoint::load(&ck2, &Device::Cpu).unwrap();
    let x = test
        .batch(&(0..8).collect::<Vec<_>>(), &Device::Cpu)
        .unwrap();
    let a = trained.model.kernel_values(&x).unwrap().unwrap();
    let b = loaded.model.kernel_values(&x).unwrap().unwrap();
    assert_eq!(
        a.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
        b.flatten_all().unwrap().to_vec1::<f32>().unwrap()
    );
    let out = dir.join("curve");
    let o = alkit_cmd()
        .args([
            "-q", "curve", "--model", "duq", "--scorer", "duq", "--cycles", "1", "--steps", "3",
            "--query", "5", "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(std::fs::read_to_string(out.join("curve.csv"))
        .unwrap()
        .contains("duq,"));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn cli_ood_keeps_the_model_it_trained_and_reuses_it() {
    // `alkit ood` trains, saves the model to OUT/model before scoring, and the same command
    // with `--checkpoint OUT/model` evaluates that model without training: same accuracy and
    // the same metrics.
    let out = tmp("ood-keep");
    let run = |extra: &[&str], dir: &Path| {
        let o = alkit_cmd()
            .args([
                "ood",
                "--train-data",
                "data",
                "--ood-data",
                "data",
                "--steps",
                "20",
            ])
            .args(["--scorer", "entropy", "--quiet"])
            .args(extra)
            .arg("--out")
            .arg(dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        (
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .to_string(),
            std::fs::read_to_string(dir.join("metrics.json")).unwrap(),
        )
    };
    let first = run(&[], &out.join("a"));
    assert!(out.join("a/model/config.json").exists());
    let ck = out.join("a/model");
    let second = run(&["--checkpoint", ck.to_str().unwrap()], &out.join("b"));
    assert_eq!(first, second);
    let _ = std::fs::remove_dir_all(out);
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
    // --seeds: one folder per seed and a CSV whose rows are those folders' metrics.
    let many = out.join("many");
    let o = alkit_cmd()
        .args([
            "surface", "--model", "duq", "--points", "300", "--seed", "2",
        ])
        .args(["--seeds", "2", "--out"])
        .arg(&many)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("2 seeds (2..3): accuracy median"));
    let csv = std::fs::read_to_string(many.join("seeds.csv")).unwrap();
    let rows: Vec<&str> = csv.lines().skip(1).collect();
    assert_eq!(rows.len(), 2, "{csv}");
    for (row, seed) in rows.iter().zip([2, 3]) {
        let m: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(many.join(format!("seed{seed}/metrics.json"))).unwrap(),
        )
        .unwrap();
        let f: Vec<f64> = row.split(',').map(|v| v.parse().unwrap()).collect();
        let want = [
            f64::from(seed),
            m["accuracy"].as_f64().unwrap(),
            m["auroc_far"].as_f64().unwrap(),
        ];
        assert_eq!(f, want, "{row}");
    }
    let _ = std::fs::remove_dir_all(out);
}

/// How many rows of two-class kernel values `k (n, 2)` pick the label (ties count as class 0).
fn two_class_correct(k: &[f32], labels: &[u32]) -> usize {
    k.chunks(2)
        .zip(labels)
        .filter(|(r, &l)| u32::from(r[1] > r[0]) == l)
        .count()
}

#[test]
fn duq_learns_two_moons() {
    // Small version of the paper's setting (300 points, its 30 epochs of 4 full batches):
    // well above chance.
    let mut rng = stream(0, Purpose::Tool, 0);
    let train = alkit::data::moons::moons(300, 0.1, &mut rng).unwrap();
    let test = alkit::data::moons::moons(200, 0.1, &mut rng).unwrap();
    let cfg = DuqConfig::default();
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
        .fit(&x, &y, &mut stream(0, Purpose::Train, 0), &mut Silent)
        .unwrap();
    let xt = Tensor::from_vec(test.features().to_vec(), (200, 2), &Device::Cpu).unwrap();
    let k = model.kernel_values(&xt).unwrap();
    let correct = two_class_correct(&k, test.labels());
    assert!(correct > 170, "{correct}/200");
}

/// A user's feature extractor for DUQ, written only against the public trait: two tanh layers
/// `2 -> 12 -> 8`. `Bug` plants the two mistakes a hand-written input gradient can make.
struct TanhNet {
    l1: candle_nn::Linear,
    l2: candle_nn::Linear,
    params: alkit::nn::init::Params,
    bug: Bug,
}

#[derive(Clone, Copy, PartialEq)]
enum Bug {
    None,
    /// Drops the `1 - t^2` factor of the first layer: a wrong gradient.
    MissingFactor,
    /// Uses `W2.detach()`: the right values, but no second-order path to `W2`.
    Detached,
}

impl TanhNet {
    fn new(dtype: DType, seed: u64, bug: Bug) -> TanhNet {
        let (vb, params) = seeded(stream(seed, Purpose::Init, 7), dtype, &Device::Cpu);
        TanhNet {
            l1: candle_nn::linear(2, 12, vb.pp("l1")).unwrap(),
            l2: candle_nn::linear(12, 8, vb.pp("l2")).unwrap(),
            params,
            bug,
        }
    }
}

impl alkit::duq::Extractor for TanhNet {
    /// `(t1, t2)`: both layers' outputs.
    type Cache = (Tensor, Tensor);
    fn features(&self) -> usize {
        8
    }
    fn forward(&self, x: &Tensor, _train: bool) -> alkit::Result<(Tensor, Self::Cache)> {
        use candle_core::Module;
        let t1 = self.l1.forward(x)?.tanh()?;
        let t2 = self.l2.forward(&t1)?.tanh()?;
        Ok((t2.clone(), (t1, t2)))
    }
    fn input_gradient(&self, v: &Tensor, (t1, t2): &Self::Cache) -> alkit::Result<Tensor> {
        let dtanh = |t: &Tensor| -> candle_core::Result<Tensor> { 1.0 - t.sqr()? };
        let w2 = match self.bug {
            Bug::Detached => self.l2.weight().detach(),
            _ => self.l2.weight().clone(),
        };
        let g = (v * dtanh(t2)?)?.matmul(&w2)?;
        let g = match self.bug {
            Bug::MissingFactor => g,
            _ => (g * dtanh(t1)?)?,
        };
        Ok(g.matmul(self.l1.weight())?)
    }
    fn vars(&self) -> Vec<Var> {
        self.params.vars()
    }
}

#[test]
fn duq_trains_a_users_extractor_and_its_gradient_checks_catch_mistakes() {
    use alkit::duq::{check_input_gradient, Duq, Extractor};
    let mut rng = stream(5, Purpose::Tool, 0);
    let data = alkit::data::moons::moons(16, 0.1, &mut rng).unwrap();
    let x = Tensor::from_vec(data.features().to_vec(), (16, 2), &Device::Cpu)
        .unwrap()
        .to_dtype(DType::F64)
        .unwrap();
    let y = Tensor::from_vec(data.labels().to_vec(), 16, &Device::Cpu).unwrap();
    let v = randn64(&[16, 8], 11);
    // (1) The input gradient against candle's first-order autodiff, in f64: ~1e-16 when
    // right; dropping one tanh derivative is caught; a detached weight is not (same values).
    let check =
        |bug| check_input_gradient(&TanhNet::new(DType::F64, 1, bug), &x, &v, true).unwrap();
    let (right, missing, detached) = (
        check(Bug::None),
        check(Bug::MissingFactor),
        check(Bug::Detached),
    );
    assert!(right < 1e-12, "{right}");
    assert!(missing > 1e-2, "{missing}");
    assert!(detached < 1e-12, "{detached}");
    // The check itself against an independent reference: central differences of
    // sum(f(x) * v) in x for one coordinate.
    let net = TanhNet::new(DType::F64, 1, Bug::None);
    let (_, cache) = net.forward(&x, true).unwrap();
    let g: Vec<Vec<f64>> = net.input_gradient(&v, &cache).unwrap().to_vec2().unwrap();
    let s = |xv: &Tensor| {
        (net.forward(xv, true).unwrap().0 * &v)
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar::<f64>()
            .unwrap()
    };
    let mut e = vec![0f64; 32];
    e[2 * 3 + 1] = 1e-6;
    let e = Tensor::from_vec(e, (16, 2), &Device::Cpu).unwrap();
    let fd = (s(&(&x + &e).unwrap()) - s(&(&x - &e).unwrap())) / 2e-6;
    assert!(
        (fd - g[3][1]).abs() < 1e-7 * fd.abs().max(1.0),
        "{fd} vs {}",
        g[3][1]
    );
    // (2) The parameter gradients of BCE + penalty against central differences: the detached
    // weight, invisible to (1), loses the penalty's second-order term and is caught here.
    let settings = DuqSettings {
        centroid_dims: 4,
        sigma: 0.5,
        lambda: 0.8,
        ..DuqSettings::default()
    };
    let param_err = |bug| {
        let model = Duq::from_extractor(
            TanhNet::new(DType::F64, 2, bug),
            2,
            &settings,
            (DType::F64, &Device::Cpu),
            &mut stream(2, Purpose::Init, 0),
        )
        .unwrap();
        model.check_parameter_gradients(&x, &y, 1e-6, 6).unwrap()
    };
    let (right, detached) = (param_err(Bug::None), param_err(Bug::Detached));
    assert!(right < 1e-6, "{right}");
    assert!(detached > 1e-2, "{detached}");
    // Settings are validated once, naming the field.
    let bad = DuqSettings {
        gamma: 1.0,
        ..DuqSettings::default()
    };
    let err = Duq::from_extractor(
        TanhNet::new(DType::F32, 3, Bug::None),
        2,
        &bad,
        (DType::F32, &Device::Cpu),
        &mut stream(3, Purpose::Init, 0),
    )
    .err()
    .unwrap();
    assert!(err.to_string().contains("gamma"), "{err}");
    // (3) It trains like the built-in models (300 moons, the paper's two-moons settings) and
    // plugs into the scorers through `Classifier`: the `duq` evidence is its kernel values.
    let train = alkit::data::moons::moons(300, 0.1, &mut rng).unwrap();
    let test = alkit::data::moons::moons(200, 0.1, &mut rng).unwrap();
    let mut model = Duq::from_extractor(
        TanhNet::new(DType::F32, 4, Bug::None),
        2,
        &DuqSettings::default(),
        (DType::F32, &Device::Cpu),
        &mut stream(4, Purpose::Init, 0),
    )
    .unwrap();
    let xt = Tensor::from_vec(train.features().to_vec(), (300, 2), &Device::Cpu).unwrap();
    let yt = Tensor::from_vec(train.labels().to_vec(), 300, &Device::Cpu).unwrap();
    let mut steps = 0;
    let mut count = |e: &Event<'_>| {
        if let Event::TrainStep {
            step, steps: all, ..
        } = e
        {
            assert_eq!(*all, 30 * 4);
            steps = *step;
        }
        Control::Continue
    };
    struct Count<'a>(&'a mut dyn FnMut(&Event<'_>) -> Control);
    impl Observer for Count<'_> {
        fn on(&mut self, e: &Event<'_>) -> Control {
            (self.0)(e)
        }
    }
    model
        .fit(
            &xt,
            &yt,
            &mut stream(4, Purpose::Train, 0),
            &mut Count(&mut count),
        )
        .unwrap();
    assert_eq!(steps, 120);
    let xs = Tensor::from_vec(test.features().to_vec(), (200, 2), &Device::Cpu).unwrap();
    let k = model.kernel_values(&xs).unwrap();
    let correct = two_class_correct(&k, test.labels());
    assert!(correct > 170, "{correct}/200");
    let boxed: Box<dyn alkit::nn::Classifier> = Box::new(model);
    let via_trait: Vec<f32> = boxed
        .kernel_values(&xs)
        .unwrap()
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    assert_eq!(via_trait, k);
}

// ------------------------------------------------------------------ real use: sources, hub, sessions

use alkit::data::image::write_image_folder;
use alkit::data::source::{load as load_source, Source};
use alkit::hub::{Hub, HubRepo, RepoKind};
use alkit::session::{Learner, QueryRequest, SessionConfig, SessionState};

/// The shipped IDX items' labels and `[0, 1]` pixels, for comparisons.
fn shipped() -> (Dataset, Dataset) {
    let s = load_idx_dir(&data_dir()).unwrap();
    (s.train, s.test)
}

/// Lays out `files` (repository path -> local file) as the hub cache does:
/// `CACHE/{kind}s--OWNER--NAME/refs/main` holding a commit, the files under
/// `snapshots/COMMIT/` (real caches symlink them to `blobs/`; copies read the same).
fn fake_hub_cache(cache: &Path, folder: &str, files: &[(&str, PathBuf)]) {
    let commit = "0123456789abcdef0123456789abcdef01234567";
    let base = cache.join(folder);
    std::fs::create_dir_all(base.join("refs")).unwrap();
    std::fs::write(base.join("refs/main"), commit).unwrap();
    for (rel, src) in files {
        let dst = base.join("snapshots").join(commit).join(rel);
        std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
        std::fs::copy(src, &dst).unwrap();
    }
}

#[test]
fn hub_dataset_and_checkpoint_load_offline_from_a_local_cache() {
    // The fixture is MNIST as `datasets` publishes it (Parquet, PNG bytes written by Pillow and
    // pyarrow: tests/fixtures/make_hub_fixture.py); decoding must give back exactly the IDX
    // pixels and labels of the same items.
    let dir = tmp("hub");
    let cache = dir.join("hub");
    let fx = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hub-mnist");
    fake_hub_cache(
        &cache,
        "datasets--ylecun--mnist",
        &[
            ("README.md", fx.join("README.md")),
            (
                "mnist/train-00000-of-00001.parquet",
                fx.join("train-00000-of-00001.parquet"),
            ),
            (
                "mnist/test-00000-of-00001.parquet",
                fx.join("test-00000-of-00001.parquet"),
            ),
        ],
    );
    let hub = Hub::new(&cache, true);
    let src = Source::parse("hf:ylecun/mnist").unwrap();
    let loaded = load_source(&src, &hub, &mut Silent).unwrap();
    let (train, test) = shipped();
    let test_items = loaded.test.as_ref().unwrap();
    assert_eq!((loaded.pool.len(), test_items.len()), (64, 16));
    assert_eq!(loaded.pool.item_shape, vec![1, 28, 28]);
    assert_eq!(loaded.pool.classes.len(), 10);
    assert_eq!(&loaded.pool.x[..], &train.features()[..64 * 784]);
    assert_eq!(&test_items.x[..], &test.features()[..16 * 784]);
    let labels: Vec<u32> = loaded.pool.labels.iter().map(|l| l.unwrap()).collect();
    assert_eq!(&labels[..], &train.labels()[..64]);

    // A model repository: `alkit train`'s checkpoint files, fetched through the same cache.
    let ck = dir.join("ck");
    let o = alkit_cmd()
        .args(["-q", "train", "--steps", "20", "--out"])
        .arg(&ck)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    fake_hub_cache(
        &cache,
        "models--alkit--mnist-cnn",
        &[
            ("config.json", ck.join("config.json")),
            ("model.safetensors", ck.join("model.safetensors")),
        ],
    );
    let repo = HubRepo::parse("alkit/mnist-cnn").unwrap();
    let p = hub
        .get(&repo, RepoKind::Model, "config.json", &mut Silent)
        .unwrap();
    assert!(p.starts_with(&cache));
    // Offline, a missing file is an error naming the file and the cache, never a download.
    let e = hub
        .get(&repo, RepoKind::Model, "absent.bin", &mut Silent)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("absent.bin") && e.contains("HF_HUB_OFFLINE"),
        "{e}"
    );

    // The CLI, offline, scores the Hub dataset with the Hub checkpoint: the same numbers as
    // with the local checkpoint on the local IDX items.
    let run = |ck: &str, data: &str, out: &Path| {
        let o = alkit_cmd()
            .env("HF_HUB_CACHE", &cache)
            .env("HF_HUB_OFFLINE", "1")
            // Batches of 16 on both sides: the same batch shapes, so the same kernels and
            // bit-identical numbers (a batch of 500 may round the last bit differently).
            .args([
                "score",
                "--scorer",
                "entropy",
                "--split",
                "test",
                "--batch",
                "16",
                "--checkpoint",
                ck,
                "--data",
                data,
                "--out",
            ])
            .arg(out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        std::fs::read_to_string(out).unwrap()
    };
    let hub_scores = run("hf:alkit/mnist-cnn", "hf:ylecun/mnist", &dir.join("a.csv"));
    let local = run(&ck.to_string_lossy(), "data", &dir.join("b.csv"));
    let local_head: Vec<&str> = local.lines().take(17).collect();
    assert_eq!(hub_scores.lines().collect::<Vec<_>>(), local_head);
    // An unknown repository, offline: exit 1 and a message naming it.
    let o = alkit_cmd()
        .env("HF_HUB_CACHE", &cache)
        .env("HF_HUB_OFFLINE", "1")
        .args([
            "score",
            "--checkpoint",
            "hf:alkit/mnist-cnn",
            "--data",
            "hf:nobody/nothing",
            "--out",
        ])
        .arg(dir.join("c.csv"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("hf:nobody/nothing"));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn pool_sources_give_stable_ids_and_the_same_pixels() {
    let dir = tmp("sources");
    let (train, _) = shipped();
    // Image folder: two labeled (class subfolders, one of them empty), three unlabeled.
    let items: Vec<(usize, Option<String>)> = vec![
        (0, Some(train.labels()[0].to_string())),
        (1, None),
        (2, None),
        (3, Some(train.labels()[3].to_string())),
        (4, None),
    ];
    let folder = dir.join("pool");
    let ids = write_image_folder(&folder, &train, &items).unwrap();
    std::fs::create_dir_all(folder.join("zz-empty")).unwrap();
    let src = Source::parse(&folder.to_string_lossy()).unwrap();
    assert!(matches!(src, Source::Images(_)) && src.labels_are_given());
    let hub = Hub::new(dir.join("nohub"), true);
    let a = load_source(&src, &hub, &mut Silent).unwrap().pool;
    // Ids are relative paths in sorted order, and loading twice gives the same order.
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(a.ids, sorted);
    assert_eq!(
        load_source(&src, &hub, &mut Silent).unwrap().pool.ids,
        a.ids
    );
    assert!(a.classes.contains(&"zz-empty".to_string()));
    for (k, id) in a.ids.iter().enumerate() {
        let i: usize = id.rsplit('/').next().unwrap()[..5].parse().unwrap();
        assert_eq!(&a.x[k * 784..(k + 1) * 784], train.item(i), "{id}");
        let given = a.labels[k].map(|c| a.classes[c as usize].clone());
        assert_eq!(given, items.iter().find(|t| t.0 == i).unwrap().1, "{id}");
    }

    // safetensors: x as u8 (n, h, w), y as i64; metadata names the classes.
    let n = 6;
    let x_u8: Vec<u8> = train.features()[..n * 784]
        .iter()
        .map(|v| (v * 255.0).round() as u8)
        .collect();
    let y: Vec<i64> = train.labels()[..n].iter().map(|&l| i64::from(l)).collect();
    let xt = Tensor::from_vec(x_u8, (n, 28, 28), &Device::Cpu).unwrap();
    let yt = Tensor::from_vec(y, n, &Device::Cpu).unwrap();
    let st = dir.join("pool.safetensors");
    let map: std::collections::HashMap<String, Tensor> =
        [("x".to_string(), xt), ("y".to_string(), yt)]
            .into_iter()
            .collect();
    let meta: std::collections::HashMap<String, String> = [(
        "classes".to_string(),
        "zero,one,two,three,four,five,six,seven,eight,nine".to_string(),
    )]
    .into_iter()
    .collect();
    safetensors::serialize_to_file(
        map.iter().map(|(k, v)| (k.as_str(), SafeView(v))),
        Some(meta),
        &st,
    )
    .unwrap();
    let b = load_source(
        &Source::parse(&st.to_string_lossy()).unwrap(),
        &hub,
        &mut Silent,
    )
    .unwrap()
    .pool;
    assert_eq!(b.item_shape, vec![1, 28, 28]);
    assert_eq!(&b.x[..], &train.features()[..n * 784]);
    assert_eq!(b.ids, (0..n).map(|i| i.to_string()).collect::<Vec<_>>());
    assert_eq!(
        b.classes[train.labels()[0] as usize],
        ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
            [train.labels()[0] as usize]
    );

    // CSV: ids from the `id` column, empty label = unlabeled, bad numbers name the line.
    let csv = dir.join("t.csv");
    std::fs::write(
        &csv,
        "id,f1,label,f2\nr7,0.5,cat,1\nr9,-2,,3e-1\nr1,4,dog,0\n",
    )
    .unwrap();
    let c = load_source(
        &Source::parse(&csv.to_string_lossy()).unwrap(),
        &hub,
        &mut Silent,
    )
    .unwrap()
    .pool;
    assert_eq!(c.ids, vec!["r7", "r9", "r1"]);
    assert_eq!(c.x, vec![0.5, 1.0, -2.0, 0.3, 4.0, 0.0]);
    assert_eq!(c.classes, vec!["cat", "dog"]);
    assert_eq!(c.labels, vec![Some(0), None, Some(1)]);
    std::fs::write(&csv, "id,f1\na,1\nb,x\n").unwrap();
    let e = load_source(
        &Source::parse(&csv.to_string_lossy()).unwrap(),
        &hub,
        &mut Silent,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("t.csv:3") && e.contains("`x`"), "{e}");
    let _ = std::fs::remove_dir_all(dir);
}

/// safetensors' serializer wants a `View`; candle tensors on CPU expose their bytes.
struct SafeView<'a>(&'a Tensor);

impl safetensors::View for SafeView<'_> {
    fn dtype(&self) -> safetensors::Dtype {
        match self.0.dtype() {
            DType::U8 => safetensors::Dtype::U8,
            DType::I64 => safetensors::Dtype::I64,
            _ => safetensors::Dtype::F32,
        }
    }
    fn shape(&self) -> &[usize] {
        self.0.dims()
    }
    fn data(&self) -> std::borrow::Cow<'_, [u8]> {
        let bytes: Vec<u8> = match self.0.dtype() {
            DType::U8 => self.0.flatten_all().unwrap().to_vec1::<u8>().unwrap(),
            DType::I64 => self
                .0
                .flatten_all()
                .unwrap()
                .to_vec1::<i64>()
                .unwrap()
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect(),
            _ => unreachable!("only u8 and i64 here"),
        };
        bytes.into()
    }
    fn data_len(&self) -> usize {
        self.data().len()
    }
}

fn read_batch(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.split(',').next().unwrap().to_string())
        .collect()
}

#[test]
fn scripted_png_session_matches_the_library_session_and_bad_rows_change_nothing() {
    let dir = tmp("session");
    let (train, _) = shipped();
    // 200 PNGs from data/: the first 20 labeled (class subfolders), the rest unlabeled.
    let items: Vec<(usize, Option<String>)> = (0..200)
        .map(|i| (i, (i < 20).then(|| train.labels()[i].to_string())))
        .collect();
    let pool = dir.join("pool");
    let ids = write_image_folder(&pool, &train, &items).unwrap();
    let truth: std::collections::HashMap<String, String> = ids
        .iter()
        .zip(&items)
        .map(|(id, (i, _))| (id.clone(), train.labels()[*i].to_string()))
        .collect();
    let classes = "0,1,2,3,4,5,6,7,8,9";
    let state = dir.join("state");
    let cli = |args: &[&str]| {
        let o = alkit_cmd().arg("-q").args(args).output().unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let s = state.to_string_lossy().into_owned();
    let (code, err) = cli(&[
        "init",
        "--pool",
        &pool.to_string_lossy(),
        "--state",
        &s,
        "--classes",
        classes,
        "--steps",
        "60",
        "--seed",
        "7",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let mut asked: Vec<String> = Vec::new();
    for round in 1..=3 {
        let batch = dir.join(format!("batch{round}.csv"));
        let (code, err) = cli(&[
            "query",
            "--state",
            &s,
            "--scorer",
            "entropy",
            "--n",
            "20",
            "--out",
            &batch.to_string_lossy(),
        ]);
        assert_eq!(code, Some(0), "{err}");
        let got = read_batch(&batch);
        assert_eq!(got.len(), 20);
        for id in &got {
            assert!(!asked.contains(id), "{id} queried twice");
            assert!(!id.contains('/'), "{id} was labeled at init");
        }
        asked.extend(got.iter().cloned());
        if round == 2 {
            // One bad row (an id outside the pool) among good ones: exit 1, the file and
            // line named, the state byte-for-byte unchanged.
            let before = std::fs::read(state.join("session.json")).unwrap();
            let bad = dir.join("bad.csv");
            let mut text = String::from("id,label\n");
            for id in &got[..2] {
                text.push_str(&format!("{id},{}\n", truth[id]));
            }
            text.push_str("no-such-item.png,3\n");
            std::fs::write(&bad, text).unwrap();
            let (code, err) = cli(&["teach", "--state", &s, "--labels", &bad.to_string_lossy()]);
            assert_eq!(code, Some(1));
            assert!(
                err.contains("bad.csv:4") && err.contains("no-such-item.png"),
                "{err}"
            );
            assert_eq!(std::fs::read(state.join("session.json")).unwrap(), before);
            // A label outside the class list, and a duplicate row, are refused the same way.
            std::fs::write(&bad, format!("id,label\n{},ten\n", got[0])).unwrap();
            let (code, err) = cli(&["teach", "--state", &s, "--labels", &bad.to_string_lossy()]);
            assert!(
                code == Some(1) && err.contains("bad.csv:2") && err.contains("ten"),
                "{err}"
            );
            std::fs::write(&bad, format!("id,label\n{0},1\n{0},1\n", got[0])).unwrap();
            let (code, err) = cli(&["teach", "--state", &s, "--labels", &bad.to_string_lossy()]);
            assert!(code == Some(1) && err.contains("bad.csv:3"), "{err}");
            assert_eq!(std::fs::read(state.join("session.json")).unwrap(), before);
        }
        let answers = dir.join(format!("answers{round}.csv"));
        let mut text = String::from("id,label\n");
        for id in &got {
            text.push_str(&format!("{id},{}\n", truth[id]));
        }
        std::fs::write(&answers, text).unwrap();
        let (code, err) = cli(&[
            "teach",
            "--state",
            &s,
            "--labels",
            &answers.to_string_lossy(),
        ]);
        assert_eq!(code, Some(0), "{err}");
    }
    let cli_state: SessionState =
        serde_json::from_str(&std::fs::read_to_string(state.join("session.json")).unwrap())
            .unwrap();
    assert_eq!(cli_state.labeled.len(), 60 + 20);
    assert!(cli_state.pending.is_empty());
    let distinct: std::collections::HashSet<&str> =
        cli_state.labeled.iter().map(|l| l.id.as_str()).collect();
    assert_eq!(distinct.len(), 80);
    for l in &cli_state.labeled {
        assert_eq!(l.label, truth[&l.id]);
    }
    let (code, _) = cli(&["status", "--state", &s]);
    assert_eq!(code, Some(0));

    // The same session through the library, in one process: the same final state.
    let source = Source::parse(&cli_state.source).unwrap();
    let loaded = load_source(&source, &Hub::new(dir.join("nohub"), true), &mut Silent).unwrap();
    let seeds = loaded.pool.given_labels();
    let config = SessionConfig {
        arch: alkit::session::default_arch(&loaded.pool.item_shape, 10),
        train: TrainConfig {
            steps: 60,
            ..TrainConfig::default()
        },
        seed: 7,
        batch: 512,
    };
    let classes: Vec<String> = classes.split(',').map(String::from).collect();
    let mut lib = Learner::new(&cli_state.source, loaded, classes, &seeds, config).unwrap();
    let request = QueryRequest {
        scorer: std::sync::Arc::new(alkit::acquisition::Builtin::Entropy),
        n: 20,
        selection: alkit::acquisition::Selection::TopK,
        include_pending: false,
    };
    for _ in 0..3 {
        let batch = lib.query(&request, &Device::Cpu, &mut Silent).unwrap();
        let answers: Vec<(String, String)> = batch
            .iter()
            .map(|q| (q.id.clone(), truth[&q.id].clone()))
            .collect();
        lib.teach(&answers).unwrap();
    }
    assert_eq!(lib.state(), &cli_state);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn score_with_a_trained_checkpoint_reproduces_the_curves_scores() {
    // `alkit curve --save-scores` records what cycle 0's model said about every candidate;
    // `alkit train --indices` on cycle 0's labels with the same seed and steps rebuilds that
    // model bit for bit, and `alkit score` must then print the same numbers.
    let dir = tmp("reproduce");
    let out = dir.join("curve");
    let o = alkit_cmd()
        .args([
            "-q",
            "curve",
            "--scorer",
            "entropy,regrad",
            "--cycles",
            "1",
            "--steps",
            "40",
            "--seed",
            "5",
            "--save-scores",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let state: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("runs/entropy-seed5.json")).unwrap(),
    )
    .unwrap();
    let seed_set: Vec<String> = state["labeled"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p[1] == 0)
        .map(|p| p[0].to_string())
        .collect();
    assert_eq!(seed_set.len(), 20);
    let idx_file = dir.join("seed-set.txt");
    std::fs::write(&idx_file, seed_set.join("\n")).unwrap();
    let ck = dir.join("ck");
    let o = alkit_cmd()
        .args(["-q", "train", "--steps", "40", "--seed", "5", "--indices"])
        .arg(&idx_file)
        .arg("--out")
        .arg(&ck)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let scores = dir.join("scores.csv");
    let o = alkit_cmd()
        .args(["score", "--scorer", "entropy,regrad", "--checkpoint"])
        .arg(&ck)
        .arg("--out")
        .arg(&scores)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&scores).unwrap();
    let rows: std::collections::HashMap<String, Vec<String>> = text
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<String> = l.split(',').map(String::from).collect();
            (f[0].clone(), f[2..].to_vec())
        })
        .collect();
    for (col, strategy) in ["entropy", "regrad"].iter().enumerate() {
        let saved =
            std::fs::read_to_string(out.join(format!("scores/{strategy}/seed5/cycle0.csv")))
                .unwrap();
        let mut n = 0;
        for l in saved.lines().skip(1) {
            let (i, v) = l.split_once(',').unwrap();
            assert_eq!(&rows[i][col], v, "{strategy} item {i}");
            n += 1;
        }
        assert_eq!(n, 2000 - 20);
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn bare_weights_import_checks_every_name_and_shape() {
    // Weights saved by name only (as `safetensors.torch.save_file(model.state_dict())` writes
    // them) convert into a checkpoint that predicts exactly like the original model; a renamed
    // or reshaped tensor is refused by name and nothing is written.
    let (train, test) = normalised();
    let arch = Arch::Cnn(CnnConfig::standard(train.item_shape(), 10));
    let (vb, params) = seeded(stream(4, Purpose::Init, 0), DType::F32, &Device::Cpu);
    let model = arch.build(vb).unwrap();
    let dir = tmp("import");
    let mut named: std::collections::HashMap<String, Tensor> = params
        .named()
        .into_iter()
        .map(|(n, v)| (n, v.as_tensor().clone()))
        .collect();
    let w = dir.join("w.safetensors");
    candle_core::safetensors::save(&named, &w).unwrap();
    let norm = Normalizer::fit(&train);
    let classes: Vec<String> = (0..10).map(|c| c.to_string()).collect();
    let ck = dir.join("ck");
    alkit::checkpoint::import(&w, &arch, &norm, train.item_shape(), classes.clone(), &ck).unwrap();
    let loaded = alkit::checkpoint::load(&ck, &Device::Cpu).unwrap();
    let x = test
        .batch(&(0..16).collect::<Vec<_>>(), &Device::Cpu)
        .unwrap();
    let a = model
        .predict(&x)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    let b = loaded
        .model
        .predict(&x)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    assert_eq!(a, b);
    let fc2 = named.remove("fc2.weight").unwrap();
    named.insert("classifier.weight".into(), fc2);
    candle_core::safetensors::save(&named, &w).unwrap();
    let bad = dir.join("bad");
    let e = alkit::checkpoint::import(&w, &arch, &norm, train.item_shape(), classes, &bad)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("fc2.weight") && e.contains("w.safetensors"),
        "{e}"
    );
    assert!(!bad.exists());
    let _ = std::fs::remove_dir_all(dir);
}
