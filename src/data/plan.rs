//! How a pool's decoded images become items of one shape: an [`ImagePlan`] set from every
//! image's header before any is decoded (image folders, Parquet tables), or from a checkpoint's
//! own [`Preprocess`].

use crate::data::image::{Header, Image, Preprocess};
use crate::error::{DataProblem, Error, Result};
use std::path::Path;

/// The largest side an image folder's images keep as they are (when all share one size).
pub const MAX_SIDE_AS_IS: usize = 256;

/// The square side images are scaled to (shorter side, then the centre) when a folder's images
/// differ in size or exceed [`MAX_SIDE_AS_IS`].
pub const FIT_SIDE: usize = 64;

/// How a pool's decoded images become items of one shape, set from every image's header
/// before any is decoded (grayscale is promoted to RGB when any image is RGB; with `fit`,
/// each is preprocessed to that square first), or by a checkpoint's own [`Preprocess`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ImagePlan {
    pub(crate) fit: Option<Preprocess>,
    pub(crate) channels: usize,
    pub(crate) height: usize,
    pub(crate) width: usize,
}

/// The headers of a pool's images, seen one at a time, for its [`ImagePlan`].
#[derive(Debug, Default)]
pub(crate) struct PlanBuilder {
    first: Option<(usize, usize)>,
    mixed: bool,
    largest: usize,
    channels: usize,
}

impl PlanBuilder {
    pub(crate) fn add(&mut self, h: Header) {
        let size = (h.height, h.width);
        self.mixed |= self.first.is_some_and(|f| f != size);
        self.first.get_or_insert(size);
        self.largest = self.largest.max(h.height).max(h.width);
        self.channels = self.channels.max(h.channels);
    }

    /// The plan; with `fits`, images of mixed sizes or larger than [`MAX_SIDE_AS_IS`] are
    /// scaled to [`FIT_SIDE`], else every image must have the first one's size.
    pub(crate) fn plan(&self, fits: bool) -> ImagePlan {
        let (height, width) = self.first.unwrap_or((0, 0));
        let channels = self.channels.max(1);
        if fits && (self.mixed || self.largest > MAX_SIDE_AS_IS) {
            return ImagePlan::preprocessed(Preprocess::square(FIT_SIDE, channels));
        }
        ImagePlan {
            fit: None,
            channels,
            height,
            width,
        }
    }
}

impl ImagePlan {
    /// Every image through `pre`, whatever its size.
    pub(crate) fn preprocessed(pre: Preprocess) -> ImagePlan {
        ImagePlan {
            fit: Some(pre),
            channels: pre.channels,
            height: pre.size,
            width: pre.size,
        }
    }

    /// Shape of one item `(c, h, w)`.
    pub(crate) fn item_shape(&self) -> Vec<usize> {
        vec![self.channels, self.height, self.width]
    }

    /// Values per item.
    pub(crate) fn item_len(&self) -> usize {
        self.channels * self.height * self.width
    }

    /// A decoded image as an item `(c, h, w)` in `[0, 1]`; `name` names it in errors.
    pub(crate) fn item(&self, img: Image, name: &Path) -> Result<Vec<f32>> {
        let img = match &self.fit {
            Some(pre) => img.preprocess(pre, name)?,
            None => img,
        };
        if (img.height, img.width) != (self.height, self.width) {
            return Err(Error::data(
                name,
                DataProblem::DimensionMismatch {
                    expected: (self.height, self.width),
                    got: (img.height, img.width),
                },
            ));
        }
        let img = img.with_channels(self.channels);
        if img.channels != self.channels {
            return Err(Error::data(
                name,
                DataProblem::Other(format!(
                    "decodes to {} channels where its header said at most {}",
                    img.channels, self.channels
                )),
            ));
        }
        Ok(img.pixels.iter().map(|&p| f32::from(p) / 255.0).collect())
    }
}
