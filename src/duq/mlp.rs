//! DUQ on a ReLU MLP ([`ReluMlp`], [`DuqMlp`]): the two-moons extractor and the DUQ head
//! for embeddings.

use super::extractor::{Duq, Extractor};
use super::head::DuqConfig;
use crate::error::{Error, Result};
use crate::nn::init::{seeded, Weights};
use crate::nn::layers::linear;
use crate::rng::Rng;
use candle_core::{DType, Device, Module, Tensor, Var};

/// The two-moons feature extractor: linear layers, each followed by ReLU; the features are
/// the last hidden layer. Its cache holds the pre-activations `(b, width)` of each layer.
pub struct ReluMlp {
    layers: Vec<candle_nn::Linear>,
    params: Weights,
}

impl ReluMlp {
    /// A fresh MLP `inputs -> hidden[0] -> ... -> hidden[last]`, parameters from `rng`
    /// (PyTorch's `Linear` initialisation).
    pub fn seeded(
        inputs: usize,
        hidden: &[usize],
        dtype: DType,
        device: &Device,
        rng: Rng,
    ) -> Result<Self> {
        if hidden.is_empty() || hidden.contains(&0) {
            return Err(Error::config(
                "hidden",
                format!("needs at least one hidden layer, all widths positive, got {hidden:?}"),
            ));
        }
        let (vb, params) = seeded(rng, dtype, device);
        let mut widths = vec![inputs];
        widths.extend(hidden);
        let layers = widths
            .windows(2)
            .enumerate()
            .map(|(i, w)| linear(w[0], w[1], vb.pp(format!("fc{}", i + 1))))
            .collect::<candle_core::Result<Vec<_>>>()?;
        Ok(Self { layers, params })
    }
}

impl Extractor for ReluMlp {
    type Cache = Vec<Tensor>;

    fn features(&self) -> usize {
        self.layers
            .last()
            .map_or(0, |l| l.weight().dims().first().copied().unwrap_or(0))
    }

    fn forward(&self, x: &Tensor, _train: bool) -> Result<(Tensor, Vec<Tensor>)> {
        let mut h = x.clone();
        let mut pre = Vec::with_capacity(self.layers.len());
        for l in &self.layers {
            let z = l.forward(&h)?;
            h = z.relu()?;
            pre.push(z);
        }
        Ok((h, pre))
    }

    /// ReLU as its `> 0` mask, each layer as `v @ W`, in reverse.
    fn input_gradient(&self, v: &Tensor, pre: &Vec<Tensor>) -> Result<Tensor> {
        let mut g = v.clone();
        for (l, z) in self.layers.iter().zip(pre).rev() {
            let mask = z.gt(0.0)?.to_dtype(g.dtype())?;
            g = g.mul(&mask)?.matmul(l.weight())?;
        }
        Ok(g)
    }

    fn vars(&self) -> Vec<Var> {
        self.params.vars()
    }
}

/// DUQ with a ReLU-MLP feature extractor (the two-moons model).
pub type DuqMlp = Duq<ReluMlp>;

impl Duq<ReluMlp> {
    /// A fresh model for `inputs`-dimensional points and `classes` classes, all parameters and
    /// initial centroids from `rng`.
    pub fn new(
        inputs: usize,
        classes: usize,
        cfg: &DuqConfig,
        dtype: DType,
        device: &Device,
        mut rng: Rng,
    ) -> Result<Self> {
        let init = <Rng as rand::SeedableRng>::seed_from_u64(rand::RngCore::next_u64(&mut rng));
        let mlp = ReluMlp::seeded(inputs, &cfg.hidden, dtype, device, init)?;
        Duq::from_extractor(mlp, classes, &cfg.settings, (dtype, device), &mut rng)
    }
}
