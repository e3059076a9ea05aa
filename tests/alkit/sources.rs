//! Pool sources (image folders, safetensors, CSV, Parquet, the Hub offline) with stable ids; scripted labeling sessions; scores reproduced from checkpoints; bare-weight import.

use super::*;

#[test]
fn hub_dataset_and_checkpoint_load_offline_from_a_local_cache() {
    // The fixture is MNIST as `datasets` publishes it (Parquet, PNG bytes written by Pillow and
    // pyarrow: tests/fixtures/make_hub_fixture.py); decoding must give back exactly the IDX
    // pixels and labels of the same items.
    let dir = tmp("hub");
    let cache = dir.join("hub");
    let fx = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hub-mnist");
    install_hub_dataset(&cache, "datasets--ylecun--mnist", &fx, "mnist");
    let hub = Hub::new(&cache, true);
    let src = Source::parse("hf:ylecun/mnist").unwrap();
    let loaded = load_source(&src, &hub, &mut Silent, None).unwrap();
    let (train, test) = shipped();
    let test_items = loaded.test.as_ref().unwrap();
    assert_eq!((loaded.pool.len(), test_items.len()), (64, 16));
    assert_eq!(loaded.pool.item_shape, vec![1, 28, 28]);
    assert_eq!(loaded.pool.classes.len(), 10);
    assert_eq!(&loaded.pool.x[..], &train.features()[..64 * 784]);
    assert_eq!(&test_items.x[..], &test.features()[..16 * 784]);
    let labels: Vec<u32> = loaded.pool.labels.iter().map(|l| l.unwrap()).collect();
    assert_eq!(&labels[..], &train.labels()[..64]);

    // A model repository: `alkit train`'s checkpoint files, fetched through the same cache.
    let ck = dir.join("ck");
    let o = alkit_cmd()
        .args(["-q", "train", "--steps", "20", "--out"])
        .arg(&ck)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    fake_hub_cache(
        &cache,
        "models--alkit--mnist-cnn",
        &[
            ("config.json", ck.join("config.json")),
            ("model.safetensors", ck.join("model.safetensors")),
        ],
    );
    let repo = HubRepo::parse("alkit/mnist-cnn").unwrap();
    let p = hub
        .get(&repo, RepoKind::Model, "config.json", &mut Silent)
        .unwrap();
    assert!(p.starts_with(&cache));
    // Offline, a missing file is an error naming the file and the cache, never a download.
    let e = hub
        .get(&repo, RepoKind::Model, "absent.bin", &mut Silent)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("absent.bin") && e.contains("HF_HUB_OFFLINE"),
        "{e}"
    );

    // The CLI, offline, scores the Hub dataset with the Hub checkpoint: the same numbers as
    // with the local checkpoint on the local IDX items.
    let run = |ck: &str, data: &str, out: &Path| {
        let o = alkit_cmd()
            .env("HF_HUB_CACHE", &cache)
            .env("HF_HUB_OFFLINE", "1")
            // Batches of 16 on both sides: the same batch shapes, so the same kernels and
            // bit-identical numbers (a batch of 500 may round the last bit differently).
            .args([
                "score",
                "--scorer",
                "entropy",
                "--split",
                "test",
                "--batch",
                "16",
                "--checkpoint",
                ck,
                "--data",
                data,
                "--out",
            ])
            .arg(out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        std::fs::read_to_string(out).unwrap()
    };
    let hub_scores = run("hf:alkit/mnist-cnn", "hf:ylecun/mnist", &dir.join("a.csv"));
    let local = run(&ck.to_string_lossy(), "data", &dir.join("b.csv"));
    let local_head: Vec<&str> = local.lines().take(17).collect();
    assert_eq!(hub_scores.lines().collect::<Vec<_>>(), local_head);
    // An unknown repository, offline: exit 1 and a message naming it.
    let o = alkit_cmd()
        .env("HF_HUB_CACHE", &cache)
        .env("HF_HUB_OFFLINE", "1")
        .args([
            "score",
            "--checkpoint",
            "hf:alkit/mnist-cnn",
            "--data",
            "hf:nobody/nothing",
            "--out",
        ])
        .arg(dir.join("c.csv"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("hf:nobody/nothing"));
}

#[test]
fn pool_sources_give_stable_ids_and_the_same_pixels() {
    let dir = tmp("sources");
    let (train, _) = shipped();
    // Image folder: two labeled (class subfolders, one of them empty), three unlabeled.
    let items: Vec<(usize, Option<String>)> = vec![
        (0, Some(train.labels()[0].to_string())),
        (1, None),
        (2, None),
        (3, Some(train.labels()[3].to_string())),
        (4, None),
    ];
    let folder = dir.join("pool");
    let ids = write_image_folder(&folder, &train, &items).unwrap();
    std::fs::create_dir_all(folder.join("zz-empty")).unwrap();
    let src = Source::parse(&folder.to_string_lossy()).unwrap();
    assert!(matches!(src, Source::Images(_)) && src.labels_are_given());
    let hub = Hub::new(dir.join("nohub"), true);
    let a = load_source(&src, &hub, &mut Silent, None).unwrap().pool;
    // Ids are relative paths in sorted order, and loading twice gives the same order.
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(a.ids, sorted);
    assert_eq!(
        load_source(&src, &hub, &mut Silent, None).unwrap().pool.ids,
        a.ids
    );
    assert!(a.classes.contains(&"zz-empty".to_string()));
    for (k, id) in a.ids.iter().enumerate() {
        let i: usize = id.rsplit('/').next().unwrap()[..5].parse().unwrap();
        assert_eq!(&a.x[k * 784..(k + 1) * 784], train.item(i), "{id}");
        let given = a.labels[k].map(|c| a.classes[c as usize].clone());
        assert_eq!(given, items.iter().find(|t| t.0 == i).unwrap().1, "{id}");
    }

    // safetensors: x as u8 (n, h, w), y as i64; metadata names the classes.
    let n = 6;
    let x_u8: Vec<u8> = train.features()[..n * 784]
        .iter()
        .map(|v| (v * 255.0).round() as u8)
        .collect();
    let y: Vec<i64> = train.labels()[..n].iter().map(|&l| i64::from(l)).collect();
    let xt = Tensor::from_vec(x_u8, (n, 28, 28), &Device::Cpu).unwrap();
    let yt = Tensor::from_vec(y, n, &Device::Cpu).unwrap();
    let st = dir.join("pool.safetensors");
    let map: std::collections::HashMap<String, Tensor> =
        [("x".to_string(), xt), ("y".to_string(), yt)]
            .into_iter()
            .collect();
    let meta: std::collections::HashMap<String, String> = [(
        "classes".to_string(),
        "zero,one,two,three,four,five,six,seven,eight,nine".to_string(),
    )]
    .into_iter()
    .collect();
    safetensors::serialize_to_file(
        map.iter().map(|(k, v)| (k.as_str(), SafeView(v))),
        Some(meta),
        &st,
    )
    .unwrap();
    let b = load_source(
        &Source::parse(&st.to_string_lossy()).unwrap(),
        &hub,
        &mut Silent,
        None,
    )
    .unwrap()
    .pool;
    assert_eq!(b.item_shape, vec![1, 28, 28]);
    assert_eq!(&b.x[..], &train.features()[..n * 784]);
    assert_eq!(b.ids, (0..n).map(|i| i.to_string()).collect::<Vec<_>>());
    assert_eq!(
        b.classes[train.labels()[0] as usize],
        ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
            [train.labels()[0] as usize]
    );

    // CSV: ids from the `id` column, empty label = unlabeled, bad numbers name the line.
    let csv = dir.join("t.csv");
    std::fs::write(
        &csv,
        "id,f1,label,f2\nr7,0.5,cat,1\nr9,-2,,3e-1\nr1,4,dog,0\n",
    )
    .unwrap();
    let c = load_source(
        &Source::parse(&csv.to_string_lossy()).unwrap(),
        &hub,
        &mut Silent,
        None,
    )
    .unwrap()
    .pool;
    assert_eq!(c.ids, vec!["r7", "r9", "r1"]);
    assert_eq!(c.x, vec![0.5, 1.0, -2.0, 0.3, 4.0, 0.0]);
    assert_eq!(c.classes, vec!["cat", "dog"]);
    assert_eq!(c.labels, vec![Some(0), None, Some(1)]);
    std::fs::write(&csv, "id,f1\na,1\nb,x\n").unwrap();
    let e = load_source(
        &Source::parse(&csv.to_string_lossy()).unwrap(),
        &hub,
        &mut Silent,
        None,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("t.csv:3") && e.contains("`x`"), "{e}");
}

#[test]
fn scripted_png_session_matches_the_library_session_and_bad_rows_change_nothing() {
    let dir = tmp("session");
    let (train, _) = shipped();
    // 200 PNGs from data/: the first 20 labeled (class subfolders), the rest unlabeled.
    let items: Vec<(usize, Option<String>)> = (0..200)
        .map(|i| (i, (i < 20).then(|| train.labels()[i].to_string())))
        .collect();
    let pool = dir.join("pool");
    let ids = write_image_folder(&pool, &train, &items).unwrap();
    let truth: std::collections::HashMap<String, String> = ids
        .iter()
        .zip(&items)
        .map(|(id, (i, _))| (id.clone(), train.labels()[*i].to_string()))
        .collect();
    let classes = "0,1,2,3,4,5,6,7,8,9";
    let state = dir.join("state");
    let cli = |args: &[&str]| {
        let o = alkit_cmd().arg("-q").args(args).output().unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let s = state.to_string_lossy().into_owned();
    let (code, err) = cli(&[
        "init",
        "--pool",
        &pool.to_string_lossy(),
        "--state",
        &s,
        "--classes",
        classes,
        "--steps",
        "60",
        "--seed",
        "7",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let mut asked: Vec<String> = Vec::new();
    for round in 1..=3 {
        let batch = dir.join(format!("batch{round}.csv"));
        let (code, err) = cli(&[
            "query",
            "--state",
            &s,
            "--scorer",
            "entropy",
            "--n",
            "20",
            "--out",
            &batch.to_string_lossy(),
        ]);
        assert_eq!(code, Some(0), "{err}");
        let got = read_batch(&batch);
        assert_eq!(got.len(), 20);
        for id in &got {
            assert!(!asked.contains(id), "{id} queried twice");
            assert!(!id.contains('/'), "{id} was labeled at init");
        }
        asked.extend(got.iter().cloned());
        if round == 2 {
            // One bad row (an id outside the pool) among good ones: exit 1, the file and
            // line named, the state byte-for-byte unchanged.
            let before = std::fs::read(state.join("session.json")).unwrap();
            let bad = dir.join("bad.csv");
            let mut text = String::from("id,label\n");
            for id in &got[..2] {
                text.push_str(&format!("{id},{}\n", truth[id]));
            }
            text.push_str("no-such-item.png,3\n");
            std::fs::write(&bad, text).unwrap();
            let (code, err) = cli(&["teach", "--state", &s, "--labels", &bad.to_string_lossy()]);
            assert_eq!(code, Some(1));
            assert!(
                err.contains("bad.csv:4") && err.contains("no-such-item.png"),
                "{err}"
            );
            assert_eq!(std::fs::read(state.join("session.json")).unwrap(), before);
            // A label outside the class list, and a duplicate row, are refused the same way.
            std::fs::write(&bad, format!("id,label\n{},ten\n", got[0])).unwrap();
            let (code, err) = cli(&["teach", "--state", &s, "--labels", &bad.to_string_lossy()]);
            assert!(
                code == Some(1) && err.contains("bad.csv:2") && err.contains("ten"),
                "{err}"
            );
            std::fs::write(&bad, format!("id,label\n{0},1\n{0},1\n", got[0])).unwrap();
            let (code, err) = cli(&["teach", "--state", &s, "--labels", &bad.to_string_lossy()]);
            assert!(code == Some(1) && err.contains("bad.csv:3"), "{err}");
            assert_eq!(std::fs::read(state.join("session.json")).unwrap(), before);
        }
        let answers = dir.join(format!("answers{round}.csv"));
        let mut text = String::from("id,label\n");
        for id in &got {
            text.push_str(&format!("{id},{}\n", truth[id]));
        }
        std::fs::write(&answers, text).unwrap();
        let (code, err) = cli(&[
            "teach",
            "--state",
            &s,
            "--labels",
            &answers.to_string_lossy(),
        ]);
        assert_eq!(code, Some(0), "{err}");
    }
    let cli_state: SessionState =
        serde_json::from_str(&std::fs::read_to_string(state.join("session.json")).unwrap())
            .unwrap();
    assert_eq!(cli_state.labeled.len(), 60 + 20);
    assert!(cli_state.pending.is_empty());
    let distinct: std::collections::HashSet<&str> =
        cli_state.labeled.iter().map(|l| l.id.as_str()).collect();
    assert_eq!(distinct.len(), 80);
    for l in &cli_state.labeled {
        assert_eq!(l.label, truth[&l.id]);
    }
    let (code, _) = cli(&["status", "--state", &s]);
    assert_eq!(code, Some(0));

    // The same session through the library, in one process: the same final state.
    let source = Source::parse(&cli_state.source).unwrap();
    let loaded = load_source(
        &source,
        &Hub::new(dir.join("nohub"), true),
        &mut Silent,
        None,
    )
    .unwrap();
    let seeds = loaded.pool.given_labels();
    let config = SessionConfig {
        arch: alkit::models::Arch::default_for(&loaded.pool.item_shape, 10),
        train: TrainConfig {
            steps: 60,
            ..TrainConfig::default()
        },
        seed: 7,
        batch: 512,
        ensemble: None,
        display_root: None,
        stop: None,
    };
    let classes: Vec<String> = classes.split(',').map(String::from).collect();
    let mut lib = Learner::new(&cli_state.source, loaded, classes, &seeds, config).unwrap();
    let request = QueryRequest {
        strategy: kind("entropy").strategy(&Default::default()).unwrap(),
        n: 20,
        include_pending: false,
        subsample: None,
    };
    for _ in 0..3 {
        let batch = lib.query(&request, &Device::Cpu, &mut Silent).unwrap();
        let answers: Vec<(String, String)> = batch
            .iter()
            .map(|q| (q.id.clone(), truth[&q.id].clone()))
            .collect();
        lib.teach(&answers).unwrap();
    }
    assert_eq!(lib.state(), &cli_state);
}

#[test]
fn score_with_a_trained_checkpoint_reproduces_the_curves_scores() {
    // `alkit curve --save-scores` records what cycle 0's model said about every candidate;
    // `alkit train --indices` on cycle 0's labels with the same seed and steps rebuilds that
    // model bit for bit, and `alkit score` must then print the same numbers.
    let dir = tmp("reproduce");
    let out = dir.join("curve");
    let o = alkit_cmd()
        .args([
            "-q",
            "curve",
            "--scorer",
            "entropy,regrad",
            "--cycles",
            "1",
            "--steps",
            "40",
            "--seed",
            "5",
            "--save-scores",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let state: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("runs/entropy-seed5.json")).unwrap(),
    )
    .unwrap();
    let seed_set: Vec<String> = state["labeled"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p[1] == 0)
        .map(|p| p[0].to_string())
        .collect();
    assert_eq!(seed_set.len(), 20);
    let idx_file = dir.join("seed-set.txt");
    std::fs::write(&idx_file, seed_set.join("\n")).unwrap();
    let ck = dir.join("ck");
    let o = alkit_cmd()
        .args(["-q", "train", "--steps", "40", "--seed", "5", "--indices"])
        .arg(&idx_file)
        .arg("--out")
        .arg(&ck)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let scores = dir.join("scores.csv");
    let o = alkit_cmd()
        .args(["score", "--scorer", "entropy,regrad", "--checkpoint"])
        .arg(&ck)
        .arg("--out")
        .arg(&scores)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&scores).unwrap();
    let rows: std::collections::HashMap<String, Vec<String>> = text
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<String> = l.split(',').map(String::from).collect();
            (f[0].clone(), f[2..].to_vec())
        })
        .collect();
    for (col, strategy) in ["entropy", "regrad"].iter().enumerate() {
        let saved =
            std::fs::read_to_string(out.join(format!("scores/{strategy}/seed5/cycle0.csv")))
                .unwrap();
        let mut n = 0;
        for l in saved.lines().skip(1) {
            let (i, v) = l.split_once(',').unwrap();
            assert_eq!(&rows[i][col], v, "{strategy} item {i}");
            n += 1;
        }
        assert_eq!(n, 2000 - 20);
    }
}

#[test]
fn bare_weights_import_checks_every_name_and_shape() {
    // Weights saved by name only (as `safetensors.torch.save_file(model.state_dict())` writes
    // them) convert into a checkpoint that predicts exactly like the original model; a renamed
    // or reshaped tensor is refused by name and nothing is written.
    let (train, test) = normalised();
    let arch = Arch::Cnn(CnnConfig::standard(train.item_shape(), 10));
    let (vb, params) = seeded(stream(4, Purpose::Init, 0), DType::F32, &Device::Cpu);
    let model = arch.build(vb).unwrap();
    let dir = tmp("import");
    let mut named: std::collections::HashMap<String, Tensor> = params
        .named()
        .into_iter()
        .map(|(n, v)| (n, v.as_tensor().clone()))
        .collect();
    let w = dir.join("w.safetensors");
    candle_core::safetensors::save(&named, &w).unwrap();
    let norm = Normalizer::fit(&train);
    let classes: Vec<String> = (0..10).map(|c| c.to_string()).collect();
    let ck = dir.join("ck");
    alkit::checkpoint::import(&w, &arch, &norm, train.item_shape(), classes.clone(), &ck).unwrap();
    let loaded = alkit::checkpoint::load(&ck, &Device::Cpu).unwrap();
    let x = test
        .batch(&(0..16).collect::<Vec<_>>(), &Device::Cpu)
        .unwrap();
    let a = model
        .predict(&x)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    let b = loaded
        .model
        .predict(&x)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    assert_eq!(a, b);
    let fc2 = named.remove("fc2.weight").unwrap();
    named.insert("classifier.weight".into(), fc2);
    candle_core::safetensors::save(&named, &w).unwrap();
    let bad = dir.join("bad");
    let e = alkit::checkpoint::import(&w, &arch, &norm, train.item_shape(), classes, &bad)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("fc2.weight") && e.contains("w.safetensors"),
        "{e}"
    );
    assert!(!bad.exists());
}

