//! A curve's runs carried out several at once: each run (one strategy, one seed) is a job
//! that one of `jobs` threads takes in order, with the run's own observer chain, so that a run
//! computes the same bytes on any thread and beside any other. Events of every run reach the
//! caller's observer one at a time through a lock; the first failure stops the other runs at
//! their next event, every cycle they finished already saved.

use crate::acquire::RunState;
use crate::error::{Error, Result};
use crate::observe::{Control, Event, Observer};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Runs `job(i, state, observer)` for every state of `states` not yet complete, `jobs` at a
/// time, each on one thread with an observer that forwards to `observer`; `done(slots)` is
/// called (under a lock) after each run finishes, with every state in its slot once finished
/// (`None` before). Returns every state, in order, or the first error (an interruption only when nothing
/// else failed).
pub(super) fn run_jobs(
    states: Vec<RunState>,
    jobs: usize,
    job: &(dyn Fn(usize, &mut RunState, &mut dyn Observer) -> Result<()> + Sync),
    done: &(dyn Fn(&[Option<RunState>]) -> Result<()> + Sync),
    observer: &mut (dyn Observer + Send),
) -> Result<Vec<RunState>> {
    let n = states.len();
    let slots: Vec<Mutex<Option<RunState>>> =
        states.into_iter().map(|s| Mutex::new(Some(s))).collect();
    let finished: Mutex<Vec<Option<RunState>>> = Mutex::new(vec![None; n]);
    let shared = Mutex::new(observer);
    let (next, stop) = (AtomicUsize::new(0), AtomicBool::new(false));
    let errors: Mutex<Vec<Error>> = Mutex::new(Vec::new());
    let worker = || loop {
        let i = next.fetch_add(1, Ordering::SeqCst);
        if i >= n || stop.load(Ordering::SeqCst) {
            return;
        }
        let Some(mut state) = lock(&slots[i]).take() else {
            return;
        };
        let mut forward = Forward {
            shared: &shared,
            stop: &stop,
        };
        let outcome = if state.is_complete() {
            Ok(())
        } else {
            job(i, &mut state, &mut forward)
        }
        .and_then(|()| {
            let mut finished = lock(&finished);
            finished[i] = Some(state);
            done(&finished)
        });
        if let Err(e) = outcome {
            stop.store(true, Ordering::SeqCst);
            lock(&errors).push(e);
            return;
        }
    };
    std::thread::scope(|s| {
        for _ in 0..jobs.clamp(1, n.max(1)) {
            s.spawn(worker);
        }
    });
    let mut errors = errors.into_inner().unwrap_or_else(|p| p.into_inner());
    if !errors.is_empty() {
        // An interruption is what the others saw after the real failure.
        let first = errors
            .iter()
            .position(|e| !matches!(e, Error::Interrupted))
            .unwrap_or(0);
        return Err(errors.swap_remove(first));
    }
    let finished = finished.into_inner().unwrap_or_else(|p| p.into_inner());
    Ok(finished.into_iter().flatten().collect())
}

/// The number of runs carried out at once when none is given: one per core for models whose
/// training is one thread's work on the CPU (the heads on feature vectors), else one (the
/// convolutional models already spread their training over the cores).
pub fn default_jobs(model: &crate::models::Arch, device: &candle_core::Device) -> usize {
    let flat_head = matches!(
        model.kind().to_string().as_str(),
        "linear" | "mlp" | "mlp-dropout" | "duq-mlp"
    );
    if device.is_cpu() && flat_head {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        1
    }
}

/// A poisoned lock still holds what it held: a panicking run is reported by the scope.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One run's view of the caller's observer: every event passed on under the lock, and a stop
/// once another run failed.
struct Forward<'a, 'o> {
    shared: &'a Mutex<&'o mut (dyn Observer + Send)>,
    stop: &'a AtomicBool,
}

impl Observer for Forward<'_, '_> {
    fn on(&mut self, event: &Event<'_>) -> Control {
        if self.stop.load(Ordering::SeqCst) {
            return Control::Stop;
        }
        lock(self.shared).on(event)
    }
}
