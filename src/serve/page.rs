//! The labeling page's handlers: every route of its JSON API and the page itself, answers,
//! skips and undo, the background round and what the page shows of its progress.

use super::http::{self, Reply, COOKIE, TOKEN_HEADER};
use super::state::{
    guard, ranks, Action, AnswerBody, App, Empty, IdBody, Inner, Progress, ServeEvent,
};
use super::waiting;
use crate::error::Result;
use crate::observe::{Control, Event, Observer};
use crate::session::QueryRequest;
use crate::session::{Answer, Learner};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// The page, with `__ALKIT_TOKEN__` standing for the session's token.
const PAGE: &str = include_str!("page.html");

/// The largest image file served as is from an image-folder pool (larger ones are shown as
/// the model sees them).
const MAX_ORIGINAL: u64 = 64 << 20;

impl App {
    pub(super) fn route(self: &Arc<Self>, req: &mut http::Request<'_>) -> Reply {
        if let Err(r) = http::host_ok(&self.hosts, req) {
            return r;
        }
        let url = req.url().to_string();
        let (path, query) = http::split_url(&url);
        let get = matches!(req.method(), "GET" | "HEAD");
        let post = req.method() == "POST";
        match path {
            "/" | "/api/state" | "/api/item" if get => {
                let given = http::query_param(query, "token").or_else(|| http::cookie(req, COOKIE));
                if !given.is_some_and(|t| http::same_token(&t, &self.token)) {
                    return Reply::error(
                        403,
                        "wrong or missing token: open the page's URL with its token",
                    );
                }
                match path {
                    "/" => self.page(),
                    "/api/state" => Reply::json(200, &self.state_json(&guard(&self.inner))),
                    _ => match http::query_param(query, "id") {
                        Some(id) => self.item(&id),
                        None => Reply::error(400, "which item? (`?id=`)"),
                    },
                }
            }
            "/api/answer" | "/api/skip" | "/api/undo" | "/api/retrain" if post => {
                let ok = http::header(req, TOKEN_HEADER)
                    .is_some_and(|t| http::same_token(t, &self.token));
                if !ok {
                    return Reply::error(403, format!("wrong or missing {TOKEN_HEADER} header"));
                }
                let r = match path {
                    "/api/answer" => http::json_body(req).and_then(|b| self.answer(b)),
                    "/api/skip" => http::json_body(req).and_then(|b| self.skip(b)),
                    "/api/undo" => http::json_body::<Empty>(req).and_then(|_| self.undo()),
                    _ => http::json_body::<Empty>(req).and_then(|_| self.retrain()),
                };
                r.unwrap_or_else(|e| e)
            }
            "/" | "/api/state" | "/api/item" | "/api/answer" | "/api/skip" | "/api/undo"
            | "/api/retrain" => Reply::error(405, "method not allowed"),
            _ => Reply::error(404, "no such page"),
        }
    }

    pub(super) fn page(&self) -> Reply {
        let mut r = Reply::bytes(
            "text/html; charset=utf-8",
            PAGE.replace("__ALKIT_TOKEN__", &self.token).into_bytes(),
        );
        r.headers.push((
            "Set-Cookie",
            format!("{COOKIE}={}; Path=/; HttpOnly; SameSite=Strict", self.token),
        ));
        r
    }

    pub(super) fn item(&self, id: &str) -> Reply {
        let Some(i) = self.items.position(id) else {
            return Reply::error(404, "no item with that id in the pool");
        };
        let shape = self.items.item_shape();
        if let Some(d) = self.items.displays() {
            // The text or image the file names for the item (the path from the pool's own
            // file, found by the item's position, never from the request).
            if let Some(read) = d.image_bytes(i) {
                return match read {
                    Ok((bytes, media)) => Reply::bytes(media, bytes),
                    Err(e) => Reply::error(500, e.to_string()),
                };
            }
            return Reply::json(200, &json!({ "text": d.value(i) }));
        }
        if shape.len() == 3 {
            if let Some(bytes) = self.original(id) {
                return bytes;
            }
        }
        let x = match self.items.values(&[i]) {
            Ok(x) => x,
            Err(e) => return Reply::error(500, e.to_string()),
        };
        if shape.len() != 3 {
            return Reply::json(200, &json!({ "values": x }));
        }
        let (c, h, w) = (shape[0], shape[1], shape[2]);
        let png = if c == 1 || c == 3 {
            crate::data::image::encode_png(&x, shape)
        } else {
            crate::data::image::encode_png(&x[..h * w], &[1, h, w])
        };
        match png {
            Ok(b) => Reply::bytes("image/png", b),
            Err(e) => Reply::error(500, e.to_string()),
        }
    }

