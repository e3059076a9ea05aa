//! Every numeric flag of every command, driven to 0, 1, huge, NaN and -1 (issue 37): each
//! run ends by itself (exit 0, 1 or 2, never a signal or an abort) within a time limit and
//! under a memory cap, and a refusal (exit 2) names the flag. The flags are read from each
//! command's `--help`, and a flag is numeric when clap refuses a word for it, so a new flag
//! is covered without a line here.

use super::*;

/// The commands and a small, valid, fast base for each: `(flag, value)` pairs (a tested
/// flag replaces its pair; an empty flag is a positional argument), `{d}` the run's folder,
/// `{data}` `{ck}` `{pool}` and `{fx}` the fixtures. `label` and `serve-label-studio` are left out: they serve until stopped (their sizes are those of `query`; the backend refuses `--retrain-every 0` and `--subsample 0` when it binds).
const BASES: &[(&str, &[(&str, &str)])] = &[
    (
        "curve",
        &[
            ("--data", "{data}"),
            ("--model", "mlp"),
            ("--scorer", "entropy"),
            ("--seeds", "1"),
            ("--cycles", "1"),
            ("--steps", "1"),
            ("--initial", "10"),
            ("--query", "5"),
            ("--out", "{d}/o"),
        ],
    ),
    (
        "train",
        &[
            ("--data", "{data}"),
            ("--model", "mlp"),
            ("--steps", "1"),
            ("--out", "{d}/o"),
        ],
    ),
    (
        "score",
        &[
            ("--checkpoint", "{ck}"),
            ("--data", "{data}"),
            ("--scorer", "entropy"),
            ("--out", "{d}/s.csv"),
        ],
    ),
    (
        "embed",
        &[
            ("--checkpoint", "{ck}"),
            ("--data", "{data}"),
            ("--out", "{d}/e.safetensors"),
        ],
    ),
    (
        "merge",
        &[
            ("--top", "5"),
            ("--out", "{d}/m.csv"),
            ("", "{fx}/shard0.csv"),
            ("", "{fx}/shard1.csv"),
        ],
    ),
    (
        "bench",
        &[
            ("--data", "{data}"),
            ("--model", "mlp"),
            ("--scorer", "entropy"),
            ("--n", "64"),
            ("--repeats", "1"),
            ("--train-steps", "1"),
        ],
    ),
    (
        "ood",
        &[
            ("--train-data", "{data}"),
            ("--ood-data", "{data}"),
            ("--model", "mlp"),
            ("--steps", "1"),
            ("--scorer", "entropy"),
            ("--out", "{d}/o.json"),
        ],
    ),
    (
        "calibrate",
        &[
            ("--data", "{data}"),
            ("--model", "mlp"),
            ("--steps", "1"),
            ("--scorer", "entropy"),
            ("--out", "{d}/c.json"),
        ],
    ),
    (
        "surface",
        &[
            ("--points", "40"),
            ("--steps", "1"),
            ("--seeds", "1"),
            ("--out", "{d}/o"),
        ],
    ),
    (
        "init",
        &[("--pool", "{pool}"), ("--state", "{d}/s"), ("--steps", "1")],
    ),
    (
        "query",
        &[
            ("--state", "{d}/sess"),
            ("--scorer", "entropy"),
            ("--n", "1"),
            ("--out", "{d}/q.csv"),
        ],
    ),
];

const VALUES: &[&str] = &["0", "1", "18446744073709551615", "1e300", "NaN", "-1"];

/// Per run: a memory cap (address space, as `prlimit --as` sets it) and a time limit.
const MEMORY_CAP: &str = "6000000000";
const TIME_LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

const POOL: &str = "id,label,a,b\np0,cat,0.1,0.2\np1,dog,0.3,0.1\np2,,0.5,0.5\np3,,0.9,0.1\np4,,0.2,0.8\np5,,0.4,0.4\n";

/// The long flags of `cmd` that take a value, from its `--help`.
fn value_flags(cmd: &str) -> Vec<String> {
    let o = alkit_cmd().args([cmd, "--help"]).output().unwrap();
    assert!(o.status.success(), "{cmd} --help");
    let mut flags = Vec::new();
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        let toks: Vec<&str> = line.split_whitespace().collect();
        // `--flag <VALUE>  help` (also after a short form: `-n, --n <N>`).
        if let Some(w) = toks
            .windows(2)
            .take(2)
            .find(|w| w[0].starts_with("--") && w[1].starts_with('<'))
        {
            flags.push(w[0].to_string());
        }
    }
    flags
}

/// Whether clap refuses a word for `flag` (parsed before `--help` is acted on): a number.
fn is_numeric(cmd: &str, flag: &str) -> bool {
    let o = alkit_cmd()
        .args([cmd, &format!("{flag}=notanumber"), "--help"])
        .output()
        .unwrap();
    let takes_one = || {
        alkit_cmd()
            .args([cmd, &format!("{flag}=1"), "--help"])
            .output()
            .unwrap()
            .status
            .success()
    };
    // A named setting parsed by `FromStr` (a model, a penalty) refuses "notanumber" too, but
    // it refuses "1" as well: it is not a number.
    !o.status.success()
        && String::from_utf8_lossy(&o.stderr).contains(&format!("'{flag} <"))
        && !String::from_utf8_lossy(&o.stderr).contains("possible values")
        && takes_one()
}

