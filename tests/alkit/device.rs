//! The device-agnostic paths, the ones CUDA and Metal tensors take. On this CPU they run with
//! alkit's hand-written kernels turned off (`alkit::without_cpu_kernels`), where every kernel
//! entry refuses to run: a test passes only if no CPU kernel is reached, as on a GPU. With
//! `ALKIT_TEST_DEVICE=cuda` (or `metal`) and that feature compiled in, the same tests run the
//! "other" side on that device instead. Either way the results must agree with the CPU
//! kernels within the tolerances below (summation order differs, nothing else).

use super::*;
use alkit::checkpoint;
use alkit::models::ModelKind;
use alkit::strategies::ScorerSettings;

/// The device under test: `ALKIT_TEST_DEVICE` (`cpu`, `cuda`, `metal`), CPU when unset.
fn test_device() -> Device {
    match std::env::var("ALKIT_TEST_DEVICE").as_deref() {
        Err(_) | Ok("") | Ok("cpu") => Device::Cpu,
        Ok("cuda") => Device::new_cuda(0).expect("ALKIT_TEST_DEVICE=cuda: no CUDA device"),
        Ok("metal") => Device::new_metal(0).expect("ALKIT_TEST_DEVICE=metal: no Metal device"),
        Ok(other) => panic!("ALKIT_TEST_DEVICE={other}: expected cpu, cuda or metal"),
    }
}

/// Runs `f` on the generic side: the device under test, with the CPU kernels off when it is
/// the CPU.
fn generic<T>(f: impl FnOnce(&Device) -> T) -> T {
    let d = test_device();
    if d.is_cpu() {
        alkit::without_cpu_kernels(|| f(&d))
    } else {
        f(&d)
    }
}

/// Largest `|a - b| / (1 + |a|)`.
fn max_rel(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(&x, &y)| f64::from((x - y).abs()) / (1.0 + f64::from(x.abs())))
        .fold(0.0, f64::max)
}

#[test]
fn every_scorer_agrees_on_the_generic_path_without_reaching_a_cpu_kernel() {
    let dir = tmp("device-scorers");
    let (train, _) = shipped();
    let n = 8;
    let x = train.features()[..n * 784].to_vec();
    let sub = Dataset::new(x, train.labels()[..n].to_vec(), vec![1, 28, 28], 10).unwrap();
    let mut worst = Vec::new();
    for kind in ["cnn", "mlp"].map(|n| n.parse::<ModelKind>().unwrap()) {
        let out = dir.join(format!("{kind:?}"));
        let splits = load_idx_dir(&data_dir()).unwrap();
        let params = TrainConfig {
            steps: 20,
            ..TrainConfig::default()
        }
        .validate()
        .unwrap();
        alkit::jobs::train::run(
            kind,
            &splits,
            None,
            &params,
            3,
            &out,
            &Device::Cpu,
            &mut Silent,
        )
        .unwrap();
        let scores = |device: &Device| -> Vec<(String, Vec<f32>)> {
            let ck = checkpoint::load(&out, device).unwrap();
            let scoring = alkit::jobs::scoring(&ck, device);
            let ds = ck.config.normalizer.apply(&sub).unwrap();
            let settings = ScorerSettings::default();
            // One scorer per kind of evidence (each gradient scorer costs a backward per
            // candidate and class on the generic path).
            let names: &[&str] = match kind.name() {
                "cnn" => &[
                    "entropy",
                    "margin",
                    "regrad",
                    "regrad-star",
                    "exgrad-v",
                    "bald",
                    "perturb-x",
                    "perturb-theta",
                ],
                _ => &["entropy", "regrad"],
            };
            names
                .iter()
                .map(|&name| {
                    let k = StrategyKind::named(name).unwrap();
                    let s = k.scorer(&settings).unwrap();
                    let col = alkit::jobs::score_all(&scoring, &ds, &[s], 5)
                        .unwrap_or_else(|e| panic!("{kind:?} {name}: {e}"));
                    (name.to_string(), col.into_iter().next().unwrap())
                })
                .collect()
        };
        let fast = scores(&Device::Cpu);
        let other = generic(|d| scores(d));
        for ((name, a), (_, b)) in fast.iter().zip(&other) {
            let e = max_rel(a, b);
            worst.push((format!("{kind:?} {name}"), e));
        }
    }
    worst.sort_by(|a, b| b.1.total_cmp(&a.1));
    assert!(
        worst[0].1 <= 1e-4,
        "largest relative differences: {worst:?}"
    );
}

