//! A timm model repository read from a hub cache: `config.json` as timm's `save_for_hf` writes
//! it (tests/fixtures/timm_resnet18, recorded by tests/reference/timm_reference.py) beside a
//! state dict with PyTorch's batch counters. Its preprocessing against timm's own transform
//! (PIL's resize and crop), its logits and REGrad evidence against PyTorch in f64 on the same
//! weights, `alkit score` end to end against timm's f32 pipeline, and bad configurations and
//! state dicts refused by key.

use super::layer_library::formula_resnet;
use super::*;
use alkit::data::image::{CropMode, Filter, Preprocess};
use alkit::nn::resnet::{resnet, ResNetConfig, Stem};
use alkit::nn::Classifier;
use candle_nn::VarBuilder;

const CLASSES: usize = 5;

fn reference() -> serde_json::Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference/timm_reference.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// timm's `resnet18` with 5 classes: torchvision's layout, the ImageNet stem.
fn timm_resnet18() -> ResNetConfig {
    ResNetConfig {
        depth: 18,
        stem: Stem::Imagenet,
        in_channels: 3,
        classes: CLASSES,
    }
}

/// The reference formula's tensors, by name, in the model's creation order.
fn formula_weights() -> Vec<(String, Tensor)> {
    formula_resnet(&timm_resnet18())
}

/// `model.safetensors` as timm saves a state dict: f32 tensors and an I64 batch counter
/// beside every batch norm; `edit` may change the list first.
fn state_dict(
    path: &Path,
    edit: impl FnOnce(&mut Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)>),
) {
    let mut entries: Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    for (name, t) in formula_weights() {
        let bytes: Vec<u8> = t
            .to_dtype(DType::F32)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let counter = name
            .strip_suffix("running_var")
            .map(|p| format!("{p}num_batches_tracked"));
        entries.push((name, safetensors::Dtype::F32, t.dims().to_vec(), bytes));
        if let Some(c) = counter {
            entries.push((
                c,
                safetensors::Dtype::I64,
                vec![],
                7i64.to_le_bytes().to_vec(),
            ));
        }
    }
    edit(&mut entries);
    let views: Vec<(String, safetensors::tensor::TensorView)> = entries
        .iter()
        .map(|(n, d, s, b)| {
            (
                n.clone(),
                safetensors::tensor::TensorView::new(*d, s.clone(), b).unwrap(),
            )
        })
        .collect();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, safetensors::serialize(views, None).unwrap()).unwrap();
}

/// The reference's 8-bit crops `(3, 3, 64, 64)` normalised in f64 as the config says.
fn reference_input(reference: &serde_json::Value) -> Tensor {
    let (mean, std) = ([0.5, 0.4, 0.3], [0.2, 0.25, 0.3]);
    let x: Vec<f64> = reference["pixels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|img| {
            img.as_array()
                .unwrap()
                .iter()
                .enumerate()
                .map(|(k, v)| {
                    let c = k / (64 * 64);
                    (v.as_f64().unwrap() / 255.0 - mean[c]) / std[c]
                })
                .collect::<Vec<_>>()
        })
        .collect();
    Tensor::from_vec(x, (3, 3, 64, 64), &Device::Cpu).unwrap()
}

