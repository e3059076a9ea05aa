//! Sharded scoring on an existing scheduler, and the exact merge of shard results.
//!
//! A pool is split by each item's stable id: item `id` belongs to shard `fnv1a(id) mod N`, so
//! every process of a Slurm job array or a Kubernetes Indexed Job picks its items from the id
//! alone, with no coordinator. A shard writes its best `K` rows with each row's selection key
//! (`key`) and, last and atomically, a manifest beside them (`FILE.shard.json`): a shard file
//! without its manifest is unfinished. [`merge::run`](super::merge::run) checks that the manifests belong to one run and
//! cover the pool exactly once, then takes the best `K` keys of the union, which are exactly the
//! best `K` of the whole pool: each shard's best `K` contains every item of the global best `K`
//! that lies in it.
//!
//! Keys come from one item at a time ([`selection_keys`]): the score for top-k, and for the
//! stochastic `power` and `softmax` modes `ln w + G` with the Gumbel draw `G` from the stream of
//! `(seed, Select, fnv1a(id))`, so a sharded run selects what the unsharded one selects.
//! `softrank` needs every score's rank and is computed unsharded only.
//!
//! BatchBALD chooses a batch jointly, not by keys. Unsharded or sharded, it runs over the same
//! candidates: the pool's best `M` items by BALD (ties by position, `--candidates M`), handed
//! to the greedy choice in pool order with each candidate's ensemble draws ([`joint_pick`]).
//! A shard keeps its best `M` by BALD with their draws (columns `p<s>_<c>`); the merge takes
//! the best `M` of the union, which are the pool's best `M`, and runs the same greedy choice
//! on them, so a sharded run picks exactly what the unsharded one picks. The approximation is
//! the candidate cut itself: an item outside the best `M` by BALD is never picked, although
//! the full greedy over the whole pool might pick it for diversity. Draws must not depend on
//! the batch, so this holds for ensembles (members), not MC dropout.

use crate::data::Fnv1a;
use crate::error::{Error, Result};
use crate::fsutil::{read_json, write_csv, write_json};
use crate::rng::{stream, Purpose};
use alkit_acquisition::{gumbel, BatchBald, BatchSelector, Evidence, Probs, Samples, Selection};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::hash::Hasher;
use std::path::{Path, PathBuf};

/// The manifest format this version writes and merges: 2 added the content hashes
/// (`checkpoint_hash`, `pool_fingerprint`); a format-1 manifest records paths only and is
/// refused.
pub const FORMAT: u32 = 2;

/// Most shards a run may have.
pub const MAX_SHARDS: usize = 1 << 16;

/// Shard `index` of `count` (from 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    /// This shard, `0..count`.
    pub index: usize,
    /// Shards in all.
    pub count: usize,
}

impl Shard {
    /// A shard, checked: `index < count <= MAX_SHARDS`. `origin` names where it came from.
    pub fn new(index: usize, count: usize, origin: &'static str) -> Result<Shard> {
        if count == 0 || count > MAX_SHARDS || index >= count {
            return Err(Error::config(
                origin,
                format!("shard {index} of {count}: expected 0 <= I < N <= {MAX_SHARDS}"),
            ));
        }
        Ok(Shard { index, count })
    }

    /// Parses `I/N`.
    pub fn parse(s: &str) -> Result<Shard> {
        let bad = || Error::config("shard", format!("`{s}`: expected I/N with 0 <= I < N"));
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let (i, n) = (
            i.trim().parse().map_err(|_| bad())?,
            n.trim().parse().map_err(|_| bad())?,
        );
        Shard::new(i, n, "shard")
    }

