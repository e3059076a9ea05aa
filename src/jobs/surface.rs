//! Uncertainty over the plane on two moons: how a model's uncertainty behaves far from the
//! data (DUQ Fig. 1/4; Ulmer & Cina 2021, Fig. 3).
//!
//! Data from the seed: `points` training moons (noise `noise`), 1,000 held-out moons, and
//! 1,000 points uniform on the annulus at distance 2 to 4 from the training data's centre.
//! Reported: held-out accuracy, and `auroc_far`, the AUROC separating held-out moons from
//! annulus points by the model's uncertainty (annulus positive). The surfaces are the
//! uncertainty score, and the magnitude of its input gradient `||d score / d x||`, on a
//! 200 x 200 grid covering the annulus. Every score is computed with differentiable tensor
//! ops, so the gradient is one autograd pass (first order only).

use crate::data::moons::{annulus, moons};
use crate::data::Dataset;
use crate::duq::{DuqConfig, DuqMlp};
use crate::error::Result;
use crate::metrics::ood_metrics;
use crate::models::Arch;
use crate::nn::layers::log_probs;
use crate::nn::{Classifier, MlpConfig, Mode};
use crate::observe::Silent;
use crate::plot::{heatmaps_png, Heatmap};
use crate::rng::{stream, Purpose, Rng};
use crate::train::{train, TrainConfig};
use candle_core::{DType, Device, Tensor, Var, D};
use serde::Serialize;

/// An uncertainty score over stochastic (or single) predictions `(S, b, c)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SurfaceScore {
    /// `1 - max_c mean_s p`.
    MaxProb,
    /// Entropy of the mean prediction.
    Entropy,
    /// `(1/C) sum_c Var_s[p_c]`.
    ClassVariance,
    /// Mutual information (BALD).
    Bald,
}

/// Which model a surface shows.
#[derive(Debug, Clone, PartialEq)]
pub enum SurfaceModel {
    /// DUQ; score `1 - max_c K_c`.
    Duq(DuqConfig),
    /// One softmax ReLU MLP with these hidden widths.
    Mlp(Vec<usize>),
    /// An MLP with dropout `p` after each hidden layer, `samples` MC-dropout passes.
    McDropout {
        /// Hidden widths.
        hidden: Vec<usize>,
        /// Dropout probability.
        p: f32,
        /// Forward passes.
        samples: usize,
    },
    /// `members` MLPs from different seeds and batch orders; anchored (Pearce et al. 2020)
    /// with strength `tau` when `anchor` is set.
    Ensemble {
        /// Hidden widths.
        hidden: Vec<usize>,
        /// Members.
        members: usize,
        /// Anchoring strength `tau`.
        anchor: Option<f64>,
    },
}

impl SurfaceModel {
    /// DUQ with `penalty` and otherwise its defaults.
    pub fn duq(penalty: crate::duq::Penalty) -> SurfaceModel {
        SurfaceModel::Duq(DuqConfig {
            settings: crate::duq::DuqSettings {
                penalty,
                ..Default::default()
            },
            ..Default::default()
        })
    }

    /// The two-moons softmax MLP: three hidden layers of 25.
    pub fn mlp() -> SurfaceModel {
        SurfaceModel::Mlp(vec![25, 25, 25])
    }

    /// The two-moons MC-dropout MLP: four hidden layers of 25, dropout 0.205, `samples`
    /// passes.
    pub fn mc_dropout(samples: usize) -> SurfaceModel {
        SurfaceModel::McDropout {
            hidden: vec![25, 25, 25, 25],
            p: 0.205,
            samples,
        }
    }

    /// A deep ensemble of `members` two-moons MLPs, anchored with `tau` when given.
    pub fn ensemble(members: usize, anchor: Option<f64>) -> SurfaceModel {
        SurfaceModel::Ensemble {
            hidden: vec![25, 25, 25],
            members,
            anchor,
        }
    }

