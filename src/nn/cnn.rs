//! The small softmax CNN of the REGrad active-learning experiments ([`Cnn`]) and its
//! configuration.

use super::classifier::{Ask, Classifier, LastLayer, Mode, Offer};
use super::gradnorm;
use super::layers::{self, dropout, flatten_nchw_order, linear, nchw_to_nhwc, Conv2d};
use crate::kernels;
use crate::rng::Rng;
use candle_core::{DType, Module, Result, Tensor};
use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

/// Configuration of [`Cnn`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CnnConfig {
    /// Input channels.
    pub in_channels: usize,
    /// Input height.
    pub height: usize,
    /// Input width.
    pub width: usize,
    /// Number of classes.
    pub classes: usize,
    /// Dropout probability before the last layer.
    pub dropout: f32,
}

impl CnnConfig {
    /// The REGrad paper's MNIST CNN for `(c, h, w)` inputs and `classes` classes.
    pub fn standard(item_shape: &[usize], classes: usize) -> Self {
        let (c, h, w) = match item_shape {
            [c, h, w] => (*c, *h, *w),
            [h, w] => (1, *h, *w),
            _ => (1, 28, 28),
        };
        Self {
            in_channels: c,
            height: h,
            width: w,
            classes,
            dropout: 0.5,
        }
    }

    /// Spatial size after conv-pool-conv-pool: `((s - 2) / 2 - 2) / 2`.
    fn reduced(s: usize) -> usize {
        (s.saturating_sub(2) / 2).saturating_sub(2) / 2
    }
}

/// The small CNN of the REGrad active-learning experiments (Wang & Ji 2024):
/// conv(32, 3x3) - relu - maxpool 2 - conv(64, 3x3) - relu - maxpool 2 - fc(128) - relu -
/// dropout(0.5) - fc(classes).
///
/// Tensor names (PyTorch `state_dict` layout): `conv1.weight (32, c, 3, 3)`, `conv1.bias (32)`,
/// `conv2.weight (64, 32, 3, 3)`, `conv2.bias (64)`, `fc1.weight (128, 64*s*s)` with inputs in
/// NCHW flatten order, `fc1.bias (128)`, `fc2.weight (classes, 128)`, `fc2.bias (classes)`.
pub struct Cnn {
    conv1: Conv2d,
    conv2: Conv2d,
    fc1: candle_nn::Linear,
    fc2: candle_nn::Linear,
    dropout: f32,
    classes: usize,
    /// Input `(c, h, w)`.
    input: (usize, usize, usize),
}

impl Cnn {
    /// Builds the CNN, requesting parameters from `vb`.
    pub fn new(cfg: &CnnConfig, vb: VarBuilder) -> Result<Self> {
        let (h, w) = (
            CnnConfig::reduced(cfg.height),
            CnnConfig::reduced(cfg.width),
        );
        if h == 0 || w == 0 {
            candle_core::bail!(
                "input {}x{} is too small for the CNN",
                cfg.height,
                cfg.width
            );
        }
        Ok(Self {
            conv1: Conv2d::new(cfg.in_channels, 32, 3, 0, vb.pp("conv1"))?,
            conv2: Conv2d::new(32, 64, 3, 0, vb.pp("conv2"))?,
            fc1: linear(64 * h * w, 128, vb.pp("fc1"))?,
            fc2: linear(128, cfg.classes, vb.pp("fc2"))?,
            dropout: cfg.dropout,
            classes: cfg.classes,
            input: (cfg.in_channels, cfg.height, cfg.width),
        })
    }
}

