//! One training-mode block as one op ([`TrainBlock`]) and its share of the input gradient as
//! another ([`BlockInputGrad`]), joined by a [`BlockLink`] that keeps the convolution output
//! out of candle's graph: for DUQ with a gradient penalty.

use super::super::conv::{conv_t_backward, Conv, ConvT};
use super::super::enabled::entry;
use super::block::{block_backward, detached, keep, packed_start, Packed};
use super::bn_relu_pool::{pair, BnReluPool, BnReluPoolGrad};
use candle_core::{CpuStorage, CustomOp2, CustomOp3, Layout, Result, Shape, Tensor};
use std::sync::Arc;

/// What a [`TrainBlock`] and its [`BlockInputGrad`]s share (see [`BlockLink`]).
#[derive(Default)]
struct Link {
    y: std::sync::Mutex<Option<Tensor>>,
    dy: std::sync::Mutex<Option<Tensor>>,
}

impl Link {
    fn y(&self, op: &str) -> Result<Tensor> {
        self.y
            .lock()
            .ok()
            .and_then(|y| y.clone())
            .ok_or_else(|| candle_core::Error::Msg(format!("{op}: no forward pass yet")))
    }

    /// Adds an input-gradient op's share of `dL/dy` to what the forward's backward will take.
    fn hand_over(&self, dy: Tensor, op: &str) -> Result<()> {
        let mut slot = self
            .dy
            .lock()
            .map_err(|_| candle_core::Error::Msg(format!("{op}: poisoned lock")))?;
        // A second share (the input gradient taken twice) is summed as candle sums a node's
        // gradients, `(0 + a) + b`, with its own ops: a rare path.
        *slot = Some(match slot.take() {
            Some(prev) => prev.zeros_like()?.add(&prev)?.add(&dy)?,
            None => dy,
        });
        Ok(())
    }

    fn take_dy(&self) -> Option<Tensor> {
        self.dy.lock().ok().and_then(|mut d| d.take())
    }
}

/// One training-mode block in one op, the convolution then [`BnReluPool`]:
/// `(x (b, h, w, cin), packed)` -> pooled `(b, oh/2, ow/2, cout)`, `packed` being the block's
/// `wmat (cout, k*k*cin)` and `params (3, cout)` flattened, as for [`BlockChain`]. The
/// convolution output stays inside the op (see [`BlockLink`]); the block's input-gradient ops
/// come from the [`BlockLink`] that [`train_block`] returns with it.
pub struct TrainBlock {
    conv: Conv,
    bn: BnReluPool,
    place: Packed,
    link: Arc<Link>,
}

/// The handle a forward keeps of its [`TrainBlock`]: the batch statistics, and input-gradient
/// ops that differentiate through the block's convolution output `y (b, oh, ow, cout)`.
///
/// Why: `y` stays out of candle's graph. As a graph node (26 MB for the first block of the
/// Fashion-MNIST model at batch 128) it cost, in every backward with a gradient penalty, a
/// zero-filled buffer and two single-threaded adds of its size. Instead each input-gradient
/// op's backward hands its share of `dL/dy` to the [`TrainBlock`]'s backward: candle reaches
/// those ops first (they depend on the block's output through the head), and the share is
/// added in the order candle would have added it (`(0 + a) + b`), so every gradient is
/// bit-identical to the graph with `y` as a node (a test checks it).
pub struct BlockLink {
    grad: BnReluPoolGrad,
    place: Packed,
    link: Arc<Link>,
}

/// A training-mode block op for `conv` with a weight matrix of `wmat_dims`, and its link.
pub fn train_block(conv: Conv, wmat_dims: (usize, usize)) -> (TrainBlock, BlockLink) {
    let (bn, grad) = pair();
    let place = Packed {
        at: 0,
        wmat: wmat_dims,
    };
    let link = Arc::new(Link::default());
    (
        TrainBlock {
            conv,
            bn,
            place,
            link: link.clone(),
        },
        BlockLink { grad, place, link },
    )
}

impl BlockLink {
    /// The batch mean and biased variance of the forward (see
    /// [`BnReluPoolGrad::batch_moments`]).
    pub fn batch_moments(&self, like: &Tensor) -> Result<Option<(Tensor, Tensor)>> {
        self.grad.batch_moments(like)
    }

    /// An op for the block's share of the input gradient, through the transposed convolution
    /// `conv_t` (one per use; each adds its share of `dL/dy` for the forward's backward).
    pub fn input_grad(&self, conv_t: ConvT) -> BlockInputGrad {
        BlockInputGrad {
            conv_t,
            grad: BnReluPoolGrad(self.grad.0.clone()),
            place: self.place,
            link: self.link.clone(),
            gy: std::sync::Mutex::new(None),
        }
    }
}

