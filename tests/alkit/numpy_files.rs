//! Embedding files as the real writers make them: `np.save` (float32, float16, float64; format
//! versions 1.0, 2.0, 3.0), `np.savez` and `np.savez_compressed` (unicode ids and classes, a
//! test split, `-1` labels), and pyarrow's `pq.write_table` (`list<float>`,
//! `fixed_size_list<float>`, `list<double>`), written by tests/reference/numpy_embeddings.py.
//! Values must equal numpy's `astype(float32)` bit for bit, read whole and streamed alike; a
//! head's curve on an `.npz` and scores over an `.npy` pool run from the command line; what
//! the writers can make but alkit refuses is refused by name. Hand-made hostile files (a
//! truncated array, a header lying about its shape, an object dtype, a missing member,
//! repeated ids) are rows of the bad-input table (tests/alkit/hostile/).
//!
//! The files need a Python with numpy (`ALKIT_PYTHON`, see feature_methods.rs); the Parquet
//! part needs pyarrow in it too (scripts/refpython.sh installs both). Without them the test
//! skips with a message; with `ALKIT_REQUIRE_NUMPY=1` a missing one fails it.

use super::feature_methods::python;
use super::*;
use serde_json::Value;

/// The reference files in a fresh folder, and the script's manifest; `None` (a skip) when no
/// Python is named.
fn reference_files(dir: &Path) -> Option<Value> {
    let py = python()?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference/numpy_embeddings.py");
    let o = Command::new(py).arg(script).arg(dir).output().unwrap();
    assert!(
        o.status.success(),
        "numpy_embeddings.py: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    Some(serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap())
}

/// The f32 values numpy gave, raw little-endian.
fn raw_f32(path: &Path) -> Vec<u32> {
    std::fs::read(path)
        .unwrap()
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

/// `path` read whole, then streamed in chunks of 7 (checked equal to the whole read bit for
/// bit, ids too).
fn read_both(path: &Path) -> alkit::data::stream::Loaded {
    let hub = Hub::new(std::env::temp_dir().join("alkit-numpy-hub"), true);
    let src = Source::parse(&path.to_string_lossy()).unwrap();
    let loaded = load_source(&src, &hub, &mut Silent, None)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut stream = alkit::data::source::open(&src, &hub, &mut Silent, None).unwrap();
    assert_eq!(stream.item_shape(), &loaded.pool.item_shape[..]);
    let (mut ids, mut x) = (Vec::new(), Vec::new());
    while let Some(c) = stream.next_chunk(7).unwrap() {
        ids.extend(c.ids);
        x.extend(c.x);
    }
    assert_eq!(ids, loaded.pool.ids, "{}", path.display());
    assert_eq!(bits(&x), bits(&loaded.pool.x), "{}", path.display());
    let labels = alkit::data::source::pool_labels(&src, &hub, &mut Silent).unwrap();
    assert_eq!(labels.labels, loaded.pool.labels, "{}", path.display());
    assert_eq!(labels.classes, loaded.pool.classes, "{}", path.display());
    loaded
}

/// The error reading `path` whole gives, and the streamed read's (both must fail).
fn refused(path: &Path) -> (String, String) {
    let hub = Hub::new(std::env::temp_dir().join("alkit-numpy-hub"), true);
    let src = Source::parse(&path.to_string_lossy()).unwrap();
    let whole = load_source(&src, &hub, &mut Silent, None).map(|_| ());
    let streamed = alkit::data::source::open(&src, &hub, &mut Silent, None).and_then(|mut s| {
        while s.next_chunk(5)?.is_some() {}
        Ok(())
    });
    match (whole, streamed) {
        (Err(a), Err(b)) => (a.to_string(), b.to_string()),
        (a, b) => panic!("{} was read: {a:?} {b:?}", path.display()),
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| match s {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect()
}

fn labels_of(v: &Value) -> Vec<Option<u32>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|l| u32::try_from(l.as_i64().unwrap()).ok())
        .collect()
}

#[test]
fn numpy_s_and_pyarrow_s_embedding_files_read_to_the_bit() {
    let dir = tmp("numpy-files");
    let Some(manifest) = reference_files(&dir) else {
        return;
    };
    // np.save, every float type and header version: an unlabeled pool with position ids.
    for (file, want) in [
        ("pool32.npy", "pool32.f32"),
        ("pool16.npy", "pool16.f32"),
        ("pool64.npy", "pool64.f32"),
        ("v2.npy", "pool32.f32"),
        ("v3.npy", "pool32.f32"),
    ] {
        let l = read_both(&dir.join(file));
        assert_eq!(bits(&l.pool.x), raw_f32(&dir.join(want)), "{file}");
        assert_eq!(l.pool.item_shape, vec![8], "{file}");
        assert_eq!(
            l.pool.ids,
            (0..50).map(|i| i.to_string()).collect::<Vec<_>>()
        );
        assert!(l.pool.labels.iter().all(Option::is_none) && l.test.is_none());
    }
    // np.savez (stored) and np.savez_compressed (deflated, float16): the whole layout.
    let ids = strings(&manifest["ids"]);
    let classes = strings(&manifest["classes"]);
    for (file, want) in [("emb.npz", "emb.f32"), ("emb_c.npz", "emb_c.f32")] {
        let l = read_both(&dir.join(file));
        assert_eq!(bits(&l.pool.x), raw_f32(&dir.join(want)), "{file}");
        assert_eq!(l.pool.item_shape, vec![6]);
        assert_eq!(l.pool.ids, ids, "{file}");
        assert_eq!(l.pool.labels, labels_of(&manifest["labels"]), "{file}");
        assert_eq!(l.pool.classes, classes, "{file}");
        let test = l.test.expect("the test split");
        assert_eq!(test.labels, labels_of(&manifest["test_labels"]));
        assert_eq!(test.classes, classes);
        if file == "emb.npz" {
            assert_eq!(bits(&test.x), raw_f32(&dir.join("emb_test.f32")));
        }
    }
    // -1 labels are unlabeled items; integer ids are their decimal text.
    let l = read_both(&dir.join("partial.npz"));
    assert_eq!(l.pool.labels, labels_of(&manifest["partial_labels"]));
    assert_eq!(l.pool.labels[0], None);
    assert_eq!(l.pool.ids[0], "1000");
    assert_eq!(l.pool.classes, vec!["0", "1", "2"]);

    // What numpy writes but alkit refuses, by name and position.
    for (file, says) in [
        ("fortran.npy", "Fortran (column) order"),
        (
            "object.npy",
            "`|O` (Python objects): refused, alkit never unpickles",
        ),
        (
            "big64.npy",
            "at flat position 29, not finite or beyond float32's range",
        ),
        ("no_features.npz", "has no array `features`"),
        (
            "repeated_ids.npz",
            "array `ids`: id `doc-003-é` is given to items 3 and 7",
        ),
    ] {
        let (whole, streamed) = refused(&dir.join(file));
        for e in [whole, streamed] {
            assert!(e.contains(file) && e.contains(says), "{file}: {e}");
        }
    }

    if manifest["parquet"] != Value::Bool(true) {
        assert!(
            std::env::var("ALKIT_REQUIRE_NUMPY").as_deref() != Ok("1"),
            "ALKIT_REQUIRE_NUMPY=1 but pyarrow does not import in ALKIT_PYTHON \
             (scripts/refpython.sh installs it)"
        );
        #[allow(clippy::print_stderr)]
        {
            eprintln!("skipped the Parquet part: pyarrow does not import (scripts/refpython.sh)");
        }
        return;
    }
    for file in ["emb.parquet", "emb_fixed.parquet"] {
        let l = read_both(&dir.join(file));
        assert_eq!(bits(&l.pool.x), raw_f32(&dir.join("emb.f32")), "{file}");
        assert_eq!(l.pool.item_shape, vec![6]);
        assert_eq!(l.pool.ids, ids, "{file}");
        assert_eq!(l.pool.labels, labels_of(&manifest["labels"]), "{file}");
        assert_eq!(l.pool.classes, vec!["0", "1", "2"]);
    }
    let l = read_both(&dir.join("emb64.parquet"));
    assert_eq!(bits(&l.pool.x), raw_f32(&dir.join("pool64.f32")));
    assert!(l.pool.labels.iter().all(Option::is_none));
    for (file, says) in [
        (
            "ragged.parquet",
            "row 3: column `embedding` has 4 values, row 0 has 6",
        ),
        ("null.parquet", "row 5: column `embedding` has a null at 2"),
        ("nan.parquet", "row 9: column `embedding` holds NaN at 1"),
    ] {
        let (whole, streamed) = refused(&dir.join(file));
        for e in [whole, streamed] {
            assert!(e.contains(file) && e.contains(says), "{file}: {e}");
        }
    }
}

#[test]
fn a_head_s_curve_on_an_npz_and_scores_over_an_npy_pool() {
    let dir = tmp("numpy-cli");
    if reference_files(&dir).is_none() {
        return;
    }
    let run = |args: &[std::ffi::OsString]| {
        let o = alkit_cmd().arg("-q").args(args).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    let p = |s: &str| dir.join(s).into_os_string();
    let a = |s: &str| std::ffi::OsString::from(s);
    run(&[
        a("curve"),
        a("--data"),
        p("emb.npz"),
        a("--model"),
        a("linear"),
        a("--scorer"),
        a("entropy"),
        a("--initial"),
        a("12"),
        a("--query"),
        a("12"),
        a("--cycles"),
        a("2"),
        a("--out"),
        p("curve"),
    ]);
    let csv = std::fs::read_to_string(dir.join("curve/curve.csv")).unwrap();
    // Cycles 0, 1 and 2; three well separated classes: a linear head finds them.
    let rows: Vec<&str> = csv.lines().filter(|l| l.starts_with("entropy,")).collect();
    assert_eq!(rows.len(), 3, "{csv}");
    let acc: f64 = rows[2].split(',').nth(4).unwrap().parse().unwrap();
    assert!(acc > 0.9, "{csv}");

    // A head trained on the .npz scores its features saved alone as an .npy pool: the same
    // numbers, the ids positions.
    run(&[
        a("train"),
        a("--model"),
        a("linear"),
        a("--steps"),
        a("40"),
        a("--data"),
        p("emb.npz"),
        a("--out"),
        p("head"),
    ]);
    for (data, out) in [("emb.npz", "npz.csv"), ("emb_pool.npy", "npy.csv")] {
        run(&[
            a("score"),
            a("--checkpoint"),
            p("head"),
            a("--data"),
            p(data),
            a("--scorer"),
            a("entropy,margin"),
            a("--out"),
            p(out),
        ]);
    }
    let npz = std::fs::read_to_string(dir.join("npz.csv")).unwrap();
    let npy = std::fs::read_to_string(dir.join("npy.csv")).unwrap();
    assert_eq!(npy.lines().count(), 121, "{npy}");
    assert!(
        npz.lines().nth(1).unwrap().starts_with("0,doc-000-é,"),
        "{npz}"
    );
    assert!(npy.lines().nth(1).unwrap().starts_with("0,0,"), "{npy}");
    let scores = |t: &str| -> Vec<String> {
        t.lines()
            .map(|l| l.split(',').skip(2).collect::<Vec<_>>().join(","))
            .collect()
    };
    assert_eq!(scores(&npz), scores(&npy));
}

#[test]
fn a_hub_dataset_of_embedding_shards_reads_as_one_pool_whole_streamed_and_in_a_curve() {
    let Some(py) = python() else {
        return;
    };
    let dir = tmp("hub-embeddings");
    let files = dir.join("files");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference/hub_embeddings.py");
    let o = Command::new(py).arg(&script).arg(&files).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let cache = dir.join("hub");
    let shards = [
        "README.md",
        "data/train-00000-of-00002.parquet",
        "data/train-00001-of-00002.parquet",
        "data/test-00000-of-00001.parquet",
    ];
    let listed: Vec<(&str, PathBuf)> = shards.iter().map(|f| (*f, files.join(f))).collect();
    fake_hub_cache(&cache, "datasets--test--emb", &listed);
    let hub = Hub::new(&cache, true);
    let src = Source::parse("hf:test/emb").unwrap();
    // Whole: the two train shards one after the other, the card's classes, the test shard.
    let loaded = load_source(&src, &hub, &mut Silent, None).unwrap();
    let expected = load_source(
        &Source::parse(&files.join("expected.safetensors").to_string_lossy()).unwrap(),
        &hub,
        &mut Silent,
        None,
    )
    .unwrap();
    assert_eq!(loaded.pool.item_shape, [8]);
    assert_eq!(bits(&loaded.pool.x), bits(&expected.pool.x));
    assert_eq!(loaded.pool.labels, expected.pool.labels);
    assert_eq!(loaded.pool.classes, ["cat", "dog", "bird"]);
    assert_eq!(loaded.pool.ids.len(), 55);
    assert_eq!(loaded.pool.ids[54], "54");
    let test = loaded.test.as_ref().unwrap();
    assert_eq!(bits(&test.x), bits(&expected.test.as_ref().unwrap().x));
    // Streamed in chunks that cross the shards' boundary: the same items; the labels and
    // the test split alone, as a streamed run reads them.
    let mut stream = alkit::data::source::open(&src, &hub, &mut Silent, None).unwrap();
    let (mut ids, mut x) = (Vec::new(), Vec::new());
    while let Some(c) = stream.next_chunk(7).unwrap() {
        ids.extend(c.ids);
        x.extend(c.x);
    }
    assert_eq!(ids, loaded.pool.ids);
    assert_eq!(bits(&x), bits(&loaded.pool.x));
    let labels = alkit::data::source::pool_labels(&src, &hub, &mut Silent).unwrap();
    assert_eq!(labels.labels, loaded.pool.labels);
    assert_eq!(labels.classes, loaded.pool.classes);
    let alone = alkit::data::source::load_test(&src, &hub, &mut Silent)
        .unwrap()
        .unwrap();
    assert_eq!(bits(&alone.x), bits(&test.x));
    // A curve on it, in memory and streamed: the same curve.
    let curve = |out: &Path, extra: &[&str]| {
        let o = alkit_cmd()
            .args(["-q", "curve", "--data", "hf:test/emb", "--model", "linear"])
            .args([
                "--initial",
                "6",
                "--query",
                "6",
                "--cycles",
                "2",
                "--scorer",
                "entropy",
            ])
            .args(extra)
            .arg("--out")
            .arg(out)
            .env("HF_HUB_CACHE", &cache)
            .env("HF_HUB_OFFLINE", "1")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        strip_timings(&std::fs::read_to_string(out.join("curve.csv")).unwrap())
    };
    let a = curve(&dir.join("a"), &[]);
    assert_eq!(a.lines().count(), 4, "{a}");
    assert_eq!(a, curve(&dir.join("b"), &["--stream"]));
    // A shard whose columns differ from the first's is refused by name.
    let other = dir.join("other.parquet");
    let o = Command::new(python().unwrap())
        .arg("-c")
        .arg(format!(
            "import pyarrow as pa, pyarrow.parquet as pq; pq.write_table(pa.table({{'embedding': pa.array([[0.5] * 8], type=pa.list_(pa.float32())), 'label': [1]}}), {:?})",
            other.to_string_lossy()
        ))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let bad_cache = dir.join("bad-hub");
    let mut bad = listed.clone();
    bad[2] = ("data/train-00001-of-00002.parquet", other);
    fake_hub_cache(&bad_cache, "datasets--test--emb", &bad);
    let e = load_source(&src, &Hub::new(&bad_cache, true), &mut Silent, None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("train-00001-of-00002.parquet")
            && e.contains("other columns than the first shard's"),
        "{e}"
    );
}
