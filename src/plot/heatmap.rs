//! Scalar fields over the plane as PNG heatmaps, side by side: each with its axes, a colour
//! bar saying what the colours mean, and the training points on top.

use super::figure::{fmt_tick, ticks};
use super::prim::{Anchor, Rgb};
use super::raster::Canvas;

/// One heatmap panel.
#[derive(Debug, Clone, Copy)]
pub struct Heatmap<'a> {
    /// Row-major `(ny, nx)` values, row 0 at the top (`y = extent[3]`); a value that is not
    /// finite is drawn red.
    pub values: &'a [f64],
    /// Columns of `values`.
    pub nx: usize,
    /// Rows of `values`.
    pub ny: usize,
    /// `[x_min, x_max, y_min, y_max]` of the plane shown.
    pub extent: [f64; 4],
    /// Points drawn on top, `(x, y, class)`: class 0 white, class 1 black, others red.
    pub points: &'a [(f64, f64, u32)],
    /// Title above the panel.
    pub title: &'a str,
    /// What the colour bar measures.
    pub measure: &'a str,
}

/// Pixels: the square field, the margins around it (the right one holds the colour bar, its
/// gap, tick labels and measure), the colour bar's width and its gap from the field.
const FIELD: usize = 400;
const LEFT: usize = 52;
const TOP: usize = 34;
const BOTTOM: usize = 44;
const RIGHT: usize = 96;
const BAR: usize = 14;
const GAP: usize = 12;
const LABEL: f64 = 12.0;
const INK: Rgb = (30, 30, 30);

/// Viridis' five stops, low = dark.
const STOPS: [(f64, f64, f64); 5] = [
    (68.0, 1.0, 84.0),
    (59.0, 82.0, 139.0),
    (33.0, 145.0, 140.0),
    (94.0, 201.0, 98.0),
    (253.0, 231.0, 37.0),
];

fn colour(t: f64) -> Rgb {
    let t = t.clamp(0.0, 1.0) * 4.0;
    let i = (t.floor() as usize).min(3);
    let f = t - i as f64;
    let (a, b) = (STOPS[i], STOPS[i + 1]);
    (
        (a.0 + f * (b.0 - a.0)) as u8,
        (a.1 + f * (b.1 - a.1)) as u8,
        (a.2 + f * (b.2 - a.2)) as u8,
    )
}

/// The panels in one row as a PNG file's bytes.
pub fn heatmaps_png(maps: &[Heatmap<'_>]) -> Vec<u8> {
    let w = LEFT + FIELD + RIGHT;
    let mut c = Canvas::new(w * maps.len().max(1), TOP + FIELD + BOTTOM);
    for (k, m) in maps.iter().enumerate() {
        draw(&mut c, (k * w) as f64, m);
    }
    c.png()
}

/// One panel with its left edge at `x0`.
fn draw(c: &mut Canvas, x0: f64, m: &Heatmap<'_>) {
    let (fx, fy) = (x0 + LEFT as f64, TOP as f64);
    let (lo, hi) = m
        .values
        .iter()
        .copied()
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |a, v| {
            (a.0.min(v), a.1.max(v))
        });
    let (lo, hi) = if lo <= hi { (lo, hi) } else { (0.0, 1.0) };
    let span = (hi - lo).max(1e-12);
    for py in 0..FIELD {
        for px in 0..FIELD {
            let (gx, gy) = (px * m.nx / FIELD, py * m.ny / FIELD);
            let v = m.values.get(gy * m.nx + gx).copied().unwrap_or(f64::NAN);
            let col = if v.is_finite() {
                colour((v - lo) / span)
            } else {
                (255, 0, 0)
            };
            c.blend(fx as i64 + px as i64, fy as i64 + py as i64, col, 1.0);
        }
    }
    points(c, (fx, fy), m);
    axes(c, (fx, fy), m.extent);
    colour_bar(c, fx + (FIELD + GAP) as f64, (lo, hi), m.measure);
    // A title wider than the panel shrinks to fit rather than running into its neighbour.
    let room = (LEFT + FIELD + RIGHT) as f64 - 8.0;
    let size = (15.0 * room / super::font::width(m.title, 15.0).max(1.0)).min(15.0);
    c.text(
        x0 + (LEFT + FIELD + RIGHT) as f64 / 2.0,
        22.0,
        m.title,
        size,
        Anchor::Middle,
        false,
    );
}

