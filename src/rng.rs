//! Seeded randomness.
//!
//! Candle cannot seed its CPU generator, so every random draw alkit makes (seed labels, weight
//! initialisation, batch order, dropout masks, selection) comes from a ChaCha8 stream derived
//! from the run's seed, a [`Purpose`] and the cycle number. A cycle's randomness therefore does
//! not depend on what earlier cycles drew, which is what makes an interrupted run resume to the
//! identical curve: the state only needs the seed.

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The generator alkit uses everywhere.
pub type Rng = ChaCha8Rng;

/// What a random stream is used for; each gets its own ChaCha stream id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
pub enum Purpose {
    /// Choosing the initial labeled set.
    SeedSet = 1,
    /// Weight initialisation.
    Init = 2,
    /// Mini-batch order and dropout masks while training.
    Train = 3,
    /// Batch selection (random or stochastic modes).
    Select = 4,
    /// Anything a benchmark or tool draws.
    Tool = 5,
    /// Input perturbations of scorers (REGrad*, perturb-x) and weight perturbations.
    Perturb = 6,
    /// The random subset of the pool a round scores (`--subsample`).
    Subsample = 7,
    /// The items a labeling page serves while the next model trains, when the last round
    /// ranked none (random picks, joint batch criteria, a server just started).
    Reserve = 8,
    /// The stop set a curve's stopping rules read each round's predictions on.
    StopSet = 9,
    /// The class order a class-balanced round breaks its quota ties by.
    Balance = 10,
}

/// The stream for `(seed, purpose, cycle)`.
pub fn stream(seed: u64, purpose: Purpose, cycle: u64) -> Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(((purpose as u64) << 32) | (cycle & 0xffff_ffff));
    rng
}

/// Uniform `f64` in `[0, 1)` with 53 random bits: the acquisition crate's one draw
/// ([`alkit_acquisition::linalg::unit`]), so the library and the selectors draw alike.
pub fn uniform(rng: &mut dyn RngCore) -> f64 {
    alkit_acquisition::linalg::unit(rng)
}

/// Standard normal draw (Box-Muller; one value per call, the pair's second half discarded so
/// that the stream position depends only on the number of calls): the acquisition crate's
/// ([`alkit_acquisition::linalg::normal`]), so that the kernel selectors' sketches draw alike.
pub fn normal(rng: &mut dyn RngCore) -> f64 {
    alkit_acquisition::linalg::normal(rng)
}

/// Uniform integer in `0..bound`, `bound > 0`, unbiased.
pub fn below(rng: &mut dyn RngCore, bound: usize) -> usize {
    let bound = bound as u64;
    let zone = u64::MAX - (u64::MAX % bound);
    loop {
        let v = rng.next_u64();
        if v < zone {
            return (v % bound) as usize;
        }
    }
}

/// Shuffles in place (Fisher-Yates).
pub fn shuffle<T>(rng: &mut dyn RngCore, items: &mut [T]) {
    for i in (1..items.len()).rev() {
        let j = below(rng, i + 1);
        items.swap(i, j);
    }
}

/// Standard normal `f64` CPU tensor of `shape` from seed `seed` (unit tests' inputs).
#[cfg(test)]
pub(crate) fn randn_f64(shape: &[usize], seed: u64) -> candle_core::Tensor {
    let mut rng = <Rng as rand::SeedableRng>::seed_from_u64(seed);
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n).map(|_| normal(&mut rng)).collect();
    candle_core::Tensor::from_vec(v, shape, &candle_core::Device::Cpu).expect("shape matches")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_reproducible_and_distinct() {
        let a: Vec<u64> = (0..4)
            .map(|_| stream(3, Purpose::Train, 2).next_u64())
            .collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        let b = stream(3, Purpose::Train, 3).next_u64();
        let c = stream(3, Purpose::Init, 2).next_u64();
        let d = stream(4, Purpose::Train, 2).next_u64();
        assert!(a[0] != b && a[0] != c && a[0] != d && b != c);
    }

    #[test]
    fn normal_has_unit_moments() {
        // Mean 0 and variance 1 within 5 standard errors for 200k draws
        // (se(mean) = 1/sqrt(n) = 0.0022; se(var) = sqrt(2/n) = 0.0032).
        let mut rng = stream(0, Purpose::Tool, 0);
        let n = 200_000;
        let xs: Vec<f64> = (0..n).map(|_| normal(&mut rng)).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        assert!(mean.abs() < 0.011, "{mean}");
        assert!((var - 1.0).abs() < 0.016, "{var}");
    }
}