    /// The file of an image-folder item as the person saved it (the id is the pool's own
    /// relative path, found in the pool's index, never a path from the request).
    pub(super) fn original(&self, id: &str) -> Option<Reply> {
        let path = self.folder.as_ref()?.join(id);
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        let ct = match ext.as_str() {
            "png" => "image/png",
            "jpg" | "jpeg" => "image/jpeg",
            _ => return None,
        };
        let meta = std::fs::metadata(&path).ok()?;
        if !meta.is_file() || meta.len() > MAX_ORIGINAL {
            return None;
        }
        std::fs::read(&path).ok().map(|b| Reply::bytes(ct, b))
    }

    pub(super) fn state_json(&self, inner: &Inner) -> Value {
        let st = &inner.state;
        let batch = self.offers_json(inner);
        let classes: Vec<Value> = self
            .classes
            .iter()
            .zip(class_keys(&self.classes))
            .map(|(c, key)| json!({ "name": c, "key": key.map(String::from) }))
            .collect();
        let progress = guard(&self.progress).clone().map(|p| {
            json!({
                "round": p.round,
                "labeled": p.labeled,
                "phase": p.phase,
                "done": p.done,
                "total": p.total,
                "seconds": p.started.elapsed().as_secs_f64(),
            })
        });
        let last = inner.undo.last().map(|a| match a {
            Action::Answer(u, label) => json!({ "kind": "answer", "id": u.id, "label": label }),
            Action::Queued(id) => {
                let label = inner.queue.iter().rfind(|q| &q.id == id).map(|q| &q.label);
                json!({ "kind": "answer", "id": id, "label": label, "waiting": true })
            }
            Action::Skip(id) => json!({ "kind": "skip", "id": id }),
        });
        json!({
            "source": st.source,
            // As Label Studio is shown it, but numbers without a text are a table here.
            "kind": match (self.items.object_name(), self.items.displays()) {
                ("image", _) => "image",
                (_, Some(_)) => "text",
                _ => "table",
            },
            "item_shape": self.items.item_shape(),
            "classes": classes,
            "pool": st.pool_size,
            "labeled": st.labeled.len(),
            "pending": st.pending.len(),
            "skipped": inner.skipped.len() + inner.spare_skips.len(),
            "per_class": st.per_class(),
            "rounds": st.rounds,
            "stopping": st.stopping(),
            "guesses": st.guess_matches(),
            "waiting": inner.queue.len(),
            "batch": batch,
            "busy": inner.learner.is_none(),
            "progress": progress,
            "error": inner.error,
            "exhausted": inner.exhausted,
            "last": last,
        })
    }

    pub(super) fn busy() -> Reply {
        Reply::error(
            409,
            "the model is retraining; answers resume when the next batch is ready",
        )
    }