    /// The shard a scheduler assigned through the environment `env` (a lookup, so tests need
    /// not touch the process's): a Slurm job array (`SLURM_ARRAY_TASK_ID` minus
    /// `SLURM_ARRAY_TASK_MIN`, default 0, of `SLURM_ARRAY_TASK_COUNT`), or a Kubernetes Indexed
    /// Job (`JOB_COMPLETION_INDEX` of `shards`, which the Job's `completions` must equal).
    /// `Ok(None)` when neither is set.
    ///
    /// A Slurm array must be contiguous (`SLURM_ARRAY_TASK_MAX - SLURM_ARRAY_TASK_MIN + 1 ==
    /// SLURM_ARRAY_TASK_COUNT`, step 1) and hold more than one task: a one-task array is what
    /// a rerun of task `I` of a larger array gets (`sbatch --array=I`), and it says nothing of the
    /// shard count (shard 0 of 1 would score the whole pool into shard `I`'s file), so it is
    /// refused; such a rerun names its shard and count explicitly. Errors name the variable.
    pub fn from_env(
        env: &dyn Fn(&str) -> Option<String>,
        shards: Option<usize>,
    ) -> Result<Option<Shard>> {
        let num = |name: &'static str| -> Result<Option<(usize, String)>> {
            env(name)
                .map(|v| match v.trim().parse::<usize>() {
                    Ok(n) => Ok((n, v)),
                    Err(_) => Err(Error::env(name, &v, "not a whole number")),
                })
                .transpose()
        };
        if let Some((id, id_v)) = num("SLURM_ARRAY_TASK_ID")? {
            let min = num("SLURM_ARRAY_TASK_MIN")?.map_or(0, |m| m.0);
            let (count, count_v) = num("SLURM_ARRAY_TASK_COUNT")?.ok_or_else(|| {
                Error::env(
                    "SLURM_ARRAY_TASK_ID",
                    &id_v,
                    "SLURM_ARRAY_TASK_COUNT is not set, so the shard count is unknown",
                )
            })?;
            let count_err = |p: String| Error::env("SLURM_ARRAY_TASK_COUNT", &count_v, p);
            if count == 0 {
                return Err(count_err("a job array has at least one task".into()));
            }
            if count > MAX_SHARDS {
                return Err(count_err(format!("at most {MAX_SHARDS} shards")));
            }
            if let Some((step, step_v)) = num("SLURM_ARRAY_TASK_STEP")? {
                if step != 1 {
                    return Err(Error::env(
                        "SLURM_ARRAY_TASK_STEP",
                        step_v,
                        "an array with a step cannot be sharded from its variables: number \
                         the tasks 0 to N-1 (or 1 to N)",
                    ));
                }
            }
            if let Some((max, _)) = num("SLURM_ARRAY_TASK_MAX")? {
                if max.checked_sub(min).map(|d| d + 1) != Some(count) {
                    return Err(count_err(format!(
                        "the array's ids run from SLURM_ARRAY_TASK_MIN={min} to \
                         SLURM_ARRAY_TASK_MAX={max} in {count} tasks: an array with gaps \
                         cannot be sharded from its variables; give the shard as I/N \
                         (setting `shard`)"
                    )));
                }
            }
            if count == 1 {
                return Err(count_err(format!(
                    "a one-task array (task {id} alone, as when one task of a larger array is \
                     rerun) does not say how many shards the run has; give the shard and the \
                     count as {id}/N (setting `shard`)"
                )));
            }
            let index = id.checked_sub(min).ok_or_else(|| {
                Error::env(
                    "SLURM_ARRAY_TASK_ID",
                    &id_v,
                    format!("below SLURM_ARRAY_TASK_MIN={min}"),
                )
            })?;
            if index >= count {
                return Err(Error::env(
                    "SLURM_ARRAY_TASK_ID",
                    &id_v,
                    format!(
                        "past the array: SLURM_ARRAY_TASK_MIN={min} and \
                         SLURM_ARRAY_TASK_COUNT={count} give the ids {min} to {}",
                        min + count - 1
                    ),
                ));
            }
            return Shard::new(index, count, "shard").map(Some);
        }
        if let Some((index, index_v)) = num("JOB_COMPLETION_INDEX")? {
            let count = shards.ok_or_else(|| {
                Error::config(
                    "shards",
                    "JOB_COMPLETION_INDEX is set: give the Job's completions as the shard count (setting `shards`)",
                )
            })?;
            if index >= count {
                return Err(Error::env(
                    "JOB_COMPLETION_INDEX",
                    index_v,
                    format!(
                        "not below the shard count {count} (setting `shards`): the Job's \
                         completions and the shard count must be equal"
                    ),
                ));
            }
            return Shard::new(index, count, "shards").map(Some);
        }
        Ok(None)
    }

    /// The shard a run scores: `given` (`I/N`, as `--shard` takes it) when set, else the
    /// scheduler's through `env` ([`Shard::from_env`]). `shards` without `given` is read with
    /// a Kubernetes `JOB_COMPLETION_INDEX` and refused when that is not set.
    pub fn resolve(
        given: Option<&str>,
        shards: Option<usize>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<Shard>> {
        if let Some(s) = given {
            return Shard::parse(s).map(Some);
        }
        let shard = Shard::from_env(env, shards)?;
        if shards.is_some() && shard.is_none() {
            return Err(Error::config(
                "shards",
                "a shard count is read with JOB_COMPLETION_INDEX, which is not set; give the shard as I/N (setting `shard`)",
            ));
        }
        Ok(shard)
    }

    /// True when item `id` belongs to this shard.
    pub fn holds(&self, id: &str) -> bool {
        shard_of(id, self.count) == self.index
    }
}

