//! Files of answers and indices: `teach`'s and `init --labels`' `id,label` CSV, and the index
//! lists of `score --indices`.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let p = alkit_fuzz::put("labels.csv", data);
    let _ = alkit::session::read_answer_csv(&p);
    let _ = alkit::data::source::read_indices(&p, 1000);
});
