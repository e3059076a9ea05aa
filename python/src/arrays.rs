//! numpy arrays in, the acquisition crate's evidence out. The Python side hands over `float32`
//! arrays (`np.ascontiguousarray` converts only what is not already C-ordered `float32`); each
//! is read here through its buffer while the GIL is held and copied once into the owned
//! vectors the library's evidence types keep, so the computation that follows runs without
//! the GIL. Shapes are checked here, values (finite, probability rows) by the library.

use alkit::acquisition::{Evidence, Features, Probs, Reference, Samples};
use alkit::data::dataset::MAX_CLASSES;
use alkit::error::{Error, Result};
use numpy::ndarray::Dimension;
use numpy::{
    Element, PyReadonlyArray, PyReadonlyArray1, PyReadonlyArray2, PyReadonlyArray3,
    PyUntypedArrayMethods,
};
use std::sync::Arc;

/// The values of `a` (the argument `name`) in C order: the buffer itself when it is
/// C-ordered, else walked in order (a Fortran-ordered buffer is contiguous too, but in the
/// other order). A view that is not C-ordered may claim far more values than its buffer
/// holds (a broadcast of one value to 10^12 items has strides of 0), so its copy is sized
/// against the machine's memory before it is made.
pub fn values<T: Element + Copy, D: Dimension>(
    a: &PyReadonlyArray<'_, T, D>,
    name: &'static str,
) -> Result<Vec<T>> {
    if let Some(s) = c_slice(a) {
        return Ok(s.to_vec());
    }
    let bytes = alkit::limits::product(&[a.len(), std::mem::size_of::<T>()]);
    let what = format!(
        "a copy of the view `{name}` of shape {:?} ({} values; strides {:?})",
        a.shape(),
        a.len(),
        a.strides()
    );
    alkit::limits::fits(name, &what, bytes)?;
    Ok(a.as_array().iter().copied().collect())
}

/// The buffer of `a` when it holds the values in C order.
fn c_slice<'a, T: Element, D: Dimension>(a: &'a PyReadonlyArray<'_, T, D>) -> Option<&'a [T]> {
    if a.is_c_contiguous() {
        a.as_slice().ok()
    } else {
        None
    }
}

/// One past the largest class index the library takes.
pub const MAX_LABEL: usize = MAX_CLASSES;

/// Refuses a class count beyond the library's limit, named by `field`.
pub fn check_classes(field: &'static str, classes: usize) -> Result<()> {
    if classes > MAX_CLASSES {
        return Err(Error::config(
            field,
            format!("{classes} classes are more than the limit of {MAX_CLASSES}"),
        ));
    }
    Ok(())
}

/// A 2-D array's values and shape `(rows, cols)`.
pub fn matrix(a: &PyReadonlyArray2<'_, f32>, name: &'static str) -> Result<Matrix> {
    let s = a.shape();
    Ok((values(a, name)?, s[0], s[1]))
}

/// Class labels: non-negative integers, below `classes` when it is known.
pub fn labels(
    a: &PyReadonlyArray1<'_, i64>,
    what: &'static str,
    classes: Option<usize>,
) -> Result<Vec<usize>> {
    let labels: Vec<usize> = values(a, what)?
        .into_iter()
        .enumerate()
        .map(|(i, y)| usize::try_from(y).map_err(|_| not_below(what, i, y, classes)))
        .collect::<Result<_>>()?;
    if let Some(c) = classes {
        check_below(&labels, what, c)?;
    }
    Ok(labels)
}

/// Refuses a label at or above `classes`, naming its item.
pub fn check_below(labels: &[usize], what: &'static str, classes: usize) -> Result<()> {
    match labels.iter().position(|&y| y >= classes) {
        Some(i) => Err(not_below(what, i, labels[i] as i64, Some(classes))),
        None => Ok(()),
    }
}

fn not_below(what: &'static str, i: usize, y: i64, classes: Option<usize>) -> Error {
    Error::config(
        what,
        format!(
            "item {i} has label {y}, which is not a class index{}",
            classes.map_or(String::new(), |c| format!(" below {c}"))
        ),
    )
}

/// How the axes of stochastic predictions are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `(n, C, T)`: items, classes, draws (baal's layout).
    Nct,
    /// `(T, n, C)`: draws, items, classes (alkit's own).
    Tnc,
    /// `(n, T, C)`: items, draws, classes.
    Ntc,
}

impl Layout {
    /// The layout named `s` (`nct`, `tnc` or `ntc`).
    pub fn parse(s: &str) -> Result<Layout> {
        match s {
            "nct" => Ok(Layout::Nct),
            "tnc" => Ok(Layout::Tnc),
            "ntc" => Ok(Layout::Ntc),
            _ => Err(Error::config(
                "layout",
                format!("unknown layout `{s}`; expected nct (items, classes, draws: baal's), tnc or ntc"),
            )),
        }
    }
}