fn id_hash(id: &str) -> u64 {
    let mut h = Fnv1a::default();
    h.write(id.as_bytes());
    h.finish()
}

/// The shard of item `id` among `count`: its id's FNV-1a hash modulo `count`.
pub fn shard_of(id: &str, count: usize) -> usize {
    (id_hash(id) % count as u64) as usize
}

/// One selection key per item (higher = picked first) from its score and id alone (see the
/// module docs). Errors on a non-finite score, and for `softrank` or `random` when `sharded`.
pub fn selection_keys(
    scores: &[f32],
    ids: &[String],
    selection: &Selection,
    seed: u64,
    sharded: bool,
) -> Result<Vec<f64>> {
    if let Some((i, v)) = scores.iter().enumerate().find(|(_, v)| !v.is_finite()) {
        return Err(Error::config(
            "scores",
            format!(
                "item `{}` scored {v}; selection needs finite scores",
                ids[i]
            ),
        ));
    }
    if let Some((i, v)) = selection.outside_domain(scores) {
        return Err(Error::config(
            "select",
            Selection::power_domain(&format!("item `{}`", ids[i]), v),
        ));
    }
    let noise = |id: &str| gumbel(stream(seed, Purpose::Select, id_hash(id)).next_u64());
    if selection.log_weight(0.5).is_some() {
        return Ok(scores
            .iter()
            .zip(ids)
            .map(|(&s, id)| {
                let lw = selection.log_weight(s).unwrap_or(f64::NEG_INFINITY);
                if selection.is_stochastic() {
                    lw + noise(id)
                } else {
                    lw
                }
            })
            .collect());
    }
    match *selection {
        Selection::SoftRank { beta } if !sharded => {
            let mut order: Vec<usize> = (0..scores.len()).collect();
            order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
            let mut keys = vec![0f64; scores.len()];
            for (r, &i) in order.iter().enumerate() {
                keys[i] = -f64::from(beta) * ((r + 1) as f64).ln() + noise(&ids[i]);
            }
            Ok(keys)
        }
        _ => Err(Error::config(
            "select",
            "softrank needs every item's rank and random no score: neither can be sharded; \
             use top-k, power or softmax",
        )),
    }
}

