//! Resampling an 8-bit image plane to another size exactly as Pillow does, so that a model
//! trained in PyTorch sees the same pixels here as it saw there.
//!
//! torchvision's `Resize` and timm's evaluation transform call Pillow's `Image.resize`, whose
//! result is fixed by integer arithmetic: separable convolution weights computed in `f64`
//! (the filter widened by the scale factor when shrinking, so every source pixel counts),
//! normalised to sum one, rounded to 22-bit fixed point; a horizontal pass rounded to 8 bits,
//! then a vertical pass over the rows it needs. Crates that resample in floating point (the
//! `resize` crate, which this module replaced) differ from Pillow by one level on about a fifth
//! of the pixels, enough to move a pretrained model's scores; this follows Pillow 13's
//! `Resample.c` step by step and matches it bit for bit (tests/alkit/timm.rs compares with
//! what Pillow wrote).

use serde::{Deserialize, Serialize};

/// The resampling filter of a resize, by torchvision's (Pillow's) names; each is widened by
/// the scale factor when shrinking, as Pillow does, so every source pixel counts (see
/// [`resample`](crate::data::resample)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Filter {
    /// The triangle (tent) filter, PIL's `BILINEAR`.
    Bilinear,
    /// The cubic convolution with `a = -0.5` (Catmull-Rom), PIL's `BICUBIC`.
    Bicubic,
    /// Lanczos with three lobes, PIL's `LANCZOS`.
    Lanczos,
}

impl Filter {
    /// The filter of a torchvision/timm interpolation name (`bilinear`, `bicubic`, `lanczos`).
    pub fn from_name(name: &str) -> Option<Filter> {
        match name {
            "bilinear" => Some(Filter::Bilinear),
            "bicubic" => Some(Filter::Bicubic),
            "lanczos" => Some(Filter::Lanczos),
            _ => None,
        }
    }
}

/// Fixed-point precision of the weights: `32 - 8 - 2` bits, Pillow's for 8-bit images.
const PRECISION_BITS: u32 = 22;

impl Filter {
    /// Half-width of the kernel at scale 1.
    fn support(self) -> f64 {
        match self {
            Filter::Bilinear => 1.0,
            Filter::Bicubic => 2.0,
            Filter::Lanczos => 3.0,
        }
    }

    /// The kernel at `x` (Pillow's `bilinear_filter`, `bicubic_filter` with `a = -0.5`,
    /// `lanczos_filter`, each with its own bounds).
    fn weight(self, x: f64) -> f64 {
        match self {
            Filter::Bilinear => (1.0 - x.abs()).max(0.0),
            Filter::Bicubic => {
                const A: f64 = -0.5;
                let x = x.abs();
                if x < 1.0 {
                    ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
                } else if x < 2.0 {
                    (((x - 5.0) * x + 8.0) * x - 4.0) * A
                } else {
                    0.0
                }
            }
            Filter::Lanczos => {
                if (-3.0..3.0).contains(&x) {
                    sinc(x) * sinc(x / 3.0)
                } else {
                    0.0
                }
            }
        }
    }
}

fn sinc(x: f64) -> f64 {
    if x == 0.0 {
        1.0
    } else {
        let x = x * std::f64::consts::PI;
        x.sin() / x
    }
}

/// Each output position's first source index and fixed-point weights (Pillow's
/// `precompute_coeffs` and `normalize_coeffs_8bpc` for the whole input range).
struct Taps {
    first: Vec<usize>,
    weights: Vec<Vec<i32>>,
}

fn taps(input: usize, output: usize, filter: Filter) -> Taps {
    let scale = input as f64 / output as f64;
    let filterscale = scale.max(1.0);
    let support = filter.support() * filterscale;
    let ss = 1.0 / filterscale;
    let mut first = Vec::with_capacity(output);
    let mut weights = Vec::with_capacity(output);
    for xx in 0..output {
        let center = (xx as f64 + 0.5) * scale;
        // C's `(int)` truncates toward zero; both bounds are clamped to the input.
        let xmin = ((center - support + 0.5) as i64).max(0) as usize;
        let xmax = ((center + support + 0.5) as i64).clamp(0, input as i64) as usize;
        let k: Vec<f64> = (xmin..xmax.max(xmin))
            .map(|x| filter.weight((x as f64 - center + 0.5) * ss))
            .collect();
        let total: f64 = k.iter().sum();
        let fixed = k
            .iter()
            .map(|&w| {
                let w = if total != 0.0 { w / total } else { w };
                let v = w * f64::from(1u32 << PRECISION_BITS);
                if v < 0.0 {
                    (v - 0.5) as i32
                } else {
                    (v + 0.5) as i32
                }
            })
            .collect();
        first.push(xmin);
        weights.push(fixed);
    }
    Taps { first, weights }
}