fn points(c: &mut Canvas, (fx, fy): (f64, f64), m: &Heatmap<'_>) {
    let e = m.extent;
    for &(x, y, cls) in m.points {
        let px = fx + (x - e[0]) / (e[1] - e[0]) * FIELD as f64;
        let py = fy + (e[3] - y) / (e[3] - e[2]) * FIELD as f64;
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
}

/// The field's frame, ticks and labels: `x1` along the bottom, `x2` up the left side.
fn axes(c: &mut Canvas, (fx, fy): (f64, f64), e: [f64; 4]) {
    let (w, h) = (FIELD as f64, FIELD as f64);
    let frame = [
        (fx, fy),
        (fx + w, fy),
        (fx + w, fy + h),
        (fx, fy + h),
        (fx, fy),
    ];
    for s in frame.windows(2) {
        c.segment(s[0], s[1], INK, 1.0);
    }
    for t in ticks(e[0], e[1]) {
        let x = fx + (t - e[0]) / (e[1] - e[0]) * w;
        c.segment((x, fy + h), (x, fy + h + 4.0), INK, 1.0);
        c.text(x, fy + h + 17.0, &fmt_tick(t), LABEL, Anchor::Middle, false);
    }
    for t in ticks(e[2], e[3]) {
        let y = fy + (e[3] - t) / (e[3] - e[2]) * h;
        c.segment((fx - 4.0, y), (fx, y), INK, 1.0);
        c.text(fx - 6.0, y + 4.0, &fmt_tick(t), LABEL, Anchor::End, false);
    }
    c.text(
        fx + w / 2.0,
        fy + h + 36.0,
        "x1",
        LABEL,
        Anchor::Middle,
        false,
    );
    c.text(fx - 34.0, fy + h / 2.0, "x2", LABEL, Anchor::Middle, true);
}

/// `v` with as many decimals as ticks `step` apart need to differ (the colour bar's range
/// can be narrow: a tenth of a thousandth apart reads `0.0001`, `0.0002`).
fn fmt_at(v: f64, step: f64) -> String {
    if step >= 1.0 || step <= 0.0 || !step.is_finite() {
        return fmt_tick(v);
    }
    let mut d = (-step.log10()).ceil() as usize;
    if ((step * 10f64.powi(d as i32)) - (step * 10f64.powi(d as i32)).round()).abs() > 1e-6 {
        d += 1;
    }
    format!("{v:.d$}", d = d.min(12))
}

/// The colour scale from `lo` (bottom) to `hi` (top) with its ticks, and what it measures.
fn colour_bar(c: &mut Canvas, bx: f64, (lo, hi): (f64, f64), measure: &str) {
    let (top, h) = (TOP as f64, FIELD as f64);
    for py in 0..FIELD {
        let t = 1.0 - (py as f64 + 0.5) / h;
        for px in 0..BAR {
            c.blend(
                bx as i64 + px as i64,
                TOP as i64 + py as i64,
                colour(t),
                1.0,
            );
        }
    }
    let b = BAR as f64;
    let frame = [
        (bx, top),
        (bx + b, top),
        (bx + b, top + h),
        (bx, top + h),
        (bx, top),
    ];
    for s in frame.windows(2) {
        c.segment(s[0], s[1], INK, 1.0);
    }
    if hi > lo {
        let at = ticks(lo, hi);
        let step = at.get(1).map_or(hi - lo, |s| s - at[0]);
        for t in at {
            let y = top + (hi - t) / (hi - lo) * h;
            c.segment((bx + b, y), (bx + b + 4.0, y), INK, 1.0);
            c.text(
                bx + b + 6.0,
                y + 4.0,
                &fmt_at(t, step),
                LABEL,
                Anchor::Start,
                false,
            );
        }
    }
    c.text(
        bx + b + 58.0,
        top + h / 2.0,
        measure,
        LABEL,
        Anchor::Middle,
        true,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_panel_has_its_field_and_a_colour_bar_from_dark_to_yellow() {
        // A 2 x 2 field rising left to right: the low column dark, the high one yellow.
        let values = [0.0, 1.0, 0.0, 1.0];
        let map = Heatmap {
            values: &values,
            nx: 2,
            ny: 2,
            extent: [-1.0, 1.0, -1.0, 1.0],
            points: &[],
            title: "t",
            measure: "m",
        };
        let png = heatmaps_png(&[map, map]);
        let mut dec = png::Decoder::new(std::io::Cursor::new(&png))
            .read_info()
            .unwrap();
        let mut buf = vec![0; dec.output_buffer_size().unwrap()];
        let info = dec.next_frame(&mut buf).unwrap();
        let w = LEFT + FIELD + RIGHT;
        assert_eq!(
            (info.width as usize, info.height as usize),
            (2 * w, TOP + FIELD + BOTTOM)
        );
        let px = |x: usize, y: usize| {
            let i = 3 * (y * info.width as usize + x);
            (buf[i], buf[i + 1], buf[i + 2])
        };
        for panel in 0..2 {
            let x0 = panel * w;
            assert_eq!(px(x0 + LEFT + 50, TOP + 200), (68, 1, 84));
            assert_eq!(px(x0 + LEFT + 350, TOP + 200), (253, 231, 37));
            let bar = x0 + LEFT + FIELD + GAP + BAR / 2;
            assert_eq!(px(bar, TOP + 1), colour(1.0 - 1.5 / FIELD as f64));
            assert_eq!(px(bar, TOP + FIELD - 2), colour(1.5 / FIELD as f64));
        }
    }

    #[test]
    fn narrow_colour_scales_keep_their_ticks_apart() {
        assert_eq!(fmt_at(0.0002, 0.0001), "0.0002");
        assert_eq!(fmt_at(0.25, 0.25), "0.25");
        assert_eq!(fmt_at(0.4, 0.2), "0.4");
        assert_eq!(fmt_at(30.0, 10.0), "30");
    }
}
