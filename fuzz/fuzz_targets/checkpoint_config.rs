//! A checkpoint's `config.json` beside valid weights (a tiny MLP): loaded, and when it loads,
//! run on one item of the shape it declares (bounded, so that a declared shape cannot make the
//! target itself allocate).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| alkit_fuzz::checkpoint_config(data));
