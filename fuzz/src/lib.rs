//! The fuzz targets' bodies, one function per target, and their set-up: a private scratch
//! folder per process (the loaders read files, so each input is written where they expect it)
//! and a tiny checkpoint to load. The test suite includes this file too
//! (`tests/alkit/fuzz_corpora.rs`) and replays every corpus input through the same functions,
//! so what the fuzzers reached stays checked in CI. Each function must return normally on any
//! input: an `Err` from alkit is the expected answer to garbage, a panic is the bug.

use std::io::Write;
use std::path::{Path, PathBuf};

/// Once per process: panics that alkit turns into errors (`alkit::error::contain`, around
/// third-party decoders) are handled behaviour, so the panic hook in place (libFuzzer's, which
/// aborts) only sees the others.
fn init() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(alkit::error::quiet_contained_panics);
}

/// A per-process folder under `/dev/shm` (memory-backed) or the temp dir, created once.
pub fn scratch() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let base = Path::new("/dev/shm");
        let base = if base.is_dir() {
            base.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("alkit-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch folder");
        dir
    })
}

/// Writes `bytes` to `name` inside the scratch folder and returns its path.
pub fn put(name: &str, bytes: &[u8]) -> PathBuf {
    let p = scratch().join(name);
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).expect("scratch subfolder");
    }
    std::fs::write(&p, bytes).expect("scratch write");
    p
}

/// A checkpoint folder holding a 4-input, 3-class MLP with one hidden layer of 5, saved by
/// alkit itself: the fuzz targets replace one of its two files.
pub fn tiny_checkpoint(dir: &Path) -> alkit::checkpoint::CheckpointConfig {
    use alkit::models::Arch;
    use alkit::nn::MlpConfig;
    use alkit::train::ModelBuilder;
    let arch = Arch::Mlp(MlpConfig {
        inputs: 4,
        hidden: vec![5],
        classes: 3,
        dropout: 0.0,
    });
    let (vb, params) = alkit::nn::init::seeded(
        alkit::rng::stream(0, alkit::rng::Purpose::Tool, 0),
        candle_core::DType::F32,
        &candle_core::Device::Cpu,
    );
    arch.build(vb).expect("tiny MLP builds");
    // Tabular items `(4,)`: one statistic per feature.
    let normalizer = alkit::data::Normalizer {
        mean: vec![0.5; 4],
        std: vec![0.25; 4],
    };
    alkit::checkpoint::save(
        dir,
        &arch,
        &params,
        &normalizer,
        &[4],
        vec!["a".into(), "b".into(), "c".into()],
    )
    .expect("tiny checkpoint saves")
}

/// A target's body: takes any bytes, must return normally.
pub type Target = fn(&[u8]);

/// Every target by name, as `fuzz/fuzz_targets/NAME.rs` runs it.
pub const TARGETS: &[(&str, Target)] = &[
    ("idx", idx),
    ("image", image),
    ("safetensors_pool", safetensors_pool),
    ("npy_pool", npy_pool),
    ("npz_pool", npz_pool),
    ("csv_pool", csv_pool),
    ("labels", labels),
    ("metrics", metrics),
    ("parquet", parquet),
    ("checkpoint_config", checkpoint_config),
    ("checkpoint_weights", checkpoint_weights),
    ("pytorch_weights", pytorch_weights),
    ("session_json", session_json),
    ("run_json", run_json),
    ("hf_name", hf_name),
    ("onnx_model", onnx_model),
    ("label_studio_export", label_studio_export),
    ("backend_request", backend_request),
];

/// IDX image and label files, plain and gzip. The first byte picks the reader and whether the
/// rest is gzip-compressed first (so the fuzzer reaches the inflation bound without having to
/// discover deflate); any other first byte reads the bytes as they are.
pub fn idx(data: &[u8]) {
    init();
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let bytes = if mode & 2 != 0 {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(rest).expect("in memory");
        e.finish().expect("in memory")
    } else {
        rest.to_vec()
    };
    let p = put("data", &bytes);
    if mode & 1 == 0 {
        let _ = alkit::data::idx::read_images(&p);
    } else {
        let _ = alkit::data::idx::read_labels(&p);
    }
}

