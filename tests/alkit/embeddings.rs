//! Embedding files (features computed elsewhere): the file PyTorch's safetensors writer made
//! (tests/reference/mnist_embeddings.py) read whole and streamed with its ids, labels and test
//! split; a head's learning curve and last-layer scores on it from the command line; what the
//! layout refuses.

use super::*;

fn shipped_embeddings() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/embeddings/mnist-rp32.safetensors")
}

#[test]
fn pytorch_s_embedding_file_reads_whole_and_streamed_alike() {
    let hub = Hub::new(tmp("emb-hub").join("hub"), true);
    let src = Source::parse(&shipped_embeddings().to_string_lossy()).unwrap();
    let loaded = load_source(&src, &hub, &mut Silent, None).unwrap();
    let pool = &loaded.pool;
    let test = loaded.test.as_ref().expect("the file's test split");
    assert_eq!((pool.len(), test.len()), (2000, 500));
    assert_eq!(pool.item_shape, vec![32]);
    assert_eq!(pool.ids[0], "train-00000");
    assert_eq!(pool.ids[1999], "train-01999");
    assert_eq!(pool.classes.len(), 10);
    // The labels are the shipped MNIST subset's, in its order.
    let (train, t10k) = shipped();
    let labels: Vec<u32> = pool.labels.iter().map(|l| l.unwrap()).collect();
    assert_eq!(&labels[..], train.labels());
    let labels: Vec<u32> = test.labels.iter().map(|l| l.unwrap()).collect();
    assert_eq!(&labels[..], t10k.labels());
    // F16 values widened exactly: every value is a ReLU output (>= 0) and some are not 0.
    assert!(pool.x.iter().all(|v| *v >= 0.0) && pool.x.iter().any(|v| *v > 0.0));
    // Streamed in odd chunks: the same ids and values bit for bit.
    let mut stream = alkit::data::source::open(&src, &hub, &mut Silent, None).unwrap();
    let (mut ids, mut x) = (Vec::new(), Vec::new());
    while let Some(c) = stream.next_chunk(333).unwrap() {
        ids.extend(c.ids);
        x.extend(c.x);
    }
    assert_eq!(ids, pool.ids);
    assert_eq!(x, pool.x);
}

#[test]
fn a_head_s_curve_and_last_layer_scores_run_on_an_embedding_file() {
    let dir = tmp("emb-curve");
    let out = dir.join("curve");
    let o = alkit_cmd()
        .args(["-q", "curve", "--data"])
        .arg(shipped_embeddings())
        .args([
            "--model",
            "linear",
            "--scorer",
            "regrad,random",
            "--layers",
            "last",
            "--initial",
            "20",
            "--query",
            "20",
            "--cycles",
            "3",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let csv = std::fs::read_to_string(out.join("curve.csv")).unwrap();
    assert!(csv.contains("regrad@last"), "{csv}");
    // A linear head on 32 random ReLU features of 20-80 digits: far above chance (0.1).
    assert!(csv.starts_with("scorer,seed,cycle,labeled,acc,"), "{csv}");
    let last_acc: f64 = csv
        .lines()
        .rfind(|l| l.starts_with("regrad@last,"))
        .and_then(|l| l.split(',').nth(4))
        .and_then(|v| v.parse().ok())
        .unwrap();
    assert!(last_acc > 0.3, "{csv}");

    // A head trained once and scored: the ids are the file's.
    let ck = dir.join("head");
    let o = alkit_cmd()
        .args([
            "-q", "train", "--model", "linear", "--steps", "50", "--data",
        ])
        .arg(shipped_embeddings())
        .arg("--out")
        .arg(&ck)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let scores = dir.join("s.csv");
    let o = alkit_cmd()
        .args(["-q", "score", "--checkpoint"])
        .arg(&ck)
        .arg("--data")
        .arg(shipped_embeddings())
        .args(["--scorer", "entropy,regrad,gradnorm", "--out"])
        .arg(&scores)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&scores).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("index,id,entropy,regrad,gradnorm"));
    assert!(
        lines.next().unwrap().starts_with("0,train-00000,"),
        "{text}"
    );
    assert_eq!(text.lines().count(), 2001);
}

