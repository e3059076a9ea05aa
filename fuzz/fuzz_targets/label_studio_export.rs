//! Label Studio exports (JSON, JSON_MIN, CSV, TSV) and answer files taught back, tasks matched
//! by `alkit_id` or image path; a project's JSON export as the ML backend reads it.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| alkit_fuzz::label_studio_export(data));
