//! The geometry the fused kernels share: an NHWC activation's [`Dims`], the batch's two fixed
//! halves, and the 2x2 pooling windows with their position codes (`0..4`, [`INACTIVE`]).

use candle_core::{Layout, Result};
use std::ops::Range;

/// Argmax marker of a window whose maximum the ReLU blocks.
pub(super) const INACTIVE: u8 = u8::MAX;

/// An NHWC activation's shape.
#[derive(Debug, Clone, Copy)]
pub(super) struct Dims {
    pub(super) b: usize,
    pub(super) h: usize,
    pub(super) w: usize,
    pub(super) c: usize,
}

impl Dims {
    pub(super) fn from_layout(l: &Layout, op: &str) -> Result<Self> {
        match l.dims() {
            &[b, h, w, c] => Ok(Self { b, h, w, c }),
            d => candle_core::bail!("{op} expects a rank-4 NHWC tensor, got {d:?}"),
        }
    }
    pub(super) fn rows(&self) -> usize {
        self.b * self.h * self.w
    }
    pub(super) fn pooled_shape(&self) -> (usize, usize, usize, usize) {
        (self.b, self.h / 2, self.w / 2, self.c)
    }
    /// The batch's two halves (image ranges) that the kernels work on in parallel: a fixed
    /// split, so results do not depend on the number of threads.
    pub(super) fn halves(&self) -> [Range<usize>; 2] {
        let mid = self.b.div_ceil(2);
        [0..mid, mid..self.b]
    }
    /// Rows of one image.
    pub(super) fn image_rows(&self) -> usize {
        self.h * self.w
    }
    /// Pooled pixels of one image.
    pub(super) fn image_pooled(&self) -> usize {
        (self.h / 2) * (self.w / 2)
    }

    /// Every row of the images `imgs` outside all pooling windows (the last row / column of
    /// odd sides).
    #[inline(always)]
    pub(super) fn uncovered(&self, imgs: Range<usize>, mut f: impl FnMut(usize)) {
        let (h2, w2) = (2 * (self.h / 2), 2 * (self.w / 2));
        for bi in imgs {
            for yy in 0..self.h {
                for xx in 0..self.w {
                    if yy >= h2 || xx >= w2 {
                        f((bi * self.h + yy) * self.w + xx);
                    }
                }
            }
        }
    }

    /// Every pooled pixel (flat index) of the images `imgs` with the row indices of its
    /// window, in the order `(0,0), (0,1), (1,0), (1,1)` (the order in which the first maximum
    /// wins).
    #[inline(always)]
    pub(super) fn windows(&self, imgs: Range<usize>, mut f: impl FnMut(usize, [usize; 4])) {
        let (h2, w2) = (self.h / 2, self.w / 2);
        for bi in imgs {
            for py in 0..h2 {
                for px in 0..w2 {
                    let r0 = (bi * self.h + 2 * py) * self.w + 2 * px;
                    f(
                        (bi * h2 + py) * w2 + px,
                        [r0, r0 + 1, r0 + self.w, r0 + self.w + 1],
                    );
                }
            }
        }
    }
}
