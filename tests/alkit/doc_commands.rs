//! Every command README.md and docs/*.md show, checked against the binary: each `alkit` line's
//! subcommand and `--flags` must appear in that subcommand's own `--help` (synopses included),
//! and every command that can run on what ships in `data/` (or on a small folder of images
//! made here) runs for real, in the order its page gives, shortened where it would train for
//! minutes. A command is left unrun only for a reason listed in [`SKIP`]; the test fails if a
//! page's commands stop running without one, so a wrong pointer cannot land again.

use super::*;
use std::collections::BTreeMap;

/// Why a command is not run: a substring of it, and the reason. Each is still flag-checked.
const SKIP: &[(&str, &str)] = &[
    ("hf:", "needs the network (the Hugging Face Hub)"),
    ("FASHION_DIR", "Fashion-MNIST does not ship in data/"),
    (
        "/tmp/",
        "a reference script's files, made by Python with timm",
    ),
    ("$DIR", "a cluster's shared storage"),
    (
        "alkit label",
        "a server that runs until stopped (tests/alkit/label_page.rs)",
    ),
    (
        "serve-label-studio",
        "a server for Label Studio (tests/alkit/label_studio.rs)",
    ),
    ("export.json", "a person's Label Studio export"),
    ("export2.json", "a person's Label Studio export"),
    ("answered.csv", "a person's answers"),
    ("emb.safetensors", "the reader's own embedding file"),
    ("train.npz", "the reader's own embedding file with targets"),
    (
        "digitsets",
        "the digit-set pool, made by tests/reference/digit_sets.py (numpy)",
    ),
    (
        "badge10.safetensors",
        "an embedding file made by a reproduction's earlier steps",
    ),
    (
        "resnet18/model.onnx",
        "a model exported by PyTorch with timm",
    ),
    (
        "--model resnet18",
        "a ResNet-18 benchmark: minutes on two cores",
    ),
];

/// A shell command from a page: the file, its line, its words and leading `NAME=VALUE`s.
struct DocCommand {
    at: String,
    text: String,
    env: Vec<(String, String)>,
    words: Vec<String>,
}

/// The pages whose commands are checked.
fn pages() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// The `alkit` commands (and `cargo run -- ...`, the README's main job) of a page's shell
/// blocks (```sh, ```bash, or no language), continuation lines joined, comments dropped.
fn commands_of(page: &Path) -> Vec<DocCommand> {
    let text = std::fs::read_to_string(page).unwrap();
    let name = page.file_name().unwrap().to_string_lossy().into_owned();
    let mut out = Vec::new();
    let mut in_shell = None;
    let mut pending: Option<(usize, String)> = None;
    for (n, line) in text.lines().enumerate() {
        let fence = line.trim_start().strip_prefix("```");
        match (fence, in_shell) {
            (Some(lang), None) => {
                in_shell = Some(matches!(lang.trim(), "" | "sh" | "bash"));
                continue;
            }
            (Some(_), Some(_)) => {
                in_shell = None;
                continue;
            }
            (None, Some(true)) => {}
            _ => continue,
        }
        let (start, mut joined) = pending.take().unwrap_or((n + 1, String::new()));
        joined.push_str(line.trim());
        if let Some(head) = joined.strip_suffix('\\') {
            pending = Some((start, format!("{} ", head.trim_end())));
            continue;
        }
        let words = shell_words(&joined);
        let env_len = words.iter().take_while(|w| is_assignment(w)).count();
        let words = words[env_len..].to_vec();
        let is_cmd = words.first().is_some_and(|w| w == "alkit")
            || (words.starts_with(&["cargo".into(), "run".into()])
                && words.iter().any(|w| w == "--"));
        if is_cmd {
            let env = shell_words(&joined)[..env_len]
                .iter()
                .map(|w| {
                    let (k, v) = w.split_once('=').unwrap();
                    (k.to_string(), v.to_string())
                })
                .collect();
            out.push(DocCommand {
                at: format!("{name}:{start}"),
                text: joined.clone(),
                env,
                words,
            });
        }
    }
    out
}

