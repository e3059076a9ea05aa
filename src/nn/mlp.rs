//! The ReLU MLP for vector inputs ([`Mlp`]) and its configuration.

use super::classifier::{Ask, Classifier, LastLayer, Mode, Offer};
use super::gradnorm;
use super::layers::{dropout, linear};
use candle_core::{Module, Result, Tensor};
use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

/// Configuration of [`Mlp`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MlpConfig {
    /// Input features (items are flattened).
    pub inputs: usize,
    /// Hidden layer widths.
    pub hidden: Vec<usize>,
    /// Number of classes.
    pub classes: usize,
    /// Dropout after each hidden layer (0 = none).
    pub dropout: f32,
}

/// A ReLU MLP for vector inputs: `fc1 .. fcL`, ReLU (and optional dropout) between layers.
/// Tensor names `fc{i}.weight (out, in)` and `fc{i}.bias (out)`, `i` from 1.
pub struct Mlp {
    layers: Vec<candle_nn::Linear>,
    dropout: f32,
    classes: usize,
}

impl Mlp {
    /// Builds the MLP, requesting parameters from `vb`.
    pub fn new(cfg: &MlpConfig, vb: VarBuilder) -> Result<Self> {
        let mut widths = vec![cfg.inputs];
        widths.extend(&cfg.hidden);
        widths.push(cfg.classes);
        let layers = widths
            .windows(2)
            .enumerate()
            .map(|(i, w)| linear(w[0], w[1], vb.pp(format!("fc{}", i + 1))))
            .collect::<Result<_>>()?;
        Ok(Self {
            layers,
            dropout: cfg.dropout,
            classes: cfg.classes,
        })
    }
}

impl Classifier for Mlp {
    fn forward(&self, x: &Tensor, mode: &mut Mode<'_>) -> Result<Tensor> {
        let mut x = x.flatten_from(1)?;
        let last = self.layers.len() - 1;
        for (i, layer) in self.layers.iter().enumerate() {
            x = layer.forward(&x)?;
            if i < last {
                x = x.relu()?;
                if let Mode::Train(rng) = mode {
                    x = dropout(&x, self.dropout, rng)?;
                }
            }
        }
        Ok(x)
    }
    fn offer(&self, ask: Ask<'_>) -> Result<Option<Offer>> {
        match ask {
            // Batched on every device (no per-candidate backward).
            Ask::GradNorms {
                x,
                copies,
                expected,
            } => {
                let layers: Vec<(Tensor, Option<Tensor>)> = self
                    .layers
                    .iter()
                    .map(|l| (l.weight().clone(), l.bias().cloned()))
                    .collect();
                Ok(Some(Offer::GradNorms(gradnorm::linear_stack_grad_norms(
                    &layers, x, copies, expected,
                )?)))
            }
            Ask::LastLayer { x } => {
                let Some((last, hidden)) = self.layers.split_last() else {
                    return Ok(None);
                };
                let mut h = x.flatten_from(1)?.detach();
                for layer in hidden {
                    h = layer.forward(&h)?.relu()?;
                }
                Ok(Some(Offer::LastLayer(LastLayer::new(
                    &h,
                    last.weight(),
                    last.bias(),
                )?)))
            }
            _ => Ok(None),
        }
    }
    fn classes(&self) -> usize {
        self.classes
    }
}
