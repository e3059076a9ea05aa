//! The two models `alkit surface` adds to Ulmer & Cina's Figure 3: Platt scaling against
//! scikit-learn (tests/fixtures/platt_sklearn.json, written by
//! tests/reference/platt_sklearn.py), Bayes-by-backprop's training gradient against f64
//! finite differences, and both through the command.

use super::duq::png_size;
use super::*;
use alkit::metrics::Platt;
use alkit::nn::{BayesMlp, BayesMlpConfig, Classifier};

#[test]
fn platt_scaling_matches_scikit_learn() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/platt_sklearn.json");
    let fx: serde_json::Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
    let cases = fx["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 4);
    for c in cases {
        let scores = json_flat(&c["scores"]);
        let positive: Vec<bool> = c["positive"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_bool().unwrap())
            .collect();
        let fit = Platt::fit(&scores, &positive).unwrap();
        // scikit-learn stops L-BFGS at a gradient of 1e-6 (on scores it may have rescaled),
        // Newton's method here at f64 precision: the probabilities agree to 1e-5, the
        // parameters to 1e-4 of their size.
        let (a, b) = (
            c["slope"].as_f64().unwrap(),
            c["intercept"].as_f64().unwrap(),
        );
        assert!(
            (fit.slope - a).abs() <= 1e-4 * a.abs().max(1.0)
                && (fit.intercept - b).abs() <= 1e-4 * b.abs().max(1.0),
            "{}: ({}, {}) vs scikit-learn ({a}, {b})",
            c["name"],
            fit.slope,
            fit.intercept
        );
        for (s, want) in scores.iter().zip(json_flat(&c["probabilities"])) {
            let got = fit.probability(*s);
            assert!((got - want).abs() < 1e-5, "{}: {got} vs {want}", c["name"]);
        }
    }
}

/// The training loss of one step of `fit_softmax` for a Bayes-by-backprop network: the mean
/// cross-entropy of one weight draw (from a fixed stream, so every evaluation draws the same
/// noise) plus the KL divergence over the item count.
fn elbo_loss(m: &BayesMlp, x: &Tensor, y: &Tensor) -> Tensor {
    let mut rng = stream(9, Purpose::Train, 0);
    let logits = m.forward(x, &mut Mode::Train(&mut rng)).unwrap();
    let nll = candle_nn::loss::nll(&log_probs(&logits).unwrap(), y).unwrap();
    let kl = m.penalty().unwrap().unwrap();
    (nll + (kl / x.dim(0).unwrap() as f64).unwrap()).unwrap()
}

#[test]
fn bayes_by_backprop_loss_gradient_matches_finite_differences_in_f64() {
    // The reparameterised draw w = mu + softplus(rho) eps and the closed-form KL both carry
    // the gradient to mu and rho; central differences of the same loss (same eps) check it.
    let cfg = BayesMlpConfig {
        inputs: 2,
        hidden: vec![4],
        classes: 3,
        prior_sigma: 0.8,
        rho_init: -1.5,
    };
    let (vb, weights) = seeded(stream(4, Purpose::Init, 0), DType::F64, &Device::Cpu);
    let m = BayesMlp::new(&cfg, vb).unwrap();
    let x = Tensor::new(
        &[[0.3f64, -1.1], [1.4, 0.2], [-0.7, 0.9], [0.05, 0.6]],
        &Device::Cpu,
    )
    .unwrap();
    let y = Tensor::new(&[0u32, 2, 1, 2], &Device::Cpu).unwrap();
    let grads = elbo_loss(&m, &x, &y).backward().unwrap();
    let named = weights.named();
    assert_eq!(
        named.len(),
        8,
        "mu and rho of two layers' weights and biases"
    );
    let h = 1e-6;
    for (name, var) in named {
        let g = grads.get(var.as_tensor()).unwrap().flatten_all().unwrap();
        let g = g.to_vec1::<f64>().unwrap();
        let base = var
            .as_tensor()
            .flatten_all()
            .unwrap()
            .to_vec1::<f64>()
            .unwrap();
        for i in 0..base.len() {
            let at = |d: f64| -> f64 {
                let mut v = base.clone();
                v[i] += d;
                var.set(&Tensor::from_vec(v, var.shape(), &Device::Cpu).unwrap())
                    .unwrap();
                elbo_loss(&m, &x, &y).to_scalar::<f64>().unwrap()
            };
            let fd = (at(h) - at(-h)) / (2.0 * h);
            at(0.0);
            assert!(
                (fd - g[i]).abs() < 1e-6 * (1.0 + fd.abs()),
                "{name}[{i}]: autograd {} vs finite differences {fd}",
                g[i]
            );
        }
    }
}

