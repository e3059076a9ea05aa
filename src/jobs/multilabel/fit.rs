//! What a multi-label job trains and how it predicts: the sigmoid heads of one setting
//! ([`Heads`]), trained on labeled rows of the pool and predicting any rows' label
//! probabilities.

use super::data::MultiLabelData;
use crate::error::Result;
use crate::nn::{Classifier, Mlp, MlpConfig};
use crate::observe::Observer;
use crate::predict::label_evidence;
use crate::rng::Rng;
use crate::train::{train_sigmoid, Rows, TrainParams};
use alkit_acquisition::{LabelProbs, SampleRequest};
use candle_core::Device;

/// The heads a job trains: their network, count and training, and the MC-dropout passes a
/// single head with dropout predicts with.
pub(super) struct Heads {
    pub(super) cfg: MlpConfig,
    pub(super) members: usize,
    pub(super) params: TrainParams,
    pub(super) mc_samples: usize,
}

impl Heads {
    /// Heads trained on the pool rows `labeled`.
    pub(super) fn train(
        &self,
        data: &MultiLabelData,
        labeled: &[usize],
        key: (u64, u64),
        device: &Device,
        observer: &mut dyn Observer,
    ) -> Result<Vec<Mlp>> {
        let sets = &data.pool.sets;
        let l = sets.labels();
        let mut y = vec![0f32; sets.len() * l];
        for &i in labeled {
            for (o, &v) in y[i * l..(i + 1) * l].iter_mut().zip(sets.row(i)) {
                *o = f32::from(v);
            }
        }
        let rows = Rows {
            x: &data.pool_x,
            d: data.pool.dim(),
            y: &y,
        };
        train_sigmoid(
            &self.cfg,
            self.members,
            &rows,
            labeled,
            &self.params,
            key,
            device,
            observer,
        )
    }

    /// The label probabilities `models` give rows `x (n, d)` as `request` asks (a single head
    /// without dropout is its own one draw).
    pub(super) fn draws(
        &self,
        models: &[Mlp],
        x: &[f32],
        request: SampleRequest,
        masks: &mut Rng,
        device: &Device,
    ) -> Result<LabelProbs> {
        let refs: Vec<&dyn Classifier> = models.iter().map(|m| m as &dyn Classifier).collect();
        let dropout = self.cfg.dropout > 0.0 && !self.cfg.hidden.is_empty();
        let request = match request {
            SampleRequest::McDropout { .. } if !dropout => SampleRequest::Members,
            r => r,
        };
        label_evidence(&refs, x, self.cfg.inputs, request, masks, device)
    }

    /// The model's label probabilities for rows `x`: the mean over an ensemble's members, or
    /// a single head's MC-dropout passes (its one prediction without dropout) `(n, L)`.
    pub(super) fn predict(
        &self,
        models: &[Mlp],
        x: &[f32],
        masks: &mut Rng,
        device: &Device,
    ) -> Result<Vec<f64>> {
        let request = if self.members == 1 {
            SampleRequest::McDropout {
                samples: self.mc_samples,
            }
        } else {
            SampleRequest::Members
        };
        Ok(self.draws(models, x, request, masks, device)?.mean())
    }
}