/// Stochastic predictions split into one buffer per draw, before the library checks them.
pub struct Draws {
    bufs: Vec<Vec<f32>>,
    shape: [usize; 3],
    n: usize,
    c: usize,
}

impl Draws {
    /// The array's values, axes as `layout` says, read in one pass in the array's own order
    /// (straight from its buffer when it is C-ordered), each draw's buffer filled in turn.
    pub fn read(a: &PyReadonlyArray3<'_, f32>, layout: Layout) -> Result<Draws> {
        let shape = [a.shape()[0], a.shape()[1], a.shape()[2]];
        let [x, y, z] = shape;
        let (n, c, t) = match layout {
            Layout::Nct => (x, y, z),
            Layout::Tnc => (y, z, x),
            Layout::Ntc => (x, z, y),
        };
        // An empty axis reads nothing (and is refused by `samples`): no buffer is allocated
        // for the other axes' sizes, whatever they claim.
        if n == 0 || c == 0 || t == 0 {
            return Ok(Draws {
                bufs: Vec::new(),
                shape,
                n,
                c,
            });
        }
        let copied;
        let v = match c_slice(a) {
            Some(v) => v,
            None => {
                copied = values(a, "draws")?;
                &copied[..]
            }
        };
        let mut bufs: Vec<Vec<f32>> = (0..t).map(|_| Vec::with_capacity(n * c)).collect();
        {
            match layout {
                Layout::Tnc => {
                    for (b, d) in bufs.iter_mut().zip(v.chunks_exact(n * c)) {
                        b.extend_from_slice(d);
                    }
                }
                Layout::Nct => {
                    for cell in v.chunks_exact(t.max(1)) {
                        for (b, &x) in bufs.iter_mut().zip(cell) {
                            b.push(x);
                        }
                    }
                }
                Layout::Ntc => {
                    for item in v.chunks_exact((t * c).max(1)) {
                        for (b, row) in bufs.iter_mut().zip(item.chunks_exact(c)) {
                            b.extend_from_slice(row);
                        }
                    }
                }
            }
        }
        Ok(Draws { bufs, shape, n, c })
    }

    /// The library's samples: `t` draws of `(n, c)` probabilities (each row checked).
    pub fn samples(self) -> Result<Samples> {
        let (n, c) = (self.n, self.c);
        if n == 0 || c == 0 || self.bufs.is_empty() {
            return Err(Error::config(
                "draws",
                format!("shape {:?} has an empty axis", self.shape),
            ));
        }
        let draws = self
            .bufs
            .into_iter()
            .map(|b| Probs::new(b, n, c))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Samples::new(draws)?)
    }
}

/// Features `(n, d)` under a last layer: the given `W (c, d)`, `b (c,)`, or a zero layer of
/// `classes` classes (items chosen by their own vectors, before any model).
pub fn features((h, n, d): (Vec<f32>, usize, usize), layer: &Layer) -> Result<Features> {
    if layer.dim().is_some_and(|wd| wd != d) {
        return Err(Error::config(
            "features",
            format!(
                "features have {d} columns, the last layer's weight {}",
                layer.dim().unwrap_or_default()
            ),
        ));
    }
    let (w, b) = layer.weights(d)?;
    Ok(Features::new(h, n, d, w, b)?)
}

/// The last layer features are seen under.
pub enum Layer {
    /// A model's: weight `(c, d)` row-major and bias `(c,)`.
    Given {
        /// `(c, d)`.
        weight: Vec<f32>,
        /// `(c,)`.
        bias: Vec<f32>,
    },
    /// None: zeros of this many classes.
    Zero(usize),
}

impl Layer {
    /// The layer from optional `weight (c, d)` and `bias (c,)`: both or neither (then zeros of
    /// `classes` classes).
    pub fn read(
        weight: Option<&PyReadonlyArray2<'_, f32>>,
        bias: Option<&PyReadonlyArray1<'_, f32>>,
        classes: usize,
    ) -> Result<Layer> {
        match (weight, bias) {
            (Some(w), Some(b)) => {
                let (c, d) = (w.shape()[0], w.shape()[1]);
                let bias = values(b, "bias")?;
                if bias.len() == d && d != c && c > 0 {
                    return Err(Error::config(
                        "weight",
                        format!(
                            "the weight is ({c}, {d}) and the bias has {d} values: the weight \
                             looks transposed; the last layer's weight is (classes, features) \
                             as PyTorch's nn.Linear keeps it: pass weight.T"
                        ),
                    ));
                }
                if bias.len() != c || c == 0 || d == 0 {
                    return Err(Error::config(
                        "bias",
                        format!(
                            "the weight is ({c}, {d}), so the bias must be ({c},); it has {} values",
                            bias.len()
                        ),
                    ));
                }
                Ok(Layer::Given {
                    weight: values(w, "weight")?,
                    bias,
                })
            }
            (None, None) => {
                check_classes("classes", classes)?;
                Ok(Layer::Zero(classes.max(1)))
            }
            _ => Err(Error::config(
                "weight",
                "the last layer is a weight (C, d) and a bias (C,): give both or neither",
            )),
        }
    }

