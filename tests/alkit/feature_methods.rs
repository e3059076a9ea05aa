//! The feature-space methods of the acquisition crate against independent numpy references
//! written from the papers (tests/reference/posthoc.py, diverse.py, conformal.py), on real
//! features: an MLP head trained by `alkit train` on the shipped MNIST embeddings, its
//! penultimate features of the test split as candidates and of the train split as the
//! training statistics. Selections are replayed in the reference with the very `u64`s the
//! Rust side drew (recorded), so picks must be equal, not similar.
//!
//! The references run in a Python with numpy: `scripts/refpython.sh DIR` makes one and
//! `DIR/env.sh` names it in `ALKIT_PYTHON`. Without it these tests skip with a message; with
//! `ALKIT_REQUIRE_NUMPY=1` (`.ci/run`) a missing Python fails them. The CLI runs (detectors in
//! `ood` and `calibrate`, conformal sets, cold starts, `score --top`) need no Python.

use super::*;
use alkit::acquisition::{
    kmeans, purity_radius, ApsForm, Badge, BatchSelector, Conformal, ConformalScore, CoreSet,
    Features, PostHoc, ProbCover, Reference, TypiClust,
};
use alkit::data::source::load_splits;
use alkit::hub::Hub;
use rand::RngCore;
use serde_json::{json, Value};
use std::sync::Arc;

fn embeddings() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/embeddings/mnist-rp32.safetensors")
}

/// The Python that runs the references, or `None` (a skip, said why) when none is named.
pub(super) fn python() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("ALKIT_PYTHON").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    assert!(
        std::env::var("ALKIT_REQUIRE_NUMPY").as_deref() != Ok("1"),
        "ALKIT_REQUIRE_NUMPY=1 but ALKIT_PYTHON is not set (scripts/refpython.sh DIR, then \
         source DIR/env.sh)"
    );
    #[allow(clippy::print_stderr)]
    {
        eprintln!(
            "skipped: the numpy references need a Python with numpy: scripts/refpython.sh DIR, \
             then source DIR/env.sh (sets ALKIT_PYTHON)"
        );
    }
    None
}

/// Runs `tests/reference/<script>` on `input` and returns its output.
pub(super) fn reference(py: &Path, script: &str, input: &Value, dir: &Path) -> Value {
    let (i, o) = (
        dir.join(format!("{script}.in.json")),
        dir.join(format!("{script}.out.json")),
    );
    std::fs::write(&i, serde_json::to_vec(input).unwrap()).unwrap();
    let out = Command::new(py)
        .arg(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/reference")
                .join(script),
        )
        .arg(&i)
        .arg(&o)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&std::fs::read(&o).unwrap()).unwrap()
}

/// An MLP head trained on the shipped embeddings: `(candidates, training reference)` with
/// the candidates the first `n` test items.
fn trained_head(dir: &Path, n: usize) -> (Features, Reference) {
    let ck_dir = dir.join("head");
    let o = alkit_cmd()
        .args(["-q", "train", "--data"])
        .arg(embeddings())
        .args(["--model", "mlp", "--steps", "300", "--out"])
        .arg(&ck_dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let hub = Hub::new(dir.join("hub"), true);
    let ck = alkit::checkpoint::open(&ck_dir.to_string_lossy(), &hub, &Device::Cpu, &mut Silent)
        .unwrap();
    let splits = load_splits(&embeddings().to_string_lossy(), None, &hub, &mut Silent).unwrap();
    let norm = &ck.config.normalizer;
    let (train, test) = (
        norm.apply(&splits.train).unwrap(),
        norm.apply(&splits.test).unwrap(),
    );
    let all: Vec<usize> = (0..train.len()).collect();
    let r = alkit::predict::reference_of(
        ck.model.as_ref(),
        &train,
        &all,
        256,
        &Device::Cpu,
        &mut Silent,
    )
    .unwrap();
    let idx: Vec<usize> = (0..n).collect();
    let f = alkit::predict::features_of(
        ck.model.as_ref(),
        &test,
        &idx,
        256,
        &Device::Cpu,
        &mut Silent,
    )
    .unwrap();
    (f, r)
}

fn evidence(f: &Features, r: Reference) -> alkit::acquisition::Evidence {
    let mut ev = alkit::acquisition::Evidence::default();
    ev.features = Some(f.clone());
    ev.reference = Some(Arc::new(r));
    ev
}

/// A reference holding the first `m` rows of `r`.
fn first_rows(r: &Reference, m: usize) -> Reference {
    let f = r.features();
    let d = f.dim();
    let h = f.as_slice()[..m * d].to_vec();
    let sub = Features::new(h, m, d, f.weight().to_vec(), f.bias().to_vec()).unwrap();
    Reference::new(sub, r.labels()[..m].to_vec()).unwrap()
}

/// Records every `u64` drawn, for the reference to replay.
struct Recording {
    inner: rand_chacha::ChaCha8Rng,
    drawn: Vec<u64>,
}

impl Recording {
    fn new(seed: u64) -> Self {
        use rand::SeedableRng;
        Self {
            inner: rand_chacha::ChaCha8Rng::seed_from_u64(seed),
            drawn: Vec::new(),
        }
    }
}

impl RngCore for Recording {
    fn next_u32(&mut self) -> u32 {
        panic!("the selectors draw whole u64s (alkit_acquisition::linalg::unit)")
    }
    fn next_u64(&mut self) -> u64 {
        let v = self.inner.next_u64();
        self.drawn.push(v);
        v
    }
    fn fill_bytes(&mut self, _: &mut [u8]) {
        panic!("the selectors draw whole u64s")
    }
}

fn close(got: f64, want: f64, rel: f64, what: &str) {
    assert!(
        (got - want).abs() <= rel * want.abs().max(1e-3),
        "{what}: {got} vs the reference's {want}"
    );
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn ints(v: &Value) -> Vec<usize> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as usize)
        .collect()
}