/// A tensor to write: name, dtype, shape, little-endian bytes.
type RawTensor<'a> = (&'a str, safetensors::Dtype, Vec<usize>, Vec<u8>);

/// Writes `tensors` and metadata to `path`.
fn write_st(path: &Path, tensors: &[RawTensor], meta: &[(&str, &str)]) {
    struct Raw<'a>(safetensors::Dtype, &'a [usize], &'a [u8]);
    impl safetensors::View for Raw<'_> {
        fn dtype(&self) -> safetensors::Dtype {
            self.0
        }
        fn shape(&self) -> &[usize] {
            self.1
        }
        fn data(&self) -> std::borrow::Cow<'_, [u8]> {
            self.2.into()
        }
        fn data_len(&self) -> usize {
            self.2.len()
        }
    }
    let meta: std::collections::HashMap<String, String> = meta
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    safetensors::serialize_to_file(
        tensors.iter().map(|(n, d, s, b)| (*n, Raw(*d, s, b))),
        Some(meta),
        path,
    )
    .unwrap();
}

#[test]
fn embedding_files_that_disagree_are_refused_by_name() {
    use safetensors::Dtype::{F16, F32, F64, I64};
    let dir = tmp("emb-hostile");
    let hub = Hub::new(dir.join("hub"), true);
    let f32s = |n: usize| -> Vec<u8> { (0..n).flat_map(|i| (i as f32).to_le_bytes()).collect() };
    let i64s = |v: &[i64]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
    type Case<'a> = (
        &'a str,
        Vec<RawTensor<'a>>,
        Vec<(&'a str, &'a str)>,
        &'a str,
    );
    let cases: Vec<Case> = vec![
        (
            "both layouts",
            vec![
                ("x", F32, vec![2, 3], f32s(6)),
                ("features", F32, vec![2, 3], f32s(6)),
            ],
            vec![],
            "both layouts",
        ),
        (
            "ids too few",
            vec![("features", F32, vec![2, 3], f32s(6))],
            vec![("ids", "[\"a\"]")],
            "1 ids for 2 items",
        ),
        (
            "ids twice",
            vec![("features", F32, vec![2, 3], f32s(6))],
            vec![("ids", "[\"a\",\"a\"]")],
            "`a` is given to items 0 and 1",
        ),
        (
            "ids not json",
            vec![("features", F32, vec![2, 3], f32s(6))],
            vec![("ids", "a,b")],
            "metadata `ids`",
        ),
        (
            "features rank",
            vec![("features", F32, vec![2, 3, 1], f32s(6))],
            vec![],
            "expected (n, d)",
        ),
        (
            "features dtype",
            vec![("features", F64, vec![2, 1], vec![0; 16])],
            vec![],
            "expected F32 or F16",
        ),
        (
            "labels length",
            vec![
                ("features", F32, vec![2, 3], f32s(6)),
                ("labels", I64, vec![3], i64s(&[0, 1, 0])),
            ],
            vec![],
            "`labels` has shape [3]",
        ),
        (
            "test dims",
            vec![
                ("features", F32, vec![2, 3], f32s(6)),
                ("test_features", F32, vec![2, 2], f32s(4)),
                ("test_labels", I64, vec![2], i64s(&[0, 1])),
            ],
            vec![],
            "`test_features` has items of shape [2]",
        ),
        (
            "test unlabeled",
            vec![
                ("features", F32, vec![2, 3], f32s(6)),
                ("test_features", F32, vec![2, 3], f32s(6)),
            ],
            vec![],
            "a test split needs a label per item",
        ),
        (
            "labels alone",
            vec![
                ("features", F32, vec![2, 3], f32s(6)),
                ("test_labels", I64, vec![2], i64s(&[0, 1])),
            ],
            vec![],
            "no items `test_features`",
        ),
        (
            "nan f16",
            vec![("features", F16, vec![1, 2], vec![0, 0, 0x00, 0x7e])],
            vec![],
            "non-finite value at flat position 1",
        ),
    ];
    for (what, tensors, meta, want) in cases {
        let path = dir.join(format!("{}.safetensors", what.replace(' ', "-")));
        write_st(&path, &tensors, &meta);
        let src = Source::parse(&path.to_string_lossy()).unwrap();
        let whole = load_source(&src, &hub, &mut Silent, None).map(|_| ());
        let streamed =
            alkit::data::source::open(&src, &hub, &mut Silent, None).and_then(|mut s| {
                while s.next_chunk(1)?.is_some() {}
                Ok(())
            });
        for (how, got) in [("whole", whole), ("streamed", streamed)] {
            // The streamed read checks the pool's tensors only; a test split is read whole.
            if how == "streamed" && (what.starts_with("test") || what == "labels alone") {
                continue;
            }
            let e = got
                .map(|_| ())
                .expect_err(&format!("{what} ({how}) was accepted"))
                .to_string();
            assert!(
                e.contains(want) && e.contains(&*path.to_string_lossy()),
                "{what} ({how}): {e}"
            );
        }
    }
}