impl CustomOp2 for TrainBlock {
    fn name(&self) -> &'static str {
        "alkit-duq-train-block"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        entry(self.name())?;
        let base = packed_start(l2, self.place.len(), self.name())?;
        let (lw, lp) = self.place.layouts(base);
        let (y, y_shape) = self.conv.cpu_fwd(s1, l1, s2, &lw)?;
        let pooled = self
            .bn
            .cpu_fwd(&y, &Layout::contiguous(&y_shape), s2, &lp)?;
        keep(&self.link.y, Some(detached(y, y_shape)), self.name())?;
        Ok(pooled)
    }

    fn bwd(
        &self,
        x: &Tensor,
        packed: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let y = self.link.y(self.name())?;
        let (wmat, params) = self.place.tensors(&packed.detach())?;
        // The input-gradient ops' share of `dL/dy` first, as candle would have added it.
        let shared = self.link.take_dy();
        let (dx, dw, dparams) = block_backward(
            (&self.conv, &self.bn),
            (x, &y),
            (&wmat, &params),
            grad,
            shared.as_ref(),
            false,
        )?;
        Ok((
            dx,
            Some(Tensor::cat(
                &[dw.flatten_all()?, dparams.flatten_all()?],
                0,
            )?),
        ))
    }
}

/// A block's share of the input gradient in one op: [`BnReluPoolGrad`], then the transposed
/// convolution: `(gp (b, oh/2, ow/2, cout), packed)` -> `gx (b, h, w, cin)`, `packed` as for
/// [`TrainBlock`], whose convolution output `y` it reads through their [`BlockLink`]. The
/// intermediate `gy (b, oh, ow, cout)` stays inside the op, as `y` does: as a node of candle's
/// graph, its gradient cost a zero-filled buffer and an add of its size in every backward. The
/// backward is the two ops' backwards in sequence; its gradient with respect to `y` goes to the
/// [`TrainBlock`]'s backward.
pub struct BlockInputGrad {
    conv_t: ConvT,
    grad: BnReluPoolGrad,
    /// Where `packed` holds the parameters.
    place: Packed,
    link: Arc<Link>,
    /// `gy`, kept from the forward for the backward.
    gy: std::sync::Mutex<Option<Tensor>>,
}