/// Pillow's `clip8`: the rounded fixed-point sum as an 8-bit value.
fn clip8(sum: i64) -> u8 {
    (sum >> PRECISION_BITS).clamp(0, 255) as u8
}

/// Rows `first_row..` of `src` (rows of `w` values) resampled horizontally with `taps`, one
/// output row per input row, `rows` of them.
fn horizontal(src: &[u8], w: usize, first_row: usize, rows: usize, taps: &Taps) -> Vec<u8> {
    let half = 1i64 << (PRECISION_BITS - 1);
    let mut out = Vec::with_capacity(rows * taps.first.len());
    for y in first_row..first_row + rows {
        let row = &src[y * w..(y + 1) * w];
        for (first, k) in taps.first.iter().zip(&taps.weights) {
            let sum = k
                .iter()
                .zip(&row[*first..])
                .fold(half, |s, (&k, &p)| s + i64::from(k) * i64::from(p));
            out.push(clip8(sum));
        }
    }
    out
}

/// `src` (rows of `cols` values, its row 0 being source row `row0`) resampled vertically with
/// `taps`: each output row accumulated a whole source row at a time (exact integer sums, so
/// the order is free; contiguous rows vectorise where a column at a time does not), in `i32`
/// as Pillow sums when no sum can leave its range (always for normalised weights), else in
/// `i64`.
fn vertical(src: &[u8], cols: usize, row0: usize, taps: &Taps) -> Vec<u8> {
    let half = 1i64 << (PRECISION_BITS - 1);
    let mut out = Vec::with_capacity(taps.first.len() * cols);
    let (mut narrow, mut wide) = (vec![0i32; cols], vec![0i64; cols]);
    for (first, k) in taps.first.iter().zip(&taps.weights) {
        let rows = k.iter().enumerate().map(|(j, &kj)| {
            (
                kj,
                &src[(first - row0 + j) * cols..(first - row0 + j + 1) * cols],
            )
        });
        let reach: i64 = half + 255 * k.iter().map(|&kj| i64::from(kj).abs()).sum::<i64>();
        if reach <= i64::from(i32::MAX) {
            narrow.fill(half as i32);
            for (kj, row) in rows {
                for (a, &p) in narrow.iter_mut().zip(row) {
                    *a += kj * i32::from(p);
                }
            }
            out.extend(narrow.iter().map(|&s| clip8(i64::from(s))));
        } else {
            wide.fill(half);
            for (kj, row) in rows {
                for (a, &p) in wide.iter_mut().zip(row) {
                    *a += i64::from(kj) * i64::from(p);
                }
            }
            out.extend(wide.iter().map(|&s| clip8(s)));
        }
    }
    out
}

/// One plane `(h, w)` resampled to `(out_h, out_w)` with `filter`, as Pillow 13's
/// `Image.resize((out_w, out_h), filter)` does it: horizontally first (over only the rows the
/// vertical pass reads), unless the height shrinks by more than twice as many pixels as the
/// width, when the vertical pass comes first. (Pillow 12 and earlier always went horizontally
/// first; where the order differs, a pixel may differ by one level.) Every size must be
/// positive.
pub(crate) fn resample(
    plane: &[u8],
    (h, w): (usize, usize),
    (out_h, out_w): (usize, usize),
    filter: Filter,
) -> Vec<u8> {
    debug_assert_eq!(plane.len(), h * w);
    let (need_h, need_v) = (out_w != w, out_h != h);
    let shrink_h = h as i64 - out_h as i64;
    let vertical_first = shrink_h > 0 && shrink_h > (w as i64 - out_w as i64) * 2;
    let vert = taps(h, out_h, filter);
    if vertical_first {
        let tall = vertical(plane, w, 0, &vert);
        return if need_h {
            horizontal(&tall, w, 0, out_h, &taps(w, out_w, filter))
        } else {
            tall
        };
    }
    // The rows the vertical pass reads: only they are resampled horizontally.
    let row0 = vert.first.first().copied().unwrap_or(0);
    let row1 = vert
        .first
        .iter()
        .zip(&vert.weights)
        .map(|(f, k)| f + k.len())
        .max()
        .unwrap_or(0)
        .max(row0);
    let (rows, cols) = if need_h {
        let horiz = taps(w, out_w, filter);
        (horizontal(plane, w, row0, row1 - row0, &horiz), out_w)
    } else {
        (plane[row0 * w..row1 * w].to_vec(), w)
    };
    if need_v {
        vertical(&rows, cols, row0, &vert)
    } else {
        rows
    }
}