/// Counts the items a pass reports scored: the backbone's forward passes.
#[derive(Default)]
struct CountScoring(usize);

impl Observer for CountScoring {
    fn on(&mut self, e: &Event<'_>) -> Control {
        if let Event::Scoring { .. } = e {
            self.0 += 1;
        }
        Control::Continue
    }
}

fn embed_cmd(ck: &Path, out: &Path) -> Command {
    let mut c = alkit_cmd();
    c.args(["-q", "embed", "--checkpoint"])
        .arg(ck)
        .arg("--data")
        .arg(data_dir())
        .args(["--batch", "8", "--chunk", "8", "--out"])
        .arg(out);
    c
}

#[test]
fn a_frozen_backbone_embeds_once_reuses_its_cache_and_resumes_after_kill_9() {
    let dir = tmp("emb-backbone");
    let ck = dir.join("cnn");
    let o = alkit_cmd()
        .args(["-q", "train", "--steps", "30", "--data"])
        .arg(data_dir())
        .arg("--out")
        .arg(&ck)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let job = alkit::jobs::embed::EmbedJob {
        backbone: ck.to_string_lossy().into_owned(),
        data: data_dir().to_string_lossy().into_owned(),
        batch: None,
        chunk: 512,
    };
    let cache = dir.join("cache");
    let hub = Hub::new(dir.join("hub"), true);
    let mut first = CountScoring::default();
    let a = alkit::jobs::embed::cached(&job, &cache, &hub, &Device::Cpu, &mut first).unwrap();
    assert!(a.computed && first.0 > 0);
    assert_eq!((a.items, a.dim), (2000, 128));
    let mut second = CountScoring::default();
    let b = alkit::jobs::embed::cached(&job, &cache, &hub, &Device::Cpu, &mut second).unwrap();
    assert!(!b.computed);
    assert_eq!(second.0, 0, "the cache answered without a backbone pass");
    assert_eq!(a.path, b.path);
    // The file is an embedding file: the CNN's fc1 features of every item, its labels and
    // the test split, as `load` reads any.
    let loaded = load_source(
        &Source::parse(&a.path.to_string_lossy()).unwrap(),
        &hub,
        &mut Silent,
        None,
    )
    .unwrap();
    assert_eq!(loaded.pool.item_shape, vec![128]);
    assert_eq!(loaded.test.as_ref().unwrap().len(), 500);
    let (train, _) = shipped();
    let labels: Vec<u32> = loaded.pool.labels.iter().map(|l| l.unwrap()).collect();
    assert_eq!(&labels[..], train.labels());
    // Another backbone is another key: a new file, never the first one reused.
    let ck2 = dir.join("cnn2");
    copy_dir(&ck, &ck2);
    let job2 = alkit::jobs::embed::EmbedJob {
        backbone: ck2.to_string_lossy().into_owned(),
        ..job.clone()
    };
    let c = alkit::jobs::embed::cached(&job2, &cache, &hub, &Device::Cpu, &mut Silent).unwrap();
    assert!(c.computed && c.path != a.path);
    // The same weights give the same features; the files' bytes differ by the backbone path
    // their headers record (and its padding), so the tensors are what is compared.
    let again = load_source(
        &Source::parse(&c.path.to_string_lossy()).unwrap(),
        &hub,
        &mut Silent,
        None,
    )
    .unwrap();
    assert_eq!(again.pool.x, loaded.pool.x);
    assert_eq!(again.pool.labels, loaded.pool.labels);
    assert_eq!(
        again.test.as_ref().unwrap().x,
        loaded.test.as_ref().unwrap().x
    );
    // A data file rewritten in place with other bytes of the same length and its old
    // modification time (here the gzip header's own time field) is another key: the cache
    // follows the files' contents, not their sizes and times.
    let data2 = dir.join("data2");
    copy_dir(&data_dir(), &data2);
    let job3 = alkit::jobs::embed::EmbedJob {
        data: data2.to_string_lossy().into_owned(),
        ..job.clone()
    };
    let d = alkit::jobs::embed::cached(&job3, &cache, &hub, &Device::Cpu, &mut Silent).unwrap();
    assert!(d.computed);
    let gz = data2.join("t10k-labels-idx1-ubyte.gz");
    let when = std::fs::metadata(&gz).unwrap().modified().unwrap();
    let mut bytes = std::fs::read(&gz).unwrap();
    bytes[4] ^= 0x5a;
    std::fs::write(&gz, &bytes).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&gz)
        .unwrap()
        .set_modified(when)
        .unwrap();
    let mut third = CountScoring::default();
    let e = alkit::jobs::embed::cached(&job3, &cache, &hub, &Device::Cpu, &mut third).unwrap();
    assert!(e.computed && third.0 > 0 && e.path != d.path);

    // kill -9 part-way, then the same command again: the bytes of an uninterrupted run.
    let whole = dir.join("whole.safetensors");
    let o = embed_cmd(&ck, &whole).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let killed = dir.join("killed.safetensors");
    let progress = dir.join("killed.safetensors.partial/progress.json");
    let mut child = embed_cmd(&ck, &killed).spawn().unwrap();
    let started = std::time::Instant::now();
    loop {
        let done = std::fs::read_to_string(&progress)
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v["done"].as_u64())
            .unwrap_or(0);
        if done >= 400 {
            break;
        }
        assert!(started.elapsed().as_secs() < 120, "no progress to kill");
        assert!(
            child.try_wait().unwrap().is_none(),
            "finished before it could be killed"
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!killed.exists(), "a killed run left no finished file");
    let o = embed_cmd(&ck, &killed).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        std::fs::read(&killed).unwrap(),
        std::fs::read(&whole).unwrap()
    );
    assert!(
        !progress.exists(),
        "the work folder is gone once the file is whole"
    );
    // Never over a file.
    let o = embed_cmd(&ck, &killed).output().unwrap();
    assert!(!o.status.success());

    // The curve through the backbone: a linear head each cycle on the cached features.
    let before = std::fs::read_dir(&cache).unwrap().count();
    let out = dir.join("curve");
    let o = alkit_cmd()
        .args(["-q", "curve", "--data"])
        .arg(data_dir())
        .arg("--backbone")
        .arg(&ck)
        .arg("--embed-cache")
        .arg(&cache)
        .args([
            "--scorer",
            "entropy,regrad",
            "--layers",
            "last",
            "--cycles",
            "2",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let csv = std::fs::read_to_string(out.join("curve.csv")).unwrap();
    assert!(csv.contains("regrad@last"), "{csv}");
    let after = std::fs::read_dir(&cache).unwrap().count();
    assert_eq!(after, before, "the curve reused the cached file");
}

/// `(id, [entropy, regrad])` rows of a CSV with those columns.
fn score_rows(path: &Path) -> Vec<(String, Vec<f64>)> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (id, e, r) = (col("id"), col("entropy"), col("regrad"));
    lines
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (
                f[id].to_string(),
                vec![f[e].parse().unwrap(), f[r].parse().unwrap()],
            )
        })
        .collect()
}

