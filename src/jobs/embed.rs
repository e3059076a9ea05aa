//! A frozen backbone's embeddings of a data source (`alkit embed`, and `curve --backbone`
//! through [`cached`]): every item of the pool and of the test split through the backbone's
//! penultimate layer ([`crate::predict::features_of`]), written as an embedding file
//! (docs/data.md) that a head then trains on each cycle.
//!
//! The pool is read and embedded a chunk at a time (memory follows the chunk, not the pool),
//! its features appended to a work folder beside the output with the progress after each
//! chunk, so a run killed part-way resumes where the last chunk ended and writes the same
//! bytes (batches run at their full size, as [`crate::predict::features_of`] runs them, and
//! chunks hold whole batches). The finished file is assembled with its header first and
//! renamed into place. [`cached`] keeps files in a cache folder under a key of the backbone's
//! content hash and the source's name and content hash (its files' bytes): a cached file is
//! reused only while all of them are unchanged, and its own header's record of them is checked
//! before it is.

use crate::data::source::Source;
use crate::data::stream::Items;
use crate::data::{Dataset, Fnv1a};
use crate::error::{Error, Result, ResultExt};
use crate::hub::Hub;
use crate::observe::Observer;
use candle_core::Device;
use serde::{Deserialize, Serialize};
use std::hash::Hasher;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// The version of the files [`cached`] keeps, in its key.
const LAYOUT: &str = "embedding-2";

/// What to embed.
#[derive(Debug, Clone)]
pub struct EmbedJob {
    /// The backbone: any checkpoint [`crate::checkpoint::open`] takes (a folder, a weights
    /// file with its `config.json`, `hf:OWNER/NAME`).
    pub backbone: String,
    /// The data source (`--data`).
    pub data: String,
    /// Items per forward pass (`None`: [`crate::predict::default_batch`]).
    pub batch: Option<usize>,
    /// Items read and embedded between two saves of the progress (rounded up to whole
    /// batches): a killed run loses at most this much work.
    pub chunk: usize,
}

/// An embedding file ready to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Embedded {
    /// The file.
    pub path: PathBuf,
    /// Pool items.
    pub items: usize,
    /// Feature dimension `d`.
    pub dim: usize,
    /// Whether the backbone ran (false: a cached file was reused).
    pub computed: bool,
}

/// What a work folder records after each chunk, and what its file's header records of where
/// it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Progress {
    backbone: String,
    backbone_hash: String,
    data: String,
    stamp: String,
    items: usize,
    dim: usize,
    chunk: usize,
    batch: usize,
    done: usize,
}

/// The default folder of [`cached`]'s files: `$ALKIT_CACHE/embeddings`, else
/// `$XDG_CACHE_HOME/alkit/embeddings`, else `~/.cache/alkit/embeddings`.
pub fn default_cache() -> Result<PathBuf> {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(c) = var("ALKIT_CACHE") {
        return Ok(c.join("embeddings"));
    }
    if let Some(c) = var("XDG_CACHE_HOME") {
        return Ok(c.join("alkit/embeddings"));
    }
    var("HOME")
        .map(|h| h.join(".cache/alkit/embeddings"))
        .ok_or_else(|| {
            Error::config(
                "embed_cache",
                "no cache folder for the embeddings: give one, or set ALKIT_CACHE or HOME",
            )
        })
}

/// What a job on data read through a frozen backbone runs on ([`on_backbone`]).
#[derive(Debug, Clone)]
pub struct OnBackbone {
    /// The embedding file of the data.
    pub data: PathBuf,
    /// The model trained on the features.
    pub model: crate::models::ModelKind,
}

impl EmbedJob {
    /// Every item of `data` through `backbone`, at the default batch and chunk.
    pub fn through(backbone: &str, data: &str) -> Self {
        EmbedJob {
            backbone: backbone.to_string(),
            data: data.to_string(),
            batch: None,
            chunk: crate::data::stream::DEFAULT_CHUNK,
        }
    }
}

