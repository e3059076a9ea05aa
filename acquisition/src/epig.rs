//! EPIG, the expected predictive information gain (Bickford Smith, Kirsch et al., AISTATS
//! 2023): how much labelling a candidate `x` is expected to tell about the predictions on
//! target inputs `x*` drawn from where the model will be used,
//! `EPIG(x) = E_{x*}[I(y; y* | x, x*)]`, from the same stochastic predictions BALD reads
//! (MC dropout or an ensemble's members, `(s, n, c)`).
//!
//! With `p_s` the `s`-th draw and `K` draws, for candidate `i` and target `j` the joint
//! predictive is `p(y, y*) = (1/K) sum_s p_s(y | x_i) p_s(y* | x_j)`, and
//! `EPIG(i) = H[p(y | x_i)] + mean_j H[p(y* | x_j)] - mean_j H[p(y, y* | x_i, x_j)]`,
//! the estimator of the paper's code (and of baal 2's `EPIG`). The targets are the candidates
//! themselves, the pool standing for the input distribution as in the paper's experiments:
//! all of them up to setting `epig_targets`, else that many spread evenly over the candidates
//! (positions `floor(j n / T)`), so the score is a pure function of the evidence. A
//! candidate's score then depends on the others: [`Scorer::joint`] says so, and callers score
//! every candidate at once.
//!
//! The joint predictives of a block of candidates are one matrix product
//! `(rows c, K) x (K, T c)`; a candidate's `c x T c` block is bounded by
//! [`MAX_JOINT_VALUES`] (a class count that needs more is refused, naming the setting that
//! lowers it). Entropies are summed in `f64`, with `0 ln 0 = 0`.

use crate::scorers::entropy;
use crate::{Evidence, Needs, Probs, SampleRequest, ScoreError, Scorer};

/// The most joint-predictive values one candidate's block may hold (`c * T * c`, 64 MiB of
/// `f32`).
pub const MAX_JOINT_VALUES: usize = 1 << 24;

/// Candidates whose joint predictives are computed in one product, at most (fewer where
/// their blocks would pass [`PRODUCT_VALUES`]).
const BLOCK: usize = 16;

/// The most values one product holds (16 MiB of `f32`).
const PRODUCT_VALUES: usize = 1 << 22;

/// EPIG over samples drawn as `request` says, with at most `targets` target inputs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Epig {
    /// How the samples are drawn (MC dropout, or an ensemble's members).
    pub request: SampleRequest,
    /// The most candidates used as targets (at least 1).
    pub targets: usize,
}

impl Scorer for Epig {
    fn name(&self) -> &str {
        "epig"
    }

    fn needs(&self) -> Needs {
        Needs {
            probs: false,
            ..Needs::samples(self.request)
        }
    }

    fn joint(&self) -> bool {
        true
    }

    fn score(&self, ev: &Evidence) -> Result<Vec<f32>, ScoreError> {
        let s = ev.samples(self.name())?;
        let draws = s.draws();
        let (n, c) = (s.n(), draws[0].classes());
        if n == 0 {
            return Ok(Vec::new());
        }
        let targets = self.target_positions(n)?;
        let t = targets.len();
        if c.saturating_mul(c).saturating_mul(t) > MAX_JOINT_VALUES {
            return Err(ScoreError::Setting {
                setting: "epig_targets",
                why: format!(
                    "{t} targets of {c} classes make joint predictives of {c} x {} values per \
                     candidate, more than {MAX_JOINT_VALUES}: at most {} targets at {c} classes",
                    t * c,
                    (MAX_JOINT_VALUES / c.saturating_mul(c)).max(1)
                ),
            });
        }
        let x = by_item(draws, 0..n);
        let y = by_item(draws, targets.iter().copied());
        let h_pool: Vec<f64> = (0..n).map(|i| mean_entropy(draws, i)).collect();
        let h_targ = targets.iter().map(|&j| h_pool[j]).sum::<f64>() / t as f64;
        let k = draws.len();
        let per = (PRODUCT_VALUES / (c * t * c)).clamp(1, BLOCK);
        let mut out = vec![0f32; n];
        crate::kernels::par_rows_min(&mut out, 1, BLOCK, |start, part| {
            for (b, rows) in part.chunks_mut(per).enumerate() {
                let first = start + b * per;
                let m = rows.len() * c;
                let a = &x[first * c * k..(first * c + m) * k];
                let mut joint = vec![0f32; m * t * c];
                crate::kernels::matmul_nt_serial(a, &y, &mut joint, (m, t * c, k));
                for (r, o) in rows.iter_mut().enumerate() {
                    let block = &joint[r * c * t * c..(r + 1) * c * t * c];
                    let h_joint = joint_entropy(block, k) / t as f64;
                    *o = (h_pool[first + r] + h_targ - h_joint) as f32;
                }
            }
        });
        Ok(out)
    }
}

impl Epig {
    /// The targets among `n` candidates: all of them, or `targets` spread evenly.
    fn target_positions(&self, n: usize) -> Result<Vec<usize>, ScoreError> {
        if self.targets == 0 {
            return Err(ScoreError::Setting {
                setting: "epig_targets",
                why: "0 targets: EPIG needs at least one".into(),
            });
        }
        let t = self.targets.min(n);
        Ok((0..t).map(|j| j * n / t).collect())
    }
}

/// The draws of the items `items`, item by item: row `i c + a`, column `s` holds
/// `p_s(a | x_i)` (the `(rows, K)` operand of the joint product).
fn by_item(draws: &[Probs], items: impl Iterator<Item = usize>) -> Vec<f32> {
    let c = draws[0].classes();
    let mut out = Vec::new();
    for i in items {
        for a in 0..c {
            out.extend(draws.iter().map(|d| d.row(i)[a]));
        }
    }
    out
}

