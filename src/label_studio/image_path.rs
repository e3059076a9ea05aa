//! Which pool item a Label Studio task shows, when the task was not written by alkit: tasks
//! imported from the pool's own image folder (Label Studio's local-files storage, or URLs
//! that end in the image's path) carry no `alkit_id`, only the image's URL or path. The ML
//! backend and `teach` read such tasks by the same rule, here, so that a task one of them
//! maps to an item the other maps to the same one.
//!
//! A URL names an item when an ending of its path at a `/`, or of its `d=` parameter (what
//! Label Studio's local-files URLs carry: `/data/local-files/?d=photos/cat/1.png`), both
//! percent-decoded, is the id of an item of the pool; the longest such ending wins, so
//! `photos/cat/1.png` names `cat/1.png` in a pool of `photos/`.

use crate::session::PoolItems;

/// `(path, query)` of a URL (the query empty when there is none).
pub fn split_url(url: &str) -> (&str, &str) {
    match url.split_once('?') {
        Some((p, q)) => (p, q),
        None => (url, ""),
    }
}

/// The value of query parameter `name`, percent-decoded; `None` when absent or not UTF-8.
pub fn query_param(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == name).then(|| percent_decode(v)).flatten()
    })
}

/// Decodes `%XX` escapes and `+` (a space in a query string); `None` on a bad escape or
/// bytes that are not UTF-8.
pub fn percent_decode(s: &str) -> Option<String> {
    // The crate passes a malformed escape through as it stands; refused here instead, so that
    // a query never means something other than what its sender encoded.
    let b = s.as_bytes();
    let malformed = b.iter().enumerate().any(|(i, &c)| {
        c == b'%'
            && !b
                .get(i + 1..i + 3)
                .is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit))
    });
    if malformed {
        return None;
    }
    // `+` is replaced before decoding, so that an encoded `%2B` stays a plus sign.
    percent_encoding::percent_decode_str(&s.replace('+', " "))
        .decode_utf8()
        .ok()
        .map(std::borrow::Cow::into_owned)
}

/// The one item `names` (the item each of a task's values names, if any) agree on: `None`
/// when no value names one, an error naming them when values name different items (a task
/// must not be taught to whichever item its fields happen to list first).
pub fn one_item<T: PartialEq + std::fmt::Display>(
    names: impl IntoIterator<Item = Option<T>>,
) -> std::result::Result<Option<T>, String> {
    let mut found: Option<T> = None;
    for n in names.into_iter().flatten() {
        match &found {
            Some(f) if *f != n => {
                return Err(format!(
                    "its fields name two items of the pool, `{f}` and `{n}`; give it one image"
                ))
            }
            Some(_) => {}
            None => found = Some(n),
        }
    }
    Ok(found)
}

/// The position of the pool item the image URL or path `url` names (module docs), if any.
pub fn item_of_image(items: &PoolItems, url: &str) -> Option<usize> {
    let (path, query) = split_url(url);
    let mut candidates = vec![percent_decode(path).unwrap_or_else(|| path.into())];
    if let Some(d) = query_param(query, "d") {
        candidates.insert(0, d);
    }
    candidates.iter().find_map(|p| {
        let p = p.replace('\\', "/");
        std::iter::once(0)
            .chain(p.match_indices('/').map(|(k, _)| k + 1))
            .find_map(|k| items.position(&p[k..]))
    })
}
