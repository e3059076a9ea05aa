//! The background round both servers run (the labeling page and the Label Studio backend):
//! the learner, taken out of the server's state so that answers meanwhile wait in its queue,
//! retrains on a thread of its own, and is handed back with what came of it, a panic inside
//! the round included, so that the server always gets its learner back and keeps serving.

use crate::error::Result;
use crate::session::Learner;

/// What a round that panicked is reported as.
const PANICKED: &str = "retraining failed inside alkit (a bug); the answers so far are saved";

/// Runs `round` on `learner` on a new thread, then `back` with the learner and the round's
/// result (its error, or [`PANICKED`], as text).
pub(super) fn retrain<T: 'static>(
    mut learner: Learner,
    round: impl FnOnce(&mut Learner) -> Result<T> + Send + 'static,
    back: impl FnOnce(Learner, std::result::Result<T, String>) + Send + 'static,
) {
    std::thread::spawn(move || {
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| round(&mut learner)));
        let result = match ran {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(PANICKED.to_string()),
        };
        back(learner, result);
    });
}
