//! Residual blocks of ResNet (He et al. 2016) with torchvision's names: [`BasicBlock`]
//! (two 3x3 convolutions, ResNet-18 and -34) and [`Bottleneck`] (1x1, 3x3, 1x1 with a
//! four-fold expansion, ResNet-50; the stride on the 3x3 as in torchvision's "v1.5"), each
//! with a 1x1 convolution and batch norm as `downsample.{0,1}` where the shape changes.

use super::layer::{relu_backward, Ctx, Layer};
use super::tape::Tape;
use super::{BatchNorm2d, Conv2d, Conv2dConfig};
use candle_core::{Result, Tensor};
use candle_nn::init::{FanInOut, NonLinearity, NormalOrUniform};
use candle_nn::{Init, VarBuilder};

/// torchvision's ResNet convolution init: Kaiming normal, fan-out, ReLU gain.
pub(crate) const KAIMING_OUT: Init = Init::Kaiming {
    dist: NormalOrUniform::Normal,
    fan: FanInOut::FanOut,
    non_linearity: NonLinearity::ReLU,
};

/// A bias-free convolution with torchvision's ResNet init.
pub(crate) fn conv(
    inputs: usize,
    outputs: usize,
    kernel: usize,
    stride: usize,
    vb: VarBuilder,
) -> Result<Conv2d> {
    let cfg = Conv2dConfig {
        kernel,
        stride,
        padding: kernel / 2,
        groups: 1,
        bias: false,
        init: Some(KAIMING_OUT),
    };
    Conv2d::new(inputs, outputs, cfg, vb)
}

/// The shortcut: identity, or `downsample.0` (1x1 conv, stride) and `downsample.1` (batch
/// norm) when the block changes the shape.
struct Shortcut(Option<(Conv2d, BatchNorm2d)>);

impl Shortcut {
    fn new(inputs: usize, outputs: usize, stride: usize, vb: VarBuilder) -> Result<Self> {
        Ok(Shortcut(if stride != 1 || inputs != outputs {
            let vb = vb.pp("downsample");
            Some((
                conv(inputs, outputs, 1, stride, vb.pp("0"))?,
                BatchNorm2d::new(outputs, vb.pp("1"))?,
            ))
        } else {
            None
        }))
    }

    fn forward(&self, x: &Tensor, ctx: &mut Ctx<'_>) -> Result<Tensor> {
        match &self.0 {
            None => Ok(x.clone()),
            Some((c, bn)) => bn.forward(&c.forward(x, ctx)?, ctx),
        }
    }

    fn backward(&self, d: &Tensor, tape: &mut Tape) -> Result<Tensor> {
        match &self.0 {
            None => Ok(d.clone()),
            Some((c, bn)) => c.backward(&bn.backward(d, tape)?, tape),
        }
    }
}

/// `relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x))`.
pub struct BasicBlock {
    conv1: Conv2d,
    bn1: BatchNorm2d,
    conv2: Conv2d,
    bn2: BatchNorm2d,
    shortcut: Shortcut,
}

impl BasicBlock {
    /// Output channels per input channel of the block's width.
    pub const EXPANSION: usize = 1;

    /// A block from `inputs` to `width` channels, the first convolution `stride` apart.
    pub fn new(inputs: usize, width: usize, stride: usize, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            conv1: conv(inputs, width, 3, stride, vb.pp("conv1"))?,
            bn1: BatchNorm2d::new(width, vb.pp("bn1"))?,
            conv2: conv(width, width, 3, 1, vb.pp("conv2"))?,
            bn2: BatchNorm2d::new(width, vb.pp("bn2"))?,
            shortcut: Shortcut::new(inputs, width, stride, vb)?,
        })
    }
}

impl Layer for BasicBlock {
    fn forward(&self, x: &Tensor, ctx: &mut Ctx<'_>) -> Result<Tensor> {
        let h = self.bn1.forward(&self.conv1.forward(x, ctx)?, ctx)?;
        let h = ctx.relu(&h)?;
        let h = self.bn2.forward(&self.conv2.forward(&h, ctx)?, ctx)?;
        let short = self.shortcut.forward(x, ctx)?;
        ctx.add_relu(&h, &short)
    }
    fn backward(&self, d: &Tensor, tape: &mut Tape) -> Result<Tensor> {
        // Read back in reverse: the output ReLU, the shortcut, then the main path.
        let d = relu_backward(d, tape)?;
        let short = self.shortcut.backward(&d, tape)?;
        let d = self.conv2.backward(&self.bn2.backward(&d, tape)?, tape)?;
        let d = relu_backward(&d, tape)?;
        let d = self.conv1.backward(&self.bn1.backward(&d, tape)?, tape)?;
        d + short
    }
    fn independent_rows(&self) -> bool {
        true
    }
}

/// `relu(bn3(conv3(relu(bn2(conv2(relu(bn1(conv1(x)))))))) + shortcut(x))`, `conv1` and
/// `conv3` 1x1, `conv2` 3x3 with the stride.
pub struct Bottleneck {
    conv1: Conv2d,
    bn1: BatchNorm2d,
    conv2: Conv2d,
    bn2: BatchNorm2d,
    conv3: Conv2d,
    bn3: BatchNorm2d,
    shortcut: Shortcut,
}

impl Bottleneck {
    /// Output channels per channel of the block's width.
    pub const EXPANSION: usize = 4;

    /// A block from `inputs` to `4 width` channels through `width`, the 3x3 `stride` apart.
    pub fn new(inputs: usize, width: usize, stride: usize, vb: VarBuilder) -> Result<Self> {
        let out = width * Self::EXPANSION;
        Ok(Self {
            conv1: conv(inputs, width, 1, 1, vb.pp("conv1"))?,
            bn1: BatchNorm2d::new(width, vb.pp("bn1"))?,
            conv2: conv(width, width, 3, stride, vb.pp("conv2"))?,
            bn2: BatchNorm2d::new(width, vb.pp("bn2"))?,
            conv3: conv(width, out, 1, 1, vb.pp("conv3"))?,
            bn3: BatchNorm2d::new(out, vb.pp("bn3"))?,
            shortcut: Shortcut::new(inputs, out, stride, vb)?,
        })
    }
}

impl Layer for Bottleneck {
    fn forward(&self, x: &Tensor, ctx: &mut Ctx<'_>) -> Result<Tensor> {
        let h = self.bn1.forward(&self.conv1.forward(x, ctx)?, ctx)?;
        let h = ctx.relu(&h)?;
        let h = self.bn2.forward(&self.conv2.forward(&h, ctx)?, ctx)?;
        let h = ctx.relu(&h)?;
        let h = self.bn3.forward(&self.conv3.forward(&h, ctx)?, ctx)?;
        let short = self.shortcut.forward(x, ctx)?;
        ctx.add_relu(&h, &short)
    }
    fn backward(&self, d: &Tensor, tape: &mut Tape) -> Result<Tensor> {
        let d = relu_backward(d, tape)?;
        let short = self.shortcut.backward(&d, tape)?;
        let d = self.conv3.backward(&self.bn3.backward(&d, tape)?, tape)?;
        let d = relu_backward(&d, tape)?;
        let d = self.conv2.backward(&self.bn2.backward(&d, tape)?, tape)?;
        let d = relu_backward(&d, tape)?;
        let d = self.conv1.backward(&self.bn1.backward(&d, tape)?, tape)?;
        d + short
    }
    fn independent_rows(&self) -> bool {
        true
    }
}
