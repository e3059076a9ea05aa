//! Answers and rounds: a webhook's annotation taught through the session's checks (queued in
//! the journal while the model trains), and the retraining every `retrain_every` new labels
//! or on request, on the servers' background worker.

use super::app::{App, Inner, Model, View};
use super::requests::{self, Annotation, Task};
use super::settings::BackendEvent;
use crate::error::{Error, Result};
use crate::label_studio::ordered_confidence;
use crate::observe::Silent;
use crate::serve::http::Reply;
use crate::serve::state::guard;
use crate::session::journal::{self, Queued};
use crate::session::{Answer, Learner};
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;

impl App {
    /// An event: its action read first, the rest only for the actions the backend acts on, so
    /// that an event it ignores is acknowledged whatever else it carries.
    pub(super) fn webhook(self: &Arc<Self>, bytes: &[u8]) -> Reply {
        let event = match serde_json::from_slice::<requests::Event>(bytes) {
            Ok(e) => e,
            Err(e) => return Reply::error(400, format!("invalid JSON body: {e}")),
        };
        self.remember(event.project);
        let action = event.action.as_deref().unwrap_or("");
        if action == "START_TRAINING" {
            // What was missed first (reading the project takes seconds): the answer comes
            // at once, the training after the catching up.
            let app = Arc::clone(self);
            std::thread::spawn(move || {
                app.catch_up();
                app.train_now();
            });
            return Reply::json(200, &json!({ "status": "ok", "job": "alkit" }));
        }
        if !matches!(
            action,
            "ANNOTATION_CREATED" | "ANNOTATION_UPDATED" | "ANNOTATIONS_CREATED"
        ) {
            // Other events (tasks imported, projects updated, annotations deleted) change
            // nothing alkit holds: a deleted answer stays taught until taken back by hand.
            return Reply::json(200, &json!({ "status": "ignored", "action": action }));
        }
        let body = match serde_json::from_slice::<requests::Webhook>(bytes) {
            Ok(b) => b,
            Err(e) => return self.refuse(400, format!("{action}: {e}")),
        };
        let pairs = body.pairs();
        if pairs.is_empty() || body.task.0.is_empty() {
            return self.refuse(400, format!("{action} without `task` and `annotation`"));
        }
        // Several at once (annotations made from predictions): each taught by itself, the
        // answer the first refusal's, if any.
        let (mut first, mut refused) = (None, None);
        for (task, annotation) in pairs {
            let r = match task {
                Some(t) => self.answer(t, annotation),
                None => self.refuse(
                    422,
                    format!("{action}: an annotation of a task the event does not hold"),
                ),
            };
            if r.status >= 400 && refused.is_none() {
                refused = Some(r);
            } else if first.is_none() {
                first = Some(r);
            }
        }
        refused
            .or(first)
            .unwrap_or_else(|| Reply::json(200, &json!({ "status": "ok" })))
    }

    /// The legacy train endpoint: every annotated task of the project, then a retraining.
    pub(super) fn train(self: &Arc<Self>, body: &requests::Train) -> Reply {
        self.remember(body.project);
        for t in body.annotations.iter().flat_map(|a| &a.0) {
            let task = t.task();
            for a in t.annotations.iter().flat_map(|a| &a.0) {
                let r = self.answer(&task, a);
                if r.status >= 400 {
                    return r;
                }
            }
        }
        self.train_now()
    }

    pub(super) fn train_now(self: &Arc<Self>) -> Reply {
        let mut inner = guard(&self.inner);
        if inner.learner.is_none() {
            inner.again = true;
        } else {
            self.start_round(&mut inner);
        }
        Reply::json(200, &json!({ "status": "ok", "job": "alkit" }))
    }

    pub(super) fn answer(self: &Arc<Self>, task: &Task, annotation: &Annotation) -> Reply {
        let tid = task.id.unwrap_or(0);
        let i = match self.item_of(task) {
            Ok(i) => i,
            Err(e) => return self.refuse(422, e),
        };
        let label = match annotation.choice() {
            Ok(Some(c)) => c,
            Ok(None) => return Reply::json(200, &json!({ "status": "no choice" })),
            Err(e) => return self.refuse(422, format!("task {tid}: {e}")),
        };
        self.answer_item(tid, i, label)
    }

