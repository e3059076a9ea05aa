//! Request bodies of the Label Studio ML backend (setup, predict, webhook, train).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| alkit_fuzz::backend_request(data));
