//! Uncertainty over the plane on two moons: how a model's uncertainty behaves far from the
//! data (DUQ Fig. 1/4; Ulmer & Cina 2021, Fig. 3).
//!
//! Data from the seed: `points` training moons (noise `noise`), 1,000 held-out moons, and
//! 1,000 points uniform on the annulus at distance 2 to 4 from the training data's centre;
//! the Platt-scaled network also draws `points / 2` validation moons from a stream of its
//! own (Ulmer & Cina's 500 training and 250 validation points), so that every model sees the
//! same training, held-out and far points.
//! Reported: held-out accuracy, and `auroc_far`, the AUROC separating held-out moons from
//! annulus points by the model's uncertainty (annulus positive). The surfaces are the
//! uncertainty score, and the magnitude of its input gradient `||d score / d x||`, on a
//! 200 x 200 grid covering the annulus. Every score is computed with differentiable tensor
//! ops, so the gradient is one autograd pass (first order only).

mod settings;
mod spec;

pub use settings::{SurfaceModelKind, SurfaceScorer, SurfaceSettings};
pub use spec::{SurfaceModel, SurfaceScore, SurfaceSpec};

use crate::data::moons::{annulus, moons};
use crate::data::Dataset;
use crate::duq::DuqMlp;
use crate::error::Result;
use crate::metrics::{ood_metrics, Platt};
use crate::models::Arch;
use crate::nn::layers::log_probs;
use crate::nn::{BayesMlp, BayesMlpConfig, Classifier, MlpConfig, Mode};
use crate::observe::Silent;
use crate::plot::{heatmaps_png, Heatmap};
use crate::rng::{stream, Purpose, Rng};
use crate::train::{fit_softmax, train, TrainConfig, TrainRngs};
use candle_core::{DType, Device, Tensor, Var, D};
use serde::Serialize;

/// A computed surface and its metrics.
#[derive(Debug, Clone, Serialize)]
pub struct Surface {
    /// Held-out accuracy.
    pub accuracy: f64,
    /// AUROC of held-out moons vs the far annulus by the uncertainty score.
    pub auroc_far: f64,
    /// Score name.
    pub scorer: String,
    /// The model, as titles name it ([`SurfaceModel::label`]).
    #[serde(skip)]
    pub model: String,
    /// Uncertainty on the grid `(n, n)`, row 0 at the top.
    #[serde(skip)]
    pub grid: Vec<f64>,
    /// `||d score / d x||` on the grid.
    #[serde(skip)]
    pub gradient: Vec<f64>,
    /// Grid size.
    #[serde(skip)]
    pub n: usize,
    /// `[x_min, x_max, y_min, y_max]`.
    pub extent: [f64; 4],
    /// Training points `(x, y, label)`.
    #[serde(skip)]
    pub train_points: Vec<(f64, f64, u32)>,
}

/// A score over probability samples `p (S, b, c)`, as differentiable ops -> `(b,)`.
fn score_of(p: &Tensor, score: SurfaceScore) -> Result<Tensor> {
    let s = p.dim(0)? as f64;
    let mean = p.mean(0)?;
    let ent = |q: &Tensor| -> Result<Tensor> {
        Ok((q * (q.clamp(1e-30, 1.0)?.log()?))?.sum(D::Minus1)?.neg()?)
    };
    Ok(match score {
        SurfaceScore::MaxProb => (1.0 - mean.max(D::Minus1)?)?,
        SurfaceScore::Entropy => ent(&mean)?,
        SurfaceScore::ClassVariance => p
            .broadcast_sub(&mean.unsqueeze(0)?)?
            .sqr()?
            .sum(0)?
            .affine(1.0 / s, 0.0)?
            .mean(D::Minus1)?,
        SurfaceScore::Bald => (ent(&mean)? - ent(p)?.mean(0)?)?,
    })
}

/// Trained models behind one surface.
enum Fitted {
    Duq(DuqMlp),
    Softmax {
        members: Vec<Box<dyn Classifier>>,
        mc: Option<usize>,
    },
    Platt {
        model: Box<dyn Classifier>,
        platt: Platt,
    },
}