#[test]
fn cli_surface_draws_bayes_by_backprop_and_platt() {
    let out = tmp("surface-bbb");
    let run = |model: &str, scorer: &str| -> serde_json::Value {
        let dir = out.join(format!("{model}-{scorer}"));
        let o = alkit_cmd()
            .args(["surface", "--model", model, "--scorer", scorer])
            .args(["--points", "500", "--noise", "0.125", "--steps", "600"])
            .args(["--mc-samples", "8", "--out"])
            .arg(&dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(std::fs::read(dir.join("surface.png"))
            .unwrap()
            .starts_with(b"\x89PNG"));
        serde_json::from_slice(&std::fs::read(dir.join("metrics.json")).unwrap()).unwrap()
    };
    for (model, scorer) in [("bayes-by-backprop", "bald"), ("platt", "entropy")] {
        let m = run(model, scorer);
        assert!(m["accuracy"].as_f64().unwrap() > 0.95, "{model}: {m}");
        assert!(
            (0.0..=1.0).contains(&m["auroc_far"].as_f64().unwrap()),
            "{model}: {m}"
        );
    }
    // Draws of Bayes-by-backprop's networks disagree somewhere; a Platt-scaled network is one
    // prediction, so its mutual information is zero everywhere and tells nothing apart.
    let platt = run("platt", "bald");
    assert_eq!(platt["auroc_far"].as_f64().unwrap(), 0.5, "{platt}");
    // Figure 3's row: the MLP beside the models named, each in its own folder.
    let row = out.join("row");
    let o = alkit_cmd()
        .args([
            "surface",
            "--model",
            "mlp",
            "--beside",
            "platt,bayes-by-backprop",
        ])
        .args(["--steps", "300", "--mc-samples", "4", "--out"])
        .arg(&row)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let one = png_size(&row.join("surface.png"));
    assert_eq!(png_size(&row.join("beside.png")), (3 * one.0, one.1));
    for model in ["platt", "bayes-by-backprop"] {
        assert!(row
            .join("beside")
            .join(model)
            .join("metrics.json")
            .is_file());
    }
    let o = alkit_cmd()
        .args([
            "surface",
            "--model",
            "mlp",
            "--beside",
            "platt,mlp",
            "--out",
        ])
        .arg(out.join("twice"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("twice"));
    let o = alkit_cmd()
        .args([
            "surface",
            "--model",
            "bayes-by-backprop",
            "--prior-sigma",
            "0",
            "--out",
        ])
        .arg(out.join("refused"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--prior-sigma"), "{err}");
}

#[test]
fn anchoring_pulls_an_ensemble_towards_its_initialisation() {
    use alkit::jobs::surface::{moons_surface, SurfaceModel, SurfaceScore, SurfaceSpec};
    let spec = |anchor| SurfaceSpec {
        model: SurfaceModel::ensemble(1, anchor),
        score: SurfaceScore::Entropy,
        points: 200,
        noise: 0.125,
        steps: 200,
        seed: 3,
    };
    let plain = moons_surface(&spec(None), &Device::Cpu).unwrap();
    let weak = moons_surface(&spec(Some(0.0)), &Device::Cpu).unwrap();
    let strong = moons_surface(&spec(Some(1e4)), &Device::Cpu).unwrap();
    // tau = 0 is plain training, bit for bit; a strong anchor changes the surface.
    assert_eq!(plain.grid, weak.grid);
    let moved = plain
        .grid
        .iter()
        .zip(&strong.grid)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    assert!(moved > 0.05, "largest change {moved}");
}
