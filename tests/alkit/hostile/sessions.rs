//! Sessions: state files, batches and answers that are broken or contradict.

use super::*;

pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(
            "sess-labeled-twice",
            |d, fx| {
                let s = sess_copy(d, fx);
                edit_json(&s.join("session.json"), |v| {
                    let first = v["labeled"][0].clone();
                    v["labeled"].as_array_mut().unwrap().push(first);
                });
            },
            [
                "query",
                "--state",
                "{d}/sess",
                "--n",
                "1",
                "--out",
                "{d}/q.csv"
            ],
            1,
            ["sess/session.json", "labeled twice"]
        ),
        case!(
            "sess-guess-not-a-class",
            |d, fx| {
                let s = sess_copy(d, fx);
                edit_json(&s.join("session.json"), |v| {
                    v["labeled"][0]["guess"] = serde_json::json!("zebra");
                });
            },
            [
                "query",
                "--state",
                "{d}/sess",
                "--n",
                "1",
                "--out",
                "{d}/q.csv"
            ],
            1,
            [
                "sess/session.json",
                "guess `zebra`",
                "not one of the classes"
            ]
        ),
        case!(
            "sess-journal-round-past-the-session",
            |d, fx| {
                let s = sess_copy(d, fx);
                let v: serde_json::Value =
                    serde_json::from_slice(&std::fs::read(s.join("session.json")).unwrap())
                        .unwrap();
                let (id, label) = (
                    v["labeled"][0]["id"].clone(),
                    v["labeled"][0]["label"].clone(),
                );
                let queue = serde_json::json!([{"id": id, "label": label, "round": 7}]);
                std::fs::write(s.join("label-studio-queue.json"), queue.to_string()).unwrap();
            },
            [
                "query",
                "--state",
                "{d}/sess",
                "--n",
                "1",
                "--out",
                "{d}/q.csv"
            ],
            1,
            [
                "label-studio-queue.json:1",
                "after round 7",
                "has had 0 rounds"
            ]
        ),
        case!(
            "sess-pending-and-labeled",
            |d, fx| {
                let s = sess_copy(d, fx);
                edit_json(&s.join("session.json"), |v| {
                    let id = v["labeled"][0]["id"].clone();
                    v["rounds"] = serde_json::json!([{"round": 1, "scorer": "entropy", "labeled": 2,
                    "queried": 1, "fit_acc": null, "test_acc": null, "test_nll": null}]);
                    v["pending"] = serde_json::json!([{"id": id, "round": 1, "score": 0.5}]);
                });
            },
            [
                "query",
                "--state",
                "{d}/sess",
                "--n",
                "1",
                "--out",
                "{d}/q.csv"
            ],
            1,
            ["sess/session.json", "pending"]
        ),
        case!(
            "sess-class-count",
            |d, fx| {
                let s = sess_copy(d, fx);
                edit_json(&s.join("session.json"), |v| {
                    v["classes"].as_array_mut().unwrap().push("bird".into());
                });
            },
            [
                "query",
                "--state",
                "{d}/sess",
                "--n",
                "1",
                "--out",
                "{d}/q.csv"
            ],
            1,
            ["sess/session.json", "2 outputs for 3 classes"]
        ),
        case!(
            "sess-rounds-misnumbered",
            |d, fx| {
                let s = sess_copy(d, fx);
                edit_json(&s.join("session.json"), |v| {
                    v["rounds"] = serde_json::json!([{"round": 2, "scorer": "entropy", "labeled": 2,
                    "queried": 1, "fit_acc": null, "test_acc": null, "test_nll": null}]);
                });
            },
            [
                "query",
                "--state",
                "{d}/sess",
                "--n",
                "1",
                "--out",
                "{d}/q.csv"
            ],
            1,
            ["sess/session.json", "round record 1 says round 2"]
        ),
        case!(
            "sess-stop-prediction-not-a-class",
            |d, fx| {
                let s = sess_copy(d, fx);
                edit_json(&s.join("session.json"), |v| {
                    v["stop_predicted"] = serde_json::json!([0, 1, 7]);
                });
            },
            [
                "query",
                "--state",
                "{d}/sess",
                "--n",
                "1",
                "--out",
                "{d}/q.csv"
            ],
            1,
            ["sess/session.json", "stop-set predictions"]
        ),
        case!(
            "sess-stopping-kappa-out-of-range",
            |d, fx| {
                let s = sess_copy(d, fx);
                edit_json(&s.join("session.json"), |v| {
                    v["rounds"] = serde_json::json!([{"round": 1, "scorer": "entropy", "labeled": 0,
                    "queried": 1, "fit_acc": null, "test_acc": null, "test_nll": null,
                    "stopping": {"kappa": 7.0, "changed": 0.1, "uncertainty": 0.5,
                    "delta_f": null}}]);
                });
            },
            [
                "query",
                "--state",
                "{d}/sess",
                "--n",
                "1",
                "--out",
                "{d}/q.csv"
            ],
            1,
            [
                "sess/session.json",
                "round 1's stopping measures are out of range"
            ]
        ),
        case!(
            "sess-stop-rule-unknown",
            |d, fx| {
                let s = sess_copy(d, fx);
                edit_json(&s.join("session.json"), |v| {
                    v["config"]["stop"] = "never".into()
                });
            },
            ["status", "--state", "{d}/sess"],
            1,
            ["sess/session.json", "unknown variant `never`"]
        ),
        case!(
            "sess-normaliser",
            |d, fx| {
                let s = sess_copy(d, fx);
                edit_json(&s.join("session.json"), |v| {
                    v["normalizer"]["std"] = serde_json::json!([]);
                });
            },
            [
                "query",
                "--state",
                "{d}/sess",
                "--n",
                "1",
                "--out",
                "{d}/q.csv"
            ],
            1,
            ["sess/session.json", "0 standard deviations"]
        ),
        case!(
            "sess-invalid-json",
            |d, fx| {
                let s = sess_copy(d, fx);
                std::fs::write(s.join("session.json"), "{\"format\":").unwrap();
            },
            ["status", "--state", "{d}/sess"],
            1,
            ["sess/session.json", "invalid JSON"]
        ),
        case!(
            "sess-ensemble-huge",
            |d, fx| {
                let s = sess_copy(d, fx);
                edit_json(&s.join("session.json"), |v| {
                    v["config"]["ensemble"] = 100_000_000u64.into();
                });
            },
            [
                "query",
                "--state",
                "{d}/sess",
                "--n",
                "1",
                "--out",
                "{d}/q.csv"
            ],
            1,
            ["sess/session.json", "100000000 members"]
        ),
        case!(
            "sess-pool-changed",
            |d, fx| {
                let s = sess_copy(d, fx);
                let pool = d.join("pool.csv");
                std::fs::write(&pool, POOL.replace("0.9", "0.8")).unwrap();
                edit_json(&s.join("session.json"), |v| {
                    v["source"] = pool.display().to_string().into();
                });
            },
            [
                "query",
                "--state",
                "{d}/sess",
                "--n",
                "1",
                "--out",
                "{d}/q.csv"
            ],
            1,
            [
                "sess/session.json",
                "changed since the session started",
                "1 changed (`p3`)"
            ]
        ),
        case!(
            "sess-pool-items-removed-added-renamed",
            |d, fx| {
                let s = sess_copy(d, fx);
                let pool = d.join("pool.csv");
                let edited = POOL
                    .replace("p5,,0.4,0.4\n", "p6,,0.7,0.7\np7,,0.6,0.6\n")
                    .replace("p4,", "q4,");
                std::fs::write(&pool, edited).unwrap();
                edit_json(&s.join("session.json"), |v| {
                    v["source"] = pool.display().to_string().into();
                });
            },
            [
                "query",
                "--state",
                "{d}/sess",
                "--n",
                "1",
                "--out",
                "{d}/q.csv"
            ],
            1,
            [
                "6 items then, 7 now",
                "1 removed (`p5`)",
                "2 added (`p6`, `p7`)",
                "1 renamed (`p4` -> `q4`)"
            ]
        ),
        case!(
            "sess-pool-item-removed-streamed",
            |d, fx| {
                let s = sess_copy(d, fx);
                let pool = d.join("pool.csv");
                std::fs::write(&pool, POOL.replace("p2,,0.5,0.5\n", "")).unwrap();
                edit_json(&s.join("session.json"), |v| {
                    v["source"] = pool.display().to_string().into();
                });
            },
            [
                "query",
                "--state",
                "{d}/sess",
                "--n",
                "1",
                "--stream",
                "--out",
                "{d}/q.csv"
            ],
            1,
            ["6 items then, 5 now", "1 removed (`p2`)"]
        ),
        case!(
            "sess-query-out-is-state",
            none,
            [
                "query",
                "--state",
                "{sess}",
                "--n",
                "1",
                "--out",
                "{sess}/session.json"
            ],
            2,
            ["session.json", "out"]
        ),
        case!(
            "teach-unknown-class",
            |d, fx| {
                sess_copy(d, fx);
                std::fs::write(d.join("a.csv"), "id,label\np2,cat\np3,bird\n").unwrap();
            },
            ["teach", "--state", "{d}/sess", "--labels", "{d}/a.csv"],
            1,
            ["a.csv:3", "bird"]
        ),
        case!(
            "teach-unknown-id",
            |d, fx| {
                sess_copy(d, fx);
                std::fs::write(d.join("a.csv"), "\u{feff}id,label\n\"p2\",cat\nnope,dog\n")
                    .unwrap();
            },
            ["teach", "--state", "{d}/sess", "--labels", "{d}/a.csv"],
            1,
            ["a.csv:3", "nope"]
        ),
        case!(
            "teach-no-label-column",
            |d, fx| {
                sess_copy(d, fx);
                std::fs::write(d.join("a.csv"), "id,class\np2,cat\n").unwrap();
            },
            ["teach", "--state", "{d}/sess", "--labels", "{d}/a.csv"],
            1,
            ["a.csv", "label"]
        ),
        case!(
            "teach-label-studio-tie",
            |d, fx| {
                sess_copy(d, fx);
                let v = |c: &str| {
                    serde_json::json!({"was_cancelled": false, "result": [
                    {"type": "choices", "from_name": "label", "to_name": "text",
                     "value": {"choices": [c]}}]})
                };
                let e = serde_json::json!([{"data": {"alkit_id": "p4"},
                    "annotations": [v("cat"), v("dog")]}]);
                std::fs::write(d.join("e.json"), e.to_string()).unwrap();
            },
            ["teach", "--state", "{d}/sess", "--labels", "{d}/e.json"],
            1,
            ["e.json:1", "no majority"]
        ),
        case!(
            "teach-label-studio-choices-not-a-list",
            |d, fx| {
                sess_copy(d, fx);
                let e = serde_json::json!([{"data": {"alkit_id": "p4"}, "annotations": [
                    {"was_cancelled": false, "result": [{"type": "choices", "from_name": "label",
                     "to_name": "text", "value": {"choices": "cat"}}]}]}]);
                std::fs::write(d.join("e.json"), e.to_string()).unwrap();
            },
            ["teach", "--state", "{d}/sess", "--labels", "{d}/e.json"],
            1,
            ["e.json:1", "`value.choices` is a string"]
        ),
        case!(
            "teach-label-studio-annotations-not-a-list",
            |d, fx| {
                sess_copy(d, fx);
                let e = serde_json::json!([{"data": {"alkit_id": "p4"}, "annotations": {"0": 1}}]);
                std::fs::write(d.join("e.json"), e.to_string()).unwrap();
            },
            ["teach", "--state", "{d}/sess", "--labels", "{d}/e.json"],
            1,
            ["e.json:1", "`annotations` is an object"]
        ),
        case!(
            "teach-label-studio-unknown-class",
            |d, fx| {
                sess_copy(d, fx);
                let e = serde_json::json!([{"data": {"alkit_id": "p4"}, "annotations": [
                    {"was_cancelled": false, "result": [{"type": "choices", "from_name": "label",
                     "to_name": "text", "value": {"choices": ["bird"]}}]}]}]);
                std::fs::write(d.join("e.json"), e.to_string()).unwrap();
            },
            ["teach", "--state", "{d}/sess", "--labels", "{d}/e.json"],
            1,
            ["e.json:1", "bird"]
        ),
        case!(
            "label-remote-host-without-flag",
            |d, fx| {
                sess_copy(d, fx);
            },
            ["label", "--state", "{d}/sess", "--host", "0.0.0.0"],
            1,
            ["--host 0.0.0.0", "--allow-remote"]
        ),
        case!(
            "label-host-not-an-address",
            none,
            ["label", "--state", "{d}/sess", "--host", "localhost:80"],
            2,
            ["--host"]
        ),
        case!(
            "label-empty-batch",
            |d, fx| {
                sess_copy(d, fx);
            },
            ["label", "--state", "{d}/sess", "--n", "0"],
            2,
            ["--n 0"]
        ),
        case!(
            "label-not-a-session",
            none,
            ["label", "--state", "{d}/nothing"],
            1,
            ["nothing", "not a session folder"]
        ),
    ]
}