impl Fitted {
    /// `(uncertainty (b,), prediction (b,))` for `x (b, 2)`; differentiable w.r.t. `x`.
    /// Dropout masks for MC models come from `rng`.
    fn score(&self, x: &Tensor, score: SurfaceScore, rng: &mut Rng) -> Result<(Tensor, Vec<u32>)> {
        let probs = match self {
            Fitted::Duq(m) => {
                let k = m.forward(x, false)?.head.kernel;
                let pred = k.argmax(D::Minus1)?.to_vec1::<u32>()?;
                return Ok(((1.0 - k.max(D::Minus1)?)?, pred));
            }
            Fitted::Softmax { members, mc } => {
                let mut ps = Vec::new();
                for m in members {
                    match mc {
                        Some(t) => {
                            for _ in 0..*t {
                                ps.push(log_probs(&m.forward(x, &mut Mode::Train(rng))?)?.exp()?);
                            }
                        }
                        None => ps.push(log_probs(&m.forward(x, &mut Mode::Eval)?)?.exp()?),
                    }
                }
                Tensor::stack(&ps, 0)?
            }
            Fitted::Platt { model, platt } => {
                // softmax(a l + (0, b)) = (1 - p, p), p = sigmoid(a (l1 - l0) + b).
                let l = model
                    .forward(x, &mut Mode::Eval)?
                    .affine(platt.slope, 0.0)?;
                let shift = Tensor::new(&[0.0, platt.intercept as f32], x.device())?;
                log_probs(&l.broadcast_add(&shift)?)?.exp()?.unsqueeze(0)?
            }
        };
        let pred = probs.mean(0)?.argmax(D::Minus1)?.to_vec1::<u32>()?;
        Ok((score_of(&probs, score)?, pred))
    }
}

fn tensor(ds: &Dataset, device: &Device) -> Result<Tensor> {
    Ok(Tensor::from_vec(
        ds.features().to_vec(),
        (ds.len(), 2),
        device,
    )?)
}

fn fit(spec: &SurfaceSpec, train_ds: &Dataset, device: &Device) -> Result<Fitted> {
    let seed = spec.seed;
    let softmax = |hidden: &[usize],
                   dropout: f32,
                   k: u64,
                   anchor: Option<f64>|
     -> Result<Box<dyn Classifier>> {
        let arch = Arch::Mlp(MlpConfig {
            inputs: 2,
            hidden: hidden.to_vec(),
            classes: 2,
            dropout,
        });
        let params = TrainConfig {
            steps: spec.steps,
            batch_size: 64,
            lr: 1e-3,
            anchor,
        }
        .validate()?;
        let all: Vec<usize> = (0..train_ds.len()).collect();
        // Member k: its own init and batch-order streams, those of key 1000 + k.
        let key = (seed, 1000 + k);
        Ok(train(
            &arch,
            None,
            train_ds,
            &all,
            &params,
            key,
            device,
            &mut Silent,
        )?
        .model)
    };
    Ok(match &spec.model {
        SurfaceModel::Platt(hidden) => {
            let model = softmax(hidden, 0.0, 0, None)?;
            let platt = fit_platt(model.as_ref(), spec, device)?;
            Fitted::Platt { model, platt }
        }
        SurfaceModel::BayesByBackprop {
            hidden,
            prior_sigma,
            samples,
        } => Fitted::Softmax {
            members: vec![bayes_by_backprop(
                spec,
                hidden,
                *prior_sigma,
                train_ds,
                device,
            )?],
            mc: Some(*samples),
        },
        SurfaceModel::Duq(cfg) => {
            let mut m = DuqMlp::new(
                2,
                2,
                cfg,
                DType::F32,
                device,
                stream(seed, Purpose::Init, 0),
            )?;
            let y = Tensor::from_vec(train_ds.labels().to_vec(), train_ds.len(), device)?;
            m.fit(
                &tensor(train_ds, device)?,
                &y,
                &mut stream(seed, Purpose::Train, 0),
                &mut crate::observe::Silent,
            )?;
            Fitted::Duq(m)
        }
        SurfaceModel::Mlp(hidden) => Fitted::Softmax {
            members: vec![softmax(hidden, 0.0, 0, None)?],
            mc: None,
        },
        SurfaceModel::McDropout { hidden, p, samples } => Fitted::Softmax {
            members: vec![softmax(hidden, *p, 0, None)?],
            mc: Some(*samples),
        },
        SurfaceModel::Ensemble {
            hidden,
            members,
            anchor,
        } => Fitted::Softmax {
            members: (0..*members as u64)
                .map(|k| softmax(hidden, 0.0, k, *anchor))
                .collect::<Result<_>>()?,
            mc: None,
        },
    })
}

