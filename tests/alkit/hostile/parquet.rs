//! Parquet pools: schemas and values alkit does not read.

use super::*;

pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(
            "parquet-garbage",
            |d, _| {
                std::fs::write(d.join("p.parquet"), b"PAR1 nonsense PAR1").unwrap();
            },
            ["init", "--pool", "{d}/p.parquet", "--state", "{d}/s"],
            1,
            ["p.parquet", "Parquet"]
        ),
        case!(
            "parquet-truncated",
            |d, _| {
                let b = std::fs::read(
                    Path::new(env!("CARGO_MANIFEST_DIR"))
                        .join("tests/fixtures/hub-mnist/test-00000-of-00001.parquet"),
                )
                .unwrap();
                std::fs::write(d.join("p.parquet"), &b[..b.len() / 2]).unwrap();
            },
            ["init", "--pool", "{d}/p.parquet", "--state", "{d}/s"],
            1,
            ["p.parquet"]
        ),
        case!(
            // Found by fuzzing: a page header declaring a 2^31-element list made parquet 57
            // spin on end-of-file reads for minutes.
            "parquet-page-header-spin",
            |d, _| {
                std::fs::copy(
                    Path::new(env!("CARGO_MANIFEST_DIR"))
                        .join("tests/fixtures/fuzz/parquet-page-header-spin.parquet"),
                    d.join("p.parquet"),
                )
                .unwrap();
            },
            ["init", "--pool", "{d}/p.parquet", "--state", "{d}/s"],
            1,
            ["p.parquet", "malformed page header"]
        ),
        case!(
            // Found by fuzzing: parquet 57 reads footer fields by id whatever their wire type;
            // field 1 declared a string, read as an i32, shifted the crate onto a list of ~2^31.
            "parquet-footer-field-type-mismatch",
            |d, _| {
                std::fs::copy(
                    Path::new(env!("CARGO_MANIFEST_DIR"))
                        .join("tests/fixtures/fuzz/parquet-footer-field-type-mismatch.parquet"),
                    d.join("p.parquet"),
                )
                .unwrap();
            },
            ["init", "--pool", "{d}/p.parquet", "--state", "{d}/s"],
            1,
            ["p.parquet", "field 1 has wire type 8"]
        ),
        case!(
            // Found by fuzzing: a list count of ~2^31 in the footer made parquet 57 allocate
            // 52 GB up front and abort.
            "parquet-footer-list-of-2e31",
            |d, _| {
                std::fs::copy(
                    Path::new(env!("CARGO_MANIFEST_DIR"))
                        .join("tests/fixtures/fuzz/parquet-schema-list-of-2e31.parquet"),
                    d.join("p.parquet"),
                )
                .unwrap();
            },
            ["init", "--pool", "{d}/p.parquet", "--state", "{d}/s"],
            1,
            ["p.parquet", "malformed footer metadata"]
        ),
        case!(
            // Found by fuzzing: parquet 57's record reader panics on a definition level of 43.
            "parquet-corrupt-definition-levels",
            |d, _| {
                std::fs::copy(
                    Path::new(env!("CARGO_MANIFEST_DIR"))
                        .join("tests/fixtures/fuzz/parquet-definition-level-43.parquet"),
                    d.join("p.parquet"),
                )
                .unwrap();
            },
            ["init", "--pool", "{d}/p.parquet", "--state", "{d}/s"],
            1,
            ["p.parquet", "the Parquet reader failed on malformed data"]
        ),
    ]
}