#[test]
fn duq_loss_and_penalty_gradients_agree_on_the_generic_path_in_f64() {
    // The DUQ CNN at the paper's size on 32 real digits, with its gradient penalty: the input
    // gradient of the extractor (batch norm, ReLU, max-pool and convolution vector-Jacobian
    // products) is itself differentiated. Real digits tie the max-pool windows of their
    // constant background, so this also holds the generic max-pool to the kernels' tie rule
    // (the window's first maximum). In f64 the two paths agree to 1e-9; in f32 a tie can break
    // the other way after rounding, and single gradient entries then differ.
    use alkit::duq::cnn::{DuqCnn, DuqCnnConfig};
    let (train, _) = shipped();
    let n = 32;
    let x = Tensor::from_vec(
        train.features()[..n * 784].to_vec(),
        (n, 1, 28, 28),
        &Device::Cpu,
    )
    .unwrap()
    .to_dtype(DType::F64)
    .unwrap();
    let y = Tensor::from_vec(train.labels()[..n].to_vec(), n, &Device::Cpu).unwrap();
    let cfg = DuqCnnConfig::default();
    let run = |device: &Device| {
        let m = DuqCnn::seeded(
            &[1, 28, 28],
            10,
            &cfg,
            DType::F64,
            device,
            stream(9, Purpose::Init, 0),
        )
        .unwrap();
        let (x, y) = (x.to_device(device).unwrap(), y.to_device(device).unwrap());
        let (loss, out) = m.loss(&x, &y).unwrap();
        let gx = m
            .input_gradient(&out)
            .unwrap()
            .to_device(&Device::Cpu)
            .unwrap();
        let grads = loss.total.backward().unwrap();
        let named: Vec<(String, Tensor)> = m
            .params()
            .named()
            .into_iter()
            .filter_map(|(name, v)| {
                grads
                    .get(&v)
                    .map(|g| (name, g.to_device(&Device::Cpu).unwrap()))
            })
            .collect();
        let total = loss.total.to_device(&Device::Cpu).unwrap();
        (total, gx, named)
    };
    let (la, gxa, ga) = run(&Device::Cpu);
    let (lb, gxb, gb) = generic(|d| run(d));
    assert!(rel_max(&la, &lb) < 1e-12, "loss");
    assert!(rel_max(&gxa, &gxb) < 1e-9, "input gradient");
    assert_eq!(ga.len(), gb.len());
    assert_eq!(ga.len(), 15);
    for ((name, a), (_, b)) in ga.iter().zip(&gb) {
        let e = if name.ends_with("conv.bias") {
            // Zero under training-mode batch norm: exactly (kernels) or by rounding.
            let m = |t: &Tensor| {
                t.abs()
                    .unwrap()
                    .max_all()
                    .unwrap()
                    .to_scalar::<f64>()
                    .unwrap()
            };
            m(a) + m(b)
        } else {
            rel_max(a, b)
        };
        assert!(e < 1e-9, "{name}: {e:e}");
    }
}

#[test]
fn col2im_and_the_max_pool_route_compose_as_the_kernels_compute_ties_included() {
    use alkit::nn::layers::{col2im, im2col, max_pool2x2, max_pool2x2_route};
    let flat = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let v = Tensor::arange(0f32, 50.0, &Device::Cpu)
        .unwrap()
        .reshape((1, 5, 5, 2))
        .unwrap();
    for (k, pad) in [(2, 0), (2, 1), (3, 1)] {
        let cols = im2col(&v, k, pad).unwrap();
        let g = Tensor::arange(0f32, cols.elem_count() as f32, &Device::Cpu)
            .unwrap()
            .reshape(cols.dims())
            .unwrap();
        let a = col2im(&g, k, pad).unwrap();
        let b = alkit::without_cpu_kernels(|| col2im(&g, k, pad)).unwrap();
        assert_eq!(a.dims(), v.dims());
        assert_eq!(flat(&a), flat(&b), "col2im k {k} pad {pad}");
    }
    // Windows with ties: each window's first maximum (row-major) takes the gradient; an
    // all-zero window its first cell; worked by hand.
    let r = Tensor::new(
        &[[
            [[1f32], [3.], [0.], [0.]],
            [[3.], [2.], [0.], [0.]],
            [[5.], [5.], [1.], [2.]],
            [[5.], [5.], [2.], [1.]],
        ]],
        &Device::Cpu,
    )
    .unwrap();
    let g = Tensor::new(&[[[[10f32], [20.]], [[30.], [40.]]]], &Device::Cpu).unwrap();
    let want = [
        0., 10., 20., 0., 0., 0., 0., 0., 30., 0., 0., 40., 0., 0., 0., 0.,
    ];
    assert_eq!(flat(&max_pool2x2_route(&r, &g).unwrap()), want);
    let generic = alkit::without_cpu_kernels(|| max_pool2x2_route(&r, &g)).unwrap();
    assert_eq!(flat(&generic), want);
    // The pooling itself: the same values, and its gradient takes the same route.
    let x = candle_core::Var::from_tensor(&r).unwrap();
    let grad_of = |off: bool| {
        let run = || {
            let p = max_pool2x2(x.as_tensor()).unwrap();
            let loss = (p * &g).unwrap().sum_all().unwrap();
            flat(loss.backward().unwrap().get(&x).unwrap())
        };
        if off {
            alkit::without_cpu_kernels(run)
        } else {
            run()
        }
    };
    assert_eq!(grad_of(false), want);
    assert_eq!(grad_of(true), want);
}