#[test]
fn a_head_kept_in_an_embedding_file_scores_as_numpy_works_it_out_and_a_wrong_head_is_refused() {
    let Some(py) = super::feature_methods::python() else {
        return;
    };
    let dir = tmp("embedded_head");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference/embedded_head.py");
    let o = Command::new(&py).arg(&script).arg(&*dir).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // The same heads in safetensors files and in numpy's .npz files.
    for (file, expected) in [
        ("head.safetensors", "expected.csv"),
        ("head_f16.safetensors", "expected_f16.csv"),
        ("head.npz", "expected.csv"),
        ("head_f16.npz", "expected_f16.csv"),
    ] {
        let f = dir.join(file);
        let out = dir.join(format!("{file}.csv"));
        let o = alkit_cmd()
            .args(["score", "--checkpoint"])
            .arg(&f)
            .arg("--data")
            .arg(&f)
            .args(["--scorer", "entropy,regrad", "--out"])
            .arg(&out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let (got, want) = (score_rows(&out), score_rows(&dir.join(expected)));
        assert_eq!(got.len(), 300);
        assert_eq!(got.len(), want.len());
        for ((gi, g), (wi, w)) in got.iter().zip(&want) {
            assert_eq!(gi, wi);
            for (a, b) in g.iter().zip(w) {
                assert!(
                    (a - b).abs() <= 2e-5 * b.abs().max(1e-3),
                    "{file} item {gi}: alkit {a}, numpy {b}"
                );
            }
        }
    }
    // A head stored (d, C), and logits that the head does not give: refused by name before
    // anything is written.
    for (file, words) in [
        ("transposed.safetensors", "must be transposed"),
        (
            "wrong_logits.safetensors",
            "do not give the file's `logits`",
        ),
        ("transposed.npz", "must be transposed"),
        ("wrong_logits.npz", "do not give the file's `logits`"),
    ] {
        let f = dir.join(file);
        let out = dir.join(format!("{file}.csv"));
        let o = alkit_cmd()
            .args(["score", "--checkpoint"])
            .arg(&f)
            .arg("--data")
            .arg(&f)
            .args(["--scorer", "entropy", "--out"])
            .arg(&out)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(words), "{file}: {err}");
        assert!(err.contains(file), "{err}");
        assert!(!out.exists(), "{file}: a refused head wrote scores");
    }
}