impl Cnn {
    /// The weights as the gradient kernel wants them (see `crate::kernels::gradnorm::CnnWeights`).
    fn weights<T: kernels::Elem + candle_core::WithDType>(
        &self,
    ) -> Result<crate::kernels::gradnorm::CnnWeights<T>> {
        let v =
            |t: &Tensor| -> Result<Vec<T>> { t.to_dtype(T::DTYPE)?.flatten_all()?.to_vec1::<T>() };
        let conv =
            |c: &Conv2d| -> Result<Vec<T>> { v(&c.weight().permute((0, 2, 3, 1))?.contiguous()?) };
        let (c1, cin, k, _) = self.conv1.weight().dims4()?;
        let c2 = self.conv2.weight().dim(0)?;
        let w3 = self.fc1.weight();
        let w4 = self.fc2.weight();
        let bias = |l: &candle_nn::Linear| -> Result<Vec<T>> {
            match l.bias() {
                Some(b) => v(b),
                None => Ok(vec![T::ZERO; l.weight().dim(0)?]),
            }
        };
        Ok(crate::kernels::gradnorm::CnnWeights {
            w1: conv(&self.conv1)?,
            b1: v(self.conv1.bias())?,
            w2: conv(&self.conv2)?,
            b2: v(self.conv2.bias())?,
            w3: v(w3)?,
            w3t: v(&w3.t()?.contiguous()?)?,
            b3: bias(&self.fc1)?,
            w4: v(w4)?,
            w4t: v(&w4.t()?.contiguous()?)?,
            b4: bias(&self.fc2)?,
            input: (self.input.1, self.input.2, cin),
            c1,
            c2,
            hidden: w3.dim(0)?,
            classes: self.classes,
            k,
        })
    }
}

impl Classifier for Cnn {
    fn forward(&self, x: &Tensor, mode: &mut Mode<'_>) -> Result<Tensor> {
        let x = nchw_to_nhwc(x)?;
        let x = self.conv1.forward_relu_pool_nhwc(&x)?;
        let x = self.conv2.forward_relu_pool_nhwc(&x)?;
        let x = self.fc1.forward(&flatten_nchw_order(&x)?)?.relu()?;
        let x = match mode {
            Mode::Train(rng) => dropout(&x, self.dropout, rng)?,
            Mode::Eval => x,
        };
        self.fc2.forward(&x)
    }

    fn offer(&self, ask: Ask<'_>) -> Result<Option<Offer>> {
        match ask {
            Ask::GradNorms {
                x,
                copies,
                expected,
            } => Ok(self.grad_norms(x, copies, expected)?.map(Offer::GradNorms)),
            Ask::McDropout { x, samples, rng } => {
                Ok(Some(Offer::Draws(self.mc_dropout(x, samples, rng)?)))
            }
            Ask::LastLayer { x } => Ok(Some(Offer::LastLayer(LastLayer::new(
                &self.eval_features(x)?,
                self.fc2.weight(),
                self.fc2.bias(),
            )?))),
            _ => Ok(None),
        }
    }

    fn predict(&self, x: &Tensor) -> Result<Tensor> {
        if !kernels::supported(x) {
            return Ok(self.forward(x, &mut Mode::Eval)?.detach());
        }
        Ok(self.fc2.forward(&self.features(x)?)?.detach())
    }

    fn classes(&self) -> usize {
        self.classes
    }
}

impl Cnn {
    /// Per-candidate gradient norms: the sparse CPU kernel on the CPU, elsewhere the batched
    /// composition of candle ops ([`Cnn::grad_norms_batched`]).
    fn grad_norms(
        &self,
        x: &Tensor,
        copies: usize,
        expected: bool,
    ) -> Result<Option<gradnorm::GradOut>> {
        if copies == 0 {
            return Ok(None);
        }
        if !kernels::supported(x) {
            return self.grad_norms_batched(x, copies, expected).map(Some);
        }
        let x = nchw_to_nhwc(x)?.contiguous()?;
        Ok(Some(match x.dtype() {
            DType::F64 => crate::kernels::gradnorm::cnn_grad_norms(
                &self.weights::<f64>()?,
                &x.flatten_all()?.to_vec1()?,
                copies,
                expected,
            ),
            _ => {
                let x = x.to_dtype(DType::F32)?;
                crate::kernels::gradnorm::cnn_grad_norms(
                    &self.weights::<f32>()?,
                    &x.flatten_all()?.to_vec1()?,
                    copies,
                    expected,
                )
            }
        }))
    }

