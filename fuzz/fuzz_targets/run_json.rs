//! A curve run's `runs/*.json` state: parsed, then checked for consistency as on resume.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let p = alkit_fuzz::put("run-state.json", data);
    if let Ok(state) = alkit::fsutil::read_json::<alkit::acquire::RunState>(&p) {
        let _ = state.check_consistent(&p);
    }
    let _ = alkit::fsutil::read_json::<alkit::curve::CurveSpec>(&p);
});
