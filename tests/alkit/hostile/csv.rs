//! CSV pools: missing columns, unparsable values, duplicate ids.

use super::*;

pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(
            "csv-not-a-number",
            |d, _| {
                std::fs::write(d.join("p.csv"), "id,a,b\nx,1,2\ny,3,seven\n").unwrap();
            },
            [
                "init",
                "--pool",
                "{d}/p.csv",
                "--state",
                "{d}/s",
                "--classes",
                "a,b"
            ],
            1,
            ["p.csv:3", "column `b`", "seven"]
        ),
        case!(
            "csv-nan",
            |d, _| {
                std::fs::write(d.join("p.csv"), "a,b\n1,2\nNaN,3\n").unwrap();
            },
            [
                "init",
                "--pool",
                "{d}/p.csv",
                "--state",
                "{d}/s",
                "--classes",
                "a,b"
            ],
            1,
            ["p.csv:3", "not a finite number"]
        ),
        case!(
            "csv-duplicate-id",
            |d, _| {
                std::fs::write(d.join("p.csv"), "id,a\nx,1\ny,2\nx,3\n").unwrap();
            },
            [
                "init",
                "--pool",
                "{d}/p.csv",
                "--state",
                "{d}/s",
                "--classes",
                "a,b"
            ],
            1,
            ["p.csv:4", "already used on line 2"]
        ),
        case!(
            "csv-ragged",
            |d, _| {
                std::fs::write(d.join("p.csv"), "id,a\nx,1\ny,2,3\n").unwrap();
            },
            [
                "init",
                "--pool",
                "{d}/p.csv",
                "--state",
                "{d}/s",
                "--classes",
                "a,b"
            ],
            1,
            ["p.csv:3", "3 fields, the header has 2"]
        ),
        case!(
            "csv-empty",
            |d, _| {
                std::fs::write(d.join("p.csv"), "").unwrap();
            },
            [
                "init",
                "--pool",
                "{d}/p.csv",
                "--state",
                "{d}/s",
                "--classes",
                "a,b"
            ],
            1,
            ["p.csv", "empty"]
        ),
        case!(
            "csv-cnn-on-tabular",
            |d, _| {
                std::fs::write(d.join("p.csv"), POOL).unwrap();
            },
            [
                "init",
                "--pool",
                "{d}/p.csv",
                "--state",
                "{d}/s",
                "--model",
                "cnn"
            ],
            2,
            ["model", "cannot take items of shape [2]"]
        ),
        case!(
            "csv-classes-empty-name",
            |d, _| {
                std::fs::write(d.join("p.csv"), "a,b\n1,2\n3,4\n").unwrap();
            },
            [
                "init",
                "--pool",
                "{d}/p.csv",
                "--state",
                "{d}/s",
                "--classes",
                "cat,,dog"
            ],
            2,
            ["classes", "empty or given twice"]
        ),
        case!(
            "csv-classes-duplicate",
            |d, _| {
                std::fs::write(d.join("p.csv"), "a,b\n1,2\n3,4\n").unwrap();
            },
            [
                "init",
                "--pool",
                "{d}/p.csv",
                "--state",
                "{d}/s",
                "--classes",
                "cat,dog,cat"
            ],
            2,
            ["classes", "`cat`"]
        ),
    ]
}
