//! Line plots with shaded bands, rendered to SVG and PNG from one description.
//!
//! Small on purpose: alkit needs curves (mean ± std per strategy) and later ROC/reliability
//! plots, not a plotting framework. A [`Figure`] of [`Panel`]s is laid out once into drawing
//! primitives, then written by two backends: SVG text, and an RGB raster encoded as PNG
//! (zlib via `flate2`, text in the public-domain `font8x8` bitmap font, so no system fonts are
//! needed).

use std::fmt::Write as _;
use std::io::Write as _;

/// One line (and optional band) in a panel.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend label.
    pub name: String,
    /// `(x, y)` points, drawn in order.
    pub points: Vec<(f64, f64)>,
    /// `(x, low, high)` shaded band behind the line (e.g. mean ± std).
    pub band: Vec<(f64, f64, f64)>,
}

/// One set of axes.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Panel {
    /// Title above the axes.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// The lines.
    pub series: Vec<Series>,
}

/// Panels side by side.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    /// The panels, left to right.
    pub panels: Vec<Panel>,
    /// Width of one panel in pixels.
    pub panel_width: u32,
    /// Height in pixels.
    pub height: u32,
}

/// The tab10 palette.
const PALETTE: [(u8, u8, u8); 10] = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
];

type Rgb = (u8, u8, u8);

