//! The [`Layer`] trait every layer of the library implements, the [`Ctx`] a forward pass
//! carries (what it is for, the tape it records on), ReLU's backward the blocks share, and
//! [`Linear`], the one layer the trait names (a network's last layer is read through it), so
//! it lives beside the trait.

use super::tape::Tape;
use crate::nn::gradnorm::SiteKind;
use crate::rng::Rng;
use candle_core::{Result, Tensor};
use candle_nn::{Init, VarBuilder};

/// What a forward pass is for (see the module docs).
pub struct Ctx<'a> {
    train: bool,
    params_grad: bool,
    rng: Option<&'a mut Rng>,
    tape: Option<Tape>,
}

impl<'a> Ctx<'a> {
    /// Training: batch statistics (running statistics updated), dropout masks from `rng`.
    pub fn train(rng: &'a mut Rng) -> Self {
        Self {
            train: true,
            params_grad: true,
            rng: Some(rng),
            tape: None,
        }
    }

    /// Evaluation, differentiable in the parameters: running statistics, no dropout.
    pub fn eval() -> Self {
        Self {
            train: false,
            params_grad: true,
            rng: None,
            tape: None,
        }
    }

    /// Inference: as [`Ctx::eval`] with the parameters detached (no graph is built for them).
    pub fn inference() -> Self {
        Self {
            params_grad: false,
            ..Self::eval()
        }
    }

    /// MC dropout: inference with dropout masks from `rng`.
    pub fn mc_dropout(rng: &'a mut Rng) -> Self {
        Self {
            rng: Some(rng),
            ..Self::inference()
        }
    }

    /// A gradient-evidence pass: inference where every parameterised layer records a site.
    pub fn recording() -> Self {
        Self {
            tape: Some(Tape::new()),
            ..Self::inference()
        }
    }

    /// A pass whose tape gives a differentiable input gradient (DUQ's penalty, see
    /// [`Tape`]): parameters in the graph, batch statistics when `train`, no dropout.
    pub fn differentiable(train: bool) -> Self {
        Self {
            train,
            params_grad: true,
            rng: None,
            tape: Some(Tape::differentiable(train)),
        }
    }

    /// Whether batch statistics are used (and running statistics updated).
    pub fn training(&self) -> bool {
        self.train
    }

    /// Whether parameterised layers record sites in this pass.
    pub fn is_recording(&self) -> bool {
        self.tape.is_some()
    }

    /// Saves `t` for the layer's backward in a recording pass.
    pub fn save(&mut self, t: &Tensor) {
        if let Some(tape) = &mut self.tape {
            tape.save(t);
        }
    }

    /// Saves a shape for the layer's backward in a recording pass.
    pub fn save_dims(&mut self, dims: &[usize]) {
        if let Some(tape) = &mut self.tape {
            tape.save_dims(dims);
        }
    }

    /// `max(x, 0)`, its output saved for [`relu_backward`] in a recording pass.
    pub fn relu(&mut self, x: &Tensor) -> Result<Tensor> {
        let y = crate::nn::layers::relu(x)?;
        self.save(&y);
        Ok(y)
    }

    /// Whether this pass may compute on `ts` with the crate's inference-only kernels (which
    /// have no backward): it records nothing, they are on a device the kernels serve, and
    /// none is differentiated.
    pub(crate) fn inference_kernels(&self, ts: &[&Tensor]) -> bool {
        !self.is_recording()
            && ts
                .iter()
                .all(|t| crate::kernels::supported(t) && !t.track_op())
    }

    /// `max(a + b, 0)` (a residual block's output): one pass on the CPU when nothing is
    /// recorded or differentiated, else the sum and [`Ctx::relu`].
    pub fn add_relu(&mut self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        if self.inference_kernels(&[a, b]) && a.dtype() == b.dtype() && a.dims() == b.dims() {
            return a
                .contiguous()?
                .apply_op2(&b.contiguous()?, crate::kernels::relu::AddRelu);
        }
        self.relu(&(a + b)?)
    }

    /// `a (m, k) w (n, k)^T`: with the inference kernels, each row rounded on its own
    /// (`kernels::MatmulRows`), so that a partial batch needs no filling up; else candle's
    /// product.
    pub(crate) fn matmul_t(&self, a: &Tensor, w: &Tensor) -> Result<Tensor> {
        if self.inference_kernels(&[a, w]) {
            return a
                .contiguous()?
                .apply_op2(&w.contiguous()?, crate::kernels::MatmulRows);
        }
        a.matmul(&w.t()?)
    }

    /// `t` as a layer should use it: detached unless the pass differentiates the parameters.
    pub fn param(&self, t: &Tensor) -> Tensor {
        if self.params_grad {
            t.clone()
        } else {
            t.detach()
        }
    }

