//! A figure of side-by-side panels of lines with shaded bands, and its layout into drawing
//! primitives (axes, ticks, labels, legend) that the SVG and PNG backends share.

use super::font;
use super::prim::{Anchor, Prim, Rgb};

/// Font sizes in pixels per em: tick labels, axis labels and legend entries; panel titles.
const LABEL: f64 = 12.0;
const TITLE: f64 = 15.0;

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
    /// A logarithmic y axis (decades; values at or below 0 drawn at the bottom), for counts
    /// where one spike would flatten the rest.
    pub log_y: bool,
}

/// Panels in rows.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    /// The panels, left to right, then row by row.
    pub panels: Vec<Panel>,
    /// Width of one panel in pixels.
    pub panel_width: u32,
    /// Height of one row of panels in pixels.
    pub height: u32,
    /// Panels per row; 0: all in one row.
    pub columns: usize,
}

/// The tab10 palette, then its lighter tab20 partners: twenty lines before a colour repeats.
const PALETTE: [Rgb; 20] = [
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
    (174, 199, 232),
    (255, 187, 120),
    (152, 223, 138),
    (255, 152, 150),
    (197, 176, 213),
    (196, 156, 148),
    (247, 182, 210),
    (199, 199, 199),
    (219, 219, 141),
    (158, 218, 229),
];

/// The legend box's corner inside `(x0, y0, x1, y1)` that covers the fewest of `pts` (the
/// drawn points and band edges, in pixels): top-left, top-right, bottom-right, bottom-left,
/// the first of equals. Returns the box's top-left corner.
fn legend_corner(
    (x0, y0, x1, y1): (f64, f64, f64, f64),
    (w, h): (f64, f64),
    pts: &[(f64, f64)],
) -> (f64, f64) {
    let corners = [
        (x0 + 3.0, y0 + 3.0),
        (x1 - 3.0 - w, y0 + 3.0),
        (x1 - 3.0 - w, y1 - 3.0 - h),
        (x0 + 3.0, y1 - 3.0 - h),
    ];
    let covered = |&(lx, ly): &(f64, f64)| {
        pts.iter()
            .filter(|p| p.0 >= lx && p.0 <= lx + w && p.1 >= ly && p.1 <= ly + h)
            .count()
    };
    corners
        .iter()
        .enumerate()
        .min_by_key(|(i, c)| (covered(c), *i))
        .map_or(corners[0], |(_, c)| *c)
}

/// "Nice" tick positions covering `[lo, hi]`.
pub(super) fn ticks(lo: f64, hi: f64) -> Vec<f64> {
    let span = (hi - lo).max(1e-12);
    let raw = span / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| span / s <= 6.0)
        .unwrap_or(10.0 * mag);
    if !step.is_finite() || step <= lo.abs().max(hi.abs()) * 1e-12 {
        // A range too narrow for its magnitude: one tick, not a step that never advances.
        return vec![lo];
    }
    let first = (lo / step).ceil() * step;
    (0..)
        .map(|i| first + i as f64 * step)
        .take_while(|v| *v <= hi + step * 1e-9)
        .take(64)
        .collect()
}

