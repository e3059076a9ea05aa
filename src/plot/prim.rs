//! The drawing primitives a layout produces and both backends draw: [`Prim`], with its colours
//! and text anchors.

/// An sRGB colour.
pub(super) type Rgb = (u8, u8, u8);

/// What a layout draws, in pixels from the top-left corner; both backends draw these.
#[derive(Debug, Clone)]
pub(super) enum Prim {
    /// A polyline.
    Line {
        pts: Vec<(f64, f64)>,
        color: Rgb,
        width: f64,
    },
    /// A filled polygon.
    Fill {
        pts: Vec<(f64, f64)>,
        color: Rgb,
        alpha: f64,
    },
    /// One line of text; `(x, y)` is on the baseline, `size` in pixels per em.
    Text {
        x: f64,
        y: f64,
        s: String,
        size: f64,
        anchor: Anchor,
        /// Rotated a quarter turn counter-clockwise (reading upwards).
        vertical: bool,
    },
}

/// Which point of a text its `x` names.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Anchor {
    Start,
    Middle,
    End,
}