pub(super) struct Outcome {
    pub(super) code: Option<i32>,
    pub(super) stderr: String,
    elapsed: std::time::Duration,
    pub(super) timed_out: bool,
}

fn run_capped(args: &[String], cwd: &Path) -> Outcome {
    run_capped_at(args, cwd, MEMORY_CAP)
}

/// [`run_capped`] under an address-space cap of `cap` bytes.
pub(super) fn run_capped_at(args: &[String], cwd: &Path, cap: &str) -> Outcome {
    use std::io::Read;
    let bin = env!("CARGO_BIN_EXE_alkit");
    let mut c = if Path::new("/usr/bin/prlimit").exists() {
        let mut c = Command::new("/usr/bin/prlimit");
        c.arg(format!("--as={cap}")).arg("--").arg(bin);
        c
    } else {
        Command::new(bin)
    };
    let mut child = c
        .arg("-q")
        .args(args)
        .current_dir(cwd)
        .env("HF_HUB_OFFLINE", "1")
        .env("HF_HUB_CACHE", cwd.join("hub-cache"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut err_pipe = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err_pipe.read_to_string(&mut s);
        s
    });
    let start = std::time::Instant::now();
    let mut timed_out = false;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > TIME_LIMIT {
            timed_out = true;
            let _ = child.kill();
            break child.wait().unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    Outcome {
        code: status.code(),
        stderr: reader.join().unwrap(),
        elapsed: start.elapsed(),
        timed_out,
    }
}

#[test]
fn every_numeric_flag_at_0_1_huge_nan_and_minus_1_ends_by_itself_and_names_the_flag() {
    let root = tmp("flag-sizes");
    let fx = root.join("fx");
    let data = fx.join("data");
    copy_dir(&data_dir(), &data);
    std::fs::write(fx.join("pool.csv"), POOL).unwrap();
    let s = |p: &Path| p.display().to_string();
    for args in [
        vec![
            "train",
            "--model",
            "mlp",
            "--steps",
            "2",
            "--data",
            &s(&data),
        ],
        vec!["init", "--pool", &s(&fx.join("pool.csv")), "--steps", "2"],
    ] {
        let out = if args[0] == "train" {
            "--out"
        } else {
            "--state"
        };
        let dst = fx.join(if args[0] == "train" { "ck" } else { "sess" });
        let o = alkit_cmd()
            .arg("-q")
            .args(&args)
            .args([out, &s(&dst)])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    for k in 0..2 {
        let o = alkit_cmd()
            .arg("-q")
            .args([
                "score",
                "--checkpoint",
                &s(&fx.join("ck")),
                "--data",
                &s(&data),
            ])
            .args(["--top", "5", "--shard", &format!("{k}/2"), "--out"])
            .arg(fx.join(format!("shard{k}.csv")))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    // Every run: (command, flag, value).
    let mut runs: Vec<(&str, Option<String>, &str)> = Vec::new();
    for (cmd, base) in BASES {
        // The base alone must succeed, or the flag runs below would test nothing.
        runs.push((cmd, None, ""));
        for flag in value_flags(cmd) {
            if !is_numeric(cmd, &flag) {
                continue;
            }
            for v in VALUES {
                runs.push((cmd, Some(flag.clone()), v));
            }
        }
        assert!(
            base.iter()
                .all(|(f, _)| f.is_empty() || f.starts_with("--")),
            "{cmd}: the base names flags"
        );
    }
    let numeric = runs.iter().filter(|r| r.1.is_some()).count();
    assert!(
        numeric >= 5 * 60,
        "only {numeric} runs: are the flags read?"
    );
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::<String>::new());
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| loop {
                let k = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let Some((cmd, flag, value)) = runs.get(k) else {
                    break;
                };
                let d = root.join("runs").join(k.to_string());
                std::fs::create_dir_all(&d).unwrap();
                if *cmd == "query" {
                    copy_dir(&fx.join("sess"), &d.join("sess"));
                }
                let base = BASES.iter().find(|(c, _)| c == cmd).unwrap().1;
                let mut args = vec![cmd.to_string()];
                for (f, v) in base {
                    if f.is_empty() {
                        args.push(v.to_string());
                    } else if Some(*f) != flag.as_deref() {
                        args.push(format!("{f}={v}"));
                    }
                }
                if let Some(f) = flag {
                    args.push(format!("{f}={value}"));
                }
                let args: Vec<String> = args
                    .iter()
                    .map(|a| {
                        a.replace("{d}", &s(&d))
                            .replace("{data}", &s(&data))
                            .replace("{ck}", &s(&fx.join("ck")))
                            .replace("{pool}", &s(&fx.join("pool.csv")))
                            .replace("{fx}", &s(&fx))
                    })
                    .collect();
                let o = run_capped(&args, &d);
                let what = format!("{} ({:.1} s)", args.join(" "), o.elapsed.as_secs_f64());
                let problem = if o.timed_out {
                    Some(format!("still running after {TIME_LIMIT:?}"))
                } else {
                    match (o.code, flag) {
                        (None, _) => Some("killed by a signal".to_string()),
                        (Some(0), _) => None,
                        (Some(c), None) => Some(format!("the base failed ({c})")),
                        (Some(1), _) => None,
                        (Some(2), Some(f)) if o.stderr.contains(f.as_str()) => None,
                        (Some(2), Some(f)) => Some(format!("exit 2 does not name {f}")),
                        (Some(c), _) => Some(format!("exit {c}")),
                    }
                };
                if o.stderr.contains("panicked") {
                    failures
                        .lock()
                        .unwrap()
                        .push(format!("{what}: panicked: {}", o.stderr));
                } else if let Some(p) = problem {
                    failures
                        .lock()
                        .unwrap()
                        .push(format!("{what}: {p}: {}", o.stderr.trim()));
                }
                let _ = std::fs::remove_dir_all(&d);
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} of {} runs failed:\n{}",
        failures.len(),
        runs.len(),
        failures.join("\n")
    );
}

/// A round's sample draws are checked against the memory this process may use before the
/// round trains: under a 700 MB address-space cap, 10,000 draws of about 2,000
/// candidates x 10 classes (0.8 GB) are refused with exit 2 naming the flag, and nothing is
/// written (no curve folder, no batch file, the session untouched), while the same run with
/// 10 draws succeeds under the same cap (the cap is not what refuses it).
#[test]
fn round_draws_past_the_memory_limit_are_refused_before_any_work() {
    // util-linux's prlimit caps the address space; without it there is no cap to test under.
    if !Path::new("/usr/bin/prlimit").exists() {
        return;
    }
    const CAP: &str = "700000000";
    let root = tmp("round-draws");
    let s = |p: &Path| p.display().to_string();
    // A session over 2,000 CSV items of 10 classes, 40 of them labeled.
    let mut pool = String::from("id,label,a,b\n");
    for i in 0..2000u32 {
        let label = if i < 40 {
            (i % 10).to_string()
        } else {
            String::new()
        };
        let (a, b) = (
            (i * 37 % 1000) as f32 / 1000.0,
            (i * 91 % 1000) as f32 / 1000.0,
        );
        pool.push_str(&format!("p{i},{label},{a},{b}\n"));
    }
    std::fs::write(root.join("pool.csv"), pool).unwrap();
    let sess = root.join("sess");
    let o = alkit_cmd()
        .args(["-q", "init", "--steps", "1", "--pool"])
        .arg(root.join("pool.csv"))
        .arg("--state")
        .arg(&sess)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let before = std::fs::read(sess.join("session.json")).unwrap();
    let data = s(&data_dir());
    for samples in ["10000", "10"] {
        let refused = samples == "10000";
        let curve_out = root.join(format!("curve{samples}"));
        let batch = root.join(format!("q{samples}.csv"));
        let runs: [(Vec<String>, &str, &Path); 2] = [
            (
                [
                    "curve",
                    "--data",
                    &data,
                    "--model",
                    "cnn",
                    "--scorer",
                    "bald",
                    "--seeds",
                    "1",
                    "--cycles",
                    "1",
                    "--steps",
                    "1",
                    "--initial",
                    "10",
                    "--query",
                    "5",
                    "--mc-samples",
                    samples,
                    "--out",
                    &s(&curve_out),
                ]
                .map(String::from)
                .to_vec(),
                "--mc-samples",
                &curve_out,
            ),
            (
                [
                    "query",
                    "--state",
                    &s(&sess),
                    "--scorer",
                    "perturb-x",
                    "--n",
                    "1",
                    "--perturb-samples",
                    samples,
                    "--out",
                    &s(&batch),
                ]
                .map(String::from)
                .to_vec(),
                "--perturb-samples",
                &batch,
            ),
        ];
        for (args, flag, written) in runs {
            let o = run_capped_at(&args, &root, CAP);
            let what = format!("{} under {CAP} bytes: {}", args.join(" "), o.stderr);
            assert!(!o.timed_out && !o.stderr.contains("panicked"), "{what}");
            if refused {
                assert_eq!(o.code, Some(2), "{what}");
                assert!(
                    o.stderr.contains(flag) && o.stderr.contains("memory"),
                    "{what}"
                );
                assert!(!written.exists(), "{what}: wrote {}", written.display());
            } else {
                assert_eq!(o.code, Some(0), "{what}");
                assert!(written.exists(), "{what}");
            }
        }
        if refused {
            assert_eq!(
                std::fs::read(sess.join("session.json")).unwrap(),
                before,
                "a refused query changed the session"
            );
        }
    }
}
