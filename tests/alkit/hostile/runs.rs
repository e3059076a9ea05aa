//! Curve runs and metrics files.

use super::*;

pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(
            "run-labeled-cut",
            |d, fx| {
                let r = run_copy(d, fx);
                edit_json(&r.join("runs/random-seed0.json"), |v| {
                    v["labeled"].as_array_mut().unwrap().truncate(3);
                });
            },
            ["curve", "--resume", "{d}/run"],
            1,
            ["random-seed0.json", "tagged cycle 0"]
        ),
        case!(
            "run-record-edited",
            |d, fx| {
                let r = run_copy(d, fx);
                edit_json(&r.join("runs/random-seed0.json"), |v| {
                    v["records"][1]["labeled"] = 11.into()
                });
            },
            ["curve", "--resume", "{d}/run"],
            1,
            ["random-seed0.json", "record 1 says cycle 1 with 11 labels"]
        ),
        case!(
            "run-spec-invalid",
            |d, fx| {
                let r = run_copy(d, fx);
                std::fs::write(r.join("run.json"), "[1,2").unwrap();
            },
            ["curve", "--resume", "{d}/run"],
            1,
            ["run.json", "invalid JSON"]
        ),
        case!(
            "run-stop-rule-unknown",
            |d, fx| {
                let r = run_copy(d, fx);
                edit_json(&r.join("run.json"), |v| v["config"]["stop"] = "soon".into());
            },
            ["curve", "--resume", "{d}/run"],
            1,
            ["run.json", "unknown variant `soon`"]
        ),
        case!(
            "run-out-is-checkpoint",
            none,
            ["curve", "--cycles", "0", "--steps", "1", "--out", "{ck}"],
            2,
            ["out", "checkpoint"]
        ),
        // --------------------------------------------------------------- compare
        case!(
            "compare-one-run",
            none,
            ["compare", "{run}", "--out", "{d}/o"],
            2,
            ["at least two"]
        ),
        case!(
            "compare-run-unfinished",
            |d, fx| {
                let r = run_copy(d, fx);
                std::fs::remove_file(r.join("runs/random-seed0.json")).unwrap();
            },
            ["compare", "{run}", "{d}/run", "--out", "{d}/o"],
            2,
            ["random-seed0.json", "unfinished", "resume"]
        ),
        case!(
            "compare-run-twice",
            none,
            ["compare", "{run}", "{run}", "--out", "{d}/o"],
            2,
            ["given twice"]
        ),
        case!(
            "compare-state-of-another-seed",
            |d, fx| {
                let r = run_copy(d, fx);
                edit_json(&r.join("runs/random-seed0.json"), |v| v["seed"] = 7.into());
            },
            ["compare", "{run}", "{d}/run", "--out", "{d}/o"],
            2,
            ["not its own name's"]
        ),
        case!(
            "compare-not-a-run",
            |d, _| std::fs::create_dir_all(d.join("empty")).unwrap(),
            ["compare", "{run}", "{d}/empty", "--out", "{d}/o"],
            1,
            ["empty", "not the folder of a classification curve run"]
        ),
        case!(
            "compare-out-is-a-run",
            |d, fx| {
                run_copy(d, fx);
            },
            ["compare", "{run}", "{d}/run", "--out", "{d}/run"],
            2,
            ["out", "input of this command"]
        ),
        // --------------------------------------------------------------- metrics files
        case!(
            "metrics-confidence-above-1",
            |d, _| {
                std::fs::write(
                    d.join("m.csv"),
                    "score,correct,confidence\n0.1,1,0.9\n0.2,0,1.5\n",
                )
                .unwrap();
            },
            ["metrics", "--scores", "{d}/m.csv"],
            1,
            ["m.csv:3", "confidence"]
        ),
        case!(
            "metrics-extra-field",
            |d, _| {
                std::fs::write(d.join("m.csv"), "score,is_ood\n0.1,1\n0.2,0,7\n").unwrap();
            },
            ["metrics", "--scores", "{d}/m.csv"],
            1,
            ["m.csv:3"]
        ),
        case!(
            "metrics-column-twice",
            |d, _| {
                std::fs::write(
                    d.join("m.csv"),
                    "score,is_ood,score\n0.1,1,0.9\n0.2,0,0.3\n",
                )
                .unwrap();
            },
            ["metrics", "--scores", "{d}/m.csv"],
            1,
            ["m.csv:1", "`score` twice"]
        ),
        case!(
            "metrics-no-score",
            |d, _| {
                std::fs::write(d.join("m.csv"), "value,is_ood\n0.1,1\n").unwrap();
            },
            ["metrics", "--scores", "{d}/m.csv"],
            1,
            ["m.csv", "score"]
        ),
        case!(
            "metrics-flag-2",
            |d, _| {
                std::fs::write(d.join("m.csv"), "score,is_ood\n0.1,1\n0.3,0\n0.2,2\n").unwrap();
            },
            ["metrics", "--scores", "{d}/m.csv"],
            1,
            ["m.csv:4", "is_ood"]
        ),
        case!(
            "metrics-nan-score",
            |d, _| {
                std::fs::write(d.join("m.csv"), "score,is_ood\n0.1,1\nnan,0\n").unwrap();
            },
            ["metrics", "--scores", "{d}/m.csv"],
            1,
            ["m.csv:3", "score"]
        ),
    ]
}