#[test]
fn post_hoc_detectors_match_the_numpy_reference_on_a_trained_head() {
    let Some(py) = python() else { return };
    let dir = tmp("posthoc-ref");
    let (f, r) = trained_head(&dir, 200);
    let d = f.dim();
    let input = json!({
        "n": f.n(), "d": d, "c": f.classes(),
        "h": f.as_slice(), "w": f.weight(), "b": f.bias(),
        "m": r.len(), "ref_h": r.features().as_slice(), "ref_labels": r.labels(),
        "knn_k": 50, "vim_dim": d / 2,
        "react_percentile": 90.0, "ash_percentile": 90.0, "scale_percentile": 85.0,
        "gen_gamma": 0.1, "gen_m": 100,
    });
    let want = reference(&py, "posthoc.py", &input, &dir);
    let ev = evidence(&f, r);
    // ReLU features: many exact zeros, so ASH's and SCALE's pruning and ReAct's clip act.
    assert!(f.as_slice().iter().filter(|v| **v == 0.0).count() > f.as_slice().len() / 10);
    for detector in PostHoc::DEFAULTS {
        use alkit::acquisition::Scorer;
        let name = detector.name().to_string();
        let got = detector.score(&ev).unwrap();
        let expect = floats(&want[&name]);
        assert_eq!(got.len(), expect.len(), "{name}");
        for (i, (g, w)) in got.iter().zip(&expect).enumerate() {
            close(f64::from(*g), *w, 1e-5, &format!("{name} item {i}"));
        }
    }
}

