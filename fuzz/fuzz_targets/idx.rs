//! IDX image and label files, plain and gzip. The first byte picks the reader and whether the
//! rest is gzip-compressed first (so the fuzzer reaches the inflation bound without having to
//! discover deflate); any other first byte reads the bytes as they are.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::io::Write;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let bytes = if mode & 2 != 0 {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(rest).expect("in memory");
        e.finish().expect("in memory")
    } else {
        rest.to_vec()
    };
    let p = alkit_fuzz::put("data", &bytes);
    if mode & 1 == 0 {
        let _ = alkit::data::idx::read_images(&p);
    } else {
        let _ = alkit::data::idx::read_labels(&p);
    }
});
