//! The PNG backend: an RGB raster that primitives are drawn on with anti-aliased edges, encoded
//! by the `png` crate.

use super::font;
use super::prim::{Anchor, Prim, Rgb};

/// A `w` x `h` PNG drawing `prims` on white.
pub(super) fn render(w: u32, h: u32, prims: &[Prim]) -> Vec<u8> {
    let mut c = Canvas::new(w as usize, h as usize);
    for prim in prims {
        match prim {
            Prim::Fill { pts, color, alpha } => c.fill(pts, *color, *alpha),
            Prim::Line { pts, color, width } => {
                for seg in pts.windows(2) {
                    c.segment(seg[0], seg[1], *color, *width);
                }
            }
            Prim::Text {
                x,
                y,
                s,
                size,
                anchor,
                vertical,
            } => c.text(*x, *y, s, *size, *anchor, *vertical),
        }
    }
    c.png()
}

/// An RGB raster, white until drawn on.
pub(super) struct Canvas {
    w: usize,
    h: usize,
    px: Vec<[f64; 3]>,
}

impl Canvas {
    pub(super) fn new(w: usize, h: usize) -> Self {
        // A PNG has at least one pixel each way.
        let (w, h) = (w.max(1), h.max(1));
        Self {
            w,
            h,
            px: vec![[255.0; 3]; w * h],
        }
    }

    /// Mixes `a` (clamped to 1) of `color` into the pixel at `(x, y)`; outside pixels are skipped.
    pub(super) fn blend(&mut self, x: i64, y: i64, (r, g, b): Rgb, a: f64) {
        if x < 0 || y < 0 || x >= self.w as i64 || y >= self.h as i64 || a <= 0.0 {
            return;
        }
        let p = &mut self.px[y as usize * self.w + x as usize];
        let a = a.min(1.0);
        for (ch, v) in p.iter_mut().zip([r, g, b]) {
            *ch = *ch * (1.0 - a) + f64::from(v) * a;
        }
    }

    /// A thick antialiased segment: coverage from the distance to the segment.
    pub(super) fn segment(
        &mut self,
        (ax, ay): (f64, f64),
        (bx, by): (f64, f64),
        color: Rgb,
        width: f64,
    ) {
        let r = width / 2.0;
        let (minx, maxx) = (
            (ax.min(bx) - r - 1.0).floor() as i64,
            (ax.max(bx) + r + 1.0).ceil() as i64,
        );
        let (miny, maxy) = (
            (ay.min(by) - r - 1.0).floor() as i64,
            (ay.max(by) + r + 1.0).ceil() as i64,
        );
        let (dx, dy) = (bx - ax, by - ay);
        let len2 = (dx * dx + dy * dy).max(1e-12);
        for y in miny..=maxy {
            for x in minx..=maxx {
                let (px, py) = (x as f64 + 0.5, y as f64 + 0.5);
                let t = (((px - ax) * dx + (py - ay) * dy) / len2).clamp(0.0, 1.0);
                let (qx, qy) = (ax + t * dx - px, ay + t * dy - py);
                let d = (qx * qx + qy * qy).sqrt();
                let cov = (r + 0.5 - d).clamp(0.0, 1.0);
                if cov > 0.0 {
                    // Avoid double-darkening shared endpoints: keep the max coverage per call.
                    self.blend(x, y, color, cov);
                }
            }
        }
    }

    /// Even-odd scanline fill.
    fn fill(&mut self, pts: &[(f64, f64)], color: Rgb, alpha: f64) {
        if pts.len() < 3 {
            return;
        }
        let miny = pts
            .iter()
            .map(|p| p.1)
            .fold(f64::INFINITY, f64::min)
            .floor()
            .max(0.0) as usize;
        let maxy = pts
            .iter()
            .map(|p| p.1)
            .fold(f64::NEG_INFINITY, f64::max)
            .ceil()
            .min(self.h as f64 - 1.0) as usize;
        for y in miny..=maxy {
            let yc = y as f64 + 0.5;
            let mut xs: Vec<f64> = Vec::new();
            for i in 0..pts.len() {
                let (a, b) = (pts[i], pts[(i + 1) % pts.len()]);
                if (a.1 <= yc && b.1 > yc) || (b.1 <= yc && a.1 > yc) {
                    xs.push(a.0 + (yc - a.1) / (b.1 - a.1) * (b.0 - a.0));
                }
            }
            xs.sort_by(f64::total_cmp);
            for pair in xs.chunks_exact(2) {
                for x in pair[0].round() as i64..pair[1].round() as i64 {
                    self.blend(x, y as i64, color, alpha);
                }
            }
        }
    }

    /// `s` in the plot font at `size` pixels per em, anti-aliased; `(x, y)` is on the baseline
    /// at the `anchor` point. Vertical text reads upwards, its baseline at `x`.
    pub(super) fn text(
        &mut self,
        x: f64,
        y: f64,
        s: &str,
        size: f64,
        anchor: Anchor,
        vertical: bool,
    ) {
        const INK: Rgb = (30, 30, 30);
        let shift = match anchor {
            Anchor::Start => 0.0,
            Anchor::Middle => font::width(s, size) / 2.0,
            Anchor::End => font::width(s, size),
        };
        if vertical {
            // Laid out horizontally from the origin, then turned a quarter counter-clockwise
            // about (x, y): the pixel (u, v) lands on (x + v, y - u - 1).
            let (x, y) = (x.round() as i64, y.round() as i64);
            font::draw(s, size, -shift, 0.0, |u, v, c| {
                self.blend(x + v, y - u - 1, INK, c);
            });
        } else {
            font::draw(s, size, x - shift, y, |px, py, c| {
                self.blend(px, py, INK, c);
            });
        }
    }

    /// The raster as a PNG file's bytes.
    pub(super) fn png(&self) -> Vec<u8> {
        let mut rgb = Vec::with_capacity(self.w * self.h * 3);
        for p in &self.px {
            rgb.extend(p.iter().map(|v| v.round().clamp(0.0, 255.0) as u8));
        }
        let mut out = Vec::new();
        // The size is at least 1 x 1 and the data exactly w * h * 3 bytes, written to memory:
        // nothing the encoder checks can fail.
        let mut enc = png::Encoder::new(&mut out, self.w as u32, self.h as u32);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut writer = enc.write_header().expect("a valid PNG header");
        writer
            .write_image_data(&rgb)
            .expect("w * h RGB pixels written to memory");
        writer.finish().expect("writing to memory cannot fail");
        out
    }

    /// The raster's bytes, row-major RGB.
    #[cfg(test)]
    pub(super) fn rgb(&self) -> Vec<u8> {
        self.px
            .iter()
            .flat_map(|p| p.map(|v| v.round().clamp(0.0, 255.0) as u8))
            .collect()
    }
}