#[derive(Debug, Clone)]
enum Prim {
    Line {
        pts: Vec<(f64, f64)>,
        color: Rgb,
        width: f64,
    },
    Fill {
        pts: Vec<(f64, f64)>,
        color: Rgb,
        alpha: f64,
    },
    Text {
        x: f64,
        y: f64,
        s: String,
        size: f64,
        anchor: Anchor,
        vertical: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Anchor {
    Start,
    Middle,
    End,
}

/// "Nice" tick positions covering `[lo, hi]`.
fn ticks(lo: f64, hi: f64) -> Vec<f64> {
    let span = (hi - lo).max(1e-12);
    let raw = span / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| span / s <= 6.0)
        .unwrap_or(10.0 * mag);
    let first = (lo / step).ceil() * step;
    (0..)
        .map(|i| first + i as f64 * step)
        .take_while(|v| *v <= hi + step * 1e-9)
        .collect()
}

fn fmt_tick(v: f64) -> String {
    if v.abs() >= 1000.0 || v == v.trunc() {
        format!("{v:.0}")
    } else if (v * 10.0 - (v * 10.0).round()).abs() < 1e-9 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

impl Figure {
    fn width(&self) -> u32 {
        self.panel_width * self.panels.len().max(1) as u32
    }

    fn layout(&self) -> Vec<Prim> {
        let mut out = Vec::new();
        let (pw, h) = (f64::from(self.panel_width), f64::from(self.height));
        let (ml, mr, mt, mb) = (64.0, 16.0, 30.0, 48.0);
        for (pi, panel) in self.panels.iter().enumerate() {
            let x0 = pi as f64 * pw + ml;
            let (x1, y0, y1) = ((pi + 1) as f64 * pw - mr, mt, h - mb);
            let all_x = panel
                .series
                .iter()
                .flat_map(|s| s.points.iter().map(|p| p.0));
            let all_y = panel.series.iter().flat_map(|s| {
                s.points
                    .iter()
                    .map(|p| p.1)
                    .chain(s.band.iter().flat_map(|b| [b.1, b.2]))
            });
            let (mut xl, mut xh) = all_x.fold((f64::INFINITY, f64::NEG_INFINITY), |a, v| {
                (a.0.min(v), a.1.max(v))
            });
            let (mut yl, mut yh) = all_y
                .filter(|v| v.is_finite())
                .fold((f64::INFINITY, f64::NEG_INFINITY), |a, v| {
                    (a.0.min(v), a.1.max(v))
                });
            if !xl.is_finite() {
                (xl, xh) = (0.0, 1.0);
            }
            if !yl.is_finite() {
                (yl, yh) = (0.0, 1.0);
            }
            if xh - xl < 1e-12 {
                (xl, xh) = (xl - 0.5, xh + 0.5);
            }
            let pad = ((yh - yl) * 0.05).max(1e-6);
            (yl, yh) = (yl - pad, yh + pad);
            let sx = |v: f64| x0 + (v - xl) / (xh - xl) * (x1 - x0);
            let sy = |v: f64| y1 - (v - yl) / (yh - yl) * (y1 - y0);
            // Grid and ticks.
            for t in ticks(yl, yh) {
                out.push(Prim::Line {
                    pts: vec![(x0, sy(t)), (x1, sy(t))],
                    color: (225, 225, 225),
                    width: 1.0,
                });
                out.push(Prim::Text {
                    x: x0 - 6.0,
                    y: sy(t) + 4.0,
                    s: fmt_tick(t),
                    size: 8.0,
                    anchor: Anchor::End,
                    vertical: false,
                });
            }
            for t in ticks(xl, xh) {
                out.push(Prim::Line {
                    pts: vec![(sx(t), y0), (sx(t), y1)],
                    color: (225, 225, 225),
                    width: 1.0,
                });
                out.push(Prim::Text {
                    x: sx(t),
                    y: y1 + 16.0,
                    s: fmt_tick(t),
                    size: 8.0,
                    anchor: Anchor::Middle,
                    vertical: false,
                });
            }
            out.push(Prim::Line {
                pts: vec![(x0, y0), (x0, y1), (x1, y1), (x1, y0), (x0, y0)],
                color: (60, 60, 60),
                width: 1.0,
            });
            out.push(Prim::Text {
                x: (x0 + x1) / 2.0,
                y: 18.0,
                s: panel.title.clone(),
                size: 16.0,
                anchor: Anchor::Middle,
                vertical: false,
            });
            out.push(Prim::Text {
                x: (x0 + x1) / 2.0,
                y: h - 12.0,
                s: panel.x_label.clone(),
                size: 8.0,
                anchor: Anchor::Middle,
                vertical: false,
            });
            out.push(Prim::Text {
                x: pi as f64 * pw + 14.0,
                y: (y0 + y1) / 2.0,
                s: panel.y_label.clone(),
                size: 8.0,
                anchor: Anchor::Middle,
                vertical: true,
            });
            // Legend box (drawn under the entries, over the grid and bands).
            let legend_w = 40.0
                + 7.0
                    * panel
                        .series
                        .iter()
                        .map(|s| s.name.chars().count())
                        .max()
                        .unwrap_or(0) as f64;
            let legend_h = 8.0 + 14.0 * panel.series.len() as f64;
            let mut entries = Vec::new();
            for (si, s) in panel.series.iter().enumerate() {
                let color = PALETTE[si % PALETTE.len()];
                if !s.band.is_empty() {
                    let mut pts: Vec<(f64, f64)> =
                        s.band.iter().map(|b| (sx(b.0), sy(b.2))).collect();
                    pts.extend(s.band.iter().rev().map(|b| (sx(b.0), sy(b.1))));
                    out.push(Prim::Fill {
                        pts,
                        color,
                        alpha: 0.18,
                    });
                }
                let pts: Vec<(f64, f64)> = s
                    .points
                    .iter()
                    .filter(|p| p.1.is_finite())
                    .map(|p| (sx(p.0), sy(p.1)))
                    .collect();
                out.push(Prim::Line {
                    pts,
                    color,
                    width: 2.0,
                });
                // Legend, top-left inside the axes.
                let ly = y0 + 14.0 + 14.0 * si as f64;
                entries.push(Prim::Line {
                    pts: vec![(x0 + 8.0, ly - 4.0), (x0 + 26.0, ly - 4.0)],
                    color,
                    width: 2.0,
                });
                entries.push(Prim::Text {
                    x: x0 + 30.0,
                    y: ly,
                    s: s.name.clone(),
                    size: 8.0,
                    anchor: Anchor::Start,
                    vertical: false,
                });
            }
            if !panel.series.is_empty() {
                let (lx, ly) = (x0 + 3.0, y0 + 3.0);
                out.push(Prim::Fill {
                    pts: vec![
                        (lx, ly),
                        (lx + legend_w, ly),
                        (lx + legend_w, ly + legend_h),
                        (lx, ly + legend_h),
                    ],
                    color: (255, 255, 255),
                    alpha: 0.85,
                });
                out.extend(entries);
            }
        }
        out
    }

    /// The figure as an SVG document.
    pub fn to_svg(&self) -> String {
        let (w, h) = (self.width(), self.height);
        let mut s = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\">\n<rect width=\"{w}\" height=\"{h}\" fill=\"white\"/>\n"
        );
        let pts = |p: &[(f64, f64)]| {
            p.iter()
                .map(|(x, y)| format!("{x:.1},{y:.1}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        for prim in self.layout() {
            match prim {
                Prim::Line {
                    pts: p,
                    color: (r, g, b),
                    width,
                } => {
                    let _ = writeln!(s, "<polyline points=\"{}\" fill=\"none\" stroke=\"rgb({r},{g},{b})\" stroke-width=\"{width}\"/>", pts(&p));
                }
                Prim::Fill {
                    pts: p,
                    color: (r, g, b),
                    alpha,
                } => {
                    let _ = writeln!(s, "<polygon points=\"{}\" fill=\"rgb({r},{g},{b})\" fill-opacity=\"{alpha}\" stroke=\"none\"/>", pts(&p));
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
                    let rot = if vertical {
                        format!(" transform=\"rotate(-90 {x:.1} {y:.1})\"")
                    } else {
                        String::new()
                    };
                    let text = text
                        .replace('&', "&amp;")
                        .replace('<', "&lt;")
                        .replace('>', "&gt;");
                    let px = if size > 10.0 { 15 } else { 12 };
                    let _ = writeln!(s, "<text x=\"{x:.1}\" y=\"{y:.1}\" font-size=\"{px}\" text-anchor=\"{a}\"{rot}>{text}</text>");
                }
            }
        }
        s.push_str("</svg>\n");
        s
    }

    /// Writes `dir/STEM.svg` and `dir/STEM.png`, each atomically.
    pub fn save(&self, dir: &std::path::Path, stem: &str) -> crate::Result<()> {
        crate::fsutil::write_atomic(&dir.join(format!("{stem}.svg")), self.to_svg().as_bytes())?;
        crate::fsutil::write_atomic(&dir.join(format!("{stem}.png")), &self.to_png())
    }

    /// The figure as a PNG file's bytes.
    pub fn to_png(&self) -> Vec<u8> {
        let mut c = Canvas::new(self.width() as usize, self.height as usize);
        for prim in self.layout() {
            match prim {
                Prim::Fill { pts, color, alpha } => c.fill(&pts, color, alpha),
                Prim::Line { pts, color, width } => {
                    for seg in pts.windows(2) {
                        c.segment(seg[0], seg[1], color, width);
                    }
                }
                Prim::Text {
                    x,
                    y,
                    s,
                    size,
                    anchor,
                    vertical,
                } => c.text(
                    x,
                    y,
                    &s,
                    (size / 8.0).round().max(1.0) as usize,
                    anchor,
                    vertical,
                ),
            }
        }
        c.png()
    }
}

/// An RGB raster.
struct Canvas {
    w: usize,
    h: usize,
    px: Vec<[f64; 3]>,
}

impl Canvas {
    fn new(w: usize, h: usize) -> Self {
        Self {
            w,
            h,
            px: vec![[255.0; 3]; w * h],
        }
    }

    fn blend(&mut self, x: i64, y: i64, (r, g, b): Rgb, a: f64) {
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
    fn segment(&mut self, (ax, ay): (f64, f64), (bx, by): (f64, f64), color: Rgb, width: f64) {
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

    /// Text in the 8x8 bitmap font, scaled by `scale`; `y` is the baseline.
    fn text(&mut self, x: f64, y: f64, s: &str, scale: usize, anchor: Anchor, vertical: bool) {
        let adv = 7 * scale; // 8-pixel cells look loose; glyphs use 7 columns
        let total = (s.chars().count() * adv) as f64;
        let shift = match anchor {
            Anchor::Start => 0.0,
            Anchor::Middle => total / 2.0,
            Anchor::End => total,
        };
        for (i, ch) in s.chars().enumerate() {
            let glyph = font8x8::legacy::BASIC_LEGACY
                .get(ch as usize)
                .copied()
                .unwrap_or([0; 8]);
            for (row, bits) in glyph.iter().enumerate() {
                for col in 0..8 {
                    if bits & (1 << col) == 0 {
                        continue;
                    }
                    for sy in 0..scale {
                        for sx in 0..scale {
                            let u = (i * adv + col * scale + sx) as f64 - shift;
                            let v = (row * scale + sy) as f64 - 7.0 * scale as f64;
                            let (px, py) = if vertical {
                                (x + v, y - u)
                            } else {
                                (x + u, y + v)
                            };
                            self.blend(px as i64, py as i64, (30, 30, 30), 1.0);
                        }
                    }
                }
            }
        }
    }

    fn png(&self) -> Vec<u8> {
        let mut raw = Vec::with_capacity((self.w * 3 + 1) * self.h);
        for row in self.px.chunks_exact(self.w) {
            raw.push(0); // filter: none
            for p in row {
                raw.extend(p.iter().map(|v| v.round().clamp(0.0, 255.0) as u8));
            }
        }
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(&raw).expect("writing to a Vec cannot fail");
        let idat = z.finish().expect("writing to a Vec cannot fail");
        let mut ihdr = Vec::with_capacity(13);
        ihdr.extend_from_slice(&(self.w as u32).to_be_bytes());
        ihdr.extend_from_slice(&(self.h as u32).to_be_bytes());
        ihdr.extend_from_slice(&[8, 2, 0, 0, 0]); // 8-bit RGB, deflate, no filter, no interlace
        let mut out = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a];
        for (kind, data) in [
            (b"IHDR", &ihdr[..]),
            (b"IDAT", &idat[..]),
            (b"IEND", &[][..]),
        ] {
            out.extend_from_slice(&(data.len() as u32).to_be_bytes());
            let start = out.len();
            out.extend_from_slice(kind);
            out.extend_from_slice(data);
            let crc = crc32(&out[start..]);
            out.extend_from_slice(&crc.to_be_bytes());
        }
        out
    }
}

/// CRC-32 (IEEE, as PNG uses).
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = 0xffff_ffffu32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// A scalar field over the plane as a PNG heatmap (viridis-like colours, low = dark), with
/// labeled points drawn on top (class 0 white, class 1 black, others red) and a title.
/// `values` are row-major `(ny, nx)` with row 0 at the top (`y = extent[3]`); `extent` is
/// `[x_min, x_max, y_min, y_max]`.
pub fn heatmap_png(
    values: &[f64],
    nx: usize,
    ny: usize,
    extent: [f64; 4],
    points: &[(f64, f64, u32)],
    title: &str,
) -> Vec<u8> {
    let (size, top, left) = (480usize, 30usize, 10usize);
    let mut c = Canvas::new(size + 2 * left, size + top + 10);
    let finite = values.iter().copied().filter(|v| v.is_finite());
    let (lo, hi) = finite.fold((f64::INFINITY, f64::NEG_INFINITY), |a, v| {
        (a.0.min(v), a.1.max(v))
    });
    let span = (hi - lo).max(1e-12);
    const STOPS: [(f64, f64, f64); 5] = [
        (68.0, 1.0, 84.0),
        (59.0, 82.0, 139.0),
        (33.0, 145.0, 140.0),
        (94.0, 201.0, 98.0),
        (253.0, 231.0, 37.0),
    ];
    let colour = |t: f64| -> Rgb {
        let t = t.clamp(0.0, 1.0) * 4.0;
        let i = (t.floor() as usize).min(3);
        let f = t - i as f64;
        let (a, b) = (STOPS[i], STOPS[i + 1]);
        (
            (a.0 + f * (b.0 - a.0)) as u8,
            (a.1 + f * (b.1 - a.1)) as u8,
            (a.2 + f * (b.2 - a.2)) as u8,
        )
    };
    for py in 0..size {
        for px in 0..size {
            let (gx, gy) = (px * nx / size, py * ny / size);
            let v = values[gy * nx + gx];
            let col = if v.is_finite() {
                colour((v - lo) / span)
            } else {
                (255, 0, 0)
            };
            c.blend((left + px) as i64, (top + py) as i64, col, 1.0);
        }
    }
    for &(x, y, cls) in points {
        let px = left as f64 + (x - extent[0]) / (extent[1] - extent[0]) * size as f64;
        let py = top as f64 + (extent[3] - y) / (extent[3] - extent[2]) * size as f64;
        let col = match cls {
            0 => (255, 255, 255),
            1 => (0, 0, 0),
            _ => (220, 30, 30),
        };
        for dy in -1..=1 {
            for dx in -1..=1 {
                c.blend(px as i64 + dx, py as i64 + dy, col, 1.0);
            }
        }
    }
    c.text(
        (left + size / 2) as f64,
        20.0,
        title,
        2,
        Anchor::Middle,
        false,
    );
    c.png()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_matches_the_standard_check_value() {
        // The CRC-32/ISO-HDLC check value of "123456789" is 0xCBF43926.
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
    }

    #[test]
    fn png_decodes_to_the_declared_size() {
        let fig = Figure {
            panels: vec![Panel {
                title: "t".into(),
                x_label: "x".into(),
                y_label: "y".into(),
                series: vec![Series {
                    name: "a".into(),
                    points: vec![(0.0, 0.0), (1.0, 1.0)],
                    band: vec![(0.0, -0.1, 0.1), (1.0, 0.9, 1.1)],
                }],
            }],
            panel_width: 120,
            height: 90,
        };
        let png = fig.to_png();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        assert_eq!(u32::from_be_bytes(png[16..20].try_into().unwrap()), 120);
        assert_eq!(u32::from_be_bytes(png[20..24].try_into().unwrap()), 90);
        // Inflate IDAT and check the raster size: 90 rows of (1 + 120 * 3) bytes.
        let len = u32::from_be_bytes(png[33..37].try_into().unwrap()) as usize;
        let mut raw = Vec::new();
        std::io::Read::read_to_end(
            &mut flate2::read::ZlibDecoder::new(&png[41..41 + len]),
            &mut raw,
        )
        .unwrap();
        assert_eq!(raw.len(), 90 * (1 + 120 * 3));
        assert!(fig.to_svg().contains("<polyline"));
    }

    #[test]
    fn ticks_are_nice() {
        let close = |a: Vec<f64>, b: &[f64]| {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-9)
        };
        assert!(close(ticks(0.0, 1.0), &[0.0, 0.2, 0.4, 0.6, 0.8, 1.0]));
        assert!(close(ticks(20.0, 220.0), &[50.0, 100.0, 150.0, 200.0]));
    }
}