/// The rule every front end (a curve, a session, Python) follows for a frozen backbone: the
/// data embedded once into the folder `cache` (else [`default_cache`]) and reused while the
/// backbone and the data files are unchanged, and a head trained on the features: `model`,
/// else `linear`.
pub fn on_backbone(
    job: &EmbedJob,
    cache: Option<&Path>,
    model: Option<crate::models::ModelKind>,
    hub: &Hub,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<OnBackbone> {
    let cache = match cache {
        Some(c) => c.to_path_buf(),
        None => default_cache()?,
    };
    let model = model.unwrap_or_else(|| crate::models::ModelKind::named("linear"));
    let data = cached(job, &cache, hub, device, observer)?.path;
    Ok(OnBackbone { data, model })
}

/// The embedding file of `job` in the folder `cache`, computed (or resumed) only when no
/// finished file of the same backbone content and source files is there.
pub fn cached(
    job: &EmbedJob,
    cache: &Path,
    hub: &Hub,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<Embedded> {
    let backbone_hash = backbone_hash(job, hub, observer)?;
    let stamp = source_stamp(&job.data)?;
    let mut h = Fnv1a::default();
    // The file's layout is part of the key: files of an older layout (no `display`) are
    // embedded anew rather than reused without it.
    for part in [
        LAYOUT,
        job.backbone.as_str(),
        &backbone_hash,
        &job.data,
        &stamp,
    ] {
        h.write(part.as_bytes());
        h.write(&[0]);
    }
    let out = cache.join(format!("{:016x}.safetensors", h.finish()));
    if out.exists() {
        return reuse(&out, &backbone_hash, &stamp);
    }
    embed(job, &out, backbone_hash, stamp, hub, device, observer)
}

/// Embeds `job` into the embedding file `out` (resuming `out`'s work folder when a killed
/// run of the same job left one). An existing `out` is never overwritten.
pub fn run(
    job: &EmbedJob,
    out: &Path,
    hub: &Hub,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<Embedded> {
    if out.exists() {
        return Err(Error::config(
            "out",
            format!(
                "{} exists; embeddings are never written over a file",
                out.display()
            ),
        ));
    }
    crate::fsutil::check_output(
        "out",
        out,
        &[Path::new(&job.data), Path::new(&job.backbone)],
    )?;
    let backbone_hash = backbone_hash(job, hub, observer)?;
    let stamp = source_stamp(&job.data)?;
    embed(job, out, backbone_hash, stamp, hub, device, observer)
}

fn backbone_hash(job: &EmbedJob, hub: &Hub, observer: &mut dyn Observer) -> Result<String> {
    let hash = crate::checkpoint::content_hash(
        std::slice::from_ref(&job.backbone),
        &crate::checkpoint::OpenOptions::default(),
        hub,
        observer,
    )
    .context_with(|| format!("hashing the backbone {}", job.backbone))?;
    Ok(format!("{hash:016x}"))
}

/// A content hash of a source's files: every file under it (a folder's, recursively, in
/// sorted order) as its path below the source, its length and its bytes, read 1 MiB at a
/// time. A file rewritten in place, whatever its size and time, changes it; a folder moved
/// elsewhere whole does not. A Hub name (`hf:OWNER/NAME[@REV]`) stands for itself: pin a
/// revision for a key that follows the data.
fn source_stamp(data: &str) -> Result<String> {
    use std::io::Read;
    let mut h = Fnv1a::default();
    if !data.starts_with("hf:") {
        let root = PathBuf::from(data);
        let mut stack = vec![root.clone()];
        let mut files = Vec::new();
        while let Some(p) = stack.pop() {
            let meta = std::fs::metadata(&p).map_err(|e| Error::io(&p, e))?;
            if meta.is_dir() {
                for e in std::fs::read_dir(&p).map_err(|e| Error::io(&p, e))? {
                    stack.push(e.map_err(|e| Error::io(&p, e))?.path());
                }
            } else {
                files.push(p);
            }
        }
        files.sort();
        let mut buf = vec![0u8; 1 << 20];
        for p in files {
            let rel = p.strip_prefix(&root).unwrap_or(&p);
            h.write(rel.to_string_lossy().as_bytes());
            h.write(&[0]);
            let mut f = std::fs::File::open(&p).map_err(|e| Error::io(&p, e))?;
            let mut len = 0u64;
            loop {
                let n = f.read(&mut buf).map_err(|e| Error::io(&p, e))?;
                if n == 0 {
                    break;
                }
                h.write(&buf[..n]);
                len += n as u64;
            }
            h.write(&len.to_le_bytes());
        }
    } else {
        h.write(data.as_bytes());
    }
    Ok(format!("{:016x}", h.finish()))
}

/// A finished file whose header records the same backbone and source files.
fn reuse(out: &Path, backbone_hash: &str, stamp: &str) -> Result<Embedded> {
    let meta = read_header_metadata(out)?;
    let recorded: Progress = meta
        .get("alkit_embedding")
        .and_then(|v| serde_json::from_str(v).ok())
        .ok_or_else(|| Error::state(out, "a cached embedding file without alkit's record"))?;
    if recorded.backbone_hash != backbone_hash || recorded.stamp != stamp {
        return Err(Error::state(
            out,
            "a cached embedding file of another backbone or source under this one's key: \
             remove it",
        ));
    }
    Ok(Embedded {
        path: out.to_path_buf(),
        items: recorded.items,
        dim: recorded.dim,
        computed: false,
    })
}

fn read_header_metadata(path: &Path) -> Result<std::collections::HashMap<String, String>> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut n8 = [0u8; 8];
    f.read_exact(&mut n8).map_err(|e| Error::io(path, e))?;
    let n = u64::from_le_bytes(n8);
    if n > 100 << 20 {
        return Err(Error::state(path, "a safetensors header over 100 MB"));
    }
    let mut header = vec![0u8; n as usize];
    f.read_exact(&mut header).map_err(|e| Error::io(path, e))?;
    #[derive(Deserialize)]
    struct Header {
        #[serde(rename = "__metadata__", default)]
        metadata: std::collections::HashMap<String, String>,
    }
    let h: Header = serde_json::from_slice(&header)
        .map_err(|e| Error::state(path, format!("not a safetensors header: {e}")))?;
    Ok(h.metadata)
}

/// The work folder of `out`: its features so far and the progress.
fn work_dir(out: &Path) -> PathBuf {
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    out.with_file_name(format!("{name}.partial"))
}

fn embed(
    job: &EmbedJob,
    out: &Path,
    backbone_hash: String,
    stamp: String,
    hub: &Hub,
    device: &Device,
    observer: &mut dyn Observer,
) -> Result<Embedded> {
    if job.chunk == 0 || job.batch == Some(0) {
        return Err(Error::config(
            "chunk",
            "setting `chunk` and setting `batch` must be at least 1",
        ));
    }
    let ck = crate::checkpoint::open(&job.backbone, hub, device, observer)
        .context_with(|| format!("loading the backbone {}", job.backbone))?;
    let source = Source::parse(&job.data).context_with(|| format!("data source {}", job.data))?;
    let loading = || format!("loading the data {}", job.data);
    let pre = ck.config.preprocess;
    let item_values: usize = ck.config.item_shape.iter().product();
    let batch = job
        .batch
        .unwrap_or_else(|| crate::predict::default_batch(item_values));
    crate::limits::batch("batch", batch, item_values)?;
    let chunk = job.chunk.div_ceil(batch).saturating_mul(batch);
    let mut stream =
        crate::data::source::open(&source, hub, observer, pre.as_ref()).context_with(loading)?;
    if stream.item_shape() != ck.config.item_shape {
        return Err(Error::config(
            "backbone",
            format!(
                "{}: items are {:?}, the backbone {} takes {:?}",
                job.data,
                stream.item_shape(),
                job.backbone,
                ck.config.item_shape
            ),
        ));
    }
    let work = work_dir(out);
    std::fs::create_dir_all(&work).map_err(|e| Error::io(&work, e))?;
    let mut progress = Progress {
        backbone: job.backbone.clone(),
        backbone_hash,
        data: job.data.clone(),
        stamp,
        items: stream.len(),
        dim: 0,
        chunk,
        batch,
        done: 0,
    };
    progress.resume(&work.join("progress.json"))?;
    let run = Run {
        ck: &ck,
        work: &work,
        device,
    };
    let ids = run.pool(stream.as_mut(), &mut progress, observer, &loading)?;
    let pool = pool_labels(&source, hub, observer, progress.items).context_with(loading)?;
    let test = test_split(&source, pre.as_ref(), hub, observer).context_with(loading)?;
    let test_features = match &test {
        Some(t) => Some(run.test(t, &job.data, batch, observer)?),
        None => None,
    };
    let written = Written {
        source: &source,
        progress: &progress,
        ids: &ids,
        pool,
        test: test.as_ref().zip(test_features.as_ref()),
    };
    written.write(&work, out)?;
    std::fs::remove_dir_all(&work).map_err(|e| Error::io(&work, e))?;
    Ok(Embedded {
        path: out.to_path_buf(),
        items: progress.items,
        dim: progress.dim,
        computed: true,
    })
}

impl Progress {
    /// This progress, or the one recorded at `path` by an interrupted run of the same job
    /// (its features dimension and items done); the work of another job is refused.
    fn resume(&mut self, path: &Path) -> Result<()> {
        if !path.exists() {
            return Ok(());
        }
        let before: Progress = crate::fsutil::read_json(path)?;
        let same = Progress {
            dim: before.dim,
            done: before.done,
            ..self.clone()
        };
        if before != same {
            return Err(Error::state(
                path,
                "the work of another backbone, source or batching: remove this folder",
            ));
        }
        *self = before;
        Ok(())
    }
}

/// A backbone's pass over a source, its work kept in `work`.
struct Run<'a> {
    ck: &'a crate::checkpoint::Checkpoint,
    work: &'a Path,
    device: &'a Device,
}

impl Run<'_> {
    /// The pool's features appended to `work/features.f32` a chunk at a time after the items
    /// `progress` says are done (work past them is discarded: it may be torn), `progress`
    /// saved after each chunk; every item's id, in order.
    fn pool(
        &self,
        stream: &mut dyn crate::data::stream::ItemStream,
        progress: &mut Progress,
        observer: &mut dyn Observer,
        loading: &dyn Fn() -> String,
    ) -> Result<Vec<String>> {
        let progress_path = self.work.join("progress.json");
        let features_path = self.work.join("features.f32");
        let mut features = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&features_path)
            .map_err(|e| Error::io(&features_path, e))?;
        let kept = (progress.done * progress.dim * 4) as u64;
        features
            .set_len(kept)
            .and_then(|_| features.seek(SeekFrom::Start(kept)).map(|_| ()))
            .map_err(|e| Error::io(&features_path, e))?;
        let mut ids = Vec::with_capacity(progress.items);
        let mut at = 0;
        while let Some(c) = stream.next_chunk(progress.chunk).context_with(loading)? {
            let k = c.ids.len();
            ids.extend(c.ids);
            if at + k <= progress.done {
                at += k;
                continue;
            }
            let raw = Dataset::new(c.x, vec![0; k], self.ck.config.item_shape.clone(), 1)?;
            let f = self.features(&raw, progress.batch, observer)?;
            progress.dim = f.dim();
            let bytes: Vec<u8> = f.as_slice().iter().flat_map(|v| v.to_le_bytes()).collect();
            features
                .write_all(&bytes)
                .and_then(|_| features.sync_data())
                .map_err(|e| Error::io(&features_path, e))?;
            at += k;
            progress.done = at;
            crate::fsutil::write_json(&progress_path, progress)?;
        }
        Ok(ids)
    }

    /// The features of the items `raw` (as stored) through the backbone, normalised first.
    fn features(
        &self,
        raw: &Dataset,
        batch: usize,
        observer: &mut dyn Observer,
    ) -> Result<alkit_acquisition::Features> {
        let ds = self.ck.config.normalizer.apply(raw)?;
        let all: Vec<usize> = (0..ds.len()).collect();
        crate::predict::features_of(
            self.ck.model.as_ref(),
            &ds,
            &all,
            batch,
            self.device,
            observer,
        )
    }

    /// The test split's features; an unlabeled test item is refused.
    fn test(
        &self,
        t: &Items,
        data: &str,
        batch: usize,
        observer: &mut dyn Observer,
    ) -> Result<alkit_acquisition::Features> {
        if let Some(i) = t.labels.iter().position(Option::is_none) {
            return Err(Error::config(
                "data",
                format!("{data}: test item `{}` has no label", t.ids[i]),
            ));
        }
        self.features(&t.dataset()?, batch, observer)
    }
}

