//! The kernels' thread split: [`join`] for two fixed halves of a batch and [`par_chunks`] for
//! an output cut into equal chunks, both on rayon's pool. Each piece of an output is written
//! by one call, so results never depend on the thread count or the scheduling.

/// `(a(), b())`, potentially on two threads of rayon's pool (nested calls are fine: rayon
/// steals work instead of blocking). Kernels split a batch into two fixed halves through this,
/// so their results never depend on the thread count.
pub(crate) fn join<A: Send, B: Send>(
    a: impl FnOnce() -> A + Send,
    b: impl FnOnce() -> B + Send,
) -> (A, B) {
    rayon::join(a, b)
}

/// `f(i, chunk)` for the `i`-th `len`-element chunk of `out` (the last may be shorter), in
/// parallel on rayon's pool. Each chunk is written by one call, so the result does not depend
/// on the scheduling.
pub(crate) fn par_chunks<T: Send>(out: &mut [T], len: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    use rayon::prelude::*;
    out.par_chunks_mut(len.max(1))
        .enumerate()
        .for_each(|(i, part)| f(i, part));
}

#[cfg(test)]
mod tests {
    use super::{join, par_chunks};

    #[test]
    fn pool_helpers_nest_and_match_a_sequential_loop() {
        // Reference: the same sums computed in one plain loop. Nested use (par_chunks inside
        // join inside par_chunks), from several threads at once, must neither deadlock nor
        // mix up chunks.
        let fill = |out: &mut [u64], base: u64| {
            par_chunks(out, 7, |i, part| {
                let (x, y) = join(|| i as u64 * 1000, || base);
                for (j, v) in part.iter_mut().enumerate() {
                    *v = x + y + j as u64;
                }
            });
        };
        let expect = |base: u64| -> Vec<u64> {
            (0..100u64).map(|k| (k / 7) * 1000 + base + k % 7).collect()
        };
        std::thread::scope(|s| {
            for t in 0..3u64 {
                s.spawn(move || {
                    let (a, b) = join(
                        || {
                            let mut v = vec![0; 100];
                            fill(&mut v, t);
                            v
                        },
                        || {
                            let mut v = vec![0; 100];
                            fill(&mut v, t + 10);
                            v
                        },
                    );
                    assert_eq!(a, expect(t));
                    assert_eq!(b, expect(t + 10));
                });
            }
        });
    }
}
