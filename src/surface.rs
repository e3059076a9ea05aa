//! Uncertainty over the plane on two moons: how a model's uncertainty behaves far from the
//! data (DUQ Fig. 1/4; Ulmer & Cina 2021, Fig. 3).
//!
//! Data from the seed: 1,000 training moons (noise 0.1), 1,000 held-out moons, and 1,000
//! points uniform on the annulus at distance 2 to 4 from the training data's centre. Reported:
//! held-out accuracy, and `auroc_far`, the AUROC separating held-out moons from annulus points
//! by the model's uncertainty (annulus positive). The surface is the uncertainty score on a
//! 200 x 200 grid covering the annulus.

use crate::data::moons::{annulus, moons};
use crate::data::Dataset;
use crate::duq::{DuqConfig, DuqMlp};
use crate::error::Result;
use crate::metrics::ood_metrics;
use crate::nn::{Arch, MlpConfig};
use crate::observe::Silent;
use crate::predict::{log_probs_of, probs_from_log};
use crate::rng::{stream, Purpose};
use crate::train::{train, TrainConfig, TrainRngs};
use alkit_acquisition::{Builtin, Evidence, Scorer};
use candle_core::{DType, Device, Tensor};
use serde::Serialize;

/// Which model and score a surface shows.
#[derive(Debug, Clone, PartialEq)]
pub enum SurfaceModel {
    /// DUQ with this configuration; score `1 - max_c K_c`.
    Duq(DuqConfig),
    /// A softmax ReLU MLP (2-20-20-20-2, Adam lr 1e-3, 2,000 steps of batch 64) scored by
    /// a probability scorer.
    Mlp(Builtin),
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
    /// Uncertainty on the grid `(ny, nx)`, row 0 at the top.
    #[serde(skip)]
    pub grid: Vec<f64>,
    /// Grid size.
    #[serde(skip)]
    pub n: usize,
    /// `[x_min, x_max, y_min, y_max]`.
    pub extent: [f64; 4],
    /// Training points `(x, y, label)`.
    #[serde(skip)]
    pub train_points: Vec<(f64, f64, u32)>,
}

/// Uncertainty and predicted class per item of a dataset.
type Evaluator<'a> = Box<dyn Fn(&Dataset) -> Result<(Vec<f32>, Vec<u32>)> + 'a>;

fn tensor(ds: &Dataset, device: &Device) -> Result<Tensor> {
    Ok(Tensor::from_vec(
        ds.features().to_vec(),
        (ds.len(), 2),
        device,
    )?)
}

/// Trains `model` on two moons from `seed` and computes its surface.
pub fn moons_surface(model: &SurfaceModel, seed: u64, device: &Device) -> Result<Surface> {
    let mut rng = stream(seed, Purpose::Tool, 0);
    let train_ds = moons(1000, 0.1, &mut rng)?;
    let test = moons(1000, 0.1, &mut rng)?;
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
    let n = 200;
    let extent = [
        centre[0] - 4.5,
        centre[0] + 4.5,
        centre[1] - 4.5,
        centre[1] + 4.5,
    ];
    let mut grid_xy = Vec::with_capacity(2 * n * n);
    for gy in 0..n {
        for gx in 0..n {
            grid_xy
                .push((extent[0] + (gx as f64 + 0.5) / n as f64 * (extent[1] - extent[0])) as f32);
            grid_xy
                .push((extent[3] - (gy as f64 + 0.5) / n as f64 * (extent[3] - extent[2])) as f32);
        }
    }
    let grid_ds = Dataset::new(grid_xy, vec![0; n * n], vec![2], 2)?;
    let (scorer, eval): (String, Evaluator) = match model {
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
                &tensor(&train_ds, device)?,
                &y,
                &mut stream(seed, Purpose::Train, 0),
            )?;
            let eval = move |ds: &Dataset| -> Result<(Vec<f32>, Vec<u32>)> {
                let k = m.kernel_values(&tensor(ds, device)?)?;
                Ok(k.chunks(2)
                    .map(|r| (1.0 - r[0].max(r[1]), u32::from(r[1] > r[0])))
                    .unzip())
            };
            ("duq".to_string(), Box::new(eval))
        }
        SurfaceModel::Mlp(score) => {
            let arch = Arch::Mlp(MlpConfig {
                inputs: 2,
                hidden: vec![20, 20, 20],
                classes: 2,
                dropout: 0.0,
            });
            let params = TrainConfig {
                steps: 2000,
                batch_size: 64,
                lr: 1e-3,
            }
            .validate()?;
            let all: Vec<usize> = (0..train_ds.len()).collect();
            let trained = train(
                &arch,
                &train_ds,
                &all,
                &params,
                TrainRngs::for_cycle(seed, 0),
                device,
                &mut Silent,
            )?;
            let score = *score;
            let eval = move |ds: &Dataset| -> Result<(Vec<f32>, Vec<u32>)> {
                let ids: Vec<usize> = (0..ds.len()).collect();
                let lp = log_probs_of(trained.model.as_ref(), ds, &ids, 4096, device, &mut Silent)?;
                let p = probs_from_log(&lp, 2)?;
                let pred = p.rows().map(|r| u32::from(r[1] > r[0])).collect();
                Ok((score.score(&Evidence::from_probs(p))?, pred))
            };
            (score.name().to_string(), Box::new(eval))
        }
    };
    let (_, pred) = eval(&test)?;
    let accuracy = pred
        .iter()
        .zip(test.labels())
        .filter(|(a, b)| a == b)
        .count() as f64
        / test.len() as f64;
    let (s_in, _) = eval(&test)?;
    let (s_far, _) = eval(&far)?;
    let auroc_far = ood_metrics(&s_in, &s_far)?.auroc;
    let (g, _) = eval(&grid_ds)?;
    Ok(Surface {
        accuracy,
        auroc_far,
        scorer,
        grid: g.iter().map(|&v| f64::from(v)).collect(),
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
