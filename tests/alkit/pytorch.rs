//! PyTorch's own weight files (tests/fixtures/pytorch, written by
//! tests/reference/pytorch_checkpoints.py with `torch.save`): both formats, training
//! checkpoints holding a state dict, parameters, every float dtype, strided and shared views,
//! each read to exactly the tensors PyTorch saved (their safetensors copy beside them); a whole
//! pickled model refused by its class; and the ways such a file becomes a checkpoint: imported,
//! as `pytorch_model.bin` in a folder or a Hub repository, or given with a `config.json` beside
//! it.

use super::*;
use alkit::checkpoint::pytorch;
use alkit::hub::Hub;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pytorch")
}

/// The MLP the fixtures' state dicts are for: 6 inputs, 5 hidden, 3 classes.
fn arch() -> Arch {
    Arch::Mlp(MlpConfig {
        inputs: 6,
        hidden: vec![5],
        classes: 3,
        dropout: 0.0,
    })
}

/// A tensor's dtype, shape and values (f64 holds every f16, bf16 and f32 value and these
/// integers exactly).
fn values(t: &Tensor) -> (DType, Vec<usize>, Vec<f64>) {
    let v = t
        .to_dtype(DType::F64)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f64>()
        .unwrap();
    (t.dtype(), t.dims().to_vec(), v)
}

