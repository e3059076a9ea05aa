//! The `hf:OWNER/NAME[@REV]` parser and the offline cache lookup it feeds: whatever the name,
//! a path the cache returns lies inside the cache.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| alkit_fuzz::hf_name(data));
