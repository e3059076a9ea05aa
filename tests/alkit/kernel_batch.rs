//! The regression batch rules (MaxDiag, MaxDet, BAIT, MaxDist, k-means++, LCMD) against
//! bmdal-reg 3.0.2, the paper's own implementation: its picks on the same features
//! (tests/fixtures/bmdal_picks.json, written by tests/reference/bmdal_picks.py), its
//! k-means++ first-pick distribution, and its `grad` and `ll` kernels of a small network.

use super::regression::regression_curve_steps;
use alkit::acquisition::{BaseKernel, FeatureRequest, KernelBatch, KernelFeatures, KernelRule};
use alkit::nn::{grad_features, GaussMlp, GaussMlpConfig, GradSketch, Regressor};
use candle_core::{DType, Device, Tensor};
use rand::SeedableRng;
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;

fn fixture() -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/bmdal_picks.json");
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

fn f32s(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

fn features(fx: &Value) -> KernelFeatures {
    first_columns(fx, fx["p"].as_u64().unwrap() as usize)
}

/// The fixture's features, each row cut to its first `columns` values.
fn first_columns(fx: &Value, columns: usize) -> KernelFeatures {
    let p = fx["p"].as_u64().unwrap() as usize;
    let cut = |v: &Value| -> Vec<f32> {
        let x = f32s(v);
        x.chunks_exact(p)
            .flat_map(|r| r[..columns].to_vec())
            .collect()
    };
    KernelFeatures::new(cut(&fx["pool"]), cut(&fx["labeled"]), columns).unwrap()
}

fn rule(name: &str, backward: bool) -> KernelRule {
    match name {
        "maxdiag" => KernelRule::MaxDiag,
        "maxdet" => KernelRule::MaxDet,
        "bait" => KernelRule::Bait { backward },
        "maxdist" => KernelRule::MaxDist,
        "lcmd" => KernelRule::Lcmd,
        other => panic!("no rule {other}"),
    }
}

#[test]
fn deterministic_rules_pick_what_bmdal_reg_picks() {
    let fx = fixture();
    let k = fx["k"].as_u64().unwrap() as usize;
    let sigma = fx["sigma"].as_f64().unwrap();
    for (name, case) in fx["cases"].as_object().unwrap() {
        let f = first_columns(&fx, case["columns"].as_u64().unwrap() as usize);
        let selector = KernelBatch {
            rule: rule(
                case["rule"].as_str().unwrap(),
                case["backward"].as_bool().unwrap(),
            ),
            request: FeatureRequest::PAPER,
            with_labeled: case["with_labeled"].as_bool().unwrap(),
            posterior: case["posterior"].as_f64(),
            noise: sigma,
        };
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
        let ours = selector.select_features(&f, k, &mut rng).unwrap();
        let mut want: Vec<usize> = case["picks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .collect();
        if name == "maxdiag" {
            // bmdal returns the top k in ascending order of the diagonal; alkit largest first.
            want.reverse();
        }
        assert_eq!(ours, want, "{name}");
    }
}

#[test]
fn kmeanspp_draws_its_first_pick_as_bmdal_reg_weighs_it() {
    // bmdal's k-means++ in TP mode draws the first pick with probability proportional to each
    // pool row's squared distance to its nearest labeled row. 4,000 seeded first picks are
    // binned into 10 groups of about equal probability and compared by a chi-square test
    // (9 degrees of freedom; 27.9 is its 0.999 quantile).
    let fx = fixture();
    let f = features(&fx);
    let probs: Vec<f64> = fx["kmeanspp_first"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    let selector = KernelBatch::paper(KernelRule::KMeansPP);
    let draws = 4000;
    let mut counts = vec![0usize; probs.len()];
    for seed in 0..draws {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        counts[selector.select_features(&f, 1, &mut rng).unwrap()[0]] += 1;
    }
    let (mut bins, mut acc) = (vec![(0f64, 0usize); 10], 0.0);
    for (p, c) in probs.iter().zip(&counts) {
        let b = ((acc * 10.0) as usize).min(9);
        bins[b].0 += p;
        bins[b].1 += c;
        acc += p;
    }
    let chi2: f64 = bins
        .iter()
        .map(|&(p, c)| {
            let e = p * draws as f64;
            (c as f64 - e).powi(2) / e
        })
        .sum();
    assert!(chi2 < 27.9, "chi-square {chi2:.1} over {bins:?}");
    // Rows of zero weight (none here is labeled, but any row bmdal never draws) never appear.
    for (p, c) in probs.iter().zip(&counts) {
        assert!(*p > 0.0 || *c == 0);
    }
}

/// The fixture's 5 -> 16 -> 16 -> 1 network as alkit's Gaussian head: the mean path is
/// bmdal's network, the variance row of the last layer is zero.
fn network(fx: &Value, device: &Device) -> (GaussMlp, Tensor) {
    let net = &fx["network"];
    let mut tensors = HashMap::new();
    let shapes = [(16, 5), (16, 16), (1, 16)];
    for (i, (out, inp)) in shapes.into_iter().enumerate() {
        let w = f32s(&net["weights"][format!("fc{}.weight", i + 1)]);
        let b = f32s(&net["weights"][format!("fc{}.bias", i + 1)]);
        let (w, b, rows) = if i == 2 {
            let mut w2 = w.clone();
            w2.extend(vec![0.0; inp]);
            (w2, vec![b[0], 0.0], 2)
        } else {
            (w, b, out)
        };
        tensors.insert(
            format!("fc{}.weight", i + 1),
            Tensor::from_vec(w, (rows, inp), device).unwrap(),
        );
        tensors.insert(
            format!("fc{}.bias", i + 1),
            Tensor::from_vec(b, rows, device).unwrap(),
        );
    }
    let vb = candle_nn::VarBuilder::from_tensors(tensors, DType::F32, device);
    let cfg = GaussMlpConfig {
        inputs: 5,
        hidden: vec![16, 16],
        outputs: 1,
        dropout: 0.0,
    };
    let x = Tensor::from_vec(f32s(&net["x"]), (6, 5), device).unwrap();
    (GaussMlp::new(&cfg, vb).unwrap(), x)
}

fn gram(f: &Tensor) -> Vec<f64> {
    let g = f.matmul(&f.t().unwrap()).unwrap();
    g.flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap()
        .into_iter()
        .map(f64::from)
        .collect()
}

#[test]
fn grad_and_last_layer_kernels_equal_bmdal_regs() {
    let fx = fixture();
    let device = Device::Cpu;
    let (model, x) = network(&fx, &device);
    let models: [&dyn Regressor; 1] = [&model];
    for (name, base) in [("grad", BaseKernel::Grad), ("ll", BaseKernel::LastLayer)] {
        let request = FeatureRequest { base, sketch: None };
        let f = grad_features(&models, &x, request, None).unwrap();
        let ours = gram(&f);
        let want: Vec<f64> = fx["network"][name]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        for (i, (a, b)) in ours.iter().zip(&want).enumerate() {
            assert!(
                (a - b).abs() < 1e-4 * (1.0 + b.abs()),
                "{name} kernel entry {i}: {a} vs {b}"
            );
        }
    }
}

#[test]
fn the_gradient_sketch_is_unbiased() {
    // The mean of 200 independent 512-dimensional sketches' kernel matrices approaches the
    // exact kernel: each entry's sketch error has standard deviation about
    // sqrt(K_ii K_jj / 512), so over 200 draws about 0.003 sqrt(K_ii K_jj).
    let fx = fixture();
    let device = Device::Cpu;
    let (model, x) = network(&fx, &device);
    let models: [&dyn Regressor; 1] = [&model];
    let exact = FeatureRequest {
        base: BaseKernel::Grad,
        sketch: None,
    };
    let want = gram(&grad_features(&models, &x, exact, None).unwrap());
    let request = FeatureRequest::PAPER;
    let widths = alkit::nn::factor_widths(&model, &x, request).unwrap();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
    let mut mean = vec![0f64; 36];
    let reps = 200;
    for _ in 0..reps {
        let sketch = GradSketch::draw(&widths, 1, 512, &mut rng, &device).unwrap();
        let g = gram(&grad_features(&models, &x, request, Some(&sketch)).unwrap());
        mean.iter_mut()
            .zip(g)
            .for_each(|(m, v)| *m += v / reps as f64);
    }
    for i in 0..6 {
        for j in 0..6 {
            let scale = (want[i * 7] * want[j * 7]).sqrt();
            let (a, b) = (mean[i * 6 + j], want[i * 6 + j]);
            assert!((a - b).abs() < 0.02 * scale, "({i}, {j}): {a} vs {b}");
        }
    }
}

fn batch_curve(out: &Path, extra: &[&str]) -> std::process::Output {
    regression_curve_steps(out, 100, extra)
}

#[test]
fn regression_curves_run_the_batch_rules_and_repeat_their_picks() {
    let dir = super::tmp("kernel-batch-curve");
    let rules = "lcmd,bait-fb,kmeanspp,maxdet,maxdist,maxdiag";
    for (name, extra) in [
        ("grad", vec!["--scorer", rules]),
        (
            "ll",
            vec!["--scorer", rules, "--kernel", "ll", "--sketch", "0"],
        ),
    ] {
        let (a, b) = (dir.join(format!("{name}-a")), dir.join(format!("{name}-b")));
        for out in [&a, &b] {
            let o = batch_curve(out, &extra);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        }
        // The rows without their timing columns: same seed, same picks, same figures.
        let rows = |p: &Path| -> Vec<String> {
            std::fs::read_to_string(p.join("curve.csv"))
                .unwrap()
                .lines()
                .map(|l| l.split(',').take(10).collect::<Vec<_>>().join(","))
                .collect()
        };
        let first = rows(&a);
        assert_eq!(first, rows(&b), "{name}");
        assert_eq!(first.len(), 1 + 6 * 3, "{name}");
        for rule in rules.split(',') {
            assert!(first.iter().any(|l| l.starts_with(&format!("{rule},"))));
        }
    }
}

#[test]
fn batch_rules_are_refused_where_they_do_not_apply() {
    let dir = super::tmp("kernel-batch-bad");
    let o = batch_curve(
        &dir.join("sketch"),
        &["--scorer", "lcmd", "--sketch", "100000"],
    );
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && e.contains("sketch"), "{e}");
    let o = batch_curve(
        &dir.join("sigma"),
        &["--scorer", "bait", "--kernel-sigma", "0"],
    );
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && e.contains("--kernel-sigma"), "{e}");
    // A classifier has no Gaussian head to take gradients of the mean from.
    let o = super::alkit_cmd()
        .args(["-q", "curve", "--data"])
        .arg(super::data_dir())
        .args(["--scorer", "lcmd", "--cycles", "1", "--out"])
        .arg(dir.join("classifier"))
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && e.contains("lcmd"), "{e}");
}