/// Initial `rho` of Bayes-by-backprop's standard deviations: `softplus(-5) = 0.0067`, the
/// network starts close to a plain one and learns how much its weights may vary.
const BBB_RHO_INIT: f64 = -5.0;

/// Adam's step size for Bayes-by-backprop: ten times the other models', because its
/// standard deviations move on `rho`'s log-like scale from far below their optimum.
const BBB_LR: f64 = 1e-2;

/// A Bayes-by-backprop MLP trained on every training point by the evidence lower bound (the
/// KL term over the item count), one weight draw per step.
fn bayes_by_backprop(
    spec: &SurfaceSpec,
    hidden: &[usize],
    prior_sigma: f64,
    train_ds: &Dataset,
    device: &Device,
) -> Result<Box<dyn Classifier>> {
    let cfg = BayesMlpConfig {
        inputs: 2,
        hidden: hidden.to_vec(),
        classes: 2,
        prior_sigma,
        rho_init: BBB_RHO_INIT,
    };
    let params = TrainConfig {
        steps: spec.steps,
        batch_size: 64,
        lr: BBB_LR,
        anchor: None,
    }
    .validate()?;
    let all: Vec<usize> = (0..train_ds.len()).collect();
    let build = |vb: candle_nn::VarBuilder<'_>| -> candle_core::Result<Box<dyn Classifier>> {
        Ok(Box::new(BayesMlp::new(&cfg, vb)?))
    };
    // The streams of the plain MLP's, so both start from the same draws of the generator.
    let rngs = TrainRngs::for_cycle(spec.seed, 1000);
    Ok(fit_softmax(&build, train_ds, &all, &params, rngs, device, &mut Silent)?.model)
}

/// Platt scaling of `model`'s logit difference on `points / 2` validation moons drawn from a
/// stream of their own.
fn fit_platt(model: &dyn Classifier, spec: &SurfaceSpec, device: &Device) -> Result<Platt> {
    let val = moons(
        (spec.points / 2).max(10),
        spec.noise,
        &mut stream(spec.seed, Purpose::Tool, 1),
    )?;
    let logits = model
        .predict(&tensor(&val, device)?)?
        .to_dtype(DType::F64)?;
    let diff = (logits.narrow(1, 1, 1)? - logits.narrow(1, 0, 1)?)?
        .flatten_all()?
        .to_vec1::<f64>()?;
    let positive: Vec<bool> = val.labels().iter().map(|&l| l == 1).collect();
    Platt::fit(&diff, &positive)
}