    /// Teaches Label Studio task `tid`'s answer `label` for pool item `i` by the session's
    /// checks (queued while the model trains); the reply's `status` says what happened.
    pub(super) fn answer_item(self: &Arc<Self>, tid: u64, i: usize, label: String) -> Reply {
        let id = self.items.ids()[i].clone();
        let mut inner = guard(&self.inner);
        let inner = &mut *inner;
        if !inner.state.classes.contains(&label) {
            return self.refuse(
                422,
                format!(
                    "task {tid}: `{label}` is not one of the classes {:?}",
                    inner.state.classes
                ),
            );
        }
        if let Some(l) = inner.state.labeled.iter().find(|l| l.id == id) {
            if l.label != label {
                let m = format!(
                    "task {tid}: `{id}` is already labeled `{}` (round {}); this annotation \
                     says `{label}`",
                    l.label, l.round
                );
                return self.refuse(409, m);
            }
            (self.events)(&BackendEvent::Taught {
                task: tid,
                id: &id,
                label: &label,
                repeated: true,
                labeled: inner.state.labeled.len(),
            });
            return Reply::json(200, &json!({ "status": "repeated" }));
        }
        let Some(learner) = inner.learner.as_mut() else {
            // Training: checked against the state as saved, taught when it is done.
            if let Some(q) = inner.queue.iter().find(|q| q.id == id) {
                if q.label != label {
                    let m = format!(
                        "task {tid}: `{id}` waits to be taught `{}`; this annotation says \
                         `{label}`",
                        q.label
                    );
                    return self.refuse(409, m);
                }
                return Reply::json(200, &json!({ "status": "queued" }));
            }
            inner.queue.push(Queued {
                task: Some(tid),
                ..Queued::new(id, label)
            });
            if let Err(e) = journal::write(&self.dir, &inner.queue) {
                inner.queue.pop();
                return self.refuse(500, format!("the answer was not saved: {e}"));
            }
            (self.events)(&BackendEvent::Queued {
                task: tid,
                waiting: inner.queue.len(),
            });
            return Reply::json(200, &json!({ "status": "queued" }));
        };
        let origin = PathBuf::from(format!("Label Studio task {tid}"));
        let answer = Answer::new(1, id.clone(), label.clone());
        let undo = match learner.teach_one(&answer, &origin) {
            Ok(u) => u,
            Err(e) => return self.refuse(409, e.to_string()),
        };
        if let Err(e) = learner.save_state(&self.dir) {
            // Not saved, so not taken: taken back where it can be (in round 0 it cannot:
            // then it stays taught in memory, and the next save writes it).
            if learner.undo(undo).is_ok() {
                return self.refuse(500, format!("the answer was not saved: {e}"));
            }
            inner.state = learner.state().clone();
            return self.refuse(
                500,
                format!(
                    "`{id}` = `{label}` is taught but session.json could not be written ({e}); \
                     the next save writes it"
                ),
            );
        }
        inner.state = learner.state().clone();
        inner.since += 1;
        (self.events)(&BackendEvent::Taught {
            task: tid,
            id: &id,
            label: &label,
            repeated: false,
            labeled: inner.state.labeled.len(),
        });
        if inner.since >= self.retrain_every {
            self.start_round(inner);
        }
        Reply::json(200, &json!({ "status": "ok" }))
    }

    pub(super) fn start_round(self: &Arc<Self>, inner: &mut Inner) {
        let Some(learner) = inner.learner.take() else {
            inner.again = true;
            return;
        };
        if learner.state().labeled.is_empty() || learner.candidates(true).is_empty() {
            inner.learner = Some(learner);
            return;
        }
        inner.since = 0;
        inner.again = false;
        (self.events)(&BackendEvent::RoundStarted {
            round: learner.state().rounds.len() + 1,
            labeled: learner.state().labeled.len(),
        });
        Arc::clone(self).run_round(learner);
    }

