//! PNG and JPEG decoding, with the size limits checked before decoding.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = alkit::data::image::decode(data, std::path::Path::new("fuzz.png"));
});
