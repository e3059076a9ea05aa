//! The bad-input table: every source kind, checkpoints, sessions, runs, metrics files and
//! flags, each case a hostile or broken input run through the real binary. Each asserts the
//! exit code, that stderr names the culprit (file, line, item, tensor or flag), and that no
//! file was written or changed anywhere under the case's folder or the shared fixtures. The
//! fuzzers' finds (fuzz/README.md) become rows here.

use super::*;
use std::collections::BTreeMap;

/// Shared inputs, built once: a copy of the shipped data, a 2-step MLP checkpoint, a labeling
/// session on a six-item CSV pool, and a finished one-cycle curve run.
struct Fx {
    root: PathBuf,
}

impl Fx {
    fn data(&self) -> PathBuf {
        self.root.join("data")
    }
    fn ck(&self) -> PathBuf {
        self.root.join("ck")
    }
    fn sess(&self) -> PathBuf {
        self.root.join("sess")
    }
    fn pool(&self) -> PathBuf {
        self.root.join("pool.csv")
    }
    fn run(&self) -> PathBuf {
        self.root.join("run")
    }
}

const POOL: &str = "id,label,a,b\np0,cat,0.1,0.2\np1,dog,0.3,0.1\np2,,0.5,0.5\np3,,0.9,0.1\np4,,0.2,0.8\np5,,0.4,0.4\n";

fn ok(args: &[&str]) {
    let o = alkit_cmd().arg("-q").args(args).output().unwrap();
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Every file under `root` with its bytes, but for session lock files: an empty file a
/// session command may create to hold the folder (`alkit::session::lock`).
fn snapshot(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn go(dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.file_name() == Some(std::ffi::OsStr::new(alkit::session::LOCK_FILE)) {
                continue;
            }
            if p.is_dir() {
                out.insert(p.clone(), b"<folder>".to_vec());
                go(&p, out);
            } else {
                out.insert(p.clone(), std::fs::read(&p).unwrap_or_default());
            }
        }
    }
    let mut m = BTreeMap::new();
    go(root, &mut m);
    m
}

fn edit_json(path: &Path, f: impl FnOnce(&mut serde_json::Value)) {
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

/// A safetensors file: `(name, dtype, shape, bytes)` per tensor, optional metadata.
fn st(tensors: &[(&str, &str, &[usize], Vec<u8>)], meta: Option<(&str, &str)>) -> Vec<u8> {
    st_meta(tensors, meta.as_slice())
}

/// A safetensors file with the metadata `meta` (key, value pairs).
fn st_meta(tensors: &[(&str, &str, &[usize], Vec<u8>)], meta: &[(&str, &str)]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (name, dtype, shape, bytes) in tensors {
        header.insert(
            name.to_string(),
            serde_json::json!({"dtype": dtype, "shape": shape,
                "data_offsets": [data.len(), data.len() + bytes.len()]}),
        );
        data.extend_from_slice(bytes);
    }
    if !meta.is_empty() {
        let m: serde_json::Map<String, serde_json::Value> = meta
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::json!(v)))
            .collect();
        header.insert("__metadata__".into(), serde_json::Value::Object(m));
    }
    let mut h = serde_json::to_vec(&header).unwrap();
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend(h);
    out.extend(data);
    out
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn i64s(v: &[i64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A two-item pool `x (2, 4)` with labels `y`.
fn st_pool(y: &[i64]) -> Vec<u8> {
    st(
        &[
            ("x", "F32", &[y.len(), 4], f32s(&vec![0.5; 4 * y.len()])),
            ("y", "I64", &[y.len()], i64s(y)),
        ],
        None,
    )
}

/// An `.npy` file (format 1.0) of dtype `descr`, shape text `shape` (`(4, 3)`) and `data`.
fn npy(descr: &str, shape: &str, data: &[u8]) -> Vec<u8> {
    let mut h = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    while (10 + h.len() + 1) % 64 != 0 {
        h.push(' ');
    }
    h.push('\n');
    let mut b = b"\x93NUMPY\x01\x00".to_vec();
    b.extend((h.len() as u16).to_le_bytes());
    b.extend(h.as_bytes());
    b.extend(data);
    b
}

/// An `.npz` file of stored members `(NAME.npy, bytes)`, as `np.savez` writes them.
fn npz(members: &[(&str, Vec<u8>)]) -> Vec<u8> {
    use std::io::Write;
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, bytes) in members {
        w.start_file(*name, opts).unwrap();
        w.write_all(bytes).unwrap();
    }
    w.finish().unwrap().into_inner()
}

/// Unicode strings as numpy's `<U{chars}` bytes.
fn unicode(items: &[&str], chars: usize) -> Vec<u8> {
    items
        .iter()
        .flat_map(|s| {
            let mut c: Vec<u32> = s.chars().map(u32::from).collect();
            c.resize(chars, 0);
            c.into_iter().flat_map(u32::to_le_bytes)
        })
        .collect()
}

/// A PNG whose header declares `w x h` 8-bit gray, followed by a tiny (wrong) image stream.
fn png_declaring(w: u32, h: u32) -> Vec<u8> {
    let chunk = |kind: &[u8], data: &[u8]| {
        let mut c = (data.len() as u32).to_be_bytes().to_vec();
        let mut body = kind.to_vec();
        body.extend_from_slice(data);
        let mut crc = flate2::Crc::new();
        crc.update(&body);
        c.extend(body);
        c.extend(crc.sum().to_be_bytes());
        c
    };
    let mut ihdr = w.to_be_bytes().to_vec();
    ihdr.extend(h.to_be_bytes());
    ihdr.extend([8, 0, 0, 0, 0]);
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    png.extend(chunk(b"IHDR", &ihdr));
    png.extend(chunk(
        b"IDAT",
        &[0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01],
    ));
    png.extend(chunk(b"IEND", &[]));
    png
}

/// A small gray PNG of `w x h` written by alkit's own writer.
fn png_of(path: &Path, w: usize, h: usize) {
    alkit::data::image::save_png(path, &vec![0.5; w * h], &[1, h, w]).unwrap();
}

/// The case folder's copy of the shipped IDX data, for editing.
fn idx_copy(d: &Path, fx: &Fx) -> PathBuf {
    let dir = d.join("idx");
    copy_dir(&fx.data(), &dir);
    dir
}

fn gunzip(p: &Path) -> Vec<u8> {
    use std::io::Read;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(p).unwrap())
        .read_to_end(&mut out)
        .unwrap();
    out
}

/// Replaces `STEM.gz` in `dir` by a plain `STEM` holding `f(bytes)`.
fn edit_idx(dir: &Path, stem: &str, f: impl FnOnce(&mut Vec<u8>)) {
    let gz = dir.join(format!("{stem}.gz"));
    let mut bytes = gunzip(&gz);
    f(&mut bytes);
    std::fs::remove_file(&gz).unwrap();
    std::fs::write(dir.join(stem), bytes).unwrap();
}

fn ck_copy(d: &Path, fx: &Fx) -> PathBuf {
    let dir = d.join("ck");
    copy_dir(&fx.ck(), &dir);
    dir
}

/// A checkpoint copy whose weights are `pytorch_model.bin` holding `bytes`.
fn ck_with_bin(d: &Path, fx: &Fx, bytes: &[u8]) {
    let c = ck_copy(d, fx);
    std::fs::remove_file(c.join("model.safetensors")).unwrap();
    std::fs::write(c.join("pytorch_model.bin"), bytes).unwrap();
}

/// A fixture written by torch.save (tests/fixtures/pytorch).
fn torch_fixture(name: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/pytorch")
            .join(name),
    )
    .unwrap()
}

/// A zip archive laid out as torch.save writes it: `archive/data.pkl` and the storages.
pub(super) fn torch_zip(pickle: &[u8], storages: &[(&str, &[u8])]) -> Vec<u8> {
    use std::io::Write;
    let mut z = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    z.start_file("archive/data.pkl", opts).unwrap();
    z.write_all(pickle).unwrap();
    for (key, bytes) in storages {
        z.start_file(format!("archive/data/{key}"), opts).unwrap();
        z.write_all(bytes).unwrap();
    }
    z.finish().unwrap().into_inner()
}

/// Pickle bytes (protocol 2) of an integer, as LONG1 of 8 bytes.
fn pkl_int(v: i64) -> Vec<u8> {
    let mut b = vec![0x8a, 8];
    b.extend_from_slice(&v.to_le_bytes());
    b
}

fn pkl_str(s: &str) -> Vec<u8> {
    let mut b = vec![b'X'];
    b.extend_from_slice(&(s.len() as u32).to_le_bytes());
    b.extend_from_slice(s.as_bytes());
    b
}

/// The pickle of `{name: tensor}`: a 1-d float tensor of `size` elements at `offset` in
/// storage `"0"`, which declares `numel` elements.
fn pkl_one_tensor(name: &str, numel: i64, offset: i64, size: i64) -> Vec<u8> {
    let mut b = vec![0x80, 2, b'}', b'('];
    b.extend(pkl_str(name));
    b.extend_from_slice(b"ctorch._utils\n_rebuild_tensor_v2\n(");
    b.push(b'(');
    b.extend(pkl_str("storage"));
    b.extend_from_slice(b"ctorch\nFloatStorage\n");
    b.extend(pkl_str("0"));
    b.extend(pkl_str("cpu"));
    b.extend(pkl_int(numel));
    b.extend_from_slice(b"tQ");
    b.extend(pkl_int(offset));
    b.extend(pkl_int(size));
    b.push(0x85);
    b.extend(pkl_int(1));
    b.push(0x85);
    b.extend_from_slice(&[0x89, b'N', b't', b'R', b'u', b'.']);
    b
}

fn sess_copy(d: &Path, fx: &Fx) -> PathBuf {
    let dir = d.join("sess");
    copy_dir(&fx.sess(), &dir);
    dir
}

/// Rewrites the safetensors file of a checkpoint copy with `f` applied to its tensors
/// `(name, dtype, shape, bytes)`.
fn edit_weights(ck: &Path, f: impl FnOnce(&mut Vec<(String, String, Vec<usize>, Vec<u8>)>)) {
    let p = ck.join("model.safetensors");
    let bytes = std::fs::read(&p).unwrap();
    let t = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut v: Vec<(String, String, Vec<usize>, Vec<u8>)> = t
        .tensors()
        .into_iter()
        .map(|(n, view)| {
            (
                n,
                format!("{:?}", view.dtype()),
                view.shape().to_vec(),
                view.data().to_vec(),
            )
        })
        .collect();
    v.sort();
    f(&mut v);
    let refs: Vec<(&str, &str, &[usize], Vec<u8>)> = v
        .iter()
        .map(|(n, d, s, b)| (n.as_str(), d.as_str(), s.as_slice(), b.clone()))
        .collect();
    std::fs::write(&p, st(&refs, None)).unwrap();
}

fn run_copy(d: &Path, fx: &Fx) -> PathBuf {
    let dir = d.join("run");
    copy_dir(&fx.run(), &dir);
    // The run reads its data from the path it recorded: keep it pointing at the fixture's.
    dir
}

type Setup = fn(&Path, &Fx);

/// One row: a name, what to put in the case folder, the arguments (`{d}` the case folder,
/// `{data}` `{ck}` `{sess}` `{pool}` `{run}` the fixtures), the exit code, what stderr
/// must name, and the environment a scheduler set (none but for the `env` rows).
struct Case {
    name: &'static str,
    setup: Setup,
    args: &'static [&'static str],
    code: i32,
    says: &'static [&'static str],
    env: &'static [(&'static str, &'static str)],
}

fn none(_: &Path, _: &Fx) {}

macro_rules! case {
    ($name:literal, $setup:expr, [$($a:literal),* $(,)?], $code:literal, [$($s:literal),* $(,)?]) => {
        case!($name, $setup, [$($a),*], $code, [$($s),*], env [])
    };
    ($name:literal, $setup:expr, [$($a:literal),* $(,)?], $code:literal, [$($s:literal),* $(,)?],
     env [$(($k:literal, $v:literal)),* $(,)?]) => {
        Case {
            name: $name,
            setup: $setup,
            args: &[$($a),*],
            code: $code,
            says: &[$($s),*],
            env: &[$(($k, $v)),*],
        }
    };
}

