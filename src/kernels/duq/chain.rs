//! Consecutive training-mode blocks as one op ([`BlockChain`]), for a loss that takes no input
//! gradient (DUQ without a penalty).

use super::super::conv::Conv;
use super::super::enabled::entry;
use super::block::{block_backward, detached, keep, packed_start, Packed};
use super::bn_relu_pool::BnReluPool;
use candle_core::{CpuStorage, CustomOp2, Layout, Result, Shape, Tensor};

/// Consecutive training-mode blocks in one op, each the convolution then [`BnReluPool`]:
/// `(x (b, h, w, cin), packed)` -> the last block's pooled output, `packed` being every
/// block's `wmat (cout, k*k*cin)` and `params (3, cout)` flattened, block after block. For a loss that takes no input gradient (DUQ without a
/// penalty): the convolution outputs and the pooled outputs between blocks stay inside the op
/// rather than becoming nodes of candle's graph, whose backward zero-fills a buffer of each
/// node's size and adds its gradient into it (26 MB for the first convolution output of the
/// Fashion-MNIST model, 6 MB for its pooled output). The backward is the blocks' backwards in
/// reverse. The input-gradient ops of the blocks' [`pair`]s cannot be used with it (there is no
/// `y` in the graph to differentiate through); their `batch_moments` can.
pub struct BlockChain {
    blocks: Vec<ChainBlock>,
    /// Per block, from the forward: its input (`None` for the first, the op's own input) and
    /// its convolution output `y`.
    saved: std::sync::Mutex<Vec<(Option<Tensor>, Tensor)>>,
}

/// One block of a [`BlockChain`].
pub struct ChainBlock {
    /// The convolution.
    pub conv: Conv,
    /// The forward op of the block's [`pair`].
    pub bn: BnReluPool,
    /// `wmat`'s `(cout, k*k*cin)`.
    pub wmat_dims: (usize, usize),
}

impl BlockChain {
    /// The op over `blocks`, in order.
    pub fn new(blocks: Vec<ChainBlock>) -> Self {
        Self {
            blocks,
            saved: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Each block's place in the packed parameters, and their total length.
    fn packed(&self) -> (Vec<Packed>, usize) {
        let mut at = 0;
        let places = self
            .blocks
            .iter()
            .map(|b| {
                let p = Packed {
                    at,
                    wmat: b.wmat_dims,
                };
                at += p.len();
                p
            })
            .collect();
        (places, at)
    }
}

impl CustomOp2 for BlockChain {
    fn name(&self) -> &'static str {
        "alkit-duq-block-chain"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        entry(self.name())?;
        let (places, len) = self.packed();
        let base = packed_start(l2, len, self.name())?;
        let mut saved = Vec::with_capacity(self.blocks.len());
        // The current block's input: the op's own first, then the previous block's output.
        let mut cur: Option<(CpuStorage, Shape)> = None;
        for (blk, place) in self.blocks.iter().zip(places) {
            let (lw, lp) = place.layouts(base);
            let (y, y_shape) = match &cur {
                None => blk.conv.cpu_fwd(s1, l1, s2, &lw)?,
                Some((x, shape)) => blk.conv.cpu_fwd(x, &Layout::contiguous(shape), s2, &lw)?,
            };
            let pooled = blk.bn.cpu_fwd(&y, &Layout::contiguous(&y_shape), s2, &lp)?;
            let input = cur.take().map(|(x, shape)| detached(x, shape));
            saved.push((input, detached(y, y_shape)));
            cur = Some(pooled);
        }
        keep(&self.saved, saved, self.name())?;
        cur.ok_or_else(|| candle_core::Error::Msg(format!("{}: no blocks", self.name())))
    }

    fn bwd(
        &self,
        x: &Tensor,
        packed: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let saved = self.saved.lock().map(|s| s.clone()).unwrap_or_default();
        if saved.len() != self.blocks.len() {
            candle_core::bail!("{}: backward before forward", self.name());
        }
        let (places, _) = self.packed();
        let packed = packed.detach();
        let mut g = grad.clone();
        let mut parts = vec![None; self.blocks.len()];
        let mut dx = None;
        for (i, (blk, place)) in self.blocks.iter().zip(places).enumerate().rev() {
            let (wmat, params) = place.tensors(&packed)?;
            let (input, y) = &saved[i];
            let missing = || candle_core::Error::Msg(format!("{}: no gradient", self.name()));
            // An inner block's input is the previous block's output: its gradient is needed.
            let x_i = input.as_ref().unwrap_or(x);
            let (d_in, dw, dparams) = block_backward(
                (&blk.conv, &blk.bn),
                (x_i, y),
                (&wmat, &params),
                &g,
                None,
                i > 0,
            )?;
            parts[i] = Some((dw, dparams));
            if i > 0 {
                g = d_in.ok_or_else(missing)?;
            } else {
                dx = d_in;
            }
        }
        let flat = parts
            .into_iter()
            .flatten()
            .flat_map(|(dw, dp)| [dw.flatten_all(), dp.flatten_all()])
            .collect::<Result<Vec<_>>>()?;
        Ok((dx, Some(Tensor::cat(&flat, 0)?)))
    }
}