/// PNG and JPEG decoding, with the size limits checked before decoding; the header-only
/// read (size and channels, which plan a pool before any image is decoded) must agree with
/// the decoder, and every preprocessing of a photo must hold.
pub fn image(data: &[u8]) {
    init();
    let path = std::path::Path::new("fuzz.png");
    let head = alkit::data::image::header(data, path);
    if let Ok(img) = alkit::data::image::decode(data, path) {
        let head = head.expect("a decodable image has a readable header");
        assert_eq!(
            (head.height, head.width, head.channels),
            (img.height, img.width, img.channels)
        );
        if img.height * img.width <= 1 << 16 {
            use alkit::data::image::{CropMode, Filter, Preprocess};
            let side = 1 + data.len() % 40;
            let pre = Preprocess {
                size: side,
                resize: side + data.len() % 7,
                mode: [CropMode::Center, CropMode::Squash][data.len() % 2],
                filter: [Filter::Bilinear, Filter::Bicubic, Filter::Lanczos][data.len() % 3],
                channels: 3,
            };
            let fit = img.preprocess(&pre, path).expect("a decoded image fits");
            assert_eq!(fit.pixels.len(), 3 * side * side);
        }
    }
}

/// Loads `source` whole, and streams it in chunks of 3 with its test split read alone (what a
/// streamed run reads): both must fail, or give the same ids and values bit for bit, and the
/// same test split. (The error messages may differ: the stream finds some problems in another
/// order, e.g. a corrupt image before a skipped label class.)
fn streams_as_loaded(source: &alkit::data::Source) {
    let hub = alkit::hub::Hub::new(scratch().join("hub"), true);
    let whole = alkit::data::source::load(source, &hub, &mut alkit::observe::Silent, None);
    let streamed = alkit::data::source::open(source, &hub, &mut alkit::observe::Silent, None)
        .and_then(|mut st| {
            let (mut ids, mut x) = (Vec::new(), Vec::new());
            while let Some(c) = st.next_chunk(3)? {
                ids.extend(c.ids);
                x.extend(c.x);
            }
            Ok((ids, x, st.item_shape().to_vec()))
        })
        .and_then(|pool| {
            let test = alkit::data::source::load_test(source, &hub, &mut alkit::observe::Silent)?;
            Ok((pool, test))
        });
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    match (whole, streamed) {
        (Ok(w), Ok(((ids, x, shape), test))) => {
            assert_eq!(w.pool.ids, ids);
            assert_eq!(w.pool.item_shape, shape);
            assert!(bits(&w.pool.x) == bits(&x), "streamed values differ");
            match (&w.test, &test) {
                (None, None) => {}
                (Some(a), Some(b)) => {
                    assert_eq!(
                        (&a.ids, &a.labels, &a.classes),
                        (&b.ids, &b.labels, &b.classes)
                    );
                    assert!(
                        bits(&a.x) == bits(&b.x),
                        "the test split read alone differs"
                    );
                }
                (a, b) => panic!("test split whole {}, alone {}", a.is_some(), b.is_some()),
            }
        }
        (Err(_), Err(_)) => {}
        (w, s) => panic!(
            "whole {:?}, streamed {:?}",
            w.map(|_| "ok"),
            s.map(|_| "ok")
        ),
    }
}

/// A safetensors pool (`x`, optional `y`, optional `classes` metadata), whole and streamed.
pub fn safetensors_pool(data: &[u8]) {
    init();
    let p = put("pool.safetensors", data);
    streams_as_loaded(&alkit::data::Source::Safetensors(p));
}

/// An `.npy` embedding pool (one `(n, d)` float array), whole and streamed.
pub fn npy_pool(data: &[u8]) {
    init();
    let p = put("pool.npy", data);
    streams_as_loaded(&alkit::data::Source::Npy(p));
}

/// An `.npz` embedding file (`features`, `labels`, `ids`, `classes`, a test split; stored or
/// deflated members), whole and streamed.
pub fn npz_pool(data: &[u8]) {
    init();
    let p = put("pool.npz", data);
    streams_as_loaded(&alkit::data::Source::Npz(p));
}

/// A CSV pool (`id`, `label` and feature columns), whole and streamed.
pub fn csv_pool(data: &[u8]) {
    init();
    let p = put("pool.csv", data);
    streams_as_loaded(&alkit::data::Source::Csv(p));
}