pub(super) fn fmt_tick(v: f64) -> String {
    if v.abs() >= 1000.0 || v == v.trunc() {
        format!("{v:.0}")
    } else if (v * 10.0 - (v * 10.0).round()).abs() < 1e-9 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

impl Figure {
    /// Panels per row, as laid out.
    fn cols(&self) -> usize {
        match self.columns {
            0 => self.panels.len().max(1),
            c => c.min(self.panels.len().max(1)),
        }
    }

    fn width(&self) -> u32 {
        self.panel_width * self.cols() as u32
    }

    fn total_height(&self) -> u32 {
        self.height * self.panels.len().max(1).div_ceil(self.cols()) as u32
    }

    /// The figure as drawing primitives, back to front.
    pub(super) fn layout(&self) -> Vec<Prim> {
        let mut out = Vec::new();
        for (pi, panel) in self.panels.iter().enumerate() {
            let frame = self.frame(pi, panel);
            frame.axes(panel, &mut out);
            frame.lines_and_legend(panel, &mut out);
        }
        out
    }

    /// Where panel `pi` is drawn and the data ranges its axes cover.
    fn frame(&self, pi: usize, panel: &Panel) -> Frame {
        let (pw, h) = (f64::from(self.panel_width), f64::from(self.height));
        let (ml, mr, mt, mb) = (64.0, 16.0, 30.0, 48.0);
        let cols = self.cols();
        let (col, top) = ((pi % cols) as f64, (pi / cols) as f64 * h);
        let points = || panel.series.iter().flat_map(|s| s.points.iter());
        let (mut xl, mut xh) = range(points().map(|p| p.0));
        if !xl.is_finite() {
            (xl, xh) = (0.0, 1.0);
        }
        if xh - xl < 1e-12 {
            (xl, xh) = (xl - 0.5, xh + 0.5);
        }
        let ys = panel.series.iter().flat_map(|s| {
            s.points
                .iter()
                .map(|p| p.1)
                .chain(s.band.iter().flat_map(|b| [b.1, b.2]))
        });
        let (mut yl, mut yh) = if panel.log_y {
            let (lo, hi) = range(ys.filter(|v| *v > 0.0).map(f64::log10));
            (lo.floor(), hi.ceil().max(lo.floor() + 1.0))
        } else {
            range(ys)
        };
        if !yl.is_finite() {
            (yl, yh) = (0.0, 1.0);
        }
        let pad = ((yh - yl) * 0.05).max(1e-6);
        Frame {
            col,
            top,
            width: pw,
            height: h,
            x: (col * pw + ml, (col + 1.0) * pw - mr),
            y: (top + mt, top + h - mb),
            xs: (xl, xh),
            ys: (yl - pad, yh + pad),
            floor: yl - pad,
            log: panel.log_y,
        }
    }
    /// The figure as an SVG document.
    pub fn to_svg(&self) -> String {
        super::svg::render(self.width(), self.total_height(), &self.layout())
    }

    /// The figure as a PNG file's bytes.
    pub fn to_png(&self) -> Vec<u8> {
        super::raster::render(self.width(), self.total_height(), &self.layout())
    }

    /// Writes `dir/STEM.svg` and `dir/STEM.png`, each atomically.
    pub fn save(&self, dir: &std::path::Path, stem: &str) -> crate::Result<()> {
        crate::fsutil::write_atomic(&dir.join(format!("{stem}.svg")), self.to_svg().as_bytes())?;
        crate::fsutil::write_atomic(&dir.join(format!("{stem}.png")), &self.to_png())
    }
}

/// The smallest and largest finite values (`(inf, -inf)` when none is).
fn range(v: impl Iterator<Item = f64>) -> (f64, f64) {
    v.filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |a, v| {
            (a.0.min(v), a.1.max(v))
        })
}

/// A tick label on a logarithmic axis: the decade `10^k` written out where short.
fn fmt_decade(k: f64) -> String {
    match k as i64 {
        k @ 0..=5 => format!("{}", 10u64.pow(k as u32)),
        k @ -4..=-1 => format!("{:.*}", (-k) as usize, 10f64.powi(k as i32)),
        k => format!("1e{k}"),
    }
}

/// One panel's place on the page and the ranges its axes cover (a log axis's in decades).
struct Frame {
    col: f64,
    top: f64,
    width: f64,
    height: f64,
    /// The axes' left and right edge, in pixels.
    x: (f64, f64),
    /// The axes' top and bottom edge, in pixels.
    y: (f64, f64),
    xs: (f64, f64),
    ys: (f64, f64),
    /// On a log axis, where values at or below 0 go: the axis's bottom edge.
    floor: f64,
    log: bool,
}

impl Frame {
    fn sx(&self, v: f64) -> f64 {
        self.x.0 + (v - self.xs.0) / (self.xs.1 - self.xs.0) * (self.x.1 - self.x.0)
    }

    /// A data value's pixel row (on a log axis, its decade's).
    fn sy(&self, v: f64) -> f64 {
        let v = match self.log {
            true if v > 0.0 => v.log10(),
            true => self.floor,
            false => v,
        };
        self.scale_y(v)
    }

