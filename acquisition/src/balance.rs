//! Class-balanced batches: how many of the next `n` picks each predicted class gets, so that
//! the labeled set moves towards equal class counts (small-text's `ClassBalancer`, after
//! Bloodgood & Vijay-Shanker's observation that uncertainty sampling starves rare classes).
//!
//! The quota is water-filling: one slot at a time goes to the class whose labeled count plus
//! slots so far is lowest, among the classes that still have unpicked candidates predicted
//! as them. small-text fills the same levels (its `_sample_distribution` minimises the same
//! quantity) but caps by availability afterwards and hands the remainder out at random;
//! filling over the available classes only gives that remainder to the next-lowest classes
//! instead. Ties go to the class ranked first in a caller-given order, a seeded permutation of
//! the classes in practice, so that no class is favoured round after round. Within its quota a
//! class's candidates are selected as without balancing (top-k or a stochastic mode over
//! their scores, or a batch selector over their evidence).

use crate::{ScoreError, Selection};
use rand::RngCore;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Slots per class `(C,)` for a batch of `n`: `labeled[c]` items of class `c` are labeled,
/// `available[c]` candidates are predicted as `c`, and ties between equally low classes go to
/// the one earlier in `order` (a permutation of `0..C`). The slots sum to `n` and never
/// exceed `available`.
///
/// Errors when the three lengths differ, `order` is not a permutation, or `n` exceeds the
/// candidates.
pub fn class_quotas(
    labeled: &[usize],
    available: &[usize],
    n: usize,
    order: &[usize],
) -> Result<Vec<usize>, ScoreError> {
    let c = labeled.len();
    if available.len() != c || order.len() != c {
        return Err(ScoreError::Shape {
            what: "class counts",
            expected: format!("{c} labeled counts, available counts and ranks"),
            got: format!("{} available, {} ranks", available.len(), order.len()),
        });
    }
    let mut rank = vec![usize::MAX; c];
    for (r, &class) in order.iter().enumerate() {
        match rank.get_mut(class) {
            Some(slot) if *slot == usize::MAX => *slot = r,
            _ => {
                return Err(ScoreError::Shape {
                    what: "class order",
                    expected: format!("a permutation of 0..{c}"),
                    got: format!("{order:?}"),
                })
            }
        }
    }
    let total: usize = available.iter().sum();
    if n > total {
        return Err(ScoreError::TooMany { k: n, n: total });
    }
    // The lowest level first, ties by rank: one heap entry per class with room left, so a
    // batch costs `n log C`, not `n C`.
    let mut heap: BinaryHeap<Reverse<(usize, usize, usize)>> = (0..c)
        .filter(|&k| available[k] > 0)
        .map(|k| Reverse((labeled[k], rank[k], k)))
        .collect();
    let mut quota = vec![0usize; c];
    for _ in 0..n {
        // `n <= total` leaves a class with room at every step.
        let Some(Reverse((level, r, k))) = heap.pop() else {
            break;
        };
        quota[k] += 1;
        if quota[k] < available[k] {
            heap.push(Reverse((level + 1, r, k)));
        }
    }
    Ok(quota)
}

/// Positions of a class-balanced batch of `n` among candidates with `scores` and `predicted`
/// classes `(n_candidates,)`: each class's quota ([`class_quotas`]) is selected by
/// `selection` among that class's candidates, drawing from `rng` class by class in class
/// order. Top-k batches come back best first (ties by position), others class by class in
/// pick order.
///
/// Errors as [`class_quotas`] and [`Selection::select`] do, and when a predicted class is
/// not below `labeled.len()`.
pub fn balanced_select(
    scores: &[f32],
    predicted: &[u32],
    labeled: &[usize],
    n: usize,
    (selection, order): (&Selection, &[usize]),
    rng: &mut dyn RngCore,
) -> Result<Vec<usize>, ScoreError> {
    let members = members_by_class(predicted, labeled.len())?;
    if scores.len() != predicted.len() {
        return Err(ScoreError::Shape {
            what: "scores",
            expected: format!("one per candidate ({})", predicted.len()),
            got: format!("{} scores", scores.len()),
        });
    }
    // Every score is checked, not only those of the classes that get slots, and positions
    // are named in the candidate list, as the unbalanced selection names them.
    if !matches!(selection, Selection::Random) {
        if let Some((position, &value)) = scores.iter().enumerate().find(|(_, s)| !s.is_finite()) {
            return Err(ScoreError::NonFinite { position, value });
        }
    }
    if let Some((position, value)) = selection.outside_domain(scores) {
        return Err(ScoreError::Setting {
            setting: "select",
            why: Selection::power_domain(&format!("the candidate at position {position}"), value),
        });
    }
    let available: Vec<usize> = members.iter().map(Vec::len).collect();
    let quota = class_quotas(labeled, &available, n, order)?;
    let mut picks = Vec::with_capacity(n);
    for (class, positions) in members.iter().enumerate() {
        if quota[class] == 0 {
            continue;
        }
        let sub: Vec<f32> = positions.iter().map(|&p| scores[p]).collect();
        let chosen = selection.select(&sub, quota[class], rng)?;
        picks.extend(chosen.into_iter().map(|j| positions[j]));
    }
    if matches!(selection, Selection::TopK) {
        picks.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    }
    Ok(picks)
}

