//! Files of answers and indices: `teach`'s and `init --labels`' `id,label` CSV, and the index
//! lists of `score --indices`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| alkit_fuzz::labels(data));