/// Everything under `root`, as sorted relative paths.
fn tree(root: &Path) -> Vec<String> {
    fn go(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            out.push(p.strip_prefix(root).unwrap().display().to_string());
            if p.is_dir() {
                go(root, &p, out);
            }
        }
    }
    let mut out = Vec::new();
    go(root, root, &mut out);
    out.sort();
    out
}

#[test]
fn a_hostile_hub_endpoint_cannot_write_outside_the_cache_or_crash() {
    use alkit::hub::{Hub, HubRepo, RepoKind};
    const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";
    // Each repository name selects one misbehaviour of the server.
    fn answer(path: &str) -> (String, Vec<u8>) {
        let ok = |headers: &str, body: &[u8]| {
            (
                format!(
                    "HTTP/1.1 200 OK\r\n{headers}Content-Length: {}\r\n",
                    body.len()
                ),
                body.to_vec(),
            )
        };
        let file = |commit: &str, etag: &str| {
            ok(
                &format!("x-repo-commit: {commit}\r\nETag: \"{etag}\"\r\n"),
                b"{\"x\":1}",
            )
        };
        match path {
            p if p.starts_with("/api/models/o/listing/") => ok(
                "",
                br#"{"siblings":[{"rfilename":"config.json"},{"rfilename":"../../../evil.json"}]}"#,
            ),
            p if p.starts_with("/o/good/") => file(COMMIT, "abc123"),
            p if p.starts_with("/o/commit/") => file("../../../../escaped", "abc123"),
            p if p.starts_with("/o/etag/") => file(COMMIT, "../../../escaped"),
            p if p.starts_with("/o/noloc/") => ("HTTP/1.1 302 Found\r\n".into(), Vec::new()),
            p if p.starts_with("/o/loop/") => (
                "HTTP/1.1 302 Found\r\nLocation: /o/loop/again\r\n".into(),
                Vec::new(),
            ),
            p if p.starts_with("/o/short/") => (
                format!(
                    "HTTP/1.1 200 OK\r\nx-repo-commit: {COMMIT}\r\nETag: \"feed\"\r\n\
                     Content-Length: 100\r\n"
                ),
                b"only eleven".to_vec(),
            ),
            _ => (
                "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n".into(),
                Vec::new(),
            ),
        }
    }
    let base = serve(answer);
    let root = tmp("hostile-hub");
    let cache = root.join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    let hub = Hub::new(&cache, false).with_endpoint(&base);
    let get = |name: &str| {
        hub.get(
            &HubRepo::parse(name).unwrap(),
            RepoKind::Model,
            "config.json",
            &mut Silent,
        )
    };
    for (name, says) in [
        ("o/commit", "is not a hash"),
        ("o/etag", "cannot name a cache file"),
        ("o/noloc", "without a Location"),
        ("o/loop", "redirects"),
        ("o/short", "before all bytes were read"),
        ("o/missing", "404"),
    ] {
        let e = get(name).unwrap_err().to_string();
        assert!(
            e.contains(says) && e.contains(&format!("hf:{name}")),
            "{name}: {e}"
        );
    }
    let e = hub
        .files(&HubRepo::parse("o/listing").unwrap(), RepoKind::Model)
        .unwrap_err()
        .to_string();
    assert!(e.contains("evil.json") && e.contains("not a safe"), "{e}");
    // Nothing was created outside the cache, and no file of a failed download was kept
    // inside it (empty folders only).
    assert!(
        tree(&root).iter().all(|p| p.starts_with("cache")),
        "{:?}",
        tree(&root)
    );
    for p in tree(&cache) {
        assert!(cache.join(&p).is_dir(), "{p} was kept");
    }

    // An honest answer lands in the hub's layout and is then found offline.
    let p = get("o/good").unwrap();
    assert!(p.starts_with(&cache), "{}", p.display());
    assert_eq!(std::fs::read(&p).unwrap(), b"{\"x\":1}");
    let dir = cache.join("models--o--good");
    assert_eq!(
        std::fs::read_to_string(dir.join("refs/main")).unwrap(),
        COMMIT
    );
    assert!(dir.join("blobs/abc123").is_file());
    let offline = Hub::new(&cache, true);
    assert_eq!(
        offline
            .get(
                &HubRepo::parse("o/good").unwrap(),
                RepoKind::Model,
                "config.json",
                &mut Silent
            )
            .unwrap(),
        p
    );
    // An edited ref is an error naming it, not a path followed.
    std::fs::write(dir.join("refs/main"), "../../../../etc").unwrap();
    let e = offline
        .get(
            &HubRepo::parse("o/good").unwrap(),
            RepoKind::Model,
            "config.json",
            &mut Silent,
        )
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("refs/main") && e.contains("not a commit hash"),
        "{e}"
    );
    // A file name from anywhere (the listing of a cache, a caller) stays inside the snapshot.
    let e = hub
        .get(
            &HubRepo::parse("o/good").unwrap(),
            RepoKind::Model,
            "../../x",
            &mut Silent,
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a safe file name"), "{e}");
}

