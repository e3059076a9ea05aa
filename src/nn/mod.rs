//! Models: the [`Classifier`] trait every model implements, the deep [`Ensemble`], and the
//! built-in softmax networks ([`Cnn`], [`Mlp`]) with their layers and seeded initialisation.
//!
//! Models follow candle's pattern: plain structs of layers built by `new(&cfg, vb)` from a
//! [`candle_nn::VarBuilder`]. For training, [`init::seeded`] supplies a builder whose
//! parameters come from the run's seeded RNG; for checkpoints, a builder over loaded tensors.
//! How a model is trained lives a layer up (`train::ModelBuilder`), and the closed set of
//! built-in architectures, DUQ included, in `models`.

pub mod gradnorm;
pub mod init;
pub mod layers;
pub mod net;
pub mod resnet;

use crate::kernels;

use crate::rng::Rng;
use candle_core::{DType, Device, Module, Result, Tensor};
use candle_nn::VarBuilder;
use layers::{dropout, flatten_nchw_order, linear, nchw_to_nhwc, Conv2d};
use serde::{Deserialize, Serialize};

/// Whether a forward pass trains (dropout on, masks from the given RNG) or evaluates.
pub enum Mode<'a> {
    /// Inference: dropout off, batch norm (if any) in eval mode.
    Eval,
    /// Training: dropout masks drawn from `rng`.
    Train(&'a mut Rng),
}

/// A classifier: inputs `(b, *item_shape)` to logits `(b, c)`.
///
/// This is the one trait a user's own candle model implements to be trained in the loop and
/// scored by every probability-based scorer.
pub trait Classifier: Send + Sync {
    /// Logits `(b, c)` for inputs `(b, *item_shape)`, differentiable w.r.t. the parameters.
    fn forward(&self, x: &Tensor, mode: &mut Mode<'_>) -> Result<Tensor>;
    /// Inference-only logits `(b, c)`: no autograd graph, free to take fused fast paths. The
    /// default is `forward` in eval mode, detached.
    fn predict(&self, x: &Tensor) -> Result<Tensor> {
        Ok(self.forward(x, &mut Mode::Eval)?.detach())
    }
    /// Evidence beyond logits that this model can give (see [`Ask`]): `None` (the default)
    /// when it has no such capability or no fast path for it. Callers go through the typed
    /// helpers ([`grad_norms`], [`mc_dropout_logits`], [`member_logits`], [`kernel_values`]),
    /// which supply the generic fallbacks; a model answers only what it does better or only
    /// it can do.
    fn offer(&self, ask: Ask<'_>) -> Result<Option<Offer>> {
        let _ = ask;
        Ok(None)
    }
    /// Number of classes `c`.
    fn classes(&self) -> usize;
    /// Whether, on `device`, row `i` of [`Classifier::predict`] (and of the features the
    /// model offers for [`Ask::LastLayer`]) depends on row `i` of the input alone, bit for bit:
    /// not on how many rows the input has nor on what the others hold. Callers then run a
    /// partial batch as it is; otherwise they fill it up to the batch size, so that an item's
    /// result never depends on which items share its batch. The default is `false`.
    fn independent_rows(&self, device: &Device) -> bool {
        let _ = device;
        false
    }
}

/// Evidence a scorer may ask a model for beyond its logits: the one capability mechanism of
/// the [`Classifier`] boundary (the trait itself carries nothing model-specific).
#[non_exhaustive]
pub enum Ask<'a> {
    /// Per-candidate gradient norms (see [`gradnorm`]): `x` is `(n * copies, *item_shape)`
    /// with each candidate's copies adjacent (copy 0 unperturbed); class gradients are
    /// averaged over copies before taking norms; `expected` adds the expected-gradient row.
    GradNorms {
        /// Inputs `(n * copies, *item_shape)`.
        x: &'a Tensor,
        /// Copies per candidate.
        copies: usize,
        /// Whether to add the expected-gradient row.
        expected: bool,
    },
    /// `samples` MC-dropout logits, each `(b, c)`, detached: dropout on with masks from
    /// `rng`, everything else in eval mode.
    McDropout {
        /// Inputs `(b, *item_shape)`.
        x: &'a Tensor,
        /// Forward passes.
        samples: usize,
        /// Source of the dropout masks.
        rng: &'a mut Rng,
    },
    /// One inference-only logits tensor `(b, c)` per ensemble member.
    Members {
        /// Inputs `(b, *item_shape)`.
        x: &'a Tensor,
    },
    /// RBF kernel values `K (b, c)` in `[0, 1]` (DUQ models; the `duq` scorer reads them).
    KernelValues {
        /// Inputs `(b, *item_shape)`.
        x: &'a Tensor,
    },
    /// Inference-only penultimate features and the last linear layer ([`LastLayer`]): what
    /// feature-space selectors and last-layer gradient scores read. Models whose logits are
    /// not one linear map of features (DUQ's RBF head) answer `None`.
    LastLayer {
        /// Inputs `(b, *item_shape)`.
        x: &'a Tensor,
    },
}

