//! What the multi-op training ops share: a block's parameters [`Packed`] in one vector (an op
//! has at most three inputs), the forward's tensors kept for the backward ([`keep`],
//! [`detached`]), and one block's backward through batch norm and the convolution
//! ([`block_backward`]).

use super::super::conv::{conv_backward, Conv};
use super::bn_relu_pool::BnReluPool;
use candle_core::{CpuStorage, Layout, Result, Shape, Tensor};

/// One block's backward from `grad (b, oh/2, ow/2, cout)`: batch norm/ReLU/pool's (with
/// `extra`, another consumer's `dL/dy`, added first; see [`BnReluPool::vjp`]) then the
/// convolution's, for the block's input `x`, convolution output `y` and parameters:
/// `(dL/dx, dL/dwmat, dL/dparams)`, `dL/dx` when `x` is in the graph or `want_x`.
pub(super) fn block_backward(
    (conv, bn): (&Conv, &BnReluPool),
    (x, y): (&Tensor, &Tensor),
    (wmat, params): (&Tensor, &Tensor),
    grad: &Tensor,
    extra: Option<&Tensor>,
    want_x: bool,
) -> Result<(Option<Tensor>, Tensor, Tensor)> {
    let (dy, dparams) = bn.vjp(y, params, grad, extra)?;
    let (dx, dw) = conv_backward(conv, x, wmat, &dy, want_x)?;
    Ok((dx, dw, dparams))
}

/// Where one block's parameters lie in a packed parameter vector: `wmat (cout, k*k*cin)`
/// flattened, then `params (3, cout)`, from offset `at`. The fused ops below take their
/// parameters packed (an op has at most three inputs).
#[derive(Debug, Clone, Copy)]
pub(super) struct Packed {
    pub(super) at: usize,
    /// `wmat`'s `(cout, k*k*cin)`.
    pub(super) wmat: (usize, usize),
}

impl Packed {
    pub(super) fn len(&self) -> usize {
        let (cout, kc) = self.wmat;
        cout * kc + 3 * cout
    }

    /// The layouts of `wmat` and `params` in a storage whose packed vector starts at `base`.
    pub(super) fn layouts(&self, base: usize) -> (Layout, Layout) {
        let at = base + self.at;
        (
            Layout::contiguous_with_offset(self.wmat, at),
            Layout::contiguous_with_offset((3, self.wmat.0), at + self.wmat.0 * self.wmat.1),
        )
    }

    /// `wmat` and `params` as views of a packed tensor.
    pub(super) fn tensors(&self, packed: &Tensor) -> Result<(Tensor, Tensor)> {
        let w_len = self.wmat.0 * self.wmat.1;
        Ok((
            packed.narrow(0, self.at, w_len)?.reshape(self.wmat)?,
            packed
                .narrow(0, self.at + w_len, 3 * self.wmat.0)?
                .reshape((3, self.wmat.0))?,
        ))
    }
}

/// The start offset of a packed parameter vector of `len` elements with layout `l`, after
/// checking its shape.
pub(super) fn packed_start(l: &Layout, len: usize, op: &str) -> Result<usize> {
    if !l.is_contiguous() || l.dims() != [len] {
        candle_core::bail!(
            "{op}: packed parameters must be a contiguous ({len},), got {:?}",
            l.dims()
        );
    }
    Ok(l.start_offset())
}

/// Stores what an op's forward keeps for its backward.
pub(super) fn keep<T>(slot: &std::sync::Mutex<T>, value: T, op: &str) -> Result<()> {
    *slot
        .lock()
        .map_err(|_| candle_core::Error::Msg(format!("{op}: poisoned lock")))? = value;
    Ok(())
}

/// A storage and shape from one of the ops' `cpu_fwd` as a tensor outside the graph.
pub(super) fn detached(storage: CpuStorage, shape: Shape) -> Tensor {
    Tensor::from_storage(
        candle_core::Storage::Cpu(storage),
        shape,
        candle_core::op::BackpropOp::none(),
        false,
    )
}
