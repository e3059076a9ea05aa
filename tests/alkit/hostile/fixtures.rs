//! The shared fixtures of the bad-input table and the bytes its cases are built from.

use super::*;

/// Shared inputs, built once: a copy of the shipped data, a 2-step MLP checkpoint, a labeling
/// session on a six-item CSV pool, and a finished one-cycle curve run.
pub(super) struct Fx {
    pub(super) root: PathBuf,
}

impl Fx {
    pub(super) fn data(&self) -> PathBuf {
        self.root.join("data")
    }
    pub(super) fn ck(&self) -> PathBuf {
        self.root.join("ck")
    }
    pub(super) fn sess(&self) -> PathBuf {
        self.root.join("sess")
    }
    pub(super) fn pool(&self) -> PathBuf {
        self.root.join("pool.csv")
    }
    pub(super) fn run(&self) -> PathBuf {
        self.root.join("run")
    }
}

pub(super) const POOL: &str = "id,label,a,b\np0,cat,0.1,0.2\np1,dog,0.3,0.1\np2,,0.5,0.5\np3,,0.9,0.1\np4,,0.2,0.8\np5,,0.4,0.4\n";

pub(super) fn ok(args: &[&str]) {
    let o = alkit_cmd().arg("-q").args(args).output().unwrap();
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Every file under `root` with its bytes, but for session lock files: an empty file a
/// session command may create to hold the folder (`alkit::session::lock`).
pub(super) fn snapshot(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    pub(super) fn go(dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
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

pub(super) fn edit_json(path: &Path, f: impl FnOnce(&mut serde_json::Value)) {
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

/// A safetensors file: `(name, dtype, shape, bytes)` per tensor, optional metadata.
pub(super) fn st(
    tensors: &[(&str, &str, &[usize], Vec<u8>)],
    meta: Option<(&str, &str)>,
) -> Vec<u8> {
    st_meta(tensors, meta.as_slice())
}

/// A safetensors file with the metadata `meta` (key, value pairs).
pub(super) fn st_meta(
    tensors: &[(&str, &str, &[usize], Vec<u8>)],
    meta: &[(&str, &str)],
) -> Vec<u8> {
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

pub(super) fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub(super) fn i64s(v: &[i64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A two-item pool `x (2, 4)` with labels `y`.
pub(super) fn st_pool(y: &[i64]) -> Vec<u8> {
    st(
        &[
            ("x", "F32", &[y.len(), 4], f32s(&vec![0.5; 4 * y.len()])),
            ("y", "I64", &[y.len()], i64s(y)),
        ],
        None,
    )
}

/// An `.npy` file (format 1.0) of dtype `descr`, shape text `shape` (`(4, 3)`) and `data`.
pub(super) fn npy(descr: &str, shape: &str, data: &[u8]) -> Vec<u8> {
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
pub(super) fn npz(members: &[(&str, Vec<u8>)]) -> Vec<u8> {
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
pub(super) fn unicode(items: &[&str], chars: usize) -> Vec<u8> {
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
pub(super) fn png_declaring(w: u32, h: u32) -> Vec<u8> {
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
pub(super) fn png_of(path: &Path, w: usize, h: usize) {
    alkit::data::image::save_png(path, &vec![0.5; w * h], &[1, h, w]).unwrap();
}

/// The case folder's copy of the shipped IDX data, for editing.
pub(super) fn idx_copy(d: &Path, fx: &Fx) -> PathBuf {
    let dir = d.join("idx");
    copy_dir(&fx.data(), &dir);
    dir
}

pub(super) fn gunzip(p: &Path) -> Vec<u8> {
    use std::io::Read;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(p).unwrap())
        .read_to_end(&mut out)
        .unwrap();
    out
}

/// Replaces `STEM.gz` in `dir` by a plain `STEM` holding `f(bytes)`.
pub(super) fn edit_idx(dir: &Path, stem: &str, f: impl FnOnce(&mut Vec<u8>)) {
    let gz = dir.join(format!("{stem}.gz"));
    let mut bytes = gunzip(&gz);
    f(&mut bytes);
    std::fs::remove_file(&gz).unwrap();
    std::fs::write(dir.join(stem), bytes).unwrap();
}

pub(super) fn ck_copy(d: &Path, fx: &Fx) -> PathBuf {
    let dir = d.join("ck");
    copy_dir(&fx.ck(), &dir);
    dir
}

/// A checkpoint copy whose weights are `pytorch_model.bin` holding `bytes`.
pub(super) fn ck_with_bin(d: &Path, fx: &Fx, bytes: &[u8]) {
    let c = ck_copy(d, fx);
    std::fs::remove_file(c.join("model.safetensors")).unwrap();
    std::fs::write(c.join("pytorch_model.bin"), bytes).unwrap();
}

/// A fixture written by torch.save (tests/fixtures/pytorch).
pub(super) fn torch_fixture(name: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/pytorch")
            .join(name),
    )
    .unwrap()
}

/// A zip archive laid out as torch.save writes it: `archive/data.pkl` and the storages.
pub(crate) fn torch_zip(pickle: &[u8], storages: &[(&str, &[u8])]) -> Vec<u8> {
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
pub(super) fn pkl_int(v: i64) -> Vec<u8> {
    let mut b = vec![0x8a, 8];
    b.extend_from_slice(&v.to_le_bytes());
    b
}

pub(super) fn pkl_str(s: &str) -> Vec<u8> {
    let mut b = vec![b'X'];
    b.extend_from_slice(&(s.len() as u32).to_le_bytes());
    b.extend_from_slice(s.as_bytes());
    b
}

/// The pickle of `{name: tensor}`: a 1-d float tensor of `size` elements at `offset` in
/// storage `"0"`, which declares `numel` elements.
pub(super) fn pkl_one_tensor(name: &str, numel: i64, offset: i64, size: i64) -> Vec<u8> {
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

pub(super) fn sess_copy(d: &Path, fx: &Fx) -> PathBuf {
    let dir = d.join("sess");
    copy_dir(&fx.sess(), &dir);
    dir
}

/// Rewrites the safetensors file of a checkpoint copy with `f` applied to its tensors
/// `(name, dtype, shape, bytes)`.
pub(super) fn edit_weights(
    ck: &Path,
    f: impl FnOnce(&mut Vec<(String, String, Vec<usize>, Vec<u8>)>),
) {
    let p = ck.join("model.safetensors");
    let bytes = std::fs::read(&p).unwrap();
    let t = ::safetensors::SafeTensors::deserialize(&bytes).unwrap();
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

pub(super) fn run_copy(d: &Path, fx: &Fx) -> PathBuf {
    let dir = d.join("run");
    copy_dir(&fx.run(), &dir);
    // The run reads its data from the path it recorded: keep it pointing at the fixture's.
    dir
}

pub(super) fn none(_: &Path, _: &Fx) {}
