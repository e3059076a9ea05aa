//! The backend's shared state and its endpoints: the secret checked on every request, bodies
//! read within the shared budget, `/setup`, `/predict` (the last model's view of each task's
//! item), and the catch-up that reads the project's answers back from Label Studio.

use super::budget::{Budget, Taken};
use super::reconcile::LabelStudioApi;
use super::requests::{self, ProjectId, Task};
use super::settings::{write_project, BackendEvent, BackendEvents, BODY_WAIT, MAX_REQUEST};
use crate::label_studio::{image_path, short, ExportRow, FROM_NAME};
use crate::serve::http::{self, Reply};
use crate::serve::state::guard;
use crate::session::journal::{self, Queued};
use crate::session::{Answer, Learner, PoolItems, QueryRequest, SessionLock, SessionState};
use candle_core::Device;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The model's view of one pool item.
#[derive(Clone, Copy)]
pub(super) struct View {
    /// Its most probable class.
    pub(super) class: usize,
    /// That class's probability.
    pub(super) prob: f32,
    /// The prediction's `score` (see [`ordered_confidence`](crate::label_studio::ordered_confidence)).
    pub(super) score: f64,
    /// Its rank from 1 among the ranked candidates (`None`: labeled).
    pub(super) rank: Option<usize>,
    /// Its acquisition score, when the strategy scores items.
    pub(super) acquisition: Option<f32>,
}

/// The last model and its view of every pool item.
pub(super) struct Model {
    pub(super) round: usize,
    pub(super) items: Vec<View>,
}

pub(super) struct Inner {
    /// `None` while the training thread holds it.
    pub(super) learner: Option<Learner>,
    pub(super) state: SessionState,
    pub(super) model: Option<Model>,
    /// Labels taught since the last training started.
    pub(super) since: usize,
    /// A retraining was asked for while one ran.
    pub(super) again: bool,
    /// Answers waiting for the training to end.
    pub(super) queue: Vec<Queued>,
    pub(super) error: Option<String>,
}

pub(super) struct App {
    pub(super) dir: PathBuf,
    pub(super) items: PoolItems,
    /// Tasks may name items by image path (an image-folder pool).
    pub(super) image_folder: bool,
    pub(super) api: Option<LabelStudioApi>,
    /// The Label Studio project served, as last named (or given).
    pub(super) project: Mutex<Option<u64>>,
    /// A catch-up is reading the project.
    pub(super) catching_up: AtomicBool,
    pub(super) budget: Budget,
    pub(super) secret: String,
    pub(super) hosts: Option<Vec<String>>,
    pub(super) version: String,
    pub(super) request: QueryRequest,
    pub(super) retrain_every: usize,
    pub(super) device: Device,
    pub(super) events: BackendEvents,
    pub(super) inner: Mutex<Inner>,
    pub(super) _lock: SessionLock,
}

/// The `name` and `toName` of the first `Choices` tag of a labeling configuration.
pub(super) fn choices_tag(config: &str) -> Option<(String, String)> {
    let at = config.find("<Choices")?;
    let tag = &config[at..];
    let tag = &tag[..tag.find('>')?];
    let attr = |name: &str| {
        let k = tag.find(&format!(" {name}=\""))? + name.len() + 3;
        let v = &tag[k..];
        Some(v[..v.find('"')?].to_string())
    };
    Some((attr("name")?, attr("toName")?))
}

impl App {
    pub(super) fn route(self: &Arc<Self>, req: &mut http::Request<'_>) -> Reply {
        if let Err(r) = http::host_ok(&self.hosts, req) {
            return r;
        }
        let url = req.url().to_string();
        let (path, _) = http::split_url(&url);
        // The secret as the first segment, or as Basic authentication's password; both
        // compared in constant time.
        let after = path.strip_prefix('/').unwrap_or("");
        let end = after.find('/').unwrap_or(after.len());
        let route = http::same_token(&after[..end], &self.secret).then(|| &after[end..]);
        let route = match route {
            Some(r) => r,
            None if http::basic_password(req)
                .is_some_and(|p| http::same_token(&p, &self.secret)) =>
            {
                path
            }
            None => {
                return Reply::error(
                    401,
                    "missing or wrong secret: use the URL alkit printed, or Basic \
                     authentication with the secret as password",
                )
            }
        };
        let route = route.trim_end_matches('/');
        let get = matches!(req.method(), "GET" | "HEAD");
        let post = req.method() == "POST";
        match route {
            "" | "/health" if get => self.health(),
            "/versions" if get => Reply::json(200, &json!({ "versions": [self.version] })),
            "/setup" if post => match self.body::<requests::Setup>(req) {
                Ok((b, _held)) => {
                    self.remember(b.project);
                    Reply::json(200, &json!({ "model_version": self.version }))
                }
                Err(e) => e,
            },
            "/predict" if post => match self.body::<requests::Predict>(req) {
                Ok((b, _held)) => self.predict(&b),
                Err(e) => e,
            },
            "/webhook" if post => match self.raw_body(req) {
                Ok((bytes, _held)) => self.webhook(&bytes),
                Err(e) => e,
            },
            "/train" if post => match self.body::<requests::Train>(req) {
                Ok((b, _held)) => self.train(&b),
                Err(e) => e,
            },
            "" | "/health" | "/versions" | "/setup" | "/predict" | "/webhook" | "/train" => {
                Reply::error(405, "method not allowed")
            }
            _ => Reply::error(404, "no such endpoint"),
        }
    }

