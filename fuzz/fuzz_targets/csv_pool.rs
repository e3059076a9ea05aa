//! A CSV pool (`id`, `label` and feature columns).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| alkit_fuzz::csv_pool(data));