/// The variables a scheduler sets to say which shard a process is: removed from every case's
/// environment (the suite may itself run inside a job array), then set as the row says.
const SCHEDULER_VARS: [&str; 6] = [
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_MIN",
    "SLURM_ARRAY_TASK_MAX",
    "SLURM_ARRAY_TASK_COUNT",
    "SLURM_ARRAY_TASK_STEP",
    "JOB_COMPLETION_INDEX",
];

/// Three finished shards `{d}/s{i}.csv` of `pool` scored with `ck`, the best 40 by entropy;
/// `between` runs after shards 0 and 1, before shard 2.
fn shards_with(d: &Path, ck: &Path, pool: &Path, between: impl FnOnce()) {
    let score = |i: usize| {
        let (spec, out) = (format!("{i}/3"), d.join(format!("s{i}.csv")));
        let s = |p: &Path| p.display().to_string();
        ok(&[
            "score",
            "--checkpoint",
            &s(ck),
            "--data",
            &s(pool),
            "--top",
            "40",
            "--shard",
            &spec,
            "--out",
            &s(&out),
        ]);
    };
    score(0);
    score(1);
    between();
    score(2);
}

fn shards(d: &Path, fx: &Fx) {
    shards_with(d, &fx.ck(), &fx.data(), || {});
}

