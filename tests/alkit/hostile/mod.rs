//! The bad-input table: every source kind, checkpoints, sessions, runs, metrics files and
//! flags, each case a hostile or broken input run through the real binary. Each asserts the
//! exit code, that stderr names the culprit (file, line, item, tensor or flag), and that no
//! file was written or changed anywhere under the case's folder or the shared fixtures. The
//! fuzzers' finds (fuzz/README.md) become rows here.
//!
//! One file per kind of input (its rows, in the order the guide lists them), the shared
//! fixtures in `fixtures.rs`. `ALKIT_HOSTILE_CASES=PATTERN[,PATTERN...]` runs only the rows
//! whose name contains one of the patterns (`ALKIT_HOSTILE_CASES=npz cargo test hostile`).

use super::*;
pub(crate) use fixtures::torch_zip;
use fixtures::*;
use hub::hostile_hub;
use std::collections::BTreeMap;

type Setup = fn(&Path, &Fx);

/// One row: a name, what to put in the case folder, the arguments (`{d}` the case folder,
/// `{data}` `{ck}` `{sess}` `{pool}` `{run}` the fixtures), the exit code, what stderr
/// must name, and the environment a scheduler set (none but for the `env` rows).
struct Case {
    name: &'static str,
    setup: Setup,
    args: &'static [&'static str],
    code: i32,
    says: &'static [&'static str],
    env: &'static [(&'static str, &'static str)],
}

macro_rules! case {
    ($name:literal, $setup:expr, [$($a:literal),* $(,)?], $code:literal, [$($s:literal),* $(,)?]) => {
        case!($name, $setup, [$($a),*], $code, [$($s),*], env [])
    };
    ($name:literal, $setup:expr, [$($a:literal),* $(,)?], $code:literal, [$($s:literal),* $(,)?],
     env [$(($k:literal, $v:literal)),* $(,)?]) => {
        Case {
            name: $name,
            setup: $setup,
            args: &[$($a),*],
            code: $code,
            says: &[$($s),*],
            env: &[$(($k, $v)),*],
        }
    };
}

mod checkpoints;
mod csv;
mod fixtures;
mod flags;
mod hub;
mod idx;
mod images;
mod label_sets;
mod more_sessions;
mod numpy;
mod parquet;
mod pytorch;
mod runs;
mod safetensors;
mod sessions;
mod shards;
mod targets;

/// The variables a scheduler sets to say which shard a process is: removed from every case's
/// environment (the suite may itself run inside a job array), then set as the row says.
const SCHEDULER_VARS: [&str; 6] = [
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_MIN",
    "SLURM_ARRAY_TASK_MAX",
    "SLURM_ARRAY_TASK_COUNT",
    "SLURM_ARRAY_TASK_STEP",
    "JOB_COMPLETION_INDEX",
];

