//! An `.npz` embedding file (`np.savez` / `np.savez_compressed` arrays).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| alkit_fuzz::npz_pool(data));