/// What a shard's manifest records: enough for [`merge::run`](super::merge::run) to refuse shards of different runs,
/// a missing shard or a shard given twice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Manifest format.
    pub format: u32,
    /// This shard.
    pub shard: Shard,
    /// Rows kept (the shard's best `top`), `None`: all of its items.
    pub top: Option<usize>,
    /// Items of the pool that fell in this shard.
    pub items: usize,
    /// Items of the whole pool.
    pub pool: usize,
    /// What produced the scores, to be equal across shards: data, split, checkpoints,
    /// scorers and their settings, selection and seed.
    pub run: BTreeMap<String, String>,
    /// The content of the checkpoint files the shard was scored with
    /// ([`crate::checkpoint::content_hash`], 16 hex digits): equal paths are not equal
    /// weights when a checkpoint was retrained in place.
    pub checkpoint_hash: String,
    /// The fingerprint of every item of the scored split in order, ids and values
    /// (`data::reader::hash_item`, the fingerprint a streamed session takes of its pool; 16 hex
    /// digits): every shard reads the whole pool, so all of them must see the same one.
    pub pool_fingerprint: String,
    /// A joint (BatchBALD) choice: the rows are candidates with their draws.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub joint: Option<Joint>,
}

/// BatchBALD across shards (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Joint {
    /// Candidates of the greedy choice: the pool's best by BALD.
    pub candidates: usize,
    /// Draws per candidate (ensemble members).
    pub draws: usize,
    /// Classes per draw.
    pub classes: usize,
    /// Seed of the configurations the greedy choice samples past its exact enumeration.
    pub seed: u64,
}

impl Joint {
    /// The draw columns `p<s>_<c>` of a shard file.
    pub fn columns(&self) -> Vec<String> {
        (0..self.draws)
            .flat_map(|d| (0..self.classes).map(move |c| format!("p{d}_{c}")))
            .collect()
    }
}

/// A candidate of the joint choice.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// Position in the pool.
    pub index: usize,
    /// Its BALD score, the key of the candidate cut.
    pub key: f64,
    /// Its output row (`index,id,<score>`), as written.
    pub fields: Vec<String>,
    /// Its draws `(s, c)`.
    pub draws: Vec<f32>,
}

