//! A user's own candle model in alkit: trained by alkit, scored by entropy and by REGrad.
//!
//! `TwoLayer` is written with plain candle ops and knows nothing about alkit beyond the
//! `Classifier` trait (forward + classes) and `ModelBuilder` (build from a `VarBuilder`).
//! Because its parameters come from the `VarBuilder`, alkit's seeded initialisation, training,
//! and gradient evidence (through per-candidate autograd, as the model has no fast path) all
//! work unchanged:
//!
//! ```text
//! cargo run --release --example custom_model
//! ```

use alkit::acquisition::{Builtin, ReGrad, Scorer};
use alkit::data::{load_idx_dir, Normalizer};
use alkit::nn::{init::seeded, Classifier, Mode};
use alkit::observe::Silent;
use alkit::predict::Scoring;
use alkit::rng::{stream, Purpose};
use alkit::train::ModelBuilder;
use alkit::train::{train, TrainConfig};
use candle_core::{DType, Device, Module, Tensor};
use candle_nn::VarBuilder;

/// Flatten -> linear(784, 64) -> tanh -> linear(64, classes).
struct TwoLayer {
    hidden: candle_nn::Linear,
    out: candle_nn::Linear,
    classes: usize,
}

impl Classifier for TwoLayer {
    fn forward(&self, x: &Tensor, _mode: &mut Mode<'_>) -> candle_core::Result<Tensor> {
        self.out
            .forward(&self.hidden.forward(&x.flatten_from(1)?)?.tanh()?)
    }
    fn classes(&self) -> usize {
        self.classes
    }
}

/// Builds a fresh `TwoLayer` each cycle.
struct TwoLayerBuilder {
    inputs: usize,
    classes: usize,
}

impl ModelBuilder for TwoLayerBuilder {
    fn build(&self, vb: VarBuilder) -> candle_core::Result<Box<dyn Classifier>> {
        Ok(Box::new(TwoLayer {
            hidden: candle_nn::linear(self.inputs, 64, vb.pp("hidden"))?,
            out: candle_nn::linear(64, self.classes, vb.pp("out"))?,
            classes: self.classes,
        }))
    }
}

fn main() -> Result<(), alkit::Error> {
    alkit::tune_allocator();
    let device = Device::Cpu;
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data");
    let splits = load_idx_dir(&data)?;
    let norm = Normalizer::fit(&splits.train);
    let train_ds = norm.apply(&splits.train)?;
    let builder = TwoLayerBuilder {
        inputs: train_ds.item_len(),
        classes: train_ds.classes(),
    };
    // Train on 200 labeled items with alkit's trainer (seeded init, batches, Adam).
    let labeled: Vec<usize> = (0..200).collect();
    let params = TrainConfig {
        steps: 200,
        ..TrainConfig::default()
    }
    .validate()?;
    let trained = train(
        &builder,
        None,
        &train_ds,
        &labeled,
        &params,
        (0, 0),
        &device,
        &mut Silent,
    )?;
    // Score 32 unlabeled candidates by entropy and by REGrad (autograd path).
    let scoring = Scoring {
        model: trained.model.as_ref(),
        params: Some(&trained.params),
        builder: Some(&builder),
        input_std: &norm.std,
        batch: 256,
        device: &device,
        reference: None,
    };
    let candidates: Vec<usize> = (200..232).collect();
    let mut rng = stream(0, Purpose::Perturb, 0);
    for scorer in [&Builtin::Entropy as &dyn Scorer, &ReGrad::DEFAULT] {
        let ev = scoring.evidence(
            &train_ds,
            &candidates,
            scorer.needs(),
            &mut rng,
            &mut Silent,
        )?;
        let scores = scorer.score(&ev)?;
        let best = (0..scores.len())
            .max_by(|&a, &b| scores[a].total_cmp(&scores[b]))
            .unwrap_or(0);
        #[allow(clippy::print_stdout)]
        {
            println!(
                "{:>8}: label item {} first (score {:.4})",
                scorer.name(),
                candidates[best],
                scores[best]
            );
        }
    }
    // The same VarBuilder pattern also builds a model from seeded parameters directly:
    let (vb, _) = seeded(stream(1, Purpose::Init, 0), DType::F32, &device);
    let _fresh = builder.build(vb).map_err(alkit::Error::from)?;
    Ok(())
}
