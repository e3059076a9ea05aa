//! The lists people keep by hand beside the code, held equal to what they list: the CI steps
//! CONTRIBUTING.md names against `.ci/run`'s, the integration-test modules and the examples
//! ARCHITECTURE.md's code map names against `tests/alkit/main.rs` and `examples/`.

use super::*;

fn repo_file(name: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(name)).unwrap()
}

/// The lines of `text` from the one starting with `from` to the one before the first after it
/// starting with `to`.
fn block<'a>(text: &'a str, from: &str, to: &str) -> Vec<&'a str> {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.starts_with(from))
        .unwrap_or_else(|| panic!("no line starts with {from:?}"));
    let end = lines[start + 1..]
        .iter()
        .position(|l| l.starts_with(to))
        .map_or(lines.len(), |k| start + 1 + k);
    lines[start..end].to_vec()
}

#[test]
fn the_ci_steps_the_guide_lists_are_the_scripts_steps() {
    let script: Vec<String> = repo_file(".ci/run")
        .lines()
        .filter_map(|l| l.strip_prefix("step \""))
        .filter_map(|l| l.split('"').next())
        .map(str::to_string)
        .collect();
    assert!(script.len() >= 8, "{script:?}");
    let guide = repo_file("CONTRIBUTING.md");
    let listed: Vec<String> = block(&guide, "## What CI runs", "## ")
        .iter()
        .filter_map(|l| l.strip_prefix("- `"))
        .filter_map(|l| l.split("`:").next())
        .map(str::to_string)
        .collect();
    assert_eq!(
        listed, script,
        "CONTRIBUTING.md's `What CI runs` lists other steps than .ci/run runs (or in another \
         order)"
    );
}

#[test]
fn the_code_map_names_every_test_module_and_example() {
    let map = repo_file("ARCHITECTURE.md");
    let words = |from: &str, to: &str| -> String { block(&map, from, to).join(" ") };
    let tests = words("tests/alkit/", "tests/reference/");
    let modules: Vec<String> = repo_file("tests/alkit/main.rs")
        .lines()
        .filter_map(|l| l.strip_prefix("mod "))
        .map(|l| l.trim_end_matches(';').to_string())
        .collect();
    assert!(modules.len() >= 20, "{modules:?}");
    let named = |text: &str, name: &str| {
        text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .any(|w| w == name)
    };
    let missing: Vec<&String> = modules.iter().filter(|m| !named(&tests, m)).collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md's code map lacks the test modules {missing:?}"
    );
    let examples = words("examples/", "docs/");
    let files: Vec<String> =
        std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples"))
            .unwrap()
            .filter_map(|e| {
                let name = e.unwrap().file_name().into_string().unwrap();
                name.strip_suffix(".rs").map(str::to_string)
            })
            .collect();
    let missing: Vec<&String> = files.iter().filter(|f| !named(&examples, f)).collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md's code map lacks the examples {missing:?}"
    );
}