/// BatchBALD's greedy choice of `top` items among the best `joint.candidates` of `cands` by
/// key (ties by position), handed to it in pool order, enumerating up to `max_configs` joint
/// configurations ([`BatchBald::DEFAULT_CONFIGS`] for the command line): the picks in the
/// order chosen.
pub fn joint_pick(
    mut cands: Vec<Candidate>,
    joint: &Joint,
    top: usize,
    max_configs: usize,
) -> Result<Vec<Candidate>> {
    cands.sort_by(|a, b| b.key.total_cmp(&a.key).then(a.index.cmp(&b.index)));
    cands.truncate(joint.candidates);
    cands.sort_by_key(|c| c.index);
    let (n, c) = (cands.len(), joint.classes);
    let w = joint.draws * c;
    if let Some(bad) = cands.iter().find(|x| x.draws.len() != w) {
        return Err(Error::config(
            "draws",
            format!(
                "item {} has {} draw values, expected {w}",
                bad.index,
                bad.draws.len()
            ),
        ));
    }
    let draws = (0..joint.draws)
        .map(|d| {
            let p = cands
                .iter()
                .flat_map(|x| x.draws[d * c..(d + 1) * c].iter().copied())
                .collect();
            Probs::new(p, n, c)
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let mut ev = Evidence::default();
    ev.samples = Some(Samples::new(draws)?);
    let mut rng = stream(joint.seed, Purpose::Select, 0);
    let selector = BatchBald {
        max_configs,
        ..BatchBald::members()
    };
    let picks = selector.select(&ev, top, &mut rng)?;
    let mut slots: Vec<Option<Candidate>> = cands.into_iter().map(Some).collect();
    Ok(picks.into_iter().filter_map(|i| slots[i].take()).collect())
}

/// Reads the manifest `path`, refusing another format first (a format-1 manifest, from an
/// alkit that recorded paths but not contents, has no hashes to compare).
pub fn read_manifest(path: &Path) -> Result<Manifest> {
    let v: serde_json::Value = read_json(path)?;
    match v.get("format").and_then(serde_json::Value::as_u64) {
        Some(f) if f == u64::from(FORMAT) => {}
        Some(1) => {
            return Err(Error::state(
                path,
                "manifest format 1 (an older alkit) records the checkpoint and pool by path, \
                 not by content, so shards scored with different weights or items cannot be \
                 told apart: score this shard again",
            ))
        }
        f => {
            return Err(Error::state(
                path,
                format!(
                    "manifest format {}: this alkit merges format {FORMAT}",
                    f.map_or("(none)".to_string(), |f| f.to_string())
                ),
            ))
        }
    }
    serde_json::from_value(v).map_err(|e| Error::state(path, format!("invalid manifest: {e}")))
}

/// The manifest path of shard file `out`: `OUT.shard.json`.
pub fn manifest_path(out: &Path) -> PathBuf {
    let mut name = out.file_name().unwrap_or_default().to_os_string();
    name.push(".shard.json");
    out.with_file_name(name)
}

/// Writes a shard's result: the rows `index,id,<scorers>,key` of its best `top` items by key
/// (all, by key, when `top` is `None`), then its manifest; both atomically, the manifest last.
/// `indices`, `ids`, `cols[k]` and `keys` run over the shard's items; for a joint choice
/// (`manifest.joint`) `draws` holds their draws `(n, s, c)`, written as columns `p<s>_<c>`
/// before `key`.
#[allow(clippy::too_many_arguments)]
pub fn write_shard(
    out: &Path,
    manifest: &Manifest,
    names: &[&str],
    indices: &[usize],
    ids: &[String],
    cols: &[Vec<f32>],
    keys: &[f64],
    draws: Option<&[f32]>,
) -> Result<()> {
    let _ = std::fs::remove_file(manifest_path(out));
    let mut order: Vec<usize> = (0..ids.len()).collect();
    order.sort_by(|&x, &y| {
        keys[y]
            .total_cmp(&keys[x])
            .then(indices[x].cmp(&indices[y]))
    });
    if let Some(k) = manifest.top {
        order.truncate(k);
    }
    let joint_cols = manifest.joint.map(|j| j.columns()).unwrap_or_default();
    let w = joint_cols.len();
    let draws = match (manifest.joint, draws) {
        (None, _) => None,
        (Some(_), Some(d)) if d.len() == w * ids.len() => Some(d),
        (Some(_), _) => {
            return Err(Error::config(
                "draws",
                "a joint choice needs every kept item's draws",
            ))
        }
    };
    let mut header = vec!["index", "id"];
    header.extend(names);
    header.extend(joint_cols.iter().map(String::as_str));
    header.push("key");
    let rows = order.into_iter().map(|i| {
        let mut row = vec![indices[i].to_string(), ids[i].clone()];
        row.extend(cols.iter().map(|c| c[i].to_string()));
        if let Some(d) = draws {
            row.extend(d[i * w..(i + 1) * w].iter().map(f32::to_string));
        }
        row.push(keys[i].to_string());
        row
    });
    write_csv(out, &header, rows)?;
    write_json(&manifest_path(out), manifest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_parse_and_come_from_slurm_or_kubernetes() {
        assert_eq!(Shard::parse("2/3").unwrap(), Shard { index: 2, count: 3 });
        for bad in ["3/3", "1", "a/2", "0/0", "-1/2", "1/70000"] {
            assert!(Shard::parse(bad).is_err(), "{bad}");
        }
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|p| p.0 == k).map(|p| p.1.to_string())
        };
        let slurm = env(&[
            ("SLURM_ARRAY_TASK_ID", "3"),
            ("SLURM_ARRAY_TASK_MIN", "1"),
            ("SLURM_ARRAY_TASK_COUNT", "3"),
        ]);
        assert_eq!(
            Shard::from_env(&slurm, None).unwrap(),
            Some(Shard { index: 2, count: 3 })
        );
        let k8s = env(&[("JOB_COMPLETION_INDEX", "0")]);
        assert_eq!(
            Shard::from_env(&k8s, Some(4)).unwrap(),
            Some(Shard { index: 0, count: 4 })
        );
        assert!(Shard::from_env(&k8s, None).is_err());
        assert!(Shard::from_env(&env(&[("SLURM_ARRAY_TASK_ID", "0")]), None).is_err());
        assert_eq!(Shard::from_env(&env(&[]), None).unwrap(), None);
        let full = env(&[
            ("SLURM_ARRAY_TASK_ID", "15"),
            ("SLURM_ARRAY_TASK_MIN", "0"),
            ("SLURM_ARRAY_TASK_MAX", "15"),
            ("SLURM_ARRAY_TASK_COUNT", "16"),
            ("SLURM_ARRAY_TASK_STEP", "1"),
        ]);
        assert_eq!(
            Shard::from_env(&full, None).unwrap(),
            Some(Shard {
                index: 15,
                count: 16
            })
        );
        // Each refusal names the variable the scheduler set.
        for (vars, says) in [
            (
                env(&[
                    ("SLURM_ARRAY_TASK_ID", "0"),
                    ("SLURM_ARRAY_TASK_COUNT", "0"),
                ]),
                "SLURM_ARRAY_TASK_COUNT=0",
            ),
            (
                env(&[
                    ("SLURM_ARRAY_TASK_ID", "4"),
                    ("SLURM_ARRAY_TASK_COUNT", "4"),
                ]),
                "SLURM_ARRAY_TASK_ID=4: past the array",
            ),
            (
                // `sbatch --array=5`, a rerun of one task.
                env(&[
                    ("SLURM_ARRAY_TASK_ID", "5"),
                    ("SLURM_ARRAY_TASK_MIN", "5"),
                    ("SLURM_ARRAY_TASK_MAX", "5"),
                    ("SLURM_ARRAY_TASK_COUNT", "1"),
                ]),
                "SLURM_ARRAY_TASK_COUNT=1",
            ),
            (
                // `sbatch --array=3,7`.
                env(&[
                    ("SLURM_ARRAY_TASK_ID", "3"),
                    ("SLURM_ARRAY_TASK_MIN", "3"),
                    ("SLURM_ARRAY_TASK_MAX", "7"),
                    ("SLURM_ARRAY_TASK_COUNT", "2"),
                ]),
                "gaps",
            ),
            (
                env(&[
                    ("SLURM_ARRAY_TASK_ID", "2"),
                    ("SLURM_ARRAY_TASK_COUNT", "4"),
                    ("SLURM_ARRAY_TASK_STEP", "2"),
                ]),
                "SLURM_ARRAY_TASK_STEP=2",
            ),
        ] {
            let e = Shard::from_env(&vars, None).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
            assert!(!e.contains("--"), "a library message names no flag: {e}");
        }
        let e = Shard::from_env(&env(&[("JOB_COMPLETION_INDEX", "4")]), Some(4))
            .unwrap_err()
            .to_string();
        assert!(e.contains("JOB_COMPLETION_INDEX=4"), "{e}");
    }

    #[test]
    fn keys_depend_on_the_item_alone() {
        let ids: Vec<String> = (0..50).map(|i| format!("item{i}")).collect();
        let scores: Vec<f32> = (0..50).map(|i| (i % 7) as f32 + 0.5).collect();
        for sel in [
            Selection::TopK,
            Selection::Power { beta: 1.0 },
            Selection::Softmax { beta: 2.0 },
        ] {
            let all = selection_keys(&scores, &ids, &sel, 9, true).unwrap();
            let part = selection_keys(&scores[10..20], &ids[10..20], &sel, 9, true).unwrap();
            assert_eq!(&all[10..20], &part[..], "{sel:?}");
        }
        let soft = Selection::SoftRank { beta: 1.0 };
        assert!(selection_keys(&scores, &ids, &soft, 9, true).is_err());
        assert!(selection_keys(&scores, &ids, &soft, 9, false).is_ok());
        assert!(selection_keys(&[f32::NAN], &ids[..1], &Selection::TopK, 0, false).is_err());
    }
}