    /// The request's body, read within the shared budget of body bytes, which the returned
    /// share holds until it is dropped (after the answer is made).
    pub(super) fn raw_body(
        &self,
        req: &mut http::Request<'_>,
    ) -> std::result::Result<(Vec<u8>, Taken<'_>), Reply> {
        let declared = req.body_length();
        if declared > MAX_REQUEST as u64 {
            return Err(Reply::error(
                413,
                format!("bodies are at most {MAX_REQUEST} bytes"),
            ));
        }
        // Twice the body: its bytes, and what is parsed from them.
        let Some(taken) = self.budget.take(2 * declared, BODY_WAIT) else {
            let mut r = Reply::error(
                503,
                "the backend holds as many request bodies as it may; try again",
            );
            r.headers.push(("Retry-After", "1".to_string()));
            return Err(r);
        };
        Ok((http::body_bytes(req, MAX_REQUEST)?, taken))
    }

    /// The request's JSON body as `T` (see [`App::raw_body`]).
    pub(super) fn body<T: DeserializeOwned>(
        &self,
        req: &mut http::Request<'_>,
    ) -> std::result::Result<(T, Taken<'_>), Reply> {
        let (bytes, taken) = self.raw_body(req)?;
        let value = serde_json::from_slice(&bytes)
            .map_err(|e| Reply::error(400, format!("invalid JSON body: {e}")))?;
        Ok((value, taken))
    }

    /// Keeps the project Label Studio named, in memory and in the session folder.
    pub(super) fn remember(&self, project: ProjectId) {
        let Some(p) = project.0 else { return };
        let mut known = guard(&self.project);
        if *known != Some(p) {
            *known = Some(p);
            if let Err(e) = write_project(&self.dir, p) {
                let m = e.to_string();
                (self.events)(&BackendEvent::Failed { problem: &m });
            }
        }
    }

    /// Reads the project's answers back from Label Studio and teaches those the session
    /// lacks (module docs); reports what it did, or why it could not.
    pub(super) fn catch_up(self: &Arc<Self>) {
        let (Some(api), Some(project)) = (&self.api, *guard(&self.project)) else {
            return;
        };
        // One at a time: a second Start Training while the project is read asks for nothing
        // the first does not do.
        if self.catching_up.swap(true, Ordering::SeqCst) {
            return;
        }
        let items = &self.items;
        let namer =
            |url: &str| image_path::item_of_image(items, url).map(|i| items.ids()[i].clone());
        let images = self.image_folder.then_some(&namer as _);
        let read = api.answers(project, images);
        self.catching_up.store(false, Ordering::SeqCst);
        let (rows, problems) = match read {
            Ok(r) => r,
            Err(e) => {
                let m = e.to_string();
                (self.events)(&BackendEvent::Failed { problem: &m });
                return;
            }
        };
        for m in &problems {
            (self.events)(&BackendEvent::Refused { problem: m });
        }
        let taught = self.teach_missed(&rows);
        (self.events)(&BackendEvent::Reconciled {
            project,
            answers: rows.len(),
            taught,
        });
    }

    /// Teaches the answers read back from Label Studio that the session lacks, in one batch
    /// and one save (or one journal write while the model trains); each one the session's
    /// checks refuse is reported and left out. Returns how many were new.
    pub(super) fn teach_missed(&self, rows: &[ExportRow]) -> usize {
        let mut inner = guard(&self.inner);
        let inner = &mut *inner;
        let mut new: Vec<Queued> = Vec::new();
        for r in rows {
            let task = r.task.unwrap_or(0);
            let refuse = |m: String| (self.events)(&BackendEvent::Refused { problem: &m });
            if self.items.position(&r.id).is_none() {
                refuse(format!(
                    "Label Studio task {task}: `{}` is not an item of the session's pool",
                    r.id
                ));
                continue;
            }
            if !inner.state.classes.contains(&r.label) {
                refuse(format!(
                    "Label Studio task {task}: `{}` is not one of the classes {:?}",
                    r.label, inner.state.classes
                ));
                continue;
            }
            let held = inner
                .state
                .labeled
                .iter()
                .find(|l| l.id == r.id)
                .map(|l| &l.label);
            let waiting = inner
                .queue
                .iter()
                .chain(&new)
                .find(|q| q.id == r.id)
                .map(|q| &q.label);
            match held.or(waiting) {
                Some(l) if *l == r.label => {}
                Some(l) => refuse(format!(
                    "Label Studio task {task}: `{}` is already labeled `{l}`; Label Studio says `{}`",
                    r.id, r.label
                )),
                None => new.push(Queued {
                    task: Some(task),
                    ..Queued::new(r.id.clone(), r.label.clone())
                }),
            }
        }
        if new.is_empty() {
            return 0;
        }
        let count = new.len();
        let saved = match inner.learner.as_mut() {
            Some(learner) => {
                let answers: Vec<Answer> = new
                    .iter()
                    .enumerate()
                    .map(|(k, q)| Answer::new(k + 1, q.id.clone(), q.label.clone()))
                    .collect();
                let origin = PathBuf::from("Label Studio's project, read back");
                learner
                    .teach_file_answers(&answers, &origin)
                    .and_then(|_| learner.save_state(&self.dir))
                    .map(|()| inner.state = learner.state().clone())
            }
            None => {
                inner.queue.extend(new);
                journal::write(&self.dir, &inner.queue)
            }
        };
        if let Err(e) = saved {
            let m = format!("the answers read back from Label Studio were not saved: {e}");
            (self.events)(&BackendEvent::Failed { problem: &m });
            return 0;
        }
        inner.since += count;
        count
    }

