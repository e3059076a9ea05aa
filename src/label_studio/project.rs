//! What Label Studio is told of a session: the labeling configuration to paste into the
//! project, the per-session `model_version`, confidences that sort in alkit's order, and one
//! prediction (a pre-annotation) as Label Studio takes it.

use crate::session::SessionState;
use serde_json::{json, Value};

/// Whether the session's pool is a folder of images, whose tasks imported into Label Studio
/// from that folder name their items by image path ([`image_path`](super::image_path)).
pub fn image_folder(state: &SessionState) -> bool {
    matches!(
        crate::data::source::Source::parse(&state.source),
        Ok(crate::data::source::Source::Images(_))
    )
}

/// The name of the `Choices` tag, in the labeling configuration and in results.
pub const FROM_NAME: &str = "label";

/// The labeling configuration (Label Studio's XML) matching [`write_tasks`](super::write_tasks)' files; `obj` is
/// the object tag the choices refer to, `image` or `text`
/// ([`crate::session::PoolItems::object_name`]).
pub fn labeling_config(classes: &[String], obj: &str) -> String {
    let escape = |s: &str| {
        s.replace('&', "&amp;")
            .replace('"', "&quot;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    let tag = if obj == "image" { "Image" } else { "Text" };
    let mut x = format!(
        "<View>\n  <{tag} name=\"{obj}\" value=\"${obj}\"/>\n  <Choices name=\"{FROM_NAME}\" toName=\"{obj}\" choice=\"single\" showInLine=\"true\">\n"
    );
    for c in classes {
        x.push_str(&format!("    <Choice value=\"{}\"/>\n", escape(c)));
    }
    x.push_str("  </Choices>\n</View>\n");
    x
}

/// The `model_version` of every prediction alkit makes for a session: `alkit-` and eight
/// hex digits of the session's pool fingerprint, seed and model, the same in every round.
/// A Label Studio project shows (and samples by) the predictions of one selected model
/// version, so a version per round would hide each new round's pre-annotations.
pub fn model_version(state: &SessionState) -> String {
    // FNV-1a: stable across runs and platforms, unlike the standard library's hasher.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let arch = format!("{:?}", state.config.arch);
    for b in state
        .pool_fingerprint
        .to_le_bytes()
        .iter()
        .chain(state.config.seed.to_le_bytes().iter())
        .chain(arch.as_bytes())
    {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("alkit-{:08x}", (h ^ (h >> 32)) as u32)
}

/// Prediction scores for items in alkit's order (first = label first) whose model gives
/// `confidence` (the probability of its most probable class) each: the nondecreasing
/// sequence closest to the confidences in least squares (isotonic regression, by pooling
/// adjacent violators), made strictly increasing by at most 1e-4. Where the model's
/// confidence already rises along alkit's order (entropy, margin and least-confidence
/// orders mostly do) each item shows its own confidence; where it does not, neighbours
/// show their average. Every value is in [0, 1].
pub fn ordered_confidence(confidence: &[f32]) -> Vec<f64> {
    let n = confidence.len();
    // Blocks of (sum, count), merged while a block's mean is below its predecessor's.
    let mut blocks: Vec<(f64, usize)> = Vec::with_capacity(n);
    for &c in confidence {
        let c = if c.is_finite() {
            f64::from(c).clamp(0.0, 1.0)
        } else {
            0.0
        };
        blocks.push((c, 1));
        while blocks.len() > 1 {
            let (s1, n1) = blocks[blocks.len() - 1];
            let (s0, n0) = blocks[blocks.len() - 2];
            if s0 / n0 as f64 <= s1 / n1 as f64 {
                break;
            }
            blocks.pop();
            let last = blocks.len() - 1;
            blocks[last] = (s0 + s1, n0 + n1);
        }
    }
    const EPS: f64 = 1e-4;
    let mut out = Vec::with_capacity(n);
    for (s, m) in blocks {
        for _ in 0..m {
            let k = out.len();
            out.push((s / m as f64) * (1.0 - EPS) + EPS * (k as f64 + 1.0) / (n as f64 + 1.0));
        }
    }
    out
}

/// One prediction as Label Studio takes it, in a task file or from the ML backend: `class`
/// of `classes` chosen with probability `prob`, the prediction's `score`, and alkit's
/// round, rank (from 1) and acquisition score in the result's `meta`.
pub fn prediction(
    state: &SessionState,
    obj: &str,
    (class, prob): (usize, f32),
    score: f64,
    meta: Value,
) -> Value {
    json!({
        "model_version": model_version(state),
        "score": score,
        "result": [{
            "from_name": FROM_NAME,
            "to_name": obj,
            "type": "choices",
            "value": { "choices": [state.classes[class]] },
            "score": short(prob),
            "meta": meta,
        }],
    })
}

/// An f32 as the JSON number of its shortest decimal form (not its f64 widening, which
/// prints rounding digits the value never had).
pub(crate) fn short(v: f32) -> Value {
    format!("{v}")
        .parse::<f64>()
        .ok()
        .and_then(serde_json::Number::from_f64)
        .map_or(Value::Null, Value::Number)
}
