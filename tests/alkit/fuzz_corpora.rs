//! Every input the fuzzers kept (`fuzz/corpus/TARGET/`, each minimised to what covers the
//! code the target reached) goes through the same target function again, without libFuzzer:
//! the fuzzers run by hand (`fuzz/run.sh`), this replay runs in CI, so a change that panics on
//! any of those inputs fails the suite.

#[path = "../../fuzz/src/lib.rs"]
#[allow(dead_code)]
mod harness;

#[test]
fn every_input_the_fuzzers_kept_goes_through_its_parser_without_a_panic() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    let mut failures = Vec::new();
    let mut total = 0;
    for (name, run) in harness::TARGETS {
        let dir = root.join(name);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{name} has no corpus");
        for f in files {
            // A running fuzzer replaces corpus files as it shrinks them: one gone since the
            // listing is skipped (in CI nothing runs beside the suite).
            let Ok(bytes) = std::fs::read(&f) else {
                continue;
            };
            total += 1;
            if std::panic::catch_unwind(|| run(&bytes)).is_err() {
                failures.push(f.display().to_string());
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {total} corpus inputs panicked:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(total >= harness::TARGETS.len());
}