fn is_assignment(w: &str) -> bool {
    w.split_once('=').is_some_and(|(k, _)| {
        !k.is_empty() && k.chars().all(|c| c.is_ascii_uppercase() || c == '_')
    })
}

/// A shell line's words: single and double quotes, backslashes, and a `#` comment that
/// starts a word.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = line.chars();
    let mut quote = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (None, '#') if word.is_none() => break,
            (None, ' ' | '\t') => words.extend(word.take()),
            (None, '\'' | '"') => {
                quote = Some(c);
                word.get_or_insert_with(String::new);
            }
            (Some(q), c) if c == q => quote = None,
            (Some('\''), c) => word.get_or_insert_with(String::new).push(c),
            (_, '\\') => word.get_or_insert_with(String::new).extend(chars.next()),
            (_, c) => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    words
}

/// The subcommand and the `--flags` a command names (after `alkit`, or `cargo run ... --`).
fn subcommand_and_flags(words: &[String]) -> (Option<String>, Vec<String>) {
    let args = match words.iter().position(|w| w == "--") {
        Some(i) if words[0] == "cargo" => &words[i + 1..],
        _ => &words[1..],
    };
    let mut sub = None;
    let mut flags = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let w = &args[i];
        if let Some(flag) = w.strip_prefix("--") {
            flags.push(format!("--{}", flag.split('=').next().unwrap()));
        } else if sub.is_none() && w.chars().all(|c| c.is_ascii_lowercase() || c == '-') {
            sub = Some(w.clone());
        }
        i += 1;
    }
    (sub, flags)
}

/// `alkit [SUB] --help`, once each.
fn help_of(cache: &mut BTreeMap<String, Option<String>>, sub: &str) -> Option<String> {
    cache
        .entry(sub.to_string())
        .or_insert_with(|| {
            let mut c = alkit_cmd();
            if !sub.is_empty() {
                c.arg(sub);
            }
            let o = c.arg("--help").output().unwrap();
            o.status
                .success()
                .then(|| String::from_utf8_lossy(&o.stdout).into_owned())
        })
        .clone()
}

/// Whether `help` declares `flag` (as a whole word).
fn declares(help: &str, flag: &str) -> bool {
    help.match_indices(flag).any(|(i, _)| {
        let next = help[i + flag.len()..].chars().next();
        !next.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-')
    })
}

