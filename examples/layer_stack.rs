//! A user's own model built from alkit's layer library, with batched gradient evidence it
//! wrote no code for.
//!
//! `SmallResNet` stacks library layers (convolutions, batch norm, a residual block, global
//! pooling, dropout, a dense head) into a `Net`. alkit trains it (seeded, Adam, batch norm's
//! running statistics updated), and because every layer records what its weight multiplies,
//! REGrad's per-class, per-layer gradient norms come from one backward of the whole batch per
//! class, not one per candidate and class. The example checks that against the autograd
//! fallback (one backward per candidate and class) on the same model, and times the fallback
//! also on the same network written with `candle_nn` layers, which is what a hand-written
//! model gets:
//!
//! ```text
//! cargo run --release --example layer_stack
//! ```

use alkit::data::{load_idx_dir, Normalizer};
use alkit::nn::gradnorm::autograd_grad_norms;
use alkit::nn::net::{
    BasicBlock, BatchNorm2d, Conv2d, Conv2dConfig, Dropout, GlobalAvgPool, Linear, Net, Relu,
    Sequential,
};
use alkit::nn::{grad_norms, Classifier, Mode};
use alkit::observe::Silent;
use alkit::train::{train, ModelBuilder, TrainConfig};
use candle_core::{Device, Tensor};
use candle_nn::{ModuleT, VarBuilder};
use std::time::Instant;

/// conv 3x3 (16) - bn - relu - a residual block to 32 channels at stride 2 - global average
/// pool - dropout - dense.
struct SmallResNet {
    in_channels: usize,
    classes: usize,
}

impl ModelBuilder for SmallResNet {
    fn build(&self, vb: VarBuilder) -> candle_core::Result<Box<dyn Classifier>> {
        let conv = Conv2dConfig {
            kernel: 3,
            padding: 1,
            bias: false,
            ..Default::default()
        };
        let body = Sequential::new()
            .with(Conv2d::new(self.in_channels, 16, conv, vb.pp("conv1"))?)
            .with(BatchNorm2d::new(16, vb.pp("bn1"))?)
            .with(Relu)
            .with(BasicBlock::new(16, 32, 2, vb.pp("block"))?)
            .with(GlobalAvgPool)
            .with(Dropout::new(0.2)?)
            .with(Linear::new(32, self.classes, true, vb.pp("fc"))?);
        Ok(Box::new(Net::new(body, self.classes)))
    }
}

/// The same network with `candle_nn` layers (NCHW): no gradient fast path of its own.
struct CandleSmallResNet {
    conv1: candle_nn::Conv2d,
    bn1: candle_nn::BatchNorm,
    conv_a: candle_nn::Conv2d,
    bn_a: candle_nn::BatchNorm,
    conv_b: candle_nn::Conv2d,
    bn_b: candle_nn::BatchNorm,
    down: candle_nn::Conv2d,
    bn_down: candle_nn::BatchNorm,
    fc: candle_nn::Linear,
    classes: usize,
}

impl CandleSmallResNet {
    fn new(in_channels: usize, classes: usize, vb: VarBuilder) -> candle_core::Result<Self> {
        let conv = |i, o, k, stride, vb| {
            let cfg = candle_nn::Conv2dConfig {
                padding: k / 2,
                stride,
                ..Default::default()
            };
            candle_nn::conv2d_no_bias(i, o, k, cfg, vb)
        };
        let bn = |c, vb| candle_nn::batch_norm(c, 1e-5, vb);
        Ok(Self {
            conv1: conv(in_channels, 16, 3, 1, vb.pp("conv1"))?,
            bn1: bn(16, vb.pp("bn1"))?,
            conv_a: conv(16, 32, 3, 2, vb.pp("block.conv1"))?,
            bn_a: bn(32, vb.pp("block.bn1"))?,
            conv_b: conv(32, 32, 3, 1, vb.pp("block.conv2"))?,
            bn_b: bn(32, vb.pp("block.bn2"))?,
            down: conv(16, 32, 1, 2, vb.pp("block.downsample.0"))?,
            bn_down: bn(32, vb.pp("block.downsample.1"))?,
            fc: candle_nn::linear(32, classes, vb.pp("fc"))?,
            classes,
        })
    }
}

