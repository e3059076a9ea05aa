//! safetensors pools: headers, dtypes and shapes that lie.

use super::*;

pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(
            "st-label-2^31+5",
            |d, _| {
                std::fs::write(d.join("p.safetensors"), st_pool(&[0, 1, (1 << 31) + 5])).unwrap();
            },
            ["init", "--pool", "{d}/p.safetensors", "--state", "{d}/s"],
            1,
            [
                "p.safetensors",
                "label 2147483653 at item 2",
                "skips class 2"
            ]
        ),
        case!(
            "st-label-10M",
            |d, _| {
                std::fs::write(d.join("p.safetensors"), st_pool(&[10_000_000, 0])).unwrap();
            },
            ["init", "--pool", "{d}/p.safetensors", "--state", "{d}/s"],
            1,
            ["p.safetensors", "label 10000000 at item 0"]
        ),
        case!(
            "st-tensor-named-twice",
            |d, _| {
                let t = r#"{"dtype":"F32","shape":[2,4],"data_offsets":[0,32]}"#;
                let y = r#"{"dtype":"I64","shape":[2],"data_offsets":[32,48]}"#;
                let mut h = format!(r#"{{"x":{t},"x":{t},"y":{y}}}"#).into_bytes();
                while h.len() % 8 != 0 {
                    h.push(b' ');
                }
                let mut b = (h.len() as u64).to_le_bytes().to_vec();
                b.extend(h);
                b.extend(f32s(&[0.5; 8]));
                b.extend(i64s(&[0, 1]));
                std::fs::write(d.join("p.safetensors"), b).unwrap();
            },
            ["init", "--pool", "{d}/p.safetensors", "--state", "{d}/s"],
            1,
            ["p.safetensors", "`x` twice"]
        ),
        case!(
            "st-tensor-named-twice-streamed",
            |d, _| {
                let t = r#"{"dtype":"F32","shape":[2,4],"data_offsets":[0,32]}"#;
                let y = r#"{"dtype":"I64","shape":[2],"data_offsets":[32,48]}"#;
                let mut h = format!(r#"{{"x":{t},"x":{t},"y":{y}}}"#).into_bytes();
                while h.len() % 8 != 0 {
                    h.push(b' ');
                }
                let mut b = (h.len() as u64).to_le_bytes().to_vec();
                b.extend(h);
                b.extend(f32s(&[0.5; 8]));
                b.extend(i64s(&[0, 1]));
                std::fs::write(d.join("p.safetensors"), b).unwrap();
            },
            [
                "init",
                "--pool",
                "{d}/p.safetensors",
                "--state",
                "{d}/s",
                "--stream",
                "--classes",
                "a,b"
            ],
            1,
            ["p.safetensors", "`x` twice"]
        ),
        case!(
            "csv-column-twice-streamed",
            |d, _| {
                std::fs::write(d.join("p.csv"), "id,a,b,a\nx,1,2,3\ny,4,5,6\n").unwrap();
            },
            [
                "score",
                "--checkpoint",
                "{ck}",
                "--data",
                "{d}/p.csv",
                "--out",
                "{d}/s.csv"
            ],
            1,
            ["p.csv:1", "`a` twice"]
        ),
    ]
}