    pub(super) fn answer(self: &Arc<Self>, b: AnswerBody) -> std::result::Result<Reply, Reply> {
        let mut inner = guard(&self.inner);
        let inner = &mut *inner;
        if self.items.position(&b.id).is_none() {
            return Err(Reply::error(404, "no item with that id in the pool"));
        }
        if !self.classes.contains(&b.label) {
            return Err(Reply::error(
                400,
                format!("`{}` is not one of the classes {:?}", b.label, self.classes),
            ));
        }
        if let Some(l) = inner.state.labeled.iter().find(|l| l.id == b.id) {
            return Err(Reply::error(
                409,
                format!("`{}` is already labeled `{}`", b.id, l.label),
            ));
        }
        let guess = inner
            .predicted
            .get(&b.id)
            .map(|&(c, _)| self.classes[c].clone());
        let Some(learner) = inner.learner.as_mut() else {
            return self.queue_answer(inner, b, guess);
        };
        let answer = Answer {
            row: inner.state.labeled.len() + 1,
            id: b.id.clone(),
            label: b.label.clone(),
            note: b.note.filter(|n| !n.trim().is_empty()),
            guess,
            round: None,
        };
        let undo = learner
            .teach_one(&answer, Path::new("the labeling page"))
            .map_err(|e| Reply::error(400, e.to_string()))?;
        if let Err(e) = learner.save_state(&self.dir) {
            // Not saved, so not taken: the page shows the error and the item again.
            let _ = learner.undo(undo);
            return Err(Reply::error(500, format!("the answer was not saved: {e}")));
        }
        inner.state = learner.state().clone();
        inner.skipped.remove(&b.id);
        inner.undo.push(Action::Answer(undo, b.label.clone()));
        (self.events)(&ServeEvent::Answered {
            id: &b.id,
            label: &b.label,
            labeled: inner.state.labeled.len(),
        });
        self.after_change(inner);
        Ok(Reply::json(200, &self.state_json(inner)))
    }

    pub(super) fn skip(self: &Arc<Self>, b: IdBody) -> std::result::Result<Reply, Reply> {
        let mut inner = guard(&self.inner);
        let inner = &mut *inner;
        if !waiting::offers(inner).iter().any(|o| o.id == b.id) {
            return Err(Reply::error(
                409,
                format!("`{}` is not waiting for an answer", b.id),
            ));
        }
        if inner.state.pending.iter().any(|p| p.id == b.id) {
            inner.skipped.insert(b.id.clone());
        } else {
            inner.spare_skips.insert(b.id.clone());
        }
        inner.undo.push(Action::Skip(b.id));
        self.after_change(inner);
        Ok(Reply::json(200, &self.state_json(inner)))
    }

    pub(super) fn undo(self: &Arc<Self>) -> std::result::Result<Reply, Reply> {
        let mut inner = guard(&self.inner);
        let inner = &mut *inner;
        let Some(learner) = inner.learner.as_mut() else {
            return self.undo_waiting(inner);
        };
        match inner.undo.pop() {
            None => return Err(Reply::error(409, "nothing to undo in this batch")),
            Some(Action::Skip(id)) => inner.unskip(&id),
            Some(Action::Queued(id)) => {
                return Err(Reply::error(409, format!("`{id}` is taught already")));
            }
            Some(Action::Answer(undo, label)) => {
                let id = undo.id.clone();
                let kept = learner.state().labeled.last().cloned();
                learner
                    .undo(undo)
                    .map_err(|e| Reply::error(409, e.to_string()))?;
                if let Err(e) = learner.save_state(&self.dir) {
                    // Put the answer back as it was on disk.
                    let answer = Answer {
                        note: kept.as_ref().and_then(|l| l.note.clone()),
                        guess: kept.and_then(|l| l.guess),
                        ..Answer::new(1, id.clone(), label.clone())
                    };
                    if let Ok(u) = learner.teach_one(&answer, Path::new("the labeling page")) {
                        inner.undo.push(Action::Answer(u, label));
                    }
                    return Err(Reply::error(500, format!("the undo was not saved: {e}")));
                }
                inner.state = learner.state().clone();
                (self.events)(&ServeEvent::Undone { id: &id });
            }
        }
        Ok(Reply::json(200, &self.state_json(inner)))
    }

    pub(super) fn retrain(self: &Arc<Self>) -> std::result::Result<Reply, Reply> {
        let mut inner = guard(&self.inner);
        let inner = &mut *inner;
        if inner.learner.is_none() {
            return Err(Self::busy());
        }
        self.start_round(inner);
        Ok(Reply::json(200, &self.state_json(inner)))
    }

    /// Starts the next round once nothing of the batch is left to answer.
    pub(super) fn after_change(self: &Arc<Self>, inner: &mut Inner) {
        let open = inner
            .state
            .pending
            .iter()
            .any(|p| !inner.skipped.contains(&p.id));
        if !open {
            self.start_round(inner);
        }
    }