#[test]
fn pytorch_files_read_as_their_safetensors() {
    let want =
        candle_core::safetensors::load(fixtures().join("model.safetensors"), &Device::Cpu).unwrap();
    for file in [
        "state_dict.pth",
        "legacy.pth",
        "checkpoint.pth",
        "model_key.pth",
        "parameters.pth",
        "dtypes.pth",
        "views.pth",
    ] {
        let got = pytorch::read(&fixtures().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        let mut names: Vec<&String> = got.keys().collect();
        names.sort();
        let mut expected: Vec<String> = want
            .keys()
            .filter_map(|k| k.strip_prefix(&format!("{file}/")).map(str::to_string))
            .collect();
        expected.sort();
        assert_eq!(
            names.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
            expected,
            "{file}"
        );
        for (name, t) in &got {
            let w = &want[&format!("{file}/{name}")];
            assert_eq!(values(t), values(w), "{file}: {name}");
        }
    }
    let formats = [
        ("state_dict.pth", pytorch::Format::TorchZip),
        ("legacy.pth", pytorch::Format::TorchLegacy),
        ("model.safetensors", pytorch::Format::Safetensors),
    ];
    for (file, format) in formats {
        assert_eq!(
            pytorch::sniff(&fixtures().join(file)).unwrap(),
            Some(format)
        );
    }
    let e = pytorch::read(&fixtures().join("whole_model.pth"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("whole_model.pth")
            && e.contains("whole pickled model (`__main__.Mlp`)")
            && e.contains("torch.save(model.state_dict()"),
        "{e}"
    );
}

#[test]
fn a_pth_becomes_a_checkpoint_in_one_step() {
    let dir = tmp("pytorch-ck");
    let norm = Normalizer {
        mean: vec![0.0; 6],
        std: vec![1.0; 6],
    };
    let classes: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
    let x = Tensor::from_vec(
        (0..12).map(|v| v as f32 / 5.0 - 1.0).collect::<Vec<_>>(),
        (2, 6),
        &Device::Cpu,
    )
    .unwrap();
    let predict = |ck: &alkit::checkpoint::Checkpoint| -> Vec<f32> {
        ck.model
            .predict(&x)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap()
    };
    // Imported from each format, to the same model.
    let mut first = None;
    for file in ["state_dict.pth", "legacy.pth", "checkpoint.pth"] {
        let out = dir.join(format!("ck-{file}"));
        alkit::checkpoint::import(
            &fixtures().join(file),
            &arch(),
            &norm,
            &[6],
            classes.clone(),
            &out,
        )
        .unwrap_or_else(|e| panic!("{file}: {e}"));
        let ck = alkit::checkpoint::load(&out, &Device::Cpu).unwrap();
        let p = predict(&ck);
        if file != "checkpoint.pth" {
            assert_eq!(*first.get_or_insert_with(|| p.clone()), p, "{file}");
        }
    }
    let first = first.unwrap();
    let ck = dir.join("ck-state_dict.pth");
    // A folder with `pytorch_model.bin` in place of `model.safetensors`.
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy(ck.join("config.json"), bin.join("config.json")).unwrap();
    std::fs::copy(
        fixtures().join("state_dict.pth"),
        bin.join("pytorch_model.bin"),
    )
    .unwrap();
    assert_eq!(
        predict(&alkit::checkpoint::load(&bin, &Device::Cpu).unwrap()),
        first
    );
    // The same as a Hub repository without safetensors.
    let cache = dir.join("hub");
    fake_hub_cache(
        &cache,
        "models--test--pth-only",
        &[
            ("config.json", bin.join("config.json")),
            ("pytorch_model.bin", bin.join("pytorch_model.bin")),
        ],
    );
    let hub = Hub::new(cache.clone(), true);
    let opened =
        alkit::checkpoint::open("hf:test/pth-only", &hub, &Device::Cpu, &mut Silent).unwrap();
    assert_eq!(predict(&opened), first);
    // A `.pth` where a folder is expected: without a config.json beside it, the error says
    // what it is and what to write; with one, it loads.
    let loose = dir.join("loose");
    std::fs::create_dir_all(&loose).unwrap();
    std::fs::copy(fixtures().join("state_dict.pth"), loose.join("x.pth")).unwrap();
    let e = match alkit::checkpoint::load(&loose.join("x.pth"), &Device::Cpu) {
        Ok(_) => panic!("a .pth without config.json loaded"),
        Err(e) => e.to_string(),
    };
    assert!(
        e.contains("x.pth")
            && e.contains("PyTorch weights file")
            && e.contains("loose/config.json")
            && e.contains("\"architecture\": \"resnet18\""),
        "{e}"
    );
    std::fs::copy(ck.join("config.json"), loose.join("config.json")).unwrap();
    assert_eq!(
        predict(&alkit::checkpoint::load(&loose.join("x.pth"), &Device::Cpu).unwrap()),
        first
    );
    // The same from the command line.
    let out = dir.join("s.csv");
    let pool = dir.join("pool.csv");
    std::fs::write(&pool, "id,a,b,c,d,e,f\np0,1,2,3,4,5,6\np1,0,0,1,0,0,1\n").unwrap();
    let run = alkit_cmd()
        .args(["-q", "score", "--checkpoint"])
        .arg(loose.join("x.pth"))
        .arg("--data")
        .arg(&pool)
        .args(["--scorer", "entropy", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
}

#[test]
fn a_pickle_of_one_byte_values_is_refused_within_bounded_memory() {
    // 48 MiB of one-byte opcodes, each making the interpreter hold one more value: about 80
    // bytes of memory per byte of file once cost 4 GB. Under an address-space cap of 2.5 GB
    // the reader must refuse each by name, having held a bounded number of values.
    let dir = tmp("pt-none-flood");
    let ck = dir.join("ck");
    let o = alkit_cmd()
        .args(["-q", "train", "--data"])
        .arg(data_dir())
        .args(["--model", "mlp", "--steps", "2", "--out"])
        .arg(&ck)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::remove_file(ck.join("model.safetensors")).unwrap();
    // NONE opcodes (a value each), MARKs (a mark each) and one list that 100 values at a time
    // are appended to (its elements; the stack stays short): each held value counts.
    let mut appends = vec![0x80, 2, b']', b'q', 0];
    while appends.len() < 48 << 20 {
        appends.push(b'(');
        for _ in 0..100 {
            appends.extend_from_slice(b"h\x00");
        }
        appends.push(b'e');
    }
    for (what, mut pickle) in [
        ("NONE", vec![0x80, 2]),
        ("MARK", vec![0x80, 2]),
        ("APPENDS", appends),
    ] {
        let fill = if what == "MARK" { b'(' } else { b'N' };
        if what != "APPENDS" {
            pickle.resize(48 << 20, fill);
        }
        pickle.push(b'.');
        std::fs::write(
            ck.join("pytorch_model.bin"),
            super::hostile::torch_zip(&pickle, &[]),
        )
        .unwrap();
        let args: Vec<String> = ["score", "--checkpoint"]
            .iter()
            .map(|s| s.to_string())
            .chain([ck.display().to_string(), "--data".into()])
            .chain([data_dir().display().to_string(), "--out".into()])
            .chain([dir.join("s.csv").display().to_string()])
            .collect();
        let o = super::flag_sizes::run_capped_at(&args, &dir, "2500000000");
        assert!(
            !o.timed_out && o.code == Some(1),
            "{what}: {:?}: {}",
            o.code,
            o.stderr
        );
        assert!(
            o.stderr.contains("pytorch_model.bin") && o.stderr.contains("more than 2097152 values"),
            "{what}: {}",
            o.stderr
        );
    }
}
