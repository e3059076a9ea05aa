//! [`Sequential`]: layers applied in order, itself a [`Layer`].

use super::layer::{Ctx, Layer};
use super::tape::Tape;
use candle_core::{Result, Tensor};

/// Layers applied in order.
#[derive(Default)]
pub struct Sequential {
    layers: Vec<Box<dyn Layer>>,
}

impl Sequential {
    /// An empty stack.
    pub fn new() -> Self {
        Self::default()
    }

    /// This stack with `layer` appended.
    pub fn with(mut self, layer: impl Layer + 'static) -> Self {
        self.layers.push(Box::new(layer));
        self
    }

    /// Appends `layer`.
    pub fn push(&mut self, layer: Box<dyn Layer>) {
        self.layers.push(layer);
    }

    /// The last layer, if any.
    pub fn last(&self) -> Option<&dyn Layer> {
        self.layers.last().map(|l| l.as_ref())
    }

    /// Number of layers.
    pub fn len(&self) -> usize {
        self.layers.len()
    }

    /// Whether the stack is empty.
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// Layers `range` applied to `x`.
    pub fn forward_range(
        &self,
        x: &Tensor,
        range: std::ops::Range<usize>,
        ctx: &mut Ctx<'_>,
    ) -> Result<Tensor> {
        let mut x = x.clone();
        for layer in &self.layers[range] {
            x = layer.forward(&x, ctx)?;
        }
        Ok(x)
    }

    /// The index of the first layer that draws dropout masks, if any.
    pub fn first_stochastic(&self) -> Option<usize> {
        self.layers.iter().position(|l| l.stochastic())
    }
}

impl Layer for Sequential {
    fn forward(&self, x: &Tensor, ctx: &mut Ctx<'_>) -> Result<Tensor> {
        self.forward_range(x, 0..self.layers.len(), ctx)
    }
    fn backward(&self, d: &Tensor, tape: &mut Tape) -> Result<Tensor> {
        let mut d = d.clone();
        for layer in self.layers.iter().rev() {
            if tape.done() {
                break;
            }
            d = layer.backward(&d, tape)?;
        }
        Ok(d)
    }
    fn stochastic(&self) -> bool {
        self.first_stochastic().is_some()
    }
    fn independent_rows(&self) -> bool {
        self.layers.iter().all(|l| l.independent_rows())
    }
}
