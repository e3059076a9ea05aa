//! A CSV pool (`id`, `label` and feature columns).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let p = alkit_fuzz::put("pool.csv", data);
    let _ = alkit::data::source::load_csv(&p);
});