fn cases() -> Vec<Case> {
    vec![
        // ------------------------------------------------------------------ IDX folders
        case!(
            "idx-train-label-255",
            |d, fx| {
                let i = idx_copy(d, fx);
                edit_idx(&i, "train-labels-idx1-ubyte", |b| b[8 + 17] = 255);
            },
            ["train", "--data", "{d}/idx", "--steps", "1", "--out", "{d}/o"],
            1,
            [
                "train-labels-idx1-ubyte",
                "label 255 at item 17",
                "skips class 10"
            ]
        ),
        case!(
            "idx-test-label-200",
            |d, fx| {
                let i = idx_copy(d, fx);
                edit_idx(&i, "t10k-labels-idx1-ubyte", |b| b[8 + 3] = 200);
            },
            ["train", "--data", "{d}/idx", "--steps", "1", "--out", "{d}/o"],
            1,
            ["t10k-labels-idx1-ubyte", "label 200 at item 3"]
        ),
        case!(
            "idx-only-test-files",
            |d, fx| {
                let i = idx_copy(d, fx);
                std::fs::remove_file(i.join("train-images-idx3-ubyte.gz")).unwrap();
                std::fs::remove_file(i.join("train-labels-idx1-ubyte.gz")).unwrap();
            },
            ["train", "--data", "{d}/idx", "--steps", "1", "--out", "{d}/o"],
            1,
            ["train-images-idx3-ubyte", "neither"]
        ),
        case!(
            "idx-bad-magic",
            |d, fx| {
                let i = idx_copy(d, fx);
                edit_idx(&i, "train-images-idx3-ubyte", |b| b[3] = 0x01);
            },
            ["train", "--data", "{d}/idx", "--steps", "1", "--out", "{d}/o"],
            1,
            ["train-images-idx3-ubyte", "magic"]
        ),
        case!(
            "idx-truncated",
            |d, fx| {
                let i = idx_copy(d, fx);
                edit_idx(&i, "t10k-images-idx3-ubyte", |b| b.truncate(b.len() - 7));
            },
            ["train", "--data", "{d}/idx", "--steps", "1", "--out", "{d}/o"],
            1,
            ["t10k-images-idx3-ubyte", "truncated"]
        ),
        case!(
            "idx-trailing",
            |d, fx| {
                let i = idx_copy(d, fx);
                edit_idx(&i, "t10k-labels-idx1-ubyte", |b| b.extend([1, 2, 3]));
            },
            ["train", "--data", "{d}/idx", "--steps", "1", "--out", "{d}/o"],
            1,
            ["t10k-labels-idx1-ubyte", "3"]
        ),
        case!(
            "idx-count-mismatch",
            |d, fx| {
                let i = idx_copy(d, fx);
                edit_idx(&i, "train-labels-idx1-ubyte", |b| {
                    b.truncate(b.len() - 1);
                    b[7] -= 1;
                });
            },
            ["train", "--data", "{d}/idx", "--steps", "1", "--out", "{d}/o"],
            1,
            ["train-labels-idx1-ubyte", "2000", "1999"]
        ),
        case!(
            "idx-gzip-bomb",
            |d, fx| {
                let i = idx_copy(d, fx);
                let mut b = gunzip(&i.join("t10k-labels-idx1-ubyte.gz"));
                b.resize(b.len() + (256 << 20), 0);
                alkit::data::idx::write_gz(&i.join("t10k-labels-idx1-ubyte.gz"), &b).unwrap();
            },
            ["train", "--data", "{d}/idx", "--steps", "1", "--out", "{d}/o"],
            1,
            ["t10k-labels-idx1-ubyte.gz", "trailing"]
        ),
        case!(
            "idx-gzip-liar",
            |d, fx| {
                let i = idx_copy(d, fx);
                let mut h = 0x0803u32.to_be_bytes().to_vec();
                for x in [60_000u32, 10_000, 10_000] {
                    h.extend(x.to_be_bytes());
                }
                alkit::data::idx::write_gz(&i.join("train-images-idx3-ubyte.gz"), &h).unwrap();
            },
            ["train", "--data", "{d}/idx", "--steps", "1", "--out", "{d}/o"],
            1,
            ["train-images-idx3-ubyte.gz", "promises"]
        ),
        case!(
            "idx-corrupt-gzip",
            |d, fx| {
                let i = idx_copy(d, fx);
                let p = i.join("t10k-images-idx3-ubyte.gz");
                let mut b = std::fs::read(&p).unwrap();
                let n = b.len();
                b[n / 2..n / 2 + 64].fill(0xAB);
                std::fs::write(&p, b).unwrap();
            },
            ["train", "--data", "{d}/idx", "--steps", "1", "--out", "{d}/o"],
            1,
            ["t10k-images-idx3-ubyte.gz", "gzip"]
        ),
        case!(
            "idx-test-images-other-size",
            |d, fx| {
                let i = idx_copy(d, fx);
                let px = vec![3u8; 500 * 27 * 28];
                std::fs::remove_file(i.join("t10k-images-idx3-ubyte.gz")).unwrap();
                std::fs::write(
                    i.join("t10k-images-idx3-ubyte"),
                    alkit::data::idx::encode_images(&px, 500, 27, 28),
                )
                .unwrap();
            },
            ["train", "--data", "{d}/idx", "--steps", "1", "--out", "{d}/o"],
            1,
            ["t10k-images-idx3-ubyte", "27"]
        ),
        // ----------------------------------------------------------- safetensors pools
        case!(
            "st-label-2^31+5",
            |d, _| {
                std::fs::write(d.join("p.safetensors"), st_pool(&[0, 1, (1 << 31) + 5])).unwrap();
            },
            ["init", "--pool", "{d}/p.safetensors", "--state", "{d}/s"],
            1,
            [
                "p.safetensors",
                "label 2147483653 at item 2",
                "skips class 2"
            ]
        ),
        case!(
            "st-label-10M",
            |d, _| {
                std::fs::write(d.join("p.safetensors"), st_pool(&[10_000_000, 0])).unwrap();
            },
            ["init", "--pool", "{d}/p.safetensors", "--state", "{d}/s"],
            1,
            ["p.safetensors", "label 10000000 at item 0"]
        ),
        case!(
            "st-tensor-named-twice",
            |d, _| {
                let t = r#"{"dtype":"F32","shape":[2,4],"data_offsets":[0,32]}"#;
                let y = r#"{"dtype":"I64","shape":[2],"data_offsets":[32,48]}"#;
                let mut h = format!(r#"{{"x":{t},"x":{t},"y":{y}}}"#).into_bytes();
                while h.len() % 8 != 0 {
                    h.push(b' ');
                }
                let mut b = (h.len() as u64).to_le_bytes().to_vec();
                b.extend(h);
                b.extend(f32s(&[0.5; 8]));
                b.extend(i64s(&[0, 1]));
                std::fs::write(d.join("p.safetensors"), b).unwrap();
            },
            ["init", "--pool", "{d}/p.safetensors", "--state", "{d}/s"],
            1,
            ["p.safetensors", "`x` twice"]
        ),
        case!(
            "st-tensor-named-twice-streamed",
            |d, _| {
                let t = r#"{"dtype":"F32","shape":[2,4],"data_offsets":[0,32]}"#;
                let y = r#"{"dtype":"I64","shape":[2],"data_offsets":[32,48]}"#;
                let mut h = format!(r#"{{"x":{t},"x":{t},"y":{y}}}"#).into_bytes();
                while h.len() % 8 != 0 {
                    h.push(b' ');
                }
                let mut b = (h.len() as u64).to_le_bytes().to_vec();
                b.extend(h);
                b.extend(f32s(&[0.5; 8]));
                b.extend(i64s(&[0, 1]));
                std::fs::write(d.join("p.safetensors"), b).unwrap();
            },
            [
                "init",
                "--pool",
                "{d}/p.safetensors",
                "--state",
                "{d}/s",
                "--stream",
                "--classes",
                "a,b"
            ],
            1,
            ["p.safetensors", "`x` twice"]
        ),
        case!(
            "csv-column-twice-streamed",
            |d, _| {
                std::fs::write(d.join("p.csv"), "id,a,b,a\nx,1,2,3\ny,4,5,6\n").unwrap();
            },
            [
                "score",
                "--checkpoint",
                "{ck}",
                "--data",
                "{d}/p.csv",
                "--out",
                "{d}/s.csv"
            ],
            1,
            ["p.csv:1", "`a` twice"]
        ),
        // ------------------------------------------------------ NumPy embedding files
        case!(
            "npy-truncated",
            |d, _| {
                let b = npy("<f4", "(4, 3)", &f32s(&[0.5; 12]));
                std::fs::write(d.join("p.npy"), &b[..b.len() - 6]).unwrap();
            },
            ["init", "--pool", "{d}/p.npy", "--state", "{d}/s"],
            1,
            [
                "p.npy",
                "needs 48 bytes after its header; the file holds 42"
            ]
        ),
        case!(
            "npy-shape-lies",
            |d, _| {
                let b = npy("<f4", "(4000000000, 3)", &f32s(&[0.5; 12]));
                std::fs::write(d.join("p.npy"), b).unwrap();
            },
            ["init", "--pool", "{d}/p.npy", "--state", "{d}/s"],
            1,
            ["p.npy", "shape [4000000000, 3]", "the file holds 48"]
        ),
        case!(
            "npy-shape-overflows",
            |d, _| {
                let b = npy("<f4", "(4611686018427387904, 4611686018427387904)", &[]);
                std::fs::write(d.join("p.npy"), b).unwrap();
            },
            ["init", "--pool", "{d}/p.npy", "--state", "{d}/s"],
            1,
            ["p.npy", "which overflows"]
        ),
        case!(
            "npy-object-dtype",
            |d, _| {
                // A pickle's opcodes where the values would be: never read.
                let b = npy("|O", "(2, 1)", b"\x80\x04\x95cos\nsystem\n.");
                std::fs::write(d.join("p.npy"), b).unwrap();
            },
            ["init", "--pool", "{d}/p.npy", "--state", "{d}/s"],
            1,
            ["p.npy", "`|O`", "never unpickles"]
        ),
        case!(
            "npy-header-too-long",
            |d, _| {
                let mut b = b"\x93NUMPY\x02\x00".to_vec();
                b.extend(u32::MAX.to_le_bytes());
                b.extend([b' '; 64]);
                std::fs::write(d.join("p.npy"), b).unwrap();
            },
            ["init", "--pool", "{d}/p.npy", "--state", "{d}/s"],
            1,
            ["p.npy", "a header of 4294967295 bytes"]
        ),
        case!(
            "npz-no-features",
            |d, _| {
                let labels = npy("<i8", "(2,)", &i64s(&[0, 1]));
                std::fs::write(d.join("p.npz"), npz(&[("labels.npy", labels)])).unwrap();
            },
            ["init", "--pool", "{d}/p.npz", "--state", "{d}/s"],
            1,
            ["p.npz", "no array `features`", "it holds labels"]
        ),
        case!(
            "npz-ids-repeated",
            |d, _| {
                let x = npy("<f4", "(2, 2)", &f32s(&[0.5; 4]));
                let ids = npy("<U2", "(2,)", &unicode(&["a1", "a1"], 2));
                let b = npz(&[("features.npy", x), ("ids.npy", ids)]);
                std::fs::write(d.join("p.npz"), b).unwrap();
            },
            ["init", "--pool", "{d}/p.npz", "--state", "{d}/s"],
            1,
            ["p.npz", "array `ids`: id `a1` is given to items 0 and 1"]
        ),
        case!(
            "npz-member-shape-lies",
            |d, _| {
                let x = npy("<f4", "(5, 2)", &f32s(&[0.5; 4]));
                std::fs::write(d.join("p.npz"), npz(&[("features.npy", x)])).unwrap();
            },
            ["init", "--pool", "{d}/p.npz", "--state", "{d}/s"],
            1,
            ["p.npz", "array `features` has shape [5, 2]", "holds 16"]
        ),
        case!(
            "npz-truncated",
            |d, _| {
                let x = npy("<f4", "(2, 2)", &f32s(&[0.5; 4]));
                let b = npz(&[("features.npy", x)]);
                std::fs::write(d.join("p.npz"), &b[..b.len() / 2]).unwrap();
            },
            ["init", "--pool", "{d}/p.npz", "--state", "{d}/s"],
            1,
            ["p.npz", "not an .npz (zip) file"]
        ),
        case!(
            "npz-crc-mismatch",
            |d, _| {
                let x = npy("<f4", "(2, 2)", &f32s(&[0.5; 4]));
                let mut b = npz(&[("features.npy", x)]);
                // The last value's last byte, inside the member: its CRC no longer matches.
                let at = b
                    .windows(4)
                    .position(|w| w == 0.5f32.to_le_bytes())
                    .unwrap()
                    + 15;
                b[at] ^= 1;
                std::fs::write(d.join("p.npz"), b).unwrap();
            },
            ["init", "--pool", "{d}/p.npz", "--state", "{d}/s"],
            1,
            ["p.npz", "array `features` does not match the zip's CRC-32"]
        ),
        case!(
            "npz-labels-length",
            |d, _| {
                let x = npy("<f4", "(2, 2)", &f32s(&[0.5; 4]));
                let y = npy("<i8", "(3,)", &i64s(&[0, 1, 0]));
                let b = npz(&[("features.npy", x), ("labels.npy", y)]);
                std::fs::write(d.join("p.npz"), b).unwrap();
            },
            ["init", "--pool", "{d}/p.npz", "--state", "{d}/s"],
            1,
            ["p.npz", "array `labels` has shape [3]; expected (2,)"]
        ),
        case!(
            "st-display-root-outside-its-folder",
            |d, _| {
                let x = ("x", "F32", &[2usize, 2][..], f32s(&[0.5; 4]));
                let meta = [
                    ("display_kind", "image"),
                    ("display_root", "/"),
                    ("ids", r#"["etc/a.png", "etc/b.png"]"#),
                ];
                std::fs::write(d.join("p.safetensors"), st_meta(&[x], &meta)).unwrap();
            },
            [
                "init",
                "--pool",
                "{d}/p.safetensors",
                "--state",
                "{d}/s",
                "--classes",
                "a,b"
            ],
            1,
            [
                "p.safetensors",
                "`display_root` `/`",
                "inside the file's folder"
            ]
        ),
        case!(
            "teach-label-studio-task-names-two-images",
            |d, _| {
                std::fs::create_dir_all(d.join("photos")).unwrap();
                for n in ["a", "b"] {
                    png_of(&d.join(format!("photos/{n}.png")), 4, 4);
                }
                ok(&[
                    "init",
                    "--pool",
                    &d.join("photos").display().to_string(),
                    "--state",
                    &d.join("s").display().to_string(),
                    "--classes",
                    "cat,dog",
                    "--steps",
                    "2",
                ]);
                let export = serde_json::json!([{
                    "id": 7,
                    "data": {"image": "/data/local-files/?d=photos/a.png",
                             "thumb": "/data/local-files/?d=photos/b.png"},
                    "annotations": [{"result": [{"type": "choices",
                                                 "value": {"choices": ["cat"]}}]}],
                }]);
                std::fs::write(d.join("export.json"), export.to_string()).unwrap();
            },
            ["teach", "--state", "{d}/s", "--labels", "{d}/export.json"],
            1,
            [
                "export.json",
                "task 7",
                "two items of the pool",
                "`a.png`",
                "`b.png`"
            ]
        ),
        case!(
            "npz-display-image-absolute",
            |d, _| {
                let x = npy("<f4", "(2, 2)", &f32s(&[0.5; 4]));
                let shown = npy("<U15", "(2,)", &unicode(&["/etc/passwd.png", "b.png"], 15));
                let b = npz(&[("features.npy", x), ("display_image.npy", shown)]);
                std::fs::write(d.join("p.npz"), b).unwrap();
            },
            [
                "init",
                "--pool",
                "{d}/p.npz",
                "--state",
                "{d}/s",
                "--classes",
                "a,b"
            ],
            1,
            [
                "p.npz",
                "`/etc/passwd.png`",
                "relative to the file's folder"
            ]
        ),
        case!(
            "npz-display-image-link-to-a-text-file",
            |d, _| {
                let x = npy("<f4", "(2, 2)", &f32s(&[0.5, 0.1, 0.2, 0.9]));
                let shown = npy("<U5", "(2,)", &unicode(&["a.png", "b.png"], 5));
                let b = npz(&[("features.npy", x), ("display_image.npy", shown)]);
                std::fs::write(d.join("p.npz"), b).unwrap();
                png_of(&d.join("b.png"), 4, 4);
                std::fs::write(d.join("notes.txt"), "not an image").unwrap();
                #[cfg(unix)]
                std::os::unix::fs::symlink(d.join("notes.txt"), d.join("a.png")).unwrap();
                ok(&[
                    "init",
                    "--pool",
                    &d.join("p.npz").display().to_string(),
                    "--state",
                    &d.join("s").display().to_string(),
                    "--model",
                    "linear",
                    "--steps",
                    "2",
                    "--classes",
                    "a,b",
                ]);
            },
            [
                "query",
                "--state",
                "{d}/s",
                "--n",
                "2",
                "--scorer",
                "random",
                "--format",
                "label-studio",
                "--out",
                "{d}/q.json"
            ],
            1,
            ["a.png", "not a PNG, JPEG or WebP file"]
        ),
        case!(
            "st-negative-label",
            |d, _| {
                std::fs::write(d.join("p.safetensors"), st_pool(&[0, -1])).unwrap();
            },
            ["init", "--pool", "{d}/p.safetensors", "--state", "{d}/s"],
            1,
            ["p.safetensors", "-1", "item 1"]
        ),
        case!(
            "st-x-f64",
            |d, _| {
                std::fs::write(
                    d.join("p.safetensors"),
                    st(&[("x", "F64", &[2, 2], vec![0; 32])], None),
                )
                .unwrap();
            },
            ["init", "--pool", "{d}/p.safetensors", "--state", "{d}/s"],
            1,
            ["p.safetensors", "F64"]
        ),
        // Streamed by `score` (positioned reads after the header is checked): the header
        // must keep every read inside the file, and a bad value is named across chunks.
        case!(
            "score-stream-x-past-the-end",
            |d, _| {
                let mut b = st(&[("x", "F32", &[2, 28, 28], f32s(&[0.5; 2 * 784]))], None);
                b.truncate(b.len() - 100);
                std::fs::write(d.join("p.safetensors"), b).unwrap();
            },
            [
                "score",
                "--checkpoint",
                "{ck}",
                "--data",
                "{d}/p.safetensors",
                "--out",
                "{d}/o.csv"
            ],
            1,
            ["p.safetensors", "data section"]
        ),
        case!(
            "score-stream-tensors-overlap",
            |d, _| {
                let mut b = st(
                    &[
                        ("x", "F32", &[1, 28, 28], f32s(&[0.5; 784])),
                        ("y", "U8", &[4], vec![0; 4]),
                    ],
                    None,
                );
                let h = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
                let header = String::from_utf8(b[8..8 + h].to_vec()).unwrap();
                let moved = header.replace("[3136,3140]", "[3132,3136]");
                assert_ne!(moved, header);
                b.splice(8..8 + h, moved.into_bytes());
                std::fs::write(d.join("p.safetensors"), b).unwrap();
            },
            [
                "score",
                "--checkpoint",
                "{ck}",
                "--data",
                "{d}/p.safetensors",
                "--out",
                "{d}/o.csv"
            ],
            1,
            ["p.safetensors", "overlap"]
        ),
        case!(
            "score-stream-header-of-2^40-bytes",
            |d, _| {
                let mut b = (1u64 << 40).to_le_bytes().to_vec();
                b.extend_from_slice(b"{}");
                std::fs::write(d.join("p.safetensors"), b).unwrap();
            },
            [
                "score",
                "--checkpoint",
                "{ck}",
                "--data",
                "{d}/p.safetensors",
                "--out",
                "{d}/o.csv"
            ],
            1,
            ["p.safetensors", "header of 1099511627776 bytes"]
        ),
        case!(
            "score-stream-nan-in-the-second-chunk",
            |d, _| {
                let mut x = vec![0.5f32; 2 * 784];
                x[785] = f32::NAN;
                std::fs::write(
                    d.join("p.safetensors"),
                    st(&[("x", "F32", &[2, 28, 28], f32s(&x))], None),
                )
                .unwrap();
            },
            [
                "score",
                "--checkpoint",
                "{ck}",
                "--data",
                "{d}/p.safetensors",
                "--chunk",
                "1",
                "--out",
                "{d}/o.csv"
            ],
            1,
            ["p.safetensors", "non-finite", "position 785"]
        ),
        case!(
            "st-x-nan",
            |d, _| {
                std::fs::write(
                    d.join("p.safetensors"),
                    st(
                        &[("x", "F32", &[2, 2], f32s(&[0.0, f32::NAN, 1.0, 2.0]))],
                        None,
                    ),
                )
                .unwrap();
            },
            ["init", "--pool", "{d}/p.safetensors", "--state", "{d}/s"],
            1,
            ["p.safetensors", "non-finite", "position 1"]
        ),
        case!(
            "st-y-shape",
            |d, _| {
                std::fs::write(
                    d.join("p.safetensors"),
                    st(
                        &[
                            ("x", "F32", &[2, 2], f32s(&[0.0; 4])),
                            ("y", "I64", &[3], i64s(&[0, 1, 1])),
                        ],
                        None,
                    ),
                )
                .unwrap();
            },
            ["init", "--pool", "{d}/p.safetensors", "--state", "{d}/s"],
            1,
            ["p.safetensors", "tensor `y` has shape"]
        ),
        case!(
            "st-metadata-too-few-classes",
            |d, _| {
                std::fs::write(
                    d.join("p.safetensors"),
                    st(
                        &[
                            ("x", "F32", &[2, 2], f32s(&[0.0; 4])),
                            ("y", "I64", &[2], i64s(&[0, 2])),
                        ],
                        Some(("classes", "cat,dog")),
                    ),
                )
                .unwrap();
            },
            ["init", "--pool", "{d}/p.safetensors", "--state", "{d}/s"],
            1,
            ["p.safetensors", "label 2 at item 1", "2 classes"]
        ),
        case!(
            "st-metadata-duplicate-class",
            |d, _| {
                std::fs::write(
                    d.join("p.safetensors"),
                    st(
                        &[
                            ("x", "F32", &[2, 2], f32s(&[0.0; 4])),
                            ("y", "I64", &[2], i64s(&[0, 1])),
                        ],
                        Some(("classes", "cat,cat")),
                    ),
                )
                .unwrap();
            },
            ["init", "--pool", "{d}/p.safetensors", "--state", "{d}/s"],
            1,
            ["p.safetensors", "`cat`", "twice"]
        ),
        case!(
            "st-garbage",
            |d, _| {
                std::fs::write(d.join("p.safetensors"), b"definitely not safetensors").unwrap();
            },
            ["init", "--pool", "{d}/p.safetensors", "--state", "{d}/s"],
            1,
            ["p.safetensors", "not a safetensors file"]
        ),
        case!(
            "st-huge-header-length",
            |d, _| {
                let mut b = (1u64 << 60).to_le_bytes().to_vec();
                b.extend(b"{}");
                std::fs::write(d.join("p.safetensors"), b).unwrap();
            },
            ["init", "--pool", "{d}/p.safetensors", "--state", "{d}/s"],
            1,
            ["p.safetensors", "not a safetensors file"]
        ),
        case!(
            "st-no-x",
            |d, _| {
                std::fs::write(
                    d.join("p.safetensors"),
                    st(&[("images", "F32", &[2, 2], f32s(&[0.0; 4]))], None),
                )
                .unwrap();
            },
            ["init", "--pool", "{d}/p.safetensors", "--state", "{d}/s"],
            1,
            ["p.safetensors", "no tensor `x`"]
        ),
        case!(
            "st-offsets-lie",
            |d, _| {
                // The header's shape needs 16 bytes, its offsets give 8.
                let mut b = st(&[("x", "F32", &[2, 2], f32s(&[0.0; 2]))], None);
                b.extend([0u8; 8]);
                std::fs::write(d.join("p.safetensors"), b).unwrap();
            },
            ["init", "--pool", "{d}/p.safetensors", "--state", "{d}/s"],
            1,
            ["p.safetensors", "not a safetensors file"]
        ),
        // ------------------------------------------------------------------ CSV pools
        case!(
            "csv-not-a-number",
            |d, _| {
                std::fs::write(d.join("p.csv"), "id,a,b\nx,1,2\ny,3,seven\n").unwrap();
            },
            [
                "init",
                "--pool",
                "{d}/p.csv",
                "--state",
                "{d}/s",
                "--classes",
                "a,b"
            ],
            1,
            ["p.csv:3", "column `b`", "seven"]
        ),
        case!(
            "csv-nan",
            |d, _| {
                std::fs::write(d.join("p.csv"), "a,b\n1,2\nNaN,3\n").unwrap();
            },
            [
                "init",
                "--pool",
                "{d}/p.csv",
                "--state",
                "{d}/s",
                "--classes",
                "a,b"
            ],
            1,
            ["p.csv:3", "not a finite number"]
        ),
        case!(
            "csv-duplicate-id",
            |d, _| {
                std::fs::write(d.join("p.csv"), "id,a\nx,1\ny,2\nx,3\n").unwrap();
            },
            [
                "init",
                "--pool",
                "{d}/p.csv",
                "--state",
                "{d}/s",
                "--classes",
                "a,b"
            ],
            1,
            ["p.csv:4", "already used on line 2"]
        ),
        case!(
            "csv-ragged",
            |d, _| {
                std::fs::write(d.join("p.csv"), "id,a\nx,1\ny,2,3\n").unwrap();
            },
            [
                "init",
                "--pool",
                "{d}/p.csv",
                "--state",
                "{d}/s",
                "--classes",
                "a,b"
            ],
            1,
            ["p.csv:3", "3 fields, the header has 2"]
        ),
        case!(
            "csv-empty",
            |d, _| {
                std::fs::write(d.join("p.csv"), "").unwrap();
            },
            [
                "init",
                "--pool",
                "{d}/p.csv",
                "--state",
                "{d}/s",
                "--classes",
                "a,b"
            ],
            1,
            ["p.csv", "empty"]
        ),
        case!(
            "csv-cnn-on-tabular",
            |d, _| {
                std::fs::write(d.join("p.csv"), POOL).unwrap();
            },
            [
                "init",
                "--pool",
                "{d}/p.csv",
                "--state",
                "{d}/s",
                "--model",
                "cnn"
            ],
            2,
            ["model", "cannot take items of shape [2]"]
        ),
        case!(
            "csv-classes-empty-name",
            |d, _| {
                std::fs::write(d.join("p.csv"), "a,b\n1,2\n3,4\n").unwrap();
            },
            [
                "init",
                "--pool",
                "{d}/p.csv",
                "--state",
                "{d}/s",
                "--classes",
                "cat,,dog"
            ],
            2,
            ["classes", "empty or given twice"]
        ),
        case!(
            "csv-classes-duplicate",
            |d, _| {
                std::fs::write(d.join("p.csv"), "a,b\n1,2\n3,4\n").unwrap();
            },
            [
                "init",
                "--pool",
                "{d}/p.csv",
                "--state",
                "{d}/s",
                "--classes",
                "cat,dog,cat"
            ],
            2,
            ["classes", "`cat`"]
        ),
        // -------------------------------------------------------------- image folders
        case!(
            "png-declares-40000x40000",
            |d, _| {
                let dir = d.join("imgs/cat");
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(dir.join("big.png"), png_declaring(40_000, 40_000)).unwrap();
                png_of(&d.join("imgs/small.png"), 4, 4);
                std::fs::create_dir_all(d.join("imgs/dog")).unwrap();
            },
            ["init", "--pool", "{d}/imgs", "--state", "{d}/s"],
            1,
            ["big.png", "40000"]
        ),
        case!(
            "png-garbage",
            |d, _| {
                let dir = d.join("imgs/cat");
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::create_dir_all(d.join("imgs/dog")).unwrap();
                png_of(&dir.join("a.png"), 4, 4);
                std::fs::write(dir.join("b.png"), b"\x89PNG\r\n\x1a\nnot really").unwrap();
            },
            ["init", "--pool", "{d}/imgs", "--state", "{d}/s"],
            1,
            ["b.png"]
        ),
        case!(
            "jpg-garbage",
            |d, _| {
                let dir = d.join("imgs/cat");
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::create_dir_all(d.join("imgs/dog")).unwrap();
                png_of(&dir.join("a.png"), 4, 4);
                std::fs::write(dir.join("c.jpg"), b"\xff\xd8\xff\xe0 truncated").unwrap();
            },
            ["init", "--pool", "{d}/imgs", "--state", "{d}/s"],
            1,
            ["c.jpg"]
        ),
        case!(
            // Found by fuzzing (fuzz/README.md): a palette of 47 bytes made png 0.18.1 panic.
            "png-palette-of-47-bytes",
            |d, _| {
                let dir = d.join("imgs/cat");
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::create_dir_all(d.join("imgs/dog")).unwrap();
                std::fs::copy(
                    Path::new(env!("CARGO_MANIFEST_DIR"))
                        .join("tests/fixtures/fuzz/png-plte-47-bytes.png"),
                    dir.join("p.png"),
                )
                .unwrap();
            },
            ["init", "--pool", "{d}/imgs", "--state", "{d}/s"],
            1,
            ["p.png", "PLTE", "47 bytes"]
        ),
        case!(
            // Mixed sizes are scaled (a photo folder); a truncated image among them is still
            // named, after its header was read for the size.
            "images-mixed-sizes-one-truncated",
            |d, _| {
                let dir = d.join("imgs/cat");
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::create_dir_all(d.join("imgs/dog")).unwrap();
                png_of(&dir.join("a.png"), 4, 4);
                png_of(&dir.join("b.png"), 5, 4);
                let b = std::fs::read(dir.join("b.png")).unwrap();
                std::fs::write(dir.join("b.png"), &b[..40]).unwrap();
            },
            ["init", "--pool", "{d}/imgs", "--state", "{d}/s"],
            1,
            ["b.png"]
        ),
        case!(
            // A photo cut short: libjpeg would fill the rest grey; refused as Pillow refuses it.
            "jpg-truncated",
            |d, _| {
                let dir = d.join("imgs/cat");
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::create_dir_all(d.join("imgs/dog")).unwrap();
                let jpeg = std::fs::read(
                    Path::new(env!("CARGO_MANIFEST_DIR"))
                        .join("tests/fixtures/pillow_images/jpeg_420.jpg"),
                )
                .unwrap();
                std::fs::write(dir.join("cut.jpg"), &jpeg[..jpeg.len() * 2 / 3]).unwrap();
            },
            ["init", "--pool", "{d}/imgs", "--state", "{d}/s"],
            1,
            ["cut.jpg", "truncated"]
        ),
        case!(
            // A GIF deep in a class folder: the folder is refused naming it, not read without it.
            "images-nested-gif",
            |d, _| {
                let dir = d.join("imgs/cat/2024/garden");
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::create_dir_all(d.join("imgs/dog")).unwrap();
                png_of(&dir.join("a.png"), 4, 4);
                std::fs::write(dir.join("b.gif"), b"GIF89a").unwrap();
            },
            ["init", "--pool", "{d}/imgs", "--state", "{d}/s"],
            1,
            ["imgs", "cat/2024/garden/b.gif", "does not decode"]
        ),
        case!(
            // A link inside a class folder back to another class: its images would be read
            // again under this class (or, read first, never under their own).
            "images-link-into-the-tree",
            |d, _| {
                std::fs::create_dir_all(d.join("imgs/cat")).unwrap();
                std::fs::create_dir_all(d.join("imgs/dog")).unwrap();
                png_of(&d.join("imgs/cat/a.png"), 4, 4);
                png_of(&d.join("imgs/dog/b.png"), 4, 4);
                std::os::unix::fs::symlink("../dog", d.join("imgs/cat/more")).unwrap();
            },
            ["init", "--pool", "{d}/imgs", "--state", "{d}/s"],
            1,
            ["imgs", "cat/more -> dog", "inside itself"]
        ),
        case!(
            "images-dangling-link",
            |d, _| {
                std::fs::create_dir_all(d.join("imgs/cat")).unwrap();
                std::fs::create_dir_all(d.join("imgs/dog")).unwrap();
                png_of(&d.join("imgs/cat/a.png"), 4, 4);
                png_of(&d.join("imgs/dog/b.png"), 4, 4);
                std::os::unix::fs::symlink("gone.png", d.join("imgs/dog/c.png")).unwrap();
            },
            ["init", "--pool", "{d}/imgs", "--state", "{d}/s"],
            1,
            ["imgs", "dog/c.png", "link(s) to nothing"]
        ),
        case!(
            "images-none",
            |d, _| {
                std::fs::create_dir_all(d.join("imgs/cat")).unwrap();
                std::fs::write(d.join("imgs/notes.txt"), "x").unwrap();
            },
            ["init", "--pool", "{d}/imgs", "--state", "{d}/s"],
            1,
            ["imgs", "no .png"]
        ),
        // -------------------------------------------------------------------- Parquet
        case!(
            "parquet-garbage",
            |d, _| {
                std::fs::write(d.join("p.parquet"), b"PAR1 nonsense PAR1").unwrap();
            },
            ["init", "--pool", "{d}/p.parquet", "--state", "{d}/s"],
            1,
            ["p.parquet", "Parquet"]
        ),
        case!(
            "parquet-truncated",
            |d, _| {
                let b = std::fs::read(
                    Path::new(env!("CARGO_MANIFEST_DIR"))
                        .join("tests/fixtures/hub-mnist/test-00000-of-00001.parquet"),
                )
                .unwrap();
                std::fs::write(d.join("p.parquet"), &b[..b.len() / 2]).unwrap();
            },
            ["init", "--pool", "{d}/p.parquet", "--state", "{d}/s"],
            1,
            ["p.parquet"]
        ),
        case!(
            // Found by fuzzing: a page header declaring a 2^31-element list made parquet 57
            // spin on end-of-file reads for minutes.
            "parquet-page-header-spin",
            |d, _| {
                std::fs::copy(
                    Path::new(env!("CARGO_MANIFEST_DIR"))
                        .join("tests/fixtures/fuzz/parquet-page-header-spin.parquet"),
                    d.join("p.parquet"),
                )
                .unwrap();
            },
            ["init", "--pool", "{d}/p.parquet", "--state", "{d}/s"],
            1,
            ["p.parquet", "malformed page header"]
        ),
        case!(
            // Found by fuzzing: parquet 57 reads footer fields by id whatever their wire type;
            // field 1 declared a string, read as an i32, shifted the crate onto a list of ~2^31.
            "parquet-footer-field-type-mismatch",
            |d, _| {
                std::fs::copy(
                    Path::new(env!("CARGO_MANIFEST_DIR"))
                        .join("tests/fixtures/fuzz/parquet-footer-field-type-mismatch.parquet"),
                    d.join("p.parquet"),
                )
                .unwrap();
            },
            ["init", "--pool", "{d}/p.parquet", "--state", "{d}/s"],
            1,
            ["p.parquet", "field 1 has wire type 8"]
        ),
        case!(
            // Found by fuzzing: a list count of ~2^31 in the footer made parquet 57 allocate
            // 52 GB up front and abort.
            "parquet-footer-list-of-2e31",
            |d, _| {
                std::fs::copy(
                    Path::new(env!("CARGO_MANIFEST_DIR"))
                        .join("tests/fixtures/fuzz/parquet-schema-list-of-2e31.parquet"),
                    d.join("p.parquet"),
                )
                .unwrap();
            },
            ["init", "--pool", "{d}/p.parquet", "--state", "{d}/s"],
            1,
            ["p.parquet", "malformed footer metadata"]
        ),
        case!(
            // Found by fuzzing: parquet 57's record reader panics on a definition level of 43.
            "parquet-corrupt-definition-levels",
            |d, _| {
                std::fs::copy(
                    Path::new(env!("CARGO_MANIFEST_DIR"))
                        .join("tests/fixtures/fuzz/parquet-definition-level-43.parquet"),
                    d.join("p.parquet"),
                )
                .unwrap();
            },
            ["init", "--pool", "{d}/p.parquet", "--state", "{d}/s"],
            1,
            ["p.parquet", "the Parquet reader failed on malformed data"]
        ),
        // ---------------------------------------------------------------- checkpoints
        case!(
            "ck-std-zero",
            |d, fx| {
                let c = ck_copy(d, fx);
                edit_json(&c.join("config.json"), |v| {
                    v["normalizer"]["std"][0] = 0.0.into()
                });
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            ["ck/config.json", "standard deviation 0"]
        ),
        case!(
            "ck-std-negative",
            |d, fx| {
                let c = ck_copy(d, fx);
                edit_json(&c.join("config.json"), |v| {
                    v["normalizer"]["std"][0] = (-1.0).into()
                });
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            ["ck/config.json", "-1"]
        ),
        case!(
            "ck-std-missing",
            |d, fx| {
                let c = ck_copy(d, fx);
                edit_json(&c.join("config.json"), |v| {
                    v["normalizer"]["std"] = serde_json::json!([])
                });
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            ["ck/config.json", "0 standard deviations"]
        ),
        case!(
            "ck-class-count",
            |d, fx| {
                let c = ck_copy(d, fx);
                edit_json(&c.join("config.json"), |v| {
                    v["classes"].as_array_mut().unwrap().pop();
                });
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            [
                "ck/config.json",
                "9 class names for a model with 10 outputs"
            ]
        ),
        case!(
            "ck-class-duplicate",
            |d, fx| {
                let c = ck_copy(d, fx);
                edit_json(&c.join("config.json"), |v| v["classes"][1] = "0".into());
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            ["ck/config.json", "`0`", "twice"]
        ),
        case!(
            "ck-nan-weights",
            |d, fx| {
                let c = ck_copy(d, fx);
                edit_weights(&c, |v| {
                    v[0].3[0..4].copy_from_slice(&f32::NAN.to_le_bytes())
                });
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            ["ck/model.safetensors", "NaN"]
        ),
        case!(
            "ck-wrong-dtype",
            |d, fx| {
                let c = ck_copy(d, fx);
                // Same bytes, declared as I32: read as F32 they would be garbage.
                edit_weights(&c, |v| v[0].1 = "I32".into());
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            ["ck/model.safetensors", "is I32", "F32"]
        ),
        case!(
            "ck-missing-tensor",
            |d, fx| {
                let c = ck_copy(d, fx);
                edit_weights(&c, |v| {
                    v.remove(0);
                });
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            ["ck/model.safetensors", "is missing"]
        ),
        case!(
            "ck-extra-tensor",
            |d, fx| {
                let c = ck_copy(d, fx);
                edit_weights(&c, |v| {
                    v.push(("evil".into(), "F32".into(), vec![1], f32s(&[1.0])))
                });
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            ["ck/model.safetensors", "unexpected tensor `evil`"]
        ),
        case!(
            "ck-wrong-shape",
            |d, fx| {
                let c = ck_copy(d, fx);
                edit_weights(&c, |v| {
                    let t = v.iter_mut().find(|t| t.2.len() == 2).unwrap();
                    t.2.reverse();
                });
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            ["ck/model.safetensors", "has shape"]
        ),
        case!(
            "ck-invalid-json",
            |d, fx| {
                let c = ck_copy(d, fx);
                std::fs::write(c.join("config.json"), "{\"format\": 1,").unwrap();
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            ["ck/config.json", "invalid JSON"]
        ),
        case!(
            "ck-format",
            |d, fx| {
                let c = ck_copy(d, fx);
                edit_json(&c.join("config.json"), |v| v["format"] = 99.into());
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            ["ck/config.json", "format 99"]
        ),
        case!(
            "ck-no-weights",
            |d, fx| {
                let c = ck_copy(d, fx);
                std::fs::remove_file(c.join("model.safetensors")).unwrap();
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            ["ck/model.safetensors"]
        ),
        case!(
            "ck-billion-weights",
            |d, fx| {
                let c = ck_copy(d, fx);
                edit_json(&c.join("config.json"), |v| {
                    v["arch"]["hidden"][0] = 1_000_000_000u64.into();
                });
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            ["ck/config.json", "weights"]
        ),
        case!(
            "ck-cnn-for-rows",
            |d, fx| {
                let c = ck_copy(d, fx);
                edit_json(&c.join("config.json"), |v| {
                    v["item_shape"] = serde_json::json!([1, 4]);
                    v["normalizer"]["mean"] = serde_json::json!([0.5]);
                });
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            ["ck/config.json", "cannot take items of shape [1, 4]"]
        ),
        case!(
            "ck-hf-revision-escape",
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
            "ck-mc-dropout-without-dropout",
            none,
            [
                "score",
                "--checkpoint",
                "{ck}",
                "--scorer",
                "bald",
                "--out",
                "{d}/s.csv"
            ],
            2,
            ["bald", "dropout"]
        ),
        // ------------------------------------------------ PyTorch weight files (torch.save)
        case!(
            "pt-truncated-zip",
            |d, fx| {
                let b = torch_fixture("state_dict.pth");
                ck_with_bin(d, fx, &b[..b.len() / 2]);
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            ["ck/pytorch_model.bin", "zip"]
        ),
        case!(
            "pt-legacy-truncated",
            |d, fx| {
                let b = torch_fixture("legacy.pth");
                ck_with_bin(d, fx, &b[..b.len() - 9]);
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            ["ck/pytorch_model.bin", "cut short"]
        ),
        case!(
            "pt-global-not-a-tensor",
            |d, fx| {
                let mut p = vec![0x80, 2, b'}'];
                p.extend(pkl_str("fc1.weight"));
                p.extend_from_slice(b"cos\nsystem\n");
                p.extend(pkl_str("touch pwned"));
                p.extend_from_slice(&[0x85, b'R', b's', b'.']);
                ck_with_bin(d, fx, &torch_zip(&p, &[]));
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            [
                "ck/pytorch_model.bin",
                "`fc1.weight` is a `os.system`, not a tensor"
            ]
        ),
        case!(
            "pt-storage-of-2^40-floats",
            |d, fx| {
                let p = pkl_one_tensor("fc1.weight", 1 << 40, 0, 1 << 40);
                ck_with_bin(d, fx, &torch_zip(&p, &[("0", &[0; 16])]));
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            [
                "ck/pytorch_model.bin",
                "`fc1.weight`",
                "declares 1099511627776 elements"
            ]
        ),
        case!(
            "pt-view-past-its-storage",
            |d, fx| {
                let p = pkl_one_tensor("fc1.weight", 4, 2, 4);
                ck_with_bin(d, fx, &torch_zip(&p, &[("0", &[0; 16])]));
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            [
                "ck/pytorch_model.bin",
                "`fc1.weight`",
                "reaches past its storage"
            ]
        ),
        case!(
            "pt-memo-doubling",
            |d, fx| {
                // Each step makes a pair of the previous object twice: 2^60 leaves if copied.
                let mut p = vec![0x80, 2, b']', b'q', 0];
                for _ in 0..60 {
                    p.extend_from_slice(&[b'h', 0, b'h', 0, 0x86, b'q', 0]);
                }
                p.push(b'.');
                ck_with_bin(d, fx, &torch_zip(&p, &[]));
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            ["ck/pytorch_model.bin", "neither a state dict"]
        ),
        case!(
            "pt-whole-model",
            |d, fx| ck_with_bin(d, fx, &torch_fixture("whole_model.pth")),
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            [
                "ck/pytorch_model.bin",
                "whole pickled model (`__main__.Mlp`)",
                "torch.save(model.state_dict()"
            ]
        ),
        case!(
            "pt-pth-without-config",
            |d, _| std::fs::write(d.join("x.pth"), torch_fixture("state_dict.pth")).unwrap(),
            ["score", "--checkpoint", "{d}/x.pth", "--out", "{d}/s.csv"],
            1,
            [
                "x.pth",
                "PyTorch weights file",
                "config.json",
                "\"architecture\""
            ]
        ),
        // ------------------------------------------------------------------- sessions
        case!(
            "sess-labeled-twice",
            |d, fx| {
                let s = sess_copy(d, fx);
                edit_json(&s.join("session.json"), |v| {
                    let first = v["labeled"][0].clone();
                    v["labeled"].as_array_mut().unwrap().push(first);
                });
            },
            [
                "query",
                "--state",
                "{d}/sess",
                "--n",
                "1",
                "--out",
                "{d}/q.csv"
            ],
            1,
            ["sess/session.json", "labeled twice"]
        ),
        case!(
            "sess-guess-not-a-class",
            |d, fx| {
                let s = sess_copy(d, fx);
                edit_json(&s.join("session.json"), |v| {
                    v["labeled"][0]["guess"] = serde_json::json!("zebra");
                });
            },
            [
                "query",
                "--state",
                "{d}/sess",
                "--n",
                "1",
                "--out",
                "{d}/q.csv"
            ],
            1,
            [
                "sess/session.json",
                "guess `zebra`",
                "not one of the classes"
            ]
        ),
        case!(
            "sess-journal-round-past-the-session",
            |d, fx| {
                let s = sess_copy(d, fx);
                let v: serde_json::Value =
                    serde_json::from_slice(&std::fs::read(s.join("session.json")).unwrap())
                        .unwrap();
                let (id, label) = (
                    v["labeled"][0]["id"].clone(),
                    v["labeled"][0]["label"].clone(),
                );
                let queue = serde_json::json!([{"id": id, "label": label, "round": 7}]);
                std::fs::write(s.join("label-studio-queue.json"), queue.to_string()).unwrap();
            },
            [
                "query",
                "--state",
                "{d}/sess",
                "--n",
                "1",
                "--out",
                "{d}/q.csv"
            ],
            1,
            [
                "label-studio-queue.json:1",
                "after round 7",
                "has had 0 rounds"
            ]
        ),
        case!(
            "sess-pending-and-labeled",
            |d, fx| {
                let s = sess_copy(d, fx);
                edit_json(&s.join("session.json"), |v| {
                    let id = v["labeled"][0]["id"].clone();
                    v["rounds"] = serde_json::json!([{"round": 1, "scorer": "entropy", "labeled": 2,
                    "queried": 1, "fit_acc": null, "test_acc": null, "test_nll": null}]);
                    v["pending"] = serde_json::json!([{"id": id, "round": 1, "score": 0.5}]);
                });
            },
            [
                "query",
                "--state",
                "{d}/sess",
                "--n",
                "1",
                "--out",
                "{d}/q.csv"
            ],
            1,
            ["sess/session.json", "pending"]
        ),
        case!(
            "sess-class-count",
            |d, fx| {
                let s = sess_copy(d, fx);
                edit_json(&s.join("session.json"), |v| {
                    v["classes"].as_array_mut().unwrap().push("bird".into());
                });
            },
            [
                "query",
                "--state",
                "{d}/sess",
                "--n",
                "1",
                "--out",
                "{d}/q.csv"
            ],
            1,
            ["sess/session.json", "2 outputs for 3 classes"]
        ),
        case!(
            "sess-rounds-misnumbered",
            |d, fx| {
                let s = sess_copy(d, fx);
                edit_json(&s.join("session.json"), |v| {
                    v["rounds"] = serde_json::json!([{"round": 2, "scorer": "entropy", "labeled": 2,
                    "queried": 1, "fit_acc": null, "test_acc": null, "test_nll": null}]);
                });
            },
            [
                "query",
                "--state",
                "{d}/sess",
                "--n",
                "1",
                "--out",
                "{d}/q.csv"
            ],
            1,
            ["sess/session.json", "round record 1 says round 2"]
        ),
        case!(
            "sess-normaliser",
            |d, fx| {
                let s = sess_copy(d, fx);
                edit_json(&s.join("session.json"), |v| {
                    v["normalizer"]["std"] = serde_json::json!([]);
                });
            },
            [
                "query",
                "--state",
                "{d}/sess",
                "--n",
                "1",
                "--out",
                "{d}/q.csv"
            ],
            1,
            ["sess/session.json", "0 standard deviations"]
        ),
        case!(
            "sess-invalid-json",
            |d, fx| {
                let s = sess_copy(d, fx);
                std::fs::write(s.join("session.json"), "{\"format\":").unwrap();
            },
            ["status", "--state", "{d}/sess"],
            1,
            ["sess/session.json", "invalid JSON"]
        ),
        case!(
            "sess-ensemble-huge",
            |d, fx| {
                let s = sess_copy(d, fx);
                edit_json(&s.join("session.json"), |v| {
                    v["config"]["ensemble"] = 100_000_000u64.into();
                });
            },
            [
                "query",
                "--state",
                "{d}/sess",
                "--n",
                "1",
                "--out",
                "{d}/q.csv"
            ],
            1,
            ["sess/session.json", "100000000 members"]
        ),
        case!(
            "sess-pool-changed",
            |d, fx| {
                let s = sess_copy(d, fx);
                let pool = d.join("pool.csv");
                std::fs::write(&pool, POOL.replace("0.9", "0.8")).unwrap();
                edit_json(&s.join("session.json"), |v| {
                    v["source"] = pool.display().to_string().into();
                });
            },
            [
                "query",
                "--state",
                "{d}/sess",
                "--n",
                "1",
                "--out",
                "{d}/q.csv"
            ],
            1,
            [
                "sess/session.json",
                "changed since the session started",
                "1 changed (`p3`)"
            ]
        ),
        case!(
            "sess-pool-items-removed-added-renamed",
            |d, fx| {
                let s = sess_copy(d, fx);
                let pool = d.join("pool.csv");
                let edited = POOL
                    .replace("p5,,0.4,0.4\n", "p6,,0.7,0.7\np7,,0.6,0.6\n")
                    .replace("p4,", "q4,");
                std::fs::write(&pool, edited).unwrap();
                edit_json(&s.join("session.json"), |v| {
                    v["source"] = pool.display().to_string().into();
                });
            },
            [
                "query",
                "--state",
                "{d}/sess",
                "--n",
                "1",
                "--out",
                "{d}/q.csv"
            ],
            1,
            [
                "6 items then, 7 now",
                "1 removed (`p5`)",
                "2 added (`p6`, `p7`)",
                "1 renamed (`p4` -> `q4`)"
            ]
        ),
        case!(
            "sess-pool-item-removed-streamed",
            |d, fx| {
                let s = sess_copy(d, fx);
                let pool = d.join("pool.csv");
                std::fs::write(&pool, POOL.replace("p2,,0.5,0.5\n", "")).unwrap();
                edit_json(&s.join("session.json"), |v| {
                    v["source"] = pool.display().to_string().into();
                });
            },
            [
                "query",
                "--state",
                "{d}/sess",
                "--n",
                "1",
                "--stream",
                "--out",
                "{d}/q.csv"
            ],
            1,
            ["6 items then, 5 now", "1 removed (`p2`)"]
        ),
        case!(
            "sess-query-out-is-state",
            none,
            [
                "query",
                "--state",
                "{sess}",
                "--n",
                "1",
                "--out",
                "{sess}/session.json"
            ],
            2,
            ["session.json", "out"]
        ),
        case!(
            "teach-unknown-class",
            |d, fx| {
                sess_copy(d, fx);
                std::fs::write(d.join("a.csv"), "id,label\np2,cat\np3,bird\n").unwrap();
            },
            ["teach", "--state", "{d}/sess", "--labels", "{d}/a.csv"],
            1,
            ["a.csv:3", "bird"]
        ),
        case!(
            "teach-unknown-id",
            |d, fx| {
                sess_copy(d, fx);
                std::fs::write(d.join("a.csv"), "\u{feff}id,label\n\"p2\",cat\nnope,dog\n")
                    .unwrap();
            },
            ["teach", "--state", "{d}/sess", "--labels", "{d}/a.csv"],
            1,
            ["a.csv:3", "nope"]
        ),
        case!(
            "teach-no-label-column",
            |d, fx| {
                sess_copy(d, fx);
                std::fs::write(d.join("a.csv"), "id,class\np2,cat\n").unwrap();
            },
            ["teach", "--state", "{d}/sess", "--labels", "{d}/a.csv"],
            1,
            ["a.csv", "label"]
        ),
        case!(
            "teach-label-studio-tie",
            |d, fx| {
                sess_copy(d, fx);
                let v = |c: &str| {
                    serde_json::json!({"was_cancelled": false, "result": [
                    {"type": "choices", "from_name": "label", "to_name": "text",
                     "value": {"choices": [c]}}]})
                };
                let e = serde_json::json!([{"data": {"alkit_id": "p4"},
                    "annotations": [v("cat"), v("dog")]}]);
                std::fs::write(d.join("e.json"), e.to_string()).unwrap();
            },
            ["teach", "--state", "{d}/sess", "--labels", "{d}/e.json"],
            1,
            ["e.json:1", "no majority"]
        ),
        case!(
            "teach-label-studio-choices-not-a-list",
            |d, fx| {
                sess_copy(d, fx);
                let e = serde_json::json!([{"data": {"alkit_id": "p4"}, "annotations": [
                    {"was_cancelled": false, "result": [{"type": "choices", "from_name": "label",
                     "to_name": "text", "value": {"choices": "cat"}}]}]}]);
                std::fs::write(d.join("e.json"), e.to_string()).unwrap();
            },
            ["teach", "--state", "{d}/sess", "--labels", "{d}/e.json"],
            1,
            ["e.json:1", "`value.choices` is a string"]
        ),
        case!(
            "teach-label-studio-annotations-not-a-list",
            |d, fx| {
                sess_copy(d, fx);
                let e = serde_json::json!([{"data": {"alkit_id": "p4"}, "annotations": {"0": 1}}]);
                std::fs::write(d.join("e.json"), e.to_string()).unwrap();
            },
            ["teach", "--state", "{d}/sess", "--labels", "{d}/e.json"],
            1,
            ["e.json:1", "`annotations` is an object"]
        ),
        case!(
            "teach-label-studio-unknown-class",
            |d, fx| {
                sess_copy(d, fx);
                let e = serde_json::json!([{"data": {"alkit_id": "p4"}, "annotations": [
                    {"was_cancelled": false, "result": [{"type": "choices", "from_name": "label",
                     "to_name": "text", "value": {"choices": ["bird"]}}]}]}]);
                std::fs::write(d.join("e.json"), e.to_string()).unwrap();
            },
            ["teach", "--state", "{d}/sess", "--labels", "{d}/e.json"],
            1,
            ["e.json:1", "bird"]
        ),
        case!(
            "label-remote-host-without-flag",
            |d, fx| {
                sess_copy(d, fx);
            },
            ["label", "--state", "{d}/sess", "--host", "0.0.0.0"],
            1,
            ["--host 0.0.0.0", "--allow-remote"]
        ),
        case!(
            "label-host-not-an-address",
            none,
            ["label", "--state", "{d}/sess", "--host", "localhost:80"],
            2,
            ["--host"]
        ),
        case!(
            "label-empty-batch",
            |d, fx| {
                sess_copy(d, fx);
            },
            ["label", "--state", "{d}/sess", "--n", "0"],
            2,
            ["--n 0"]
        ),
        case!(
            "label-not-a-session",
            none,
            ["label", "--state", "{d}/nothing"],
            1,
            ["nothing", "not a session folder"]
        ),
        // ------------------------------------------------------------------- curve runs
        case!(
            "run-labeled-cut",
            |d, fx| {
                let r = run_copy(d, fx);
                edit_json(&r.join("runs/random-seed0.json"), |v| {
                    v["labeled"].as_array_mut().unwrap().truncate(3);
                });
            },
            ["curve", "--resume", "{d}/run"],
            1,
            ["random-seed0.json", "tagged cycle 0"]
        ),
        case!(
            "run-record-edited",
            |d, fx| {
                let r = run_copy(d, fx);
                edit_json(&r.join("runs/random-seed0.json"), |v| {
                    v["records"][1]["labeled"] = 11.into()
                });
            },
            ["curve", "--resume", "{d}/run"],
            1,
            ["random-seed0.json", "record 1 says cycle 1 with 11 labels"]
        ),
        case!(
            "run-spec-invalid",
            |d, fx| {
                let r = run_copy(d, fx);
                std::fs::write(r.join("run.json"), "[1,2").unwrap();
            },
            ["curve", "--resume", "{d}/run"],
            1,
            ["run.json", "invalid JSON"]
        ),
        case!(
            "run-out-is-checkpoint",
            none,
            ["curve", "--cycles", "0", "--steps", "1", "--out", "{ck}"],
            2,
            ["out", "checkpoint"]
        ),
        // --------------------------------------------------------------- metrics files
        case!(
            "metrics-confidence-above-1",
            |d, _| {
                std::fs::write(
                    d.join("m.csv"),
                    "score,correct,confidence\n0.1,1,0.9\n0.2,0,1.5\n",
                )
                .unwrap();
            },
            ["metrics", "--scores", "{d}/m.csv"],
            1,
            ["m.csv:3", "confidence"]
        ),
        case!(
            "metrics-extra-field",
            |d, _| {
                std::fs::write(d.join("m.csv"), "score,is_ood\n0.1,1\n0.2,0,7\n").unwrap();
            },
            ["metrics", "--scores", "{d}/m.csv"],
            1,
            ["m.csv:3"]
        ),
        case!(
            "metrics-column-twice",
            |d, _| {
                std::fs::write(
                    d.join("m.csv"),
                    "score,is_ood,score\n0.1,1,0.9\n0.2,0,0.3\n",
                )
                .unwrap();
            },
            ["metrics", "--scores", "{d}/m.csv"],
            1,
            ["m.csv:1", "`score` twice"]
        ),
        case!(
            "metrics-no-score",
            |d, _| {
                std::fs::write(d.join("m.csv"), "value,is_ood\n0.1,1\n").unwrap();
            },
            ["metrics", "--scores", "{d}/m.csv"],
            1,
            ["m.csv", "score"]
        ),
        case!(
            "metrics-flag-2",
            |d, _| {
                std::fs::write(d.join("m.csv"), "score,is_ood\n0.1,1\n0.3,0\n0.2,2\n").unwrap();
            },
            ["metrics", "--scores", "{d}/m.csv"],
            1,
            ["m.csv:4", "is_ood"]
        ),
        case!(
            "metrics-nan-score",
            |d, _| {
                std::fs::write(d.join("m.csv"), "score,is_ood\n0.1,1\nnan,0\n").unwrap();
            },
            ["metrics", "--scores", "{d}/m.csv"],
            1,
            ["m.csv:3", "score"]
        ),
        // -------------------------------------------------- a hostile Hub endpoint
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
        // -------------------------------------------------------- more sessions
        case!(
            "sess-query-bald-without-dropout",
            |d, fx| {
                sess_copy(d, fx);
            },
            [
                "query",
                "--state",
                "{d}/sess",
                "--n",
                "1",
                "--scorer",
                "bald",
                "--out",
                "{d}/q.csv"
            ],
            2,
            ["bald", "dropout"]
        ),
        case!(
            "train-cnn-on-feature-vectors",
            |_, _| {},
            [
                "train",
                "--data",
                "{data}/embeddings/mnist-rp32.safetensors",
                "--model",
                "cnn",
                "--steps",
                "2",
                "--out",
                "{d}/ck"
            ],
            2,
            ["--model", "`cnn` is convolutional", "[32]", "`linear`"]
        ),
        case!(
            "init-seed-subfolder-not-a-class",
            |d, fx| {
                let (train, _) = shipped();
                let items: Vec<(usize, Option<String>)> = (0..6)
                    .map(|i| (i, (i < 2).then(|| "one".to_string())))
                    .collect();
                write_image_folder(&d.join("photos"), &train, &items).unwrap();
                let _ = fx;
            },
            [
                "init",
                "--pool",
                "{d}/photos",
                "--classes",
                "cat,dog",
                "--state",
                "{d}/s"
            ],
            1,
            ["subfolder `one/`", "--classes", "photos/one"]
        ),
        case!(
            "calibrate-bald-without-dropout",
            |_, _| {},
            [
                "calibrate",
                "--data",
                "{data}",
                "--model",
                "mlp",
                "--scorer",
                "bald",
                "--out",
                "{d}/cal"
            ],
            2,
            ["bald", "`mlp-dropout`", "curve, init, bench"]
        ),
        case!(
            "init-pool-label-cell-not-a-class",
            |d, _| {
                let pool = "id,label,a\np0,cat,1\n\n\"p\n1\",dog,2\np2,bird,3\n";
                std::fs::write(d.join("p.csv"), pool).unwrap();
            },
            [
                "init",
                "--pool",
                "{d}/p.csv",
                "--state",
                "{d}/s",
                "--classes",
                "cat,dog"
            ],
            1,
            ["p.csv", "item `p2`", "`bird` is not one of the classes"]
        ),
        case!(
            "init-labels-unknown-class",
            |d, _| {
                std::fs::write(
                    d.join("p.csv"),
                    "id,a
x,1
y,2
z,3
",
                )
                .unwrap();
                std::fs::write(
                    d.join("l.csv"),
                    "\u{feff}id,label
x,cat
y,bird
",
                )
                .unwrap();
            },
            [
                "init",
                "--pool",
                "{d}/p.csv",
                "--state",
                "{d}/s",
                "--classes",
                "cat,dog",
                "--labels",
                "{d}/l.csv"
            ],
            1,
            ["l.csv:3", "bird"]
        ),
        case!(
            "init-over-a-session",
            |d, fx| {
                sess_copy(d, fx);
            },
            ["init", "--pool", "{pool}", "--state", "{d}/sess"],
            1,
            ["already holds a session", "--force"]
        ),
        case!(
            "flag-score-out-is-run-state",
            none,
            ["score", "--checkpoint", "{ck}", "--out", "{run}/run.json"],
            2,
            ["out"]
        ),
        // ----------------------------------------------------------------------- flags
        case!(
            "flag-seeds-2^32",
            none,
            ["curve", "--seeds", "4294967296", "--out", "{d}/o"],
            2,
            ["seeds"]
        ),
        case!(
            "flag-seed-past-u64",
            none,
            [
                "curve",
                "--seed",
                "18446744073709551615",
                "--seeds",
                "2",
                "--out",
                "{d}/o"
            ],
            2,
            ["seed"]
        ),
        case!(
            "flag-scorer-repeated",
            none,
            [
                "curve",
                "--scorer",
                "entropy",
                "--scorer",
                "entropy,entropy",
                "--out",
                "{d}/o"
            ],
            2,
            ["entropy"]
        ),
        case!(
            "flag-beta-nan",
            none,
            [
                "score",
                "--checkpoint",
                "{ck}",
                "--select",
                "power",
                "--beta",
                "NaN",
                "--out",
                "{d}/s.csv"
            ],
            2,
            ["beta"]
        ),
        case!(
            "flag-perturbations-0",
            none,
            [
                "score",
                "--checkpoint",
                "{ck}",
                "--scorer",
                "exgrad",
                "--perturbations",
                "0",
                "--out",
                "{d}/s.csv"
            ],
            2,
            ["perturbations"]
        ),
        case!(
            "flag-surface-mc-samples-0",
            none,
            ["surface", "--mc-samples", "0", "--out", "{d}/o"],
            2,
            ["--mc-samples"]
        ),
        case!(
            "flag-surface-seeds-0",
            none,
            ["surface", "--seeds", "0", "--out", "{d}/o"],
            2,
            ["seeds"]
        ),
        case!(
            "flag-surface-points-0",
            none,
            ["surface", "--points", "0", "--out", "{d}/o"],
            2,
            ["points", "20"]
        ),
        case!(
            "flag-surface-noise-nan",
            none,
            ["surface", "--noise", "NaN", "--out", "{d}/o"],
            2,
            ["noise", "NaN"]
        ),
        case!(
            "flag-surface-steps-0",
            none,
            ["surface", "--steps", "0", "--out", "{d}/o"],
            2,
            ["steps"]
        ),
        case!(
            "flag-surface-members-huge",
            none,
            [
                "surface",
                "--model",
                "ensemble",
                "--members",
                "100000",
                "--out",
                "{d}/o"
            ],
            2,
            ["members", "100000"]
        ),
        case!(
            "flag-curve-subsample-below-batch",
            none,
            [
                "curve",
                "--subsample",
                "5",
                "--query",
                "10",
                "--out",
                "{d}/o"
            ],
            2,
            ["subsample", "5"]
        ),
        case!(
            "flag-query-subsample-below-batch",
            |d, fx| {
                sess_copy(d, fx);
            },
            [
                "query",
                "--state",
                "{d}/sess",
                "--n",
                "2",
                "--subsample",
                "1",
                "--out",
                "{d}/q.csv"
            ],
            2,
            ["subsample"]
        ),
        case!("flag-bench-n-0", none, ["bench", "--n", "0"], 2, ["n"]),
        case!(
            "flag-bench-repeats-0",
            none,
            ["bench", "--repeats", "0"],
            2,
            ["repeats"]
        ),
        case!(
            "flag-ood-checkpoint-with-model",
            none,
            [
                "ood",
                "--checkpoint",
                "{ck}",
                "--model",
                "cnn",
                "--train-data",
                "{data}",
                "--ood-data",
                "{data}",
                "--out",
                "{d}/o"
            ],
            2,
            ["--model"]
        ),
        case!(
            "flag-calibrate-checkpoint-with-steps",
            none,
            [
                "calibrate",
                "--checkpoint",
                "{ck}",
                "--steps",
                "5",
                "--out",
                "{d}/o"
            ],
            2,
            ["--steps"]
        ),
        case!(
            "flag-ood-out-is-input",
            none,
            [
                "ood",
                "--checkpoint",
                "{ck}",
                "--train-data",
                "{data}",
                "--ood-data",
                "{data}",
                "--out",
                "{data}"
            ],
            2,
            ["out", "input"]
        ),
        case!(
            // A settings error raised under the library's context ("evaluating on ...") keeps
            // its exit code: the binary reads `Error::kind`.
            "calibrate-checkpoint-on-other-items",
            |d, _| {
                for split in ["train", "test"] {
                    for class in ["a", "b"] {
                        let dir = d.join("f").join(split).join(class);
                        std::fs::create_dir_all(&dir).unwrap();
                        png_of(&dir.join("1.png"), 8, 8);
                        png_of(&dir.join("2.png"), 8, 8);
                    }
                }
            },
            [
                "calibrate",
                "--checkpoint",
                "{ck}",
                "--data",
                "{d}/f",
                "--out",
                "{d}/o"
            ],
            2,
            [
                "evaluating on",
                "/f",
                "expects items [1, 28, 28]",
                "[1, 8, 8]"
            ]
        ),
        case!(
            "flag-calibrate-out-is-session",
            none,
            ["calibrate", "--checkpoint", "{ck}", "--out", "{sess}"],
            2,
            ["out", "session"]
        ),
        case!(
            "flag-surface-out-is-run",
            none,
            ["surface", "--out", "{run}"],
            2,
            ["out", "curve run"]
        ),
        case!(
            "flag-score-out-is-checkpoint",
            none,
            ["score", "--checkpoint", "{ck}", "--out", "{ck}/config.json"],
            2,
            ["out"]
        ),
        case!(
            "flag-train-out-is-data",
            none,
            ["train", "--steps", "1", "--data", "{data}", "--out", "{data}"],
            2,
            ["out"]
        ),
        case!(
            "flag-score-top-0",
            none,
            [
                "score",
                "--checkpoint",
                "{ck}",
                "--top",
                "0",
                "--out",
                "{d}/s.csv"
            ],
            2,
            ["--top", "0 items would be kept"]
        ),
        case!(
            "flag-select-power-on-negative-scores",
            none,
            [
                "score",
                "--checkpoint",
                "{ck}",
                "--scorer",
                "max-logit",
                "--select",
                "power",
                "--top",
                "3",
                "--out",
                "{d}/s.csv"
            ],
            2,
            ["--select", "power selection", "softmax or softrank"]
        ),
        case!(
            "env-rayon-threads-100000",
            none,
            ["score", "--checkpoint", "{ck}", "--out", "{d}/s.csv"],
            2,
            ["RAYON_NUM_THREADS=100000", "from 1 to"],
            env[("RAYON_NUM_THREADS", "100000")]
        ),
        case!(
            "flag-score-batch-10^8",
            none,
            [
                "score",
                "--checkpoint",
                "{ck}",
                "--batch",
                "100000000",
                "--out",
                "{d}/s.csv"
            ],
            2,
            ["--batch", "100000000", "limit"]
        ),
        case!(
            "flag-score-batch-10^6",
            none,
            [
                "score",
                "--checkpoint",
                "{ck}",
                "--batch",
                "1000000",
                "--out",
                "{d}/s.csv"
            ],
            2,
            ["--batch", "1000000", "limit"]
        ),
        case!(
            "flag-score-perturbations-10^8",
            none,
            [
                "score",
                "--checkpoint",
                "{ck}",
                "--scorer",
                "regrad-star",
                "--perturbations",
                "100000000",
                "--out",
                "{d}/s.csv"
            ],
            2,
            ["--perturbations", "1024"]
        ),
        case!(
            "flag-score-mc-samples-10^8",
            none,
            [
                "score",
                "--checkpoint",
                "{ck}",
                "--scorer",
                "bald",
                "--mc-samples",
                "100000000",
                "--out",
                "{d}/s.csv"
            ],
            2,
            ["--mc-samples", "10000"]
        ),
        case!(
            "flag-bench-n-huge",
            none,
            ["bench", "--n", "18446744073709551615"],
            2,
            ["--n", "memory"]
        ),
        case!(
            "flag-bench-batch-10^8",
            none,
            ["bench", "--batch", "100000000"],
            2,
            ["--batch", "limit"]
        ),
        case!(
            "flag-bench-batch-100",
            none,
            ["bench", "--batch", "100"],
            2,
            ["--batch", "256", "--checkpoint"]
        ),
        case!(
            "flag-bench-repeats-10^6",
            none,
            ["bench", "--repeats", "1000000"],
            2,
            ["--repeats", "1000"]
        ),
        case!(
            "flag-train-steps-huge",
            none,
            ["train", "--steps", "18446744073709551615", "--out", "{d}/o"],
            2,
            ["--steps", "100000000"]
        ),
        case!(
            "flag-surface-mc-samples-huge",
            none,
            [
                "surface",
                "--model",
                "mc-dropout",
                "--mc-samples",
                "100000000",
                "--out",
                "{d}/o"
            ],
            2,
            ["--mc-samples", "10000"]
        ),
        case!(
            "flag-ensemble-huge",
            |d, _| {
                std::fs::write(d.join("p.csv"), POOL).unwrap();
            },
            [
                "init",
                "--pool",
                "{d}/p.csv",
                "--state",
                "{d}/s",
                "--ensemble",
                "1000000"
            ],
            2,
            ["ensemble", "1000000"]
        ),
        // ------------------------------------------------------------------ shards and merge
        case!(
            "merge-checkpoint-retrained-in-place",
            |d, fx| {
                let ck = ck_copy(d, fx);
                shards_with(d, &ck, &fx.data(), || {
                    // New weights, same shapes, same path: a retraining in place.
                    edit_weights(&ck, |v| {
                        for t in v.iter_mut() {
                            t.3[..4].copy_from_slice(&0.25f32.to_le_bytes());
                        }
                    })
                });
            },
            [
                "merge",
                "--top",
                "40",
                "--out",
                "{d}/m.csv",
                "{d}/s0.csv",
                "{d}/s1.csv",
                "{d}/s2.csv"
            ],
            1,
            ["s2.csv.shard.json", "checkpoint's content", "s0.csv"]
        ),
        case!(
            "merge-pool-rewritten-in-place",
            |d, fx| {
                let pool = idx_copy(d, fx);
                shards_with(d, &fx.ck(), &pool, || {
                    // One pixel of one image changed, as many items: the same path and size.
                    edit_idx(&pool, "train-images-idx3-ubyte", |b| b[16 + 300] ^= 0x40)
                });
            },
            [
                "merge",
                "--top",
                "40",
                "--out",
                "{d}/m.csv",
                "{d}/s0.csv",
                "{d}/s1.csv",
                "{d}/s2.csv"
            ],
            1,
            ["s2.csv.shard.json", "pool's content", "s0.csv"]
        ),
        case!(
            "merge-manifest-format-1",
            |d, fx| {
                shards(d, fx);
                edit_json(&d.join("s1.csv.shard.json"), |v| {
                    let m = v.as_object_mut().unwrap();
                    m.insert("format".into(), 1.into());
                    m.remove("checkpoint_hash");
                    m.remove("pool_fingerprint");
                });
            },
            [
                "merge",
                "--top",
                "40",
                "--out",
                "{d}/m.csv",
                "{d}/s0.csv",
                "{d}/s1.csv",
                "{d}/s2.csv"
            ],
            1,
            ["s1.csv.shard.json", "format 1", "score this shard again"]
        ),
        case!(
            "merge-row-duplicated",
            |d, fx| {
                shards(d, fx);
                // Shard 2's last row replaced by its first: the count still matches.
                let p = d.join("s2.csv");
                let text = std::fs::read_to_string(&p).unwrap();
                let mut lines: Vec<&str> = text.lines().collect();
                let n = lines.len();
                lines[n - 1] = lines[1];
                std::fs::write(&p, lines.join("\n") + "\n").unwrap();
            },
            [
                "merge",
                "--top",
                "40",
                "--out",
                "{d}/m.csv",
                "{d}/s0.csv",
                "{d}/s1.csv",
                "{d}/s2.csv"
            ],
            1,
            ["s2.csv:41:", "is also at", "s2.csv:2"]
        ),
        case!(
            "env-slurm-task-count-0",
            none,
            ["score", "--checkpoint", "{ck}", "--data", "{data}", "--out", "{d}/o.csv"],
            2,
            ["SLURM_ARRAY_TASK_COUNT=0", "at least one task"],
            env [("SLURM_ARRAY_TASK_ID", "0"), ("SLURM_ARRAY_TASK_COUNT", "0")]
        ),
        case!(
            "env-slurm-task-id-past-the-array",
            none,
            ["score", "--checkpoint", "{ck}", "--data", "{data}", "--out", "{d}/o.csv"],
            2,
            ["SLURM_ARRAY_TASK_ID=7", "past the array", "0 to 3"],
            env [
                ("SLURM_ARRAY_TASK_ID", "7"),
                ("SLURM_ARRAY_TASK_MIN", "0"),
                ("SLURM_ARRAY_TASK_COUNT", "4")
            ]
        ),
        case!(
            "env-slurm-one-task-rerun",
            none,
            ["score", "--checkpoint", "{ck}", "--data", "{data}", "--out", "{d}/o.csv"],
            2,
            ["SLURM_ARRAY_TASK_COUNT=1", "one-task array", "5/N"],
            env [
                ("SLURM_ARRAY_TASK_ID", "5"),
                ("SLURM_ARRAY_TASK_MIN", "5"),
                ("SLURM_ARRAY_TASK_MAX", "5"),
                ("SLURM_ARRAY_TASK_COUNT", "1")
            ]
        ),
        case!(
            "env-slurm-array-with-gaps",
            none,
            ["score", "--checkpoint", "{ck}", "--data", "{data}", "--out", "{d}/o.csv"],
            2,
            ["SLURM_ARRAY_TASK_COUNT=2", "SLURM_ARRAY_TASK_MAX=7", "gaps"],
            env [
                ("SLURM_ARRAY_TASK_ID", "3"),
                ("SLURM_ARRAY_TASK_MIN", "3"),
                ("SLURM_ARRAY_TASK_MAX", "7"),
                ("SLURM_ARRAY_TASK_COUNT", "2")
            ]
        ),
        case!(
            "env-slurm-array-step-2",
            none,
            ["score", "--checkpoint", "{ck}", "--data", "{data}", "--out", "{d}/o.csv"],
            2,
            ["SLURM_ARRAY_TASK_STEP=2", "step"],
            env [
                ("SLURM_ARRAY_TASK_ID", "2"),
                ("SLURM_ARRAY_TASK_MIN", "0"),
                ("SLURM_ARRAY_TASK_MAX", "6"),
                ("SLURM_ARRAY_TASK_COUNT", "4"),
                ("SLURM_ARRAY_TASK_STEP", "2")
            ]
        ),
        case!(
            "env-slurm-task-id-not-a-number",
            none,
            ["score", "--checkpoint", "{ck}", "--data", "{data}", "--out", "{d}/o.csv"],
            2,
            ["SLURM_ARRAY_TASK_ID=x1", "not a whole number"],
            env [("SLURM_ARRAY_TASK_ID", "x1"), ("SLURM_ARRAY_TASK_COUNT", "4")]
        ),
        case!(
            "env-k8s-index-past-completions",
            none,
            [
                "score",
                "--checkpoint",
                "{ck}",
                "--data",
                "{data}",
                "--shards",
                "16",
                "--out",
                "{d}/o.csv"
            ],
            2,
            ["JOB_COMPLETION_INDEX=16", "shard count 16"],
            env[("JOB_COMPLETION_INDEX", "16")]
        ),
    ]
}

/// A Hub endpoint whose answers try to escape the cache or break the client; the repository
/// name picks the misbehaviour.
fn hostile_hub(path: &str) -> (String, Vec<u8>) {
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

#[test]
fn every_case_is_listed_in_the_contributing_guide() {
    let guide =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("CONTRIBUTING.md"))
            .unwrap();
    let missing: Vec<&str> = cases()
        .iter()
        .map(|c| c.name)
        .filter(|n| !guide.contains(&format!("`{n}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "CONTRIBUTING.md's bad-input table lacks {missing:?}"
    );
}

#[test]
fn every_bad_input_is_refused_naming_the_culprit_and_changes_nothing() {
    let root = tmp("hostile");
    let fx = Fx {
        root: root.join("fx"),
    };
    copy_dir(&data_dir(), &fx.data());
    std::fs::write(fx.pool(), POOL).unwrap();
    let s = |p: PathBuf| p.display().to_string();
    ok(&[
        "train",
        "--model",
        "mlp",
        "--steps",
        "2",
        "--data",
        &s(fx.data()),
        "--out",
        &s(fx.ck()),
    ]);
    ok(&[
        "init",
        "--pool",
        &s(fx.pool()),
        "--state",
        &s(fx.sess()),
        "--steps",
        "2",
    ]);
    ok(&[
        "curve",
        "--data",
        &s(fx.data()),
        "--model",
        "mlp",
        "--scorer",
        "random",
        "--cycles",
        "1",
        "--steps",
        "1",
        "--initial",
        "10",
        "--query",
        "5",
        "--out",
        &s(fx.run()),
    ]);
    let hub = serve(hostile_hub);
    let fixtures = snapshot(&fx.root);
    let cases = cases();
    assert!(cases.len() >= 60, "{} cases", cases.len());
    let mut names = std::collections::HashSet::new();
    assert!(
        cases.iter().all(|c| names.insert(c.name)),
        "case names repeat"
    );
    // Two workers: CI has two cores.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::<String>::new());
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| loop {
                let k = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let Some(c) = cases.get(k) else { break };
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    run_case(c, &root, &fx, &hub)
                }))
                .unwrap_or_else(|_| Err("the case's set-up panicked".into()));
                if let Err(e) = r {
                    failures.lock().unwrap().push(format!("{}: {e}", c.name));
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    assert!(
        snapshot(&fx.root) == fixtures,
        "a case changed the shared fixtures"
    );
}

fn run_case(c: &Case, root: &Path, fx: &Fx, hub: &str) -> std::result::Result<(), String> {
    let d = root.join("cases").join(c.name);
    std::fs::create_dir_all(&d).unwrap();
    (c.setup)(&d, fx);
    let before = snapshot(&d);
    let s = |p: PathBuf| p.display().to_string();
    let args: Vec<String> = c
        .args
        .iter()
        .map(|a| {
            a.replace("{d}", &s(d.clone()))
                .replace("{data}", &s(fx.data()))
                .replace("{ck}", &s(fx.ck()))
                .replace("{sess}", &s(fx.sess()))
                .replace("{pool}", &s(fx.pool()))
                .replace("{run}", &s(fx.run()))
        })
        .collect();
    // Cases named hub-* talk to the hostile endpoint; every other case is offline.
    let online = c.name.starts_with("hub-");
    let mut cmd = alkit_cmd();
    cmd.arg("-q")
        .args(&args)
        .env("HF_HUB_OFFLINE", if online { "0" } else { "1" })
        .env("HF_ENDPOINT", hub)
        .env("HF_HUB_CACHE", d.join("hub-cache"));
    for k in SCHEDULER_VARS {
        cmd.env_remove(k);
    }
    cmd.envs(c.env.iter().copied());
    let o = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    if o.status.code() != Some(c.code) {
        return Err(format!(
            "exit {:?}, expected {}: {err}",
            o.status.code(),
            c.code
        ));
    }
    if err.contains("panicked") {
        return Err(format!("panicked: {err}"));
    }
    if let Some(m) = c.says.iter().find(|m| !err.contains(**m)) {
        return Err(format!("stderr does not name `{m}`: {err}"));
    }
    let after = snapshot(&d);
    if after != before {
        let changed: Vec<_> = after
            .keys()
            .chain(before.keys())
            .filter(|k| after.get(*k) != before.get(*k))
            .map(|k| k.display().to_string())
            .collect();
        return Err(format!("wrote or changed {changed:?}"));
    }
    Ok(())
}
