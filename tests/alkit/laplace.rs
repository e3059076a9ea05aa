//! The last-layer Laplace posterior (`la`) against laplace-torch 0.3 on real features
//! (tests/fixtures/laplace_torch.json, written by tests/reference/laplace_torch.py): the
//! loss, the log marginal likelihood, the posterior precision, the fitted prior precision,
//! the probit predictive and the functional variance under each Hessian structure; and the
//! weight draws' moments against the functional variance they must reproduce.

use super::{json_f32s, json_flat};
use alkit::acquisition::{Features, Hessian, LaplacePosterior, LastLayerLaplace, Reference};
use rand::SeedableRng;
use serde_json::Value;
use std::path::Path;

fn fixture() -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/laplace_torch.json");
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

fn features(fx: &Value, rows: &str) -> Features {
    let h = json_f32s(&fx[rows]);
    let (w, b) = (json_f32s(&fx["weight"]), json_f32s(&fx["bias"]));
    let d = w.len() / b.len();
    Features::new(h.clone(), h.len() / d, d, w, b).unwrap()
}

fn reference(fx: &Value) -> Reference {
    let labels = json_flat(&fx["train_labels"])
        .iter()
        .map(|&y| y as usize)
        .collect();
    Reference::new(features(fx, "train_features"), labels).unwrap()
}

fn structures() -> [(Hessian, &'static str); 3] {
    [
        (Hessian::Diag, "diag"),
        (Hessian::Kron, "kron"),
        (Hessian::Full, "full"),
    ]
}

fn fit(r: &Reference, hessian: Hessian, prior_precision: Option<f64>) -> LaplacePosterior {
    LastLayerLaplace {
        hessian,
        prior_precision,
    }
    .fit(r)
    .unwrap()
}

fn close(what: &str, got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}[{i}]: {g} against laplace-torch's {w}"
        );
    }
}

#[test]
fn the_posterior_and_marginal_likelihood_match_laplace_torch() {
    let fx = fixture();
    let r = reference(&fx);
    let deltas = json_flat(&fx["deltas"]);
    let rows: Vec<usize> = json_flat(&fx["rows"]).iter().map(|&v| v as usize).collect();
    for (hessian, name) in structures() {
        let want = &fx["structures"][name];
        let post = fit(&r, hessian, Some(1.0));
        close(
            name,
            &[post.loss()],
            &[want["loss"].as_f64().unwrap()],
            1e-10,
        );
        let marglik: Vec<f64> = deltas
            .iter()
            .map(|&d| post.log_marginal_likelihood(d))
            .collect();
        close(name, &marglik, &json_flat(&want["marglik"]), 1e-10);
        let p = post.params();
        let precision = post.precision().unwrap();
        let got: Vec<f64> = rows
            .iter()
            .flat_map(|&i| precision[i * p..(i + 1) * p].to_vec())
            .collect();
        close(name, &got, &json_flat(&want["precision_rows"]), 1e-9);
    }
}

#[test]
fn the_fitted_prior_precision_is_the_marginal_likelihood_s_maximum() {
    let fx = fixture();
    let r = reference(&fx);
    for (hessian, name) in structures() {
        let want = &fx["structures"][name];
        let post = fit(&r, hessian, None);
        let delta = post.prior_precision();
        // laplace-torch's 3,000 Adam steps end at the root alkit solves for (to 1e-9).
        let theirs = want["fitted"].as_f64().unwrap();
        assert!(
            (delta / theirs - 1.0).abs() < 1e-9,
            "{name}: prior precision {delta} against laplace-torch's {theirs}"
        );
        let best = post.log_marginal_likelihood(delta);
        for other in [
            theirs,
            want["fitted_100"].as_f64().unwrap(),
            delta * 1.01,
            delta / 1.01,
        ] {
            assert!(
                best >= post.log_marginal_likelihood(other) - 1e-9,
                "{name}: {other}"
            );
        }
    }
}