    /// The features' dimension the layer takes, when given.
    fn dim(&self) -> Option<usize> {
        match self {
            Layer::Given { weight, bias } => Some(weight.len() / bias.len()),
            Layer::Zero(_) => None,
        }
    }

    /// Classes.
    pub fn classes(&self) -> usize {
        match self {
            Layer::Given { bias, .. } => bias.len(),
            Layer::Zero(c) => *c,
        }
    }

    /// `(W, b)` for features of dimension `d`; a zero layer is checked to fit in memory
    /// before it is allocated.
    fn weights(&self, d: usize) -> Result<(Vec<f32>, Vec<f32>)> {
        match self {
            Layer::Given { weight, bias } => Ok((weight.clone(), bias.clone())),
            Layer::Zero(c) => {
                let what = format!("a zero last layer of {c} classes x {d} features");
                alkit::limits::fits("classes", &what, alkit::limits::product(&[*c, d, 4]))?;
                Ok((vec![0.0; c * d], vec![0.0; *c]))
            }
        }
    }
}

/// A row-major matrix: values, rows, columns.
pub type Matrix = (Vec<f32>, usize, usize);

/// Everything a call was given, owned, so that evidence is built without the GIL.
#[derive(Default)]
pub struct Inputs {
    /// `(n, c)`.
    pub probs: Option<Matrix>,
    /// Stochastic predictions.
    pub draws: Option<Draws>,
    /// `(n, d)`.
    pub features: Option<Matrix>,
    /// The last layer.
    pub layer: Option<Layer>,
    /// Reference rows `(m, d)` and their labels.
    pub reference: Option<(Matrix, Vec<usize>)>,
}

impl Inputs {
    /// The evidence the inputs hold: probabilities as given, else the mean of the draws, else
    /// the softmax of the last layer over the features (uniform under a zero layer); draws;
    /// features with the reference rows under the same last layer.
    ///
    /// With `grads` (`Some(expected)`), the last layer's gradient norms in closed form as
    /// well (with the expected-gradient terms when `expected`).
    pub fn evidence(self, grads: Option<bool>) -> Result<Evidence> {
        let samples = self.draws.map(Draws::samples).transpose()?;
        let under = match (self.features, &self.layer) {
            (Some(h), Some(layer)) => Some(features(h, layer)?),
            (Some(h), None) => Some(features(h, &Layer::Zero(1))?),
            (None, _) => None,
        };
        let probs = match (self.probs, &samples, &under) {
            (Some((p, n, c)), _, _) => Some(Probs::new(p, n, c)?),
            (None, Some(s), _) => Some(s.mean()?),
            (None, None, Some(f)) => Some(f.probs()?),
            (None, None, None) => None,
        };
        let Some(probs) = probs else {
            return Err(Error::config(
                "probs",
                "nothing to score: give probabilities, draws or features",
            ));
        };
        let n = probs.n();
        let counts = [
            samples.as_ref().map(|s| ("draws", s.n())),
            under.as_ref().map(|f| ("features", f.n())),
        ];
        if let Some((what, m)) = counts.into_iter().flatten().find(|(_, m)| *m != n) {
            return Err(Error::config(
                what,
                format!("{m} items, where the other arrays have {n}"),
            ));
        }
        let reference =
            match (self.reference, &under) {
                (Some((rows, labels)), Some(f)) => {
                    let layer = self.layer.unwrap_or(Layer::Zero(f.classes()));
                    if rows.2 != f.dim() {
                        return Err(Error::config(
                            "reference",
                            format!(
                                "reference rows have {} columns, the features {}",
                                rows.2,
                                f.dim()
                            ),
                        ));
                    }
                    Some(Arc::new(Reference::new(features(rows, &layer)?, labels)?))
                }
                (Some(_), None) => return Err(Error::config(
                    "reference",
                    "reference rows are compared with the items' features: give the features too",
                )),
                (None, _) => None,
            };
        let grads = match (grads, &under) {
            (Some(expected), Some(f)) => Some(f.last_layer_grads(&probs, expected)?),
            (Some(_), None) => {
                return Err(Error::config(
                    "features",
                    "gradient scores from arrays are the last layer's, computed from the \
                     features and the last layer (weight, bias): give them",
                ))
            }
            (None, _) => None,
        };
        let mut ev = Evidence::from_probs(probs);
        ev.grads = grads;
        ev.samples = samples;
        ev.features = under;
        ev.reference = reference;
        Ok(ev)
    }
}