/// What the finished embedding file holds beside the pool's features.
struct Written<'a> {
    source: &'a Source,
    progress: &'a Progress,
    ids: &'a [String],
    /// The pool's labels (when every item has one) and class names.
    pool: (Option<Vec<u32>>, Vec<String>),
    test: Option<(&'a Items, &'a alkit_acquisition::Features)>,
}

impl Written<'_> {
    /// The embedding file assembled from `work/features.f32` and the rest, written to `out`.
    fn write(&self, work: &Path, out: &Path) -> Result<()> {
        let (items, progress) = (self.progress.items, self.progress);
        let progress_path = work.join("progress.json");
        let record = serde_json::to_string(progress)
            .map_err(|e| Error::state(&progress_path, format!("cannot serialise: {e}")))?;
        let mut file = EmbeddingFile::new(&work.join("features.f32"), items, progress.dim)?;
        if let Some(labels) = &self.pool.0 {
            file.tensor("labels", "I64", vec![items], i64_bytes(labels));
        }
        if let Some((t, f)) = self.test {
            let bytes: Vec<u8> = f.as_slice().iter().flat_map(|v| v.to_le_bytes()).collect();
            file.tensor("test_features", "F32", vec![t.len(), f.dim()], bytes);
            let labels: Vec<u32> = t.labels.iter().map(|l| l.unwrap_or(0)).collect();
            file.tensor("test_labels", "I64", vec![t.len()], i64_bytes(&labels));
        }
        file.meta("classes", self.pool.1.join(","));
        file.meta(
            "ids",
            serde_json::to_string(self.ids).map_err(|e| Error::state(out, format!("ids: {e}")))?,
        );
        // An image folder's items are shown as its own files (a session on the embeddings
        // shows the photos a person labels, not the features). The ids are the images' paths
        // below the folder, so the folder alone names them all.
        if let Source::Images(dir) = self.source {
            let dir = std::fs::canonicalize(dir).map_err(|e| Error::io(dir, e))?;
            file.meta("display_kind", "image".to_string());
            file.meta("display_root", dir.to_string_lossy().into_owned());
        }
        file.meta("alkit_embedding", record);
        file.write(out)
    }
}

