//! Plots: line charts with shaded bands ([`Figure`]) and heatmaps ([`heatmaps_png`]).
//!
//! Small on purpose: alkit needs curves (mean ± std per strategy), ROC and reliability plots,
//! not a plotting framework. A [`Figure`] of [`Panel`]s is laid out once into the drawing
//! primitives below, then written by two backends: SVG with vector text (`svg.rs`) and an RGB
//! raster encoded as PNG (`raster.rs`), its text anti-aliased from the embedded DejaVu Sans
//! (`font.rs`), so no system fonts are needed.

mod figure;
mod font;
mod heatmap;
mod raster;
mod svg;

pub use figure::{Figure, Panel, Series};
pub use heatmap::{heatmaps_png, Heatmap};

/// An sRGB colour.
type Rgb = (u8, u8, u8);

/// What a layout draws, in pixels from the top-left corner; both backends draw these.
#[derive(Debug, Clone)]
enum Prim {
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
enum Anchor {
    Start,
    Middle,
    End,
}