    pub(super) fn start_round(self: &Arc<Self>, inner: &mut Inner) {
        let Some(learner) = inner.learner.take() else {
            return;
        };
        let candidates = learner.candidates(self.request.include_pending).len();
        let st = learner.state();
        if candidates == 0 {
            inner.learner = Some(learner);
            inner.exhausted = true;
            (self.events)(&ServeEvent::Exhausted);
            return;
        }
        let mut request = self.request.clone();
        request.n = request.n.min(candidates);
        if let Some(m) = request.subsample {
            request.n = request.n.min(m);
        }
        let round = st.rounds.len() + 1;
        let n_labeled = st.labeled.len();
        inner.error = None;
        inner.exhausted = false;
        self.keep_spares(&learner, inner, round);
        *guard(&self.progress) = Some(Progress {
            round,
            labeled: n_labeled,
            phase: "training",
            done: 0,
            total: 0,
            started: Instant::now(),
        });
        (self.events)(&ServeEvent::RoundStarted {
            round,
            labeled: n_labeled,
        });
        Arc::clone(self).run_round(learner, request);
    }

    /// Keeps the spares the training round may serve: those still unlabeled and unqueried,
    /// or a fresh seeded draw when none is left (a server just started, a ranking used up).
    pub(super) fn keep_spares(&self, learner: &Learner, inner: &mut Inner, round: usize) {
        let open: HashSet<usize> = learner.candidates(false).into_iter().collect();
        inner.spares.retain(|s| open.contains(&s.index));
        if inner.spares.is_empty() {
            let n = waiting::spare_count(self.request.n);
            inner.spares = waiting::random_spares(learner, n, round as u64);
        }
    }

    /// The background round: query, the last model's guesses on the batch and the spares,
    /// save ([`App::round`], on the worker's thread); then, whatever came of it, the answers
    /// that waited are taught ([`App::round_back`]).
    fn run_round(self: Arc<Self>, learner: Learner, request: QueryRequest) {
        let app = Arc::clone(&self);
        super::worker::retrain(
            learner,
            move |learner| app.round(learner, &request),
            move |learner, result| self.round_back(learner, result),
        );
    }

    /// One round on `learner`: the batch queried, the guesses shown beside it and the spares
    /// served while the next round trains, the batch read ahead.
    fn round(&self, learner: &mut Learner, request: &QueryRequest) -> Result<RoundDone> {
        let mut observer = ProgressObserver {
            app: self,
            scored: None,
        };
        let key = learner.state().rounds.len() as u64 + 1;
        let batch = learner.query(request, &self.device, &mut observer)?;
        let shown: Vec<usize> = batch.iter().map(|q| q.index).collect();
        let predicted = learner.predicted(&shown, &self.device)?;
        learner.save(&self.dir)?;
        let ids = self.items.ids();
        let mut guesses: HashMap<String, (usize, f32)> = predicted
            .map(|p| {
                shown
                    .iter()
                    .zip(p)
                    .map(|(&i, cp)| (ids[i].clone(), cp))
                    .collect()
            })
            .unwrap_or_default();
        let n = waiting::spare_count(request.n);
        let spares = waiting::spares_after(learner, observer.scored.take(), n, key);
        let spares = waiting::guess_spares(learner, spares, &self.device, &mut guesses);
        // A streamed pool's batch (and spares, where they read) is read once now, not
        // once per image shown.
        let pending: Vec<usize> = learner
            .state()
            .pending
            .iter()
            .filter_map(|p| self.items.position(&p.id))
            .collect();
        let with_spares = [&pending[..], &waiting::indices(&spares)[..]].concat();
        if learner.items().prefetch(&with_spares).is_err() {
            learner.items().prefetch(&pending)?;
        }
        Ok(RoundDone {
            queried: batch.len(),
            spares,
            guesses,
        })
    }