/// Every pool item's label when every item has one (an embedding file's `labels` labels all
/// or none), and the class names.
fn pool_labels(
    source: &Source,
    hub: &Hub,
    observer: &mut dyn Observer,
    items: usize,
) -> Result<(Option<Vec<u32>>, Vec<String>)> {
    let pl = match crate::data::source::pool_labels(source, hub, observer) {
        Ok(pl) => pl,
        // A CSV file keeps its labels beside its values: read whole (no backbone involved).
        Err(_) => {
            let loaded = crate::data::source::load(source, hub, observer, None)?;
            crate::data::stream::PoolLabels {
                labels: loaded.pool.labels,
                classes: loaded.pool.classes,
            }
        }
    };
    if pl.labels.len() != items {
        return Err(Error::config(
            "data",
            format!("{} labels for {items} items", pl.labels.len()),
        ));
    }
    let all: Option<Vec<u32>> = pl.labels.iter().copied().collect();
    Ok((all, pl.classes))
}

/// The test split through the backbone's preprocessing.
fn test_split(
    source: &Source,
    pre: Option<&crate::data::image::Preprocess>,
    hub: &Hub,
    observer: &mut dyn Observer,
) -> Result<Option<Items>> {
    match pre {
        None => crate::data::source::load_test(source, hub, observer),
        Some(p) => Ok(crate::data::source::load(source, hub, observer, Some(p))?.test),
    }
}

