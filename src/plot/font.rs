//! The typeface of plot text: DejaVu Sans, embedded (with its license beside it), measured for
//! the layout and rasterised with anti-aliasing by `ab_glyph`, so that a PNG comes out the same
//! on every machine whatever fonts it has.

use ab_glyph::{point, Font, FontRef, GlyphId, PxScale, ScaleFont};
use std::sync::OnceLock;

/// The family SVG asks for first: where it is installed, a viewer shows the PNG's metrics.
pub(super) const FAMILY: &str = "DejaVu Sans";

/// DejaVu Sans 2.37, unmodified (Bitstream Vera license with public-domain DejaVu changes:
/// `DejaVuSans-LICENSE`).
const TTF: &[u8] = include_bytes!("DejaVuSans.ttf");

fn face() -> &'static FontRef<'static> {
    static FACE: OnceLock<FontRef<'static>> = OnceLock::new();
    // The bytes are compiled in and checked by a test: parsing them cannot fail at run time.
    FACE.get_or_init(|| FontRef::try_from_slice(TTF).expect("the embedded font parses"))
}

/// `ab_glyph` scales by the height from descender to ascender; SVG's `font-size` (and ours) is
/// the em size.
fn scale(size: f64) -> PxScale {
    let f = face();
    let units_per_em = f.units_per_em().unwrap_or(2048.0);
    PxScale::from(size as f32 * f.height_unscaled() / units_per_em)
}

/// The glyphs of `s` at `size` pixels per em with their pen positions along the baseline from
/// 0 (advance widths and kerning), and the total advance.
fn glyphs(s: &str, size: f64) -> (Vec<(GlyphId, f32)>, f32) {
    let f = face().as_scaled(scale(size));
    let mut pen = 0.0;
    let mut prev = None;
    let mut out = Vec::with_capacity(s.len());
    for ch in s.chars() {
        let id = f.glyph_id(ch);
        if let Some(p) = prev {
            pen += f.kern(p, id);
        }
        out.push((id, pen));
        pen += f.h_advance(id);
        prev = Some(id);
    }
    (out, pen)
}

/// The width of `s` set at `size` pixels per em.
pub(super) fn width(s: &str, size: f64) -> f64 {
    f64::from(glyphs(s, size).1)
}

/// Rasterises `s` at `size` pixels per em with its baseline starting at `(x, y)`: calls
/// `cover(px, py, coverage)` for every pixel the text touches, `coverage` in `0..=1`.
pub(super) fn draw(s: &str, size: f64, x: f64, y: f64, mut cover: impl FnMut(i64, i64, f64)) {
    let scale = scale(size);
    let (glyphs, _) = glyphs(s, size);
    for (id, pen) in glyphs {
        let glyph = id.with_scale_and_position(scale, point(x as f32 + pen, y as f32));
        if let Some(outline) = face().outline_glyph(glyph) {
            let min = outline.px_bounds().min;
            outline.draw(|gx, gy, c| {
                cover(
                    min.x as i64 + i64::from(gx),
                    min.y as i64 + i64::from(gy),
                    f64::from(c),
                );
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_font_is_measured_and_drawn() {
        assert!(FontRef::try_from_slice(TTF).is_ok());
        // Proportional: an `m` is wider than an `i`, and width grows with size.
        assert!(width("m", 12.0) > 2.0 * width("i", 12.0));
        assert!((width("acc", 24.0) - 2.0 * width("acc", 12.0)).abs() < 1e-3);
        // Ink lies above the baseline (cap height about 0.73 em) and starts at the pen.
        let (mut top, mut bottom, mut left) = (i64::MAX, i64::MIN, i64::MAX);
        draw("H", 20.0, 10.0, 50.0, |x, y, c| {
            if c > 0.5 {
                (top, bottom, left) = (top.min(y), bottom.max(y), left.min(x));
            }
        });
        assert_eq!(bottom, 49);
        assert!((34..=37).contains(&top), "{top}");
        assert!((11..=13).contains(&left), "{left}");
    }
}