#[test]
fn a_rounds_scores_do_not_depend_on_how_its_evidence_is_chunked() {
    // `round::pick` gathers evidence a chunk of candidates at a time: with noise (MC dropout,
    // input perturbations, REGrad*'s copies) drawn batch by batch from one stream, chunks of
    // whole batches must give the very scores and picks of one call over every candidate; a
    // joint scorer (EPIG, whose targets are the candidates) is handed them in one piece.
    let dir = tmp("round-chunks");
    let splits = load_idx_dir(&data_dir()).unwrap();
    let params = TrainConfig {
        steps: 20,
        ..TrainConfig::default()
    }
    .validate()
    .unwrap();
    let out = dir.join("cnn");
    alkit::jobs::train::run(
        "cnn".parse::<ModelKind>().unwrap(),
        &splits,
        None,
        &params,
        3,
        &out,
        &Device::Cpu,
        &mut Silent,
    )
    .unwrap();
    let ck = checkpoint::load(&out, &Device::Cpu).unwrap();
    let mut scoring = alkit::jobs::scoring(&ck, &Device::Cpu);
    scoring.batch = 32;
    let ds = ck.config.normalizer.apply(&splits.train).unwrap();
    let candidates: Vec<usize> = (0..ds.len()).filter(|i| i % 5 != 0).take(300).collect();
    // The same pool read from its IDX files a chunk at a time (a streamed session's pool).
    let reader = alkit::data::reader::SourceReader::new(
        alkit::data::reader::opener(
            alkit::data::Source::Idx(data_dir()),
            alkit::hub::Hub::new(dir.join("nohub"), true),
        ),
        "data",
        (0..ds.len()).map(|i| i.to_string()).collect(),
        ds.item_shape().to_vec(),
    );
    let streamed = alkit::data::StreamedPool::new(
        std::sync::Arc::new(reader),
        ck.config.normalizer.clone(),
        10,
    )
    .unwrap();
    for name in [
        "entropy",
        "regrad",
        "regrad-star",
        "bald",
        "perturb-x",
        "perturb-theta",
        "epig",
    ] {
        for select in ["top-k", "softmax"] {
            let settings = ScorerSettings {
                select: select.parse().unwrap(),
                ..ScorerSettings::default()
            };
            let strategy = StrategyKind::named(name)
                .unwrap()
                .strategy(&settings)
                .unwrap();
            let run_on = |pool: &dyn alkit::data::PoolReader, chunk: usize| {
                alkit::round::pick_in_chunks(
                    &strategy,
                    &scoring,
                    pool,
                    &candidates,
                    (12, &[]),
                    (7, 2),
                    (1, chunk),
                    &mut Silent,
                )
                .unwrap()
            };
            let whole = run_on(&ds, usize::MAX);
            let chunked = run_on(&ds, 40);
            let from_files = run_on(&streamed, 40);
            assert_eq!(chunked.indices, whole.indices, "{name} {select}");
            assert_eq!(from_files, chunked, "{name} {select}: streamed");
            let bits = |p: &alkit::round::Picked| {
                p.scores
                    .as_ref()
                    .map(|s| s.iter().map(|v| v.to_bits()).collect::<Vec<_>>())
            };
            assert_eq!(bits(&chunked), bits(&whole), "{name} {select}");
        }
    }
}
