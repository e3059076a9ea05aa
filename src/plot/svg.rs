//! The SVG backend: primitives as `<polyline>`, `<polygon>` and vector `<text>` elements.

use super::prim::{Anchor, Prim};
use std::fmt::Write as _;

/// A `w` x `h` SVG document drawing `prims` on white.
pub(super) fn render(w: u32, h: u32, prims: &[Prim]) -> String {
    let family = super::font::FAMILY;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"{family}, sans-serif\">\n<rect width=\"{w}\" height=\"{h}\" fill=\"white\"/>\n"
    );
    let pts = |p: &[(f64, f64)]| {
        p.iter()
            .map(|(x, y)| format!("{x:.1},{y:.1}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    for prim in prims {
        match prim {
            Prim::Line {
                pts: p,
                color: (r, g, b),
                width,
            } => {
                let _ = writeln!(s, "<polyline points=\"{}\" fill=\"none\" stroke=\"rgb({r},{g},{b})\" stroke-width=\"{width}\"/>", pts(p));
            }
            Prim::Fill {
                pts: p,
                color: (r, g, b),
                alpha,
            } => {
                let _ = writeln!(s, "<polygon points=\"{}\" fill=\"rgb({r},{g},{b})\" fill-opacity=\"{alpha}\" stroke=\"none\"/>", pts(p));
            }
            Prim::Text {
                x,
                y,
                s: text,
                size,
                anchor,
                vertical,
            } => {
                let a = match anchor {
                    Anchor::Start => "start",
                    Anchor::Middle => "middle",
                    Anchor::End => "end",
                };
                let rot = if *vertical {
                    format!(" transform=\"rotate(-90 {x:.1} {y:.1})\"")
                } else {
                    String::new()
                };
                let text = text
                    .replace('&', "&amp;")
                    .replace('<', "&lt;")
                    .replace('>', "&gt;");
                let _ = writeln!(s, "<text x=\"{x:.1}\" y=\"{y:.1}\" font-size=\"{size}\" text-anchor=\"{a}\"{rot}>{text}</text>");
            }
        }
    }
    s.push_str("</svg>\n");
    s
}
