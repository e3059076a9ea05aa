//! The bodies Label Studio sends the backend, read into typed values that keep only what the
//! backend uses: a task's id and the strings of its `data`, an annotation's choices and
//! marks, a project's number. Everything else is skipped as it is parsed (serde's
//! `IgnoredAny`), so a request's memory is its body and a small multiple of the fields kept,
//! whatever the body holds: a `[0, 0, ...]` of 60 MiB is refused at its first element
//! instead of becoming millions of JSON values, and a predict request holds at most
//! [`MAX_TASKS`] tasks, so that its answer stays bounded too.

use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use std::fmt;
use std::marker::PhantomData;

/// The most tasks one predict (or legacy train) request may carry. Label Studio sends every
/// task a person selected in one request; a hundred thousand is a project's whole queue.
pub const MAX_TASKS: usize = 100_000;

/// A project as Label Studio names it: `"3.1795862723"` (setup and predict: the number, a
/// dot, a timestamp), `3`, or an object with `"id": 3` (webhooks); `None` when absent or
/// unreadable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProjectId(pub Option<u64>);

impl<'de> Deserialize<'de> for ProjectId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ProjectId;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a project number, `N.timestamp`, or an object with an `id`")
            }
            fn visit_u64<E>(self, v: u64) -> Result<ProjectId, E> {
                Ok(ProjectId(Some(v)))
            }
            fn visit_i64<E>(self, v: i64) -> Result<ProjectId, E> {
                Ok(ProjectId(u64::try_from(v).ok()))
            }
            fn visit_f64<E>(self, _: f64) -> Result<ProjectId, E> {
                Ok(ProjectId(None))
            }
            fn visit_bool<E>(self, _: bool) -> Result<ProjectId, E> {
                Ok(ProjectId(None))
            }
            fn visit_unit<E>(self) -> Result<ProjectId, E> {
                Ok(ProjectId(None))
            }
            fn visit_str<E>(self, v: &str) -> Result<ProjectId, E> {
                let number = v.split('.').next().unwrap_or("");
                Ok(ProjectId(number.parse().ok()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ProjectId, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(ProjectId(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ProjectId, A::Error> {
                let mut id = ProjectId(None);
                while let Some(k) = map.next_key::<Key>()? {
                    if k.0 == "id" {
                        id = map.next_value()?;
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(id)
            }
        }
        d.deserialize_any(V)
    }
}

/// An object's key, kept only when it is short (a field alkit reads); longer keys are read
/// and dropped.
struct Key(String);

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(Key(if s.len() <= 64 { s } else { String::new() }))
    }
}

/// A value kept when it is a string, skipped otherwise.
struct MaybeStr(Option<String>);

impl<'de> Deserialize<'de> for MaybeStr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = MaybeStr;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_str<E>(self, v: &str) -> Result<MaybeStr, E> {
                Ok(MaybeStr(Some(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> Result<MaybeStr, E> {
                Ok(MaybeStr(Some(v)))
            }
            fn visit_u64<E>(self, _: u64) -> Result<MaybeStr, E> {
                Ok(MaybeStr(None))
            }
            fn visit_i64<E>(self, _: i64) -> Result<MaybeStr, E> {
                Ok(MaybeStr(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<MaybeStr, E> {
                Ok(MaybeStr(None))
            }
            fn visit_bool<E>(self, _: bool) -> Result<MaybeStr, E> {
                Ok(MaybeStr(None))
            }
            fn visit_unit<E>(self) -> Result<MaybeStr, E> {
                Ok(MaybeStr(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<MaybeStr, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(MaybeStr(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MaybeStr, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(MaybeStr(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// A task's `data`: its string fields by name, in order (the item's `alkit_id`, or the URL
/// of the image it shows); fields of other types are skipped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Data(pub Vec<(String, String)>);

impl Data {
    /// The string field `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

impl<'de> Deserialize<'de> for Data {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Data;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a task's `data` object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Data, A::Error> {
                let mut fields = Vec::new();
                while let Some(k) = map.next_key::<String>()? {
                    if let MaybeStr(Some(v)) = map.next_value()? {
                        fields.push((k, v));
                    }
                }
                Ok(Data(fields))
            }
        }
        d.deserialize_map(V)
    }
}

/// A list of at most `N` values; one more is an error at that element.
#[derive(Debug, Clone, PartialEq)]
pub struct Bounded<T, const N: usize>(pub Vec<T>);

impl<'de, T: Deserialize<'de>, const N: usize> Deserialize<'de> for Bounded<T, N> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T, const N: usize>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>, const N: usize> Visitor<'de> for V<T, N> {
            type Value = Bounded<T, N>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "a list of at most {N} values")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Bounded<T, N>, A::Error> {
                let mut out = Vec::new();
                while let Some(v) = seq.next_element()? {
                    if out.len() == N {
                        return Err(serde::de::Error::custom(format!(
                            "more than {N} values in one list"
                        )));
                    }
                    out.push(v);
                }
                Ok(Bounded(out))
            }
        }
        d.deserialize_seq(V(PhantomData))
    }
}

/// One value or a list of them (a webhook's `task` and `annotation`: single for
/// `ANNOTATION_CREATED`, lists for `ANNOTATIONS_CREATED`), at most [`MAX_TASKS`].
#[derive(Debug, Clone, PartialEq)]
pub struct OneOrMany<T>(pub Vec<T>);

impl<T> Default for OneOrMany<T> {
    fn default() -> Self {
        OneOrMany(Vec::new())
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for OneOrMany<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = OneOrMany<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object or a list of objects")
            }
            fn visit_unit<E>(self) -> Result<OneOrMany<T>, E> {
                Ok(OneOrMany(Vec::new()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<OneOrMany<T>, A::Error> {
                let one = T::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(OneOrMany(vec![one]))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<OneOrMany<T>, A::Error> {
                let many = Bounded::<T, MAX_TASKS>::deserialize(
                    serde::de::value::SeqAccessDeserializer::new(seq),
                )?;
                Ok(OneOrMany(many.0))
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// One task as Label Studio sends it (its annotations, when it carries them, skipped).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Task {
    /// Label Studio's task number.
    #[serde(default)]
    pub id: Option<u64>,
    /// Its data's string fields (`None`: no `data` object).
    #[serde(default)]
    pub data: Option<Data>,
}

/// A task with its annotations, as the legacy train request carries every annotated task.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct AnnotatedTask {
    /// Label Studio's task number.
    #[serde(default)]
    pub id: Option<u64>,
    /// Its data's string fields.
    #[serde(default)]
    pub data: Option<Data>,
    /// Its annotations.
    #[serde(default)]
    pub annotations: Option<Bounded<Annotation, MAX_TASKS>>,
}

impl AnnotatedTask {
    /// The task without its annotations.
    pub fn task(&self) -> Task {
        Task {
            id: self.id,
            data: self.data.clone(),
        }
    }
}

/// One result of an annotation: its type and, for a `choices` result, the choices. Results
/// of other kinds are read as leniently as their fields allow: they never refuse a request.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct AnnotationResult {
    /// `choices`, `rectanglelabels`, ... (`None` when absent or not a string).
    #[serde(rename = "type", default, deserialize_with = "maybe_str")]
    pub kind: Option<String>,
    /// The result's value (`None` when absent or not an object).
    #[serde(default, deserialize_with = "lenient")]
    pub value: Option<ResultValue>,
}

/// The part of a result's `value` the backend reads.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ResultValue {
    /// The classes chosen, when they are a list of strings (`None` otherwise).
    #[serde(default, deserialize_with = "strings")]
    pub choices: Option<Vec<String>>,
}

fn maybe_str<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(MaybeStr::deserialize(d)?.0)
}

fn lenient<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    Ok(Lenient::<T>::deserialize(d)?.0)
}

/// A list of strings (at most 4,096), or `None` for any other value.
fn strings<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Option<Vec<String>>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("any JSON value")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Some(Vec::new());
            while let Some(MaybeStr(v)) = seq.next_element()? {
                match (&mut out, v) {
                    (Some(list), Some(s)) if list.len() < 4096 => list.push(s),
                    _ => out = None,
                }
            }
            Ok(out)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok(None)
        }
        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
    }
    d.deserialize_any(V)
}

/// One annotation: its results and marks.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Annotation {
    /// The task it annotates (webhooks name it by number).
    #[serde(default)]
    pub task: Option<TaskRef>,
    /// Skipped by the annotator.
    #[serde(default)]
    pub was_cancelled: Option<bool>,
    /// Its results (`None`: no `result` list).
    #[serde(default)]
    pub result: Option<Bounded<AnnotationResult, MAX_TASKS>>,
}

impl Annotation {
    /// The single choice of the annotation, `None` when it has none (cancelled, or results
    /// of other kinds).
    pub fn choice(&self) -> std::result::Result<Option<String>, String> {
        if self.was_cancelled == Some(true) {
            return Ok(None);
        }
        let Some(results) = &self.result else {
            return Err("an annotation without a `result` list".into());
        };
        let mut chosen: Vec<&str> = Vec::new();
        for r in &results.0 {
            if r.kind.as_deref() != Some("choices") {
                continue;
            }
            let Some(list) = r.value.as_ref().and_then(|v| v.choices.as_ref()) else {
                return Err("a `choices` result without a `value.choices` list".into());
            };
            chosen.extend(list.iter().map(String::as_str));
        }
        match chosen.as_slice() {
            [] => Ok(None),
            [c] => Ok(Some(c.to_string())),
            many => Err(format!(
                "one annotation chose {many:?}; alkit takes one class per item"
            )),
        }
    }
}

/// An annotation's task: a number in webhooks, an object elsewhere (its `id` kept).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TaskRef(pub Option<u64>);

impl<'de> Deserialize<'de> for TaskRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(TaskRef(ProjectId::deserialize(d)?.0))
    }
}

/// `POST /setup`: the project, and nothing else the backend needs.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Setup {
    /// The project.
    #[serde(default)]
    pub project: ProjectId,
}

/// `POST /predict`.
#[derive(Debug, Clone, Deserialize)]
pub struct Predict {
    /// The tasks to predict.
    pub tasks: Bounded<Task, MAX_TASKS>,
    /// The project's labeling configuration.
    #[serde(default)]
    pub label_config: Option<String>,
    /// The project.
    #[serde(default)]
    pub project: ProjectId,
}

/// The legacy `POST /train`: every annotated task of the project.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Train {
    /// The tasks, with their annotations.
    #[serde(default)]
    pub annotations: Option<Bounded<AnnotatedTask, MAX_TASKS>>,
    /// The project.
    #[serde(default)]
    pub project: ProjectId,
}

/// `POST /webhook`, read first for its action and project only (every other field skipped),
/// so that events the backend does not act on are acknowledged whatever they carry. A body
/// that is not an object is an event without an action.
#[derive(Debug, Clone, Default)]
pub struct Event {
    /// `ANNOTATION_CREATED`, `START_TRAINING`, ...
    pub action: Option<String>,
    /// The project.
    pub project: ProjectId,
}

impl<'de> Deserialize<'de> for Event {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = Lenient::<EventFields>::deserialize(d)?
            .0
            .unwrap_or_default();
        Ok(Event {
            action: w.action.and_then(|a| a.0),
            project: w.project,
        })
    }
}

/// The fields of an [`Event`].
#[derive(Default, Deserialize)]
struct EventFields {
    #[serde(default)]
    action: Option<MaybeStr>,
    #[serde(default)]
    project: ProjectId,
}

/// A `T` read from an object; any other JSON value is read and dropped (`None`).
struct Lenient<T>(Option<T>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Lenient<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Lenient<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Lenient<T>, A::Error> {
                let t = T::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(Lenient(Some(t)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Lenient<T>, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Lenient(None))
            }
            fn visit_str<E>(self, _: &str) -> Result<Lenient<T>, E> {
                Ok(Lenient(None))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Lenient<T>, E> {
                Ok(Lenient(None))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Lenient<T>, E> {
                Ok(Lenient(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Lenient<T>, E> {
                Ok(Lenient(None))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Lenient<T>, E> {
                Ok(Lenient(None))
            }
            fn visit_unit<E>(self) -> Result<Lenient<T>, E> {
                Ok(Lenient(None))
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// `POST /webhook`: an event. A body that is not an object is an event without an action
/// (acknowledged and ignored, as Label Studio's other events are).
#[derive(Debug, Clone, Default)]
pub struct Webhook {
    /// `ANNOTATION_CREATED`, `ANNOTATIONS_CREATED`, `START_TRAINING`, ...
    pub action: Option<String>,
    /// The tasks annotated (one, or several for `ANNOTATIONS_CREATED`).
    pub task: OneOrMany<Task>,
    /// The annotations (one, or several, each naming its task).
    pub annotation: OneOrMany<Annotation>,
    /// The project.
    pub project: ProjectId,
}

impl Webhook {
    /// Each annotation with its task: the one task of a single annotation, else the task
    /// whose number the annotation names; `None` where there is no such task.
    pub fn pairs(&self) -> Vec<(Option<&Task>, &Annotation)> {
        let tasks = &self.task.0;
        self.annotation
            .0
            .iter()
            .map(|a| {
                let t = if tasks.len() == 1 && self.annotation.0.len() == 1 {
                    tasks.first()
                } else {
                    a.task
                        .and_then(|r| r.0)
                        .and_then(|id| tasks.iter().find(|t| t.id == Some(id)))
                };
                (t, a)
            })
            .collect()
    }
}

impl<'de> Deserialize<'de> for Webhook {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Webhook;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a webhook event")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Webhook, A::Error> {
                let mut w = Webhook::default();
                while let Some(k) = map.next_key::<Key>()? {
                    match k.0.as_str() {
                        "action" => w.action = map.next_value::<MaybeStr>()?.0,
                        "task" => w.task = map.next_value()?,
                        "annotation" | "annotations" => w.annotation = map.next_value()?,
                        "project" => w.project = map.next_value()?,
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(w)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Webhook, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Webhook::default())
            }
            fn visit_str<E>(self, _: &str) -> Result<Webhook, E> {
                Ok(Webhook::default())
            }
            fn visit_u64<E>(self, _: u64) -> Result<Webhook, E> {
                Ok(Webhook::default())
            }
            fn visit_i64<E>(self, _: i64) -> Result<Webhook, E> {
                Ok(Webhook::default())
            }
            fn visit_f64<E>(self, _: f64) -> Result<Webhook, E> {
                Ok(Webhook::default())
            }
            fn visit_bool<E>(self, _: bool) -> Result<Webhook, E> {
                Ok(Webhook::default())
            }
            fn visit_unit<E>(self) -> Result<Webhook, E> {
                Ok(Webhook::default())
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_keep_what_the_backend_reads_and_refuse_what_they_cannot_hold() {
        let s: Setup = serde_json::from_str(
            r#"{"project": "3.1795862723", "schema": "<View/>", "access_token": "x"}"#,
        )
        .unwrap();
        assert_eq!(s.project, ProjectId(Some(3)));
        let w: Webhook = serde_json::from_str(
            r#"{"action": "ANNOTATION_CREATED", "project": {"id": 7, "title": "t", "x": [1]},
                "task": {"id": 5, "data": {"image": "/data/local-files/?d=a.png", "n": [1, {}]}},
                "annotation": {"id": 9, "ground_truth": true, "result": [
                  {"type": "rectanglelabels", "value": {"x": 1}},
                  {"type": "choices", "value": {"choices": ["cat"]}}]}}"#,
        )
        .unwrap();
        assert_eq!(w.action.as_deref(), Some("ANNOTATION_CREATED"));
        assert_eq!(w.project, ProjectId(Some(7)));
        let pairs = w.pairs();
        let (task, a) = (pairs[0].0.unwrap(), pairs[0].1);
        assert_eq!(task.id, Some(5));
        assert_eq!(
            task.data.as_ref().unwrap().0,
            vec![("image".into(), "/data/local-files/?d=a.png".into())]
        );
        assert_eq!(a.choice().unwrap().as_deref(), Some("cat"));
        // Annotations made from predictions arrive as lists, each naming its task.
        let many: Webhook = serde_json::from_str(
            r#"{"action": "ANNOTATIONS_CREATED",
                "task": [{"id": 1, "data": {"alkit_id": "a"}}, {"id": 2, "data": {"alkit_id": "b"}}],
                "annotation": [{"task": 2, "result": []}, {"task": 1, "result": []}, {"task": 9}]}"#,
        )
        .unwrap();
        let ids: Vec<Option<u64>> = many
            .pairs()
            .iter()
            .map(|(t, _)| t.and_then(|t| t.id))
            .collect();
        assert_eq!(ids, vec![Some(2), Some(1), None]);
        for not_an_event in [r#""text""#, "[1, 2]", "3", "null"] {
            let w: Webhook = serde_json::from_str(not_an_event).unwrap();
            assert!(w.action.is_none() && w.pairs().is_empty());
        }
        // A list of numbers where tasks go is refused at its first element.
        let zeros = format!("{{\"tasks\": [{}0]}}", "0,".repeat(100_000));
        let e = serde_json::from_str::<Predict>(&zeros)
            .unwrap_err()
            .to_string();
        assert!(e.contains("column 12"), "{e}");
        let many = format!("[{}1]", "1,".repeat(10));
        let e = serde_json::from_str::<Bounded<u8, 10>>(&many)
            .unwrap_err()
            .to_string();
        assert!(e.contains("more than 10"), "{e}");
    }
}
