//! A Label Studio ML backend over a session folder: the server a Label Studio project's "Model"
//! connection talks to (the protocol of `label-studio-ml-backend`).
//!
//! - `GET /health` (and `GET /`): `{"status": "UP", ...}`.
//! - `POST /setup`: the session's [`model_version`](crate::label_studio::model_version), the same
//!   for every model, so that a project set once to show it keeps showing every round's
//!   predictions.
//! - `POST /predict`: for each task Label Studio sends, the last model's most probable class as a
//!   pre-annotation and, as the prediction's `score`, the model's confidence made to rise along
//!   alkit's order over the pool ([`ordered_confidence`](crate::label_studio::ordered_confidence);
//!   with a subsample, the items it left out score 1, after every ranked one), so that Label
//!   Studio's uncertainty sampling (lowest score first) serves items in alkit's order. A task is an
//!   item by its `alkit_id` (tasks alkit wrote) or by the path or URL of its image (tasks imported
//!   from the pool's folder); any other task gets an `error` instead of a prediction, which Label
//!   Studio logs and skips.
//! - `POST /webhook`: on `ANNOTATION_CREATED` and `ANNOTATION_UPDATED`, the annotation's single
//!   choice is taught through the session's checks (an answer the item already has is a no-op,
//!   another label for a labeled item is refused); once `retrain_every` new labels arrived, or on
//!   `START_TRAINING` (and the legacy `POST /train`), the model retrains on a background thread and
//!   ranks the pool again. Answers arriving while it trains wait in the session's
//!   [`journal`](crate::session::journal) (written atomically before the reply) and are taught when
//!   it is done, or by whatever opens the session next.
//!
//! Label Studio sends each webhook once: an answer given while the backend was down is never sent
//! again. Given Label Studio's URL and an API token ([`LabelStudioApi`]), the backend reads the
//! project's annotations back when it starts and on `START_TRAINING`, and teaches what it missed by
//! the same checks (`reconcile.rs`); the project is the one Label Studio last named in a request,
//! remembered in the session folder ([`PROJECT_FILE`]).
//!
//! Every request must carry the session's secret ([`secret`], kept in the session folder so that
//! Label Studio's saved connection outlives a restart): as the first path segment (the connection
//! URL `http://HOST:PORT/SECRET`, which Label Studio's webhook inherits) or as the password of
//! Basic authentication. It binds loopback unless told otherwise, holds the session's lock for its
//! life, and saves every answer before replying. Request bodies are read into typed values that
//! keep only what the backend uses (`requests.rs`), within a budget of bytes shared by every
//! connection ([`BODY_BUDGET`]), so that no request, and no number of them, costs memory out of
//! proportion to what the backend holds.
//!
//! The parts: `settings.rs` what it is told and reports (and the files it keeps), `secret.rs`,
//! `budget.rs` the shared body budget, `server.rs` the backend bound to its port, `app.rs` its
//! state and endpoints, `rounds.rs` answers and retraining (on the servers' one background
//! worker, `serve/worker.rs`, which the labeling page's rounds run on too).

mod app;
mod budget;
mod reconcile;
pub mod requests;
mod rounds;
mod secret;
mod server;
mod settings;

pub use reconcile::LabelStudioApi;
pub use requests::MAX_TASKS;
pub use secret::secret;
pub use server::LabelStudioBackend;
pub use settings::{
    BackendEvent, BackendEvents, BackendSettings, BODY_BUDGET, BODY_WAIT, MAX_REQUEST,
    PROJECT_FILE, SECRET_FILE,
};