#[test]
fn batch_selectors_pick_what_the_numpy_reference_picks_with_the_same_draws() {
    let Some(py) = python() else { return };
    let dir = tmp("diverse-ref");
    let (f, r) = trained_head(&dir, 300);
    let (n, d) = (f.n(), f.dim());
    let labeled = first_rows(&r, 40);
    let k = 25;

    // BADGE: one draw per pick after the first.
    let mut rng = Recording::new(1);
    let picks = Badge
        .select(&evidence(&f, first_rows(&r, 0)), k, &mut rng)
        .unwrap();
    let want = reference(
        &py,
        "diverse.py",
        &json!({
            "method": "badge", "n": n, "d": d, "c": f.classes(), "h": f.as_slice(),
            "w": f.weight(), "b": f.bias(), "k": k, "draws": rng.drawn,
        }),
        &dir,
    );
    assert_eq!(picks, ints(&want["picks"]), "badge");
    assert_eq!(want["draws_used"].as_u64(), Some(k as u64 - 1));

    // Core-set from 40 labeled items (no draw), and cold (one draw): picks and radius.
    for m in [40, 0] {
        let mut rng = Recording::new(2);
        let lab = first_rows(&r, m);
        let lab_h = lab.features().as_slice().to_vec();
        let (picks, radius) = CoreSet
            .select_with_radius(&evidence(&f, lab), k, &mut rng)
            .unwrap();
        let want = reference(
            &py,
            "diverse.py",
            &json!({
                "method": "coreset", "n": n, "d": d, "h": f.as_slice(), "m": m, "ref_h": lab_h,
                "k": k, "draws": rng.drawn,
            }),
            &dir,
        );
        assert_eq!(picks, ints(&want["picks"]), "coreset from {m} labeled");
        close(
            radius,
            want["radius"].as_f64().unwrap(),
            1e-5,
            "covering radius",
        );
    }

    // TypiClust: the selection from the clustering the selector itself makes (k-means on
    // unit-length rows, drawn from the same seed), against the authors' procedure.
    let all: Vec<f32> = labeled
        .features()
        .as_slice()
        .iter()
        .chain(f.as_slice())
        .copied()
        .collect();
    let unit = alkit::acquisition::linalg::normalized(&all, d, 0.0);
    let m = labeled.len();
    let mut rng = Recording::new(3);
    let clusters = kmeans(&unit, d, m + k, &mut rng).unwrap();
    let typi = TypiClust::default();
    let picks = typi
        .select_from_clusters(&unit, d, &clusters, m, k)
        .unwrap();
    let mut again = Recording::new(3);
    assert_eq!(
        typi.select(&evidence(&f, first_rows(&r, m)), k, &mut again)
            .unwrap(),
        picks,
        "the selector is its clustering plus this selection"
    );
    let want = reference(
        &py,
        "diverse.py",
        &json!({
            "method": "typiclust", "n": n, "d": d, "h": &unit[m * d..], "m": m,
            "ref_h": &unit[..m * d], "clusters": clusters, "k": k, "min_cluster_size": 5,
            "knn": 20, "draws": [],
        }),
        &dir,
    );
    assert_eq!(picks, ints(&want["picks"]), "typiclust");
    // k-means converged: every row sits in the cluster of its nearest mean.
    let kk = m + k;
    let mut means = vec![0f64; kk * d];
    let mut counts = vec![0usize; kk];
    for (i, &c) in clusters.iter().enumerate() {
        counts[c] += 1;
        for j in 0..d {
            means[c * d + j] += f64::from(unit[i * d + j]);
        }
    }
    for c in 0..kk {
        for j in 0..d {
            means[c * d + j] /= counts[c].max(1) as f64;
        }
    }
    let dist = |i: usize, c: usize| -> f64 {
        (0..d)
            .map(|j| (f64::from(unit[i * d + j]) - means[c * d + j]).powi(2))
            .sum()
    };
    for (i, &c) in clusters.iter().enumerate() {
        let best = (0..kk)
            .filter(|&o| counts[o] > 0)
            .map(|o| dist(i, o))
            .fold(f64::INFINITY, f64::min);
        assert!(
            dist(i, c) <= best + 1e-5,
            "row {i} is not in its nearest cluster"
        );
    }

    // ProbCover: the purity radius over a 10-means clustering, then the greedy cover.
    let mut rng = Recording::new(4);
    let c10 = kmeans(&unit, d, 10, &mut rng).unwrap();
    let delta = purity_radius(&unit, d, &c10, 0.95).unwrap();
    let want = reference(
        &py,
        "diverse.py",
        &json!({
            "method": "probcover_delta", "n": unit.len() / d, "d": d, "h": unit,
            "clusters": c10, "alpha": 0.95, "draws": [],
        }),
        &dir,
    );
    close(
        delta,
        want["delta"].as_f64().unwrap(),
        1e-5,
        "purity radius",
    );
    let mut rng = Recording::new(5);
    let picks = ProbCover::select_with_radius(&unit, d, m, k, delta, &mut rng).unwrap();
    let want = reference(
        &py,
        "diverse.py",
        &json!({
            "method": "probcover", "n": n, "d": d, "h": &unit[m * d..], "m": m,
            "ref_h": &unit[..m * d], "delta": delta, "k": k, "draws": rng.drawn,
        }),
        &dir,
    );
    assert_eq!(picks, ints(&want["picks"]), "probcover");
    let given = ProbCover {
        delta: Some(delta as f32),
        ..ProbCover::default()
    };
    let mut rng = Recording::new(5);
    let through = given
        .select(&evidence(&f, first_rows(&r, m)), k, &mut rng)
        .unwrap();
    // The radius given as f32 may move a boundary pair; the picks agree on the head.
    assert_eq!(through[..5], picks[..5]);
}

