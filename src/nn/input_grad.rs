//! The sign of each input's loss gradient, MC-AA's direction (Alarab & Prakoonwit 2022) and
//! FGSM's (Goodfellow et al. 2015): `sign(d CE(f(x), argmax f(x)) / dx)`, the cross-entropy
//! at the class the model predicts, because the items scored have no labels.
//!
//! One backward pass serves the whole batch: the loss is summed over rows, and in evaluation
//! mode (dropout off, batch norm on its running statistics) a row's logits depend on that row
//! alone, so each row's gradient is its own loss's.

use super::classifier::{Classifier, Mode};
use candle_core::{DType, Result, Tensor, Var, D};

/// `sign(d CE(f(x), argmax f(x)) / dx)` for inputs `x (b, *item_shape)`: `-1`, `0` or `1`
/// per value, the shape of `x`.
pub fn loss_grad_sign(model: &dyn Classifier, x: &Tensor) -> Result<Tensor> {
    let input = Var::from_tensor(&x.detach())?;
    let lp = candle_nn::ops::log_softmax(
        &model.forward(input.as_tensor(), &mut Mode::Eval)?,
        D::Minus1,
    )?;
    let predicted = lp.detach().argmax_keepdim(D::Minus1)?;
    let loss = lp.gather(&predicted, D::Minus1)?.sum_all()?.neg()?;
    let grads = loss.backward()?;
    match grads.get(input.as_tensor()) {
        Some(g) => g.sign(),
        // The logits do not depend on the input (a constant model): no direction to move.
        None => x.zeros_like()?.to_dtype(DType::F32),
    }
}
