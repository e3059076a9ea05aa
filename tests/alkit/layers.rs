//! The layer order of ARCHITECTURE.md, kept true: every `crate::` path in the library's
//! sources (comments and strings aside) may name only modules of its own layer or a lower one,
//! the top-level modules form no cycle, and inside every folder the sibling files form no
//! cycle either (`super::`, `self::` and `crate::` paths, and names a folder's `mod.rs`
//! re-exports from one of its files, all count). A folder's own `mod.rs` is one of those
//! files: an item it defines and a file below it names is an edge up to it, so the types a
//! folder's files share sit in a file of their own, never in the `mod.rs` that uses them.

use super::{copy_dir, tmp};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Layers from the bottom up; each top-level module of `src/` belongs to exactly one.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "core",
        &[
            "error", "rng", "fsutil", "observe", "output", "metrics", "plot", "limits",
        ],
    ),
    ("kernels", &["kernels"]),
    ("data", &["data", "hub"]),
    ("model", &["nn"]),
    ("duq", &["duq"]),
    ("fit", &["train"]),
    ("registry", &["models", "checkpoint"]),
    ("evidence", &["predict"]),
    ("round", &["round", "strategies"]),
    ("loops", &["acquire", "session", "label_studio"]),
    ("experiments", &["jobs"]),
    ("serve", &["serve"]),
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, ms)| ms.contains(&module))
}