/// Every row, by kind of input.
fn cases() -> Vec<Case> {
    [
        idx::cases(),
        safetensors::cases(),
        numpy::cases(),
        csv::cases(),
        targets::cases(),
        label_sets::cases(),
        images::cases(),
        parquet::cases(),
        checkpoints::cases(),
        pytorch::cases(),
        sessions::cases(),
        runs::cases(),
        hub::cases(),
        more_sessions::cases(),
        flags::cases(),
        shards::cases(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The rows `ALKIT_HOSTILE_CASES` picks (module docs), every row without it.
fn picked(cases: Vec<Case>) -> Vec<Case> {
    let Ok(patterns) = std::env::var("ALKIT_HOSTILE_CASES") else {
        return cases;
    };
    let patterns: Vec<&str> = patterns.split(',').filter(|p| !p.is_empty()).collect();
    let picked: Vec<Case> = cases
        .into_iter()
        .filter(|c| patterns.iter().any(|p| c.name.contains(p)))
        .collect();
    assert!(
        !picked.is_empty(),
        "ALKIT_HOSTILE_CASES={patterns:?} picks no row"
    );
    picked
}

#[test]
fn every_case_is_listed_in_the_contributing_guide_and_every_listed_name_is_a_case() {
    let guide =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("CONTRIBUTING.md"))
            .unwrap();
    let names: Vec<&str> = cases().iter().map(|c| c.name).collect();
    let missing: Vec<&&str> = names
        .iter()
        .filter(|n| !guide.contains(&format!("`{n}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "CONTRIBUTING.md's bad-input table lacks {missing:?}"
    );
    // The table's rows: `| class | `name`, `name`, ... |` under its heading.
    let table = guide
        .split("## The bad-input table")
        .nth(1)
        .and_then(|t| t.split("\n## ").next())
        .expect("CONTRIBUTING.md has a bad-input table");
    let listed: Vec<&str> = table
        .lines()
        .filter(|l| l.starts_with('|') && !l.starts_with("|---") && !l.starts_with("| class"))
        .filter_map(|l| l.rsplit('|').nth(1))
        .flat_map(|cell| cell.split(", "))
        .map(|n| n.trim().trim_matches('`'))
        .filter(|n| !n.is_empty())
        .collect();
    assert!(listed.len() >= names.len(), "{} names read", listed.len());
    let stale: Vec<&&str> = listed.iter().filter(|n| !names.contains(n)).collect();
    assert!(
        stale.is_empty(),
        "CONTRIBUTING.md's bad-input table names rows no file has: {stale:?}"
    );
}

#[test]
fn every_bad_input_is_refused_naming_the_culprit_and_changes_nothing() {
    let root = tmp("hostile");
    let fx = Fx {
        root: root.join("fx"),
    };
    copy_dir(&data_dir(), &fx.data());
    std::fs::write(fx.pool(), POOL).unwrap();
    let s = |p: PathBuf| p.display().to_string();
    ok(&[
        "train",
        "--model",
        "mlp",
        "--steps",
        "2",
        "--data",
        &s(fx.data()),
        "--out",
        &s(fx.ck()),
    ]);
    ok(&[
        "init",
        "--pool",
        &s(fx.pool()),
        "--state",
        &s(fx.sess()),
        "--steps",
        "2",
    ]);
    ok(&[
        "curve",
        "--data",
        &s(fx.data()),
        "--model",
        "mlp",
        "--scorer",
        "random",
        "--cycles",
        "1",
        "--steps",
        "1",
        "--initial",
        "10",
        "--query",
        "5",
        "--out",
        &s(fx.run()),
    ]);
    let hub = serve(hostile_hub);
    let fixtures = snapshot(&fx.root);
    let all = cases();
    assert!(all.len() >= 60, "{} cases", all.len());
    let mut names = std::collections::HashSet::new();
    assert!(
        all.iter().all(|c| names.insert(c.name)),
        "case names repeat"
    );
    let cases = picked(all);
    // Two workers: CI has two cores.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::<String>::new());
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| loop {
                let k = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let Some(c) = cases.get(k) else { break };
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    run_case(c, &root, &fx, &hub)
                }))
                .unwrap_or_else(|_| Err("the case's set-up panicked".into()));
                if let Err(e) = r {
                    failures.lock().unwrap().push(format!("{}: {e}", c.name));
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    assert!(
        snapshot(&fx.root) == fixtures,
        "a case changed the shared fixtures"
    );
}

fn run_case(c: &Case, root: &Path, fx: &Fx, hub: &str) -> std::result::Result<(), String> {
    let d = root.join("cases").join(c.name);
    std::fs::create_dir_all(&d).unwrap();
    (c.setup)(&d, fx);
    let before = snapshot(&d);
    let s = |p: PathBuf| p.display().to_string();
    let args: Vec<String> = c
        .args
        .iter()
        .map(|a| {
            a.replace("{d}", &s(d.clone()))
                .replace("{data}", &s(fx.data()))
                .replace("{ck}", &s(fx.ck()))
                .replace("{sess}", &s(fx.sess()))
                .replace("{pool}", &s(fx.pool()))
                .replace("{run}", &s(fx.run()))
        })
        .collect();
    // Cases named hub-* talk to the hostile endpoint; every other case is offline.
    let online = c.name.starts_with("hub-");
    let mut cmd = alkit_cmd();
    cmd.arg("-q")
        .args(&args)
        .env("HF_HUB_OFFLINE", if online { "0" } else { "1" })
        .env("HF_ENDPOINT", hub)
        .env("HF_HUB_CACHE", d.join("hub-cache"));
    for k in SCHEDULER_VARS {
        cmd.env_remove(k);
    }
    cmd.envs(c.env.iter().copied());
    let o = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    if o.status.code() != Some(c.code) {
        return Err(format!(
            "exit {:?}, expected {}: {err}",
            o.status.code(),
            c.code
        ));
    }
    if err.contains("panicked") {
        return Err(format!("panicked: {err}"));
    }
    if let Some(m) = c.says.iter().find(|m| !err.contains(**m)) {
        return Err(format!("stderr does not name `{m}`: {err}"));
    }
    let after = snapshot(&d);
    if after != before {
        let changed: Vec<_> = after
            .keys()
            .chain(before.keys())
            .filter(|k| after.get(*k) != before.get(*k))
            .map(|k| k.display().to_string())
            .collect();
        return Err(format!("wrote or changed {changed:?}"));
    }
    Ok(())
}
