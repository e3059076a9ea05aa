//! The ONNX model as alkit's `Classifier`: inference in ONNX Runtime in the model's fixed
//! batches or one run, the features beside the logits when the last layer is asked for.

use crate::nn::{Ask, Classifier, LastLayer, Mode, Offer};
use candle_core::{DType, Tensor};
use ort::session::Session;
use std::sync::Mutex;

/// An ONNX model run by ONNX Runtime: inference only ([`Classifier::forward`] in training mode
/// is an error), features and its last layer through [`Ask::LastLayer`].
pub struct OnnxModel {
    pub(super) session: Mutex<Session>,
    pub(super) input: String,
    pub(super) logits: String,
    /// The features output and the last layer `(W (c, d), b (c,))`, where found.
    pub(super) head: Option<(String, Tensor, Tensor)>,
    /// A batch dimension fixed in the graph: every run has exactly this many rows.
    pub(super) fixed_batch: Option<usize>,
    pub(super) item_shape: Vec<usize>,
    pub(super) classes: usize,
}

impl OnnxModel {
    /// Logits `(n, c)` and, when asked and found, features `(n, d)` of `x (n, *item_shape)`,
    /// in the model's fixed batches (the last padded with zeros) or in one run.
    pub(super) fn run(
        &self,
        x: &Tensor,
        features: bool,
    ) -> candle_core::Result<(Tensor, Option<Tensor>)> {
        let dims = x.dims();
        if dims.len() != self.item_shape.len() + 1 || dims[1..] != self.item_shape[..] {
            candle_core::bail!(
                "the ONNX model takes items of shape {:?}, given a batch {dims:?}",
                self.item_shape
            );
        }
        let n = dims[0];
        let per: usize = self.item_shape.iter().product();
        let values = x.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        let feature_name = self.head.as_ref().filter(|_| features).map(|h| h.0.clone());
        let step = self.fixed_batch.unwrap_or(n.max(1));
        let (mut logits, mut feats) = (Vec::with_capacity(n * self.classes), Vec::new());
        let mut session = self
            .session
            .lock()
            .map_err(|_| candle_core::Error::Msg("the ONNX session was poisoned".into()))?;
        let mut start = 0;
        while start < n {
            let rows = step.min(n - start);
            let mut chunk = values[start * per..(start + rows) * per].to_vec();
            chunk.resize(step * per, 0.0);
            let mut shape = vec![step as i64];
            shape.extend(self.item_shape.iter().map(|&d| d as i64));
            let ort_err = |e: ort::Error| candle_core::Error::Msg(format!("ONNX Runtime: {e}"));
            let tensor = ort::value::Tensor::from_array((shape, chunk)).map_err(ort_err)?;
            let out = session
                .run(ort::inputs![self.input.as_str() => tensor])
                .map_err(ort_err)?;
            let read = |name: &str, width: Option<usize>, into: &mut Vec<f32>| {
                let value = out.get(name).ok_or_else(|| {
                    candle_core::Error::Msg(format!("ONNX Runtime gave no output `{name}`"))
                })?;
                let (s, data) = value.try_extract_tensor::<f32>().map_err(ort_err)?;
                let ok =
                    s.len() == 2 && s[0] == step as i64 && width.is_none_or(|w| s[1] == w as i64);
                if !ok {
                    candle_core::bail!(
                        "output `{name}` has dimensions {:?} for a batch of {step}",
                        &s[..]
                    );
                }
                let w = s[1] as usize;
                into.extend_from_slice(&data[..rows * w]);
                Ok(w)
            };
            read(&self.logits, Some(self.classes), &mut logits)?;
            if let Some(f) = &feature_name {
                read(f, None, &mut feats)?;
            }
            start += rows;
        }
        drop(session);
        let device = x.device();
        let logits = Tensor::from_vec(logits, (n, self.classes), device)?;
        let feats = match feature_name {
            Some(_) => {
                let d = feats.len().checked_div(n).unwrap_or(0);
                Some(Tensor::from_vec(feats, (n, d), device)?)
            }
            None => None,
        };
        Ok((logits.to_dtype(x.dtype())?, feats))
    }
}

impl Classifier for OnnxModel {
    fn forward(&self, x: &Tensor, mode: &mut Mode<'_>) -> candle_core::Result<Tensor> {
        match mode {
            Mode::Eval => self.predict(x),
            Mode::Train(_) => candle_core::bail!(
                "an ONNX model runs in ONNX Runtime, which has no autograd: it cannot be \
                 trained, run with dropout on or differentiated (its last layer's quantities \
                 come from its features)"
            ),
        }
    }

    fn predict(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        Ok(self.run(x, false)?.0)
    }

    fn offer(&self, ask: Ask<'_>) -> candle_core::Result<Option<Offer>> {
        match ask {
            Ask::LastLayer { x } => {
                let Some((_, w, b)) = &self.head else {
                    return Ok(None);
                };
                let (_, h) = self.run(x, true)?;
                let h = h.ok_or_else(|| candle_core::Error::Msg("no features".into()))?;
                let h = h.to_dtype(w.dtype())?;
                Ok(Some(Offer::LastLayer(LastLayer::new(
                    &h,
                    &w.to_device(x.device())?,
                    Some(&b.to_device(x.device())?),
                )?)))
            }
            _ => Ok(None),
        }
    }

    fn classes(&self) -> usize {
        self.classes
    }
}
