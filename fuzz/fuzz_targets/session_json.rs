//! A session's `session.json`, resumed over a fixed 6-item CSV pool.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| alkit_fuzz::session_json(data));
