//! A scores file given to `alkit metrics`: read, then every metric its columns allow.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| alkit_fuzz::metrics(data));