fn i64_bytes(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|&l| i64::from(l).to_le_bytes()).collect()
}

/// A safetensors file written with its pool features copied from the work folder's file, so
/// the pool is never held in memory: the header (tensor offsets and the metadata) first, then
/// the data in the header's order.
struct EmbeddingFile {
    features: PathBuf,
    items: usize,
    dim: usize,
    rest: Vec<(String, &'static str, Vec<usize>, Vec<u8>)>,
    meta: std::collections::BTreeMap<String, String>,
}

impl EmbeddingFile {
    fn new(features: &Path, items: usize, dim: usize) -> Result<Self> {
        let len = std::fs::metadata(features)
            .map_err(|e| Error::io(features, e))?
            .len();
        if len != (items * dim * 4) as u64 {
            return Err(Error::state(
                features,
                format!("holds {len} bytes for {items} items of {dim} features"),
            ));
        }
        Ok(Self {
            features: features.to_path_buf(),
            items,
            dim,
            rest: Vec::new(),
            meta: Default::default(),
        })
    }

    fn tensor(&mut self, name: &str, dtype: &'static str, shape: Vec<usize>, bytes: Vec<u8>) {
        self.rest.push((name.to_string(), dtype, shape, bytes));
    }

    fn meta(&mut self, key: &str, value: String) {
        self.meta.insert(key.to_string(), value);
    }

