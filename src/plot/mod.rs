//! Plots: line charts with shaded bands ([`Figure`]), heatmaps ([`heatmaps_png`]) and
//! critical-difference diagrams ([`CdDiagram`]).
//!
//! Small on purpose: alkit needs curves (mean ± std per strategy), ROC and reliability plots,
//! not a plotting framework. A [`Figure`] of [`Panel`]s is laid out once into the drawing
//! primitives below, then written by two backends: SVG with vector text (`svg.rs`) and an RGB
//! raster encoded as PNG (`raster.rs`), its text anti-aliased from the embedded DejaVu Sans
//! (`font.rs`), so no system fonts are needed.

mod cd;
mod figure;
mod font;
mod heatmap;
mod prim;
mod raster;
mod svg;

pub use cd::CdDiagram;
pub use figure::{Figure, Panel, Series};
pub use heatmap::{heatmaps_png, Heatmap};