/// Trains the model of `spec` on two moons and computes its surfaces and metrics.
pub fn moons_surface(spec: &SurfaceSpec, device: &Device) -> Result<Surface> {
    spec.validate()?;
    let mut rng = stream(spec.seed, Purpose::Tool, 0);
    let train_ds = moons(spec.points, spec.noise, &mut rng)?;
    let test = moons(1000, spec.noise, &mut rng)?;
    let f = train_ds.features();
    let centre = [
        f.iter().step_by(2).map(|&v| f64::from(v)).sum::<f64>() / train_ds.len() as f64,
        f.iter()
            .skip(1)
            .step_by(2)
            .map(|&v| f64::from(v))
            .sum::<f64>()
            / train_ds.len() as f64,
    ];
    let far = annulus(1000, centre, 2.0, 4.0, &mut rng)?;
    let fitted = fit(spec, &train_ds, device)?;
    let mut mask_rng = stream(spec.seed, Purpose::Perturb, 0);
    let score_name = match (&spec.model, spec.score) {
        (SurfaceModel::Duq(_), _) => "duq",
        (_, SurfaceScore::MaxProb) => "least-confidence",
        (_, SurfaceScore::Entropy) => "entropy",
        (_, SurfaceScore::ClassVariance) => "class-variance",
        (_, SurfaceScore::Bald) => "bald",
    };
    let (s_in, pred) = fitted.score(&tensor(&test, device)?, spec.score, &mut mask_rng)?;
    let accuracy = pred
        .iter()
        .zip(test.labels())
        .filter(|(a, b)| a == b)
        .count() as f64
        / test.len() as f64;
    let (s_far, _) = fitted.score(&tensor(&far, device)?, spec.score, &mut mask_rng)?;
    let v = |t: &Tensor| -> Result<Vec<f32>> { Ok(t.to_dtype(DType::F32)?.to_vec1::<f32>()?) };
    let auroc_far = ood_metrics(&v(&s_in)?, &v(&s_far)?)?.auroc;
    // Grid: score and its input gradient in one autograd pass.
    let n = 200;
    let extent = [
        centre[0] - 4.5,
        centre[0] + 4.5,
        centre[1] - 4.5,
        centre[1] + 4.5,
    ];
    let mut xy = Vec::with_capacity(2 * n * n);
    for gy in 0..n {
        for gx in 0..n {
            xy.push((extent[0] + (gx as f64 + 0.5) / n as f64 * (extent[1] - extent[0])) as f32);
            xy.push((extent[3] - (gy as f64 + 0.5) / n as f64 * (extent[3] - extent[2])) as f32);
        }
    }
    let x = Var::from_tensor(&Tensor::from_vec(xy, (n * n, 2), device)?)?;
    let (s, _) = fitted.score(x.as_tensor(), spec.score, &mut mask_rng)?;
    let grads = s.sum_all()?.backward()?;
    let gradient = match grads.get(x.as_tensor()) {
        Some(g) => g
            .sqr()?
            .sum(1)?
            .sqrt()?
            .to_dtype(DType::F32)?
            .to_vec1::<f32>()?
            .iter()
            .map(|&v| f64::from(v))
            .collect(),
        None => vec![0.0; n * n],
    };
    Ok(Surface {
        accuracy,
        auroc_far,
        scorer: score_name.to_string(),
        model: spec.model.label(),
        grid: v(&s.detach())?.iter().map(|&v| f64::from(v)).collect(),
        gradient,
        n,
        extent,
        train_points: train_ds
            .features()
            .chunks(2)
            .zip(train_ds.labels())
            .map(|(p, &l)| (f64::from(p[0]), f64::from(p[1]), l))
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use alkit_acquisition::{Evidence, Probs, SampleScore, SampleScorer, Samples, Scorer};

    #[test]
    fn tensor_scores_match_the_acquisition_scorers() {
        // The differentiable versions here must agree with the f64 scorers of
        // alkit-acquisition on the same samples (S = 3 draws, b = 4 items, c = 3 classes).
        let mut rng = stream(5, Purpose::Tool, 0);
        let logits: Vec<f32> = (0..36)
            .map(|_| (3.0 * crate::rng::normal(&mut rng)) as f32)
            .collect();
        let lp = log_probs(&Tensor::from_vec(logits, (12, 3), &Device::Cpu).unwrap()).unwrap();
        let p = lp.exp().unwrap().reshape((3, 4, 3)).unwrap();
        let draws: Vec<Probs> = (0..3)
            .map(|s| {
                Probs::new(
                    p.get(s)
                        .unwrap()
                        .flatten_all()
                        .unwrap()
                        .to_vec1::<f32>()
                        .unwrap(),
                    4,
                    3,
                )
                .unwrap()
            })
            .collect();
        let mut ev = Evidence::default();
        ev.samples = Some(Samples::new(draws).unwrap());
        for (ours, theirs) in [
            (SurfaceScore::Bald, SampleScore::Bald),
            (SurfaceScore::Entropy, SampleScore::MeanEntropy),
            (SurfaceScore::ClassVariance, SampleScore::ClassVariance),
        ] {
            let a = score_of(&p, ours).unwrap().to_vec1::<f32>().unwrap();
            let b = SampleScorer::mc_dropout(theirs, 3).score(&ev).unwrap();
            for (x, y) in a.iter().zip(&b) {
                assert!((x - y).abs() < 1e-5, "{ours:?}: {x} vs {y}");
            }
        }
    }
}

/// What a surface's colours measure: DUQ's `1 - max K`, else the score's name.
fn measure(s: &Surface) -> String {
    match s.scorer.as_str() {
        "duq" => "uncertainty: 1 - max K".into(),
        name => format!("uncertainty: {name}"),
    }
}

/// The surface's heatmap panel (`gradient`: its input-gradient magnitude instead).
fn panel<'a>(s: &'a Surface, gradient: bool, title: &'a str, measure: &'a str) -> Heatmap<'a> {
    Heatmap {
        values: if gradient { &s.gradient } else { &s.grid },
        nx: s.n,
        ny: s.n,
        extent: s.extent,
        points: &s.train_points,
        title,
        measure,
    }
}

