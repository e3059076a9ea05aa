//! Shards and merge: specs, schedulers' variables, shards of different runs.

use super::*;

pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(
            "merge-checkpoint-retrained-in-place",
            |d, fx| {
                let ck = ck_copy(d, fx);
                shards_with(d, &ck, &fx.data(), || {
                    // New weights, same shapes, same path: a retraining in place.
                    edit_weights(&ck, |v| {
                        for t in v.iter_mut() {
                            t.3[..4].copy_from_slice(&0.25f32.to_le_bytes());
                        }
                    })
                });
            },
            [
                "merge",
                "--top",
                "40",
                "--out",
                "{d}/m.csv",
                "{d}/s0.csv",
                "{d}/s1.csv",
                "{d}/s2.csv"
            ],
            1,
            ["s2.csv.shard.json", "checkpoint's content", "s0.csv"]
        ),
        case!(
            "merge-pool-rewritten-in-place",
            |d, fx| {
                let pool = idx_copy(d, fx);
                shards_with(d, &fx.ck(), &pool, || {
                    // One pixel of one image changed, as many items: the same path and size.
                    edit_idx(&pool, "train-images-idx3-ubyte", |b| b[16 + 300] ^= 0x40)
                });
            },
            [
                "merge",
                "--top",
                "40",
                "--out",
                "{d}/m.csv",
                "{d}/s0.csv",
                "{d}/s1.csv",
                "{d}/s2.csv"
            ],
            1,
            ["s2.csv.shard.json", "pool's content", "s0.csv"]
        ),
        case!(
            "merge-manifest-format-1",
            |d, fx| {
                shards(d, fx);
                edit_json(&d.join("s1.csv.shard.json"), |v| {
                    let m = v.as_object_mut().unwrap();
                    m.insert("format".into(), 1.into());
                    m.remove("checkpoint_hash");
                    m.remove("pool_fingerprint");
                });
            },
            [
                "merge",
                "--top",
                "40",
                "--out",
                "{d}/m.csv",
                "{d}/s0.csv",
                "{d}/s1.csv",
                "{d}/s2.csv"
            ],
            1,
            ["s1.csv.shard.json", "format 1", "score this shard again"]
        ),
        case!(
            "merge-row-duplicated",
            |d, fx| {
                shards(d, fx);
                // Shard 2's last row replaced by its first: the count still matches.
                let p = d.join("s2.csv");
                let text = std::fs::read_to_string(&p).unwrap();
                let mut lines: Vec<&str> = text.lines().collect();
                let n = lines.len();
                lines[n - 1] = lines[1];
                std::fs::write(&p, lines.join("\n") + "\n").unwrap();
            },
            [
                "merge",
                "--top",
                "40",
                "--out",
                "{d}/m.csv",
                "{d}/s0.csv",
                "{d}/s1.csv",
                "{d}/s2.csv"
            ],
            1,
            ["s2.csv:41:", "is also at", "s2.csv:2"]
        ),
        case!(
            "env-slurm-task-count-0",
            none,
            ["score", "--checkpoint", "{ck}", "--data", "{data}", "--out", "{d}/o.csv"],
            2,
            ["SLURM_ARRAY_TASK_COUNT=0", "at least one task"],
            env [("SLURM_ARRAY_TASK_ID", "0"), ("SLURM_ARRAY_TASK_COUNT", "0")]
        ),
        case!(
            "env-slurm-task-id-past-the-array",
            none,
            ["score", "--checkpoint", "{ck}", "--data", "{data}", "--out", "{d}/o.csv"],
            2,
            ["SLURM_ARRAY_TASK_ID=7", "past the array", "0 to 3"],
            env [
                ("SLURM_ARRAY_TASK_ID", "7"),
                ("SLURM_ARRAY_TASK_MIN", "0"),
                ("SLURM_ARRAY_TASK_COUNT", "4")
            ]
        ),
        case!(
            "env-slurm-one-task-rerun",
            none,
            ["score", "--checkpoint", "{ck}", "--data", "{data}", "--out", "{d}/o.csv"],
            2,
            ["SLURM_ARRAY_TASK_COUNT=1", "one-task array", "5/N"],
            env [
                ("SLURM_ARRAY_TASK_ID", "5"),
                ("SLURM_ARRAY_TASK_MIN", "5"),
                ("SLURM_ARRAY_TASK_MAX", "5"),
                ("SLURM_ARRAY_TASK_COUNT", "1")
            ]
        ),
        case!(
            "env-slurm-array-with-gaps",
            none,
            ["score", "--checkpoint", "{ck}", "--data", "{data}", "--out", "{d}/o.csv"],
            2,
            ["SLURM_ARRAY_TASK_COUNT=2", "SLURM_ARRAY_TASK_MAX=7", "gaps"],
            env [
                ("SLURM_ARRAY_TASK_ID", "3"),
                ("SLURM_ARRAY_TASK_MIN", "3"),
                ("SLURM_ARRAY_TASK_MAX", "7"),
                ("SLURM_ARRAY_TASK_COUNT", "2")
            ]
        ),
        case!(
            "env-slurm-array-step-2",
            none,
            ["score", "--checkpoint", "{ck}", "--data", "{data}", "--out", "{d}/o.csv"],
            2,
            ["SLURM_ARRAY_TASK_STEP=2", "step"],
            env [
                ("SLURM_ARRAY_TASK_ID", "2"),
                ("SLURM_ARRAY_TASK_MIN", "0"),
                ("SLURM_ARRAY_TASK_MAX", "6"),
                ("SLURM_ARRAY_TASK_COUNT", "4"),
                ("SLURM_ARRAY_TASK_STEP", "2")
            ]
        ),
        case!(
            "env-slurm-task-id-not-a-number",
            none,
            ["score", "--checkpoint", "{ck}", "--data", "{data}", "--out", "{d}/o.csv"],
            2,
            ["SLURM_ARRAY_TASK_ID=x1", "not a whole number"],
            env [("SLURM_ARRAY_TASK_ID", "x1"), ("SLURM_ARRAY_TASK_COUNT", "4")]
        ),
        case!(
            "env-k8s-index-past-completions",
            none,
            [
                "score",
                "--checkpoint",
                "{ck}",
                "--data",
                "{data}",
                "--shards",
                "16",
                "--out",
                "{d}/o.csv"
            ],
            2,
            ["JOB_COMPLETION_INDEX=16", "shard count 16"],
            env[("JOB_COMPLETION_INDEX", "16")]
        ),
    ]
}

/// Three finished shards `{d}/s{i}.csv` of `pool` scored with `ck`, the best 40 by entropy;
/// `between` runs after shards 0 and 1, before shard 2.
fn shards_with(d: &Path, ck: &Path, pool: &Path, between: impl FnOnce()) {
    let score = |i: usize| {
        let (spec, out) = (format!("{i}/3"), d.join(format!("s{i}.csv")));
        let s = |p: &Path| p.display().to_string();
        ok(&[
            "score",
            "--checkpoint",
            &s(ck),
            "--data",
            &s(pool),
            "--top",
            "40",
            "--shard",
            &spec,
            "--out",
            &s(&out),
        ]);
    };
    score(0);
    score(1);
    between();
    score(2);
}

fn shards(d: &Path, fx: &Fx) {
    shards_with(d, &fx.ck(), &fx.data(), || {});
}
