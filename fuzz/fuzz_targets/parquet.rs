//! A Parquet pool (image bytes and labels): the Parquet reader, then PNG/JPEG decoding of
//! every row.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| alkit_fuzz::parquet(data));