#[test]
fn every_documented_flag_exists_in_its_subcommands_help() {
    let mut helps = BTreeMap::new();
    let global = help_of(&mut helps, "").unwrap();
    let mut wrong = Vec::new();
    let mut checked = 0;
    for page in pages() {
        for cmd in commands_of(&page) {
            let (sub, flags) = subcommand_and_flags(&cmd.words);
            let Some(sub) = sub else {
                wrong.push(format!("{}: no subcommand in `{}`", cmd.at, cmd.text));
                continue;
            };
            let Some(help) = help_of(&mut helps, &sub) else {
                wrong.push(format!("{}: `alkit {sub}` is no subcommand", cmd.at));
                continue;
            };
            for f in flags {
                if !declares(&help, &f) && !declares(&global, &f) {
                    wrong.push(format!(
                        "{}: `alkit {sub}` has no {f}: `{}`",
                        cmd.at, cmd.text
                    ));
                }
            }
            checked += 1;
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // README, manual, reproductions, sessions, models, data and sharding show commands.
    assert!(
        checked >= 70,
        "only {checked} commands found: is the page parser broken?"
    );
}

/// Flags that make a documented command quick here: each replaces the value the page gives
/// (or is added), for the subcommands that take it.
fn shortened(words: &[String]) -> Vec<String> {
    let sub = words.get(1).map(String::as_str).unwrap_or("");
    let trains = !words
        .iter()
        .any(|w| w == "--checkpoint" || w == "--backbone");
    let mut set: Vec<(&str, &str)> = Vec::new();
    match sub {
        "curve" => set.extend([("--cycles", "1"), ("--seeds", "1"), ("--steps", "20")]),
        "train" | "init" => set.push(("--steps", "20")),
        "ood" | "calibrate" if trains => set.push(("--steps", "20")),
        "surface" => set.extend([("--seeds", "1"), ("--steps", "100")]),
        "bench" => set.extend([("--n", "16"), ("--repeats", "1")]),
        _ => {}
    }
    let mut out = words.to_vec();
    for (flag, value) in set {
        match out.iter().position(|w| w == flag) {
            Some(i) => out[i + 1] = value.to_string(),
            None => out.extend([flag.to_string(), value.to_string()]),
        }
    }
    out
}

/// A folder of PNGs of the shipped digits for `--pool`/`--data` placeholders: two seed
/// images per class in `CLASS/` subfolders (the classes the command names, else the digits'
/// names) and 130 unlabeled ones (two README rounds of 50).
fn photo_folder(dir: &Path, classes: Option<&str>) {
    if dir.exists() {
        return;
    }
    let (train, _) = shipped();
    let names: Vec<String> = match classes {
        Some(c) => c.split(',').map(str::to_string).collect(),
        None => (0..10).map(|d| d.to_string()).collect(),
    };
    let mut items: Vec<(usize, Option<String>)> = Vec::new();
    for (k, name) in names.iter().enumerate() {
        let of_k = (0..train.len()).filter(|&i| train.labels()[i] as usize % names.len() == k);
        items.extend(of_k.take(2).map(|i| (i, Some(name.clone()))));
    }
    items.extend((200..330).map(|i| (i, None)));
    write_image_folder(dir, &train, &items).unwrap();
}

/// Why `cmd` is not run here, if it is not.
fn skip_reason(cmd: &DocCommand) -> Option<String> {
    if cmd.words[0] == "cargo" {
        return Some("the README's main job, minutes long; its flags are checked".into());
    }
    let placeholder = cmd.words.iter().any(|w| {
        w.contains('[') || w.contains('|') || w == "..." || {
            let caps = w.trim_end_matches('/').trim_end_matches(".csv");
            caps.len() > 1
                && caps.chars().all(|c| c.is_ascii_uppercase() || c == '_')
                && caps != "MNIST_DIR"
        }
    });
    if placeholder {
        return Some("a synopsis (placeholders); its flags are checked".into());
    }
    if cmd.text.contains(".onnx")
        && (!cfg!(feature = "onnx") || std::env::var_os("ORT_DYLIB_PATH").is_none())
    {
        return Some("needs ONNX Runtime and the feature `onnx`".into());
    }
    SKIP.iter()
        .find(|(s, _)| cmd.text.contains(s))
        .map(|(_, why)| why.to_string())
}

/// `cmd` ready to run in `dir`: MNIST_DIR is the shipped subset, a photo folder is made.
fn runnable(cmd: &DocCommand, dir: &Path) -> Command {
    let words = shortened(&cmd.words);
    let classes = words
        .iter()
        .position(|w| w == "--classes")
        .map(|i| words[i + 1].clone());
    let words: Vec<String> = words
        .iter()
        .map(|w| match w.as_str() {
            "MNIST_DIR" => "data".to_string(),
            "my_photos/" | "my_images/" | "photos/" => {
                let folder = format!(
                    "{}-{}",
                    w.trim_end_matches('/'),
                    classes.as_deref().unwrap_or("digits")
                );
                photo_folder(&dir.join(&folder), classes.as_deref());
                format!("{folder}/")
            }
            _ => w.clone(),
        })
        .collect();
    // Each `init` starts an example of its own: the session of an earlier example goes.
    if words[1] == "init" {
        if let Some(i) = words.iter().position(|w| w == "--state") {
            let _ = std::fs::remove_dir_all(dir.join(&words[i + 1]));
        }
    }
    let mut c = Command::new(env!("CARGO_BIN_EXE_alkit"));
    c.args(&words[1..])
        .current_dir(dir)
        .envs(cmd.env.iter().cloned());
    c
}

/// Runs the commands of `page` that can run here, in order, in a folder of its own: the
/// places they ran (`FILE:LINE`), and each failure with what it said.
fn run_page(page: &Path, dir: &Path) -> (Vec<String>, Vec<String>) {
    std::os::unix::fs::symlink(data_dir(), dir.join("data")).unwrap();
    let (mut ran, mut failed) = (Vec::new(), Vec::new());
    for cmd in commands_of(page) {
        if skip_reason(&cmd).is_some() {
            continue;
        }
        let t0 = std::time::Instant::now();
        let o = runnable(&cmd, dir).output().unwrap();
        let took = t0.elapsed().as_secs_f64();
        if o.status.success() {
            ran.push(format!("{} ({took:.1} s)", cmd.at));
        } else {
            let said = String::from_utf8_lossy(&o.stderr);
            failed.push(format!("{}: `{}`:\n{said}", cmd.at, cmd.text));
        }
    }
    (ran, failed)
}

#[test]
fn every_documented_command_that_can_run_here_runs() {
    // The pages at once (each in its own folder; a page's commands in order: a train before
    // the curve on it).
    let pages = pages();
    // The scratch folders are made here, on the test's thread, which names them.
    let dirs: Vec<Scratch> = pages
        .iter()
        .map(|p| tmp(&format!("doc-{}", p.file_stem().unwrap().to_string_lossy())))
        .collect();
    let results: Vec<(Vec<String>, Vec<String>)> = std::thread::scope(|s| {
        let runs: Vec<_> = (pages.iter().zip(&dirs))
            .map(|(p, d)| s.spawn(move || run_page(p, d)))
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    let ran: Vec<&String> = results.iter().flat_map(|r| &r.0).collect();
    let failed: Vec<&String> = results.iter().flat_map(|r| &r.1).collect();
    let failed: Vec<&str> = failed.iter().map(|s| s.as_str()).collect();
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    // The README's examples, the reproductions on MNIST, the session's file round at least.
    for page in ["README.md", "reproductions.md", "sessions.md"] {
        assert!(
            ran.iter().any(|at| at.starts_with(page)),
            "no command of {page} ran: {ran:?}"
        );
    }
    assert!(ran.len() >= 20, "only {} commands ran: {ran:?}", ran.len());
}

#[test]
fn the_page_reader_joins_lines_drops_comments_and_keeps_quotes() {
    assert_eq!(
        shell_words(r#"alkit score --checkpoint "$DIR/ck" --data 'a b' x\ y   # a comment"#),
        [
            "alkit",
            "score",
            "--checkpoint",
            "$DIR/ck",
            "--data",
            "a b",
            "x y"
        ]
    );
    assert!(shell_words("# alkit curve").is_empty());
    let dir = tmp("doc-reader");
    let page = dir.join("page.md");
    std::fs::write(
        &page,
        "text\n```sh\nX=1 alkit curve --data d \\\n    --scorer entropy  # why\n```\n\
         ```python\nalkit.select()\n```\n```\nalkit ood --out o\n```\n",
    )
    .unwrap();
    let cmds = commands_of(&page);
    assert_eq!(cmds.len(), 2);
    assert_eq!(cmds[0].at, "page.md:3");
    assert_eq!(
        cmds[0].words,
        ["alkit", "curve", "--data", "d", "--scorer", "entropy"]
    );
    assert_eq!(cmds[0].env, [("X".to_string(), "1".to_string())]);
    assert_eq!(cmds[1].words, ["alkit", "ood", "--out", "o"]);
    let (sub, flags) = subcommand_and_flags(&cmds[0].words);
    assert_eq!(
        (sub.as_deref(), flags.as_slice()),
        (
            Some("curve"),
            &["--data".to_string(), "--scorer".to_string()][..]
        )
    );
    assert!(declares("  --steps <N>\n  --steps-x", "--steps"));
    assert!(!declares("  --steps-x <N>", "--steps"));
}
