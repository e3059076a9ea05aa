//! The last-layer view of a model: its features and last layer against its own logits, the
//! closed-form gradient evidence against autograd in f64 and against the full-network path's
//! last layer, and `--layers last` end to end.

use super::*;
use alkit::nn::{last_layer, Classifier, Mlp, MlpConfig};
use alkit::strategies::{Layers, ScorerSettings};
use alkit_acquisition::{last_layer_norms, GradLayers};

/// Max relative difference of two f64 vectors (absolute below `floor`).
fn rel(a: &[f64], b: &[f64], floor: f64) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs() / x.abs().max(y.abs()).max(floor))
        .fold(0.0, f64::max)
}

fn vec64(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f64>()
        .unwrap()
}

#[test]
fn closed_forms_equal_autograd_in_f64() {
    // Random h (n, d), W (c, d), b (c): for every candidate, ||d log p_c / d(W, b)||^2 per
    // class, the expected row (zero) and GradNorm's L1 of d KL(u || p) / dW, by autograd.
    let (n, d, c) = (6, 9, 5);
    let h = randn64(&[n, d], 21);
    let w = Var::from_tensor(&randn64(&[c, d], 22)).unwrap();
    let b = Var::from_tensor(&randn64(&[c], 23)).unwrap();
    for i in 0..n {
        let hi = h.narrow(0, i, 1).unwrap();
        let lp = log_probs(
            &hi.matmul(&w.as_tensor().t().unwrap())
                .unwrap()
                .broadcast_add(b.as_tensor())
                .unwrap(),
        )
        .unwrap();
        let p = vec64(&lp.exp().unwrap());
        let mut want = Vec::new();
        for k in 0..c {
            let g = lp
                .narrow(1, k, 1)
                .unwrap()
                .sum_all()
                .unwrap()
                .backward()
                .unwrap();
            let sq = |v: &Var| vec64(g.get(v).unwrap()).iter().map(|x| x * x).sum::<f64>();
            want.push(sq(&w) + sq(&b));
        }
        let kl = (lp.sum_all().unwrap() * (-1.0 / c as f64)).unwrap();
        let g = kl.backward().unwrap();
        let want_l1: f64 = vec64(g.get(&w).unwrap()).iter().map(|x| x.abs()).sum();
        let mut got = Vec::new();
        let got_l1 = last_layer_norms(&vec64(&hi), &p, true, &mut got);
        let err = rel(&got[..c], &want, 1e-300);
        assert!(
            err <= 1e-9,
            "candidate {i}: class rows relative error {err}"
        );
        assert!(got[c].abs() <= 1e-20, "expected row {}", got[c]);
        let err = rel(&[got_l1], &[want_l1], 1e-300);
        assert!(err <= 1e-9, "candidate {i}: GradNorm relative error {err}");
    }
}

/// A model's last layer must reproduce its own logits, and its closed-form gradient norms
/// must equal the full-network path's last layer (the model's own column `L - 1`).
fn assert_last_layer_is_the_models(model: &dyn Classifier, x: &Tensor, what: &str) {
    let got = last_layer(model, x)
        .unwrap()
        .expect("the model offers its last layer");
    let logits = got
        .h
        .matmul(&got.w.t().unwrap())
        .unwrap()
        .broadcast_add(&got.b)
        .unwrap();
    let want = model.predict(x).unwrap();
    let err = rel(&vec64(&logits), &vec64(&want), 1e-6);
    assert!(err <= 1e-9, "{what}: h W^T + b against the logits: {err}");
    let full = alkit::nn::grad_norms(model, x, 1, true)
        .unwrap()
        .expect("a fast gradient path");
    let c = model.classes();
    let p = vec64(&log_probs(&want).unwrap().exp().unwrap());
    let h = vec64(&got.h);
    let d = h.len() / x.dim(0).unwrap();
    for i in 0..x.dim(0).unwrap() {
        let mut closed = Vec::new();
        let l1 = last_layer_norms(
            &h[i * d..(i + 1) * d],
            &p[i * c..(i + 1) * c],
            true,
            &mut closed,
        );
        let last: Vec<f64> = (0..=c)
            .map(|r| full.sq[(i * (c + 1) + r) * full.layers + full.layers - 1])
            .collect();
        let err = rel(&closed[..c], &last[..c], 1e-300);
        assert!(err <= 1e-9, "{what}: candidate {i}: class rows {err}");
        assert!(
            closed[c] <= 1e-20 && last[c] <= 1e-20,
            "{what}: expected rows"
        );
        let err = rel(&[l1], &[full.kl_l1[i]], 1e-300);
        assert!(err <= 1e-9, "{what}: candidate {i}: GradNorm {err}");
    }
}

