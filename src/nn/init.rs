//! Seeded parameter initialisation behind candle's [`VarBuilder`].
//!
//! Candle's CPU generator cannot be seeded, so `VarMap`'s random init is not reproducible.
//! [`seeded`] returns a `VarBuilder` whose backend draws every parameter from alkit's ChaCha
//! stream (honouring candle's [`Init`] hints, so `candle_nn::linear` and friends work
//! unchanged) and a [`Weights`] handle that lists the created [`Var`]s by name, for the
//! optimiser and for checkpoints. Same seed, same model, bit for bit.

use crate::rng::{normal, uniform, Rng};
use candle_core::{DType, Device, Result, Shape, Tensor, Var};
use candle_nn::init::{FanInOut, NonLinearity, NormalOrUniform};
use candle_nn::var_builder::SimpleBackend;
use candle_nn::{Init, VarBuilder};
use rand::SeedableRng;
use std::sync::{Arc, Mutex};

struct State {
    rng: Rng,
    vars: Vec<(String, Var)>,
}

/// A model's weights: the trainable parameters a seeded [`VarBuilder`] created (or a
/// checkpoint loaded), by full name.
#[derive(Clone)]
pub struct Weights {
    state: Arc<Mutex<State>>,
}

impl Weights {
    /// Wraps existing `(name, var)` pairs (e.g. loaded from a checkpoint).
    pub fn from_named(vars: Vec<(String, Var)>) -> Weights {
        Weights {
            state: Arc::new(Mutex::new(State {
                rng: Rng::seed_from_u64(0),
                vars,
            })),
        }
    }

    /// `(name, var)` pairs in creation order.
    pub fn named(&self) -> Vec<(String, Var)> {
        self.lock().vars.clone()
    }

    /// The vars in creation order.
    pub fn vars(&self) -> Vec<Var> {
        self.lock().vars.iter().map(|(_, v)| v.clone()).collect()
    }

    /// The vars an optimiser updates, in creation order: all but buffers ([`is_buffer`]),
    /// which their layers update themselves.
    pub fn trainable(&self) -> Vec<Var> {
        self.lock()
            .vars
            .iter()
            .filter(|(n, _)| !is_buffer(n))
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// One ensemble's parameters from its members': member `k`'s `name` becomes `m{k}.name`,
    /// the one naming of ensemble parameters (inverse: [`Weights::member`]).
    pub fn of_members<'a>(members: impl IntoIterator<Item = &'a Weights>) -> Weights {
        Weights::from_named(
            members
                .into_iter()
                .enumerate()
                .flat_map(|(k, p)| {
                    p.named()
                        .into_iter()
                        .map(move |(n, v)| (format!("m{k}.{n}"), v))
                })
                .collect(),
        )
    }

