//! Checkpoints: configurations and weights that do not match.

use super::*;

pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(
            "ck-std-zero",
            |d, fx| {
                let c = ck_copy(d, fx);
                edit_json(&c.join("config.json"), |v| {
                    v["normalizer"]["std"][0] = 0.0.into()
                });
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            ["ck/config.json", "standard deviation 0"]
        ),
        case!(
            "ck-std-negative",
            |d, fx| {
                let c = ck_copy(d, fx);
                edit_json(&c.join("config.json"), |v| {
                    v["normalizer"]["std"][0] = (-1.0).into()
                });
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            ["ck/config.json", "-1"]
        ),
        case!(
            "ck-std-missing",
            |d, fx| {
                let c = ck_copy(d, fx);
                edit_json(&c.join("config.json"), |v| {
                    v["normalizer"]["std"] = serde_json::json!([])
                });
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            ["ck/config.json", "0 standard deviations"]
        ),
        case!(
            "ck-class-count",
            |d, fx| {
                let c = ck_copy(d, fx);
                edit_json(&c.join("config.json"), |v| {
                    v["classes"].as_array_mut().unwrap().pop();
                });
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            [
                "ck/config.json",
                "9 class names for a model with 10 outputs"
            ]
        ),
        case!(
            "ck-class-duplicate",
            |d, fx| {
                let c = ck_copy(d, fx);
                edit_json(&c.join("config.json"), |v| v["classes"][1] = "0".into());
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            ["ck/config.json", "`0`", "twice"]
        ),
        case!(
            "ck-nan-weights",
            |d, fx| {
                let c = ck_copy(d, fx);
                edit_weights(&c, |v| {
                    v[0].3[0..4].copy_from_slice(&f32::NAN.to_le_bytes())
                });
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            ["ck/model.safetensors", "NaN"]
        ),
        case!(
            "ck-wrong-dtype",
            |d, fx| {
                let c = ck_copy(d, fx);
                // Same bytes, declared as I32: read as F32 they would be garbage.
                edit_weights(&c, |v| v[0].1 = "I32".into());
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            ["ck/model.safetensors", "is I32", "F32"]
        ),
        case!(
            "ck-missing-tensor",
            |d, fx| {
                let c = ck_copy(d, fx);
                edit_weights(&c, |v| {
                    v.remove(0);
                });
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            ["ck/model.safetensors", "is missing"]
        ),
        case!(
            "ck-extra-tensor",
            |d, fx| {
                let c = ck_copy(d, fx);
                edit_weights(&c, |v| {
                    v.push(("evil".into(), "F32".into(), vec![1], f32s(&[1.0])))
                });
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            ["ck/model.safetensors", "unexpected tensor `evil`"]
        ),
        case!(
            "ck-wrong-shape",
            |d, fx| {
                let c = ck_copy(d, fx);
                edit_weights(&c, |v| {
                    let t = v.iter_mut().find(|t| t.2.len() == 2).unwrap();
                    t.2.reverse();
                });
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            ["ck/model.safetensors", "has shape"]
        ),
        case!(
            "ck-invalid-json",
            |d, fx| {
                let c = ck_copy(d, fx);
                std::fs::write(c.join("config.json"), "{\"format\": 1,").unwrap();
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            ["ck/config.json", "invalid JSON"]
        ),
        case!(
            "ck-format",
            |d, fx| {
                let c = ck_copy(d, fx);
                edit_json(&c.join("config.json"), |v| v["format"] = 99.into());
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            ["ck/config.json", "format 99"]
        ),
        case!(
            "ck-no-weights",
            |d, fx| {
                let c = ck_copy(d, fx);
                std::fs::remove_file(c.join("model.safetensors")).unwrap();
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            ["ck/model.safetensors"]
        ),
        case!(
            "ck-billion-weights",
            |d, fx| {
                let c = ck_copy(d, fx);
                edit_json(&c.join("config.json"), |v| {
                    v["arch"]["hidden"][0] = 1_000_000_000u64.into();
                });
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            ["ck/config.json", "weights"]
        ),
        case!(
            "ck-cnn-for-rows",
            |d, fx| {
                let c = ck_copy(d, fx);
                edit_json(&c.join("config.json"), |v| {
                    v["item_shape"] = serde_json::json!([1, 4]);
                    v["normalizer"]["mean"] = serde_json::json!([0.5]);
                });
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            ["ck/config.json", "cannot take items of shape [1, 4]"]
        ),
        case!(
            "ck-hf-revision-escape",
            none,
            [
                "score",
                "--checkpoint",
                "hf:a/b@../../../evil/ref",
                "--out",
                "{d}/s.csv"
            ],
            2,
            ["../../../evil/ref", "revision"]
        ),
        case!(
            "ck-mc-dropout-without-dropout",
            none,
            [
                "score",
                "--checkpoint",
                "{ck}",
                "--scorer",
                "bald",
                "--out",
                "{d}/s.csv"
            ],
            2,
            ["bald", "dropout"]
        ),
    ]
}