/// The entropy of item `i`'s mean prediction over the draws.
fn mean_entropy(draws: &[Probs], i: usize) -> f64 {
    let c = draws[0].classes();
    let k = draws.len() as f32;
    let mut mean = vec![0f32; c];
    for d in draws {
        for (m, &v) in mean.iter_mut().zip(d.row(i)) {
            *m += v / k;
        }
    }
    entropy(&mean)
}

/// The summed entropies of one candidate's joint predictives, given as the products
/// `sum_s p_s(y) p_s(y*)` not yet divided by the `k` draws.
fn joint_entropy(sums: &[f32], k: usize) -> f64 {
    crate::plogp::neg_sum_plogp(sums, 1.0 / k as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Samples;

    /// EPIG in `f64` straight from its definition, every pair of candidate and target.
    fn naive(draws: &[Vec<Vec<f64>>], targets: &[usize]) -> Vec<f64> {
        let (k, n, c) = (draws.len(), draws[0].len(), draws[0][0].len());
        let h = |p: &[f64]| {
            -p.iter()
                .filter(|&&v| v > 0.0)
                .map(|v| v * v.ln())
                .sum::<f64>()
        };
        let mean = |i: usize| -> Vec<f64> {
            (0..c)
                .map(|a| draws.iter().map(|d| d[i][a]).sum::<f64>() / k as f64)
                .collect()
        };
        let h_targ = targets.iter().map(|&j| h(&mean(j))).sum::<f64>() / targets.len() as f64;
        (0..n)
            .map(|i| {
                let mut h_joint = 0.0;
                for &j in targets {
                    let mut p = Vec::with_capacity(c * c);
                    for a in 0..c {
                        for b in 0..c {
                            p.push(draws.iter().map(|d| d[i][a] * d[j][b]).sum::<f64>() / k as f64);
                        }
                    }
                    h_joint += h(&p);
                }
                h(&mean(i)) + h_targ - h_joint / targets.len() as f64
            })
            .collect()
    }

    /// `k` draws of `n` items over `c` classes, from a fixed linear congruential stream.
    fn draws(k: usize, n: usize, c: usize, seed: u64) -> Vec<Vec<Vec<f64>>> {
        let mut state = seed;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 33) as f64 / (1u64 << 31) as f64) * 4.0 - 2.0
        };
        (0..k)
            .map(|_| {
                (0..n)
                    .map(|_| {
                        let z: Vec<f64> = (0..c).map(|_| next()).collect();
                        let m = z.iter().cloned().fold(f64::MIN, f64::max);
                        let e: Vec<f64> = z.iter().map(|v| (v - m).exp()).collect();
                        let s: f64 = e.iter().sum();
                        e.iter().map(|v| v / s).collect()
                    })
                    .collect()
            })
            .collect()
    }

    fn evidence(d: &[Vec<Vec<f64>>]) -> Evidence {
        let (n, c) = (d[0].len(), d[0][0].len());
        let probs = d
            .iter()
            .map(|draw| {
                let flat: Vec<f32> = draw.iter().flatten().map(|&v| v as f32).collect();
                Probs::new(flat, n, c).unwrap()
            })
            .collect();
        Evidence {
            samples: Some(Samples::new(probs).unwrap()),
            ..Evidence::default()
        }
    }

    #[test]
    fn epig_equals_its_definition_worked_in_f64() {
        // 37 items (two blocks and a part), targets all of them and then 5 spread evenly.
        let d = draws(6, 37, 4, 7);
        for (targets, positions) in [
            (100, (0..37).collect::<Vec<_>>()),
            (5, vec![0, 7, 14, 22, 29]),
        ] {
            let e = Epig {
                request: SampleRequest::Members,
                targets,
            };
            let got = e.score(&evidence(&d)).unwrap();
            let want = naive(&d, &positions);
            for (g, w) in got.iter().zip(&want) {
                assert!((f64::from(*g) - w).abs() < 2e-5, "{g} vs {w}");
            }
        }
    }

    #[test]
    fn a_model_whose_draws_agree_gains_nothing_and_epig_is_at_most_the_bald_bound() {
        let d = draws(5, 20, 3, 11);
        let same: Vec<Vec<Vec<f64>>> = vec![d[0].clone(); 5];
        let e = Epig {
            request: SampleRequest::Members,
            targets: 20,
        };
        for v in e.score(&evidence(&same)).unwrap() {
            assert!(v.abs() < 1e-5, "{v}");
        }
        // I(y; y*) <= I(y; theta) (the data-processing inequality): EPIG never exceeds BALD.
        let bald = crate::SampleScorer::members(crate::SampleScore::Bald)
            .score(&evidence(&d))
            .unwrap();
        for (g, b) in e.score(&evidence(&d)).unwrap().iter().zip(bald) {
            assert!(*g >= -1e-5 && *g <= b + 1e-5, "{g} vs BALD {b}");
        }
    }

    #[test]
    fn zero_targets_and_joint_predictives_past_the_bound_are_refused() {
        let refused = |d: &[Vec<Vec<f64>>], targets: usize| {
            let e = Epig {
                request: SampleRequest::Members,
                targets,
            };
            matches!(
                e.score(&evidence(d)),
                Err(ScoreError::Setting {
                    setting: "epig_targets",
                    ..
                })
            )
        };
        assert!(refused(&draws(2, 3, 2, 1), 0));
        // 4,097 classes: one target's joint predictive alone is past the bound.
        assert!(refused(&draws(2, 2, 4097, 1), 1));
        assert!(!refused(&draws(2, 2, 4096, 1), 1));
    }
}
