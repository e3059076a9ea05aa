//! Two interleaving half circles ("two moons"), equivalent to scikit-learn's `make_moons`:
//! `n / 2` points (rounded down) on the outer moon `(cos t, sin t)`, the rest on the inner moon
//! `(1 - cos t, 1 - sin t - 0.5)`, `t` evenly spaced on `[0, pi]`, plus Gaussian noise, then
//! shuffled; all draws from the caller's seeded RNG.

use crate::data::dataset::Dataset;
use crate::error::Result;
use crate::rng::{normal, shuffle, Rng};

/// `n` two-moons points `(2,)` with labels 0 (outer) and 1 (inner), noise standard deviation
/// `noise`.
pub fn moons(n: usize, noise: f64, rng: &mut Rng) -> Result<Dataset> {
    let n_out = n / 2;
    let n_in = n - n_out;
    let lin = |k: usize, i: usize| {
        if k > 1 {
            std::f64::consts::PI * i as f64 / (k - 1) as f64
        } else {
            0.0
        }
    };
    let mut pts: Vec<([f64; 2], u32)> = Vec::with_capacity(n);
    for i in 0..n_out {
        let t = lin(n_out, i);
        pts.push(([t.cos(), t.sin()], 0));
    }
    for i in 0..n_in {
        let t = lin(n_in, i);
        pts.push(([1.0 - t.cos(), 1.0 - t.sin() - 0.5], 1));
    }
    for p in &mut pts {
        p.0[0] += noise * normal(rng);
        p.0[1] += noise * normal(rng);
    }
    shuffle(rng, &mut pts);
    let x = pts
        .iter()
        .flat_map(|p| [p.0[0] as f32, p.0[1] as f32])
        .collect();
    let y = pts.iter().map(|p| p.1).collect();
    Dataset::new(x, y, vec![2], 2)
}

/// `n` points uniform on the annulus `r_lo <= |p - centre| <= r_hi` (area-uniform), label 0.
pub fn annulus(n: usize, centre: [f64; 2], r_lo: f64, r_hi: f64, rng: &mut Rng) -> Result<Dataset> {
    let mut x = Vec::with_capacity(2 * n);
    for _ in 0..n {
        let u = crate::rng::uniform(rng);
        let r = (r_lo * r_lo + u * (r_hi * r_hi - r_lo * r_lo)).sqrt();
        let a = 2.0 * std::f64::consts::PI * crate::rng::uniform(rng);
        x.push((centre[0] + r * a.cos()) as f32);
        x.push((centre[1] + r * a.sin()) as f32);
    }
    Dataset::new(x, vec![0; n], vec![2], 2)
}