    /// The background round ([`App::round`] on the worker's thread), then, whatever came of
    /// it, [`App::round_back`].
    pub(super) fn run_round(self: Arc<Self>, learner: Learner) {
        let app = Arc::clone(&self);
        super::super::worker::retrain(
            learner,
            move |learner| app.round(learner),
            move |learner, result| self.round_back(learner, result),
        );
    }

    /// One round on `learner`: the pool ranked, the new model's view of every item, saved.
    pub(super) fn round(&self, learner: &mut Learner) -> Result<(usize, Vec<View>)> {
        let ranked = learner.rank(&self.request, &self.device, &mut Silent)?;
        let all: Vec<usize> = (0..self.items.ids().len()).collect();
        let Some(pred) = learner.predicted(&all, &self.device)? else {
            return Err(Error::config(
                "strategy",
                "the round trained no model to predict with",
            ));
        };
        learner.save(&self.dir)?;
        let conf: Vec<f32> = ranked.iter().map(|q| pred[q.index].1).collect();
        let scores = ordered_confidence(&conf);
        let mut items: Vec<View> = pred
            .iter()
            .map(|&(class, prob)| View {
                class,
                prob,
                // After every ranked item (their scores are below 1): labeled items,
                // and with a subsample the unlabeled items it left out.
                score: 1.0,
                rank: None,
                acquisition: None,
            })
            .collect();
        for (k, (q, s)) in ranked.iter().zip(scores).enumerate() {
            let v = &mut items[q.index];
            v.score = s;
            v.rank = Some(k + 1);
            v.acquisition = q.score;
        }
        Ok((ranked.len(), items))
    }

    /// The learner back from a round: the new model serves predictions (or the failure is
    /// reported and the last one keeps serving), the answers that waited are taught, and the
    /// next round starts where enough new labels came.
    pub(super) fn round_back(
        self: &Arc<Self>,
        mut learner: Learner,
        result: std::result::Result<(usize, Vec<View>), String>,
    ) {
        let mut inner = guard(&self.inner);
        let inner = &mut *inner;
        match result {
            Ok((ranked, items)) => {
                let r = learner.state().rounds.last();
                let round = r.map_or(0, |r| r.round);
                let stopping = learner.state().stopping();
                (self.events)(&BackendEvent::RoundFinished {
                    round,
                    ranked,
                    test_acc: r.and_then(|r| r.test_acc),
                    stopping: stopping.as_ref(),
                });
                inner.model = Some(Model { round, items });
                inner.error = None;
            }
            Err(m) => {
                (self.events)(&BackendEvent::Failed { problem: &m });
                inner.error = Some(m);
            }
        }
        // The answers that came while it trained.
        let queue = std::mem::take(&mut inner.queue);
        for q in &queue {
            let (task, answer) = (q.task.unwrap_or(0), Answer::new(1, &q.id, &q.label));
            let origin = PathBuf::from(format!("Label Studio task {task}"));
            match learner.teach_file_answers(&[answer], &origin) {
                Ok(t) => {
                    inner.since += t.taught;
                    (self.events)(&BackendEvent::Taught {
                        task,
                        id: &q.id,
                        label: &q.label,
                        repeated: t.repeated > 0,
                        labeled: learner.state().labeled.len(),
                    });
                }
                Err(e) => {
                    // Refused by the session's checks (a label taught meanwhile says
                    // otherwise): reported, and not kept.
                    let m = e.to_string();
                    (self.events)(&BackendEvent::Refused { problem: &m });
                }
            }
        }
        if !queue.is_empty() {
            let saved = learner
                .save_state(&self.dir)
                .and_then(|()| journal::clear(&self.dir));
            if let Err(e) = saved {
                // The journal still holds them; kept waiting too, so that a journal written
                // for the next answer still holds them (taught again, they are repeats).
                let m = format!("the queued answers were not saved: {e}");
                (self.events)(&BackendEvent::Failed { problem: &m });
                inner.queue = queue;
            }
        }
        inner.state = learner.state().clone();
        inner.learner = Some(learner);
        if inner.again || inner.since >= self.retrain_every {
            self.start_round(inner);
        }
    }
}
