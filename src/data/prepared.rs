//! A checkpoint's preprocessing over a tensor source's items: items that already have its
//! shape taken as they are, 8-bit images put through it, anything else refused naming the item.
//! Image sources need none of this: their images are decoded straight through the
//! preprocessing ([`ImagePlan::preprocessed`](crate::data::plan::ImagePlan::preprocessed)).

use crate::data::image::{Image, Preprocess};
use crate::data::stream::{drain, in_memory, Chunk, ItemStream, Items};
use crate::error::{DataProblem, Error, Result};
use std::path::PathBuf;

/// `inner`'s items as `pre` prepares a tensor source's (see [`open`](crate::data::source::open)): as they
/// are when they already have `pre`'s shape, else 8-bit images put through `pre`; `name`
/// names the source in errors.
pub(crate) fn preprocessed(
    inner: Box<dyn ItemStream>,
    pre: &Preprocess,
    name: &str,
) -> Result<Box<dyn ItemStream>> {
    if inner.item_shape() == pre.item_shape().as_slice() {
        return Ok(inner);
    }
    Ok(Box::new(Prepared::new(inner, *pre, name.to_string())?))
}

/// A split read whole as [`preprocessed`] prepares a stream's items; `name` names the source in
/// errors.
pub(crate) fn prepare_items(items: Items, pre: &Preprocess, name: &str) -> Result<Items> {
    if items.item_shape == pre.item_shape() {
        return Ok(items);
    }
    let (labels, classes) = (items.labels.clone(), items.classes.clone());
    let mut st = preprocessed(in_memory(items), pre, name)?;
    let item_shape = st.item_shape().to_vec();
    let whole = drain(st.as_mut())?.ok_or_else(|| {
        Error::data(
            PathBuf::from(name),
            DataProblem::Other("holds no items".into()),
        )
    })?;
    Ok(Items {
        ids: whole.ids,
        x: whole.x,
        item_shape,
        labels,
        classes,
    })
}

/// A tensor source's 8-bit image items put through a [`Preprocess`] a chunk at a time.
struct Prepared {
    inner: Box<dyn ItemStream>,
    pre: Preprocess,
    /// The source's item shape `(c, h, w)`.
    from: [usize; 3],
    shape: Vec<usize>,
    /// The source, in errors.
    name: PathBuf,
}

impl Prepared {
    fn new(inner: Box<dyn ItemStream>, pre: Preprocess, name: String) -> Result<Prepared> {
        let name = PathBuf::from(name);
        let from = match *inner.item_shape() {
            [c @ (1 | 3), h, w] if h > 0 && w > 0 => [c, h, w],
            ref other => {
                return Err(Error::data(
                    &name,
                    DataProblem::Other(format!(
                        "items of shape {other:?} are not images of 1 or 3 channels, and the \
                         checkpoint takes {:?}",
                        pre.item_shape()
                    )),
                ))
            }
        };
        Ok(Prepared {
            shape: pre.item_shape(),
            inner,
            pre,
            from,
            name,
        })
    }
}

impl ItemStream for Prepared {
    fn len(&self) -> usize {
        self.inner.len()
    }

    fn item_shape(&self) -> &[usize] {
        &self.shape
    }

    fn next_chunk(&mut self, max: usize) -> Result<Option<Chunk>> {
        let Some(chunk) = self.inner.next_chunk(max)? else {
            return Ok(None);
        };
        let [c, h, w] = self.from;
        let mut x = Vec::with_capacity(chunk.ids.len() * self.shape.iter().product::<usize>());
        for (id, item) in chunk.ids.iter().zip(chunk.x.chunks_exact(c * h * w)) {
            let mut pixels = Vec::with_capacity(item.len());
            for &v in item {
                let p = (v * 255.0).round();
                if !((0.0..=255.0).contains(&p) && (v * 255.0 - p).abs() <= 1e-3) {
                    return Err(Error::data(
                        &self.name,
                        DataProblem::Other(format!(
                            "item `{id}` holds {v}, not an 8-bit pixel (k/255): only 8-bit \
                             images are resized; give items of shape {:?}, already prepared",
                            self.shape
                        )),
                    ));
                }
                pixels.push(p as u8);
            }
            let img = Image {
                channels: c,
                height: h,
                width: w,
                pixels,
            };
            let at = self.name.join(id);
            let img = img.preprocess(&self.pre, &at)?;
            x.extend(img.pixels.iter().map(|&p| f32::from(p) / 255.0));
        }
        Ok(Some(Chunk { x, ..chunk }))
    }
}