    /// Writes the file to a temporary name beside `out`, synced, then renames it.
    fn write(self, out: &Path) -> Result<()> {
        let mut header = serde_json::Map::new();
        header.insert(
            "__metadata__".into(),
            serde_json::to_value(&self.meta).unwrap_or_default(),
        );
        let mut at = (self.items * self.dim * 4) as u64;
        header.insert(
            "features".into(),
            serde_json::json!({"dtype": "F32", "shape": [self.items, self.dim], "data_offsets": [0, at]}),
        );
        for (name, dtype, shape, bytes) in &self.rest {
            let end = at + bytes.len() as u64;
            header.insert(
                name.clone(),
                serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [at, end]}),
            );
            at = end;
        }
        let mut text = serde_json::to_vec(&header)
            .map_err(|e| Error::state(out, format!("cannot serialise the header: {e}")))?;
        // The data section starts 8-byte aligned, as safetensors' own writer aligns it.
        while (text.len() + 8) % 8 != 0 {
            text.push(b' ');
        }
        let tmp = work_dir(out).join("assembled.safetensors");
        let result = (|| -> std::io::Result<()> {
            let mut f = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
            f.write_all(&(text.len() as u64).to_le_bytes())?;
            f.write_all(&text)?;
            std::io::copy(&mut std::fs::File::open(&self.features)?, &mut f)?;
            for (_, _, _, bytes) in &self.rest {
                f.write_all(bytes)?;
            }
            f.into_inner()?.sync_all()?;
            std::fs::rename(&tmp, out)
        })();
        result.map_err(|e| Error::io(out, e))
    }
}