#[test]
fn the_cnn_mlp_and_resnet18_give_their_own_last_layer() {
    let (vb, _) = seeded(stream(7, Purpose::Init, 0), DType::F64, &Device::Cpu);
    let cnn = Arch::Cnn(CnnConfig {
        in_channels: 1,
        height: 14,
        width: 13,
        classes: 4,
        dropout: 0.5,
    })
    .build(vb)
    .unwrap();
    assert_last_layer_is_the_models(cnn.as_ref(), &randn64(&[3, 1, 14, 13], 8), "CNN");
    let (vb, _) = seeded(stream(8, Purpose::Init, 0), DType::F64, &Device::Cpu);
    let cfg = MlpConfig {
        inputs: 12,
        hidden: vec![7, 5],
        classes: 3,
        dropout: 0.0,
    };
    let mlp = Mlp::new(&cfg, vb).unwrap();
    assert_last_layer_is_the_models(&mlp, &randn64(&[4, 12], 9), "MLP");
    // A linear model: its features are its inputs.
    let (vb, _) = seeded(stream(9, Purpose::Init, 0), DType::F64, &Device::Cpu);
    let linear = Mlp::new(
        &MlpConfig {
            hidden: vec![],
            ..cfg
        },
        vb,
    )
    .unwrap();
    let x = randn64(&[4, 12], 10);
    assert_last_layer_is_the_models(&linear, &x, "linear");
    assert_eq!(
        vec64(&last_layer(&linear, &x).unwrap().unwrap().h),
        vec64(&x)
    );
    let (vb, _) = seeded(stream(4, Purpose::Init, 0), DType::F64, &Device::Cpu);
    let net = alkit::nn::resnet::resnet(
        &alkit::nn::resnet::ResNetConfig {
            depth: 18,
            stem: alkit::nn::resnet::Stem::Cifar,
            in_channels: 3,
            classes: 10,
        },
        vb,
    )
    .unwrap();
    assert_last_layer_is_the_models(&net, &randn64(&[2, 3, 32, 32], 5), "ResNet-18");
}

#[test]
fn last_layer_scores_are_named_and_refused_where_they_do_not_apply() {
    let last = ScorerSettings {
        layers: Layers::Last,
        ..Default::default()
    };
    let names: Vec<String> = ["regrad", "gradnorm", "entropy", "bald"]
        .iter()
        .map(|n| kind(n).strategy(&last).unwrap().name().to_string())
        .collect();
    assert_eq!(names, ["regrad@last", "gradnorm@last", "entropy", "bald"]);
    let sc = kind("negrad").scorer(&last).unwrap();
    assert_eq!(sc.needs().grads.unwrap().layers, GradLayers::Last);
    let Err(e) = kind("regrad-star").strategy(&last) else {
        panic!("regrad-star over the last layer was accepted");
    };
    let e = e.to_string();
    assert!(e.contains("setting `layers`"), "{e}");
}

#[test]
fn score_with_last_layers_names_its_columns_and_matches_the_full_path_s_last_layer() {
    // A trained CNN checkpoint scored with every layer and with the last one: the CSV says
    // which, gradnorm (a last-layer score by definition) agrees, and regrad@last differs.
    let dir = tmp("last-layer-score");
    let ck = dir.join("ck");
    let ok = alkit_cmd()
        .args(["train", "--data"])
        .arg(data_dir())
        .args(["--model", "cnn", "--steps", "20", "--out"])
        .arg(&ck)
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let score = |layers: &str, out: &str| {
        let o = alkit_cmd()
            .args(["score", "--checkpoint"])
            .arg(&ck)
            .arg("--data")
            .arg(data_dir())
            .args([
                "--split",
                "test",
                "--scorer",
                "entropy,regrad,gradnorm",
                "--layers",
                layers,
            ])
            .arg("--out")
            .arg(dir.join(out))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        std::fs::read_to_string(dir.join(out)).unwrap()
    };
    let all = score("all", "all.csv");
    let last = score("last", "last.csv");
    assert!(
        all.starts_with("index,id,entropy,regrad,gradnorm\n"),
        "{all}"
    );
    assert!(
        last.starts_with("index,id,entropy,regrad@last,gradnorm@last\n"),
        "{last}"
    );
    let cols = |csv: &str, k: usize| -> Vec<f64> {
        csv.lines()
            .skip(1)
            .map(|l| l.split(',').nth(k).unwrap().parse().unwrap())
            .collect()
    };
    assert_eq!(cols(&all, 2), cols(&last, 2), "entropy");
    let err = rel(&cols(&all, 4), &cols(&last, 4), 1e-6);
    assert!(
        err <= 1e-4,
        "gradnorm over every layer's path and in closed form: {err}"
    );
    assert_ne!(
        cols(&all, 3),
        cols(&last, 3),
        "regrad over all layers vs the last"
    );
    let star = alkit_cmd()
        .args(["score", "--checkpoint"])
        .arg(&ck)
        .arg("--data")
        .arg(data_dir())
        .args(["--scorer", "regrad-star", "--layers", "last", "--out"])
        .arg(dir.join("star.csv"))
        .output()
        .unwrap();
    assert!(!star.status.success());
    let e = String::from_utf8_lossy(&star.stderr);
    assert!(e.contains("`--layers`"), "{e}");
    assert!(!dir.join("star.csv").exists());
}

#[test]
fn an_ensemble_or_a_duq_model_is_refused_last_layer_scores_before_anything_trains() {
    let dir = tmp("last-layer-refused");
    for (what, args) in [
        ("ensemble", &["--model", "linear", "--ensemble", "2"][..]),
        ("duq", &["--model", "duq"][..]),
    ] {
        let out = dir.join(what);
        let o = alkit_cmd()
            .args(["-q", "curve", "--data"])
            .arg(data_dir())
            .args(args)
            .args([
                "--scorer", "regrad", "--layers", "last", "--cycles", "1", "--out",
            ])
            .arg(&out)
            .output()
            .unwrap();
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{what}: {e}");
        assert!(
            e.contains("`--layers`") && e.contains("regrad@last"),
            "{what}: {e}"
        );
        assert!(!out.join("curve.csv").exists(), "{what}");
    }
}
