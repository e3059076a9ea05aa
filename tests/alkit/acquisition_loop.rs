//! The simulated loop: same seed same curve, kill and resume, the protocol counts; checkpoints round-trip.

use super::*;

#[test]
fn same_seed_gives_identical_curves_and_resume_matches_uninterrupted() {
    let (train, test) = normalised();
    let spec = small_spec(vec![kind("entropy"), kind("random")]);
    let a = tmp("curve-a");
    let b = tmp("curve-b");
    let c = tmp("curve-c");
    run_small(&spec, &train, &test, &a).unwrap();
    run_small(&spec, &train, &test, &b).unwrap();
    let csv_a = std::fs::read_to_string(a.join("curve.csv")).unwrap();
    let csv_b = std::fs::read_to_string(b.join("curve.csv")).unwrap();
    assert_eq!(strip_timings(&csv_a), strip_timings(&csv_b));
    assert_eq!(csv_a.lines().count(), 1 + 2 * 4);
    // Learning happens: 50 labels beat 20 on average over strategies.
    let rows: Vec<Vec<String>> = csv_a
        .lines()
        .skip(1)
        .map(|l| l.split(',').map(String::from).collect())
        .collect();
    let acc = |cycle: &str| {
        rows.iter()
            .filter(|r| r[2] == cycle)
            .map(|r| r[4].parse::<f64>().unwrap())
            .sum::<f64>()
    };
    assert!(acc("3") > acc("0"), "{csv_a}");

    // Kill during cycle 2's training of the second strategy, then resume.
    let mut kill = KillAt {
        cycle: 2,
        step: 10,
        current: 0,
    };
    let mut killed_spec = spec.clone();
    killed_spec.strategies = vec![kind("random")];
    let err = run_curve(
        &killed_spec,
        &train,
        &test,
        &std_of(),
        &c,
        alkit::jobs::curve::Execution::default(),
        &Device::Cpu,
        &mut kill,
    )
    .unwrap_err();
    assert!(matches!(err, Error::Interrupted), "{err}");
    let saved: RunState =
        serde_json::from_slice(&std::fs::read(state_path(&c, "random", 5)).unwrap()).unwrap();
    assert_eq!(saved.records.len(), 2, "cycles 0 and 1 saved, cycle 2 not");
    run_curve(
        &killed_spec,
        &train,
        &test,
        &std_of(),
        &c,
        alkit::jobs::curve::Execution {
            resume: true,
            ..Default::default()
        },
        &Device::Cpu,
        &mut Silent,
    )
    .unwrap();
    let csv_c = std::fs::read_to_string(c.join("curve.csv")).unwrap();
    let random_rows = |csv: &str| -> Vec<String> {
        strip_timings(csv)
            .lines()
            .filter(|l| l.starts_with("random"))
            .map(String::from)
            .collect()
    };
    assert_eq!(random_rows(&csv_a), random_rows(&csv_c));
    assert_eq!(random_rows(&csv_c).len(), 4);

    // A fresh run refuses a folder that holds one; resuming a different experiment is refused.
    let e = run_small(&spec, &train, &test, &a).unwrap_err();
    assert!(e.to_string().contains("setting `resume`"), "{e}");
    let mut other = spec.clone();
    other.config.query = 11;
    assert!(run_curve(
        &other,
        &train,
        &test,
        &std_of(),
        &a,
        alkit::jobs::curve::Execution {
            resume: true,
            ..Default::default()
        },
        &Device::Cpu,
        &mut Silent
    )
    .is_err());
}