/// The surface's title: model, score and how well it tells the far points apart.
fn title(s: &Surface) -> String {
    format!(
        "{}, {}: auroc_far {:.3}, accuracy {:.3}",
        s.model, s.scorer, s.auroc_far, s.accuracy
    )
}

/// Writes one surface into `out`: `surface.png` (the score over the plane with the training
/// points, axes and a colour bar), `gradient.png` (the score's gradient magnitude) and
/// `metrics.json`.
pub fn write(s: &Surface, out: &std::path::Path) -> Result<()> {
    std::fs::create_dir_all(out).map_err(|e| crate::Error::io(out, e))?;
    let (t, m) = (title(s), measure(s));
    let png = heatmaps_png(&[panel(s, false, &t, &m)]);
    crate::fsutil::write_atomic(&out.join("surface.png"), &png)?;
    let t = format!("{}, {}: input gradient", s.model, s.scorer);
    let png = heatmaps_png(&[panel(s, true, &t, "|d score / dx|")]);
    crate::fsutil::write_atomic(&out.join("gradient.png"), &png)?;
    crate::fsutil::write_json(&out.join("metrics.json"), s)
}

/// Writes `out/beside.png`: the surfaces side by side (the same moons drawn, each on its own
/// colour scale), as the DUQ paper's Figure 1 sets DUQ beside a softmax network.
pub fn write_beside(surfaces: &[&Surface], out: &std::path::Path) -> Result<()> {
    let titles: Vec<(String, String)> = surfaces.iter().map(|s| (title(s), measure(s))).collect();
    let panels: Vec<Heatmap<'_>> = surfaces
        .iter()
        .zip(&titles)
        .map(|(s, (t, m))| panel(s, false, t, m))
        .collect();
    crate::fsutil::write_atomic(&out.join("beside.png"), &heatmaps_png(&panels))
}

/// `alkit surface` with one seed: the surface of `spec` written into `out` ([`write()`]) and,
/// for each model of `beside`, its surface written into `out/beside/<slug>`
/// ([`SurfaceModel::slug`]) and all of them side by side in `out/beside.png`
/// ([`write_beside`]); Ulmer & Cina's Figure 3 is the MLP beside the five others. Refuses a
/// model named twice before training any. Many seeds: [`run_seeds`].
pub fn run(
    spec: &SurfaceSpec,
    beside: &[SurfaceSpec],
    out: &std::path::Path,
    device: &Device,
) -> Result<(Surface, Vec<Surface>)> {
    check_beside(spec, beside)?;
    let s = moons_surface(spec, device)?;
    write(&s, out)?;
    if beside.is_empty() {
        return Ok((s, Vec::new()));
    }
    let mut others = Vec::with_capacity(beside.len());
    for b in beside {
        let surface = moons_surface(b, device)?;
        write(&surface, &beside_dir(out, b))?;
        others.push(surface);
    }
    let all: Vec<&Surface> = std::iter::once(&s).chain(&others).collect();
    write_beside(&all, out)?;
    Ok((s, others))
}