#[test]
fn a_folder_of_photos_of_mixed_sizes_is_scaled_to_one_square_size() {
    // Photos as a phone and a scanner leave them: RGB and grey, portrait and landscape, large
    // and small. Each becomes 64x64 (shorter side scaled, centre kept), grey promoted to RGB.
    let dir = tmp("mixed-photos");
    let pool = dir.join("my_photos");
    let shapes: [(&str, [usize; 3]); 5] = [
        ("cat/a.png", [3, 300, 200]),
        ("dog/b.png", [3, 120, 480]),
        ("c.png", [1, 28, 28]),
        ("d.png", [3, 64, 64]),
        ("e.png", [3, 700, 700]),
    ];
    for (name, shape) in shapes {
        let n: usize = shape.iter().product();
        // A bright disc in the middle of a dark frame: it must stay in the middle.
        let (h, w) = (shape[1] as f32, shape[2] as f32);
        let item: Vec<f32> = (0..n)
            .map(|k| {
                let (y, x) = ((k / shape[2]) % shape[1], k % shape[2]);
                let (dy, dx) = (y as f32 + 0.5 - h / 2.0, x as f32 + 0.5 - w / 2.0);
                if dy * dy + dx * dx < (h.min(w) / 4.0).powi(2) {
                    1.0
                } else {
                    0.0
                }
            })
            .collect();
        alkit::data::image::save_png(&pool.join(name), &item, &shape).unwrap();
    }
    let loaded = load_source(
        &Source::parse(&pool.to_string_lossy()).unwrap(),
        &Hub::new(dir.join("nohub"), true),
        &mut Silent,
        None,
    )
    .unwrap();
    let items = loaded.pool;
    assert_eq!(items.item_shape, vec![3, 64, 64]);
    assert_eq!(
        items.ids,
        vec!["c.png", "cat/a.png", "d.png", "dog/b.png", "e.png"]
    );
    assert_eq!(items.classes, vec!["cat", "dog"]);
    let len = 3 * 64 * 64;
    for (k, id) in items.ids.iter().enumerate() {
        let x = &items.x[k * len..(k + 1) * len];
        // Centre bright, corners dark, in every channel.
        for c in 0..3 {
            let at = |y: usize, x_: usize| x[c * 64 * 64 + y * 64 + x_];
            assert!(at(32, 32) > 0.9, "{id} centre {}", at(32, 32));
            assert!(at(1, 1) < 0.1 && at(62, 62) < 0.1, "{id} corners");
        }
    }
    // One size, at most 256 on a side: kept as it is (the shipped subset's 28x28 sessions).
    let same = dir.join("same");
    for k in 0..3 {
        alkit::data::image::save_png(
            &same.join(format!("{k}.png")),
            &[0.5; 28 * 28],
            &[1, 28, 28],
        )
        .unwrap();
    }
    let kept = load_source(
        &Source::parse(&same.to_string_lossy()).unwrap(),
        &Hub::new(dir.join("nohub"), true),
        &mut Silent,
        None,
    )
    .unwrap();
    assert_eq!(kept.pool.item_shape, vec![1, 28, 28]);
}

