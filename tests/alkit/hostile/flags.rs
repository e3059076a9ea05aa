//! Flags: values out of range, contradictions, outputs over inputs.

use super::*;

pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(
            "flag-seeds-2^32",
            none,
            ["curve", "--seeds", "4294967296", "--out", "{d}/o"],
            2,
            ["seeds"]
        ),
        case!(
            "flag-seed-past-u64",
            none,
            [
                "curve",
                "--seed",
                "18446744073709551615",
                "--seeds",
                "2",
                "--out",
                "{d}/o"
            ],
            2,
            ["seed"]
        ),
        case!(
            "flag-scorer-repeated",
            none,
            [
                "curve",
                "--scorer",
                "entropy",
                "--scorer",
                "entropy,entropy",
                "--out",
                "{d}/o"
            ],
            2,
            ["entropy"]
        ),
        case!(
            "flag-beta-nan",
            none,
            [
                "score",
                "--checkpoint",
                "{ck}",
                "--select",
                "power",
                "--beta",
                "NaN",
                "--out",
                "{d}/s.csv"
            ],
            2,
            ["beta"]
        ),
        case!(
            "flag-perturbations-0",
            none,
            [
                "score",
                "--checkpoint",
                "{ck}",
                "--scorer",
                "exgrad",
                "--perturbations",
                "0",
                "--out",
                "{d}/s.csv"
            ],
            2,
            ["perturbations"]
        ),
        case!(
            "flag-surface-mc-samples-0",
            none,
            ["surface", "--mc-samples", "0", "--out", "{d}/o"],
            2,
            ["--mc-samples"]
        ),
        case!(
            "flag-surface-prior-sigma-inf",
            none,
            [
                "surface",
                "--model",
                "bayes-by-backprop",
                "--prior-sigma",
                "inf",
                "--out",
                "{d}/o"
            ],
            2,
            ["--prior-sigma", "inf"]
        ),
        case!(
            "flag-surface-beside-twice",
            none,
            [
                "surface",
                "--model",
                "mlp",
                "--beside",
                "platt,platt",
                "--out",
                "{d}/o"
            ],
            2,
            ["--beside", "platt", "twice"]
        ),
        case!(
            "flag-surface-seeds-0",
            none,
            ["surface", "--seeds", "0", "--out", "{d}/o"],
            2,
            ["seeds"]
        ),
        case!(
            "flag-surface-points-0",
            none,
            ["surface", "--points", "0", "--out", "{d}/o"],
            2,
            ["points", "20"]
        ),
        case!(
            "flag-surface-noise-nan",
            none,
            ["surface", "--noise", "NaN", "--out", "{d}/o"],
            2,
            ["noise", "NaN"]
        ),
        case!(
            "flag-surface-steps-0",
            none,
            ["surface", "--steps", "0", "--out", "{d}/o"],
            2,
            ["steps"]
        ),
        case!(
            "flag-surface-members-huge",
            none,
            [
                "surface",
                "--model",
                "ensemble",
                "--members",
                "100000",
                "--out",
                "{d}/o"
            ],
            2,
            ["members", "100000"]
        ),
        case!(
            "flag-curve-subsample-below-batch",
            none,
            [
                "curve",
                "--subsample",
                "5",
                "--query",
                "10",
                "--out",
                "{d}/o"
            ],
            2,
            ["subsample", "5"]
        ),
        case!(
            "flag-query-subsample-below-batch",
            |d, fx| {
                sess_copy(d, fx);
            },
            [
                "query",
                "--state",
                "{d}/sess",
                "--n",
                "2",
                "--subsample",
                "1",
                "--out",
                "{d}/q.csv"
            ],
            2,
            ["subsample"]
        ),
        case!("flag-bench-n-0", none, ["bench", "--n", "0"], 2, ["n"]),
        case!(
            "flag-bench-repeats-0",
            none,
            ["bench", "--repeats", "0"],
            2,
            ["repeats"]
        ),
        case!(
            "flag-ood-checkpoint-with-model",
            none,
            [
                "ood",
                "--checkpoint",
                "{ck}",
                "--model",
                "cnn",
                "--train-data",
                "{data}",
                "--ood-data",
                "{data}",
                "--out",
                "{d}/o"
            ],
            2,
            ["--model"]
        ),
        case!(
            "flag-calibrate-checkpoint-with-steps",
            none,
            [
                "calibrate",
                "--checkpoint",
                "{ck}",
                "--steps",
                "5",
                "--out",
                "{d}/o"
            ],
            2,
            ["--steps"]
        ),
        case!(
            "flag-ood-out-is-input",
            none,
            [
                "ood",
                "--checkpoint",
                "{ck}",
                "--train-data",
                "{data}",
                "--ood-data",
                "{data}",
                "--out",
                "{data}"
            ],
            2,
            ["out", "input"]
        ),
        case!(
            // A settings error raised under the library's context ("evaluating on ...") keeps
            // its exit code: the binary reads `Error::kind`.
            "calibrate-checkpoint-on-other-items",
            |d, _| {
                for split in ["train", "test"] {
                    for class in ["a", "b"] {
                        let dir = d.join("f").join(split).join(class);
                        std::fs::create_dir_all(&dir).unwrap();
                        png_of(&dir.join("1.png"), 8, 8);
                        png_of(&dir.join("2.png"), 8, 8);
                    }
                }
            },
            [
                "calibrate",
                "--checkpoint",
                "{ck}",
                "--data",
                "{d}/f",
                "--out",
                "{d}/o"
            ],
            2,
            [
                "evaluating on",
                "/f",
                "expects items [1, 28, 28]",
                "[1, 8, 8]"
            ]
        ),
        case!(
            "flag-calibrate-out-is-session",
            none,
            ["calibrate", "--checkpoint", "{ck}", "--out", "{sess}"],
            2,
            ["out", "session"]
        ),
        case!(
            "flag-surface-out-is-run",
            none,
            ["surface", "--out", "{run}"],
            2,
            ["out", "curve run"]
        ),
        case!(
            "flag-score-out-is-checkpoint",
            none,
            ["score", "--checkpoint", "{ck}", "--out", "{ck}/config.json"],
            2,
            ["out"]
        ),
        case!(
            "flag-train-out-is-data",
            none,
            ["train", "--steps", "1", "--data", "{data}", "--out", "{data}"],
            2,
            ["out"]
        ),
        case!(
            "flag-score-top-0",
            none,
            [
                "score",
                "--checkpoint",
                "{ck}",
                "--top",
                "0",
                "--out",
                "{d}/s.csv"
            ],
            2,
            ["--top", "0 items would be kept"]
        ),
        case!(
            "flag-select-power-on-negative-scores",
            none,
            [
                "score",
                "--checkpoint",
                "{ck}",
                "--scorer",
                "max-logit",
                "--select",
                "power",
                "--top",
                "3",
                "--out",
                "{d}/s.csv"
            ],
            2,
            ["--select", "power selection", "softmax or softrank"]
        ),
        case!(
            "env-rayon-threads-100000",
            none,
            ["score", "--checkpoint", "{ck}", "--out", "{d}/s.csv"],
            2,
            ["RAYON_NUM_THREADS=100000", "from 1 to"],
            env[("RAYON_NUM_THREADS", "100000")]
        ),
        case!(
            "flag-score-batch-10^8",
            none,
            [
                "score",
                "--checkpoint",
                "{ck}",
                "--batch",
                "100000000",
                "--out",
                "{d}/s.csv"
            ],
            2,
            ["--batch", "100000000", "limit"]
        ),
        case!(
            "flag-score-batch-10^6",
            none,
            [
                "score",
                "--checkpoint",
                "{ck}",
                "--batch",
                "1000000",
                "--out",
                "{d}/s.csv"
            ],
            2,
            ["--batch", "1000000", "limit"]
        ),
        case!(
            "flag-score-perturbations-10^8",
            none,
            [
                "score",
                "--checkpoint",
                "{ck}",
                "--scorer",
                "regrad-star",
                "--perturbations",
                "100000000",
                "--out",
                "{d}/s.csv"
            ],
            2,
            ["--perturbations", "1024"]
        ),
        case!(
            "flag-score-mc-samples-10^8",
            none,
            [
                "score",
                "--checkpoint",
                "{ck}",
                "--scorer",
                "bald",
                "--mc-samples",
                "100000000",
                "--out",
                "{d}/s.csv"
            ],
            2,
            ["--mc-samples", "10000"]
        ),
        case!(
            "flag-bench-n-huge",
            none,
            ["bench", "--n", "18446744073709551615"],
            2,
            ["--n", "memory"]
        ),
        case!(
            "flag-bench-batch-10^8",
            none,
            ["bench", "--batch", "100000000"],
            2,
            ["--batch", "limit"]
        ),
        case!(
            "flag-bench-batch-100",
            none,
            ["bench", "--batch", "100"],
            2,
            ["--batch", "256", "--checkpoint"]
        ),
        case!(
            "flag-bench-repeats-10^6",
            none,
            ["bench", "--repeats", "1000000"],
            2,
            ["--repeats", "1000"]
        ),
        case!(
            "flag-train-steps-huge",
            none,
            ["train", "--steps", "18446744073709551615", "--out", "{d}/o"],
            2,
            ["--steps", "100000000"]
        ),
        case!(
            "flag-surface-mc-samples-huge",
            none,
            [
                "surface",
                "--model",
                "mc-dropout",
                "--mc-samples",
                "100000000",
                "--out",
                "{d}/o"
            ],
            2,
            ["--mc-samples", "10000"]
        ),
        case!(
            "flag-ensemble-huge",
            |d, _| {
                std::fs::write(d.join("p.csv"), POOL).unwrap();
            },
            [
                "init",
                "--pool",
                "{d}/p.csv",
                "--state",
                "{d}/s",
                "--ensemble",
                "1000000"
            ],
            2,
            ["ensemble", "1000000"]
        ),
    ]
}