/// Every conformal score alkit offers, with the form name the references use.
fn conformal_forms() -> Vec<(ConformalScore, &'static str)> {
    let raps = |form| ConformalScore::Raps {
        lambda: 0.01,
        k_reg: 5,
        form,
    };
    let aps = |form| ConformalScore::Aps { form };
    vec![
        (ConformalScore::Lac, "romano"),
        (aps(ApsForm::Romano), "romano"),
        (aps(ApsForm::Randomized), "randomized"),
        (aps(ApsForm::Inclusive), "inclusive"),
        (raps(ApsForm::Romano), "romano"),
        (raps(ApsForm::Randomized), "randomized"),
        (raps(ApsForm::Inclusive), "inclusive"),
    ]
}

/// The probabilities `(500, 10)` of a head trained on the shipped embeddings for the first 500
/// test items, and those items' labels.
fn head_probs(dir: &Path) -> (alkit::acquisition::Probs, Vec<usize>) {
    let (f, _) = trained_head(dir, 500);
    let c = f.classes();
    let probs: Vec<f32> = (0..f.n())
        .flat_map(|i| {
            let h: Vec<f64> = f.row(i).iter().map(|&v| f64::from(v)).collect();
            let z = alkit::acquisition::linalg::logits(&h, f.weight(), f.bias());
            let lse = alkit::acquisition::linalg::logsumexp(&z);
            z.into_iter()
                .map(move |v| (v - lse).exp() as f32)
                .collect::<Vec<_>>()
        })
        .collect();
    let probs = alkit::acquisition::Probs::new(probs, f.n(), c).unwrap();
    let hub = Hub::new(dir.join("hub"), true);
    let splits = load_splits(&embeddings().to_string_lossy(), None, &hub, &mut Silent).unwrap();
    let labels: Vec<usize> = splits.test.labels()[..f.n()]
        .iter()
        .map(|&l| l as usize)
        .collect();
    (probs, labels)
}

/// The rows `idx` of `probs`, in that order.
fn rows_of(probs: &alkit::acquisition::Probs, idx: &[usize]) -> alkit::acquisition::Probs {
    let v: Vec<f32> = idx.iter().flat_map(|&i| probs.row(i).to_vec()).collect();
    alkit::acquisition::Probs::new(v, idx.len(), probs.classes()).unwrap()
}

/// One uniform draw in `[0, 1)` per item, for the randomised forms.
fn item_draws(n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| ((i * 7919) % 1000) as f64 / 1000.0)
        .collect()
}

#[test]
fn conformal_sets_match_the_numpy_reference_and_cover_over_random_splits() {
    let dir = tmp("conformal-ref");
    let (probs, labels) = head_probs(&dir);
    let (n, c) = (probs.n(), probs.classes());
    let rows = |idx: &[usize]| rows_of(&probs, idx);
    let draws = item_draws(n);
    let forms = conformal_forms();
    if let Some(py) = python() {
        let cal: Vec<usize> = (0..250).collect();
        let test: Vec<usize> = (250..500).collect();
        for &(score, form) in &forms {
            let (lambda, k_reg) = match score {
                ConformalScore::Raps { lambda, k_reg, .. } => (lambda, k_reg),
                _ => (0.0, 0),
            };
            let method = score.name().split('-').next().unwrap();
            let given = if score.randomized() {
                &draws[..250]
            } else {
                &[]
            };
            let conf =
                Conformal::calibrate(score, &rows(&cal), &labels[..250], 0.1, given).unwrap();
            let want = reference(
                &py,
                "conformal.py",
                &json!({
                    "method": method, "form": form, "alpha": 0.1, "lambda": lambda,
                    "k_reg": k_reg, "n_cal": 250, "c": c, "cal_probs": rows(&cal).as_slice(),
                    "cal_labels": &labels[..250], "n": 250, "probs": rows(&test).as_slice(),
                    "u_cal": &draws[..250], "u": &draws[250..],
                }),
                &dir,
            );
            close(
                conf.threshold,
                want["qhat"].as_f64().unwrap(),
                1e-9,
                score.name(),
            );
            for (j, &i) in test.iter().enumerate() {
                assert_eq!(
                    conf.set(probs.row(i), draws[i]),
                    ints(&want["sets"][j]),
                    "{} item {i}",
                    score.name()
                );
            }
        }
    }
    // Romano's sets always hold the top class; on this 90%-accurate head at alpha 0.1 the
    // inclusive form empties some of the surest items' sets, which Romano's never does.
    let romano = Conformal::calibrate(
        forms[1].0,
        &rows(&(0..250).collect::<Vec<_>>()),
        &labels[..250],
        0.1,
        &[],
    )
    .unwrap();
    assert!((250..500).all(|i| !romano.set(probs.row(i), 0.0).is_empty()));
    // The guarantee: over random calibration/evaluation splits of exchangeable items the
    // mean coverage is at least 1 - alpha (and, for LAC, whose scores do not tie, below
    // 1 - alpha + 1/(n_cal + 1)). 400 splits: the mean's Monte Carlo error is about 0.001.
    use rand::seq::SliceRandom;
    use rand::SeedableRng;
    for alpha in [0.05, 0.1, 0.2] {
        for &(score, _) in &forms {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
            let mut covered = 0usize;
            let splits = 400;
            for _ in 0..splits {
                let mut order: Vec<usize> = (0..n).collect();
                order.shuffle(&mut rng);
                let (cal, test) = order.split_at(250);
                let cal_labels: Vec<usize> = cal.iter().map(|&i| labels[i]).collect();
                let cal_draws: Vec<f64> = cal.iter().map(|&i| draws[i]).collect();
                let given = if score.randomized() {
                    &cal_draws[..]
                } else {
                    &[]
                };
                let conf =
                    Conformal::calibrate(score, &rows(cal), &cal_labels, alpha, given).unwrap();
                covered += test
                    .iter()
                    .filter(|&&i| conf.set(probs.row(i), draws[i]).contains(&labels[i]))
                    .count();
            }
            let mean = covered as f64 / (splits * 250) as f64;
            assert!(
                mean >= 1.0 - alpha - 0.005,
                "{} at {alpha}: {mean}",
                score.name()
            );
            if score == ConformalScore::Lac {
                assert!(
                    mean <= 1.0 - alpha + 1.0 / 251.0 + 0.005,
                    "lac at {alpha}: {mean}"
                );
            }
        }
    }
}