/// Files of answers and indices: `teach`'s and `init --labels`' `id,label` CSV, and the index
/// lists of `score --indices`.
pub fn labels(data: &[u8]) {
    init();
    let p = put("labels.csv", data);
    let _ = alkit::session::read_answer_csv(&p);
    let _ = alkit::data::source::read_indices(&p, 1000);
}

/// A scores file given to `alkit metrics`: read, then every metric its columns allow.
pub fn metrics(data: &[u8]) {
    init();
    let p = put("scores.csv", data);
    if let Ok(f) = alkit::jobs::scores_file::ScoresFile::read(&p) {
        let _ = f.metrics();
    }
}

/// A Parquet pool (image bytes and labels, or a list column of embeddings): the Parquet
/// reader, then PNG/JPEG decoding of every row or the embedding checks, whole and streamed.
pub fn parquet(data: &[u8]) {
    init();
    let p = put("pool.parquet", data);
    streams_as_loaded(&alkit::data::Source::Parquet(p));
}

/// A checkpoint's `config.json` beside valid weights (a tiny MLP): loaded, and when it loads,
/// run on one item of the shape it declares (bounded, so that a declared shape cannot make the
/// target itself allocate).
pub fn checkpoint_config(data: &[u8]) {
    init();
    let dir = scratch().join("ckpt-c");
    if !dir.join("model.safetensors").is_file() {
        tiny_checkpoint(&dir);
    }
    std::fs::write(dir.join("config.json"), data).expect("scratch write");
    if let Ok(ck) = alkit::checkpoint::load(&dir, &candle_core::Device::Cpu) {
        let shape = ck.config.item_shape.clone();
        let n: usize = shape.iter().product();
        if n > 0 && n <= 1 << 16 {
            let mut dims = vec![1];
            dims.extend(shape);
            let x = candle_core::Tensor::zeros(
                dims,
                candle_core::DType::F32,
                &candle_core::Device::Cpu,
            )
            .expect("zeros");
            let _ = ck.model.predict(&x);
        }
    }
}

/// A checkpoint's `model.safetensors` beside a valid `config.json` (a tiny MLP): loaded, and
/// when it loads, run on one item.
pub fn checkpoint_weights(data: &[u8]) {
    init();
    let dir = scratch().join("ckpt-w");
    if !dir.join("config.json").is_file() {
        tiny_checkpoint(&dir);
    }
    std::fs::write(dir.join("model.safetensors"), data).expect("scratch write");
    if let Ok(ck) = alkit::checkpoint::load(&dir, &candle_core::Device::Cpu) {
        let x =
            candle_core::Tensor::zeros((1, 4), candle_core::DType::F32, &candle_core::Device::Cpu)
                .expect("zeros");
        let _ = ck.model.predict(&x);
    }
}

/// A PyTorch weights file (`torch.save`'s zip archive or legacy format), read to tensors.
pub fn pytorch_weights(data: &[u8]) {
    init();
    let p = put("weights.pth", data);
    let _ = alkit::checkpoint::pytorch::read(&p);
}

/// An ONNX model file read as far as alkit reads a graph before ONNX Runtime sees it
/// (`checkpoint::onnx::outline`: outputs, the last layer's weights decoded, external data
/// locations checked), beside a fixed 4 KiB `model.onnx.data` whose ranges the input may
/// name. Without the `onnx` feature there is no reader to feed.
pub fn onnx_model(data: &[u8]) {
    init();
    #[cfg(feature = "onnx")]
    {
        let dir = scratch().join("onnx");
        let ext = dir.join("model.onnx.data");
        if !ext.is_file() {
            std::fs::create_dir_all(&dir).expect("scratch subfolder");
            let values: Vec<u8> = (0..4096u32).map(|i| (i * 37 % 251) as u8).collect();
            std::fs::write(&ext, values).expect("scratch write");
        }
        let p = dir.join("model.onnx");
        std::fs::write(&p, data).expect("scratch write");
        let _ = alkit::checkpoint::onnx::outline(&p);
    }
    #[cfg(not(feature = "onnx"))]
    let _ = data;
}