#[test]
fn a_duq_head_trains_on_an_embedding_file_and_scores_by_its_kernels() {
    let dir = tmp("emb-duq");
    let ck = dir.join("duq-head");
    let o = alkit_cmd()
        .args([
            "-q", "train", "--model", "duq-mlp", "--steps", "300", "--data",
        ])
        .arg(shipped_embeddings())
        .arg("--out")
        .arg(&ck)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ck.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["arch"]["kind"], "duq-mlp", "{config}");
    // It learned: the DUQ head's kernels pick the right class far above chance (0.1) on the
    // file's test split.
    let said = String::from_utf8_lossy(&o.stdout);
    let acc: f64 = said
        .split("test accuracy ")
        .nth(1)
        .and_then(|t| t.split('%').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{said}"));
    assert!(acc > 50.0, "{said}");
    let c = alkit::checkpoint::load(&ck, &Device::Cpu).unwrap();
    assert_eq!(c.config.item_shape, vec![32]);
    // `duq` scores every item, `--layers last` is refused for an RBF head.
    let scores = dir.join("s.csv");
    let o = alkit_cmd()
        .args(["-q", "score", "--checkpoint"])
        .arg(&ck)
        .arg("--data")
        .arg(shipped_embeddings())
        .args(["--scorer", "duq,entropy", "--out"])
        .arg(&scores)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&scores).unwrap();
    assert!(text.starts_with("index,id,duq,entropy\n"), "{text}");
    assert_eq!(text.lines().count(), 2001);
    let o = alkit_cmd()
        .args(["-q", "score", "--checkpoint"])
        .arg(&ck)
        .arg("--data")
        .arg(shipped_embeddings())
        .args(["--scorer", "regrad", "--layers", "last", "--out"])
        .arg(dir.join("refused.csv"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.code() == Some(2) && err.contains("--layers"),
        "{err}"
    );
    assert!(!dir.join("refused.csv").exists());
    // A curve of DUQ heads scored by `duq`.
    let out = dir.join("curve");
    let o = alkit_cmd()
        .args(["-q", "curve", "--data"])
        .arg(shipped_embeddings())
        .args([
            "--model",
            "duq-mlp",
            "--scorer",
            "duq",
            "--initial",
            "50",
            "--query",
            "50",
            "--cycles",
            "1",
            "--steps",
            "100",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let csv = std::fs::read_to_string(out.join("curve.csv")).unwrap();
    assert_eq!(
        csv.lines().filter(|l| l.starts_with("duq,")).count(),
        2,
        "{csv}"
    );
}