/// The sets of `score` on the fixture's input, as `conformal_libs.py` names the form.
fn fixture_sets(input: &serde_json::Value, score: ConformalScore) -> (f64, Vec<Vec<usize>>) {
    let f32s = |v: &serde_json::Value| -> Vec<f32> {
        v.as_array()
            .unwrap()
            .iter()
            .flat_map(|r| {
                r.as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_f64().unwrap() as f32)
            })
            .collect()
    };
    let f64s = |v: &serde_json::Value| -> Vec<f64> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    };
    let (cal, test) = (f32s(&input["cal_probs"]), f32s(&input["test_probs"]));
    let labels: Vec<usize> = ints(&input["cal_labels"]);
    let c = cal.len() / labels.len();
    let cal = alkit::acquisition::Probs::new(cal, labels.len(), c).unwrap();
    let (u_cal, u_test) = (f64s(&input["u_cal"]), f64s(&input["u_test"]));
    let given = if score.randomized() { &u_cal[..] } else { &[] };
    let alpha = input["alpha"].as_f64().unwrap();
    let conf = Conformal::calibrate(score, &cal, &labels, alpha, given).unwrap();
    let sets = test
        .chunks(c)
        .zip(&u_test)
        .map(|(p, &u)| conf.set(p, u))
        .collect();
    (conf.threshold, sets)
}

#[test]
fn conformal_sets_equal_mapie_and_torchcp_on_the_same_draws() {
    // Recorded by tests/reference/conformal_libs.py --example (MAPIE 1.6.0 and torchcp
    // 1.2.1 on 500 + 200 seeded rows of 10 classes, with the same uniform draws injected):
    // every form torchcp has, and MAPIE's LAC, APS and randomised APS, equal alkit's sets.
    let fx: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/conformal_libs.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let input = &fx["input"];
    let (lambda, k_reg) = (
        input["lambda"].as_f64().unwrap() as f32,
        input["k_reg"].as_u64().unwrap() as usize,
    );
    let mut compared = 0;
    for (score, _) in conformal_forms() {
        let score = match score {
            ConformalScore::Raps { form, .. } => ConformalScore::Raps {
                lambda,
                k_reg,
                form,
            },
            other => other,
        };
        let (q, sets) = fixture_sets(input, score);
        let key = score.name().replace('-', "_");
        for lib in ["torchcp", "mapie"] {
            let Some(want) = fx[lib].get(&key) else {
                continue;
            };
            close(
                q,
                want["threshold"].as_f64().unwrap(),
                1e-7,
                &format!("{lib} {key}"),
            );
            for (j, set) in sets.iter().enumerate() {
                assert_eq!(set, &ints(&want["sets"][j]), "{lib} {key} row {j}");
            }
            compared += 1;
        }
    }
    assert_eq!(compared, 10);
    // MAPIE itself, installed from PyPI in the reference venv (scripts/refpython.sh), on the
    // same input now: its LAC, APS and randomised APS.
    if let Some(py) = python() {
        let dir = tmp("conformal-mapie");
        let live = reference(&py, "conformal_libs.py", input, &dir);
        let mapie = &live["mapie"];
        assert!(mapie.is_object(), "MAPIE did not run: {live}");
        for score in [
            ConformalScore::Lac,
            ConformalScore::APS,
            ConformalScore::Aps {
                form: ApsForm::Randomized,
            },
        ] {
            let (q, sets) = fixture_sets(input, score);
            let want = &mapie[score.name().replace('-', "_")];
            close(q, want["threshold"].as_f64().unwrap(), 1e-7, score.name());
            for (j, set) in sets.iter().enumerate() {
                assert_eq!(
                    set,
                    &ints(&want["sets"][j]),
                    "live MAPIE {} row {j}",
                    score.name()
                );
            }
        }
    }
}

