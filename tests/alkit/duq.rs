//! DUQ: gradients against finite differences, the fused CPU ops against the candle composition, training in the loop, two moons, a user's extractor; the ood and surface commands.

use super::*;

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
                batch: 32,
                ..alkit::duq::cnn::DuqCnnConfig::default().settings
            },
        },
    };
    // One batch size: a training that asks for another than the model's settings record is
    // refused, not resolved silently.
    let e = train_briefly(&Arch::Duq(arch.clone()), &train, 64, (1, 16))
        .err()
        .expect("a mismatched batch size is refused")
        .to_string();
    assert!(e.contains("batch_size") && e.contains("16"), "{e}");
    let trained = train_briefly(&Arch::Duq(arch.clone()), &train, 64, (3, 32)).unwrap();
    assert_round_trip(
        &Arch::Duq(arch),
        &trained,
        &Normalizer::fit(&train),
        &test,
        &dir.join("ck2"),
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
}

#[test]
fn cli_ood_keeps_the_model_it_trained_and_reuses_it() {
    // `alkit ood` trains, saves the model to OUT/model before scoring, and the same command
    // with `--checkpoint OUT/model` evaluates that model without training: same accuracy and
    // the same metrics.
    let out = tmp("ood-keep");
    let run = |extra: &[&str], dir: &Path| {
        let o = alkit_cmd()
            .args(["ood", "--train-data", "data", "--ood-data", "data"])
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
    let first = run(&["--steps", "20"], &out.join("a"));
    assert!(out.join("a/model/config.json").exists());
    let ck = out.join("a/model");
    let second = run(&["--checkpoint", ck.to_str().unwrap()], &out.join("b"));
    assert_eq!(first, second);
    // Training flags beside --checkpoint would be ignored: refused (exit 2), nothing written.
    let o = alkit_cmd()
        .args(["-q", "ood", "--train-data", "data", "--ood-data", "data"])
        .args([
            "--checkpoint",
            ck.to_str().unwrap(),
            "--steps",
            "20",
            "--out",
        ])
        .arg(out.join("c"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--steps"), "{err}");
    assert!(!out.join("c").exists());
}

/// A PNG file's `(width, height)`, from its header.
pub(super) fn png_size(path: &std::path::Path) -> (u32, u32) {
    let b = std::fs::read(path).unwrap();
    assert!(b.starts_with(b"\x89PNG"), "{}", path.display());
    let be = |at: usize| u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    (be(16), be(20))
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
    // --beside mlp: the same DUQ run, and the softmax MLP on the same moons next to it.
    let both = out.join("both");
    let o = alkit_cmd()
        .args([
            "surface", "--model", "duq", "--seed", "1", "--beside", "mlp",
        ])
        .args(["--steps", "300", "--out"])
        .arg(&both)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        std::fs::read(both.join("metrics.json")).unwrap(),
        std::fs::read(out.join("metrics.json")).unwrap()
    );
    let mlp: serde_json::Value =
        serde_json::from_slice(&std::fs::read(both.join("beside/mlp/metrics.json")).unwrap())
            .unwrap();
    assert_eq!(mlp["scorer"], serde_json::json!("entropy"));
    let (one, two) = (
        png_size(&both.join("surface.png")),
        png_size(&both.join("beside.png")),
    );
    assert_eq!((two.0, two.1), (2 * one.0, one.1));
    let o = alkit_cmd()
        .args(["surface", "--beside", "mlp", "--seeds", "2", "--out"])
        .arg(out.join("refused"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("beside"));
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
    let via_trait: Vec<f32> = alkit::nn::kernel_values(boxed.as_ref(), &xs)
        .unwrap()
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    assert_eq!(via_trait, k);
}

/// `arch` trained on the first `n` items of `data` for `steps` steps of `batch` items, from
/// the streams of seed 0, cycle 0.
fn train_briefly(
    arch: &Arch,
    data: &Dataset,
    n: usize,
    (steps, batch): (usize, usize),
) -> alkit::error::Result<alkit::train::Trained> {
    let params = TrainConfig {
        steps,
        batch_size: batch,
        ..TrainConfig::default()
    }
    .validate()
    .unwrap();
    let ids: Vec<usize> = (0..n).collect();
    let key = (0, 0);
    alkit::train::train(
        arch,
        None,
        data,
        &ids,
        &params,
        key,
        &Device::Cpu,
        &mut Silent,
    )
}

/// Saves `trained` (built from `arch`, inputs normalised by `norm`) as a checkpoint in `dir`,
/// loads it back and asserts identical kernel values on the first 6 items of `data`: every
/// tensor, running statistics and centroid state included, survives the round trip.
fn assert_round_trip(
    arch: &Arch,
    trained: &alkit::train::Trained,
    norm: &Normalizer,
    data: &Dataset,
    dir: &Path,
) {
    let classes = (0..arch.classes()).map(|c| c.to_string()).collect();
    alkit::checkpoint::save(dir, arch, &trained.params, norm, data.item_shape(), classes).unwrap();
    let loaded = alkit::checkpoint::load(dir, &Device::Cpu).unwrap();
    let x = data
        .batch(&(0..6).collect::<Vec<_>>(), &Device::Cpu)
        .unwrap();
    let kernels = |m: &dyn alkit::nn::Classifier| -> Vec<f32> {
        let k = alkit::nn::kernel_values(m, &x).unwrap().unwrap();
        k.flatten_all().unwrap().to_vec1().unwrap()
    };
    assert_eq!(
        kernels(trained.model.as_ref()),
        kernels(loaded.model.as_ref())
    );
}

/// `n` items of `ds` from `from` on, padded by 2 pixels a side to 32x32 and replicated to three
/// channels: MNIST-sized grey images in the CIFAR shape.
fn padded_rgb(ds: &Dataset, from: usize, n: usize) -> Dataset {
    let mut x = Vec::with_capacity(n * 3 * 16 * 16);
    let mut y = Vec::with_capacity(n);
    for i in from..from + n {
        let item = ds.item(i);
        // Every other pixel (14x14), centred in 16x16.
        let mut plane = vec![0f32; 16 * 16];
        for r in 0..14 {
            for c in 0..14 {
                plane[(r + 1) * 16 + c + 1] = item[2 * r * 28 + 2 * c];
            }
        }
        for _ in 0..3 {
            x.extend_from_slice(&plane);
        }
        y.push(ds.labels()[i]);
    }
    Dataset::new(x, y, vec![3, 16, 16], ds.classes()).unwrap()
}

/// `n` synthetic colour images 3x16x16 of 3 classes: a class-coloured square on seeded noise.
fn colour_squares(n: usize, seed: u64) -> Dataset {
    let mut rng = stream(seed, Purpose::Tool, 0);
    let mut x = Vec::with_capacity(n * 3 * 16 * 16);
    let y: Vec<u32> = (0..n).map(|i| (i % 3) as u32).collect();
    for &c in &y {
        for ch in 0..3 {
            for r in 0..16 {
                for col in 0..16 {
                    let inside = (4..12).contains(&r) && (4..12).contains(&col);
                    let noise = alkit::rng::uniform(&mut rng) as f32 * 0.3;
                    x.push(if inside && ch == c as usize {
                        0.7 + noise
                    } else {
                        noise
                    });
                }
            }
        }
    }
    Dataset::new(x, y, vec![3, 16, 16], 3).unwrap()
}

#[test]
fn resnets_and_duq_resnet_run_every_command_on_colour_images() {
    // Colour 3x16x16 data in the loop (every ResNet stage runs: 16, 16, 8, 4, 2 pixels a
    // side): MNIST at half resolution padded to 16x16 and replicated to three channels, and
    // synthetic coloured squares, each a folder with train/ and test/ subfolders.
    // `train`, `score`, `ood`, `calibrate` and `curve` take the ResNets and DUQ on ResNet-18,
    // whose checkpoint keeps its centroid state and running statistics exactly.
    let dir = tmp("colour");
    let mnist = load_idx_dir(&data_dir()).unwrap();
    let (m_train, m_test) = (
        padded_rgb(&mnist.train, 0, 40),
        padded_rgb(&mnist.test, 0, 20),
    );
    write_split_folder(&dir.join("mnist32"), &m_train, &m_test);
    write_split_folder(
        &dir.join("squares"),
        &colour_squares(30, 1),
        &colour_squares(20, 2),
    );
    let run = |args: &[&str]| {
        let o = alkit_cmd()
            .arg("-q")
            .args(args)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let small = ["--steps", "2", "--batch-size", "8"];
    let out = run(&[
        &["train", "--data", "squares", "--model", "duq-resnet18"][..],
        &small,
        &["--out", "ck"],
    ]
    .concat());
    assert!(out.contains("test accuracy"), "{out}");
    let config = std::fs::read_to_string(dir.join("ck/config.json")).unwrap();
    assert!(
        config.contains("\"duq-resnet\"") && config.contains("\"cifar\""),
        "{config}"
    );
    run(&[
        "score",
        "--checkpoint",
        "ck",
        "--data",
        "squares",
        "--scorer",
        "duq,entropy",
        "--out",
        "s.csv",
    ]);
    let scores = std::fs::read_to_string(dir.join("s.csv")).unwrap();
    let rows: Vec<&str> = scores.lines().skip(1).collect();
    assert_eq!(rows.len(), 30);
    assert!(rows[0].starts_with("0,train/0/"), "{}", rows[0]);
    for r in &rows {
        let duq: f64 = r.split(',').nth(2).unwrap().parse().unwrap();
        assert!((0.0..=1.0).contains(&duq), "{r}");
    }
    // A model without dropout asked for MC-dropout draws is refused, naming the reason.
    let o = alkit_cmd()
        .args([
            "-q",
            "score",
            "--checkpoint",
            "ck",
            "--data",
            "squares",
            "--scorer",
            "bald",
            "--out",
            "b.csv",
        ])
        .current_dir(&dir)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("dropout"), "{err}");
    // DUQ trains with SGD at its own schedule: Adam's rate is refused.
    let o = alkit_cmd()
        .args([
            "-q",
            "train",
            "--data",
            "squares",
            "--model",
            "duq-resnet18",
            "--lr",
            "0.1",
            "--out",
            "x",
        ])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("--lr"));
    assert!(!dir.join("x").exists());
    let out = run(&[
        &[
            "ood",
            "--train-data",
            "mnist32",
            "--ood-data",
            "squares",
            "--model",
            "duq-resnet18",
        ][..],
        &small,
        &["--scorer", "duq,entropy", "--out", "ood"],
    ]
    .concat());
    assert!(out.contains("duq") && out.contains("AUROC"), "{out}");
    let out = run(&[
        &[
            "ood",
            "--train-data",
            "mnist32",
            "--ood-data",
            "squares",
            "--model",
            "resnet18",
        ][..],
        &small,
        &["--scorer", "entropy,margin", "--out", "ood2"],
    ]
    .concat());
    assert!(out.contains("margin"), "{out}");
    run(&[
        &["calibrate", "--data", "mnist32", "--model", "resnet34"][..],
        &small,
        &["--scorer", "entropy", "--out", "cal"],
    ]
    .concat());
    assert!(dir.join("cal/metrics.json").exists());
    run(&[
        &[
            "curve",
            "--data",
            "mnist32",
            "--model",
            "duq-resnet18",
            "--scorer",
            "duq",
        ][..],
        &small,
        &[
            "--initial",
            "10",
            "--query",
            "5",
            "--cycles",
            "1",
            "--out",
            "curve",
        ],
    ]
    .concat());
    let curve = std::fs::read_to_string(dir.join("curve/curve.csv")).unwrap();
    assert!(curve.contains("duq,"), "{curve}");

    // In-process: the trained model and its reloaded checkpoint give identical kernel values
    // (trunk, running statistics, head and centroid state all saved).
    let sq = colour_squares(30, 1);
    let norm = Normalizer::fit(&sq);
    let train = norm.apply(&sq).unwrap();
    let arch = Arch::for_data("duq-resnet18".parse().unwrap(), &train).with_batch(8);
    let trained = train_briefly(&arch, &train, 30, (3, 8)).unwrap();
    let names: Vec<String> = trained.params.named().into_iter().map(|(n, _)| n).collect();
    for n in [
        "conv1.weight",
        "layer4.1.bn2.running_var",
        "duq.weight",
        "duq.m",
        "duq.counts",
    ] {
        assert!(names.iter().any(|m| m == n), "{n} not in {names:?}");
    }
    assert_round_trip(&arch, &trained, &norm, &train, &dir.join("ck2"));
    // The centroids moved from their initial draw: the saved state is the trained one.
    let counts: Vec<f32> = trained
        .params
        .named()
        .into_iter()
        .find(|(n, _)| n == "duq.counts")
        .unwrap()
        .1
        .as_tensor()
        .to_vec1()
        .unwrap();
    assert!(counts.iter().all(|&c| c != 12.0), "{counts:?}");
}

#[test]
fn scorers_a_model_cannot_serve_are_refused_before_it_trains() {
    // `duq` needs a DUQ model's kernel values, MC-dropout scorers a model with dropout: asked of
    // another model they are refused at once, before minutes of training, and nothing is written.
    let dir = tmp("needs");
    let cases: [(&[&str], &str); 4] = [
        (
            &[
                "ood",
                "--train-data",
                "data",
                "--ood-data",
                "data",
                "--scorer",
                "entropy,duq",
            ],
            "DUQ",
        ),
        (
            &[
                "calibrate",
                "--data",
                "data",
                "--model",
                "duq",
                "--scorer",
                "bald",
            ],
            "no dropout",
        ),
        (
            &["curve", "--model", "mlp", "--scorer", "mc-entropy"],
            "no dropout",
        ),
        (&["curve", "--model", "resnet18", "--scorer", "duq"], "DUQ"),
    ];
    for (k, (args, want)) in cases.iter().enumerate() {
        let out = dir.join(format!("o{k}"));
        let o = alkit_cmd()
            .arg("-q")
            .args(*args)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(want), "{args:?}: {err}");
        assert!(!out.exists(), "{args:?}: something was written");
    }
    // With an ensemble, BALD reads the members' draws: accepted.
    let o = alkit_cmd()
        .args([
            "-q",
            "curve",
            "--model",
            "mlp",
            "--scorer",
            "bald",
            "--ensemble",
            "2",
        ])
        .args([
            "--cycles",
            "1",
            "--steps",
            "2",
            "--initial",
            "10",
            "--query",
            "5",
            "--out",
        ])
        .arg(dir.join("ens"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}
