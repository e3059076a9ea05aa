//! ONNX models (cargo feature `onnx`): timm's tiny classifiers exported by
//! `tests/reference/onnx_export.py` (`data/onnx/`) give PyTorch's and ONNX Runtime's logits
//! and features through `checkpoint::open`, their last layer reproduces the logits, the CLI
//! scores a folder of photos with them (alone, as an ensemble, sharded), and every hostile
//! model or setting is refused by name with nothing written. Models too odd to ship (dynamic
//! image sizes, a MatMul + Add head, a Softmax output) are written here, protobuf by hand.
//!
//! The tests need ONNX Runtime's library (`ORT_DYLIB_PATH`, from scripts/onnxruntime.sh):
//! without it they are skipped with a message, and where `ALKIT_REQUIRE_ORT=1` (`.ci/run`)
//! they fail instead.

#[cfg(not(feature = "onnx"))]
#[test]
fn without_the_feature_an_onnx_checkpoint_says_how_to_get_it() {
    let dir = super::tmp("onnx-no-feature");
    let out = dir.join("s.csv");
    let o = super::alkit_cmd()
        .args(["score", "--checkpoint", "data/onnx/resnet/model.onnx"])
        .args(["--data", "data", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("cargo feature `onnx`") && err.contains("scripts/onnxruntime.sh"),
        "{err}"
    );
    assert!(!out.exists());
}

#[cfg(feature = "onnx")]
mod with_runtime {
    use super::super::{alkit_cmd, tmp};
    use alkit::checkpoint::{self, Checkpoint, OpenOptions};
    use alkit::nn::{last_layer, Mode};
    use alkit::observe::{Control, Event, Observer};
    use alkit::train::ModelBuilder;
    use candle_core::{DType, Device, Tensor};
    use std::path::{Path, PathBuf};

    /// Whether ONNX Runtime's library is named; a skip says why not, and where
    /// `ALKIT_REQUIRE_ORT=1` a missing library fails the test.
    fn runtime() -> bool {
        if std::env::var_os("ORT_DYLIB_PATH").is_some_and(|p| !p.is_empty()) {
            return true;
        }
        assert!(
            std::env::var("ALKIT_REQUIRE_ORT").as_deref() != Ok("1"),
            "ALKIT_REQUIRE_ORT=1 but ORT_DYLIB_PATH is not set (scripts/onnxruntime.sh DIR, \
             then source DIR/env.sh)"
        );
        #[allow(clippy::print_stderr)]
        {
            eprintln!(
                "skipped: the ONNX tests need ONNX Runtime: scripts/onnxruntime.sh DIR, then \
                 source DIR/env.sh (sets ORT_DYLIB_PATH)"
            );
        }
        false
    }

    fn model(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("data/onnx")
            .join(name)
            .join("model.onnx")
    }

    /// Records what the library chose unnamed.
    #[derive(Default)]
    struct Notes(Vec<String>);

    impl Observer for Notes {
        fn on(&mut self, event: &Event<'_>) -> Control {
            if let Event::Chose { what, .. } = event {
                self.0.push(what.to_string());
            }
            Control::Continue
        }
    }

    fn open(path: &Path, features: Option<&str>, notes: &mut Notes) -> alkit::Result<Checkpoint> {
        let options = OpenOptions {
            onnx_features: features.map(str::to_string),
            ..OpenOptions::default()
        };
        checkpoint::load_with(path, &options, &Device::Cpu, notes)
    }

    /// The reference script's pixels (`formula_pixels`): value `i` is the top byte of the low
    /// 32 bits of `(i + 1_000_003 * seed) * 2654435761`.
    fn formula_pixels(seed: u64, n: usize) -> Vec<u8> {
        (0..n as u64)
            .map(|i| {
                ((((i + 1_000_003 * seed).wrapping_mul(2654435761)) & 0xFFFF_FFFF) >> 24) as u8
            })
            .collect()
    }

    /// `max |a - b| / max |b|`.
    fn rel(a: &[f32], b: &[f32]) -> f64 {
        assert_eq!(a.len(), b.len());
        let scale = b.iter().fold(0f64, |m, v| m.max(f64::from(v.abs())));
        let diff = a
            .iter()
            .zip(b)
            .fold(0f64, |m, (x, y)| m.max(f64::from((x - y).abs())));
        diff / scale.max(1e-12)
    }

    fn values(t: &Tensor) -> Vec<f32> {
        t.flatten_all().unwrap().to_vec1::<f32>().unwrap()
    }

    #[test]
    fn exported_models_give_pytorchs_and_onnxruntimes_logits_and_features() {
        if !runtime() {
            return;
        }
        for (name, seed) in [
            ("resnet", 1),
            ("efficientnet", 2),
            ("vit", 3),
            ("efficientnet_b2", 2),
        ] {
            let mut notes = Notes::default();
            let ck = open(&model(name), None, &mut notes).unwrap();
            assert_eq!(ck.config.item_shape, [3, 160, 160], "{name}");
            assert_eq!(ck.model.classes(), 10, "{name}");
            assert_eq!(ck.config.classes.len(), 10, "{name}");
            assert!(ck.config.preprocess.is_some(), "{name}");
            // What the library chose unnamed is said: the features, found as the last Gemm's
            // input (an output of the graph, or added where the graph lacks it).
            assert_eq!(notes.0.len(), 1, "{name}: {:?}", notes.0);
            assert!(notes.0[0].starts_with("features: `"), "{:?}", notes.0);
            let added = notes.0[0].ends_with("added to the outputs");
            assert_eq!(added, name == "efficientnet_b2", "{:?}", notes.0);
            let expected = candle_core::safetensors::load(
                model(name).with_file_name("expected.safetensors"),
                &Device::Cpu,
            )
            .unwrap();
            let pixels = formula_pixels(seed, 3 * 3 * 160 * 160);
            let norm = &ck.config.normalizer;
            let x: Vec<f32> = pixels
                .iter()
                .enumerate()
                .map(|(i, &p)| {
                    let c = (i / (160 * 160)) % 3;
                    ((p as f32) / 255.0 - norm.mean[c]) / norm.std[c]
                })
                .collect();
            let x = Tensor::from_vec(x, (3, 3, 160, 160), &Device::Cpu).unwrap();
            let logits = values(&ck.model.predict(&x).unwrap());
            let ll = last_layer(ck.model.as_ref(), &x)
                .unwrap()
                .expect("a last layer");
            let h = values(&ll.h);
            let again = values(
                &ll.h
                    .matmul(&ll.w.t().unwrap())
                    .unwrap()
                    .broadcast_add(&ll.b)
                    .unwrap(),
            );
            let mut checks = vec![
                (
                    "torch logits",
                    rel(&logits, &values(&expected["torch_logits"])),
                ),
                (
                    "torch features",
                    rel(&h, &values(&expected["torch_features"])),
                ),
                ("ort logits", rel(&logits, &values(&expected["ort_logits"]))),
                ("h W^T + b", rel(&again, &logits)),
            ];
            if let Some(f) = expected.get("ort_features") {
                checks.push(("ort features", rel(&h, &values(f))));
            }
            for (what, r) in checks {
                assert!(r < 1e-4, "{name}: {what} differ by {r:e} (relative)");
            }
            assert_eq!(ll.w.dims(), [10, ll.h.dim(1).unwrap()], "{name}");
            // No autograd: training mode is refused by name, never a panic.
            let mut rng = alkit::rng::stream(0, alkit::rng::Purpose::Tool, 0);
            let e = ck
                .model
                .forward(&x, &mut Mode::Train(&mut rng))
                .unwrap_err();
            assert!(e.to_string().contains("no autograd"), "{e}");
            assert!(ck.config.arch.build(empty_vb()).is_err());
        }
        // The features named as they are in the graph: the same model.
        let named = open(&model("resnet"), Some("features"), &mut Notes::default()).unwrap();
        assert_eq!(
            named.config,
            open(&model("resnet"), None, &mut Notes::default())
                .unwrap()
                .config
        );
    }

    /// Images/s of each exported model's forward through alkit (ONNX Runtime on
    /// `RAYON_NUM_THREADS` threads, as alkit's own kernels), one JSON line per model, beside
    /// `tests/reference/onnx_speed.py`'s Python baselines at the same thread count.
    #[test]
    #[ignore = "a measurement, run by hand"]
    fn onnx_forward_speed() {
        if !runtime() {
            return;
        }
        let batch = 32;
        let reps = 10;
        for name in ["resnet", "efficientnet", "vit"] {
            let ck = open(&model(name), None, &mut Notes::default()).unwrap();
            let x = Tensor::randn(0f32, 1.0, (batch, 3, 160, 160), &Device::Cpu).unwrap();
            ck.model.predict(&x).unwrap();
            let t = std::time::Instant::now();
            for _ in 0..reps {
                ck.model.predict(&x).unwrap();
            }
            let rate = (batch * reps) as f64 / t.elapsed().as_secs_f64();
            #[allow(clippy::print_stderr)]
            {
                eprintln!(
                    "{{\"model\": \"{name}\", \"runtime\": \"alkit\", \"threads\": {}, \"batch\": {batch}, \"images_per_s\": {rate:.1}}}",
                    rayon::current_num_threads()
                );
            }
        }
    }

    fn empty_vb() -> candle_nn::VarBuilder<'static> {
        candle_nn::VarBuilder::from_tensors(Default::default(), DType::F32, &Device::Cpu)
    }

    /// A folder of RGB photos of odd sizes in two class folders, drawn by a formula.
    fn photos(dir: &Path) {
        for i in 0..6u32 {
            let (w, h) = (150 + 7 * i, 120 + 11 * i);
            let class = ["cat", "dog"][i as usize % 2];
            std::fs::create_dir_all(dir.join(class)).unwrap();
            let data: Vec<u8> = (0..w * h * 3)
                .map(|k| ((k * 31 + i * 17) % 251) as u8)
                .collect();
            let f = std::fs::File::create(dir.join(class).join(format!("{i}.png"))).unwrap();
            let mut enc = png::Encoder::new(std::io::BufWriter::new(f), w, h);
            enc.set_color(png::ColorType::Rgb);
            enc.set_depth(png::BitDepth::Eight);
            enc.write_header().unwrap().write_image_data(&data).unwrap();
        }
    }

    #[test]
    fn the_cli_scores_photos_with_onnx_models_alone_together_and_sharded() {
        if !runtime() {
            return;
        }
        let dir = tmp("onnx-cli");
        let pool = dir.join("photos");
        photos(&pool);
        let resnet = model("resnet");
        let score = |checkpoint: &str, extra: &[&str], out: &Path| {
            let scorer = if extra.contains(&"--scorer") {
                &[][..]
            } else {
                &["--scorer", "entropy,margin"][..]
            };
            alkit_cmd()
                .args(["score", "--checkpoint", checkpoint, "--data"])
                .arg(&pool)
                .args(scorer)
                .args(extra)
                .arg("--out")
                .arg(out)
                .output()
                .unwrap()
        };
        let csv = dir.join("s.csv");
        let o = score(resnet.to_str().unwrap(), &[], &csv);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{err}");
        assert!(err.contains("features: `features`"), "{err}");
        let text = std::fs::read_to_string(&csv).unwrap();
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some("index,id,entropy,margin"));
        let rows: Vec<&str> = lines.collect();
        assert_eq!(rows.len(), 6, "{text}");
        for r in &rows {
            let e: f64 = r.split(',').nth(2).unwrap().parse().unwrap();
            assert!(
                e.is_finite() && (0.0..=10f64.ln() + 1e-6).contains(&e),
                "{r}"
            );
        }
        // The folder holding model.onnx is the same checkpoint.
        let by_dir = dir.join("by_dir.csv");
        let o = score(resnet.parent().unwrap().to_str().unwrap(), &[], &by_dir);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(std::fs::read_to_string(&by_dir).unwrap(), text);
        // A Hub repository holding model.onnx (and its config.json) is the same checkpoint.
        let cache = dir.join("hub");
        super::super::fake_hub_cache(
            &cache,
            "models--test--onnx-resnet",
            &[
                ("config.json", resnet.with_file_name("config.json")),
                ("model.onnx", resnet.clone()),
            ],
        );
        let by_hub = |extra: &[&str], out: &Path| {
            alkit_cmd()
                .args(["score", "--checkpoint", "hf:test/onnx-resnet", "--data"])
                .arg(&pool)
                .args(["--scorer", "entropy,margin"])
                .args(extra)
                .arg("--out")
                .arg(out)
                .env("HF_HUB_CACHE", &cache)
                .env("HF_HUB_OFFLINE", "1")
                .output()
                .unwrap()
        };
        let hub_csv = dir.join("by_hub.csv");
        let o = by_hub(&[], &hub_csv);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(std::fs::read_to_string(&hub_csv).unwrap(), text);
        // A model alone with its preprocessing named by --onnx-config is the same checkpoint;
        // a config that cannot be read is refused by name.
        let bare = dir.join("bare");
        std::fs::create_dir_all(&bare).unwrap();
        std::fs::copy(&resnet, bare.join("alone.onnx")).unwrap();
        let config = resnet.with_file_name("config.json");
        let named = dir.join("named.csv");
        let o = score(
            bare.join("alone.onnx").to_str().unwrap(),
            &["--onnx-config", config.to_str().unwrap()],
            &named,
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(std::fs::read_to_string(&named).unwrap(), text);
        let missing = dir.join("missing.csv");
        let o = score(
            bare.join("alone.onnx").to_str().unwrap(),
            &["--onnx-config", dir.join("nope.json").to_str().unwrap()],
            &missing,
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && err.contains("--onnx-config") && err.contains("nope.json"),
            "{err}"
        );
        assert!(!missing.exists());
        // Its shards' manifest hashes the repository's model.onnx and config.json.
        let hub_shard = dir.join("hub_shard.csv");
        let o = by_hub(&["--shard", "0/2"], &hub_shard);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(Path::new(&format!("{}.shard.json", hub_shard.display())).is_file());
        // An ensemble of two ONNX models (a copy of the folder): BALD reads its members.
        let copy = dir.join("copy");
        super::super::copy_dir(resnet.parent().unwrap(), &copy);
        let both = format!("{},{}", resnet.display(), copy.join("model.onnx").display());
        let ens = dir.join("ens.csv");
        let o = score(&both, &["--scorer", "entropy,bald"], &ens);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let t = std::fs::read_to_string(&ens).unwrap();
        assert!(t.starts_with("index,id,entropy,bald\n"), "{t}");
        // Models that prepare their inputs differently make no ensemble.
        let mixed = format!("{},{}", resnet.display(), model("vit").display());
        let bad = dir.join("mixed.csv");
        let o = score(&mixed, &[], &bad);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains("must share"), "{err}");
        assert!(!bad.exists());
        // Sharded: the manifest hashes the .onnx file and its config.json.
        let shard = dir.join("shard.csv");
        let o = score(resnet.to_str().unwrap(), &["--shard", "0/2"], &shard);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(Path::new(&format!("{}.shard.json", shard.display())).is_file());
        // Gradient scores of a model known by its features and last layer are the last
        // layer's, named so, and the same with `--layers last` said.
        let grads = dir.join("regrad.csv");
        let o = score(
            resnet.to_str().unwrap(),
            &["--scorer", "entropy,regrad,gradnorm"],
            &grads,
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let t = std::fs::read_to_string(&grads).unwrap();
        assert!(
            t.starts_with("index,id,entropy,regrad@last,gradnorm@last\n"),
            "{t}"
        );
        for r in t.lines().skip(1) {
            for v in r.split(',').skip(3) {
                let v: f64 = v.parse().unwrap();
                assert!(v.is_finite() && v > 0.0, "{r}");
            }
        }
        let said = dir.join("regrad-last.csv");
        let o = score(
            resnet.to_str().unwrap(),
            &["--scorer", "entropy,regrad,gradnorm", "--layers", "last"],
            &said,
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(std::fs::read_to_string(&said).unwrap(), t);
        std::fs::remove_file(&grads).unwrap();
        // `ood` serves the same last-layer scores (classes `0`, `1` of the model's ten).
        let id = dir.join("id");
        for (split, class, from) in [
            ("train", "0", "cat/0.png"),
            ("train", "1", "dog/1.png"),
            ("test", "0", "cat/2.png"),
            ("test", "1", "dog/3.png"),
        ] {
            std::fs::create_dir_all(id.join(split).join(class)).unwrap();
            std::fs::copy(pool.join(from), id.join(split).join(class).join("x.png")).unwrap();
        }
        let o = alkit_cmd()
            .args(["-q", "ood", "--checkpoint"])
            .arg(&resnet)
            .arg("--train-data")
            .arg(&id)
            .arg("--ood-data")
            .arg(&id)
            .args(["--scorer", "entropy,regrad", "--out"])
            .arg(dir.join("ood"))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let t = std::fs::read_to_string(dir.join("ood/scores.csv")).unwrap();
        assert!(
            t.lines().next().unwrap().ends_with("entropy,regrad@last"),
            "{t}"
        );
        // Gradients over perturbed inputs need the whole network; weight-noise draws a model
        // alkit can rebuild; MC dropout a dropout to turn on.
        for (scorer, says) in [
            ("regrad-star", "perturbed copies"),
            ("perturb-theta", "cannot be rebuilt"),
            ("bald", "no dropout"),
        ] {
            let o = score(resnet.to_str().unwrap(), &["--scorer", scorer], &grads);
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(!o.status.success() && err.contains(says), "{scorer}: {err}");
            assert!(!err.contains("panicked"), "{err}");
            assert!(!grads.exists());
        }
    }

    // ---------------------------------------------------------------- hand-written models

    fn varint(mut v: u64, out: &mut Vec<u8>) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }

    fn bytes_field(n: u64, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        varint((n << 3) | 2, &mut out);
        varint(payload.len() as u64, &mut out);
        out.extend_from_slice(payload);
        out
    }

    fn int_field(n: u64, v: u64) -> Vec<u8> {
        let mut out = Vec::new();
        varint(n << 3, &mut out);
        varint(v, &mut out);
        out
    }

    /// A float tensor value info with dims given as numbers or names.
    fn value_info(name: &str, dims: &[&str]) -> Vec<u8> {
        let mut shape = Vec::new();
        for d in dims {
            let dim = match d.parse::<u64>() {
                Ok(v) => int_field(1, v),
                Err(_) => bytes_field(2, d.as_bytes()),
            };
            shape.extend(bytes_field(1, &dim));
        }
        let tensor = [int_field(1, 1), bytes_field(2, &shape)].concat();
        [
            bytes_field(1, name.as_bytes()),
            bytes_field(2, &bytes_field(1, &tensor)),
        ]
        .concat()
    }

    fn node(op: &str, inputs: &[&str], outputs: &[&str], ints: &[(&str, u64)]) -> Vec<u8> {
        let mut n = Vec::new();
        for i in inputs {
            n.extend(bytes_field(1, i.as_bytes()));
        }
        for o in outputs {
            n.extend(bytes_field(2, o.as_bytes()));
        }
        n.extend(bytes_field(3, format!("{op}_{}", outputs[0]).as_bytes()));
        n.extend(bytes_field(4, op.as_bytes()));
        for (k, v) in ints {
            let a = [
                bytes_field(1, k.as_bytes()),
                int_field(3, *v),
                int_field(20, 2),
            ]
            .concat();
            n.extend(bytes_field(5, &a));
        }
        n
    }

    fn initializer(name: &str, dims: &[u64], values: &[f32]) -> Vec<u8> {
        let mut t = Vec::new();
        for d in dims {
            t.extend(int_field(1, *d));
        }
        t.extend(int_field(2, 1));
        t.extend(bytes_field(8, name.as_bytes()));
        let raw: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        t.extend(bytes_field(9, &raw));
        t
    }

    /// A model of `(N, 3, H, W)` images (height and width as `dims` say): global average
    /// pool, flatten, then the head: `Gemm` (W (2, 3), b (2,)), `MatMul` + `Add` (W^T (3, 2),
    /// b), or a `Gemm` followed by `Softmax`; output `logits`.
    fn tiny(dims: [&str; 4], head: &str) -> Vec<u8> {
        let w = [0.5f32, -1.0, 2.0, 1.5, 0.25, -0.75];
        let wt = [w[0], w[3], w[1], w[4], w[2], w[5]];
        let b = [0.1f32, -0.2];
        let mut graph = Vec::new();
        graph.extend(bytes_field(
            1,
            &node("GlobalAveragePool", &["x"], &["p"], &[]),
        ));
        graph.extend(bytes_field(
            1,
            &node("Flatten", &["p"], &["h"], &[("axis", 1)]),
        ));
        let mut inits = vec![initializer("b", &[2], &b)];
        match head {
            "gemm" | "softmax" => {
                let out = if head == "gemm" { "logits" } else { "z" };
                graph.extend(bytes_field(
                    1,
                    &node("Gemm", &["h", "w", "b"], &[out], &[("transB", 1)]),
                ));
                inits.push(initializer("w", &[2, 3], &w));
                if head == "softmax" {
                    graph.extend(bytes_field(
                        1,
                        &node("Softmax", &["z"], &["logits"], &[("axis", 1)]),
                    ));
                }
            }
            _ => {
                graph.extend(bytes_field(1, &node("MatMul", &["h", "wt"], &["m"], &[])));
                graph.extend(bytes_field(1, &node("Add", &["m", "b"], &["logits"], &[])));
                inits.push(initializer("wt", &[3, 2], &wt));
            }
        }
        graph.extend(bytes_field(2, b"tiny"));
        for i in inits {
            graph.extend(bytes_field(5, &i));
        }
        graph.extend(bytes_field(11, &value_info("x", &dims)));
        graph.extend(bytes_field(12, &value_info("logits", &[dims[0], "2"])));
        let opset = [bytes_field(1, b""), int_field(2, 17)].concat();
        [
            int_field(1, 8),
            bytes_field(8, &opset),
            bytes_field(7, &graph),
        ]
        .concat()
    }

    #[test]
    fn a_one_channel_model_without_config_says_what_to_write_and_scores_as_onnxruntime() {
        // A 1-channel MNIST CNN exported by torch.onnx.export (tests/reference/
        // onnx_mnist_cnn.py), no config.json: refused naming the file to write, with its
        // content and the inline settings; with those settings, its entropy on the shipped
        // test split equals ONNX Runtime's in Python.
        if !runtime() {
            return;
        }
        let dir = tmp("onnx-mnist");
        let ck = model("mnist_cnn");
        let out = dir.join("s.csv");
        let score = |extra: &[&str]| {
            alkit_cmd()
                .args(["score", "--checkpoint"])
                .arg(&ck)
                .args(["--data", "data", "--split", "test", "--scorer", "entropy"])
                .args(extra)
                .arg("--out")
                .arg(&out)
                .output()
                .unwrap()
        };
        let o = score(&[]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        let cfg = ck.with_file_name("config.json");
        let error = &err[err.find("error:").unwrap()..];
        assert_eq!(
            error.matches(&*ck.display().to_string()).count(),
            1,
            "{err}"
        );
        for says in [
            &*format!("{}: missing", cfg.display()),
            "3 channels, not the model's 1",
            "\"input_size\": [1, 28, 28]",
            "\"num_classes\": 10",
            "`--input-mean` 0 and `--input-std` 1",
        ] {
            assert!(err.contains(says), "{says}: {err}");
        }
        assert!(!out.exists());
        let o = score(&["--input-mean", "0", "--input-std", "1"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let expected =
            candle_core::safetensors::load(ck.with_file_name("expected.safetensors"), &Device::Cpu)
                .unwrap();
        let want = expected["ort_entropy"].to_vec1::<f64>().unwrap();
        let csv = std::fs::read_to_string(&out).unwrap();
        let mut rows = csv.lines();
        let header: Vec<&str> = rows.next().unwrap().split(',').collect();
        let col = header.iter().position(|h| *h == "entropy").unwrap();
        let got: Vec<f64> = rows
            .take(want.len())
            .map(|r| r.split(',').nth(col).unwrap().parse().unwrap())
            .collect();
        assert_eq!(got.len(), 64);
        let worst = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        assert!(
            worst < 1.2e-6,
            "entropy differs from ONNX Runtime's by {worst}"
        );
        // One mean for a 1-channel model, or per channel; never half of the pair.
        let o = score(&["--input-mean", "0"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains("--input-std"), "{err}");
        let o = score(&["--input-mean", "0,0", "--input-std", "1,1"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains("2 values for a model of 1 channels"), "{err}");
    }

    #[test]
    fn an_onnx_model_is_a_frozen_backbone_for_a_curve() {
        if !runtime() {
            return;
        }
        let dir = tmp("onnx-backbone");
        let data = dir.join("photos");
        photos(&data.join("train"));
        photos(&data.join("test"));
        let cache = dir.join("cache");
        let curve = |out: &Path| {
            alkit_cmd()
                .args(["-q", "curve", "--data"])
                .arg(&data)
                .arg("--backbone")
                .arg(model("resnet"))
                .arg("--embed-cache")
                .arg(&cache)
                .args([
                    "--model",
                    "linear",
                    "--initial",
                    "2",
                    "--query",
                    "2",
                    "--cycles",
                    "1",
                ])
                .args(["--scorer", "entropy,regrad", "--layers", "last", "--out"])
                .arg(out)
                .output()
                .unwrap()
        };
        let o = curve(&dir.join("a"));
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let text = std::fs::read_to_string(dir.join("a/curve.csv")).unwrap();
        // Two scorers, cycles 0 and 1 each; the gradient scorer is the head's last layer's.
        assert_eq!(text.lines().count(), 5, "{text}");
        assert!(text.contains("\nregrad@last,0,1,4,"), "{text}");
        // The photos were embedded once through ONNX Runtime: a second curve reuses the file.
        assert_eq!(std::fs::read_dir(&cache).unwrap().count(), 1);
        let o = curve(&dir.join("b"));
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(std::fs::read_dir(&cache).unwrap().count(), 1);
        let cols = |p: &Path| super::super::strip_timings(&std::fs::read_to_string(p).unwrap());
        assert_eq!(
            cols(&dir.join("a/curve.csv")),
            cols(&dir.join("b/curve.csv"))
        );
    }

    /// A float `TensorProto` `name` of `dims` whose values lie in external data at
    /// `location` (with more `entries`, such as `offset` and `length`), `data_location` as
    /// given (1 is external).
    fn external_tensor(
        name: &str,
        dims: &[u64],
        location: &str,
        entries: &[(&str, &str)],
        data_location: u64,
    ) -> Vec<u8> {
        let entry = |k: &str, v: &str| {
            bytes_field(
                13,
                &[bytes_field(1, k.as_bytes()), bytes_field(2, v.as_bytes())].concat(),
            )
        };
        let mut t = Vec::new();
        for d in dims {
            t.extend(int_field(1, *d));
        }
        t.extend(int_field(2, 1));
        t.extend(bytes_field(8, name.as_bytes()));
        t.extend(entry("location", location));
        for (k, v) in entries {
            t.extend(entry(k, v));
        }
        t.extend(int_field(14, data_location));
        t
    }

    #[test]
    fn external_data_anywhere_in_a_graph_is_checked_before_onnx_runtime_reads_it() {
        // Refused before ONNX Runtime is loaded: no runtime is needed.
        let dir = tmp("onnx-external-hostile");
        std::fs::write(dir.join("w.bin"), [0u8; 8]).unwrap();
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        // Pieces appended to a valid model: protobuf merges a repeated `graph` field into the
        // first, so each adds an initializer, a node or a subgraph to it.
        let graph_with =
            |graph: Vec<u8>| [tiny(["N", "3", "4", "4"], "gemm"), bytes_field(7, &graph)].concat();
        let initializer = |t: Vec<u8>| graph_with(bytes_field(5, &t));
        let attribute = |name: &str, field: u64, payload: Vec<u8>| {
            let a = [
                bytes_field(1, name.as_bytes()),
                bytes_field(field, &payload),
            ]
            .concat();
            let n = [
                bytes_field(2, b"extra"),
                bytes_field(4, b"Constant"),
                bytes_field(5, &a),
            ]
            .concat();
            graph_with(bytes_field(1, &n))
        };
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            (
                "a parent folder",
                initializer(external_tensor("e", &[2], "../w.bin", &[], 1)),
                "`../w.bin` is not a relative path below the model's folder",
            ),
            (
                "an absolute path",
                initializer(external_tensor("e", &[2], "/etc/hostname", &[], 1)),
                "`/etc/hostname` is not a relative path",
            ),
            (
                "ONNX Runtime's memory address tag",
                initializer(external_tensor("e", &[2], "*/_ORT_MEM_ADDR_/*", &[], 1)),
                "is not a relative path",
            ),
            (
                "external by its low 32 bits",
                initializer(external_tensor("e", &[2], "../w.bin", &[], 0x1_0000_0001)),
                "`../w.bin` is not a relative path",
            ),
            (
                "an unknown data location",
                initializer(external_tensor("e", &[2], "w.bin", &[], 2)),
                "tensor `e`: data location 2",
            ),
            (
                "a folder",
                initializer(external_tensor("e", &[2], "sub", &[], 1)),
                "not a regular file",
            ),
            (
                "a range past the file, no length given",
                initializer(external_tensor("e", &[4], "w.bin", &[], 1)),
                "holds 8 bytes; its values lie at offset 0 length 16",
            ),
            (
                "a length the dims do not need",
                initializer(external_tensor("e", &[2], "w.bin", &[("length", "4")], 1)),
                "external data length 4 for 2 values",
            ),
            (
                "a Constant node's tensor",
                attribute("value", 5, external_tensor("c", &[2], "../w.bin", &[], 1)),
                "tensor `c`: external data location `../w.bin`",
            ),
            (
                "an If's subgraph initializer",
                attribute(
                    "then_branch",
                    6,
                    bytes_field(5, &external_tensor("s", &[2], "../w.bin", &[], 1)),
                ),
                "tensor `s`: external data location `../w.bin`",
            ),
        ];
        for (what, model, words) in cases {
            let path = dir.join("model.onnx");
            std::fs::write(&path, &model).unwrap();
            let e = open(&path, None, &mut Notes::default())
                .err()
                .unwrap_or_else(|| panic!("{what}: opened"))
                .to_string();
            assert!(
                e.contains("external data") && e.contains(words),
                "{what}: {e}"
            );
            let e = checkpoint::onnx::outline(&path).unwrap_err().to_string();
            assert!(e.contains(words), "{what}: outline: {e}");
        }
        // The same tensor within its file's 8 bytes is accepted by the checks (outline).
        let path = dir.join("model.onnx");
        std::fs::write(
            &path,
            initializer(external_tensor("e", &[2], "w.bin", &[], 1)),
        )
        .unwrap();
        let o = checkpoint::onnx::outline(&path).unwrap();
        assert_eq!(o.external, ["w.bin"]);
        assert_eq!(o.last_layer.unwrap().1, 2);
    }

    #[test]
    fn weights_in_an_external_data_file_score_as_inline_ones_and_a_bad_file_is_refused() {
        if !runtime() {
            return;
        }
        let dir = tmp("onnx-external");
        let pool = dir.join("photos");
        photos(&pool);
        let score = |checkpoint: &Path, out: &Path| {
            alkit_cmd()
                .args(["score", "--checkpoint"])
                .arg(checkpoint)
                .arg("--data")
                .arg(&pool)
                .args(["--scorer", "entropy,regrad", "--out"])
                .arg(out)
                .output()
                .unwrap()
        };
        // The `onnx` package's external-data copy of the efficientnet (onnx_external.py):
        // the same scores, the last layer's gradients read from the data file.
        let inline = dir.join("inline.csv");
        let o = score(&model("efficientnet"), &inline);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let external = model("efficientnet_external");
        let csv = dir.join("external.csv");
        let o = score(&external, &csv);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let text = std::fs::read_to_string(&csv).unwrap();
        assert!(text.starts_with("index,id,entropy,regrad@last\n"), "{text}");
        assert_eq!(text, std::fs::read_to_string(&inline).unwrap());
        // A Hub repository holding the model and its data file is the same checkpoint.
        let cache = dir.join("hub");
        let files: Vec<(&str, PathBuf)> = ["config.json", "model.onnx", "model.onnx.data"]
            .iter()
            .map(|f| (*f, external.with_file_name(f)))
            .collect();
        super::super::fake_hub_cache(&cache, "models--test--onnx-external", &files);
        let hub_csv = dir.join("hub.csv");
        let o = alkit_cmd()
            .args(["score", "--checkpoint", "hf:test/onnx-external", "--data"])
            .arg(&pool)
            .args(["--scorer", "entropy,regrad", "--out"])
            .arg(&hub_csv)
            .env("HF_HUB_CACHE", &cache)
            .env("HF_HUB_OFFLINE", "1")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(std::fs::read_to_string(&hub_csv).unwrap(), text);
        // A copy of the folder: its content hash covers the data file's bytes.
        let copy = dir.join("copy");
        std::fs::create_dir_all(&copy).unwrap();
        for (f, from) in &files {
            std::fs::copy(from, copy.join(f)).unwrap();
        }
        let hash = || {
            checkpoint::content_hash(
                &[copy.join("model.onnx").to_string_lossy().into_owned()],
                &OpenOptions::default(),
                &alkit::hub::Hub::new(dir.join("no-hub"), true),
                &mut Notes::default(),
            )
            .unwrap()
        };
        let before = hash();
        let data = copy.join("model.onnx.data");
        let mut bytes = std::fs::read(&data).unwrap();
        bytes[100] ^= 1;
        std::fs::write(&data, &bytes).unwrap();
        assert_ne!(hash(), before, "the data file's bytes are hashed");
        // Cut short: refused by name before ONNX Runtime reads it, nothing written.
        std::fs::write(&data, &bytes[..bytes.len() / 2]).unwrap();
        let out = dir.join("short.csv");
        let o = score(&copy.join("model.onnx"), &out);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success());
        assert!(
            err.contains("external data")
                && err.contains("model.onnx.data")
                && err.contains("holds"),
            "{err}"
        );
        assert!(!out.exists());
        // A location outside the model's folder (same length, so the protobuf stays whole).
        std::fs::write(&data, &bytes).unwrap();
        let graph = std::fs::read(copy.join("model.onnx")).unwrap();
        let (from, to) = (b"model.onnx.data", b"../el.onnx.data");
        let mut moved = graph.clone();
        let mut at = 0;
        while let Some(i) = moved[at..].windows(from.len()).position(|w| w == from) {
            moved[at + i..at + i + from.len()].copy_from_slice(to);
            at += i + from.len();
        }
        assert_ne!(moved, graph);
        std::fs::write(copy.join("model.onnx"), &moved).unwrap();
        let o = score(&copy.join("model.onnx"), &out);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success());
        assert!(
            err.contains("`../el.onnx.data` is not a relative path below the model's folder"),
            "{err}"
        );
        assert!(!out.exists());
    }

    #[test]
    fn hand_written_heads_and_dynamic_sizes() {
        if !runtime() {
            return;
        }
        let dir = tmp("onnx-tiny");
        let x = Tensor::arange(0f32, 2.0 * 3.0 * 4.0 * 4.0, &Device::Cpu)
            .unwrap()
            .reshape((2, 3, 4, 4))
            .unwrap()
            .affine(0.01, -0.3)
            .unwrap();
        // MatMul + Add, fixed sizes, no config.json: timm's defaults for a 4x4 input.
        let mm = dir.join("mm.onnx");
        std::fs::write(&mm, tiny(["N", "3", "4", "4"], "matmul")).unwrap();
        let mut notes = Notes::default();
        let ck = open(&mm, None, &mut notes).unwrap();
        assert_eq!(ck.config.item_shape, [3, 4, 4]);
        assert_eq!(ck.config.classes, ["0", "1"]);
        assert!(notes.0[0].contains("MatMul"), "{:?}", notes.0);
        let logits = ck.model.predict(&x).unwrap();
        let ll = last_layer(ck.model.as_ref(), &x).unwrap().unwrap();
        let again =
            ll.h.matmul(&ll.w.t().unwrap())
                .unwrap()
                .broadcast_add(&ll.b)
                .unwrap();
        assert!(rel(&values(&again), &values(&logits)) < 1e-6);
        // The features are the channel means, the head the one written above.
        let means = x.mean((2, 3)).unwrap();
        assert!(rel(&values(&ll.h), &values(&means)) < 1e-6);
        assert_eq!(values(&ll.w), [0.5, -1.0, 2.0, 1.5, 0.25, -0.75]);
        assert_eq!(values(&ll.b), [0.1, -0.2]);

        // Dynamic height and width: refused without a config.json, served with one.
        let dynamic = dir.join("dyn").join("model.onnx");
        std::fs::create_dir_all(dynamic.parent().unwrap()).unwrap();
        std::fs::write(&dynamic, tiny(["N", "3", "H", "W"], "gemm")).unwrap();
        let e = open(&dynamic, None, &mut Notes::default())
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("dynamic height") && e.contains("config.json"),
            "{e}"
        );
        let cfg = dynamic.with_file_name("config.json");
        let config = |classes: usize| {
            format!(
                r#"{{"architecture": "tiny", "num_classes": {classes},
                    "pretrained_cfg": {{"input_size": [3, 4, 4], "mean": [0.5, 0.5, 0.5],
                    "std": [0.5, 0.5, 0.5], "crop_pct": 1.0}}}}"#
            )
        };
        std::fs::write(&cfg, config(2)).unwrap();
        let ck = open(&dynamic, None, &mut Notes::default()).unwrap();
        assert_eq!(ck.config.item_shape, [3, 4, 4]);
        assert_eq!(ck.config.normalizer.mean, [0.5, 0.5, 0.5]);
        // A config.json whose class count is not the model's.
        std::fs::write(&cfg, config(5)).unwrap();
        let e = open(&dynamic, None, &mut Notes::default())
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("says 5 classes") && e.contains("have 2"), "{e}");

        // A Softmax after the last layer: scored as given, but no last layer is found (said).
        let soft = dir.join("soft.onnx");
        std::fs::write(&soft, tiny(["N", "3", "4", "4"], "softmax")).unwrap();
        let mut notes = Notes::default();
        let ck = open(&soft, None, &mut notes).unwrap();
        assert!(
            notes.0[0].starts_with("no features: the logits are written by Softmax"),
            "{:?}",
            notes.0
        );
        assert!(last_layer(ck.model.as_ref(), &x).unwrap().is_none());
        // Naming the features then is refused: their last layer is unknown.
        let e = open(&soft, Some("h"), &mut Notes::default())
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("onnx_features") && e.contains("`h`"), "{e}");
    }

    #[test]
    fn hostile_models_and_settings_are_refused_by_name_and_nothing_is_written() {
        if !runtime() {
            return;
        }
        let dir = tmp("onnx-hostile");
        let pool = dir.join("photos");
        photos(&pool);
        let bytes = std::fs::read(model("resnet")).unwrap();
        let write = |name: &str, b: &[u8]| {
            let p = dir.join(name);
            std::fs::write(&p, b).unwrap();
            p
        };
        // The graph output `logits` renamed alone: no node writes it.
        let at = bytes.windows(6).rposition(|w| w == b"logits").unwrap();
        let mut renamed = bytes.clone();
        renamed[at + 5] = b'z';
        // Every `features` renamed (node, Gemm input and output alike): a valid model whose
        // features output has another name.
        let mut refeatured = bytes.clone();
        for i in 0..refeatured.len().saturating_sub(8) {
            if &refeatured[i..i + 8] == b"features" {
                refeatured[i + 7] = b'z';
            }
        }
        let cases: Vec<(PathBuf, Vec<&str>, Vec<&str>)> = vec![
            (
                write("truncated.onnx", &bytes[..bytes.len() / 2]),
                vec![],
                vec!["not an ONNX model", "truncated"],
            ),
            (
                write("garbage.onnx", b"this is not a model at all\n"),
                vec![],
                vec!["not an ONNX model"],
            ),
            (write("empty.onnx", b""), vec![], vec!["not an ONNX model"]),
            (
                write("renamed.onnx", &renamed),
                vec![],
                vec!["ONNX Runtime refused it"],
            ),
            (
                model("resnet"),
                vec!["--onnx-features", "nope"],
                vec![
                    "`--onnx-features`",
                    "no output `nope`",
                    "`logits`, `features`",
                ],
            ),
            (
                write("refeatured.onnx", &refeatured),
                vec!["--onnx-features", "features"],
                vec!["`--onnx-features`", "no output `features`", "`featurez`"],
            ),
            (dir.join("missing.onnx"), vec![], vec!["missing.onnx"]),
        ];
        for (i, (path, extra, says)) in cases.iter().enumerate() {
            let out = dir.join(format!("out{i}.csv"));
            let o = alkit_cmd()
                .args(["score", "--checkpoint"])
                .arg(path)
                .arg("--data")
                .arg(&pool)
                .args(extra)
                .arg("--out")
                .arg(&out)
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(!o.status.success(), "{}: {err}", path.display());
            assert!(!err.contains("panicked"), "{err}");
            for s in says {
                assert!(err.contains(s), "{}: `{s}` not in {err}", path.display());
            }
            assert!(!out.exists(), "{}", path.display());
        }
        // The renamed features are found all the same without the setting.
        let ck = open(&dir.join("refeatured.onnx"), None, &mut Notes::default()).unwrap();
        assert!(last_layer(
            ck.model.as_ref(),
            &Tensor::zeros((1, 3, 160, 160), DType::F32, &Device::Cpu).unwrap()
        )
        .unwrap()
        .is_some());
        // A class count in config.json beside it that is not the model's.
        let other = dir.join("seven");
        super::super::copy_dir(model("resnet").parent().unwrap(), &other);
        let cfg = std::fs::read_to_string(other.join("config.json"))
            .unwrap()
            .replace("\"num_classes\": 10", "\"num_classes\": 7");
        std::fs::write(other.join("config.json"), cfg).unwrap();
        let e = open(&other.join("model.onnx"), None, &mut Notes::default())
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("7") && e.contains("10"), "{e}");
        // The runtime's library missing or not a library: named by its variable.
        for (value, says) in [
            ("", "not set"),
            ("/nonexistent/libonnxruntime.so", "names no file"),
            (env!("CARGO_MANIFEST_DIR"), "names no file"),
            (
                concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"),
                "not ONNX Runtime's library",
            ),
        ] {
            let out = dir.join("lib.csv");
            let o = alkit_cmd()
                .args(["score", "--checkpoint"])
                .arg(model("resnet"))
                .arg("--data")
                .arg(&pool)
                .arg("--out")
                .arg(&out)
                .env("ORT_DYLIB_PATH", value)
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(!o.status.success(), "{err}");
            assert!(
                err.contains("ORT_DYLIB_PATH") && err.contains(says),
                "{value}: {err}"
            );
            assert!(!out.exists());
        }
    }
}
