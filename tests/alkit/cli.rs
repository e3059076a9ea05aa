//! The binary end to end: exit codes, errors naming the culprit, train then score.

use super::*;

#[test]
fn cli_runs_a_tiny_curve_and_reports_errors_with_exit_codes() {
    let out = tmp("cli");
    let o = alkit_cmd()
        .args([
            "-q",
            "curve",
            "--scorer",
            "least-confidence",
            "--cycles",
            "1",
            "--steps",
            "5",
            "--query",
            "5",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("least-confidence"), "{stdout}");
    for f in [
        "run.json",
        "curve.csv",
        "summary.csv",
        "curve.svg",
        "curve.png",
        "runs/least-confidence-seed0.json",
    ] {
        assert!(out.join(f).is_file(), "missing {f}");
    }
    // Without --scorer, the four default strategies run (and nothing else).
    let d = out.join("defaults");
    let o = alkit_cmd()
        .args(["-q", "curve", "--cycles", "0", "--steps", "1", "--out"])
        .arg(&d)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut runs: Vec<String> = std::fs::read_dir(d.join("runs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    runs.sort();
    assert_eq!(
        runs,
        [
            "entropy-seed0.json",
            "least-confidence-seed0.json",
            "margin-seed0.json",
            "random-seed0.json"
        ]
    );
    // Rerunning into the same folder is refused (exit 1) and names --resume.
    let o = alkit_cmd()
        .args(["-q", "curve", "--cycles", "1", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--resume"));
    // --resume with another value of a setting than the run's is refused (exit 2), naming
    // the flag and the run's value; the run's own settings repeated pass (a script adding
    // --resume to the command it ran).
    for (flag, value) in [
        ("--steps", "3"),
        ("--scorer", "entropy"),
        ("--cold-start", ""),
    ] {
        let o = alkit_cmd()
            .args(["-q", "curve", flag])
            .args((!value.is_empty()).then_some(value))
            .arg("--resume")
            .arg(&out)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{flag}: {said}");
        assert!(said.contains(flag) && said.contains("run.json"), "{said}");
    }
    assert!(String::from_utf8_lossy(
        &alkit_cmd()
            .args(["-q", "curve", "--steps", "3", "--resume"])
            .arg(&out)
            .output()
            .unwrap()
            .stderr
    )
    .contains("`--steps` 5"));
    let o = alkit_cmd()
        .args([
            "-q",
            "curve",
            "--scorer",
            "least-confidence",
            "--cycles",
            "1",
        ])
        .args([
            "--steps", "5", "--query", "5", "--seed", "0", "--data", "data", "--resume",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Resuming a finished run is a no-op that succeeds.
    let o = alkit_cmd()
        .args(["-q", "curve", "--resume"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Bad flag values: clap's usage error, exit 2, naming the valid scorers.
    let o = alkit_cmd()
        .args(["curve", "--scorer", "bogus"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("least-confidence"));
    // Settings the library rejects: exit 2 too.
    let o = alkit_cmd()
        .args(["-q", "curve", "--cycles", "100000", "--out"])
        .arg(out.join("x"))
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // Missing data folder: exit 1, the message names the file.
    let o = alkit_cmd()
        .args(["-q", "curve", "--data", "/nonexistent", "--out"])
        .arg(out.join("y"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent"));
}

#[test]
fn cli_train_then_score_writes_one_row_per_item() {
    let dir = tmp("cli-score");
    let ck = dir.join("ckpt");
    let o = alkit_cmd()
        .args(["-q", "train", "--steps", "30", "--out"])
        .arg(&ck)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let csv = dir.join("scores.csv");
    let o = alkit_cmd()
        .args([
            "score",
            "--split",
            "test",
            "--scorer",
            "entropy,margin",
            "--checkpoint",
        ])
        .arg(&ck)
        .arg("--out")
        .arg(&csv)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&csv).unwrap();
    // The command is the library's score job and nothing else: the same job through
    // `alkit::jobs::score::run` writes the same bytes.
    let job = alkit::jobs::score::ScoreJob {
        checkpoints: vec![ck.to_string_lossy().into_owned()],
        checkpoint_options: Default::default(),
        data: "data".into(),
        split: alkit::jobs::score::Split::Test,
        scorers: vec![kind("entropy"), kind("margin")],
        settings: Default::default(),
        top: None,
        candidates: None,
        batch: None,
        chunk: 16384,
        seed: 0,
        shard: None,
        out: dir.join("library.csv"),
    };
    let hub = alkit::hub::Hub::new(dir.join("no-hub"), true);
    let r = alkit::jobs::score::run(&job, &hub, &Device::Cpu, &mut alkit::observe::Silent).unwrap();
    assert_eq!((r.scored, r.rows), (500, 500));
    assert_eq!(std::fs::read_to_string(&job.out).unwrap(), text);
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("index,id,entropy,margin"));
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), 500);
    for r in &rows {
        let v: Vec<f64> = r.split(',').skip(2).map(|x| x.parse().unwrap()).collect();
        assert!(
            v[0] >= 0.0 && v[0] <= 10f64.ln() + 1e-6 && (0.0..=1.0 + 1e-6).contains(&v[1]),
            "{r}"
        );
    }
    // Two checkpoints (another seed) form an ensemble: BALD over its members lies in
    // [0, ln 10] and is not identically zero (the members disagree somewhere). The second
    // folder has commas in its name, so the comma-separated list is split by what exists.
    let ck2 = dir.join("ckpt,2,b");
    let o = alkit_cmd()
        .args(["-q", "train", "--steps", "30", "--seed", "1", "--out"])
        .arg(&ck2)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let both = format!("{},{}", ck.display(), ck2.display());
    let o = alkit_cmd()
        .args([
            "score",
            "--split",
            "test",
            "--scorer",
            "bald",
            "--checkpoint",
            &both,
            "--out",
        ])
        .arg(&csv)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let bald: Vec<f64> = std::fs::read_to_string(&csv)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.rsplit(',').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(bald.len(), 500);
    assert!(bald
        .iter()
        .all(|&b| (-1e-6..=10f64.ln() + 1e-6).contains(&b)));
    assert!(bald.iter().any(|&b| b > 1e-3));
    // `random` is not a scorer: a settings error.
    let o = alkit_cmd()
        .args([
            "score",
            "--scorer",
            "random",
            "--out",
            "/tmp/x.csv",
            "--checkpoint",
        ])
        .arg(&ck)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn curve_refuses_seed_counts_and_strategy_lists_it_cannot_honour() {
    // Each is a settings error (exit 2) naming the flag, and writes nothing: a seed count
    // that would not fit in memory, seeds past the largest u64, a strategy given twice, and
    // --lr for DUQ (which trains with its own SGD schedule).
    let out = tmp("cli-refusals");
    let cases: [(&[&str], &str); 5] = [
        (&["--seeds", "0"], "seeds"),
        (&["--seeds", "4294967296"], "seeds"),
        (&["--seed", "18446744073709551615", "--seeds", "2"], "seed"),
        (
            &["--scorer", "entropy", "--scorer", "entropy,margin"],
            "entropy",
        ),
        (&["--model", "duq", "--lr", "0.01"], "lr"),
    ];
    for (k, (args, culprit)) in cases.iter().enumerate() {
        let dir = out.join(format!("case{k}"));
        let o = alkit_cmd()
            .args(["-q", "curve", "--cycles", "0", "--steps", "1"])
            .args(*args)
            .arg("--out")
            .arg(&dir)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(culprit), "{args:?}: {err}");
        assert!(!dir.exists(), "{args:?} wrote {}", dir.display());
    }
    // The largest seed itself is a valid seed: one run, named after it.
    let dir = out.join("max-seed");
    let o = alkit_cmd()
        .args([
            "-q", "curve", "--cycles", "0", "--steps", "1", "--scorer", "random",
        ])
        .args(["--seed", "18446744073709551615", "--out"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(dir
        .join("runs/random-seed18446744073709551615.json")
        .is_file());
}

#[test]
fn outputs_never_overwrite_inputs_or_state() {
    // `--out` naming a checkpoint's own files, a run's state, a session's state, or an input
    // data file is a settings error (exit 2) and every file stays byte for byte as it was.
    let dir = tmp("cli-aliases");
    let ck = dir.join("ckpt");
    let run = |args: &[&std::ffi::OsStr]| {
        let o = alkit_cmd().arg("-q").args(args).output().unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let os = |s: &str| std::ffi::OsString::from(s);
    let (code, err) = run(&[
        &os("train"),
        &os("--steps"),
        &os("2"),
        &os("--out"),
        ck.as_os_str(),
    ]);
    assert_eq!(code, Some(0), "{err}");
    let curve = dir.join("run");
    let (code, err) = run(&[
        &os("curve"),
        &os("--cycles"),
        &os("0"),
        &os("--steps"),
        &os("1"),
        &os("--scorer"),
        &os("random"),
        &os("--out"),
        curve.as_os_str(),
    ]);
    assert_eq!(code, Some(0), "{err}");
    let data_file = data_dir().join("t10k-labels-idx1-ubyte.gz");
    let protected = [
        ck.join("config.json"),
        ck.join("model.safetensors"),
        curve.join("run.json"),
        curve.join("runs").join("random-seed0.json"),
        data_file.clone(),
    ];
    let before: Vec<Vec<u8>> = protected
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    for target in &protected {
        let (code, err) = run(&[
            &os("score"),
            &os("--checkpoint"),
            ck.as_os_str(),
            &os("--out"),
            target.as_os_str(),
        ]);
        assert_eq!(code, Some(2), "{}: {err}", target.display());
        assert!(err.contains("--out") || err.contains("`out`"), "{err}");
    }
    let (code, err) = run(&[
        &os("train"),
        &os("--steps"),
        &os("2"),
        &os("--out"),
        data_dir().as_os_str(),
    ]);
    assert_eq!(code, Some(2), "{err}");
    for (p, b) in protected.iter().zip(&before) {
        assert_eq!(&std::fs::read(p).unwrap(), b, "{} changed", p.display());
    }
    // A session's state: `query --out STATE/session.json` is refused, the state unchanged.
    let state = dir.join("sess");
    let (code, err) = run(&[
        &os("init"),
        &os("--pool"),
        data_dir().as_os_str(),
        &os("--state"),
        state.as_os_str(),
        &os("--steps"),
        &os("2"),
    ]);
    assert_eq!(code, Some(0), "{err}");
    let session = state.join("session.json");
    let before = std::fs::read(&session).unwrap();
    let (code, err) = run(&[
        &os("query"),
        &os("--state"),
        state.as_os_str(),
        &os("--n"),
        &os("5"),
        &os("--out"),
        session.as_os_str(),
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(std::fs::read(&session).unwrap(), before);
}

#[test]
fn ctrl_c_stops_a_curve_at_a_safe_point_and_resume_finishes_it_as_if_uninterrupted() {
    use std::io::{BufRead, Read};
    use std::process::Stdio;
    let dir = tmp("cli-ctrl-c");
    let args = |out: &Path| {
        let mut c = alkit_cmd();
        c.args(["curve", "--scorer", "entropy", "--cycles", "4"])
            .args(["--steps", "40", "--query", "5", "--out"])
            .arg(out);
        c
    };
    // Uninterrupted, with stderr a pipe: plain progress lines, one at least per cycle.
    let whole = dir.join("whole");
    let o = args(&whole).output().unwrap();
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{said}");
    let lines: Vec<&str> = said.lines().filter(|l| l.starts_with("alkit: ")).collect();
    assert!(lines.iter().any(|l| l.contains("[5/5 cycles")), "{said}");
    assert!(!said.contains('\r') && !said.contains('\u{1b}'), "{said:?}");
    // SIGINT once the first cycle is done: exit 130, the resume command named.
    let cut = dir.join("cut");
    let mut child = args(&cut).stderr(Stdio::piped()).spawn().unwrap();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "no cycle ended: {seen}"
        );
        seen.push_str(&line);
        if line.contains("done: accuracy") {
            break;
        }
    }
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap()
        .success());
    err.read_to_string(&mut seen).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{seen}");
    assert!(seen.contains("stopping at the next safe point"), "{seen}");
    // The path is quoted for a shell where it needs to be (CI's has spaces).
    let resume = format!("alkit curve --resume {}", cut.display());
    let quoted = format!("alkit curve --resume '{}'", cut.display());
    assert!(seen.contains("interrupted: "), "{seen}");
    assert!(seen.contains(&resume) || seen.contains(&quoted), "{seen}");
    let o = alkit_cmd()
        .args(["-q", "curve", "--resume"])
        .arg(&cut)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let csv = |d: &Path| strip_timings(&std::fs::read_to_string(d.join("curve.csv")).unwrap());
    assert_eq!(csv(&cut), csv(&whole));
}

#[test]
fn ood_scores_a_plain_image_folder_and_metrics_reads_the_scores_it_wrote() {
    let dir = tmp("cli-ood-folder");
    // Noise images in a plain folder: no train/ or test/, no labels.
    let (train, _) = shipped();
    let mut rng = 7u64;
    let noise: Vec<f32> = (0..40 * 784)
        .map(|_| {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (rng >> 40) as f32 / (1u64 << 24) as f32
        })
        .collect();
    let ds =
        alkit::data::Dataset::new(noise, vec![0; 40], train.item_shape().to_vec(), 10).unwrap();
    let items: Vec<(usize, Option<String>)> = (0..40).map(|i| (i, None)).collect();
    write_image_folder(&dir.join("noise"), &ds, &items).unwrap();
    let out = dir.join("ood");
    let o = alkit_cmd()
        .args(["-q", "ood", "--train-data", "data", "--ood-data"])
        .arg(dir.join("noise"))
        .args(["--steps", "60", "--scorer", "entropy,energy", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let scores = std::fs::read_to_string(out.join("scores.csv")).unwrap();
    assert_eq!(scores.lines().filter(|l| l.starts_with("ood,")).count(), 40);
    // metrics on that file gives ood.csv's figures, scorer by scorer.
    let o = alkit_cmd()
        .args(["metrics", "--json", "--scores"])
        .arg(out.join("scores.csv"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let table = std::fs::read_to_string(out.join("ood.csv")).unwrap();
    let mut rows = table.lines();
    let header: Vec<&str> = rows.next().unwrap().split(',').collect();
    let mut seen = 0;
    for row in rows {
        let cells: Vec<&str> = row.split(',').collect();
        for (k, v) in header.iter().zip(&cells).skip(1) {
            let want: f64 = v.parse().unwrap();
            let have = got[cells[0]][*k].as_f64().unwrap();
            assert!(
                (want - have).abs() < 1e-6,
                "{} {k}: {want} vs {have}",
                cells[0]
            );
        }
        seen += 1;
    }
    assert_eq!(seen, 2);
    // The model saved there knows digits. Letters (the same images in folders a-j) are not
    // its classes: `ood` scores them and says why it measured no accuracy, `calibrate`
    // refuses them; digits 3 and 7 alone are put in the model's order by name.
    let (train_all, test_all) = shipped();
    let write_split = |name: &str, label: &dyn Fn(u32) -> Option<String>| {
        for (split, ds) in [("train", &train_all), ("test", &test_all)] {
            let items: Vec<(usize, Option<String>)> = (0..ds.len())
                .filter_map(|i| label(ds.labels()[i]).map(|c| (i, Some(c))))
                .take(200)
                .collect();
            write_image_folder(&dir.join(name).join(split), ds, &items).unwrap();
        }
    };
    write_split("letters", &|l| Some(((b'a' + l as u8) as char).to_string()));
    write_split("three-seven", &|l| {
        matches!(l, 3 | 7).then(|| l.to_string())
    });
    let model = out.join("model");
    let o = alkit_cmd()
        .args(["-q", "ood", "--checkpoint"])
        .arg(&model)
        .arg("--train-data")
        .arg(dir.join("letters"))
        .arg("--ood-data")
        .arg(dir.join("noise"))
        .args(["--scorer", "entropy", "--out"])
        .arg(dir.join("ood-letters"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(
        said.contains("accuracy not measured")
            && said.contains("[a, b, c, d, e, f, ... (10 in all)]"),
        "{said}"
    );
    let calibrate = |data: &str, out: &str| {
        alkit_cmd()
            .args(["-q", "calibrate", "--checkpoint"])
            .arg(&model)
            .arg("--data")
            .arg(dir.join(data))
            .args(["--scorer", "entropy", "--out"])
            .arg(dir.join(out))
            .output()
            .unwrap()
    };
    let o = calibrate("letters", "cal-letters");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("not among the model's classes") && err.contains("label_names"),
        "{err}"
    );
    assert!(!dir.join("cal-letters").exists());
    let o = calibrate("three-seven", "cal-37");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let said = String::from_utf8_lossy(&o.stdout).to_string();
    let acc: f64 = said
        .split("test accuracy ")
        .nth(1)
        .and_then(|r| r.split('%').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{said}"));
    // By position, 3 and 7 would be read as classes 0 and 1: near 0%.
    assert!(acc > 80.0, "{said}");
    // Without --json, one row per scorer.
    let o = alkit_cmd()
        .args(["metrics", "--scores"])
        .arg(out.join("scores.csv"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.starts_with("scorer") && text.lines().count() == 3,
        "{text}"
    );
}