impl Classifier for CandleSmallResNet {
    fn forward(&self, x: &Tensor, mode: &mut Mode<'_>) -> candle_core::Result<Tensor> {
        let train = matches!(mode, Mode::Train(_));
        let h = self
            .bn1
            .forward_t(&self.conv1.forward_t(x, train)?, train)?
            .relu()?;
        let a = self
            .bn_a
            .forward_t(&self.conv_a.forward_t(&h, train)?, train)?
            .relu()?;
        let a = self
            .bn_b
            .forward_t(&self.conv_b.forward_t(&a, train)?, train)?;
        let d = self
            .bn_down
            .forward_t(&self.down.forward_t(&h, train)?, train)?;
        let pooled = (a + d)?.relu()?.mean((2, 3))?;
        let pooled = match mode {
            Mode::Train(rng) => alkit::nn::layers::dropout(&pooled, 0.2, rng)?,
            Mode::Eval => pooled,
        };
        self.fc.forward_t(&pooled, train)
    }
    fn classes(&self) -> usize {
        self.classes
    }
}

fn main() -> Result<(), alkit::Error> {
    alkit::tune_allocator();
    let device = Device::Cpu;
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data");
    let splits = load_idx_dir(&data)?;
    let norm = Normalizer::fit(&splits.train);
    let ds = norm.apply(&splits.train)?;
    let builder = SmallResNet {
        in_channels: ds.item_shape()[0],
        classes: ds.classes(),
    };
    let labeled: Vec<usize> = (0..200).collect();
    let params = TrainConfig {
        steps: 100,
        ..TrainConfig::default()
    }
    .validate()?;
    let trained = train(
        &builder,
        None,
        &ds,
        &labeled,
        &params,
        (0, 0),
        &device,
        &mut Silent,
    )?;
    let model = trained.model.as_ref();
    let candidates: Vec<usize> = (200..264).collect();
    let x: Tensor = ds.batch(&candidates, &device)?;
    // The library's batched evidence, then the autograd fallback (one backward per candidate
    // and class) on the same candidates.
    let t = Instant::now();
    let fast = grad_norms(model, &x, 1, false)?.ok_or_else(|| {
        alkit::Error::config("model", "a library model offers batched gradient norms")
    })?;
    let fast_s = t.elapsed().as_secs_f64();
    let named: Vec<(String, Tensor)> = trained
        .params
        .named()
        .into_iter()
        .map(|(n, v)| (n, v.as_tensor().clone()))
        .collect();
    let t = Instant::now();
    let slow = autograd_grad_norms(model, &named, &x, 1, false)?;
    let slow_s = t.elapsed().as_secs_f64();
    let worst = fast
        .sq
        .iter()
        .zip(&slow.sq)
        .map(|(a, b)| (a - b).abs() / a.abs().max(b.abs()).max(1e-30))
        .fold(0f64, f64::max);
    // The hand-written candle_nn version (seeded weights; speed does not depend on them) on
    // the first 16 candidates: its only gradient path is the fallback.
    let (vb, hand_params) = alkit::nn::init::seeded(
        alkit::rng::stream(0, alkit::rng::Purpose::Init, 0),
        candle_core::DType::F32,
        &device,
    );
    let hand = CandleSmallResNet::new(builder.in_channels, builder.classes, vb)?;
    let hand_named: Vec<(String, Tensor)> = hand_params
        .named()
        .into_iter()
        .map(|(n, v)| (n, v.as_tensor().clone()))
        .collect();
    let few = x.narrow(0, 0, 16)?;
    let t = Instant::now();
    autograd_grad_norms(&hand, &hand_named, &few, 1, false)?;
    let hand_rate = 16.0 / t.elapsed().as_secs_f64();
    let n = candidates.len() as f64;
    #[allow(clippy::print_stdout)]
    {
        println!(
            "REGrad evidence ({} layers x {} classes), candidates/s: layer library, batched {:.1}; \
             the same model by per-candidate autograd {:.1} ({:.1}x slower; largest relative \
             difference {:.1e}); the same network in candle_nn layers by autograd {:.1} ({:.1}x \
             slower)",
            fast.layers,
            fast.rows,
            n / fast_s,
            n / slow_s,
            slow_s / fast_s,
            worst,
            hand_rate,
            n / fast_s / hand_rate
        );
    }
    if worst > 1e-3 {
        return Err(alkit::Error::config(
            "gradients",
            format!("the batched and autograd evidence differ by {worst:.1e}"),
        ));
    }
    Ok(())
}
