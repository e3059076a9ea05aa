//! More sessions: strategies and requests a session refuses.

use super::*;

pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(
            "sess-query-bald-without-dropout",
            |d, fx| {
                sess_copy(d, fx);
            },
            [
                "query",
                "--state",
                "{d}/sess",
                "--n",
                "1",
                "--scorer",
                "bald",
                "--out",
                "{d}/q.csv"
            ],
            2,
            ["bald", "dropout"]
        ),
        case!(
            "train-cnn-on-feature-vectors",
            |_, _| {},
            [
                "train",
                "--data",
                "{data}/embeddings/mnist-rp32.safetensors",
                "--model",
                "cnn",
                "--steps",
                "2",
                "--out",
                "{d}/ck"
            ],
            2,
            ["--model", "`cnn` is convolutional", "[32]", "`linear`"]
        ),
        case!(
            "init-seed-subfolder-not-a-class",
            |d, fx| {
                let (train, _) = shipped();
                let items: Vec<(usize, Option<String>)> = (0..6)
                    .map(|i| (i, (i < 2).then(|| "one".to_string())))
                    .collect();
                write_image_folder(&d.join("photos"), &train, &items).unwrap();
                let _ = fx;
            },
            [
                "init",
                "--pool",
                "{d}/photos",
                "--classes",
                "cat,dog",
                "--state",
                "{d}/s"
            ],
            1,
            ["subfolder `one/`", "--classes", "photos/one"]
        ),
        case!(
            "calibrate-bald-without-dropout",
            |_, _| {},
            [
                "calibrate",
                "--data",
                "{data}",
                "--model",
                "mlp",
                "--scorer",
                "bald",
                "--out",
                "{d}/cal"
            ],
            2,
            ["bald", "`mlp-dropout`", "curve, init, bench"]
        ),
        case!(
            "init-pool-label-cell-not-a-class",
            |d, _| {
                let pool = "id,label,a\np0,cat,1\n\n\"p\n1\",dog,2\np2,bird,3\n";
                std::fs::write(d.join("p.csv"), pool).unwrap();
            },
            [
                "init",
                "--pool",
                "{d}/p.csv",
                "--state",
                "{d}/s",
                "--classes",
                "cat,dog"
            ],
            1,
            ["p.csv", "item `p2`", "`bird` is not one of the classes"]
        ),
        case!(
            "init-labels-unknown-class",
            |d, _| {
                std::fs::write(
                    d.join("p.csv"),
                    "id,a
    x,1
    y,2
    z,3
    ",
                )
                .unwrap();
                std::fs::write(
                    d.join("l.csv"),
                    "\u{feff}id,label
    x,cat
    y,bird
    ",
                )
                .unwrap();
            },
            [
                "init",
                "--pool",
                "{d}/p.csv",
                "--state",
                "{d}/s",
                "--classes",
                "cat,dog",
                "--labels",
                "{d}/l.csv"
            ],
            1,
            ["l.csv:3", "bird"]
        ),
        case!(
            "init-over-a-session",
            |d, fx| {
                sess_copy(d, fx);
            },
            ["init", "--pool", "{pool}", "--state", "{d}/sess"],
            1,
            ["already holds a session", "--force"]
        ),
        case!(
            "flag-score-out-is-run-state",
            none,
            ["score", "--checkpoint", "{ck}", "--out", "{run}/run.json"],
            2,
            ["out"]
        ),
    ]
}
