//! A query's batch as Label Studio tasks to import, with the labeling configuration beside
//! them, and a batch written in either of a query's formats.

use super::project::{labeling_config, ordered_confidence, prediction, short};
use crate::data::image::encode_png;
use crate::error::{Error, Result};
use crate::session::{BatchFormat, Learner, Query};
use base64::Engine;
use serde_json::{json, Value};
use std::path::Path;

/// The Label Studio tasks of a query's batch (see the [module docs](super)); `predicted`
/// is each item's `(class, probability)` from the model that ranked them, when there is one.
pub fn tasks(
    learner: &Learner,
    batch: &[Query],
    predicted: Option<&[(usize, f32)]>,
) -> Result<Value> {
    let items = learner.items();
    let state = learner.state();
    let shape = items.item_shape();
    let obj = items.object_name();
    let len: usize = shape.iter().product();
    let round = state.rounds.len();
    let indices: Vec<usize> = batch.iter().map(|q| q.index).collect();
    let shown = items.displays();
    // Items shown by their text or image file are not read (a streamed pool's pass).
    let values = match shown {
        Some(_) => Vec::new(),
        None => items.values(&indices)?,
    };
    let scores = predicted.map(|p| {
        let conf: Vec<f32> = p.iter().map(|&(_, prob)| prob).collect();
        ordered_confidence(&conf)
    });
    let mut out = Vec::with_capacity(batch.len());
    let data_uri = |media: &str, bytes: &[u8]| {
        format!(
            "data:{media};base64,{}",
            base64::engine::general_purpose::STANDARD.encode(bytes)
        )
    };
    for (rank, q) in batch.iter().enumerate() {
        let content = match shown {
            Some(d) => match d.image_bytes(q.index) {
                Some(read) => {
                    let (bytes, media) = read?;
                    data_uri(media, &bytes)
                }
                None => d.value(q.index).unwrap_or_default().to_string(),
            },
            None => {
                let x = &values[rank * len..(rank + 1) * len];
                if obj == "image" {
                    data_uri("image/png", &encode_png(x, shape)?)
                } else {
                    x.iter()
                        .map(|v| v.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            }
        };
        let mut task = json!({
            "data": {
                obj: content,
                "alkit_id": q.id,
                "alkit_index": q.index,
                "alkit_round": round,
                "alkit_rank": rank + 1,
            },
        });
        let acquisition = q.score.map(short);
        if let Some(s) = &acquisition {
            task["data"]["alkit_score"] = s.clone();
        }
        if let (Some(p), Some(scores)) = (predicted, &scores) {
            let meta = json!({
                "alkit_round": round,
                "alkit_rank": rank + 1,
                "alkit_score": acquisition,
            });
            task["predictions"] = json!([prediction(state, obj, p[rank], scores[rank], meta)]);
        }
        out.push(task);
    }
    Ok(Value::Array(out))
}

/// Writes [`tasks`] to `out` atomically, and the matching labeling configuration beside it as
/// `OUT.xml` (`batch.json` -> `batch.xml`).
pub fn write_tasks(
    learner: &Learner,
    batch: &[Query],
    predicted: Option<&[(usize, f32)]>,
    out: &Path,
) -> Result<()> {
    let t = tasks(learner, batch, predicted)?;
    let mut bytes = serde_json::to_vec_pretty(&t)
        .map_err(|e| Error::state(out, format!("cannot serialise: {e}")))?;
    bytes.push(b'\n');
    crate::fsutil::write_atomic(out, &bytes)?;
    let st = learner.state();
    crate::fsutil::write_atomic(
        &out.with_extension("xml"),
        labeling_config(&st.classes, learner.items().object_name()).as_bytes(),
    )
}

/// Writes a query's `batch` to `out` in `format` (Label Studio's tasks carry the predictions
/// of the model the query trained, computed on `device`).
pub fn write_batch(
    learner: &Learner,
    format: BatchFormat,
    out: &Path,
    batch: &[Query],
    device: &candle_core::Device,
) -> Result<()> {
    match format {
        BatchFormat::Csv => learner.write_batch(out, batch),
        BatchFormat::LabelStudio => {
            let indices: Vec<usize> = batch.iter().map(|q| q.index).collect();
            let predicted = learner.predicted(&indices, device)?;
            write_tasks(learner, batch, predicted.as_deref(), out)
        }
    }
}