#[test]
fn the_probit_predictive_and_functional_variance_match_laplace_torch() {
    let fx = fixture();
    let r = reference(&fx);
    let candidates = features(&fx, "test_features");
    for (hessian, name) in structures() {
        let want = &fx["structures"][name];
        let post = fit(&r, hessian, Some(want["fitted"].as_f64().unwrap()));
        let (_, cov) = post.functional_distribution(&candidates).unwrap();
        close(name, &cov, &json_flat(&want["fvar"]), 1e-9);
        let probit: Vec<f64> = post
            .probit(&candidates)
            .unwrap()
            .as_slice()
            .iter()
            .map(|&v| f64::from(v))
            .collect();
        close(name, &probit, &json_flat(&want["probit"]), 1e-6);
    }
}

#[test]
fn weight_draws_have_the_posterior_s_functional_moments() {
    let fx = fixture();
    let r = reference(&fx);
    let candidates = features(&fx, "test_features");
    let (c, d) = (candidates.classes(), candidates.dim());
    let h: Vec<f64> = candidates.row(0).iter().map(|&v| f64::from(v)).collect();
    let draws = 4000;
    for (hessian, name) in structures() {
        let post = fit(&r, hessian, Some(1.0));
        let (mean, cov) = post.functional_distribution(&candidates).unwrap();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let logits: Vec<Vec<f64>> = (0..draws)
            .map(|_| {
                let (w, b) = post.sample_weights(&mut rng);
                (0..c)
                    .map(|k| b[k] + (0..d).map(|j| w[k * d + j] * h[j]).sum::<f64>())
                    .collect()
            })
            .collect();
        for k in 0..c {
            let m = logits.iter().map(|z| z[k]).sum::<f64>() / draws as f64;
            let sd = cov[k * c + k].sqrt();
            assert!((m - mean[k]).abs() < 0.1 * sd, "{name}: mean of logit {k}");
            for l in 0..c {
                let s = logits
                    .iter()
                    .map(|z| (z[k] - m) * (z[l] - mean[l]))
                    .sum::<f64>()
                    / draws as f64;
                let scale = (cov[k * c + k] * cov[l * c + l]).sqrt();
                assert!(
                    (s - cov[k * c + l]).abs() < 0.1 * scale,
                    "{name}: covariance ({k}, {l}) {s} against {}",
                    cov[k * c + l]
                );
            }
        }
    }
}

#[test]
fn a_curve_runs_la_and_laplace_draws_on_the_cnn_the_same_way_twice() {
    use super::{kind, normalised, run_small, small_spec, strip_timings, tmp};
    use alkit::strategies::{LaplaceHessian, PosteriorKind};
    // Diagonal here: the full Hessian of the CNN's 1,290 last-layer parameters takes seconds
    // per round to decompose (its agreement with laplace-torch is checked above).
    let (train, test) = normalised();
    let mut spec = small_spec(vec![kind("la"), kind("bald"), kind("batchbald")]);
    spec.scorers.posterior = Some(PosteriorKind::Laplace);
    spec.scorers.hessian = Some(LaplaceHessian::Diag);
    let (a, b) = (tmp("laplace-a"), tmp("laplace-b"));
    let runs = run_small(&spec, &train, &test, &a).unwrap();
    run_small(&spec, &train, &test, &b).unwrap();
    let read = |p: &Path| std::fs::read_to_string(p.join("curve.csv")).unwrap();
    assert_eq!(strip_timings(&read(&a)), strip_timings(&read(&b)));
    // MC dropout's BALD picks other items than BALD over the Laplace posterior's draws: the
    // setting reaches the draws.
    let picks = |runs: &[alkit::acquire::RunState], name: &str| -> Vec<(usize, usize)> {
        runs.iter()
            .find(|r| r.strategy == name)
            .unwrap()
            .labeled
            .clone()
    };
    spec.scorers.posterior = None;
    spec.strategies = vec![kind("bald")];
    let dropout = run_small(&spec, &train, &test, &tmp("laplace-c")).unwrap();
    assert_ne!(picks(&runs, "bald"), picks(&dropout, "bald"));
    // And dropout injected before the last layer picks otherwise again.
    spec.scorers.posterior = Some(PosteriorKind::InsertedDropout);
    let inserted = run_small(&spec, &train, &test, &tmp("laplace-d")).unwrap();
    assert_ne!(picks(&inserted, "bald"), picks(&dropout, "bald"));
    assert_ne!(picks(&inserted, "bald"), picks(&runs, "bald"));
}

