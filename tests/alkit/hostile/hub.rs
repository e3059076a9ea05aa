//! A hostile Hub endpoint: answers that try to escape the cache or break the client.

use super::*;

pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(
            "hub-revision-escapes-online",
            none,
            [
                "score",
                "--checkpoint",
                "hf:a/b@../../../evil/ref",
                "--out",
                "{d}/s.csv"
            ],
            2,
            ["../../../evil/ref", "revision"]
        ),
        case!(
            "hub-commit-escapes",
            none,
            ["score", "--checkpoint", "hf:o/commit", "--out", "{d}/s.csv"],
            1,
            ["hf:o/commit", "config.json", "is not a hash"]
        ),
        case!(
            "hub-etag-escapes",
            none,
            ["score", "--checkpoint", "hf:o/etag", "--out", "{d}/s.csv"],
            1,
            ["hf:o/etag", "cannot name a cache file"]
        ),
        case!(
            "hub-redirect-without-location",
            none,
            ["score", "--checkpoint", "hf:o/noloc", "--out", "{d}/s.csv"],
            1,
            ["hf:o/noloc", "without a Location"]
        ),
        case!(
            "hub-listing-escapes",
            none,
            ["init", "--pool", "hf:o/listing", "--state", "{d}/s"],
            1,
            ["hf:o/listing", "../../../evil.parquet", "not a safe"]
        ),
    ]
}

/// A Hub endpoint whose answers try to escape the cache or break the client; the repository
/// name picks the misbehaviour.
pub(super) fn hostile_hub(path: &str) -> (String, Vec<u8>) {
    let file = |commit: &str, etag: &str| {
        (
            format!(
                "HTTP/1.1 200 OK\r\nx-repo-commit: {commit}\r\nETag: \"{etag}\"\r\n\
                 Content-Length: 2\r\n"
            ),
            b"{}".to_vec(),
        )
    };
    let commit = "0123456789abcdef0123456789abcdef01234567";
    match path {
        p if p.starts_with("/api/datasets/o/listing/") => {
            let body = br#"{"siblings":[{"rfilename":"../../../evil.parquet"}]}"#;
            (
                format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n", body.len()),
                body.to_vec(),
            )
        }
        p if p.starts_with("/o/commit/") => file("../../../../escaped", "abc"),
        p if p.starts_with("/o/etag/") => file(commit, "../../../escaped"),
        p if p.starts_with("/o/noloc/") => ("HTTP/1.1 302 Found\r\n".into(), Vec::new()),
        _ => (
            "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n".into(),
            Vec::new(),
        ),
    }
}
