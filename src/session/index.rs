//! The pool as a session found it: `pool-index.json` beside `session.json` lists every item's
//! id and content hash, so that a pool changed since (an item added, removed, renamed or
//! edited) is refused naming those items, not only "the pool changed".
//!
//! `session.json` keeps one fingerprint of the whole pool, which says *that* the pool changed;
//! this file says *what*. It is written once when a session is first saved (an older session
//! gets one when it is next resumed over its unchanged pool), is not needed while the pool is
//! unchanged, and is read only on a mismatch. A missing or unreadable index leaves the
//! fingerprint's message as it was.

use crate::data::reader::content_hash;
use crate::data::Items;
use crate::error::Result;
use crate::fsutil::write_json;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;

/// The index's file name, beside `session.json`.
pub const INDEX_FILE: &str = "pool-index.json";

/// How many items of each kind a message names.
const NAMED: usize = 5;

/// The file's content: the pool's fingerprint as `session.json` records it, and per item in
/// the source's order its id and content hash.
#[derive(Serialize, Deserialize)]
struct PoolIndex {
    fingerprint: u64,
    ids: Vec<String>,
    hashes: Vec<u64>,
}

/// Each item's content hash `(n,)` for a pool in memory.
pub(super) fn content_hashes(items: &Items) -> Vec<u64> {
    let d: usize = items.item_shape.iter().product();
    items.x.chunks_exact(d.max(1)).map(content_hash).collect()
}

/// Writes `dir/pool-index.json` atomically for a pool with `fingerprint`.
pub(super) fn write(dir: &Path, fingerprint: u64, ids: &[String], hashes: &[u64]) -> Result<()> {
    write_json(
        &dir.join(INDEX_FILE),
        &PoolIndex {
            fingerprint,
            ids: ids.to_vec(),
            hashes: hashes.to_vec(),
        },
    )
}

fn read(path: &Path) -> Option<PoolIndex> {
    let bytes = std::fs::read(path).ok()?;
    let index: PoolIndex = serde_json::from_slice(&bytes).ok()?;
    (index.ids.len() == index.hashes.len()).then_some(index)
}

/// True when `dir` holds a readable index for the pool with `fingerprint`.
pub(super) fn is_current(dir: &Path, fingerprint: u64) -> bool {
    read(&dir.join(INDEX_FILE)).is_some_and(|i| i.fingerprint == fingerprint)
}

/// What changed between the pool the index at `path` describes (the one whose fingerprint is
/// `fingerprint`) and the pool found now (`ids`, `hashes`): items removed, added, renamed (the
/// same content under a new id) and changed, a few of each named with the count. `None` when
/// there is no readable index for that pool.
pub(super) fn describe_change(
    path: &Path,
    fingerprint: u64,
    ids: &[String],
    hashes: &[u64],
) -> Option<String> {
    let then = read(path).filter(|i| i.fingerprint == fingerprint)?;
    let old: HashMap<&str, u64> = then
        .ids
        .iter()
        .map(String::as_str)
        .zip(then.hashes.iter().copied())
        .collect();
    let new: HashMap<&str, u64> = ids
        .iter()
        .map(String::as_str)
        .zip(hashes.iter().copied())
        .collect();
    let mut removed: Vec<&str> = then
        .ids
        .iter()
        .map(String::as_str)
        .filter(|id| !new.contains_key(id))
        .collect();
    let mut added: Vec<&str> = ids
        .iter()
        .map(String::as_str)
        .filter(|id| !old.contains_key(id))
        .collect();
    let changed: Vec<String> = ids
        .iter()
        .filter(|id| {
            old.get(id.as_str())
                .is_some_and(|h| new.get(id.as_str()) != Some(h))
        })
        .cloned()
        .collect();
    // A removed item whose content reappears under an added id was renamed (the first added
    // id with that content, in the pool's order).
    let mut added_by_content: HashMap<u64, Vec<&str>> = HashMap::new();
    for a in &added {
        added_by_content.entry(new[a]).or_default().push(a);
    }
    for v in added_by_content.values_mut() {
        v.reverse();
    }
    let mut renamed: Vec<(&str, &str)> = Vec::new();
    removed.retain(
        |r| match added_by_content.get_mut(&old[r]).and_then(Vec::pop) {
            Some(to) => {
                renamed.push((r, to));
                false
            }
            None => true,
        },
    );
    let targets: std::collections::HashSet<&str> = renamed.iter().map(|(_, to)| *to).collect();
    added.retain(|a| !targets.contains(a));
    let renamed: Vec<String> = renamed
        .iter()
        .map(|(from, to)| format!("{from}` -> `{to}"))
        .collect();
    let list = |what: &str, items: Vec<String>| {
        let shown: Vec<String> = items.iter().take(NAMED).map(|s| format!("`{s}`")).collect();
        let more = items.len().saturating_sub(NAMED);
        let tail = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        format!("{} {what} ({}{tail})", items.len(), shown.join(", "))
    };
    let owned = |v: Vec<&str>| v.into_iter().map(String::from).collect::<Vec<_>>();
    let mut parts = Vec::new();
    if !removed.is_empty() {
        parts.push(list("removed", owned(removed)));
    }
    if !added.is_empty() {
        parts.push(list("added", owned(added)));
    }
    if !renamed.is_empty() {
        parts.push(list("renamed", renamed));
    }
    if !changed.is_empty() {
        parts.push(list("changed", changed));
    }
    if parts.is_empty() {
        parts.push(if then.ids != ids {
            "the same items in another order".to_string()
        } else {
            "the same ids and contents: the values differ in a way the index does not see \
             (another item shape)"
                .to_string()
        });
    }
    Some(parts.join("; "))
}