/// The source with `//` comments, string and char literals blanked (doc links may point
/// anywhere; only code imports).
fn code_only(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let b: Vec<char> = src.chars().collect();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            '/' if b.get(i + 1) == Some(&'/') => {
                while i < b.len() && b[i] != '\n' {
                    i += 1;
                }
            }
            '"' => {
                i += 1;
                while i < b.len() && b[i] != '"' {
                    if b[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
                i += 1;
                out.push_str("\"\"");
            }
            '\'' if b.get(i + 2) == Some(&'\'') || (b.get(i + 1) == Some(&'\\')) => {
                // A char literal ('x' or '\n'); lifetimes ('a) fall through.
                i += 1;
                while i < b.len() && b[i] != '\'' {
                    if b[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// The top-level modules a source names through `crate::` paths, `use crate::{a, b::c}`
/// groups included.
fn crate_refs(code: &str) -> BTreeSet<String> {
    let mut refs = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().last();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // e.g. `alkit_crate::`
        }
        if let Some(group) = rest.strip_prefix('{') {
            refs.extend(group_items(group).iter().map(|item| first_ident(item)));
        } else {
            refs.insert(first_ident(rest));
        }
    }
    refs.retain(|r| !r.is_empty());
    refs
}

fn first_ident(s: &str) -> String {
    s.trim_start()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `(importer module, file) -> modules it names`, for every library file (the binary, the
/// top layer, may import anything).
fn imports(src: &Path) -> BTreeMap<(String, PathBuf), BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut out = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        if first == "bin" || first == "lib.rs" {
            continue;
        }
        let module = first.trim_end_matches(".rs").to_string();
        let code = code_only(&std::fs::read_to_string(&f).unwrap());
        out.insert((module, rel.to_path_buf()), crate_refs(&code));
    }
    out
}

/// The violations of the layer order under `src`: `file: module (layer) imports module
/// (layer)`, plus modules no layer names.
fn violations(src: &Path) -> Vec<String> {
    let mut bad = Vec::new();
    for ((module, file), refs) in imports(src) {
        let Some(mine) = layer_of(&module) else {
            bad.push(format!(
                "{}: module `{module}` is in no layer",
                file.display()
            ));
            continue;
        };
        for r in refs {
            if matches!(r.as_str(), "Error" | "Result") {
                continue; // the crate root's re-exports of `error`
            }
            match layer_of(&r) {
                Some(theirs) if theirs <= mine => {}
                Some(theirs) => bad.push(format!(
                    "{}: `{module}` ({}) imports `{r}` ({}), a layer above it",
                    file.display(),
                    LAYERS[mine].0,
                    LAYERS[theirs].0
                )),
                None => bad.push(format!(
                    "{}: `{module}` imports `crate::{r}`, which no layer names",
                    file.display()
                )),
            }
        }
    }
    bad
}

/// A cycle among the top-level modules, if any (as a path `a -> b -> ... -> a`).
fn cycle(src: &Path) -> Option<String> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for ((module, _), refs) in imports(src) {
        let e = graph.entry(module.clone()).or_default();
        e.extend(
            refs.into_iter()
                .filter(|r| *r != module && layer_of(r).is_some()),
        );
    }
    graph_cycle(&graph)
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn no_module_imports_a_layer_above_it() {
    let bad = violations(&src_dir());
    assert!(bad.is_empty(), "layer violations:\n{}", bad.join("\n"));
    assert_eq!(cycle(&src_dir()), None);
}

#[test]
fn every_top_level_module_is_in_exactly_one_layer() {
    let mut seen = BTreeSet::new();
    for (_, ms) in LAYERS {
        for m in *ms {
            assert!(seen.insert(*m), "`{m}` is in two layers");
        }
    }
    let lib = std::fs::read_to_string(src_dir().join("lib.rs")).unwrap();
    for line in code_only(&lib).lines() {
        let line = line.trim();
        let decl = ["pub mod ", "mod ", "pub(crate) mod "]
            .iter()
            .find_map(|p| line.strip_prefix(p));
        if let Some(m) = decl {
            let m = m.trim_end_matches(';');
            assert!(
                layer_of(m).is_some(),
                "lib.rs declares `{m}`, which no layer names"
            );
        }
    }
}

#[test]
fn the_layer_check_catches_a_planted_upward_import() {
    // A copy of the sources with one import against the order (the model layer reaching up
    // into the acquisition round) and one cycle must fail both checks.
    let dir = tmp("layers");
    copy_dir(&src_dir(), &dir);
    let layers = dir.join("nn").join("layers.rs");
    let mut text = std::fs::read_to_string(&layers).unwrap();
    text.push_str("\n#[allow(unused_imports)]\nuse crate::{acquire::RunState, rng::Rng};\n");
    std::fs::write(&layers, text).unwrap();
    let bad = violations(&dir);
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(
        bad[0].contains("`nn` (model) imports `acquire` (loops)"),
        "{bad:?}"
    );
    assert!(cycle(&dir).is_some_and(|c| c.contains("nn") && c.contains("acquire")));
    // Strings and comments are not imports.
    assert!(crate_refs(&code_only("// crate::acquire\nlet s = \"crate::curve\";")).is_empty());
}

/// The module path of a library file: `data/source.rs` -> `[data, source]`,
/// `data/source/mod.rs` -> `[data, source]`.
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| {
            c.as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string()
        })
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// The identifiers of a path that starts at `rest` (`a::b::C`), up to a group or anything
/// else.
fn path_segments(rest: &str) -> Vec<String> {
    let mut segs = Vec::new();
    let mut rest = rest;
    loop {
        let id = first_ident(rest);
        if id.is_empty() {
            break;
        }
        rest = &rest.trim_start()[id.len()..];
        segs.push(id);
        match rest.strip_prefix("::") {
            Some(r) if !r.starts_with('{') => rest = r,
            _ => break,
        }
    }
    segs
}

/// The items of a `{a, b::c, d as e}` group that starts right after its `{`, split at
/// depth-0 commas.
fn group_items(group: &str) -> Vec<String> {
    let mut items = Vec::new();
    let mut depth = 0;
    let mut item = String::new();
    for c in group.chars() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(std::mem::take(&mut item));
                continue;
            }
            _ => {}
        }
        item.push(c);
    }
    items.push(item);
    items.retain(|i| !i.trim().is_empty());
    items
}

