//! The library speaks its own words: no string in its code names a flag (`--top`) or a
//! command (`alkit init`) of the binary, so a program that uses the library is never told
//! about options it never had. Its messages name settings (``setting `top` ``, after the
//! fields of its options), files and fields; the binary speaks each setting as its flag
//! (`src/bin/alkit/flags.rs`, whose unit tests check that mapping).

use std::path::{Path, PathBuf};

/// Every string literal of `src` with its 1-based line: plain, byte and raw (`r#"..."#`)
/// strings; comments and char literals skipped.
fn string_literals(src: &str) -> Vec<(usize, String)> {
    let b: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    while i < b.len() {
        match b[i] {
            '\n' => {
                line += 1;
                i += 1;
            }
            '/' if b.get(i + 1) == Some(&'/') => {
                while i < b.len() && b[i] != '\n' {
                    i += 1;
                }
            }
            'r' if matches!(b.get(i + 1), Some('"') | Some('#'))
                && (i == 0 || !(b[i - 1].is_alphanumeric() || b[i - 1] == '_')) =>
            {
                let mut j = i + 1;
                let mut hashes = 0;
                while b.get(j) == Some(&'#') {
                    hashes += 1;
                    j += 1;
                }
                if b.get(j) != Some(&'"') {
                    i += 1;
                    continue;
                }
                let start = (line, j + 1);
                j += 1;
                let close: String = std::iter::once('"')
                    .chain((0..hashes).map(|_| '#'))
                    .collect();
                let close: Vec<char> = close.chars().collect();
                while j < b.len() && !b[j..].starts_with(&close) {
                    if b[j] == '\n' {
                        line += 1;
                    }
                    j += 1;
                }
                out.push((start.0, b[start.1..j.min(b.len())].iter().collect()));
                i = j + close.len();
            }
            '"' => {
                let start = line;
                let mut j = i + 1;
                let mut s = String::new();
                while j < b.len() && b[j] != '"' {
                    if b[j] == '\\' {
                        // A line continuation joins lines; other escapes stand for one char.
                        if b.get(j + 1) == Some(&'\n') {
                            line += 1;
                            j += 2;
                            while j < b.len() && b[j].is_whitespace() {
                                if b[j] == '\n' {
                                    line += 1;
                                }
                                j += 1;
                            }
                            continue;
                        }
                        s.push(b[j]);
                        j += 1;
                    } else if b[j] == '\n' {
                        line += 1;
                    }
                    s.push(b[j]);
                    j += 1;
                }
                out.push((start, s));
                i = j + 1;
            }
            '\'' if b.get(i + 2) == Some(&'\'') || b.get(i + 1) == Some(&'\\') => {
                i += 1;
                while i < b.len() && b[i] != '\'' {
                    if b[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
                i += 1;
            }
            _ => i += 1,
        }
    }
    out
}

/// The binary's subcommands, as its help lists them.
fn commands() -> Vec<String> {
    let o = super::alkit_cmd().arg("--help").output().unwrap();
    let help = String::from_utf8(o.stdout).unwrap();
    let list: Vec<String> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .filter(|c| c != "help")
        .collect();
    assert!(
        list.len() > 10 && list.contains(&"init".to_string()),
        "{help}"
    );
    list
}

/// What in `s` speaks the binary's language: a long flag (`--word`) or `alkit COMMAND`.
fn cli_words(s: &str, commands: &[String]) -> Option<String> {
    let c: Vec<char> = s.chars().collect();
    for i in 0..c.len() {
        let flag = c[i..].starts_with(&['-', '-'])
            && c.get(i + 2).is_some_and(|x| x.is_ascii_lowercase())
            && (i == 0 || !(c[i - 1].is_alphanumeric() || c[i - 1] == '-'));
        let rest: String = c[i..].iter().collect();
        let command = rest.strip_prefix("alkit ").is_some_and(|r| {
            let word: String = r.chars().take_while(|x| x.is_ascii_lowercase()).collect();
            commands.contains(&word)
        });
        if flag || command {
            return Some(c[i..].iter().take(24).collect());
        }
    }
    None
}

fn library_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            if !p.ends_with("bin") {
                library_files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `file:line: text` for every library string literal that names a flag or a command (the
/// library's own unit tests, after `#[cfg(test)]`, aside).
fn offences(roots: &[PathBuf], commands: &[String]) -> Vec<String> {
    let mut files = Vec::new();
    for r in roots {
        library_files(r, &mut files);
    }
    let mut bad = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        for (line, s) in string_literals(code) {
            if let Some(w) = cli_words(&s, commands) {
                bad.push(format!("{}:{line}: {w}", f.display()));
            }
        }
    }
    bad
}

#[test]
fn no_library_message_names_a_flag_or_a_command() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bad = offences(
        &[root.join("src"), root.join("acquisition/src")],
        &commands(),
    );
    assert!(
        bad.is_empty(),
        "library strings in the binary's words (say `setting `NAME`` instead):\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_check_finds_flags_and_commands_in_every_literal_form() {
    let dir = super::tmp("words");
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("bin")).unwrap();
    std::fs::write(
        src.join("a.rs"),
        "// --comment is fine\nfn f() {\n    let c = '-';\n    g(\"give it with \\\n       --top\");\n    g(r#\"run `alkit init`\"#);\n    g(\"a-b --> c, x--y, alkit round 3\");\n}\n#[cfg(test)]\nmod t { fn h() { g(\"--ok\") } }\n",
    )
    .unwrap();
    std::fs::write(src.join("bin/main.rs"), "fn m() { g(\"--flag\") }\n").unwrap();
    let bad = offences(&[src], &commands());
    assert_eq!(bad.len(), 2, "{bad:?}");
    assert!(bad[0].ends_with("a.rs:4: --top"), "{bad:?}");
    assert!(bad[1].ends_with("a.rs:6: alkit init`"), "{bad:?}");
}