#[test]
fn labels_are_never_acquired_twice_and_counts_follow_the_protocol() {
    let (train, test) = normalised();
    let spec = small_spec(vec![kind("margin")]);
    let params = spec.config.validate(train.len()).unwrap();
    let std = std_of();
    let ctx = RunContext {
        train: &train,
        test: &test,
        model: &spec.model,
        params: &params,
        input_std: &std,
        device: &Device::Cpu,
    };
    let strategy = kind("margin").strategy(&Default::default()).unwrap();
    let mut st = RunState::new(&strategy, 1, &spec.config, "cnn".into(), &train, &test);
    run(&ctx, &strategy, &mut st, None, &mut Silent).unwrap();
    let mut idx: Vec<usize> = st.labeled.iter().map(|p| p.0).collect();
    assert_eq!(idx.len(), 20 + 3 * 10);
    idx.sort();
    idx.dedup();
    assert_eq!(idx.len(), 50);
    let labeled: Vec<usize> = st.records.iter().map(|r| r.labeled).collect();
    assert_eq!(labeled, vec![20, 30, 40, 50]);
    for c in 1..=3 {
        assert_eq!(st.labeled.iter().filter(|p| p.1 == c).count(), 10);
    }
    // A pool too small for the protocol is a clear settings error.
    let mut big = spec.config.clone();
    big.cycles = 1000;
    assert!(matches!(
        big.validate(train.len()),
        Err(Error::Config {
            field: "cycles",
            ..
        })
    ));
    let _ = Strategy::random();
}

/// Records what each cycle scored and what the state acquired.
#[derive(Default)]
struct ScoredSets(Vec<Vec<usize>>);

impl Observer for ScoredSets {
    fn on(&mut self, e: &Event<'_>) -> Control {
        if let Event::Scored { indices, .. } = e {
            self.0.push(indices.to_vec());
        }
        Control::Continue
    }
}

#[test]
fn subsampling_scores_a_seeded_subset_and_picks_inside_it() {
    let (train, test) = normalised();
    let mut spec = small_spec(vec![kind("entropy")]);
    spec.config.subsample = Some(150);
    let params = spec.config.validate(train.len()).unwrap();
    let std = std_of();
    let ctx = RunContext {
        train: &train,
        test: &test,
        model: &spec.model,
        params: &params,
        input_std: &std,
        device: &Device::Cpu,
    };
    let strategy = kind("entropy").strategy(&Default::default()).unwrap();
    let go = || {
        let mut st = RunState::new(&strategy, 4, &spec.config, "cnn".into(), &train, &test);
        let mut seen = ScoredSets::default();
        run(&ctx, &strategy, &mut st, None, &mut seen).unwrap();
        (st, seen.0)
    };
    let (st, scored) = go();
    assert_eq!(scored.len(), 3);
    for (c, set) in scored.iter().enumerate() {
        // 150 distinct unlabeled items, in pool order; the cycle's picks among them.
        assert_eq!(set.len(), 150);
        assert!(set.windows(2).all(|w| w[0] < w[1]));
        let before: std::collections::HashSet<usize> = st
            .labeled
            .iter()
            .filter(|p| p.1 <= c)
            .map(|p| p.0)
            .collect();
        assert!(set.iter().all(|i| !before.contains(i)));
        let picks: Vec<usize> = st
            .labeled
            .iter()
            .filter(|p| p.1 == c + 1)
            .map(|p| p.0)
            .collect();
        assert_eq!(picks.len(), 10);
        assert!(picks.iter().all(|i| set.contains(i)));
    }
    assert_ne!(scored[0], scored[1]);
    // Same seed, same subsets and picks.
    let (again, scored_again) = go();
    assert_eq!((again.labeled, scored_again), (st.labeled, scored));
    // A subset smaller than a batch is a settings error.
    let mut small = spec.config.clone();
    small.subsample = Some(5);
    assert!(matches!(
        small.validate(train.len()),
        Err(Error::Config {
            field: "subsample",
            ..
        })
    ));
}

// ------------------------------------------------------------------------- checkpoints