    pub(super) fn health(&self) -> Reply {
        let inner = guard(&self.inner);
        Reply::json(
            200,
            &json!({
                "status": "UP",
                "model_class": "alkit",
                "model_version": self.version,
                "round": inner.model.as_ref().map(|m| m.round),
                "training": inner.learner.is_none(),
                "labeled": inner.state.labeled.len(),
                "queued": inner.queue.len(),
                "error": inner.error,
            }),
        )
    }

    pub(super) fn refuse(&self, status: u16, problem: String) -> Reply {
        (self.events)(&BackendEvent::Refused { problem: &problem });
        Reply::error(status, problem)
    }

    /// The pool item of a task: its `data.alkit_id`, or the pool image its data's URL or
    /// path names.
    pub(super) fn item_of(&self, task: &Task) -> std::result::Result<usize, String> {
        let name = task
            .id
            .map_or("a task".to_string(), |t| format!("task {t}"));
        let Some(data) = &task.data else {
            return Err(format!("{name} has no `data` object"));
        };
        if let Some(id) = data.get("alkit_id") {
            return self
                .items
                .position(id)
                .ok_or_else(|| format!("{name}: `{id}` is not an item of the session's pool"));
        }
        if !self.image_folder {
            return Err(format!(
                "{name} has no `data.alkit_id`, and the pool is not an image folder whose \
                 paths could name it"
            ));
        }
        let named = data.0.iter().map(|(_, u)| {
            image_path::item_of_image(&self.items, u).map(|i| self.items.ids()[i].clone())
        });
        let found = image_path::one_item(named).map_err(|e| format!("{name}: {e}"))?;
        let id = found.ok_or_else(|| {
            format!("{name} has no `data.alkit_id` and no image path of the pool's folder")
        })?;
        self.items
            .position(&id)
            .ok_or_else(|| format!("{name}: `{id}` is not an item of the session's pool"))
    }

    pub(super) fn predict(&self, body: &requests::Predict) -> Reply {
        let started = std::time::Instant::now();
        self.remember(body.project);
        let tasks = &body.tasks.0;
        let (from, to) = match body.label_config.as_deref() {
            Some(c) => match choices_tag(c) {
                Some(t) => t,
                None => {
                    return self.refuse(
                        400,
                        "the project's labeling configuration has no `Choices` tag".into(),
                    )
                }
            },
            None => (FROM_NAME.to_string(), self.items.object_name().to_string()),
        };
        let inner = guard(&self.inner);
        let mut predicted = 0;
        let results: Vec<Value> = tasks
            .iter()
            .map(|t| {
                let i = match self.item_of(t) {
                    Ok(i) => i,
                    Err(e) => return json!({ "error": e }),
                };
                let Some(model) = &inner.model else {
                    return json!({
                        "error": "no model yet: alkit predicts once it has trained on the \
                                  session's labels"
                    });
                };
                let View {
                    class,
                    prob,
                    score,
                    rank,
                    acquisition,
                } = model.items[i];
                predicted += 1;
                json!({
                    "model_version": self.version,
                    "score": score,
                    "result": [{
                        "from_name": from,
                        "to_name": to,
                        "type": "choices",
                        "value": { "choices": [inner.state.classes[class]] },
                        "score": short(prob),
                        "meta": {
                            "alkit_round": model.round,
                            "alkit_rank": rank,
                            "alkit_score": acquisition.map(short),
                        },
                    }],
                })
            })
            .collect();
        drop(inner);
        (self.events)(&BackendEvent::Predicted {
            tasks: tasks.len(),
            predicted,
            seconds: started.elapsed().as_secs_f64(),
        });
        Reply::json(
            200,
            &json!({ "results": results, "model_version": self.version }),
        )
    }
}