    /// An axis value's pixel row.
    fn scale_y(&self, v: f64) -> f64 {
        self.y.1 - (v - self.ys.0) / (self.ys.1 - self.ys.0) * (self.y.1 - self.y.0)
    }

    /// The y ticks as `(axis value, label)`.
    fn y_ticks(&self) -> Vec<(f64, String)> {
        if self.log {
            let (lo, hi) = (self.ys.0.ceil() as i64, self.ys.1.floor() as i64);
            (lo..=hi)
                .map(|k| (k as f64, fmt_decade(k as f64)))
                .collect()
        } else {
            ticks(self.ys.0, self.ys.1)
                .into_iter()
                .map(|t| (t, fmt_tick(t)))
                .collect()
        }
    }

    /// Grid, ticks, frame, title and axis labels.
    fn axes(&self, panel: &Panel, out: &mut Vec<Prim>) {
        let ((x0, x1), (y0, y1)) = (self.x, self.y);
        let text =
            |x: f64, y: f64, s: String, size: f64, anchor: Anchor, vertical: bool| Prim::Text {
                x,
                y,
                s,
                size,
                anchor,
                vertical,
            };
        let grid = |pts: Vec<(f64, f64)>| Prim::Line {
            pts,
            color: (225, 225, 225),
            width: 1.0,
        };
        for (t, label) in self.y_ticks() {
            let y = self.scale_y(t);
            out.push(grid(vec![(x0, y), (x1, y)]));
            out.push(text(x0 - 6.0, y + 4.0, label, LABEL, Anchor::End, false));
        }
        for t in ticks(self.xs.0, self.xs.1) {
            let x = self.sx(t);
            out.push(grid(vec![(x, y0), (x, y1)]));
            out.push(text(
                x,
                y1 + 16.0,
                fmt_tick(t),
                LABEL,
                Anchor::Middle,
                false,
            ));
        }
        out.push(Prim::Line {
            pts: vec![(x0, y0), (x0, y1), (x1, y1), (x1, y0), (x0, y0)],
            color: (60, 60, 60),
            width: 1.0,
        });
        let (mid, top, h) = ((x0 + x1) / 2.0, self.top, self.height);
        out.push(text(
            mid,
            top + 18.0,
            panel.title.clone(),
            TITLE,
            Anchor::Middle,
            false,
        ));
        out.push(text(
            mid,
            top + h - 12.0,
            panel.x_label.clone(),
            LABEL,
            Anchor::Middle,
            false,
        ));
        let y_label = panel.y_label.clone() + if self.log { " (log scale)" } else { "" };
        let lx = self.col * self.width + 14.0;
        out.push(text(
            lx,
            (y0 + y1) / 2.0,
            y_label,
            LABEL,
            Anchor::Middle,
            true,
        ));
    }

    /// The lines and band edges in pixels, sampled along each segment (a legend must not hide
    /// a line that passes between two of its points).
    fn drawn(&self, panel: &Panel) -> Vec<(f64, f64)> {
        let lines = panel.series.iter().flat_map(|s| {
            let low = s.band.iter().map(|b| (b.0, b.1)).collect::<Vec<_>>();
            let high = s.band.iter().map(|b| (b.0, b.2)).collect::<Vec<_>>();
            [s.points.clone(), low, high]
        });
        lines
            .flat_map(|line| {
                let px: Vec<(f64, f64)> = line
                    .iter()
                    .filter(|p| p.1.is_finite())
                    .map(|p| (self.sx(p.0), self.sy(p.1)))
                    .collect();
                let mut along: Vec<(f64, f64)> = px
                    .windows(2)
                    .flat_map(|w| {
                        (0..16).map(move |k| {
                            let t = f64::from(k) / 16.0;
                            (
                                w[0].0 + t * (w[1].0 - w[0].0),
                                w[0].1 + t * (w[1].1 - w[0].1),
                            )
                        })
                    })
                    .collect();
                along.extend(px.last());
                along
            })
            .collect()
    }