/// MNIST test images inverted (255 - x): far out of distribution, same item shape.
fn inverted_mnist(dir: &Path) -> PathBuf {
    let (train, test) = shipped();
    let flip = |ds: &Dataset| {
        let x: Vec<f32> = ds.features().iter().map(|v| 1.0 - v).collect();
        Dataset::new(
            x,
            ds.labels().to_vec(),
            ds.item_shape().to_vec(),
            ds.classes(),
        )
        .unwrap()
    };
    let out = dir.join("inverted");
    write_split_folder(&out, &flip(&train), &flip(&test));
    out
}

#[test]
fn ood_and_calibrate_report_every_detector_and_conformal_sets() {
    let dir = tmp("detectors-cli");
    let detectors = "max-logit,energy,gen,react,ash,ash-b,scale,knn,mahalanobis,vim";
    let ood = inverted_mnist(&dir);
    let o = alkit_cmd()
        .args(["-q", "ood", "--train-data", "data", "--ood-data"])
        .arg(&ood)
        .args([
            "--model", "mlp", "--steps", "200", "--scorer", detectors, "--out",
        ])
        .arg(dir.join("ood"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let metrics: Value =
        serde_json::from_slice(&std::fs::read(dir.join("ood/metrics.json")).unwrap()).unwrap();
    for name in detectors.split(',') {
        let auroc = metrics[name]["auroc"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&auroc), "{name}: {auroc}");
    }
    // Inverted digits are far from every training feature.
    for name in ["knn", "mahalanobis"] {
        let auroc = metrics[name]["auroc"].as_f64().unwrap();
        assert!(
            auroc > 0.9,
            "{name} separates inverted digits: AUROC {auroc}"
        );
    }
    // The saved model evaluated again with its training statistics cached (computed into the
    // cache, then read from it): the same scores, byte for byte, as computed in memory.
    let first = std::fs::read(dir.join("ood/scores.csv")).unwrap();
    for run in ["again", "cached"] {
        let o = alkit_cmd()
            .args(["-q", "ood", "--train-data", "data", "--ood-data"])
            .arg(&ood)
            .arg("--checkpoint")
            .arg(dir.join("ood/model"))
            .args(["--scorer", detectors, "--embed-cache"])
            .arg(dir.join("cache"))
            .arg("--out")
            .arg(dir.join(run))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(
            std::fs::read(dir.join(run).join("scores.csv")).unwrap() == first,
            "{run}"
        );
    }
    assert_eq!(std::fs::read_dir(dir.join("cache")).unwrap().count(), 1);
    let o = alkit_cmd()
        .args([
            "-q",
            "calibrate",
            "--data",
            "data",
            "--model",
            "mlp",
            "--steps",
            "200",
        ])
        .args(["--scorer", detectors, "--conformal", "0.1", "--out"])
        .arg(dir.join("cal"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("conformal sets at alpha 0.1"), "{text}");
    let metrics: Value =
        serde_json::from_slice(&std::fs::read(dir.join("cal/metrics.json")).unwrap()).unwrap();
    let rows = metrics["conformal"].as_array().unwrap();
    let names: Vec<(&str, bool)> = rows
        .iter()
        .map(|r| (r["score"].as_str().unwrap(), r["mondrian"] == json!(true)))
        .collect();
    let scores = ["lac", "aps", "raps", "aps-randomized", "raps-randomized"];
    let want: Vec<(&str, bool)> = scores
        .iter()
        .flat_map(|&s| [(s, false), (s, true)])
        .collect();
    assert_eq!(names, want);
    for r in rows {
        assert_eq!(r["calibration_items"].as_u64(), Some(250));
        // A Mondrian row has a threshold per class and no single one.
        match r["mondrian"].as_bool().unwrap() {
            true => {
                assert_eq!(r["thresholds"].as_array().unwrap().len(), 10);
                assert!(r["threshold"].is_null());
            }
            false => assert!(r.get("thresholds").is_none()),
        }
        assert_eq!(r["per_class"].as_array().unwrap().len(), 10);
        let size = r["mean_size"].as_f64().unwrap();
        // Romano's rule never gives an empty set: a mean size of at least 1.
        let least = if r["score"].as_str().unwrap().contains('-') || r["score"] == "lac" {
            0.0
        } else {
            1.0
        };
        assert!((least..=10.0).contains(&size), "{}: {size}", r["score"]);
    }
    // A level outside (0, 1) is refused by name.
    let o = alkit_cmd()
        .args([
            "-q",
            "calibrate",
            "--data",
            "data",
            "--model",
            "mlp",
            "--steps",
            "1",
        ])
        .args(["--conformal", "1.5", "--out"])
        .arg(dir.join("bad"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--conformal"));
}

#[test]
fn cold_starts_and_joint_picks_run_from_the_command_line_deterministically() {
    let dir = tmp("cold-start");
    let run = |out: &str| {
        let o = alkit_cmd()
            .args(["-q", "curve", "--data"])
            .arg(embeddings())
            .args([
                "--model",
                "linear",
                "--scorer",
                "typiclust,probcover,coreset,badge,random",
            ])
            .args([
                "--initial",
                "10",
                "--query",
                "10",
                "--cycles",
                "2",
                "--steps",
                "50",
            ])
            .args(["--cold-start", "--out"])
            .arg(dir.join(out))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        strip_timings(&std::fs::read_to_string(dir.join(out).join("curve.csv")).unwrap())
    };
    let a = run("a");
    assert_eq!(a, run("b"), "same seed, same curve");
    let initial = |strategy: &str| -> Vec<u64> {
        let state: Value = serde_json::from_slice(
            &std::fs::read(state_path(&dir.join("a"), strategy, 0)).unwrap(),
        )
        .unwrap();
        let labeled = state["labeled"].as_array().unwrap();
        let mut first: Vec<u64> = labeled
            .iter()
            .filter(|l| l[1].as_u64() == Some(0))
            .map(|l| l[0].as_u64().unwrap())
            .collect();
        first.sort_unstable();
        first
    };
    assert_eq!(initial("random").len(), 10);
    // The cold-start selectors chose their own first ten; BADGE (which needs a model's
    // predictions) starts from the random seed set.
    assert_ne!(initial("typiclust"), initial("random"));
    assert_ne!(initial("probcover"), initial("random"));
    assert_eq!(initial("badge"), initial("random"));
    // A labeling session's first batch, before any label: chosen by a cold-start selector,
    // drawn at random for any other strategy.
    let first_batch = |scorer: &str| -> String {
        let state = dir.join(format!("session-{scorer}"));
        let o = alkit_cmd()
            .args(["-q", "init", "--pool"])
            .arg(embeddings())
            .args(["--model", "linear", "--state"])
            .arg(&state)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let out = dir.join(format!("{scorer}-batch.csv"));
        let o = alkit_cmd()
            .args(["-q", "query", "--state"])
            .arg(&state)
            .args(["--scorer", scorer, "--n", "6", "--out"])
            .arg(&out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let said = String::from_utf8_lossy(&o.stdout);
        assert!(said.contains(&format!("by {scorer}")), "{scorer}: {said}");
        std::fs::read_to_string(out).unwrap()
    };
    let typi = first_batch("typiclust");
    assert_eq!(typi.lines().count(), 7);
    assert_ne!(typi, first_batch("coreset"));
    // `score --top K` picks jointly, unsharded, and refuses a shard by name.
    let ck = dir.join("head");
    let o = alkit_cmd()
        .args(["-q", "train", "--data"])
        .arg(embeddings())
        .args(["--model", "mlp", "--steps", "100", "--out"])
        .arg(&ck)
        .output()
        .unwrap();
    assert!(o.status.success());
    for selector in ["badge", "coreset", "typiclust", "probcover"] {
        let out = dir.join(format!("{selector}.csv"));
        let o = alkit_cmd()
            .args(["-q", "score", "--checkpoint"])
            .arg(&ck)
            .arg("--data")
            .arg(embeddings())
            .args(["--scorer", selector, "--top", "7", "--out"])
            .arg(&out)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{selector}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let text = std::fs::read_to_string(&out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], format!("index,id,{selector}"));
        assert_eq!(lines.len(), 8);
        let mut ids: Vec<&str> = lines[1..]
            .iter()
            .map(|l| l.split(',').nth(1).unwrap())
            .collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 7, "{selector} picks distinct items");
        let o = alkit_cmd()
            .args(["-q", "score", "--checkpoint"])
            .arg(&ck)
            .arg("--data")
            .arg(embeddings())
            .args([
                "--scorer", selector, "--top", "7", "--shard", "0/2", "--out",
            ])
            .arg(dir.join("shard.csv"))
            .output()
            .unwrap();
        assert!(!o.status.success());
        assert!(String::from_utf8_lossy(&o.stderr).contains("unsharded"));
    }
}

#[test]
fn mondrian_sets_match_crepes_and_cover_every_class() {
    use alkit::acquisition::ClassConformal;
    use rand::seq::SliceRandom;
    use rand::SeedableRng;
    let dir = tmp("mondrian");
    let (probs, labels) = head_probs(&dir);
    let (n, c) = (probs.n(), probs.classes());
    let rows = |idx: &[usize]| rows_of(&probs, idx);
    let draws = item_draws(n);
    let forms = conformal_forms();
    if let Some(py) = python() {
        let (cal, test): (Vec<usize>, Vec<usize>) = ((0..250).collect(), (250..500).collect());
        for &(score, _) in &forms {
            let given = if score.randomized() {
                &draws[..250]
            } else {
                &[]
            };
            let per =
                ClassConformal::calibrate(score, &rows(&cal), &labels[..250], 0.1, given).unwrap();
            let cal_scores: Vec<f64> = cal
                .iter()
                .map(|&i| score.class_scores(probs.row(i), draws[i])[labels[i]])
                .collect();
            let scores: Vec<Vec<f64>> = test
                .iter()
                .map(|&i| score.class_scores(probs.row(i), draws[i]))
                .collect();
            let want = reference(
                &py,
                "mondrian_crepes.py",
                &json!({"alpha": 0.1, "classes": c, "cal_scores": cal_scores,
                        "cal_labels": &labels[..250], "scores": scores}),
                &dir,
            );
            let mut boundary = 0;
            for (j, &i) in test.iter().enumerate() {
                let got = per.set(probs.row(i), draws[i]);
                for k in 0..c {
                    let theirs = want["sets"][j][k].as_i64() == Some(1);
                    let p = want["p"][j][k].as_f64().unwrap();
                    if (p - 0.1).abs() < 1e-12 {
                        // crepes keeps p >= alpha; the split rule drops a score above the
                        // quantile, which is where p equals alpha.
                        boundary += 1;
                        continue;
                    }
                    assert_eq!(
                        got.contains(&k),
                        theirs,
                        "{} item {i} class {k}",
                        score.name()
                    );
                }
            }
            assert!(boundary < 25, "{}: {boundary} boundary cells", score.name());
        }
    }
    // The class-conditional guarantee: over random splits, every class's items are covered at
    // least 1 - alpha of the time (the marginal rule promises this only on average over
    // classes). 400 splits of about 25 items per class: a class's mean has a Monte Carlo
    // error near 0.003.
    let alpha = 0.1;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
    let (mut hit, mut seen) = (vec![0usize; c], vec![0usize; c]);
    for _ in 0..400 {
        let mut order: Vec<usize> = (0..n).collect();
        order.shuffle(&mut rng);
        let (cal, test) = order.split_at(250);
        let cal_labels: Vec<usize> = cal.iter().map(|&i| labels[i]).collect();
        let per =
            ClassConformal::calibrate(ConformalScore::Lac, &rows(cal), &cal_labels, alpha, &[])
                .unwrap();
        for &i in test {
            seen[labels[i]] += 1;
            hit[labels[i]] += usize::from(per.set(probs.row(i), 0.0).contains(&labels[i]));
        }
    }
    for k in 0..c {
        let cov = hit[k] as f64 / seen[k] as f64;
        assert!(cov >= 1.0 - alpha - 0.012, "class {k}: {cov}");
    }
}
