//! Sharded scoring: `alkit score --shard I/N` (or the Slurm / Kubernetes variables) in separate
//! processes, then `alkit merge`, gives byte for byte what one unsharded `alkit score --top K`
//! writes, for top-k and for a stochastic selection; a shard killed and rerun changes nothing.

use super::*;

fn run(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut c = alkit_cmd();
    c.arg("-q").args(args);
    for k in [
        "SLURM_ARRAY_TASK_ID",
        "SLURM_ARRAY_TASK_MIN",
        "SLURM_ARRAY_TASK_COUNT",
        "JOB_COMPLETION_INDEX",
    ] {
        c.env_remove(k);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn ok(args: &[&str], env: &[(&str, &str)]) {
    let o = run(args, env);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn fails(args: &[&str], code: i32, says: &str) {
    let o = run(args, &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
    assert!(err.contains(says), "{args:?}: {err}");
}

#[test]
fn three_shards_and_a_merge_equal_one_unsharded_score_byte_for_byte() {
    let dir = tmp("shards");
    let d = |name: &str| dir.join(name).to_string_lossy().into_owned();
    ok(
        &[
            "train",
            "--model",
            "mlp",
            "--steps",
            "30",
            "--out",
            &d("ck"),
        ],
        &[],
    );
    let ck = d("ck");
    let base = [
        "score",
        "--checkpoint",
        &ck,
        "--scorer",
        "entropy,margin",
        "--top",
        "40",
    ];
    let score = |extra: &[&str], out: &str, env: &[(&str, &str)]| {
        let mut args: Vec<&str> = base.to_vec();
        args.extend(extra);
        args.extend(["--out", out]);
        ok(&args, env);
    };
    let merge = |files: &[String], out: &str| {
        let mut args = vec!["merge", "--top", "40", "--out", out];
        args.extend(files.iter().map(String::as_str));
        run(&args, &[])
    };
    let bytes = |p: &str| std::fs::read(p).unwrap();

    for (tag, select) in [
        ("topk", vec![]),
        (
            "power",
            vec!["--select", "power", "--beta", "2", "--seed", "5"],
        ),
    ] {
        let whole = d(&format!("{tag}-all.csv"));
        score(&select, &whole, &[]);
        let rows = String::from_utf8(bytes(&whole)).unwrap();
        assert_eq!(rows.lines().count(), 41, "{tag}");
        // By flag.
        let files: Vec<String> = (0..3).map(|i| d(&format!("{tag}-s{i}.csv"))).collect();
        for (i, f) in files.iter().enumerate() {
            let spec = format!("{i}/3");
            let mut extra = select.clone();
            extra.extend(["--shard", &spec]);
            score(&extra, f, &[]);
            assert!(Path::new(&format!("{f}.shard.json")).is_file());
        }
        let merged = d(&format!("{tag}-merged.csv"));
        let o = merge(&files, &merged);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(bytes(&merged), bytes(&whole), "{tag}: merge of flag shards");
        // By a Slurm job array numbered from 1.
        let slurm: Vec<String> = (1..=3).map(|i| d(&format!("{tag}-slurm{i}.csv"))).collect();
        for (i, f) in slurm.iter().enumerate() {
            let id = (i + 1).to_string();
            score(
                &select,
                f,
                &[
                    ("SLURM_ARRAY_TASK_ID", &id),
                    ("SLURM_ARRAY_TASK_MIN", "1"),
                    ("SLURM_ARRAY_TASK_COUNT", "3"),
                ],
            );
            assert_eq!(bytes(f), bytes(&files[i]), "{tag}: Slurm task {id}");
        }
        let o = merge(&slurm, &d(&format!("{tag}-merged-slurm.csv")));
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(bytes(&d(&format!("{tag}-merged-slurm.csv"))), bytes(&whole));
        // By a Kubernetes Indexed Job.
        let k8s = d(&format!("{tag}-k8s2.csv"));
        let mut extra = select.clone();
        extra.extend(["--shards", "3"]);
        score(&extra, &k8s, &[("JOB_COMPLETION_INDEX", "2")]);
        assert_eq!(bytes(&k8s), bytes(&files[2]), "{tag}: JOB_COMPLETION_INDEX");
    }
    // The stochastic selection is not the top-k one.
    assert_ne!(bytes(&d("power-all.csv")), bytes(&d("topk-all.csv")));

    // kill -9 of a shard, then a rerun: the merge is unchanged.
    let files: Vec<String> = (0..3).map(|i| d(&format!("topk-s{i}.csv"))).collect();
    let _ = std::fs::remove_file(&files[1]);
    let _ = std::fs::remove_file(format!("{}.shard.json", files[1]));
    let mut args: Vec<&str> = vec!["-q"];
    args.extend(base);
    args.extend(["--shard", "1/3", "--out", &files[1]]);
    let mut child = alkit_cmd().args(&args).spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(150));
    child.kill().unwrap();
    let _ = child.wait();
    let after_kill = d("after-kill.csv");
    let o = merge(&files, &after_kill);
    if o.status.success() {
        // The shard had already finished before the kill.
        assert_eq!(bytes(&after_kill), bytes(&d("topk-all.csv")));
    } else {
        assert!(String::from_utf8_lossy(&o.stderr).contains("topk-s1.csv"));
        assert!(!Path::new(&after_kill).exists());
    }
    ok(&args[1..], &[]);
    let rerun = d("rerun.csv");
    assert!(merge(&files, &rerun).status.success());
    assert_eq!(bytes(&rerun), bytes(&d("topk-all.csv")));

    // What merge refuses: a shard twice, a missing one, another run's, more rows than kept.
    let m = |files: &[&String], top: &str, says: &str| {
        let out = d("refused.csv");
        let mut args = vec!["merge", "--top", top, "--out", &out];
        args.extend(files.iter().map(|s| s.as_str()));
        let o = run(&args, &[]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(says), "{says}: {err}");
        assert!(!Path::new(&out).exists());
    };
    let p: Vec<String> = (0..3).map(|i| d(&format!("power-s{i}.csv"))).collect();
    m(&[&files[0], &files[0], &files[2]], "40", "also");
    m(&[&files[0], &files[1]], "40", "missing [2]");
    m(&[&files[0], &p[1], &files[2]], "40", "differs");
    m(&[&files[0], &files[1], &files[2]], "41", "kept its best 40");
    // Scorers that draw noise per batch cannot be sharded; softrank needs every rank.
    fails(
        &[
            "score",
            "--checkpoint",
            &ck,
            "--scorer",
            "regrad-star",
            "--shard",
            "0/2",
            "--out",
            &d("x.csv"),
        ],
        2,
        "regrad-star",
    );
    // A joint scorer (EPIG's targets are the items) sees the whole split or nothing; an
    // ensemble's draws come from no noise, so this is its own refusal.
    let ensemble = format!("{ck},{ck}");
    fails(
        &[
            "score",
            "--checkpoint",
            &ensemble,
            "--scorer",
            "epig",
            "--shard",
            "0/2",
            "--out",
            &d("x.csv"),
        ],
        2,
        "`epig` compares each item with the others",
    );
    fails(
        &[
            "score",
            "--checkpoint",
            &ck,
            "--select",
            "softrank",
            "--top",
            "5",
            "--shard",
            "0/2",
            "--out",
            &d("x.csv"),
        ],
        2,
        "softrank",
    );
    fails(
        &[
            "score",
            "--checkpoint",
            &ck,
            "--shard",
            "3/3",
            "--out",
            &d("x.csv"),
        ],
        2,
        "shard 3 of 3",
    );
    fails(
        &[
            "score",
            "--checkpoint",
            &ck,
            "--shards",
            "3",
            "--out",
            &d("x.csv"),
        ],
        2,
        "JOB_COMPLETION_INDEX",
    );
}

/// The shipped subset's training split as a safetensors pool `x` u8 `(n, 28, 28)`.
pub(crate) fn safetensors_pool(path: &Path) {
    let (train, _) = shipped();
    let x: Vec<u8> = train
        .features()
        .iter()
        .map(|v| (v * 255.0).round() as u8)
        .collect();
    let header = serde_json::json!({"x": {"dtype": "U8", "shape": [train.len(), 28, 28],
        "data_offsets": [0, x.len()]}})
    .to_string();
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend(header.into_bytes());
    bytes.extend(x);
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn streamed_scores_equal_in_memory_scores_chunk_by_chunk() {
    // The IDX folder is scored in one chunk (the default chunk holds all 2,000 items); the
    // same pixels as safetensors are streamed 128 items at a time in batches of 64 (a running
    // best-50 pruned on the way): the files must be the same bytes.
    let dir = tmp("stream");
    let d = |name: &str| dir.join(name).to_string_lossy().into_owned();
    // The CNN: its gradient evidence comes from the batched per-sample kernel.
    ok(
        &[
            "train",
            "--model",
            "cnn",
            "--steps",
            "30",
            "--out",
            &d("ck"),
        ],
        &[],
    );
    let st = d("pool.safetensors");
    safetensors_pool(Path::new(&st));
    let ck = d("ck");
    let cases: [(&str, Vec<&str>); 4] = [
        ("all", vec![]),
        ("top", vec!["--top", "50"]),
        (
            "softmax",
            vec!["--top", "50", "--select", "softmax", "--beta", "3"],
        ),
        ("softrank", vec!["--top", "50", "--select", "softrank"]),
    ];
    for (tag, extra) in cases {
        let score = |data: &str, more: &[&str], out: &str| {
            let mut args = vec![
                "score",
                "--checkpoint",
                &ck,
                "--scorer",
                "entropy,margin,regrad",
                "--data",
                data,
                "--batch",
                "64",
            ];
            args.extend(&extra);
            args.extend(more);
            args.extend(["--out", out]);
            ok(&args, &[]);
            std::fs::read(out).unwrap()
        };
        let whole = score("data", &[], &d(&format!("{tag}-idx.csv")));
        let streamed = score(&st, &["--chunk", "100"], &d(&format!("{tag}-st.csv")));
        if whole != streamed {
            let (w, s) = (
                String::from_utf8_lossy(&whole),
                String::from_utf8_lossy(&streamed),
            );
            let diff = w.lines().zip(s.lines()).find(|(a, b)| a != b);
            panic!("{tag}: streamed differs from whole, first at {diff:?}");
        }
        let lines = String::from_utf8(whole).unwrap().lines().count();
        assert_eq!(lines, if tag == "all" { 2001 } else { 51 }, "{tag}");
    }
    // Streamed shards merge to the same file.
    let files: Vec<String> = (0..3).map(|i| d(&format!("st-s{i}.csv"))).collect();
    for (i, f) in files.iter().enumerate() {
        let spec = format!("{i}/3");
        ok(
            &[
                "score",
                "--checkpoint",
                &ck,
                "--scorer",
                "entropy,margin,regrad",
                "--data",
                &st,
                "--batch",
                "64",
                "--top",
                "50",
                "--chunk",
                "100",
                "--shard",
                &spec,
                "--out",
                f,
            ],
            &[],
        );
    }
    let mut args = vec!["merge", "--top", "50", "--out"];
    let merged = d("st-merged.csv");
    args.push(&merged);
    args.extend(files.iter().map(String::as_str));
    ok(&args, &[]);
    assert_eq!(
        std::fs::read(&merged).unwrap(),
        std::fs::read(d("top-idx.csv")).unwrap()
    );
}

#[test]
fn batchbald_across_shards_picks_what_the_unsharded_run_picks() {
    // A three-member ensemble (seeds 1..3); BatchBALD over the best 60 by BALD, 10 picked.
    let dir = tmp("shards-joint");
    let d = |name: &str| dir.join(name).to_string_lossy().into_owned();
    for s in ["1", "2", "3"] {
        ok(
            &[
                "train",
                "--model",
                "mlp",
                "--steps",
                "20",
                "--seed",
                s,
                "--out",
                &d(s),
            ],
            &[],
        );
    }
    let members = format!("{},{},{}", d("1"), d("2"), d("3"));
    let score = |more: &[&str], out: &str, env: &[(&str, &str)]| {
        let mut args = vec![
            "score",
            "--checkpoint",
            &members,
            "--data",
            "data",
            "--scorer",
            "bald",
            "--top",
            "10",
            "--candidates",
            "60",
            "--batch",
            "64",
        ];
        if !more.contains(&"--select") {
            args.extend(["--select", "batchbald"]);
        }
        args.extend(more);
        args.extend(["--out", out]);
        ok(&args, env);
    };
    score(&[], &d("whole.csv"), &[]);
    let whole = std::fs::read_to_string(d("whole.csv")).unwrap();
    let rows: Vec<&str> = whole.lines().collect();
    assert_eq!(rows.len(), 11, "{whole}");
    assert_eq!(rows[0], "index,id,bald");
    // The greedy's first pick is BALD's argmax.
    let bald = |r: &str| r.rsplit(',').next().unwrap().parse::<f32>().unwrap();
    let top_bald = {
        score(&["--select", "top-k"], &d("plain.csv"), &[]);
        std::fs::read_to_string(d("plain.csv")).unwrap()
    };
    let plain: Vec<&str> = top_bald.lines().skip(1).collect();
    assert_eq!(rows[1], plain[0], "first pick = BALD's best");
    assert!(rows[1..].iter().all(|r| bald(r) <= bald(rows[1])));
    // ... and it then trades BALD for diversity: not simply BALD's best ten.
    let set = |v: &[&str]| {
        v.iter()
            .map(|r| r.to_string())
            .collect::<std::collections::BTreeSet<_>>()
    };
    assert_ne!(set(&rows[1..]), set(&plain[..10]));

    // Shards by flag (0 and 2) and by Slurm's variables (1), then the merge.
    let files: Vec<String> = (0..3).map(|i| d(&format!("s{i}.csv"))).collect();
    score(&["--shard", "0/3"], &files[0], &[]);
    score(
        &[],
        &files[1],
        &[
            ("SLURM_ARRAY_TASK_ID", "2"),
            ("SLURM_ARRAY_TASK_MIN", "1"),
            ("SLURM_ARRAY_TASK_COUNT", "3"),
        ],
    );
    score(&["--shard", "2/3"], &files[2], &[]);
    let head = std::fs::read_to_string(&files[0]).unwrap();
    assert!(
        head.starts_with("index,id,bald,p0_0,")
            && head.lines().next().unwrap().ends_with(",p2_9,key"),
        "{}",
        head.lines().next().unwrap()
    );
    let mut args = vec!["merge", "--top", "10", "--out"];
    let merged = d("merged.csv");
    args.push(&merged);
    args.extend(files.iter().map(String::as_str));
    ok(&args, &[]);
    assert_eq!(std::fs::read_to_string(&merged).unwrap(), whole);
    // Refused: another scorer, no --top, candidates below --top, MC dropout under a shard.
    let ck1 = d("1");
    for (extra, says) in [
        (
            vec![
                "--checkpoint",
                &members,
                "--scorer",
                "entropy",
                "--top",
                "5",
            ],
            "`bald` alone",
        ),
        (vec!["--checkpoint", &members, "--scorer", "bald"], "--top"),
        (
            vec![
                "--checkpoint",
                &members,
                "--scorer",
                "bald",
                "--top",
                "5",
                "--candidates",
                "4",
            ],
            "candidates",
        ),
        (
            vec![
                "--checkpoint",
                &ck1,
                "--scorer",
                "bald",
                "--top",
                "5",
                "--shard",
                "0/2",
            ],
            "draws noise",
        ),
    ] {
        let mut args = vec!["score", "--data", "data", "--select", "batchbald"];
        args.extend(extra);
        args.extend(["--out", "/tmp/never.csv"]);
        fails(&args, 2, says);
    }
}

/// docs/sharding.md shows the scheduler recipes as they are: each block announced by
/// `<!-- the file PATH, ... -->` holds exactly the file PATH, and every file of
/// `deploy/slurm/`, `deploy/k8s/` and `deploy/Dockerfile` is shown.
#[test]
fn the_docs_show_the_scheduler_recipes_as_they_are() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/sharding.md")).unwrap();
    let marker = "<!-- the file ";
    let mut shown = std::collections::BTreeSet::new();
    for (at, _) in doc.match_indices(marker) {
        let rest = &doc[at + marker.len()..];
        let path = rest.split([',', ' ']).next().unwrap();
        let body = rest.split_once("\n```").unwrap().1;
        let body = body.split_once('\n').unwrap().1;
        let body = &body[..body.find("```\n").expect("a closing fence")];
        let file = std::fs::read_to_string(root.join(path)).unwrap_or_default();
        assert_eq!(body, file, "docs/sharding.md's copy of {path}");
        shown.insert(path.to_string());
    }
    let mut files = vec!["deploy/Dockerfile".to_string()];
    for dir in ["deploy/slurm", "deploy/k8s"] {
        for e in std::fs::read_dir(root.join(dir)).unwrap() {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            files.push(format!("{dir}/{name}"));
        }
    }
    for f in files {
        assert!(shown.contains(&f), "docs/sharding.md does not show {f}");
    }
}

/// scripts/oci-image.sh builds the image deploy/Dockerfile describes (without an engine):
/// the same base, user, binary path, `USER`, `WORKDIR`, `ENV` and `ENTRYPOINT`, each
/// instruction of the Dockerfile's runtime stage found in the script's words for it.
#[test]
fn the_oci_script_builds_the_dockerfiles_image() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let docker = std::fs::read_to_string(root.join("deploy/Dockerfile")).unwrap();
    let script = std::fs::read_to_string(root.join("scripts/oci-image.sh")).unwrap();
    let runtime = docker
        .rsplit_once("\nFROM ")
        .map(|(_, r)| format!("FROM {r}"))
        .unwrap();
    let mut checked = 0;
    for line in runtime
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (op, arg) = line.split_once(' ').unwrap();
        let expect = match op {
            "FROM" => {
                assert_eq!(
                    arg, "debian:bookworm-slim",
                    "the script's base is bookworm's"
                );
                "debootstrap --variant=minbase bookworm".to_string()
            }
            "RUN" => format!("chroot \"$BUNDLE/rootfs\" {arg}"),
            "COPY" => format!("\"$BUNDLE/rootfs{}\"", arg.rsplit(' ').next().unwrap()),
            "USER" => format!("--config.user {arg}"),
            "WORKDIR" => format!("--config.workingdir {arg}"),
            "ENV" => format!("--config.env {arg}"),
            "ENTRYPOINT" => {
                let args: Vec<String> = serde_json::from_str(arg).unwrap();
                format!("--config.entrypoint {}", args.join(" "))
            }
            other => panic!("deploy/Dockerfile's {other}: add it to scripts/oci-image.sh and here"),
        };
        assert!(
            script.contains(&expect),
            "scripts/oci-image.sh lacks `{expect}` ({line})"
        );
        checked += 1;
    }
    assert_eq!(checked, 7, "the runtime stage's instructions");
}

/// What the checkpoint's content hash costs: a 45 MB `model.safetensors` (a ResNet-18's size)
/// hashed as a shard hashes it. A measurement, run by hand:
/// `cargo test --release --test alkit -- --ignored hashing_a_45_mb_checkpoint`.
#[test]
#[ignore]
fn hashing_a_45_mb_checkpoint() {
    let dir = tmp("hash45");
    let ck = dir.join("ck");
    std::fs::create_dir_all(&ck).unwrap();
    let mut bytes = vec![0u8; 45 << 20];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for b in bytes.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    std::fs::write(ck.join("model.safetensors"), &bytes).unwrap();
    std::fs::write(ck.join("config.json"), b"{}").unwrap();
    let names = [ck.to_string_lossy().into_owned()];
    let hub = alkit::hub::Hub::new(dir.join("cache"), true);
    let mut times = Vec::new();
    for _ in 0..5 {
        let t = std::time::Instant::now();
        alkit::checkpoint::content_hash(
            &names,
            &alkit::checkpoint::OpenOptions::default(),
            &hub,
            &mut alkit::observe::Silent,
        )
        .unwrap();
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    #[allow(clippy::print_stderr)]
    {
        eprintln!("content hash of 45 MiB: median {:.3} s of 5", times[2]);
    }
}
