//! The last layer found in the graph: the Gemm, MatMul, or Add of a bias to a MatMul that
//! writes the logits, with its weight and bias read from the graph's constants, so that the
//! model's answer to `Ask::LastLayer` multiplies exactly what the graph multiplies.

use super::graph::{Graph, Node};
use super::tensors::Constant;

/// The last layer found in the graph: the tensor it multiplies, its weight `(c, d)` and bias
/// `(c,)`, and the node, in words.
pub(super) struct Head {
    pub(super) features: String,
    pub(super) w: Vec<f32>,
    pub(super) b: Vec<f32>,
    pub(super) classes: usize,
    pub(super) dim: usize,
    pub(super) node: String,
}

type Found<T> = std::result::Result<T, String>;

impl<'a> Graph<'a> {
    /// The last layer that writes `logits`: a Gemm, a MatMul, or an Add of a bias to a MatMul,
    /// whose weight (and bias) are constants; `Err` says why none was found.
    pub(super) fn head(&self, logits: &str) -> Found<Head> {
        let name = self.source(logits);
        let node = self
            .producer(&name)
            .ok_or_else(|| format!("no node writes the logits `{logits}`"))?;
        match node.op.as_str() {
            "Gemm" if node.inputs.len() >= 2 => self.gemm_head(node),
            "MatMul" | "Add" => self.matmul_head(node),
            _ => Err(format!(
                "the logits are written by {}, not by a Gemm or MatMul",
                label(node)
            )),
        }
    }

    /// The last layer of a Gemm `alpha * x W' + beta * b` (W' = W or its transpose).
    fn gemm_head(&self, node: &Node<'_>) -> Found<Head> {
        let at = |e: String| format!("{}: {e}", label(node));
        if Self::int_attr(node, "transA", 0) != 0 {
            return Err(format!("{} transposes its input", label(node)));
        }
        let b = self.constant_named(&node.inputs[1], "weight").map_err(at)?;
        let alpha = Self::float_attr(node, "alpha", 1.0);
        let beta = Self::float_attr(node, "beta", 1.0);
        let (mut w, c, d) = if Self::int_attr(node, "transB", 0) != 0 {
            let [c, d] = b.dims[..] else {
                return Err(format!("{}: weight dimensions {:?}", label(node), b.dims));
            };
            (b.values, c, d)
        } else {
            transposed(&b).map_err(at)?
        };
        w.iter_mut().for_each(|v| *v *= alpha);
        let b = match node.inputs.get(2).filter(|s| !s.is_empty()) {
            Some(cname) => {
                let t = self.constant_named(cname, "bias").map_err(at)?;
                bias(&t, c, beta).map_err(at)?
            }
            None => vec![0.0; c],
        };
        Ok(Head {
            features: self.source(&node.inputs[0]),
            w,
            b,
            classes: c,
            dim: d,
            node: label(node),
        })
    }

    /// The last layer of a MatMul `x W`, or of an Add of a constant bias to one.
    fn matmul_head(&self, node: &Node<'_>) -> Found<Head> {
        let (matmul, b) = if node.op == "Add" && node.inputs.len() == 2 {
            let pick = |i: usize| {
                let n = self.producer(&self.source(&node.inputs[i]))?;
                (n.op == "MatMul").then_some((n, 1 - i))
            };
            let (m, other) = pick(0)
                .or_else(|| pick(1))
                .ok_or_else(|| format!("{} adds no MatMul's product", label(node)))?;
            (m, Some(self.constant_named(&node.inputs[other], "bias")?))
        } else {
            (node, None)
        };
        if matmul.inputs.len() != 2 {
            return Err(format!(
                "{} has {} inputs",
                label(matmul),
                matmul.inputs.len()
            ));
        }
        let wt = self
            .constant_named(&matmul.inputs[1], "weight")
            .map_err(|e| format!("{}: {e}", label(matmul)))?;
        let (w, c, d) = transposed(&wt).map_err(|e| format!("{}: {e}", label(matmul)))?;
        let b = match b {
            Some(t) => bias(&t, c, 1.0).map_err(|e| format!("{}: {e}", label(node)))?,
            None => vec![0.0; c],
        };
        Ok(Head {
            features: self.source(&matmul.inputs[0]),
            w,
            b,
            classes: c,
            dim: d,
            node: label(matmul),
        })
    }

    /// The constant `name`, the node's `what`; an error where it is not one.
    fn constant_named(&self, name: &str, what: &str) -> Found<Constant> {
        self.constant(name)
            .unwrap_or_else(|| Err(format!("its {what} `{name}` is not a constant")))
    }
}

/// The node `n` in words: its op and name, or the outputs it writes.
fn label(n: &Node<'_>) -> String {
    if n.name.is_empty() {
        format!("{} writing `{}`", n.op, n.outputs.join(", "))
    } else {
        format!("{} `{}`", n.op, n.name)
    }
}

/// The weight `(c, d)` from a `(d, c)` right operand: transposed.
fn transposed(b: &Constant) -> Found<(Vec<f32>, usize, usize)> {
    let [d, c] = b.dims[..] else {
        return Err(format!("its weight has dimensions {:?}", b.dims));
    };
    let mut w = vec![0f32; c * d];
    for i in 0..d {
        for j in 0..c {
            w[j * d + i] = b.values[i * c + j];
        }
    }
    Ok((w, c, d))
}

/// A bias broadcast over the batch: `(c,)`, `(1, c)` or one value, times `scale`.
fn bias(t: &Constant, c: usize, scale: f32) -> Found<Vec<f32>> {
    match (&t.dims[..], t.values.len()) {
        (_, 1) => Ok(vec![t.values[0] * scale; c]),
        ([n], _) | ([1, n], _) if *n == c => Ok(t.values.iter().map(|v| v * scale).collect()),
        (d, _) => Err(format!(
            "its bias has dimensions {d:?}, not one value per class ({c})"
        )),
    }
}