impl CustomOp2 for BlockInputGrad {
    fn name(&self) -> &'static str {
        "alkit-duq-block-input-grad"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        entry(self.name())?;
        let base = packed_start(l2, self.place.len(), self.name())?;
        let (lw, lp) = self.place.layouts(base);
        let y = self.link.y(self.name())?;
        let (ys, yl) = y.storage_and_layout();
        let candle_core::Storage::Cpu(ys) = &*ys else {
            candle_core::bail!("{}: the convolution output is not on the CPU", self.name());
        };
        let (gy, shape) = self.grad.cpu_fwd(s1, l1, ys, yl, s2, &lp)?;
        let out = self
            .conv_t
            .cpu_fwd(&gy, &Layout::contiguous(&shape), s2, &lw)?;
        keep(&self.gy, Some(detached(gy, shape)), self.name())?;
        Ok(out)
    }

    fn bwd(
        &self,
        gp: &Tensor,
        packed: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let missing =
            || candle_core::Error::Msg(format!("{}: backward before forward", self.name()));
        let gy = self
            .gy
            .lock()
            .ok()
            .and_then(|g| g.clone())
            .ok_or_else(missing)?;
        let y = self.link.y(self.name())?;
        let (wmat, params) = self.place.tensors(&packed.detach())?;
        let (d_gy, d_wmat) = conv_t_backward(&self.conv_t, &gy, &wmat, grad)?;
        let (d_gp, d_y, d_params) = self.grad.bwd(gp, &y, &params, &gy, &d_gy)?;
        if let Some(d_y) = d_y {
            self.link.hand_over(d_y, self.name())?;
        }
        let d_params = match d_params {
            Some(d) => d,
            None => params.zeros_like()?,
        };
        let d_packed = Tensor::cat(&[d_wmat.flatten_all()?, d_params.flatten_all()?], 0)?;
        Ok((d_gp, Some(d_packed)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device, Var};

    use crate::rng::randn_f64 as randn;

    /// [`TrainBlock`] and [`BlockInputGrad`] keep the convolution output out of candle's graph
    /// and hand its gradient over by hand: the gradients of a loss through them must be, bit
    /// for bit in `f32`, those of the same computation with the convolution output as a node
    /// (the convolution, [`BnReluPool`], [`BnReluPoolGrad`] and the transposed convolution as
    /// separate ops), where candle adds the two shares itself. The pooled gradient depends on
    /// the pooled output, as the head makes it in the model, so candle reaches the
    /// input-gradient op first; the input gradient is taken twice, as a caller may.
    #[test]
    fn the_training_block_ops_give_the_gradients_of_the_graph_with_y_as_a_node_bit_for_bit(
    ) -> Result<()> {
        let (b, h, w, cin, cout, k, pad) = (4, 9, 9, 3, 5, 3, 1);
        let f32_of = |t: Tensor| t.to_dtype(DType::F32);
        let x = Var::from_tensor(&f32_of(randn(&[b, h, w, cin], 11))?)?;
        let wmat = Var::from_tensor(&f32_of((randn(&[cout, k * k * cin], 12) * 0.3)?)?)?;
        let mut p = randn(&[3, cout], 13).to_vec2::<f64>()?;
        p[0][2] = -p[0][2].abs() - 0.5;
        let params = Var::from_tensor(&f32_of(Tensor::new(p, &Device::Cpu)?)?)?;
        let r = f32_of(randn(&[b, h / 2, w / 2, cout], 14))?;
        let r2 = f32_of(randn(&[b, h / 2, w / 2, cout], 15))?;
        let r3 = f32_of(randn(&[b, h, w, cin], 16))?;
        let (conv, conv_t) = (Conv { k, pad }, ConvT { k, pad });
        let loss = |pooled: &Tensor, gxs: &[Tensor]| -> Result<Tensor> {
            let mut l = (pooled * &r2)?.sum_all()?;
            for gx in gxs {
                l = (l + (gx * &r3)?.sum_all()?.sqr()?)?;
            }
            Ok(l)
        };

        // Reference: `y` and `gy` nodes of the graph.
        let y = x.as_tensor().apply_op2(wmat.as_tensor(), conv)?;
        let (bn, grad) = pair();
        let pooled = y.apply_op2(params.as_tensor(), bn)?;
        let gp = (&pooled * &r)?;
        let gxs = (0..2)
            .map(|_| {
                gp.apply_op3(&y, params.as_tensor(), BnReluPoolGrad(grad.0.clone()))?
                    .apply_op2(wmat.as_tensor(), conv_t)
            })
            .collect::<Result<Vec<_>>>()?;
        let reference = loss(&pooled, &gxs)?.backward()?;

        // The fused ops on the packed parameters.
        let (op, link) = train_block(conv, (cout, k * k * cin));
        let packed = Tensor::cat(
            &[
                wmat.as_tensor().flatten_all()?,
                params.as_tensor().flatten_all()?,
            ],
            0,
        )?;
        let pooled_f = x.as_tensor().apply_op2(&packed, op)?;
        let gp_f = (&pooled_f * &r)?;
        let gxs_f = (0..2)
            .map(|_| gp_f.apply_op2(&packed, link.input_grad(conv_t)))
            .collect::<Result<Vec<_>>>()?;
        let fused = loss(&pooled_f, &gxs_f)?.backward()?;

        let same_bits = |a: &Tensor, b: &Tensor, what: &str| -> Result<()> {
            let (a, b) = (
                a.flatten_all()?.to_vec1::<f32>()?,
                b.flatten_all()?.to_vec1::<f32>()?,
            );
            assert_eq!(a.len(), b.len(), "{what}: sizes");
            let differ: Vec<usize> = (0..a.len())
                .filter(|&i| a[i].to_bits() != b[i].to_bits())
                .collect();
            assert!(
                differ.is_empty(),
                "{what}: {} of {} entries differ, the first at {}: {} vs {}",
                differ.len(),
                a.len(),
                differ[0],
                a[differ[0]],
                b[differ[0]]
            );
            Ok(())
        };
        same_bits(&pooled_f, &pooled, "pooled output")?;
        for (f, r) in gxs_f.iter().zip(&gxs) {
            same_bits(f, r, "input gradient")?;
        }
        for (name, v) in [
            ("x", x.as_tensor()),
            ("wmat", wmat.as_tensor()),
            ("params", params.as_tensor()),
        ] {
            let (f, r) = (fused.get(v).unwrap(), reference.get(v).unwrap());
            same_bits(f, r, &format!("gradient of {name}"))?;
        }
        Ok(())
    }
}
