//! PNG, JPEG and WebP decoding, with the size limits checked before decoding.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| alkit_fuzz::image(data));