    /// [`gradnorm::site_grad_norms`] through the eval-mode forward on any device: each
    /// convolution as its unfolded input `(b, positions, k*k*in)` times the weight matrix, the
    /// dense layers as they are, a probe on every layer's output.
    fn grad_norms_batched(
        &self,
        x: &Tensor,
        copies: usize,
        expected: bool,
    ) -> Result<gradnorm::GradOut> {
        let mut a = nchw_to_nhwc(&x.detach())?;
        let mut sites = Vec::with_capacity(4);
        for conv in [&self.conv1, &self.conv2] {
            let w = conv.weight().detach();
            let (out, cin, k, _) = w.dims4()?;
            let cols = layers::im2col(&a, k, conv.padding())?;
            let (b, oh, ow, width) = cols.dims4()?;
            let cols = cols.reshape((b, oh * ow, width))?;
            // (out, in, k, k) -> (out, k*k*in), im2col's (ki, kj, c) column order.
            let wmat = w.permute((0, 2, 3, 1))?.reshape((out, k * k * cin))?;
            let z = cols
                .reshape((b * oh * ow, width))?
                .matmul(&wmat.t()?)?
                .reshape((b, oh * ow, out))?
                .broadcast_add(&conv.bias().detach())?;
            let (site, z) = gradnorm::Site::new(&cols, &z, true)?;
            sites.push(site);
            a = layers::max_pool2x2(&z.reshape((b, oh, ow, out))?.relu()?)?;
        }
        let mut h = flatten_nchw_order(&a)?;
        for (i, fc) in [&self.fc1, &self.fc2].into_iter().enumerate() {
            let mut z = h.matmul(&fc.weight().detach().t()?)?;
            if let Some(bias) = fc.bias() {
                z = z.broadcast_add(&bias.detach())?;
            }
            let (site, z) = gradnorm::Site::new(&h, &z, fc.bias().is_some())?;
            sites.push(site);
            h = if i == 0 { z.relu()? } else { z };
        }
        gradnorm::site_grad_norms(&h, &sites, copies, expected)
    }

    /// Eval-mode fc1 features `(b, 128)` after ReLU, detached: the fused kernels where they
    /// run, candle's ops elsewhere.
    fn eval_features(&self, x: &Tensor) -> Result<Tensor> {
        if kernels::supported(x) {
            return self.features(x);
        }
        let x = nchw_to_nhwc(x)?;
        let x = self
            .conv2
            .forward_relu_pool_nhwc(&self.conv1.forward_relu_pool_nhwc(&x)?)?;
        Ok(self.fc1.forward(&flatten_nchw_order(&x)?)?.relu()?.detach())
    }

    fn mc_dropout(&self, x: &Tensor, samples: usize, rng: &mut Rng) -> Result<Vec<Tensor>> {
        // Dropout sits after fc1 only: compute the features once, redraw only the head.
        let h = self.eval_features(x)?;
        (0..samples)
            .map(|_| Ok(self.fc2.forward(&dropout(&h, self.dropout, rng)?)?.detach()))
            .collect()
    }

    /// Inference-only fc1 features `(b, 128)` after ReLU, through the fused CPU kernels
    /// (same arithmetic as `forward` in eval mode up to summation order).
    fn features(&self, x: &Tensor) -> Result<Tensor> {
        let x = nchw_to_nhwc(&x.detach())?;
        let (w1, b1) = (self.conv1.weight().detach(), self.conv1.bias().detach());
        let x = x.apply_op3_no_bwd(&w1, &b1, &kernels::ConvReluPool)?;
        let (w2, b2) = (self.conv2.weight().detach(), self.conv2.bias().detach());
        let x = x.apply_op3_no_bwd(&w2, &b2, &kernels::ConvReluPool)?;
        self.fc1.forward(&flatten_nchw_order(&x)?)?.relu()
    }
}
