//! A user's own scorer plugged into alkit's acquisition loop.
//!
//! `Tail` scores a candidate by the probability mass outside its two most likely classes
//! (higher = label first). It is written against `alkit-acquisition` alone, then handed to the
//! loop as a `Strategy`. Runs a short loop on the shipped MNIST subset:
//!
//! ```text
//! cargo run --release --example custom_scorer
//! ```

use alkit::acquire::{run, LoopConfig, RunContext, RunState};
use alkit::acquisition::{Evidence, Needs, ScoreError, Scorer, Selection};
use alkit::data::{load_idx_dir, Normalizer};
use alkit::models::Arch;
use alkit::nn::CnnConfig;
use alkit::observe::Silent;
use alkit::round::Strategy;
use alkit::train::TrainConfig;
use candle_core::Device;
use std::sync::Arc;

/// Probability mass outside the two most likely classes.
struct Tail;

impl Scorer for Tail {
    fn name(&self) -> &str {
        "tail"
    }
    fn needs(&self) -> Needs {
        Needs::PROBS
    }
    fn score(&self, ev: &Evidence) -> Result<Vec<f32>, ScoreError> {
        let probs = ev.probs(self.name())?;
        Ok(probs
            .rows()
            .map(|row| {
                let mut r = row.to_vec();
                r.sort_by(|a, b| b.total_cmp(a));
                1.0 - r.iter().take(2).sum::<f32>()
            })
            .collect())
    }
}

fn main() -> Result<(), alkit::Error> {
    alkit::tune_allocator();
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data");
    let splits = load_idx_dir(&data)?;
    let norm = Normalizer::fit(&splits.train);
    let (train, test) = (norm.apply(&splits.train)?, norm.apply(&splits.test)?);
    let model = Arch::Cnn(CnnConfig::standard(train.item_shape(), train.classes()));
    let config = LoopConfig {
        cycles: 3,
        train: TrainConfig {
            steps: 100,
            ..TrainConfig::default()
        },
        ..LoopConfig::default()
    };
    let params = config.validate(train.len())?;
    let ctx = RunContext {
        train: &train,
        test: &test,
        model: &model,
        params: &params,
        input_std: &norm.std,
        device: &Device::Cpu,
    };
    let strategy = Strategy::scored(Arc::new(Tail), Selection::TopK);
    let mut state = RunState::new(&strategy, 0, &config, "cnn".into(), &train, &test);
    run(&ctx, &strategy, &mut state, None, &mut Silent)?;
    for r in &state.records {
        // Examples may print; the library never does.
        #[allow(clippy::print_stdout)]
        {
            println!(
                "cycle {} labeled {:>3}  acc {:.3}  nll {:.3}",
                r.cycle, r.labeled, r.acc, r.nll
            );
        }
    }
    Ok(())
}