    /// The learner back from a round: what the round gave shown (or its failure reported),
    /// the answers that waited taught, and the next round started where the new batch is
    /// answered already.
    fn round_back(
        self: &Arc<Self>,
        mut learner: Learner,
        result: std::result::Result<RoundDone, String>,
    ) {
        let mut inner = guard(&self.inner);
        let inner = &mut *inner;
        let ok = match result {
            Ok(done) => {
                inner.undo.clear();
                inner.predicted = done.guesses;
                inner.spares = done.spares;
                let r = learner.state().rounds.last();
                let stopping = learner.state().stopping();
                (self.events)(&ServeEvent::RoundFinished {
                    round: r.map_or(0, |r| r.round),
                    queried: done.queried,
                    test_acc: r.and_then(|r| r.test_acc),
                    stopping: stopping.as_ref(),
                });
                true
            }
            Err(m) => self.failed(inner, m),
        };
        if ok {
            inner.spare_skips.clear();
        } else if learner.state().rounds.len() != inner.state.rounds.len() {
            // The guesses on show are the last model's, not the failed round's.
            inner.predicted.clear();
        }
        let taught = self.teach_waiting(&mut learner, inner);
        inner.state = learner.state().clone();
        inner.ranks = ranks(&inner.state);
        inner.learner = Some(learner);
        *guard(&self.progress) = None;
        match taught {
            Err(e) => {
                self.failed(inner, format!("the answers given while it trained: {e}"));
            }
            // Every item of the new batch may have been answered while it trained.
            Ok(()) if ok => self.after_change(inner),
            Ok(()) => {}
        }
    }

    /// Reports a failed round or save; returns `false`.
    pub(super) fn failed(&self, inner: &mut Inner, m: String) -> bool {
        (self.events)(&ServeEvent::Failed { problem: &m });
        inner.error = Some(m);
        false
    }
}

/// What a round gives the page: the batch's size, the spares to serve and the guesses shown.
struct RoundDone {
    queried: usize,
    spares: Vec<super::state::Spare>,
    guesses: HashMap<String, (usize, f32)>,
}

struct ProgressObserver<'a> {
    app: &'a App,
    /// The round's `(candidates, scores)`, when it ranked them.
    scored: Option<(Vec<usize>, Vec<f32>)>,
}

impl Observer for ProgressObserver<'_> {
    fn on(&mut self, event: &Event<'_>) -> Control {
        let (phase, done, total) = match *event {
            Event::TrainStep { step, steps, .. } => ("training", step, steps),
            Event::Scoring { done, total } => ("scoring", done, total),
            Event::Scored {
                indices, scores, ..
            } => {
                self.scored = Some((indices.to_vec(), scores.to_vec()));
                return Control::Continue;
            }
            _ => return Control::Continue,
        };
        if let Some(p) = guard(&self.app.progress).as_mut() {
            p.phase = phase;
            p.done = done;
            p.total = total;
        }
        Control::Continue
    }
}

/// The keyboard key of each class: the name itself when every name is one distinct letter
/// or digit (digits `0`-`9` press their own key), else `1`-`9`, then `a`-`z`, and none past
/// 35 classes (buttons only).
pub fn class_keys(classes: &[String]) -> Vec<Option<char>> {
    let single: Vec<Option<char>> = classes
        .iter()
        .map(|c| {
            let mut it = c.chars();
            match (it.next(), it.next()) {
                (Some(ch), None) if ch.is_ascii_alphanumeric() => Some(ch.to_ascii_lowercase()),
                _ => None,
            }
        })
        .collect();
    let distinct: HashSet<char> = single.iter().flatten().copied().collect();
    if single.iter().all(Option::is_some) && distinct.len() == classes.len() {
        return single;
    }
    (0..classes.len())
        .map(|k| match k {
            0..=8 => char::from_digit(k as u32 + 1, 10),
            9..=34 => Some((b'a' + (k - 9) as u8) as char),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::class_keys;

    fn keys(names: &[&str]) -> String {
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        class_keys(&names)
            .into_iter()
            .map(|k| k.unwrap_or('-'))
            .collect()
    }

    #[test]
    fn single_character_classes_are_their_own_keys_else_digits_then_letters() {
        assert_eq!(keys(&["0", "1", "2"]), "012");
        assert_eq!(keys(&["Cat", "dog"]), "12");
        assert_eq!(keys(&["a", "A"]), "12");
        assert_eq!(keys(&["x", " "]), "12");
        let many: Vec<String> = (0..40).map(|i| format!("c{i}")).collect();
        let k: String = class_keys(&many)
            .into_iter()
            .map(|k| k.unwrap_or('-'))
            .collect();
        assert_eq!(k, "123456789abcdefghijklmnopqrstuvwxyz-----");
    }
}