#[test]
fn checkpoint_round_trip_and_tensor_names_are_stable() {
    let (train, test) = normalised();
    let arch = Arch::Cnn(CnnConfig::standard(train.item_shape(), 10));
    let (vb, params) = seeded(stream(2, Purpose::Init, 0), DType::F32, &Device::Cpu);
    let model = arch.build(vb).unwrap();
    // Golden names and shapes: the documented PyTorch-compatible layout.
    let names: Vec<(String, Vec<usize>)> = params
        .named()
        .iter()
        .map(|(n, v)| (n.clone(), v.dims().to_vec()))
        .collect();
    let want: Vec<(String, Vec<usize>)> = [
        ("conv1.weight", vec![32, 1, 3, 3]),
        ("conv1.bias", vec![32]),
        ("conv2.weight", vec![64, 32, 3, 3]),
        ("conv2.bias", vec![64]),
        ("fc1.weight", vec![128, 1600]),
        ("fc1.bias", vec![128]),
        ("fc2.weight", vec![10, 128]),
        ("fc2.bias", vec![10]),
    ]
    .into_iter()
    .map(|(n, s)| (n.to_string(), s))
    .collect();
    assert_eq!(names, want);
    let dir = tmp("ckpt");
    let norm = Normalizer::fit(&train);
    alkit::checkpoint::save(
        &dir,
        &arch,
        &params,
        &norm,
        train.item_shape(),
        (0..10).map(|c| c.to_string()).collect(),
    )
    .unwrap();
    let ck = alkit::checkpoint::load(&dir, &Device::Cpu).unwrap();
    let idx: Vec<usize> = (0..32).collect();
    let x = test.batch(&idx, &Device::Cpu).unwrap();
    let a: Vec<f32> = model
        .predict(&x)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    let b: Vec<f32> = ck
        .model
        .predict(&x)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    assert_eq!(a, b);
    assert_eq!(ck.config.normalizer, norm);
    // A checkpoint missing a tensor is refused with its name.
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    cfg["tensors"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"name": "fc3.weight", "shape": [1]}));
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    let e = alkit::checkpoint::load(&dir, &Device::Cpu).err().unwrap();
    assert!(e.to_string().contains("fc3.weight"), "{e}");
}

#[test]
fn garbage_checkpoints_are_refused_naming_the_file() {
    // A normaliser std of 0 or below, class names that do not match the outputs (or repeat),
    // and NaN weights would all score silently; each is an error naming the file.
    let dir = tmp("garbage-ckpt");
    let ck = dir.join("ok");
    let o = alkit_cmd()
        .args(["-q", "train", "--steps", "2", "--out"])
        .arg(&ck)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    alkit::checkpoint::load(&ck, &Device::Cpu).unwrap();
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ck.join("config.json")).unwrap()).unwrap();
    type Edit = fn(&mut serde_json::Value);
    let edits: [(&str, Edit, &str); 4] = [
        (
            "std0",
            |c| c["normalizer"]["std"][0] = 0.0.into(),
            "standard deviation",
        ),
        (
            "stdneg",
            |c| c["normalizer"]["std"][0] = (-1.0).into(),
            "standard deviation",
        ),
        (
            "classes",
            |c| {
                c["classes"].as_array_mut().unwrap().pop();
            },
            "class names",
        ),
        ("dup", |c| c["classes"][1] = "0".into(), "given twice"),
    ];
    for (name, edit, want) in edits {
        let bad = dir.join(name);
        std::fs::create_dir_all(&bad).unwrap();
        std::fs::copy(ck.join("model.safetensors"), bad.join("model.safetensors")).unwrap();
        let mut c = config.clone();
        edit(&mut c);
        std::fs::write(bad.join("config.json"), c.to_string()).unwrap();
        let e = alkit::checkpoint::load(&bad, &Device::Cpu)
            .err()
            .expect(name)
            .to_string();
        assert!(e.contains("config.json") && e.contains(want), "{name}: {e}");
    }
    // One NaN in a weight tensor.
    let bad = dir.join("nan");
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::copy(ck.join("config.json"), bad.join("config.json")).unwrap();
    let mut tensors =
        candle_core::safetensors::load(ck.join("model.safetensors"), &Device::Cpu).unwrap();
    let w = tensors["fc2.bias"].to_vec1::<f32>().unwrap();
    let mut w2 = w.clone();
    w2[3] = f32::NAN;
    let n = w2.len();
    tensors.insert(
        "fc2.bias".into(),
        Tensor::from_vec(w2, n, &Device::Cpu).unwrap(),
    );
    candle_core::safetensors::save(&tensors, bad.join("model.safetensors")).unwrap();
    let e = alkit::checkpoint::load(&bad, &Device::Cpu)
        .err()
        .expect("nan")
        .to_string();
    assert!(
        e.contains("model.safetensors") && e.contains("fc2.bias") && e.contains("NaN"),
        "{e}"
    );
}

