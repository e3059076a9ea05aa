//! The deep [`Ensemble`]: members trained apart, predicting the mean of their probabilities.

use super::classifier::{Ask, Classifier, Mode, Offer};
use super::layers;
use candle_core::{Device, Result, Tensor};

/// A deep ensemble (Lakshminarayanan et al. 2017): members trained independently (different
/// initialisations and batch orders), predicting the mean of their probabilities.
///
/// Its logits are `log mean_k softmax(member_k(x))` (log-probabilities are valid logits), so
/// every probability scorer sees the ensemble's predictive distribution, and
/// [`member_logits`](super::member_logits) (its answer to [`Ask::Members`]) gives sample scorers (BALD, class variance, ...) and
/// BatchBALD one draw per member.
pub struct Ensemble {
    members: Vec<Box<dyn Classifier>>,
}

impl Ensemble {
    /// An ensemble of at least one member, all with the same class count.
    pub fn new(members: Vec<Box<dyn Classifier>>) -> Result<Self> {
        let c = members
            .first()
            .map(|m| m.classes())
            .ok_or_else(|| candle_core::Error::Msg("an ensemble needs a member".into()))?;
        if members.iter().any(|m| m.classes() != c) {
            return Err(candle_core::Error::Msg(
                "ensemble members disagree on the class count".into(),
            ));
        }
        Ok(Self { members })
    }

    /// The members.
    pub fn members(&self) -> &[Box<dyn Classifier>] {
        &self.members
    }

    /// `log mean_k softmax(logits_k)`, computed stably from log-softmaxes.
    fn mix(logits: &[Tensor]) -> Result<Tensor> {
        let lp: Vec<Tensor> = logits
            .iter()
            .map(layers::log_probs)
            .collect::<Result<_>>()?;
        let stacked = Tensor::stack(&lp, 0)?;
        let max = stacked.max_keepdim(0)?;
        let k = logits.len() as f64;
        (stacked
            .broadcast_sub(&max)?
            .exp()?
            .sum_keepdim(0)?
            .affine(1.0 / k, 0.0)?
            .log()?
            + max)?
            .squeeze(0)
    }
}

impl Classifier for Ensemble {
    fn forward(&self, x: &Tensor, mode: &mut Mode<'_>) -> Result<Tensor> {
        let logits: Vec<Tensor> = self
            .members
            .iter()
            .map(|m| m.forward(x, mode))
            .collect::<Result<_>>()?;
        Self::mix(&logits)
    }
    fn predict(&self, x: &Tensor) -> Result<Tensor> {
        let logits: Vec<Tensor> = self
            .members
            .iter()
            .map(|m| m.predict(x))
            .collect::<Result<_>>()?;
        Self::mix(&logits)
    }
    fn offer(&self, ask: Ask<'_>) -> Result<Option<Offer>> {
        match ask {
            Ask::Members { x } => self
                .members
                .iter()
                .map(|m| m.predict(x))
                .collect::<Result<_>>()
                .map(|d| Some(Offer::Draws(d))),
            _ => Ok(None),
        }
    }
    fn classes(&self) -> usize {
        self.members[0].classes()
    }

    fn independent_rows(&self, device: &Device) -> bool {
        self.members.iter().all(|m| m.independent_rows(device))
    }
}