    /// Member `k`'s parameters of an ensemble's (see [`Weights::of_members`]), names without
    /// the `m{k}.` prefix.
    pub fn member(&self, k: usize) -> Weights {
        let prefix = format!("m{k}.");
        Weights::from_named(
            self.named()
                .into_iter()
                .filter_map(|(n, v)| n.strip_prefix(&prefix).map(|n| (n.to_string(), v)))
                .collect(),
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A poisoned lock only means another thread panicked mid-init; the data is still a
        // valid list of vars.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Whether a tensor name is a batch-norm buffer (running statistics, or PyTorch's batch
/// counter) rather than a trainable parameter.
pub fn is_buffer(name: &str) -> bool {
    matches!(
        name.rsplit('.').next(),
        Some("running_mean" | "running_var" | "num_batches_tracked")
    )
}

struct Backend {
    params: Weights,
    /// False for [`shapes`]: parameters are zeros, nothing is drawn.
    draws: bool,
}

fn fans(shape: &Shape) -> (usize, usize) {
    let d = shape.dims();
    let receptive: usize = d.iter().skip(2).product();
    match d.len() {
        0 => (1, 1),
        1 => (d[0], d[0]),
        _ => (d[1] * receptive, d[0] * receptive),
    }
}

fn draw(rng: &mut Rng, init: Init, shape: &Shape) -> Vec<f64> {
    let n = shape.elem_count();
    match init {
        Init::Const(v) => vec![v; n],
        Init::Uniform { lo, up } => (0..n).map(|_| lo + (up - lo) * uniform(rng)).collect(),
        Init::Randn { mean, stdev } => (0..n).map(|_| mean + stdev * normal(rng)).collect(),
        Init::Kaiming {
            dist,
            fan,
            non_linearity,
        } => {
            let (fan_in, fan_out) = fans(shape);
            let f = match fan {
                FanInOut::FanIn => fan_in,
                FanInOut::FanOut => fan_out,
            } as f64;
            let gain = match non_linearity {
                NonLinearity::ReLU => 2f64.sqrt(),
                NonLinearity::Tanh => 5.0 / 3.0,
                NonLinearity::Linear | NonLinearity::Sigmoid => 1.0,
                NonLinearity::SELU => 0.75,
                NonLinearity::ExplicitGain(g) => g,
            };
            let std = gain / f.sqrt();
            match dist {
                NormalOrUniform::Normal => (0..n).map(|_| std * normal(rng)).collect(),
                NormalOrUniform::Uniform => {
                    let b = 3f64.sqrt() * std;
                    (0..n).map(|_| -b + 2.0 * b * uniform(rng)).collect()
                }
            }
        }
    }
}

impl SimpleBackend for Backend {
    fn get(&self, s: Shape, name: &str, h: Init, dtype: DType, dev: &Device) -> Result<Tensor> {
        let mut st = self.params.lock();
        if let Some((_, v)) = st.vars.iter().find(|(n, _)| n == name) {
            if v.shape() != &s {
                candle_core::bail!(
                    "parameter {name} requested as {s:?}, exists as {:?}",
                    v.shape()
                );
            }
            return Ok(v.as_tensor().clone());
        }
        let t = if self.draws {
            let values = draw(&mut st.rng, h, &s);
            Tensor::from_vec(values, s, dev)?.to_dtype(dtype)?
        } else {
            Tensor::zeros(s, dtype, dev)?
        };
        let var = Var::from_tensor(&t)?;
        st.vars.push((name.to_string(), var.clone()));
        Ok(var.as_tensor().clone())
    }

    fn get_unchecked(&self, name: &str, _dtype: DType, _dev: &Device) -> Result<Tensor> {
        let st = self.params.lock();
        match st.vars.iter().find(|(n, _)| n == name) {
            Some((_, v)) => Ok(v.as_tensor().clone()),
            None => candle_core::bail!("parameter {name} has no shape hint: use a shaped get"),
        }
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.params.lock().vars.iter().any(|(n, _)| n == name)
    }
}

/// A `VarBuilder` drawing fresh parameters from `rng`, plus the handle listing them.
pub fn seeded(rng: Rng, dtype: DType, device: &Device) -> (VarBuilder<'static>, Weights) {
    let params = Weights {
        state: Arc::new(Mutex::new(State {
            rng,
            vars: Vec::new(),
        })),
    };
    builder(params, true, dtype, device)
}

/// A `VarBuilder` whose parameters are all zeros, drawn from nothing, plus the handle listing
/// them: what an architecture's tensor names and shapes are learnt from when a checkpoint
/// supplies the values (drawing a ResNet-50's 25 million initial values costs more than
/// reading its weights file).
pub fn shapes(dtype: DType, device: &Device) -> (VarBuilder<'static>, Weights) {
    builder(Weights::from_named(Vec::new()), false, dtype, device)
}

/// A `VarBuilder` creating its parameters into `params` (drawn from its RNG when `draws`,
/// else zeros), plus that handle.
fn builder(
    params: Weights,
    draws: bool,
    dtype: DType,
    device: &Device,
) -> (VarBuilder<'static>, Weights) {
    let backend = Backend {
        params: params.clone(),
        draws,
    };
    let vb = VarBuilder::from_backend(Box::new(backend), dtype, device.clone());
    (vb, params)
}
