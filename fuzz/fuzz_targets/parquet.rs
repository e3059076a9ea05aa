//! A Parquet pool (image bytes and labels): the Parquet reader, then PNG/JPEG decoding of
//! every row.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let p = alkit_fuzz::put("pool.parquet", data);
    let hub = alkit::hub::Hub::new(alkit_fuzz::scratch().join("hub"), true);
    let source = alkit::data::Source::Parquet(p);
    let _ = alkit::data::source::load(&source, &hub, &mut alkit::observe::Silent);
});
