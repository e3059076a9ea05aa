//! Scoring a pool with a model trained elsewhere: convert its weights, then rank items by
//! uncertainty without its training data (REGrad's premise).
//!
//! alkit's tensor names are PyTorch's `state_dict` names for the same layers, so a PyTorch
//! model of the REGrad CNN converts with no renaming:
//!
//! ```python
//! # PyTorch side: conv1(1->32,3) conv2(32->64,3) fc1(1600->128) fc2(128->10)
//! from safetensors.torch import save_file
//! save_file(model.state_dict(), "weights.safetensors")
//! ```
//!
//! Run: `cargo run --release --example pretrained_scoring [weights.safetensors]`. Without an
//! argument, a model is trained here briefly and exported as bare weights to stand in for
//! the PyTorch file. The normalisation must be the one the model was trained with; here it
//! is refitted on the shipped training split.

#![allow(clippy::print_stdout)] // an example reports on stdout

use alkit::acquisition::{Builtin, ReGrad, Scorer};
use alkit::checkpoint;
use alkit::data::{load_idx_dir, Normalizer};
use alkit::models::Arch;
use alkit::nn::CnnConfig;
use alkit::observe::Silent;
use alkit::predict::Scoring;
use alkit::rng::{stream, Purpose};
use alkit::train::{train, TrainConfig};
use candle_core::Device;
use std::path::PathBuf;

fn main() -> Result<(), alkit::Error> {
    alkit::tune_allocator();
    let device = Device::Cpu;
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data");
    let splits = load_idx_dir(&data)?;
    let norm = Normalizer::fit(&splits.train);
    let arch = Arch::Cnn(CnnConfig::standard(splits.train.item_shape(), 10));
    let work = std::env::temp_dir().join("alkit-pretrained-scoring");
    let weights = match std::env::args().nth(1) {
        Some(p) => PathBuf::from(p),
        None => {
            // Stand-in for a PyTorch export: train briefly, save only the named tensors.
            let ds = norm.apply(&splits.train)?;
            let ids: Vec<usize> = (0..ds.len()).collect();
            let cfg = TrainConfig {
                steps: 300,
                ..TrainConfig::default()
            }
            .validate()?;
            let t = train(&arch, None, &ds, &ids, &cfg, (0, 0), &device, &mut Silent)?;
            let path = work.join("weights.safetensors");
            std::fs::create_dir_all(&work).map_err(|e| alkit::Error::io(&work, e))?;
            let named: std::collections::HashMap<String, candle_core::Tensor> = t
                .params
                .named()
                .into_iter()
                .map(|(n, v)| (n, v.as_tensor().clone()))
                .collect();
            candle_core::safetensors::save(&named, &path)?;
            path
        }
    };
    // 1. Convert: check every name and shape against the architecture, write a checkpoint.
    let ck_dir = work.join("checkpoint");
    let classes = (0..10).map(|c| c.to_string()).collect();
    checkpoint::import(
        &weights,
        &arch,
        &norm,
        splits.train.item_shape(),
        classes,
        &ck_dir,
    )?;
    // 2. Load it as any checkpoint (this is what `alkit score --checkpoint DIR` does).
    let ck = checkpoint::load(&ck_dir, &device)?;
    // 3. Score a pool the model never saw: the shipped test split, by entropy and REGrad*.
    let pool = ck.config.normalizer.apply(&splits.test)?;
    let ids: Vec<usize> = (0..pool.len()).collect();
    let scoring = Scoring {
        model: ck.model.as_ref(),
        params: Some(&ck.params),
        builder: Some(&ck.config.arch),
        input_std: &ck.config.normalizer.std,
        batch: 256,
        device: &device,
        reference: None,
    };
    let scorers: [(&str, Box<dyn Scorer>); 2] = [
        ("entropy", Box::new(Builtin::Entropy)),
        ("regrad-star", Box::new(ReGrad::STAR)),
    ];
    for (name, scorer) in scorers {
        let mut rng = stream(0, Purpose::Perturb, 0);
        let ev = scoring.evidence(&pool, &ids, scorer.needs(), &mut rng, &mut Silent)?;
        let scores = scorer.score(&ev)?;
        let mut order = ids.clone();
        order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
        let top: Vec<String> = order[..5]
            .iter()
            .map(|&i| format!("#{i} (label {}) {:.3}", pool.labels()[i], scores[i]))
            .collect();
        println!("{name:>12}: most uncertain {}", top.join(", "));
    }
    println!("checkpoint written to {}", ck_dir.display());
    Ok(())
}