/// Checks the models drawn beside `spec`'s before any is trained: each valid, and no model
/// named twice (their files would overwrite each other's).
pub fn check_beside(spec: &SurfaceSpec, beside: &[SurfaceSpec]) -> Result<()> {
    let mut slugs = vec![spec.model.slug()];
    for b in beside {
        b.validate()?;
        if slugs.contains(&b.model.slug()) {
            return Err(crate::Error::config(
                "beside",
                format!(
                    "names {} twice (the model and its neighbours each appear once)",
                    b.model.slug()
                ),
            ));
        }
        slugs.push(b.model.slug());
    }
    Ok(())
}

/// Where [`run`] writes the files of a model drawn beside the first: `out/beside/<slug>`.
pub fn beside_dir(out: &std::path::Path, spec: &SurfaceSpec) -> std::path::PathBuf {
    out.join("beside").join(spec.model.slug())
}

/// Median, minimum and maximum of a metric over seeds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// Median (the mean of the two middle values for an even count).
    pub median: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
}

impl Spread {
    /// The spread of `v`; `None` when it is empty.
    pub fn of(v: &[f64]) -> Option<Spread> {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        let mid = v.len() / 2;
        let median = match v.len() {
            0 => return None,
            n if n % 2 == 0 => (v[mid - 1] + v[mid]) / 2.0,
            _ => v[mid],
        };
        Some(Spread {
            median,
            min: v[0],
            max: v[v.len() - 1],
        })
    }
}

/// What [`run_seeds`] measured over its seeds.
#[derive(Debug, Clone, PartialEq)]
pub struct SeedsSummary {
    /// Test accuracy.
    pub accuracy: Spread,
    /// AUROC of in-distribution against far points.
    pub auroc_far: Spread,
}

/// Runs `spec` with seeds `first..first + seeds`, writing each surface to `out/seed<S>/` and
/// the table `out/seeds.csv` (`seed,accuracy,auroc_far`, rewritten after every seed so that a
/// stopped run keeps what it finished), and hands each finished surface to `done` (progress);
/// returns the spread of both metrics.
pub fn run_seeds(
    spec: &SurfaceSpec,
    first: u64,
    seeds: u64,
    out: &std::path::Path,
    device: &Device,
    done: &mut dyn FnMut(u64, &Surface),
) -> Result<SeedsSummary> {
    if !(1..=100_000).contains(&seeds) {
        return Err(crate::Error::config(
            "seeds",
            format!("{seeds} is not in 1..=100000"),
        ));
    }
    spec.validate()?;
    std::fs::create_dir_all(out).map_err(|e| crate::Error::io(out, e))?;
    let mut spec = spec.clone();
    let mut rows = Vec::new();
    let (mut acc, mut far) = (Vec::new(), Vec::new());
    for seed in first..first.saturating_add(seeds) {
        spec.seed = seed;
        let s = moons_surface(&spec, device)?;
        write(&s, &out.join(format!("seed{seed}")))?;
        done(seed, &s);
        rows.push(vec![
            seed.to_string(),
            s.accuracy.to_string(),
            s.auroc_far.to_string(),
        ]);
        crate::fsutil::write_csv(
            &out.join("seeds.csv"),
            &["seed", "accuracy", "auroc_far"],
            rows.iter().cloned(),
        )?;
        acc.push(s.accuracy);
        far.push(s.auroc_far);
    }
    match (Spread::of(&acc), Spread::of(&far)) {
        (Some(accuracy), Some(auroc_far)) => Ok(SeedsSummary {
            accuracy,
            auroc_far,
        }),
        _ => Err(crate::Error::config("seeds", "no seed ran")),
    }
}