/// The candidates' positions by predicted class `(C,)`, each ascending. Errors when a class
/// is not below `classes`.
pub fn members_by_class(predicted: &[u32], classes: usize) -> Result<Vec<Vec<usize>>, ScoreError> {
    let mut members = vec![Vec::new(); classes];
    for (p, &class) in predicted.iter().enumerate() {
        match members.get_mut(class as usize) {
            Some(m) => m.push(p),
            None => {
                return Err(ScoreError::Shape {
                    what: "predicted classes",
                    expected: format!("classes below {classes}"),
                    got: format!("class {class} at position {p}"),
                })
            }
        }
    }
    Ok(members)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn quotas_fill_the_rarest_classes_first() {
        // Labeled 5, 1, 3: class 1 rises to 3, ties with class 2 and wins by rank, then
        // class 2 takes the fourth slot.
        assert_eq!(
            class_quotas(&[5, 1, 3], &[9, 9, 9], 4, &[0, 1, 2]).unwrap(),
            vec![0, 3, 1]
        );
        assert_eq!(
            class_quotas(&[5, 1, 3], &[9, 9, 9], 6, &[0, 1, 2]).unwrap(),
            vec![0, 4, 2]
        );
        // Six slots level all at 5; the last two go to classes 2 and 0, the first in order.
        assert_eq!(
            class_quotas(&[5, 1, 3], &[9, 9, 9], 8, &[2, 0, 1]).unwrap(),
            vec![1, 4, 3]
        );
    }

    #[test]
    fn a_class_without_candidates_passes_its_slots_on() {
        // Class 1 is rarest but only 1 candidate is predicted as it: class 2 rises to 4 and
        // the tie at 4 goes to class 0.
        assert_eq!(
            class_quotas(&[4, 0, 2], &[5, 1, 5], 4, &[0, 1, 2]).unwrap(),
            vec![1, 1, 2]
        );
        assert!(matches!(
            class_quotas(&[0, 0], &[1, 1], 3, &[0, 1]),
            Err(ScoreError::TooMany { k: 3, n: 2 })
        ));
        assert!(class_quotas(&[0, 0], &[1, 1], 1, &[0, 0]).is_err());
        assert!(class_quotas(&[0, 0], &[1], 1, &[0, 1]).is_err());
    }

    #[test]
    fn top_k_within_each_quota_comes_back_best_first() {
        let scores = [0.9, 0.1, 0.8, 0.7, 0.2, 0.3];
        let predicted = [0, 0, 0, 1, 1, 2];
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
        // Labeled 3, 1, 2: class 1 takes both its candidates, then class 2 one.
        let picks = balanced_select(
            &scores,
            &predicted,
            &[3, 1, 2],
            3,
            (&Selection::TopK, &[0, 1, 2]),
            &mut rng,
        )
        .unwrap();
        assert_eq!(picks, vec![3, 5, 4]);
        // A NaN in a class that gets no slot is refused all the same, by its position.
        let mut bad = scores;
        bad[1] = f32::NAN;
        assert!(matches!(
            balanced_select(
                &bad,
                &predicted,
                &[3, 1, 2],
                3,
                (&Selection::TopK, &[0, 1, 2]),
                &mut rng
            ),
            Err(ScoreError::NonFinite { position: 1, .. })
        ));
        assert!(balanced_select(
            &scores,
            &[0, 0, 0, 1, 1, 3],
            &[3, 1, 2],
            3,
            (&Selection::TopK, &[0, 1, 2]),
            &mut rng
        )
        .is_err());
    }
}