#[test]
fn an_ensemble_with_laplace_draws_and_a_head_too_large_for_full_are_refused() {
    use alkit::acquisition::ScoreError;
    let fx = fixture();
    let r = reference(&fx);
    let e = LastLayerLaplace {
        hessian: Hessian::Full,
        prior_precision: Some(-1.0),
    }
    .fit(&r)
    .unwrap_err();
    assert!(
        matches!(
            e,
            ScoreError::Setting {
                setting: "prior_precision",
                ..
            }
        ),
        "{e}"
    );
    // 100 classes of 32 features and a bias: 3,300 parameters, above the full limit.
    let wide = Features::new(vec![0.5; 64], 2, 32, vec![0.1; 3200], vec![0.0; 100]).unwrap();
    let r = Reference::new(wide, vec![3, 7]).unwrap();
    let e = LastLayerLaplace {
        hessian: Hessian::Full,
        prior_precision: None,
    }
    .fit(&r)
    .unwrap_err();
    assert!(e.to_string().contains("use kron or diag"), "{e}");
    let mut s = alkit::strategies::ScorerSettings {
        posterior: Some(alkit::strategies::PosteriorKind::Laplace),
        ..Default::default()
    };
    s.members = true;
    let e = s.validate().unwrap_err();
    assert!(e.to_string().contains("ensemble"), "{e}");
}

#[test]
fn draws_are_the_seed_s_and_shared_by_every_candidate() {
    use alkit::acquisition::{Needs, SampleRequest};
    let fx = fixture();
    let r = reference(&fx);
    let candidates = features(&fx, "test_features");
    let post = fit(&r, Hessian::Kron, None);
    let draw = |seed| {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        post.draws(&candidates, 3, &mut rng).unwrap()
    };
    assert_eq!(draw(1), draw(1));
    assert_ne!(draw(1), draw(2));
    // Draw s of the first 10 candidates alone is draw s of all 60: one weight draw each.
    let few = Features::new(
        candidates.as_slice()[..10 * candidates.dim()].to_vec(),
        10,
        candidates.dim(),
        candidates.weight().to_vec(),
        candidates.bias().to_vec(),
    )
    .unwrap();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    let alone = post.draws(&few, 3, &mut rng).unwrap();
    let all = draw(1);
    for (a, b) in alone.draws().iter().zip(all.draws()) {
        assert_eq!(a.as_slice(), &b.as_slice()[..10 * b.classes()]);
    }
    let laplace = LastLayerLaplace::default();
    let needs = Needs::samples(SampleRequest::Laplace {
        samples: 3,
        laplace,
    });
    assert!(needs.reference);
    // Another last layer than the posterior's is refused.
    let other = Features::new(
        few.as_slice().to_vec(),
        10,
        few.dim(),
        vec![0.0; few.weight().len()],
        few.bias().to_vec(),
    )
    .unwrap();
    assert!(post.probit(&other).is_err());
}

#[test]
fn heads_too_large_for_their_structure_are_refused_before_allocating() {
    // 5,000 classes of 2 features: kron's factor would be 5,000 x 5,000.
    let f = Features::new(vec![1.0; 4], 2, 2, vec![0.1; 10_000], vec![0.0; 5_000]).unwrap();
    let r = Reference::new(f, vec![0, 1]).unwrap();
    let e = fit_err(&r, Hessian::Kron);
    assert!(e.contains("use diag"), "{e}");
    // A posterior fitted under kron or diag has no dense precision past the full limit.
    let f = Features::new(vec![1.0; 128], 2, 64, vec![0.1; 64 * 40], vec![0.0; 40]).unwrap();
    let r = Reference::new(f, vec![0, 1]).unwrap();
    let post = fit(&r, Hessian::Diag, Some(1.0));
    assert!(post.precision().is_err());
}

fn fit_err(r: &Reference, hessian: Hessian) -> String {
    LastLayerLaplace {
        hessian,
        prior_precision: None,
    }
    .fit(r)
    .unwrap_err()
    .to_string()
}
