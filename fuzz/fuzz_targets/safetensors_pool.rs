//! A safetensors pool (`x`, optional `y`, optional `classes` metadata).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| alkit_fuzz::safetensors_pool(data));
