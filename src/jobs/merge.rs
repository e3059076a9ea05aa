//! `alkit merge`: shard files merged into the unsharded result, exactly (see [`super::shard`]
//! for why the union's best keys are the pool's). The shards are checked to be one run's,
//! each given once, finished, and together the pool, before any row is kept.

use super::shard::{joint_pick, manifest_path, read_manifest, Candidate, Joint, Manifest, Shard};
use crate::error::{Error, Result};
use alkit_acquisition::BatchBald;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// Merges shard files into the unsharded result: header `index,id,<scorers>`, the best `top`
/// rows of the union by key (ties by index), each row's fields exactly as its shard wrote
/// them. Errors name the file: a missing or unfinished shard, one given twice, shards of
/// another run, `top` above what a shard kept, a row whose id is not the shard's.
pub fn run(files: &[PathBuf], top: usize) -> Result<(Vec<String>, Vec<Vec<String>>)> {
    if files.is_empty() {
        return Err(Error::config("shards", "no shard files given"));
    }
    let mut union = Union::default();
    for (fi, f) in files.iter().enumerate() {
        let (mp, m) = finished_manifest(f)?;
        if let Some((p0, m0)) = &union.first {
            same_run(&mp, &m, p0, m0)?;
        }
        union.add(files, fi, m, top)?;
    }
    let (p0, m0) = union.complete()?;
    let mut rows = union.rows;
    rows.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    rows.truncate(m0.joint.map_or(top, |j| j.candidates));
    let header = union.header.unwrap_or_default();
    match m0.joint {
        None => Ok((header, rows.into_iter().map(|r| r.2).collect())),
        Some(joint) => merged_picks(&p0, &joint, header, rows, top),
    }
}

/// The union of the shards read so far: the first's file and manifest, which file each shard
/// index came from, the columns, every row with its key and position, where each item's row
/// was read (file, line) by position and by id (a row given twice names both places), and
/// the items the manifests count.
#[derive(Default)]
struct Union {
    first: Option<(PathBuf, Manifest)>,
    seen: BTreeMap<usize, PathBuf>,
    header: Option<Vec<String>>,
    rows: Vec<(f64, usize, Vec<String>)>,
    at_index: HashMap<usize, (usize, usize)>,
    at_id: HashMap<String, (usize, usize)>,
    items: usize,
}

impl Union {
    /// Adds shard `files[fi]` whose manifest is `m`: not a shard seen before, keeping at least
    /// `top` rows, its columns the first's, as many rows as its manifest promises.
    fn add(&mut self, files: &[PathBuf], fi: usize, m: Manifest, top: usize) -> Result<()> {
        let f = &files[fi];
        if let Some(prev) = self.seen.insert(m.shard.index, f.clone()) {
            return Err(Error::state(
                f,
                format!("shard {} is also {}", m.shard.index, prev.display()),
            ));
        }
        if m.top.is_some_and(|k| k < top) {
            return Err(Error::config(
                "top",
                format!(
                    "{top} rows asked for, but {} kept its best {} only",
                    f.display(),
                    m.top.unwrap_or(0)
                ),
            ));
        }
        self.items += m.items;
        let (h, body) = crate::data::source::read_csv(f)?;
        self.check_header(f, &h)?;
        let expect = m.top.map_or(m.items, |k| k.min(m.items));
        if body.len() != expect {
            return Err(Error::state(
                f,
                format!("{} rows; its manifest promises {expect}", body.len()),
            ));
        }
        for (line, r) in body {
            self.add_row(files, fi, &m, line, r)?;
        }
        if self.first.is_none() {
            self.first = Some((f.clone(), m));
        }
        Ok(())
    }

    /// A shard file's header `h`: `index,id,<scorers>,key`, the columns the first's.
    fn check_header(&mut self, f: &Path, h: &[String]) -> Result<()> {
        if h.len() < 4
            || h[0] != "index"
            || h[1] != "id"
            || h.last().map(String::as_str) != Some("key")
        {
            return Err(Error::Row {
                path: f.to_path_buf(),
                row: 1,
                problem: "expected the header index,id,<scorers>,key of a shard file".into(),
            });
        }
        let cols = h[..h.len() - 1].to_vec();
        match &self.header {
            Some(h0) if *h0 != cols => Err(Error::Row {
                path: f.to_path_buf(),
                row: 1,
                problem: format!("columns {cols:?} differ from {h0:?}"),
            }),
            _ => {
                self.header = Some(cols);
                Ok(())
            }
        }
    }

    /// Row `r` at `line` of shard `files[fi]` (manifest `m`): an item of the pool in this
    /// shard, with a numeric key, not given before by position or id.
    fn add_row(
        &mut self,
        files: &[PathBuf],
        fi: usize,
        m: &Manifest,
        line: usize,
        mut r: Vec<String>,
    ) -> Result<()> {
        let bad = |p: String| Error::Row {
            path: files[fi].clone(),
            row: line,
            problem: p,
        };
        let index: usize = r[0].parse().map_err(|_| bad(format!("index `{}`", r[0])))?;
        if index >= m.pool || !m.shard.holds(&r[1]) {
            return Err(bad(format!(
                "item {index} `{}` is not in shard {}",
                r[1], m.shard.index
            )));
        }
        let key: f64 = r
            .pop()
            .and_then(|k| k.parse().ok())
            .filter(|k: &f64| !k.is_nan())
            .ok_or_else(|| bad("the key is not a number".into()))?;
        if let Some((pf, pl)) = self.at_index.insert(index, (fi, line)) {
            return Err(bad(format!(
                "item {index} `{}` is also at {}:{pl}",
                r[1],
                files[pf].display()
            )));
        }
        if let Some((pf, pl)) = self.at_id.insert(r[1].clone(), (fi, line)) {
            return Err(bad(format!(
                "id `{}` is also at {}:{pl}",
                r[1],
                files[pf].display()
            )));
        }
        self.rows.push((key, index, r));
        Ok(())
    }