#[test]
fn a_train_test_image_folder_is_a_data_set_with_a_test_split() {
    use alkit::data::source::{load, Source};
    let dir = tmp("split-folder");
    // Pixel values k/255 survive the PNG round trip exactly.
    let item = |k: usize| -> Vec<f32> {
        (0..3 * 4 * 5)
            .map(|p| ((p * 7 + k * 31) % 256) as f32 / 255.0)
            .collect()
    };
    let make = |labels: &[u32]| {
        let x = (0..labels.len()).flat_map(item).collect();
        Dataset::new(x, labels.to_vec(), vec![3, 4, 5], 3).unwrap()
    };
    let train = make(&[0, 1, 2, 1, 0, 2]);
    // The test split lacks class 1: its labels are the train split's by name.
    let test = make(&[2, 0, 2]);
    write_split_folder(&dir.join("ok"), &train, &test);
    let hub = alkit::hub::Hub::new(dir.join("hub"), true);
    let source = Source::parse(dir.join("ok").to_str().unwrap()).unwrap();
    let loaded = load(&source, &hub, &mut Silent, None).unwrap();
    let splits = loaded.splits(&source).unwrap();
    assert_eq!(loaded.pool.classes, ["0", "1", "2"]);
    assert_eq!(loaded.pool.ids[0], "train/0/00000.png");
    assert_eq!(splits.train.labels(), &[0, 0, 1, 1, 2, 2]);
    assert_eq!(splits.test.labels(), &[0, 2, 2]);
    assert_eq!(splits.test.classes(), 3);
    assert_eq!(splits.test.item_shape(), &[3, 4, 5]);
    // test/0/00001.png is test item 1, sorted first.
    assert_eq!(splits.test.item(0), &item(1)[..]);
    // `alkit score` reads the pool (train/) of such a folder, ids relative to the folder.
    let out = dir.join("s.csv");
    let ck = dir.join("ck");
    let o = alkit_cmd()
        .args(["-q", "train", "--model", "mlp", "--steps", "1", "--data"])
        .arg(dir.join("ok"))
        .arg("--out")
        .arg(&ck)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = alkit_cmd()
        .args(["-q", "score", "--scorer", "entropy", "--checkpoint"])
        .arg(&ck)
        .arg("--data")
        .arg(dir.join("ok"))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let ids: Vec<String> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(1).unwrap().to_string())
        .collect();
    assert_eq!(ids, loaded.pool.ids);

    // A test class the train split does not have, and an unlabeled image in a split: refused,
    // naming the folder and the culprit.
    let refused = |name: &str| {
        let source = Source::parse(dir.join(name).to_str().unwrap()).unwrap();
        load(&source, &hub, &mut Silent, None)
            .unwrap_err()
            .to_string()
    };
    write_split_folder(&dir.join("extra"), &make(&[0, 1]), &make(&[2]));
    let e = refused("extra");
    assert!(e.contains("test/2/") && e.contains("extra"), "{e}");
    write_split_folder(&dir.join("loose"), &train, &test);
    std::fs::copy(
        dir.join("loose/train/0/00000.png"),
        dir.join("loose/train/stray.png"),
    )
    .unwrap();
    let e = refused("loose");
    assert!(
        e.contains("class subfolders only") && e.contains("train"),
        "{e}"
    );
    // A validation split beside them: said, not read as three classes without images.
    std::fs::remove_file(dir.join("loose/train/stray.png")).unwrap();
    std::fs::create_dir_all(dir.join("loose/validation/0")).unwrap();
    let e = refused("loose");
    assert!(
        e.contains("validation") && e.contains("only train/ and test/"),
        "{e}"
    );
}

