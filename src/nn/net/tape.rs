//! The tape of a gradient-evidence pass: what each layer's forward saved for its own
//! vector-Jacobian product, and the per-candidate norms its parameterised layers record as the
//! class rows' output gradients come back through [`super::Layer::backward`].
//!
//! Going back through the layers' own backward functions instead of candle's autograd keeps
//! the pass free of a graph: no probe variables, no zero-filled gradient accumulators, and
//! each class row costs one input-gradient product per layer plus the site norms.
//!
//! A differentiable tape ([`Tape::differentiable`]) serves DUQ's gradient penalty instead: it
//! keeps the saved activations and the parameters in the graph, so the same backward
//! functions give an input gradient that candle's ordinary first-order backward can
//! differentiate w.r.t. the parameters (the penalty's second-order term), with batch norm's
//! training-mode vector-Jacobian product (the batch statistics' cross-sample terms) when the
//! forward trained. It records no norms.

use crate::nn::gradnorm::{dense_first_copy_l1, site_norm, SiteKind};
use candle_core::{Result, Tensor};

#[derive(Clone)]
enum Saved {
    Tensor(Tensor),
    Dims(Vec<usize>),
    Site {
        kind: SiteKind,
        bias: bool,
        input: Tensor,
        index: usize,
    },
}

/// What a row's backward records at each site.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Record {
    /// Squared norms into class row `r`.
    Row(usize),
    /// GradNorm's L1 of the last site (dense) only.
    LastL1,
}

/// Saved activations and the norms recorded from them (see the module docs).
#[derive(Clone)]
pub struct Tape {
    saved: Vec<Saved>,
    sites: usize,
    pos: usize,
    copies: usize,
    rows: usize,
    record: Record,
    grams: Vec<Option<Tensor>>,
    sq: Vec<f64>,
    kl_l1: Vec<f64>,
    done: bool,
    /// Saved tensors and parameters stay in the graph; no norms are recorded.
    graph: bool,
    /// The forward used batch statistics.
    train: bool,
}

impl Tape {
    pub(crate) fn new() -> Self {
        Self {
            saved: Vec::new(),
            sites: 0,
            pos: 0,
            copies: 1,
            rows: 0,
            record: Record::Row(0),
            grams: Vec::new(),
            sq: Vec::new(),
            kl_l1: Vec::new(),
            done: false,
            graph: false,
            train: false,
        }
    }

    /// A tape whose backward is differentiable w.r.t. the parameters (see the module docs),
    /// for a forward in training mode (`train`: batch statistics) or evaluation mode.
    pub(crate) fn differentiable(train: bool) -> Self {
        Self {
            graph: true,
            train,
            ..Self::new()
        }
    }

    fn keep(&self, t: &Tensor) -> Tensor {
        if self.graph {
            t.clone()
        } else {
            t.detach()
        }
    }

    /// A parameter as a layer's backward should use it: in the graph on a differentiable
    /// tape, detached otherwise.
    pub fn param(&self, t: &Tensor) -> Tensor {
        self.keep(t)
    }

    /// Whether the forward used batch statistics (a differentiable tape of a training pass).
    pub fn training(&self) -> bool {
        self.train
    }

    /// Back to the end of what was saved, to go backward again.
    pub fn rewind(&mut self) {
        self.pos = self.saved.len();
        self.done = false;
    }

    /// Saves `t` (detached, unless the tape is differentiable) for the layer's backward.
    pub fn save(&mut self, t: &Tensor) {
        let t = self.keep(t);
        self.saved.push(Saved::Tensor(t));
    }

    /// Saves a shape for the layer's backward.
    pub fn save_dims(&mut self, dims: &[usize]) {
        self.saved.push(Saved::Dims(dims.to_vec()));
    }

    /// Records a parameterised layer: what its weight multiplies (see [`SiteKind`]).
    pub fn save_site(&mut self, kind: SiteKind, bias: bool, input: &Tensor) {
        let input = self.keep(input);
        self.saved.push(Saved::Site {
            kind,
            bias,
            input,
            index: self.sites,
        });
        self.sites += 1;
    }

    /// Parameterised layers recorded.
    pub fn sites(&self) -> usize {
        self.sites
    }

    /// Elements saved in all.
    pub fn saved_elements(&self) -> usize {
        self.saved
            .iter()
            .map(|s| match s {
                Saved::Tensor(t) | Saved::Site { input: t, .. } => t.elem_count(),
                Saved::Dims(_) => 0,
            })
            .sum()
    }

    fn pop(&mut self) -> Result<&Saved> {
        if self.pos == 0 {
            candle_core::bail!("a layer's backward read more than its forward saved");
        }
        self.pos -= 1;
        Ok(&self.saved[self.pos])
    }

    /// The last saved tensor not yet read back (backward reads in reverse order).
    pub fn tensor(&mut self) -> Result<Tensor> {
        match self.pop()? {
            Saved::Tensor(t) => Ok(t.clone()),
            _ => candle_core::bail!("a layer's backward expected a saved tensor"),
        }
    }

    /// The last saved shape not yet read back.
    pub fn dims(&mut self) -> Result<Vec<usize>> {
        match self.pop()? {
            Saved::Dims(d) => Ok(d.clone()),
            _ => candle_core::bail!("a layer's backward expected a saved shape"),
        }
    }

    /// A parameterised layer's output gradient `d (n * copies, ..., out)` for the current
    /// row: records its per-candidate norm.
    pub fn site(&mut self, d: &Tensor) -> Result<()> {
        let (kind, bias, input, index) = match self.pop()? {
            Saved::Site {
                kind,
                bias,
                input,
                index,
            } => (*kind, *bias, input.clone(), *index),
            _ => candle_core::bail!("a layer's backward expected a saved site"),
        };
        if self.graph {
            return Ok(());
        }
        match self.record {
            Record::Row(r) => {
                let norm = site_norm(kind, bias, &input, d, self.copies, &mut self.grams[index])?;
                let (rows, nl) = (self.rows, self.sites);
                for (i, v) in norm.into_iter().enumerate() {
                    self.sq[(i * rows + r) * nl + index] = v;
                }
            }
            Record::LastL1 => {
                if index + 1 == self.sites {
                    if kind == SiteKind::Dense {
                        self.kl_l1 = dense_first_copy_l1(d, &input, self.copies)?;
                    }
                    self.done = true;
                }
            }
        }
        Ok(())
    }

    /// Whether the current backward has recorded all it needs (the rest may be skipped).
    pub fn done(&self) -> bool {
        self.done
    }

    pub(crate) fn begin(&mut self, n: usize, copies: usize, rows: usize) {
        self.copies = copies;
        self.rows = rows;
        self.grams = vec![None; self.sites];
        self.sq = vec![0.0; n * rows * self.sites];
        self.kl_l1 = vec![0.0; n];
    }

    pub(crate) fn start_row(&mut self, row: Option<usize>) {
        self.rewind();
        self.record = match row {
            Some(r) => Record::Row(r),
            None => Record::LastL1,
        };
    }

    pub(crate) fn finish(self) -> (Vec<f64>, Vec<f64>) {
        (self.sq, self.kl_l1)
    }
}
