//! The budget of request-body bytes every connection shares ([`BODY_BUDGET`](super::BODY_BUDGET)):
//! a body is read only once its bytes are taken from it, and gives them back when dropped.

use crate::serve::state::guard;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// Bytes of request bodies held at once, shared by every connection ([`BODY_BUDGET`]).
pub(super) struct Budget {
    pub(super) left: Mutex<u64>,
    pub(super) freed: Condvar,
}

/// Bytes taken from the [`Budget`], given back when dropped.
pub(super) struct Taken<'a> {
    pub(super) budget: &'a Budget,
    pub(super) bytes: u64,
}

impl Budget {
    pub(super) fn new(total: u64) -> Budget {
        Budget {
            left: Mutex::new(total),
            freed: Condvar::new(),
        }
    }

    /// `bytes` of the budget, waiting up to `wait` for them; `None` when they never came.
    pub(super) fn take(&self, bytes: u64, wait: Duration) -> Option<Taken<'_>> {
        let until = Instant::now() + wait;
        let mut left = guard(&self.left);
        while *left < bytes {
            let now = Instant::now();
            if now >= until {
                return None;
            }
            left = self
                .freed
                .wait_timeout(left, until - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        *left -= bytes;
        Some(Taken {
            budget: self,
            bytes,
        })
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        *guard(&self.budget.left) += self.bytes;
        self.budget.freed.notify_all();
    }
}