#[test]
fn resume_refuses_edited_run_state_naming_the_file() {
    // A finished run's state with its labeled list cut, a label moved to a later cycle, a
    // repeated item or a record with the wrong label count: resuming is an error naming the
    // file, and the file is left as it was.
    let (train, test) = normalised();
    let spec = small_spec(vec![kind("random")]);
    let out = tmp("edited-state");
    run_small(&spec, &train, &test, &out).unwrap();
    let path = state_path(&out, "random", spec.seeds[0]);
    let good: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    type Edit = fn(&mut serde_json::Value);
    let edits: [(&str, Edit); 4] = [
        ("cut", |s| {
            s["labeled"].as_array_mut().unwrap().truncate(10);
        }),
        ("moved", |s| s["labeled"][0][1] = 99.into()),
        ("repeated", |s| {
            let first = s["labeled"][0][0].clone();
            s["labeled"][1][0] = first;
        }),
        ("record", |s| s["records"][1]["labeled"] = 7.into()),
    ];
    for (name, edit) in edits {
        let mut s = good.clone();
        edit(&mut s);
        let text = s.to_string();
        std::fs::write(&path, &text).unwrap();
        let e = run_curve(
            &spec,
            &train,
            &test,
            &std_of(),
            &out,
            alkit::jobs::curve::Execution {
                resume: true,
                ..Default::default()
            },
            &Device::Cpu,
            &mut Silent,
        )
        .unwrap_err();
        assert!(
            matches!(&e, Error::State { path: p, .. } if p == &path),
            "{name}: {e}"
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text, "{name}");
    }
}

#[test]
fn curve_with_stream_runs_the_curve_it_runs_in_memory() {
    // The training split read from its source a chunk at a time (IDX files; a train/test
    // image folder; a safetensors file): the same metrics every cycle, the same picks, the same run fingerprints
    // as the run that decodes it into memory; `--resume` continues a streamed run.
    let dir = tmp("curve-stream");
    let (train, test) = shipped();
    let folder = dir.join("folder");
    write_split_folder(&folder, &train.head(300), &test.head(100));
    let curve = |data: &Path, out: &Path, scorers: &str, extra: &[&str]| {
        let o = alkit_cmd()
            .args(["curve", "--data"])
            .arg(data)
            .args(["--scorer", scorers, "--initial", "20", "--query", "10"])
            .args(["--cycles", "2", "--steps", "20", "--out"])
            .arg(out)
            .args(extra)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    let runs = |out: &Path| -> Vec<serde_json::Value> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(out.join("runs"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        files
            .iter()
            .map(|f| {
                let mut v: serde_json::Value =
                    serde_json::from_slice(&std::fs::read(f).unwrap()).unwrap();
                for r in v["records"].as_array_mut().unwrap() {
                    r["train_s"] = 0.into();
                    r["score_s"] = 0.into();
                }
                v["pending_score_s"] = 0.into();
                v
            })
            .collect()
    };
    // A safetensors embedding file (PyTorch's, shipped) streams too: its labels read in
    // blocks, its test split from the header and the test tensors alone.
    let embeddings =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("data/embeddings/mnist-rp32.safetensors");
    for (data, scorers, model) in [
        (data_dir(), "entropy,bald", "cnn"),
        (folder, "margin", "cnn"),
        (embeddings, "entropy", "linear"),
    ] {
        let (a, b) = (dir.join("a"), dir.join("b"));
        let _ = std::fs::remove_dir_all(&a);
        let _ = std::fs::remove_dir_all(&b);
        curve(&data, &a, scorers, &["--model", model]);
        curve(&data, &b, scorers, &["--model", model, "--stream"]);
        let csv =
            |out: &Path| strip_timings(&std::fs::read_to_string(out.join("curve.csv")).unwrap());
        assert_eq!(csv(&a), csv(&b), "{}", data.display());
        assert_eq!(runs(&a), runs(&b), "{}", data.display());
    }
    // A streamed run stopped after its first strategy's state continues under --stream.
    let out = dir.join("c");
    curve(&data_dir(), &out, "entropy", &["--stream"]);
    std::fs::remove_file(out.join("curve.csv")).unwrap();
    let o = alkit_cmd()
        .args(["curve", "--resume"])
        .arg(&out)
        .arg("--stream")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.join("curve.csv").is_file());
}
