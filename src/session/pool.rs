//! A session's pool: its items as the page and exports show them ([`PoolItems`]), the
//! normalised features its rounds train on, and the fingerprint that ties a state to its pool.

use crate::data::display::{DisplayKind, Displays};
use crate::data::reader::{hash_item, PoolReader, SourceReader, StreamedPool};
use crate::data::Items;
use crate::data::{Dataset, Fnv1a};
use crate::error::Result;
use std::collections::HashMap;
use std::sync::Arc;

/// A session's pool items as the page and exports show them (values as the source gives
/// them, not normalised), decoded in memory or read from the source on demand with the items
/// asked for last kept (a batch, see [`PoolItems::prefetch`]); and the position of each id.
#[derive(Clone)]
pub struct PoolItems {
    /// Positions in id order: a lookup is a binary search, and the index costs one position
    /// per item instead of a second copy of every id (a pool of millions holds its ids).
    by_id: Arc<Vec<usize>>,
    values: Values,
    /// What a person is shown of each item, when its source names it (an embedding file's
    /// texts or image paths).
    displays: Option<Arc<Displays>>,
}

#[derive(Clone)]
pub(super) enum Values {
    Memory(Arc<Items>),
    Streamed {
        reader: Arc<SourceReader>,
        kept: Arc<std::sync::Mutex<HashMap<usize, Vec<f32>>>>,
    },
}

impl PoolItems {
    pub(super) fn new(values: Values) -> PoolItems {
        let mut items = PoolItems {
            by_id: Arc::default(),
            values,
            displays: None,
        };
        let ids = items.ids();
        let mut order: Vec<usize> = (0..ids.len()).collect();
        order.sort_unstable_by(|&a, &b| ids[a].cmp(&ids[b]));
        items.by_id = Arc::new(order);
        items
    }

    /// These items shown as `displays` says (one per item, in the pool's order).
    pub(super) fn with_displays(mut self, displays: Option<Displays>) -> PoolItems {
        self.displays = displays.map(Arc::new);
        self
    }

    /// What a person is shown of each item, when the pool's source names it.
    pub fn displays(&self) -> Option<&Displays> {
        self.displays.as_deref()
    }

    /// How the page and Label Studio show an item: `image` for images and image displays,
    /// `text` for texts and other values (a table of numbers).
    pub fn object_name(&self) -> &'static str {
        match self.displays().map(Displays::kind) {
            Some(DisplayKind::Image) => "image",
            Some(DisplayKind::Text) => "text",
            None if self.item_shape().len() == 3 => "image",
            None => "text",
        }
    }

    /// Ids `(n,)`.
    pub fn ids(&self) -> &[String] {
        match &self.values {
            Values::Memory(items) => &items.ids,
            Values::Streamed { reader, .. } => reader.ids(),
        }
    }

    /// The position of item `id`, if the pool has it.
    pub fn position(&self, id: &str) -> Option<usize> {
        let ids = self.ids();
        self.by_id
            .binary_search_by(|&p| ids[p].as_str().cmp(id))
            .ok()
            .map(|k| self.by_id[k])
    }

    /// Items in the pool.
    pub fn len(&self) -> usize {
        self.ids().len()
    }

    /// True when the pool has no items.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Shape of one item.
    pub fn item_shape(&self) -> &[usize] {
        match &self.values {
            Values::Memory(items) => &items.item_shape,
            Values::Streamed { reader, .. } => reader.item_shape(),
        }
    }

    /// Values of items `indices` (each at most once), `(k, *item_shape)` in that order: from
    /// memory, from the kept items, or read from the source in one pass.
    pub fn values(&self, indices: &[usize]) -> Result<Vec<f32>> {
        let d: usize = self.item_shape().iter().product();
        match &self.values {
            Values::Memory(items) => Ok(indices
                .iter()
                .flat_map(|&i| &items.x[i * d..(i + 1) * d])
                .copied()
                .collect()),
            Values::Streamed { reader, kept } => {
                {
                    let kept = kept.lock().unwrap_or_else(|e| e.into_inner());
                    if indices.iter().all(|i| kept.contains_key(i)) {
                        return Ok(indices.iter().flat_map(|i| &kept[i]).copied().collect());
                    }
                }
                reader.raw(indices)
            }
        }
    }

    /// Reads items `indices` in one pass and keeps them (instead of those kept before), so
    /// that showing them one at a time reads nothing; a pool in memory has them already.
    pub fn prefetch(&self, indices: &[usize]) -> Result<()> {
        if let Values::Streamed { reader, kept } = &self.values {
            let d: usize = reader.item_shape().iter().product();
            let x = reader.raw(indices)?;
            let mut kept = kept.lock().unwrap_or_else(|e| e.into_inner());
            kept.clear();
            for (k, &i) in indices.iter().enumerate() {
                kept.insert(i, x[k * d..(k + 1) * d].to_vec());
            }
        }
        Ok(())
    }
}

/// A session's pool as its rounds read it: normalised, with the taught labels.
pub(super) enum Features {
    Memory(Dataset),
    Streamed(StreamedPool),
}

impl Features {
    pub(super) fn reader(&self) -> &dyn PoolReader {
        match self {
            Features::Memory(d) => d,
            Features::Streamed(p) => p,
        }
    }

    pub(super) fn set_labels(&mut self, labels: &[(usize, u32)]) -> Result<()> {
        match self {
            Features::Memory(d) => d.set_labels(labels),
            Features::Streamed(p) => p.set_labels(labels),
        }
    }
}

/// The pool fingerprint of state format `format` (see [`FORMAT`](super::state::FORMAT)).
pub(super) fn fingerprint(items: &Items, format: u32) -> u64 {
    use std::hash::Hasher;
    let mut h = Fnv1a::default();
    if format == 1 {
        for id in &items.ids {
            h.write(id.as_bytes());
            h.write(&[0]);
        }
        for v in &items.x {
            h.write(&v.to_bits().to_le_bytes());
        }
    } else {
        let d: usize = items.item_shape.iter().product();
        for (id, x) in items.ids.iter().zip(items.x.chunks_exact(d.max(1))) {
            hash_item(&mut h, id, x);
        }
    }
    h.finish()
}