    /// The first shard's file and manifest, once every shard of the run is given and they
    /// hold the pool's items.
    fn complete(&mut self) -> Result<(PathBuf, Manifest)> {
        let (p0, m0) = self
            .first
            .take()
            .ok_or_else(|| Error::config("shards", "no shard files given"))?;
        if self.seen.len() != m0.shard.count {
            let missing: Vec<usize> = (0..m0.shard.count)
                .filter(|i| !self.seen.contains_key(i))
                .collect();
            return Err(Error::state(
                &p0,
                format!(
                    "{} of {} shards given; missing {missing:?}",
                    self.seen.len(),
                    m0.shard.count
                ),
            ));
        }
        if self.items != m0.pool {
            return Err(Error::state(
                &p0,
                format!("the shards hold {} items, the pool {}", self.items, m0.pool),
            ));
        }
        Ok((p0, m0))
    }
}

/// The manifest of shard file `f`, which must have finished (its manifest written last), and
/// the manifest's path.
fn finished_manifest(f: &Path) -> Result<(PathBuf, Manifest)> {
    let mp = manifest_path(f);
    if !mp.is_file() {
        return Err(Error::state(
            f,
            format!(
                "no manifest {}: the shard did not finish (run it again)",
                mp.display()
            ),
        ));
    }
    let m = read_manifest(&mp)?;
    Shard::new(m.shard.index, m.shard.count, "shard")
        .map_err(|e| Error::state(&mp, e.to_string()))?;
    Ok((mp, m))
}

/// Refuses shard manifest `mp` (`m`) when it is not of the run of the first shard `p0`
/// (`m0`): its shards, pool, batch, settings, or checkpoint's or pool's content differ.
fn same_run(mp: &Path, m: &Manifest, p0: &Path, m0: &Manifest) -> Result<()> {
    let differs = if m.shard.count != m0.shard.count {
        Some("the number of shards")
    } else if m.pool != m0.pool {
        Some("the pool size")
    } else if m.top != m0.top {
        Some("the batch size (setting `top`)")
    } else if m.run != m0.run || m.joint != m0.joint {
        Some("the data, checkpoint, scorers, selection or seed")
    } else {
        None
    };
    if let Some(what) = differs {
        return Err(Error::state(
            mp,
            format!("{what} differs from {}'s", p0.display()),
        ));
    }
    content_agrees(mp, m, p0, m0)
}

/// BatchBALD's picks from the merged best candidates `rows`, whose draw columns end each row
/// (checked against the first shard `p0`'s `header`): rows `index,id,<score>` in the order
/// picked.
fn merged_picks(
    p0: &Path,
    joint: &Joint,
    mut header: Vec<String>,
    rows: Vec<(f64, usize, Vec<String>)>,
    top: usize,
) -> Result<(Vec<String>, Vec<Vec<String>>)> {
    let w = joint.draws * joint.classes;
    if header.len() < 2 + w || header[header.len() - w..] != joint.columns()[..] {
        return Err(Error::Row {
            path: p0.to_path_buf(),
            row: 1,
            problem: "a joint choice's shard file needs its draw columns p<s>_<c>".into(),
        });
    }
    header.truncate(header.len() - w);
    let cands = rows
        .into_iter()
        .map(|(key, index, mut r)| {
            let draws = r
                .split_off(r.len() - w)
                .iter()
                .map(|v| v.parse::<f32>().ok().filter(|p| p.is_finite()))
                .collect::<Option<Vec<f32>>>()
                .ok_or_else(|| {
                    Error::state(p0, format!("item {index}: a draw is not a finite number"))
                })?;
            Ok(Candidate {
                index,
                key,
                fields: r,
                draws,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let picks = joint_pick(cands, joint, top, BatchBald::DEFAULT_CONFIGS)?;
    Ok((header, picks.into_iter().map(|c| c.fields).collect()))
}

/// Refuses shard `mp` (manifest `m`) when its checkpoint's or pool's content differs from
/// that of the first shard `p0` (manifest `m0`): the paths and settings agreed, the files did
/// not (a checkpoint retrained in place, a pool rewritten in place with as many items).
fn content_agrees(mp: &Path, m: &Manifest, p0: &Path, m0: &Manifest) -> Result<()> {
    let differs = |what: &str, hash: &str, mine: &str, first: &str, redo: &str| {
        Error::state(
            mp,
            format!(
                "the {what}'s content ({hash} {mine}) differs from {}'s ({first}): it \
                 changed between the shards' runs; score every shard again {redo}",
                p0.display()
            ),
        )
    };
    if m.checkpoint_hash != m0.checkpoint_hash {
        return Err(differs(
            "checkpoint",
            "hash",
            &m.checkpoint_hash,
            &m0.checkpoint_hash,
            "with one checkpoint",
        ));
    }
    if m.pool_fingerprint != m0.pool_fingerprint {
        return Err(differs(
            "pool",
            "fingerprint",
            &m.pool_fingerprint,
            &m0.pool_fingerprint,
            "on one pool",
        ));
    }
    Ok(())
}