impl Ask<'_> {
    fn name(&self) -> &'static str {
        match self {
            Ask::GradNorms { .. } => "gradient norms",
            Ask::McDropout { .. } => "MC-dropout draws",
            Ask::Members { .. } => "member draws",
            Ask::KernelValues { .. } => "kernel values",
            Ask::LastLayer { .. } => "features and the last layer",
        }
    }
}

/// A model's answer to an [`Ask`], of the matching kind.
pub enum Offer {
    /// Answers [`Ask::GradNorms`].
    GradNorms(gradnorm::GradOut),
    /// Answers [`Ask::McDropout`] and [`Ask::Members`]: one logits tensor `(b, c)` per draw.
    Draws(Vec<Tensor>),
    /// Answers [`Ask::KernelValues`]: `K (b, c)`.
    KernelValues(Tensor),
    /// Answers [`Ask::LastLayer`].
    LastLayer(LastLayer),
}

/// A model's penultimate features and its last linear layer, whose logits are
/// `h W^T + b` (up to the rounding of the model's own path).
#[derive(Debug, Clone)]
pub struct LastLayer {
    /// Features `(b, d)` the last layer multiplies, detached.
    pub h: Tensor,
    /// The last layer's weight `(c, d)`, detached.
    pub w: Tensor,
    /// Its bias `(c,)` (zeros when the layer has none), detached.
    pub b: Tensor,
}

impl LastLayer {
    /// Features `h (b, d)` with a last layer's weight `(c, d)` and bias (a bias-free layer
    /// gets zeros), all detached.
    pub fn new(h: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<Self> {
        let w = w.detach();
        let b = match b {
            Some(b) => b.detach(),
            None => Tensor::zeros(w.dim(0)?, w.dtype(), w.device())?,
        };
        Ok(LastLayer {
            h: h.detach(),
            w,
            b,
        })
    }
}

/// Asks `model`, and checks that an answer is of the kind `unpack` accepts.
fn ask<T>(
    model: &dyn Classifier,
    ask: Ask<'_>,
    unpack: fn(Offer) -> Option<T>,
) -> Result<Option<T>> {
    let asked = ask.name();
    model
        .offer(ask)?
        .map(|offer| {
            unpack(offer).ok_or_else(|| {
                candle_core::Error::Msg(format!(
                    "the model answered a request for {asked} with another kind"
                ))
            })
        })
        .transpose()
}

fn draws(offer: Offer) -> Option<Vec<Tensor>> {
    match offer {
        Offer::Draws(d) => Some(d),
        _ => None,
    }
}

/// The model's fast per-candidate gradient norms ([`Ask::GradNorms`]), or `None` when it has
/// none (callers then use [`gradnorm::autograd_grad_norms`]).
pub fn grad_norms(
    model: &dyn Classifier,
    x: &Tensor,
    copies: usize,
    expected: bool,
) -> Result<Option<gradnorm::GradOut>> {
    let request = Ask::GradNorms {
        x,
        copies,
        expected,
    };
    ask(model, request, |offer| match offer {
        Offer::GradNorms(g) => Some(g),
        _ => None,
    })
}

/// `samples` MC-dropout logits `(b, c)`, detached ([`Ask::McDropout`]); models without a
/// faster way run `forward` in training mode `samples` times.
pub fn mc_dropout_logits(
    model: &dyn Classifier,
    x: &Tensor,
    samples: usize,
    rng: &mut Rng,
) -> Result<Vec<Tensor>> {
    let request = Ask::McDropout {
        x,
        samples,
        rng: &mut *rng,
    };
    match ask(model, request, draws)? {
        Some(d) => Ok(d),
        None => (0..samples)
            .map(|_| Ok(model.forward(x, &mut Mode::Train(rng))?.detach()))
            .collect(),
    }
}

/// One logits tensor `(b, c)` per ensemble member ([`Ask::Members`]), `None` for a single
/// model.
pub fn member_logits(model: &dyn Classifier, x: &Tensor) -> Result<Option<Vec<Tensor>>> {
    ask(model, Ask::Members { x }, draws)
}

/// RBF kernel values `K (b, c)` ([`Ask::KernelValues`]), `None` for models without them.
pub fn kernel_values(model: &dyn Classifier, x: &Tensor) -> Result<Option<Tensor>> {
    ask(model, Ask::KernelValues { x }, |offer| match offer {
        Offer::KernelValues(k) => Some(k),
        _ => None,
    })
}

/// The model's penultimate features and last layer ([`Ask::LastLayer`]), `None` for models
/// without one (DUQ, an ensemble, a user model that does not offer them).
pub fn last_layer(model: &dyn Classifier, x: &Tensor) -> Result<Option<LastLayer>> {
    ask(model, Ask::LastLayer { x }, |offer| match offer {
        Offer::LastLayer(l) => Some(l),
        _ => None,
    })
}

/// A deep ensemble (Lakshminarayanan et al. 2017): members trained independently (different
/// initialisations and batch orders), predicting the mean of their probabilities.
///
/// Its logits are `log mean_k softmax(member_k(x))` (log-probabilities are valid logits), so
/// every probability scorer sees the ensemble's predictive distribution, and
/// [`member_logits`] (its answer to [`Ask::Members`]) gives sample scorers (BALD, class variance, ...) and
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
