//! A scores file given to `alkit metrics`: read, then every metric its columns allow.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let p = alkit_fuzz::put("scores.csv", data);
    if let Ok(f) = alkit::eval::scores_file::ScoresFile::read(&p) {
        let _ = f.metrics();
    }
});