    /// The dropout masks' source, when this pass draws them.
    pub fn dropout_rng(&mut self) -> Option<&mut Rng> {
        self.rng.as_deref_mut()
    }

    /// A parameterised layer's output `z`, returned as it is; a recording pass records the
    /// layer (what its weight multiplies, see [`SiteKind`]), and its backward must call
    /// [`Tape::site`] with `z`'s gradient.
    pub fn site(
        &mut self,
        kind: SiteKind,
        input: &Tensor,
        z: Tensor,
        bias: bool,
    ) -> Result<Tensor> {
        if let Some(tape) = &mut self.tape {
            tape.save_site(kind, bias, input);
        }
        Ok(z)
    }

    /// The tape of a recording pass.
    pub fn take_tape(&mut self) -> Option<Tape> {
        self.tape.take()
    }
}

/// The backward of [`Ctx::relu`]: `d` where the saved output is positive, else 0.
pub fn relu_backward(d: &Tensor, tape: &mut Tape) -> Result<Tensor> {
    let y = tape.tensor()?;
    crate::nn::layers::relu_mask(&y, d)
}

/// One layer: activations in, activations out (images NHWC, vectors `(b, f)`).
pub trait Layer: Send + Sync {
    /// The layer applied to `x` for the pass `ctx` describes.
    fn forward(&self, x: &Tensor, ctx: &mut Ctx<'_>) -> Result<Tensor>;
    /// The vector-Jacobian product of an evaluation-mode forward: the input gradient for the
    /// output gradient `d`, from what this layer's recording forward saved on `tape` (read
    /// back in reverse order); a parameterised layer passes its output gradient to
    /// [`Tape::site`] first.
    fn backward(&self, d: &Tensor, tape: &mut Tape) -> Result<Tensor>;
    /// Whether the layer draws dropout masks (MC dropout recomputes from the first such
    /// layer on).
    fn stochastic(&self) -> bool {
        false
    }
    /// Whether, in an inference pass ([`Ctx::inference`]) on the CPU with the crate's
    /// kernels, row `i` of the output depends on row `i` of the input alone, bit for bit:
    /// not on how many rows there are nor on what the others hold (see
    /// [`crate::nn::Classifier::independent_rows`]). The default is `false`, so a layer of
    /// one's own keeps its network's batches filled up unless it says otherwise.
    fn independent_rows(&self) -> bool {
        false
    }
    /// The layer as a dense [`Linear`] map (a network ending in one offers its features
    /// and last layer); `None` for every other layer.
    fn as_linear(&self) -> Option<&Linear> {
        None
    }
}

/// `(b, in)` -> `(b, out)`. Tensors `weight (out, in)`, `bias (out,)` when it has one.
pub struct Linear {
    weight: Tensor,
    bias: Option<Tensor>,
}

impl Linear {
    /// PyTorch's default: weight and bias `U(-1/sqrt(in), 1/sqrt(in))`.
    pub fn new(inputs: usize, outputs: usize, bias: bool, vb: VarBuilder) -> Result<Self> {
        let b = 1.0 / (inputs as f64).sqrt();
        let init = Init::Uniform { lo: -b, up: b };
        Ok(Self {
            weight: vb.get_with_hints((outputs, inputs), "weight", init)?,
            bias: if bias {
                Some(vb.get_with_hints(outputs, "bias", init)?)
            } else {
                None
            },
        })
    }

    /// Weight `(out, in)`.
    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    /// Bias `(out,)`, if the layer has one.
    pub fn bias(&self) -> Option<&Tensor> {
        self.bias.as_ref()
    }
}

impl Layer for Linear {
    fn forward(&self, x: &Tensor, ctx: &mut Ctx<'_>) -> Result<Tensor> {
        let (inputs, w) = (x.dim(1)?, self.weight.dim(1)?);
        if x.rank() != 2 || inputs != w {
            candle_core::bail!(
                "a linear layer of {w} inputs got activations {:?}",
                x.dims()
            );
        }
        let mut z = ctx.matmul_t(x, &ctx.param(&self.weight))?;
        if let Some(b) = &self.bias {
            z = z.broadcast_add(&ctx.param(b))?;
        }
        ctx.site(SiteKind::Dense, x, z, self.bias.is_some())
    }
    fn backward(&self, d: &Tensor, tape: &mut Tape) -> Result<Tensor> {
        tape.site(d)?;
        d.matmul(&tape.param(&self.weight))
    }
    fn as_linear(&self) -> Option<&Linear> {
        Some(self)
    }
    fn independent_rows(&self) -> bool {
        true
    }
}
