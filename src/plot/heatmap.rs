//! A scalar field over the plane as a PNG heatmap, with the training points on top.

use super::raster::Canvas;
use super::{Anchor, Rgb};

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
        15.0,
        Anchor::Middle,
        false,
    );
    c.png()
}