    /// The model as a figure's title names it.
    pub fn label(&self) -> String {
        match self {
            SurfaceModel::Duq(_) => "DUQ".into(),
            SurfaceModel::Mlp(_) => "softmax MLP".into(),
            SurfaceModel::McDropout { samples, .. } => format!("MC dropout ({samples} passes)"),
            SurfaceModel::Ensemble {
                members,
                anchor: None,
                ..
            } => format!("ensemble of {members}"),
            SurfaceModel::Ensemble { members, .. } => format!("anchored ensemble of {members}"),
        }
    }
}

/// Surface settings.
#[derive(Debug, Clone, PartialEq)]
pub struct SurfaceSpec {
    /// The model.
    pub model: SurfaceModel,
    /// The score (ignored for DUQ).
    pub score: SurfaceScore,
    /// Training points.
    pub points: usize,
    /// Moon noise.
    pub noise: f64,
    /// Adam steps of batch 64 for the softmax models (lr 1e-3).
    pub steps: usize,
    /// Seed of data, initialisation, batch order and dropout masks.
    pub seed: u64,
}

impl SurfaceSpec {
    /// Checks the settings before any work: at least 20 training points (the held-out split
    /// and the far-away points need some) and at most 10,000,000, a noise in `0..=1000`,
    /// at least one training step, and for the MC-dropout and ensemble models at least one
    /// pass or member (ensembles at most [`crate::train::MAX_MEMBERS`]) and a dropout
    /// probability in `[0, 1)`.
    pub fn validate(&self) -> Result<()> {
        if !(20..=10_000_000).contains(&self.points) {
            return Err(crate::Error::config(
                "points",
                format!("{} is not in 20..=10000000", self.points),
            ));
        }
        if !(self.noise.is_finite() && (0.0..=1000.0).contains(&self.noise)) {
            return Err(crate::Error::config(
                "noise",
                format!(
                    "{} is not a number in 0..=1000 (the moons are 3 wide)",
                    self.noise
                ),
            ));
        }
        crate::limits::count(
            "steps",
            self.steps,
            crate::limits::MAX_STEPS,
            "training steps",
        )?;
        match &self.model {
            SurfaceModel::McDropout { samples, p, .. } => {
                crate::limits::count(
                    "mc_samples",
                    *samples,
                    crate::limits::MAX_SAMPLES,
                    "MC-dropout passes",
                )?;
                if !(0.0..1.0).contains(p) {
                    return Err(crate::Error::config(
                        "dropout",
                        format!("{p} is not in [0, 1)"),
                    ));
                }
            }
            SurfaceModel::Ensemble {
                members, anchor, ..
            } => {
                if !(1..=crate::train::MAX_MEMBERS).contains(members) {
                    return Err(crate::Error::config(
                        "members",
                        format!("{members} is not in 1..={}", crate::train::MAX_MEMBERS),
                    ));
                }
                if anchor.is_some_and(|t| !(t.is_finite() && t >= 0.0)) {
                    return Err(crate::Error::config(
                        "anchor",
                        format!("{anchor:?} is not a number >= 0"),
                    ));
                }
            }
            SurfaceModel::Duq(_) | SurfaceModel::Mlp(_) => {}
        }
        Ok(())
    }
}

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
/// with `beside`, a second one written into `out/beside` and both side by side in
/// `out/beside.png` ([`write_beside`]). Many seeds: [`run_seeds`].
pub fn run(
    spec: &SurfaceSpec,
    beside: Option<&SurfaceSpec>,
    out: &std::path::Path,
    device: &Device,
) -> Result<(Surface, Option<Surface>)> {
    let s = moons_surface(spec, device)?;
    write(&s, out)?;
    let Some(spec) = beside else {
        return Ok((s, None));
    };
    let b = moons_surface(spec, device)?;
    write(&b, &out.join("beside"))?;
    write_beside(&[&s, &b], out)?;
    Ok((s, Some(b)))
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
