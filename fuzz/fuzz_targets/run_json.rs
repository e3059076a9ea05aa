//! A curve run's `runs/*.json` state: parsed, then checked for consistency as on resume.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| alkit_fuzz::run_json(data));