#[test]
fn cifar10_from_the_hub_runs_the_acquisition_curve_on_colour_images() {
    // The REGrad paper's CIFAR-10 protocol, offline: `alkit curve --data hf:uoft-cs/cifar10`
    // on a miniature in the Hub's layout (`plain_text/` shards, an `img` column, the card's
    // class names; tests/fixtures/make_hub_cifar_fixture.py), whose colour pixels are a formula
    // of the shipped MNIST digits.
    let dir = tmp("hub-cifar");
    let cache = dir.join("hub");
    let fx = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hub-cifar10");
    install_hub_dataset(&cache, "datasets--uoft-cs--cifar10", &fx, "plain_text");
    let hub = Hub::new(&cache, true);
    let src = Source::parse("hf:uoft-cs/cifar10").unwrap();
    let loaded = load_source(&src, &hub, &mut Silent, None).unwrap();
    assert_eq!(loaded.pool.item_shape, vec![3, 32, 32]);
    assert_eq!(loaded.pool.classes[0], "airplane");
    assert_eq!(loaded.pool.classes[9], "truck");
    let (train, test) = shipped();
    let expect = |ds: &Dataset, n: usize| -> Vec<f32> {
        let mut v = Vec::with_capacity(n * 3 * 32 * 32);
        for i in 0..n {
            let p = |r: usize, c: usize| -> u32 {
                if (2..30).contains(&r) && (2..30).contains(&c) {
                    (ds.item(i)[(r - 2) * 28 + c - 2] * 255.0).round() as u32
                } else {
                    0
                }
            };
            for ch in 0..3 {
                for r in 0..32 {
                    for c in 0..32 {
                        let q = match ch {
                            0 => p(r, c),
                            1 => 255 - p(r, c),
                            _ => p(r, c) / 2,
                        };
                        v.push(q as f32 / 255.0);
                    }
                }
            }
        }
        v
    };
    assert_eq!(loaded.pool.x, expect(&train, 40));
    assert_eq!(loaded.test.as_ref().unwrap().x, expect(&test, 20));
    let out = dir.join("curve");
    let o = alkit_cmd()
        .env("HF_HUB_CACHE", &cache)
        .env("HF_HUB_OFFLINE", "1")
        .args([
            "-q",
            "curve",
            "--data",
            "hf:uoft-cs/cifar10",
            "--initial",
            "10",
        ])
        .args([
            "--query", "5", "--cycles", "2", "--steps", "5", "--scorer", "entropy",
        ])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let curve = std::fs::read_to_string(out.join("curve.csv")).unwrap();
    // Cycles 0, 1, 2 with 10, 15, 20 labels.
    for labeled in ["10", "15", "20"] {
        assert!(
            curve.lines().any(|l| l.split(',').any(|f| f == labeled)),
            "{labeled}: {curve}"
        );
    }
}

/// A Hub dataset fixture folder `fx` (its card and one train and one test shard) installed in
/// the hub cache `cache` as repository folder `folder`, the shards under `sub/` as the Hub
/// publishes them.
fn install_hub_dataset(cache: &Path, folder: &str, fx: &Path, sub: &str) {
    let shard = |split: &str| {
        let name = format!("{split}-00000-of-00001.parquet");
        (format!("{sub}/{name}"), fx.join(name))
    };
    let (train, test) = (shard("train"), shard("test"));
    fake_hub_cache(
        cache,
        folder,
        &[
            ("README.md", fx.join("README.md")),
            (&train.0, train.1),
            (&test.0, test.1),
        ],
    );
}
