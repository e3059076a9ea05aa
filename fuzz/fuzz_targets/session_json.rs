//! A session's `session.json`, resumed over a fixed 6-item CSV pool.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = alkit_fuzz::scratch().join("session");
    let pool = alkit_fuzz::put(
        "session-pool.csv",
        b"id,label,a,b\np0,cat,0.1,0.2\np1,dog,0.3,0.1\np2,,0.5,0.5\np3,,0.9,0.1\np4,,0.2,0.8\np5,,0.4,0.4\n",
    );
    let items = alkit::data::source::load_csv(&pool).expect("fixed pool");
    std::fs::create_dir_all(&dir).expect("scratch");
    std::fs::write(dir.join(alkit::session::STATE_FILE), data).expect("scratch write");
    let loaded = alkit::data::Loaded {
        pool: items,
        test: None,
    };
    let _ = alkit::session::Learner::load(&dir, loaded);
});
