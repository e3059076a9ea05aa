//! IDX image and label files, plain and gzip. The first byte picks the reader and whether the
//! rest is gzip-compressed first (so the fuzzer reaches the inflation bound without having to
//! discover deflate); any other first byte reads the bytes as they are.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| alkit_fuzz::idx(data));
