//! Per-row helpers written so their loops vectorise: per-channel [`Partials`] and
//! [`block_sums`] (accumulated in `T`, added in `f64`), the window select [`pick`] and the
//! dense-plus-routed row writer [`write_row`].

use super::super::elem::Elem;

/// `K` per-channel sums accumulated in `T` over a few windows at a time and added into `f64`
/// (vectorised, and accurate).
pub(super) struct Partials<T, const K: usize> {
    part: [Vec<T>; K],
    total: [Vec<f64>; K],
    windows: usize,
}

impl<T: Elem, const K: usize> Partials<T, K> {
    /// Windows summed in `T` before a flush into `f64`.
    const FLUSH: usize = 16;
    pub(super) fn new(c: usize) -> Self {
        Self {
            part: std::array::from_fn(|_| vec![T::ZERO; c]),
            total: std::array::from_fn(|_| vec![0.0; c]),
            windows: 0,
        }
    }
    /// The `T` partial sums, for the next window.
    #[inline(always)]
    pub(super) fn next(&mut self) -> &mut [Vec<T>; K] {
        self.windows += 1;
        if self.windows > Self::FLUSH {
            self.flush();
            self.windows = 1;
        }
        &mut self.part
    }
    #[inline(always)]
    fn flush(&mut self) {
        for (t, p) in self.total.iter_mut().zip(self.part.iter_mut()) {
            for (a, b) in t.iter_mut().zip(p.iter_mut()) {
                *a += b.to_f64();
                *b = T::ZERO;
            }
        }
    }
    pub(super) fn finish(mut self) -> [Vec<f64>; K] {
        self.flush();
        self.total
    }
}

/// Value `k` of a window's four (`0..4`; [`INACTIVE`](super::dims::INACTIVE) gives the last), as a select the
/// compiler vectorises. Callers read the four values from local slices cut to the loop's
/// length: through a reference to an array of slices the loop stayed scalar.
#[inline(always)]
pub(super) fn pick<T: Elem>(k: u8, [a, b, c, d]: [T; 4]) -> T {
    let (k, one) = (T::from_u8(k), T::ONE);
    if k < one {
        a
    } else if k < one + one {
        b
    } else if k < one + one + one {
        c
    } else {
        d
    }
}

/// The sparse term of one row of a window: `k g` in the channels whose argmax code `m` is this
/// row's `j`.
#[derive(Clone, Copy)]
pub(super) struct Routed<'a, T> {
    pub(super) m: &'a [u8],
    pub(super) j: u8,
    pub(super) k: &'a [T],
    pub(super) g: &'a [T],
}

/// One row of a dense output: `o = (y - mu) kx + k0 [+ gr kg] [+ routed]`, per channel. Every
/// slice is cut to `o`'s length here, so the compiler can drop the bounds checks and vectorise
/// the loop (indexing slices whose lengths it cannot relate to the loop bound kept these loops
/// scalar).
#[inline(always)]
pub(super) fn write_row<T: Elem>(
    o: &mut [T],
    yr: &[T],
    [mu, kx, k0]: [&[T]; 3],
    dense: Option<(&[T], &[T])>,
    routed: Option<Routed<'_, T>>,
) {
    let n = o.len();
    let (yr, mu, kx, k0) = (&yr[..n], &mu[..n], &kx[..n], &k0[..n]);
    match (dense, routed) {
        (Some((gr, kg)), Some(Routed { m, j, k: kr, g })) => {
            let (gr, kg, m, kr, g) = (&gr[..n], &kg[..n], &m[..n], &kr[..n], &g[..n]);
            for ch in 0..n {
                let r = if m[ch] == j { kr[ch] * g[ch] } else { T::ZERO };
                o[ch] = gr[ch] * kg[ch] + ((yr[ch] - mu[ch]) * kx[ch] + k0[ch]) + r;
            }
        }
        (Some((gr, kg)), None) => {
            let (gr, kg) = (&gr[..n], &kg[..n]);
            for ch in 0..n {
                o[ch] = gr[ch] * kg[ch] + ((yr[ch] - mu[ch]) * kx[ch] + k0[ch]);
            }
        }
        (None, Some(Routed { m, j, k: kr, g })) => {
            let (m, kr, g) = (&m[..n], &kr[..n], &g[..n]);
            for ch in 0..n {
                let r = if m[ch] == j { kr[ch] * g[ch] } else { T::ZERO };
                o[ch] = (yr[ch] - mu[ch]) * kx[ch] + k0[ch] + r;
            }
        }
        (None, None) => {
            for ch in 0..n {
                o[ch] = (yr[ch] - mu[ch]) * kx[ch] + k0[ch];
            }
        }
    }
}

/// Per-channel sums over the rows of `y (N, c)`: `add(partial, row)` accumulates one row into
/// a `T` partial sum; partials of 64 rows are added in `f64` (vectorised, and accurate).
#[inline(always)]
pub(super) fn block_sums<T: Elem>(
    y: &[T],
    c: usize,
    mut add: impl FnMut(&mut [T], &[T]),
) -> Vec<f64> {
    let mut total = vec![0f64; c];
    let mut part = vec![T::ZERO; c];
    for rows in y.chunks(64 * c) {
        part.iter_mut().for_each(|p| *p = T::ZERO);
        for row in rows.chunks_exact(c) {
            add(&mut part, row);
        }
        for (t, p) in total.iter_mut().zip(&part) {
            *t += p.to_f64();
        }
    }
    total
}
