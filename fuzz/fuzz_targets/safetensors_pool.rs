//! A safetensors pool (`x`, optional `y`, optional `classes` metadata).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let p = alkit_fuzz::put("pool.safetensors", data);
    let _ = alkit::data::source::load_safetensors(&p);
});
