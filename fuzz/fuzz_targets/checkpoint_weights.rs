//! A checkpoint's `model.safetensors` beside a valid `config.json` (a tiny MLP): loaded, and
//! when it loads, run on one item.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| alkit_fuzz::checkpoint_weights(data));