    /// Each series' band and line, and the legend in the corner they cover least (its box
    /// drawn under the entries, over the grid and bands).
    fn lines_and_legend(&self, panel: &Panel, out: &mut Vec<Prim>) {
        if panel.series.is_empty() {
            return;
        }
        // The key (5..23), a gap, the longest name from 27, and a margin.
        let names = panel.series.iter().map(|s| font::width(&s.name, LABEL));
        let legend_w = 35.0 + names.fold(0.0, f64::max);
        let legend_h = 8.0 + 14.0 * panel.series.len() as f64;
        let bounds = (self.x.0, self.y.0, self.x.1, self.y.1);
        let (lx, ly) = legend_corner(bounds, (legend_w, legend_h), &self.drawn(panel));
        let mut entries = Vec::new();
        for (si, s) in panel.series.iter().enumerate() {
            let color = PALETTE[si % PALETTE.len()];
            if !s.band.is_empty() {
                let mut pts: Vec<(f64, f64)> = s
                    .band
                    .iter()
                    .map(|b| (self.sx(b.0), self.sy(b.2)))
                    .collect();
                pts.extend(s.band.iter().rev().map(|b| (self.sx(b.0), self.sy(b.1))));
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
                .map(|p| (self.sx(p.0), self.sy(p.1)))
                .collect();
            out.push(Prim::Line {
                pts,
                color,
                width: 2.0,
            });
            let ey = ly + 11.0 + 14.0 * si as f64;
            entries.push(Prim::Line {
                pts: vec![(lx + 5.0, ey - 4.0), (lx + 23.0, ey - 4.0)],
                color,
                width: 2.0,
            });
            entries.push(Prim::Text {
                x: lx + 27.0,
                y: ey,
                s: s.name.clone(),
                size: LABEL,
                anchor: Anchor::Start,
                vertical: false,
            });
        }
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

#[cfg(test)]
mod tests {
    use super::super::raster::Canvas;
    use super::*;

    #[test]
    fn ticks_are_nice() {
        let close = |a: Vec<f64>, b: &[f64]| {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-9)
        };
        assert!(close(ticks(0.0, 1.0), &[0.0, 0.2, 0.4, 0.6, 0.8, 1.0]));
        assert!(close(ticks(20.0, 220.0), &[50.0, 100.0, 150.0, 200.0]));
        assert_eq!(ticks(1e12, 1e12), [1e12]);
    }

    fn figure() -> Figure {
        Figure {
            panels: vec![Panel {
                title: "t".into(),
                x_label: "x".into(),
                y_label: "y".into(),
                series: vec![Series {
                    name: "a".into(),
                    points: vec![(0.0, 0.0), (1.0, 1.0)],
                    band: vec![(0.0, -0.1, 0.1), (1.0, 0.9, 1.1)],
                }],
                log_y: false,
            }],
            panel_width: 120,
            height: 90,
            columns: 0,
        }
    }

    #[test]
    fn the_legend_takes_the_corner_it_covers_least_and_panels_wrap_into_rows() {
        let axes = (0.0, 0.0, 100.0, 100.0);
        let top_left: Vec<(f64, f64)> = (0..10).map(|i| (5.0 + f64::from(i), 5.0)).collect();
        assert_eq!(legend_corner(axes, (30.0, 20.0), &[]), (3.0, 3.0));
        assert_eq!(legend_corner(axes, (30.0, 20.0), &top_left), (67.0, 3.0));
        let mut both = top_left.clone();
        both.extend((0..10).map(|i| (80.0 + f64::from(i), 10.0)));
        assert_eq!(legend_corner(axes, (30.0, 20.0), &both), (67.0, 77.0));
        // A line crossing the top-left corner between two far points still counts there.
        let mut fig = figure();
        fig.panels[0].series[0].points = vec![(0.0, 1.0), (1.0, 0.9), (2.0, 0.0)];
        fig.panels[0].series[0].band.clear();
        fig.panel_width = 400;
        fig.height = 300;
        let legend_at = |fig: &Figure| {
            fig.layout()
                .iter()
                .find_map(|p| match p {
                    Prim::Text { s, x, y, .. } if s == "a" => Some((*x, *y)),
                    _ => None,
                })
                .unwrap()
        };
        // Down from the top-left to the bottom-right: the line crosses the top-left box
        // between its first two points, so the legend goes top-right.
        let (x, y) = legend_at(&fig);
        assert!(x > 200.0 && y < 150.0, "{x} {y}");
        // Along the top, then down near the right edge: only the bottom-left corner is free.
        fig.panels[0].series[0].points = vec![(0.0, 1.0), (1.9, 1.0), (1.9, 0.0), (2.0, 0.0)];
        let (x, y) = legend_at(&fig);
        assert!(x < 200.0 && y > 150.0, "{x} {y}");
        let mut thirteen = figure();
        thirteen.panels = vec![thirteen.panels[0].clone(); 13];
        thirteen.columns = 4;
        assert_eq!((thirteen.width(), thirteen.total_height()), (480, 360));
        thirteen.columns = 0;
        assert_eq!((thirteen.width(), thirteen.total_height()), (1560, 90));
    }

    #[test]
    fn a_log_axis_has_a_tick_per_decade_and_draws_zeros_on_its_floor() {
        let mut fig = figure();
        fig.panel_width = 400;
        fig.height = 300;
        fig.panels[0].log_y = true;
        fig.panels[0].series[0].points = vec![(0.0, 0.004), (1.0, 0.5), (2.0, 0.0)];
        fig.panels[0].series[0].band.clear();
        let prims = fig.layout();
        let labels: Vec<&str> = prims
            .iter()
            .filter_map(|p| match p {
                Prim::Text { s, anchor, .. } if *anchor == Anchor::End => Some(s.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(labels, ["0.001", "0.01", "0.1", "1"]);
        let line = prims
            .iter()
            .find_map(|p| match p {
                Prim::Line { pts, width, .. } if *width == 2.0 => Some(pts.clone()),
                _ => None,
            })
            .unwrap();
        // 0.004 between the 0.001 and 0.01 grid lines, 0.5 just under 1, and 0 on the frame.
        let row = |label: &str| {
            prims
                .iter()
                .find_map(|p| match p {
                    Prim::Text { s, y, .. } if s == label => Some(y - 4.0),
                    _ => None,
                })
                .unwrap()
        };
        let (d3, d2, d0) = (row("0.001"), row("0.01"), row("1"));
        let frac = (d3 - line[0].1) / (d3 - d2);
        assert!((frac - (0.004f64.log10() + 3.0)).abs() < 1e-9, "{frac}");
        assert!(line[1].1 > d0 && line[1].1 < row("0.1"));
        assert!((line[2].1 - 270.0 + 18.0).abs() < 1e-9, "{}", line[2].1);
    }

    /// The raster backend's PNG holds exactly the pixels it drew (tested here, where a
    /// figure's layout is at hand, so that `raster` needs nothing of `figure`).
    #[test]
    fn png_decodes_to_the_drawn_pixels() {
        let fig = figure();
        let mut c = Canvas::new(120, 90);
        let prims = fig.layout();
        for prim in &prims {
            if let Prim::Line { pts, color, width } = prim {
                for seg in pts.windows(2) {
                    c.segment(seg[0], seg[1], *color, *width);
                }
            }
        }
        c.text(10.0, 40.0, "ab", 12.0, Anchor::Start, false);
        c.text(60.0, 80.0, "cd", 12.0, Anchor::Middle, true);
        let png = c.png();
        let mut dec = png::Decoder::new(std::io::Cursor::new(&png))
            .read_info()
            .unwrap();
        let mut buf = vec![0; dec.output_buffer_size().unwrap()];
        let info = dec.next_frame(&mut buf).unwrap();
        assert_eq!((info.width, info.height), (120, 90));
        assert_eq!(info.color_type, png::ColorType::Rgb);
        assert_eq!(&buf[..info.buffer_size()], &c.rgb()[..]);
        assert!(fig.to_png().starts_with(b"\x89PNG\r\n\x1a\n"));
        assert!(fig.to_svg().contains("<polyline"));
    }
}
