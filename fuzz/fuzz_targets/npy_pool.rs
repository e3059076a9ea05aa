//! An `.npy` embedding pool (one `(n, d)` float array).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| alkit_fuzz::npy_pool(data));
