//! The `hf:OWNER/NAME[@REV]` parser and the offline cache lookup it feeds: whatever the name,
//! a path the cache returns lies inside the cache.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let _ = alkit::data::Source::parse(&format!("hf:{s}"));
    if let Ok(repo) = alkit::hub::HubRepo::parse(s) {
        let cache = alkit_fuzz::scratch().join("hub-cache");
        let hub = alkit::hub::Hub::new(&cache, true);
        for kind in [alkit::hub::RepoKind::Model, alkit::hub::RepoKind::Dataset] {
            if let Ok(p) = hub.get(&repo, kind, "config.json", &mut alkit::observe::Silent) {
                assert!(p.starts_with(&cache), "{} escapes the cache", p.display());
            }
            let _ = hub.files(&repo, kind);
        }
    }
});