/// Every absolute path that the code of module `module` names through `crate::`, `self::`
/// or `super::` paths.
fn absolute_refs(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < code.len() {
        let rest = &code[at..];
        let Some(found) = ["crate::", "self::", "super::"]
            .iter()
            .filter_map(|k| rest.find(k).map(|i| (i, *k)))
            .min()
        else {
            break;
        };
        let (i, key) = found;
        let before = rest[..i].chars().last();
        at += i + key.len();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue; // `alkit_crate::`, or the `super::` of `super::super::` seen already
        }
        // `module` is the path of the module the file defines (a folder's for its `mod.rs`),
        // so `self` is that path and `super` its parent either way.
        let mut base: Vec<String> = match key {
            "crate::" => Vec::new(),
            "self::" => module.to_vec(),
            _ => module[..module.len().saturating_sub(1)].to_vec(),
        };
        let mut tail = &code[at..];
        if key == "super::" {
            while let Some(t) = tail.strip_prefix("super::") {
                base.pop();
                tail = t;
            }
        }
        // The path's leading identifiers, then a `{...}` group if one follows a `::`.
        let mut lead = Vec::new();
        let mut t = tail;
        let mut group = None;
        loop {
            if let Some(g) = t.strip_prefix('{') {
                group = Some(g);
                break;
            }
            let id = first_ident(t);
            if id.is_empty() || !t.starts_with(id.as_str()) {
                break;
            }
            t = &t[id.len()..];
            lead.push(id);
            match t.strip_prefix("::") {
                Some(r) => t = r,
                None => break,
            }
        }
        let prefix: Vec<String> = base.into_iter().chain(lead).collect();
        match group {
            Some(g) => {
                for item in group_items(g) {
                    let mut p = prefix.clone();
                    p.extend(path_segments(item.trim_start()));
                    out.push(p);
                }
            }
            None => out.push(prefix),
        }
    }
    out
}

/// A cycle among the files of one folder, for every folder that has one
/// (`folder: a -> b -> a`).
fn folder_cycles(src: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut modules: BTreeMap<Vec<String>, (String, bool)> = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        if first == "bin" || first == "lib.rs" {
            continue;
        }
        let is_dir = rel.file_name().is_some_and(|n| n == "mod.rs");
        let code = code_only(&std::fs::read_to_string(&f).unwrap());
        modules.insert(module_path(rel), (code, is_dir));
    }
    // Each folder's files (child modules), and the names its `mod.rs` re-exports from them.
    let mut children: BTreeMap<Vec<String>, BTreeSet<String>> = BTreeMap::new();
    for m in modules.keys().filter(|m| m.len() > 1) {
        children
            .entry(m[..m.len() - 1].to_vec())
            .or_default()
            .insert(m[m.len() - 1].clone());
    }
    let mut reexports: BTreeMap<(Vec<String>, String), String> = BTreeMap::new();
    for (folder, kids) in &children {
        let Some((code, true)) = modules.get(folder) else {
            continue;
        };
        // A `mod.rs` names its own files by relative `use` paths (`pub use source::Items`).
        let mut code = code.clone();
        for k in kids {
            code = code.replace(&format!("use {k}::"), &format!("use self::{k}::"));
        }
        for p in absolute_refs(&code, folder) {
            if p.len() >= folder.len() + 2
                && p[..folder.len()] == folder[..]
                && kids.contains(&p[folder.len()])
            {
                let name = p.last().unwrap().clone();
                reexports.insert((folder.clone(), name), p[folder.len()].clone());
            }
        }
    }
    let mut bad = Vec::new();
    for (folder, kids) in &children {
        let d = folder.len();
        // The folder's own `mod.rs` is a sibling like the others: an item defined there and
        // named by a file below it is an edge up to it.
        const MOD: &str = "mod.rs";
        let folder_code = modules.get(folder).map_or("", |(c, _)| c.as_str());
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (m, (code, _)) in &modules {
            if m.len() < d || m[..d] != folder[..] {
                continue; // outside the folder
            }
            let from = if m.len() == d { MOD } else { m[d].as_str() };
            let code = if from == MOD {
                relative_as_self(code, kids)
            } else {
                code.clone()
            };
            for r in absolute_refs(&code, m) {
                if r.len() <= d || r[..d] != folder[..] {
                    continue;
                }
                let target = if kids.contains(&r[d]) {
                    r[d].clone()
                } else if let Some(k) = reexports.get(&(folder.clone(), r[d].clone())) {
                    if from == MOD {
                        continue; // the re-export itself, already an edge to its file
                    }
                    k.clone()
                } else if from != MOD && defines(folder_code, &r[d]) {
                    MOD.to_string()
                } else {
                    continue; // a name of the file's own inline module, or of no file here
                };
                if target != from {
                    graph.entry(from.to_string()).or_default().insert(target);
                }
            }
        }
        // Every distinct cycle, each found from one of its files.
        let mut seen: BTreeSet<BTreeSet<String>> = BTreeSet::new();
        for start in graph.keys() {
            let mut from = graph.clone();
            from.retain(|k, _| k >= start);
            if let Some(c) = graph_cycle(&from) {
                let members: BTreeSet<String> = c.split(" -> ").map(str::to_string).collect();
                if seen.insert(members) {
                    bad.push(format!("src/{}: {c}", folder.join("/")));
                }
            }
        }
    }
    bad
}