#[test]
fn a_timm_repository_prepares_and_scores_as_timm_does() {
    let reference = reference();
    let cache = tmp("timm-hub");
    let weights = cache.join("weights/model.safetensors");
    state_dict(&weights, |_| {});
    fake_hub_cache(
        &cache,
        "models--test--timm-resnet18",
        &[
            ("config.json", fixtures().join("timm_resnet18/config.json")),
            ("model.safetensors", weights),
        ],
    );
    let hub = Hub::new(cache.to_path_buf(), true);
    let ck =
        alkit::checkpoint::open("hf:test/timm-resnet18", &hub, &Device::Cpu, &mut Silent).unwrap();
    // timm's evaluation transform: floor(64 / 0.875) = 73, bicubic, centre crop 64.
    let pre = Preprocess {
        size: 64,
        resize: 73,
        mode: CropMode::Center,
        filter: Filter::Bicubic,
        channels: 3,
    };
    assert_eq!(ck.config.preprocess, Some(pre));
    assert_eq!(ck.config.item_shape, vec![3, 64, 64]);
    assert_eq!(ck.config.classes, ["ant", "bee", "cat", "dog", "eel"]);
    assert_eq!(ck.config.normalizer.mean, vec![0.5, 0.4, 0.3]);
    assert_eq!(ck.config.normalizer.std, vec![0.2, 0.25, 0.3]);
    assert_eq!(ck.config.arch, Arch::Resnet(timm_resnet18()));

    // The photos (RGB 97x80 shrunk, grayscale 50x120 enlarged and replicated, RGB 64x64
    // enlarged) prepared exactly as Pillow prepares them for timm.
    let source = Source::Images(fixtures().join("timm_photos"));
    let mut st = alkit::data::source::open(&source, &hub, &mut Silent, Some(&pre)).unwrap();
    assert_eq!(st.item_shape(), [3, 64, 64]);
    let chunk = alkit::data::stream::drain(st.as_mut()).unwrap().unwrap();
    assert_eq!(chunk.ids, ["a.png", "b.png", "c.png"]);
    let pil: Vec<f32> = reference["pixels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|img| img.as_array().unwrap().iter())
        .map(|v| v.as_f64().unwrap() as f32 / 255.0)
        .collect();
    let differ = chunk.x.iter().zip(&pil).filter(|(a, b)| a != b).count();
    assert_eq!(differ, 0, "pixels differing from Pillow's");
    // Pillow's resize alone, every filter, shrinking and enlarging (a squash to a square of
    // that side with nothing cropped), by the hash of its 8-bit result.
    for case in reference["resamples"].as_array().unwrap() {
        let (id, side) = (case["id"].as_str().unwrap(), case["side"].as_u64().unwrap());
        let name = case["filter"].as_str().unwrap();
        let p = fixtures().join("timm_photos").join(id);
        let img = alkit::data::image::decode(&std::fs::read(&p).unwrap(), &p).unwrap();
        let side = side as usize;
        let squash = Preprocess {
            size: side,
            resize: side,
            mode: CropMode::Squash,
            filter: Filter::from_name(name).unwrap(),
            channels: 3,
        };
        let ours = img.preprocess(&squash, &p).unwrap();
        let mut h = alkit::data::Fnv1a::default();
        std::hash::Hasher::write(&mut h, &ours.pixels);
        let want: u64 = case["fnv1a"].as_str().unwrap().parse().unwrap();
        assert_eq!(std::hash::Hasher::finish(&h), want, "{id} {name} to {side}");
    }

    // On the same 8-bit crops, in f64: logits and REGrad's per-class, per-layer squared norms
    // against PyTorch's timm model (its ImageNet stem's 7x7 stride-2 convolution and max-pool
    // included).
    let tensors: std::collections::HashMap<String, Tensor> =
        formula_weights().into_iter().collect();
    let net = resnet(
        &timm_resnet18(),
        VarBuilder::from_tensors(tensors, DType::F64, &Device::Cpu),
    )
    .unwrap();
    let x = reference_input(&reference);
    let logits = net.predict(&x).unwrap().to_vec2::<f64>().unwrap();
    for (row, w) in logits.iter().zip(reference["logits"].as_array().unwrap()) {
        for (a, b) in row.iter().zip(w.as_array().unwrap()) {
            let b = b.as_f64().unwrap();
            assert!((a - b).abs() <= 1e-9 * b.abs().max(1.0), "logit {a} vs {b}");
        }
    }
    let g = alkit::nn::grad_norms(&net, &x, 1, false).unwrap().unwrap();
    let layers = reference["layers"].as_array().unwrap().len();
    assert_eq!((g.rows, g.layers), (CLASSES, layers));
    let mut worst = 0f64;
    for (i, img) in reference["sq"].as_array().unwrap().iter().enumerate() {
        for (c, row) in img.as_array().unwrap().iter().enumerate() {
            for (l, v) in row.as_array().unwrap().iter().enumerate() {
                let (a, b) = (g.sq[(i * CLASSES + c) * layers + l], v.as_f64().unwrap());
                worst = worst.max((a - b).abs() / a.abs().max(b.abs()).max(1e-300));
            }
        }
    }
    assert!(worst <= 1e-9, "REGrad evidence against PyTorch: {worst}");
    // The last layer alone, in closed form over the features the net offers: PyTorch's
    // autograd of `fc` (the reference's last column).
    let last = alkit::nn::last_layer(&net, &x).unwrap().unwrap();
    let h = last.h.to_vec2::<f64>().unwrap();
    let mut worst = 0f64;
    for (i, img) in reference["sq"].as_array().unwrap().iter().enumerate() {
        let p: Vec<f64> = {
            let e: Vec<f64> = logits[i].iter().map(|v| v.exp()).collect();
            let s: f64 = e.iter().sum();
            e.iter().map(|v| v / s).collect()
        };
        let mut closed = Vec::new();
        alkit_acquisition::last_layer_norms(&h[i], &p, false, &mut closed);
        for (c, row) in img.as_array().unwrap().iter().enumerate() {
            let b = row.as_array().unwrap()[layers - 1].as_f64().unwrap();
            worst = worst.max((closed[c] - b).abs() / b.abs().max(1e-300));
        }
    }
    assert!(
        worst <= 1e-9,
        "last-layer closed forms against PyTorch's fc gradients: {worst}"
    );

    // The user's command, end to end through the hub cache: entropy as timm's own f32
    // pipeline gives it (transform and model), REGrad* beside it.
    let out = cache.join("scores.csv");
    let run = alkit_cmd()
        .env("HF_HUB_CACHE", &cache)
        .env("HF_HUB_OFFLINE", "1")
        .args([
            "-q",
            "score",
            "--checkpoint",
            "hf:test/timm-resnet18",
            "--data",
        ])
        .arg(fixtures().join("timm_photos"))
        .args(["--scorer", "entropy,regrad-star", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let csv = std::fs::read_to_string(&out).unwrap();
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("index,id,entropy,regrad-star"));
    let want = reference["entropy"].as_array().unwrap();
    for (k, line) in lines.enumerate() {
        let f: Vec<&str> = line.split(',').collect();
        assert_eq!(f[1], ["a.png", "b.png", "c.png"][k]);
        let e: f64 = f[2].parse().unwrap();
        let w = want[k].as_f64().unwrap();
        assert!((e - w).abs() <= 2e-5, "{}: entropy {e}, timm {w}", f[1]);
        let r: f64 = f[3].parse().unwrap();
        assert!(r.is_finite() && r > 0.0, "{line}");
    }

    // The same run timed end to end (`bench --checkpoint`): every photo scored each run, one
    // first run and the asked-for timed runs; a synthetic bench's flags beside it refused.
    let run = alkit_cmd()
        .env("HF_HUB_CACHE", &cache)
        .env("HF_HUB_OFFLINE", "1")
        .args([
            "-q",
            "bench",
            "--checkpoint",
            "hf:test/timm-resnet18",
            "--data",
        ])
        .arg(fixtures().join("timm_photos"))
        .args(["--scorer", "entropy", "--repeats", "2", "--json"])
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let timed: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(timed["items"], 3, "{timed}");
    assert_eq!(
        timed["passes_s"].as_array().map(Vec::len),
        Some(2),
        "{timed}"
    );
    assert_eq!(timed["scorers"], "entropy", "{timed}");
    assert!(
        timed["items_per_s"].as_f64().is_some_and(|r| r > 0.0),
        "{timed}"
    );
    assert!(
        timed["first_s"].as_f64().is_some_and(|s| s > 0.0),
        "{timed}"
    );
    for (flag, value) in [("--n", "5"), ("--steps", "3")] {
        let run = alkit_cmd()
            .args([
                "-q",
                "bench",
                "--checkpoint",
                "hf:test/timm-resnet18",
                flag,
                value,
            ])
            .output()
            .unwrap();
        assert_eq!(run.status.code(), Some(2));
        let err = String::from_utf8_lossy(&run.stderr);
        assert!(err.contains(flag) && err.contains("--checkpoint"), "{err}");
    }
    let run = alkit_cmd()
        .env("HF_HUB_CACHE", &cache)
        .env("HF_HUB_OFFLINE", "1")
        .args([
            "-q",
            "bench",
            "--checkpoint",
            "hf:test/timm-resnet18",
            "--repeats",
            "0",
            "--data",
        ])
        .arg(fixtures().join("timm_photos"))
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(2));
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("--repeats"), "{err}");

    // A timm backbone frozen: `embed` gives each photo's pooled features through timm's
    // transform, and the logits they make with `fc` are timm's (f32 against f64).
    let emb = cache.join("emb.safetensors");
    let run = alkit_cmd()
        .env("HF_HUB_CACHE", &cache)
        .env("HF_HUB_OFFLINE", "1")
        .args([
            "-q",
            "embed",
            "--checkpoint",
            "hf:test/timm-resnet18",
            "--data",
        ])
        .arg(fixtures().join("timm_photos"))
        .arg("--out")
        .arg(&emb)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let items = load_source(
        &Source::parse(&emb.to_string_lossy()).unwrap(),
        &hub,
        &mut Silent,
        None,
    )
    .unwrap()
    .pool;
    assert_eq!(items.ids, ["a.png", "b.png", "c.png"]);
    assert_eq!(items.item_shape, vec![512]);
    let fc = formula_weights()
        .into_iter()
        .filter(|(n, _)| n.starts_with("fc."))
        .collect::<std::collections::HashMap<_, _>>();
    let w = fc["fc.weight"].to_vec2::<f64>().unwrap();
    let b = fc["fc.bias"].to_vec1::<f64>().unwrap();
    for (i, want) in reference["logits"].as_array().unwrap().iter().enumerate() {
        let h = &items.x[i * 512..(i + 1) * 512];
        for (c, want) in want.as_array().unwrap().iter().enumerate() {
            let z: f64 = b[c]
                + w[c]
                    .iter()
                    .zip(h)
                    .map(|(a, x)| a * f64::from(*x))
                    .sum::<f64>();
            let want = want.as_f64().unwrap();
            assert!(
                (z - want).abs() <= 1e-4 * want.abs().max(1.0),
                "photo {i} class {c}: {z} vs timm {want}"
            );
        }
    }

    // `ood` and `calibrate` read their data through the checkpoint's transform too: the same
    // photos in train/ and test/ folders (classes by the model's names) give timm's entropies.
    let photo = |dir: &str, rel: &str, name: &str| {
        let to = cache.join(dir).join(rel);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(fixtures().join("timm_photos").join(name), to).unwrap();
    };
    for (class, name) in [
        ("ant", "a"),
        ("bee", "b"),
        ("cat", "c"),
        ("dog", "a"),
        ("eel", "c"),
    ] {
        photo(
            "id",
            &format!("train/{class}/{name}.png"),
            &format!("{name}.png"),
        );
    }
    photo("id", "test/ant/a.png", "a.png");
    photo("id", "test/bee/b.png", "b.png");
    photo("id", "test/cat/c.png", "c.png");
    photo("far", "train/x/b.png", "b.png");
    photo("far", "test/x/b.png", "b.png");
    photo("far", "test/x/c.png", "c.png");
    let cli = |args: &[&str]| {
        alkit_cmd()
            .env("HF_HUB_CACHE", &cache)
            .env("HF_HUB_OFFLINE", "1")
            .current_dir(&cache)
            .args(["-q"])
            .args(args)
            .args([
                "--checkpoint",
                "hf:test/timm-resnet18",
                "--scorer",
                "entropy",
            ])
            .output()
            .unwrap()
    };
    let o = cli(&[
        "ood",
        "--train-data",
        "id",
        "--ood-data",
        "far",
        "--out",
        "o",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rows = std::fs::read_to_string(cache.join("o/scores.csv")).unwrap();
    let entropies: Vec<f64> = rows
        .lines()
        .skip(1)
        .map(|l| l.rsplit(',').next().unwrap().parse().unwrap())
        .collect();
    // id: a, b, c (test/ant, test/bee, test/cat); far: b, c.
    for (e, k) in entropies.iter().zip([0, 1, 2, 1, 2]) {
        let w = want[k].as_f64().unwrap();
        assert!((e - w).abs() <= 2e-5, "entropy {e}, timm {w}");
    }
    let o = cli(&["calibrate", "--data", "id", "--out", "c"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // A curve on the frozen timm backbone: the photos embedded once through its transform,
    // a linear head each cycle.
    let o = alkit_cmd()
        .env("HF_HUB_CACHE", &cache)
        .env("HF_HUB_OFFLINE", "1")
        .current_dir(&cache)
        .args([
            "-q",
            "curve",
            "--data",
            "id",
            "--backbone",
            "hf:test/timm-resnet18",
        ])
        .args([
            "--embed-cache",
            "embeddings",
            "--initial",
            "2",
            "--query",
            "1",
        ])
        .args([
            "--cycles",
            "2",
            "--scorer",
            "entropy,regrad",
            "--layers",
            "last",
        ])
        .args(["--out", "frozen"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let curve = std::fs::read_to_string(cache.join("frozen/curve.csv")).unwrap();
    assert_eq!(
        curve
            .lines()
            .filter(|l| l.starts_with("regrad@last,"))
            .count(),
        3,
        "{curve}"
    );
    // Data with a class the model does not have: refused, not indexed past its outputs.
    photo("id", "train/zebra/b.png", "b.png");
    let o = cli(&["calibrate", "--data", "id", "--out", "c2"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("6"), "{err}");
    assert!(!cache.join("c2").exists());
}

#[test]
fn bad_timm_configurations_and_state_dicts_are_refused_by_key() {
    let good: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("timm_resnet18/config.json")).unwrap(),
    )
    .unwrap();
    let dir = tmp("timm-bad");
    state_dict(&dir.join("model.safetensors"), |_| {});
    let load = |config: &serde_json::Value| {
        std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
        match alkit::checkpoint::load(&dir, &Device::Cpu) {
            Ok(_) => String::new(),
            Err(e) => e.to_string(),
        }
    };
    assert_eq!(load(&good), "", "the fixture itself loads");
    type Edit = fn(&mut serde_json::Value);
    let cases: &[(&str, Edit)] = &[
        ("resnet50d", |c| c["architecture"] = "resnet50d".into()),
        ("model_args.stem_type", |c| {
            c["model_args"]["stem_type"] = "deep".into()
        }),
        ("32x64", |c| {
            c["pretrained_cfg"]["input_size"] = serde_json::json!([3, 32, 64])
        }),
        ("crop_pct", |c| c["pretrained_cfg"]["crop_pct"] = 1.5.into()),
        ("nearest", |c| {
            c["pretrained_cfg"]["interpolation"] = "nearest".into()
        }),
        ("border", |c| {
            c["pretrained_cfg"]["crop_mode"] = "border".into()
        }),
        ("pretrained_cfg.num_classes", |c| {
            c["pretrained_cfg"]["num_classes"] = 7.into()
        }),
        ("class names", |c| {
            c["label_names"] = serde_json::json!(["ant", "bee"])
        }),
        ("global pooling", |c| c["global_pool"] = "max".into()),
        ("standard deviation", |c| {
            c["pretrained_cfg"]["std"] = serde_json::json!([0.2, 0.0, 0.3])
        }),
        ("input_size", |c| {
            c["pretrained_cfg"]["input_size"] = serde_json::json!([64, 64])
        }),
        ("in_chans", |c| c["model_args"]["in_chans"] = 1.into()),
    ];
    for (want, edit) in cases {
        let mut c = good.clone();
        edit(&mut c);
        let e = load(&c);
        assert!(e.contains(want), "{want}: got `{e}`");
    }
    std::fs::write(dir.join("config.json"), good.to_string()).unwrap();
    type DictEdit = fn(&mut Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)>);
    let dicts: &[(&str, DictEdit)] = &[
        ("`fc.bias` is missing", |e| e.retain(|t| t.0 != "fc.bias")),
        ("unexpected tensor `head.weight`", |e| {
            e.push((
                "head.weight".into(),
                safetensors::Dtype::F32,
                vec![1],
                vec![0; 4],
            ))
        }),
        ("`fc.bias` has shape [4]", |e| {
            let t = e.iter_mut().find(|t| t.0 == "fc.bias").unwrap();
            (t.2, t.3) = (vec![4], vec![0; 16]);
        }),
        ("`fc.bias` is I64", |e| {
            let t = e.iter_mut().find(|t| t.0 == "fc.bias").unwrap();
            (t.1, t.3) = (safetensors::Dtype::I64, vec![0; 40]);
        }),
        ("NaN", |e| {
            let t = e.iter_mut().find(|t| t.0 == "fc.bias").unwrap();
            t.3[..4].copy_from_slice(&f32::NAN.to_le_bytes());
        }),
    ];
    for (want, edit) in dicts {
        state_dict(&dir.join("model.safetensors"), edit);
        let e = match alkit::checkpoint::load(&dir, &Device::Cpu) {
            Ok(_) => String::new(),
            Err(e) => e.to_string(),
        };
        assert!(e.contains(want), "{want}: got `{e}`");
    }
}

/// timm's own answers for `config.json` files that leave `pretrained_cfg`, or keys of it, out
/// (tests/reference/timm_defaults.py: each config read by timm 1.0.31 through the hub and from
/// a local folder): alkit's preprocessing and normalisation are the data configuration timm
/// resolves, and the three photos prepared by it hash as timm's transform leaves them.
#[test]
fn timm_defaults_are_timms_own() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference/timm_defaults.json");
    let reference: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let dir = tmp("timm-defaults");
    let photos: Vec<_> = ["a.png", "b.png", "c.png"]
        .iter()
        .map(|n| {
            let p = fixtures().join("timm_photos").join(n);
            (
                alkit::data::image::decode(&std::fs::read(&p).unwrap(), &p).unwrap(),
                p,
            )
        })
        .collect();
    let cases = reference["cases"].as_array().unwrap();
    assert!(cases.len() >= 16);
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let file = dir.join(format!("{name}.json"));
        std::fs::write(&file, case["config"].to_string()).unwrap();
        let ck =
            alkit::checkpoint::timm::read_config(&file).unwrap_or_else(|e| panic!("{name}: {e}"));
        let dc = &case["data_config"];
        let input: Vec<usize> = serde_json::from_value(dc["input_size"].clone()).unwrap();
        let crop_pct = dc["crop_pct"].as_f64().unwrap();
        let want = Preprocess {
            size: input[1],
            resize: (input[1] as f64 / crop_pct).floor() as usize,
            mode: match dc["crop_mode"].as_str().unwrap() {
                "center" => CropMode::Center,
                "squash" => CropMode::Squash,
                other => panic!("{name}: crop mode {other}"),
            },
            filter: Filter::from_name(dc["interpolation"].as_str().unwrap()).unwrap(),
            channels: input[0],
        };
        let pre = ck.preprocess.unwrap();
        assert_eq!(pre, want, "{name}");
        let stats = |k: &str| -> Vec<f32> {
            dc[k]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap() as f32)
                .collect()
        };
        assert_eq!(ck.normalizer.mean, stats("mean"), "{name}");
        assert_eq!(ck.normalizer.std, stats("std"), "{name}");
        assert_eq!(
            ck.arch.classes() as u64,
            case["num_classes"].as_u64().unwrap(),
            "{name}"
        );
        for ((img, p), want) in photos.iter().zip(case["crops"].as_array().unwrap()) {
            let ours = img.preprocess(&pre, p).unwrap();
            let mut h = alkit::data::Fnv1a::default();
            std::hash::Hasher::write(&mut h, &ours.pixels);
            let want: u64 = want.as_str().unwrap().parse().unwrap();
            assert_eq!(
                std::hash::Hasher::finish(&h),
                want,
                "{name}: {}",
                p.display()
            );
        }
    }
    // What the registry gives a model created by name differs (its default tag's crop), and
    // no `config.json` reaches it: recorded so that a change in timm shows here.
    for arch in ["resnet18", "resnet34", "resnet50"] {
        let r = &reference["created_by_name"][arch];
        assert_eq!(r["tag"], "a1_in1k", "{arch}");
        assert_eq!(r["data_config"]["crop_pct"], 0.95, "{arch}");
    }
}