/// A session's `session.json`, resumed over a fixed 6-item CSV pool.
pub fn session_json(data: &[u8]) {
    init();
    let dir = scratch().join("session");
    let pool = put(
        "session-pool.csv",
        b"id,label,a,b\np0,cat,0.1,0.2\np1,dog,0.3,0.1\np2,,0.5,0.5\np3,,0.9,0.1\np4,,0.2,0.8\np5,,0.4,0.4\n",
    );
    let hub = alkit::hub::Hub::new(scratch().join("hub"), true);
    let csv = alkit::data::Source::Csv(pool);
    let items = alkit::data::source::load(&csv, &hub, &mut alkit::observe::Silent, None)
        .expect("fixed pool")
        .pool;
    std::fs::create_dir_all(&dir).expect("scratch");
    std::fs::write(dir.join(alkit::session::STATE_FILE), data).expect("scratch write");
    let loaded = alkit::data::Loaded {
        pool: items,
        test: None,
    };
    let _ = alkit::session::Learner::load(&dir, loaded);
}

/// A curve run's `runs/*.json` state: parsed, then checked for consistency as on resume.
pub fn run_json(data: &[u8]) {
    init();
    let p = put("run-state.json", data);
    if let Ok(state) = serde_json::from_slice::<alkit::acquire::RunState>(data) {
        let _ = state.check_consistent(&p);
    }
    let _ = serde_json::from_slice::<alkit::jobs::curve::CurveSpec>(data);
}

/// The `hf:OWNER/NAME[@REV]` parser and the offline cache lookup it feeds: whatever the name,
/// a path the cache returns lies inside the cache.
pub fn hf_name(data: &[u8]) {
    init();
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let _ = alkit::data::Source::parse(&format!("hf:{s}"));
    if let Ok(repo) = alkit::hub::HubRepo::parse(s) {
        let cache = scratch().join("hub-cache");
        let hub = alkit::hub::Hub::new(&cache, true);
        for kind in [alkit::hub::RepoKind::Model, alkit::hub::RepoKind::Dataset] {
            if let Ok(p) = hub.get(&repo, kind, "config.json", &mut alkit::observe::Silent) {
                assert!(p.starts_with(&cache), "{} escapes the cache", p.display());
            }
            let _ = hub.files(&repo, kind);
        }
    }
}

/// A Label Studio export or answer file taught back (`alkit teach`), as JSON, CSV and TSV, with
/// tasks matched by `alkit_id` or by an image path of a fixed pool (`photos/<n>.png`); then
/// the same bytes as a whole project's JSON export read by the ML backend.
pub fn label_studio_export(data: &[u8]) {
    init();
    let namer = |url: &str| -> Option<String> {
        let (path, query) = alkit::label_studio::image_path::split_url(url);
        let d = alkit::label_studio::image_path::query_param(query, "d");
        let p = d.unwrap_or_else(|| path.to_string());
        let name = p.rsplit('/').next()?;
        name.strip_suffix(".png")
            .filter(|n| n.len() <= 3 && n.bytes().all(|b| b.is_ascii_digit()))
            .map(|n| format!("photos/{n}.png"))
    };
    for name in ["export.json", "export.csv", "export.tsv"] {
        let p = put(name, data);
        let _ = alkit::label_studio::read_export(&p);
        let _ = alkit::label_studio::read_export_with(&p, Some(&namer));
    }
    if let Ok(serde_json::Value::Array(tasks)) = serde_json::from_slice(data) {
        let _ = alkit::label_studio::export::project_answers(&tasks, Some(&namer));
    }
}

/// A request body Label Studio sends the ML backend (`/setup`, `/predict`, `/webhook`,
/// `/train`), read as the backend reads each; what a webhook's annotation chose.
pub fn backend_request(data: &[u8]) {
    init();
    use alkit::serve::backend::requests::{Predict, Setup, Train, Webhook};
    let _ = serde_json::from_slice::<Setup>(data);
    let _ = serde_json::from_slice::<Predict>(data);
    let _ = serde_json::from_slice::<Train>(data);
    if let Ok(w) = serde_json::from_slice::<Webhook>(data) {
        for (_, a) in w.pairs() {
            let _ = a.choice();
        }
    }
}