/// Whether `code` (a `mod.rs`) defines an item named `name` itself.
fn defines(code: &str, name: &str) -> bool {
    let kinds = [
        "fn", "struct", "enum", "const", "static", "type", "trait", "union",
    ];
    code.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '!'))
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .windows(2)
        .any(|w| w[1] == name && (kinds.contains(&w[0]) || w[0] == "macro_rules!"))
}

/// A `mod.rs`'s code with the paths that start at one of its files (`onnx::load(..)`,
/// `use source::Items`) written as `self::` paths, which [`absolute_refs`] reads.
fn relative_as_self(code: &str, kids: &BTreeSet<String>) -> String {
    let mut out = String::with_capacity(code.len());
    let mut prev: Option<char> = None;
    let mut i = 0;
    while i < code.len() {
        let rest = &code[i..];
        let starts_path = !prev.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':');
        if starts_path {
            if let Some(k) = kids.iter().find(|k| rest.starts_with(&format!("{k}::"))) {
                out.push_str("self::");
                out.push_str(k);
                i += k.len();
                prev = k.chars().last();
                continue;
            }
        }
        let c = rest.chars().next().unwrap();
        out.push(c);
        prev = Some(c);
        i += c.len_utf8();
    }
    out
}

/// A cycle of `graph`, if any (as a path `a -> b -> ... -> a`).
fn graph_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<String> {
    fn visit(
        n: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<String> {
        if let Some(at) = stack.iter().position(|s| s == n) {
            let mut path = stack[at..].to_vec();
            path.push(n.to_string());
            return Some(path.join(" -> "));
        }
        if done.contains(n) {
            return None;
        }
        stack.push(n.to_string());
        for m in g.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, g, stack, done) {
                return Some(c);
            }
        }
        stack.pop();
        done.insert(n.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut Vec::new(), &mut done))
}

#[test]
fn the_files_of_a_folder_form_no_cycle() {
    let bad = folder_cycles(&src_dir());
    assert!(
        bad.is_empty(),
        "import cycles inside folders (a folder's mod.rs counts as one of its files):\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_folder_check_catches_a_planted_cycle_and_reads_every_path_form() {
    // Two sibling files that name each other, each in another of the path forms.
    let dir = tmp("folder-cycle");
    let f = dir.join("kernels");
    std::fs::create_dir_all(&f).unwrap();
    std::fs::write(
        f.join("mod.rs"),
        "mod a;\nmod b;\nmod c;\npub use c::Thing;\n",
    )
    .unwrap();
    std::fs::write(f.join("a.rs"), "use super::{b::Bee, other};\n").unwrap();
    std::fs::write(f.join("b.rs"), "fn f() { crate::kernels::Thing::new() }\n").unwrap();
    std::fs::write(
        f.join("c.rs"),
        "// super::a is a comment\nfn g() { let _ = \"super::a\"; }\n",
    )
    .unwrap();
    assert!(folder_cycles(&dir).is_empty(), "{:?}", folder_cycles(&dir));
    // A file that names an item its folder's mod.rs defines, while mod.rs uses that file.
    std::fs::write(
        f.join("mod.rs"),
        "mod a;\nmod b;\nmod c;\npub use c::Thing;\npub struct Base;\nfn open() { a::go() }\n",
    )
    .unwrap();
    std::fs::write(f.join("a.rs"), "use super::Base;\n").unwrap();
    let bad = folder_cycles(&dir);
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(
        bad[0].contains("mod.rs") && bad[0].contains(" a"),
        "{bad:?}"
    );
    std::fs::write(
        f.join("mod.rs"),
        "mod a;\nmod b;\nmod c;\npub use c::Thing;\n",
    )
    .unwrap();
    std::fs::write(f.join("a.rs"), "use super::{b::Bee, other};\n").unwrap();
    std::fs::write(f.join("c.rs"), "use super::a::X;\n").unwrap();
    let bad = folder_cycles(&dir);
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(bad[0].starts_with("src/kernels: "), "{bad:?}");
    for m in ["a", "b", "c"] {
        assert!(bad[0].contains(m), "{bad:?}");
    }
}
