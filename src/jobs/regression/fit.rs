//! What a regression job trains and how it predicts: the Gaussian heads of one setting
//! ([`Heads`]), trained on labeled rows of the pool and predicting any rows as the model's
//! mixture in the targets' units.

use super::data::RegressionData;
use crate::data::Standardizer;
use crate::error::Result;
use crate::nn::{GaussLoss, GaussMlp, GaussMlpConfig, Regressor};
use crate::observe::Observer;
use crate::predict::gaussian_evidence;
use crate::rng::Rng;
use crate::train::{train_gauss, Rows, TrainParams};
use alkit_acquisition::{Gaussian, SampleRequest};
use candle_core::Device;

/// The heads a job trains: their network, loss, count and training, and the MC-dropout
/// passes a single head with dropout predicts with.
pub(super) struct Heads {
    pub(super) cfg: GaussMlpConfig,
    pub(super) loss: GaussLoss,
    pub(super) members: usize,
    pub(super) params: TrainParams,
    pub(super) mc_samples: usize,
}

impl Heads {
    /// Heads trained on the pool rows `labeled`, their targets standardised by `scaler`.
    pub(super) fn train(
        &self,
        data: &RegressionData,
        scaler: &Standardizer,
        labeled: &[usize],
        key: (u64, u64),
        device: &Device,
        observer: &mut dyn Observer,
    ) -> Result<Vec<GaussMlp>> {
        let t = &data.pool.targets;
        let k = t.outputs();
        let mut y = vec![0f32; t.len() * k];
        for &i in labeled {
            for (o, &v) in t.row(i).iter().enumerate() {
                y[i * k + o] = scaler.forward(o, v) as f32;
            }
        }
        let rows = Rows {
            x: &data.pool_x,
            d: data.pool.dim(),
            y: &y,
        };
        train_gauss(
            &self.cfg,
            self.loss,
            self.members,
            &rows,
            labeled,
            &self.params,
            key,
            device,
            observer,
        )
    }

    /// The draws `models` give for standardised rows `x (n, d)` as `request` asks (a
    /// single head without dropout is its own one draw), in standardised units.
    pub(super) fn draws(
        models: &[GaussMlp],
        x: &[f32],
        d: usize,
        request: SampleRequest,
        masks: &mut Rng,
        device: &Device,
    ) -> Result<Gaussian> {
        let refs: Vec<&dyn Regressor> = models.iter().map(|m| m as &dyn Regressor).collect();
        let request = match request {
            SampleRequest::McDropout { .. } if !refs[0].has_dropout() => SampleRequest::Members,
            r => r,
        };
        gaussian_evidence(&refs, x, d, request, masks, device)
    }

    /// The model's predictive mixture for rows `x (n, d)` in the targets' units: means and
    /// variances `(n, k)`. Its draws are an ensemble's members, or a single head's MC-dropout
    /// passes (masks from `masks`) when it has dropout, or its one prediction.
    pub(super) fn predict(
        &self,
        models: &[GaussMlp],
        x: &[f32],
        d: usize,
        scaler: &Standardizer,
        masks: &mut Rng,
        device: &Device,
    ) -> Result<(Vec<f64>, Vec<f64>)> {
        let request = if self.members == 1 {
            SampleRequest::McDropout {
                samples: self.mc_samples,
            }
        } else {
            SampleRequest::Members
        };
        let g = Self::draws(models, x, d, request, masks, device)?;
        let (mut mean, mut var) = g.predictive();
        let k = g.outputs();
        for (j, (m, v)) in mean.iter_mut().zip(var.iter_mut()).enumerate() {
            (*m, *v) = scaler.back(j % k, *m, *v);
        }
        Ok((mean, var))
    }
}
