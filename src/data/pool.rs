//! The pool: which training items are labeled, and in which cycle.
//!
//! [`Pool::acquire`] is the only place where a candidate's position in a scored batch becomes a
//! dataset index: scorers and selection see positions `0..candidates.len()`, never indices.

use crate::error::{Error, Result};

/// Labeled/unlabeled bookkeeping over a training set of `n` items.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pool {
    /// `(index, cycle)` for each labeled item, in the order they were labeled.
    labeled: Vec<(usize, usize)>,
    /// Cycle each item was labeled in, or `None`: `(n,)`.
    cycle_of: Vec<Option<usize>>,
    n: usize,
}

/// The unlabeled items offered to a scorer, in a fixed order (ascending dataset index).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidates {
    indices: Vec<usize>,
}

impl Candidates {
    /// Dataset indices in candidate (position) order.
    pub fn indices(&self) -> &[usize] {
        &self.indices
    }
    /// Number of candidates.
    pub fn len(&self) -> usize {
        self.indices.len()
    }
    /// True when no candidate is left.
    pub fn is_empty(&self) -> bool {
        self.indices.is_empty()
    }
}

impl Pool {
    /// A pool of `n` unlabeled items.
    pub fn new(n: usize) -> Pool {
        Pool {
            labeled: Vec::new(),
            cycle_of: vec![None; n],
            n,
        }
    }

    /// Rebuilds a pool from saved `(index, cycle)` pairs, checking indices and duplicates.
    pub fn from_labeled(n: usize, labeled: &[(usize, usize)]) -> Result<Pool> {
        let mut pool = Pool::new(n);
        for &(i, c) in labeled {
            pool.mark(i, c)?;
        }
        Ok(pool)
    }

    fn mark(&mut self, index: usize, cycle: usize) -> Result<()> {
        match self.cycle_of.get(index) {
            None => Err(Error::config(
                "pool",
                format!("index {index} is outside the pool of {} items", self.n),
            )),
            Some(Some(c)) => Err(Error::config(
                "pool",
                format!("index {index} was already labeled in cycle {c}"),
            )),
            Some(None) => {
                self.cycle_of[index] = Some(cycle);
                self.labeled.push((index, cycle));
                Ok(())
            }
        }
    }

    /// Size of the whole pool.
    pub fn size(&self) -> usize {
        self.n
    }

    /// Labeled `(index, cycle)` pairs in labeling order.
    pub fn labeled(&self) -> &[(usize, usize)] {
        &self.labeled
    }

    /// Labeled dataset indices in labeling order.
    pub fn labeled_indices(&self) -> Vec<usize> {
        self.labeled.iter().map(|&(i, _)| i).collect()
    }

    /// Number of labeled items.
    pub fn labeled_count(&self) -> usize {
        self.labeled.len()
    }

    /// The cycle in which `index` was labeled.
    pub fn cycle_of(&self, index: usize) -> Option<usize> {
        self.cycle_of.get(index).copied().flatten()
    }

    /// The unlabeled items, ascending by index.
    pub fn candidates(&self) -> Candidates {
        Candidates {
            indices: (0..self.n)
                .filter(|&i| self.cycle_of[i].is_none())
                .collect(),
        }
    }

    /// Labels the items `indices` (dataset indices) in `cycle`. Errors, changing nothing, on
    /// an index outside the pool, a repeated index, or one already labeled.
    pub fn acquire(&mut self, indices: &[usize], cycle: usize) -> Result<()> {
        if let Some(&i) = indices.iter().find(|&&i| i >= self.n) {
            return Err(Error::config(
                "selection",
                format!("index {i} is outside the pool of {}", self.n),
            ));
        }
        let mut check = indices.to_vec();
        check.sort_unstable();
        if check.windows(2).any(|w| w[0] == w[1]) {
            return Err(Error::config(
                "selection",
                "the same candidate was selected twice",
            ));
        }
        if let Some(&i) = indices.iter().find(|&&i| self.cycle_of[i].is_some()) {
            return Err(Error::config(
                "selection",
                format!("index {i} is already labeled"),
            ));
        }
        for &i in indices {
            self.mark(i, cycle)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acquired_items_leave_the_candidates_and_never_repeat() {
        let mut pool = Pool::from_labeled(6, &[(1, 0), (4, 0)]).unwrap();
        assert_eq!(pool.candidates().indices(), &[0, 2, 3, 5]);
        pool.acquire(&[5, 2], 1).unwrap();
        assert_eq!(pool.cycle_of(5), Some(1));
        assert_eq!(pool.candidates().indices(), &[0, 3]);
        // Already labeled, repeated or outside the pool: refused, nothing changes.
        assert!(pool.acquire(&[0, 2], 2).is_err());
        assert!(pool.acquire(&[0, 0], 2).is_err());
        assert!(pool.acquire(&[9], 2).is_err());
        assert_eq!(pool.labeled_count(), 4);
        assert_eq!(pool.candidates().indices(), &[0, 3]);
    }
}
