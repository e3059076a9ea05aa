//! A scripted labeling session on shipped data, through the library API.
//!
//! Writes 300 MNIST digits from `data/` as a folder of PNGs (20 of them already labeled, in
//! one subfolder per class), starts a session on that folder, and runs three rounds of
//! "query 20 by entropy, answer them": the answers come from the true labels, standing in for
//! the person who would look at the PNGs. The CLI does the same with `alkit init / query /
//! teach / status --state DIR`, one command per step.
//!
//! Run: `cargo run --release --example labeling_session [OUT_DIR]`

#![allow(clippy::print_stdout)] // an example reports on stdout

use alkit::acquisition::{Builtin, Selection};
use alkit::data::image::write_image_folder;
use alkit::data::source::load;
use alkit::data::{load_idx_dir, Source};
use alkit::hub::Hub;
use alkit::models::Arch;
use alkit::observe::Silent;
use alkit::round::Strategy;
use alkit::session::{Learner, QueryRequest, SessionConfig};
use alkit::train::TrainConfig;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    alkit::tune_allocator();
    let out = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("alkit-labeling-session"));
    let _ = std::fs::remove_dir_all(&out);
    let data = load_idx_dir("data".as_ref())?.train;
    // The first 20 items arrive labeled (in class subfolders), the next 280 unlabeled.
    let items: Vec<(usize, Option<String>)> = (0..300)
        .map(|i| (i, (i < 20).then(|| data.labels()[i].to_string())))
        .collect();
    let pool_dir = out.join("pool");
    let ids = write_image_folder(&pool_dir, &data, &items)?;
    let truth: HashMap<String, String> = ids
        .iter()
        .zip(&items)
        .map(|(id, (i, _))| (id.clone(), data.labels()[*i].to_string()))
        .collect();

    let source = Source::parse(&pool_dir.to_string_lossy())?;
    let loaded = load(&source, &Hub::from_env(), &mut Silent, None)?;
    let classes: Vec<String> = (0..10).map(|c| c.to_string()).collect();
    let seeds = loaded.pool.given_labels();
    let config = SessionConfig {
        arch: Arch::default_for(&loaded.pool.item_shape, classes.len()),
        train: TrainConfig {
            steps: 200,
            ..TrainConfig::default()
        },
        seed: 0,
        batch: 512,
        ensemble: None,
        display_root: None,
        stop: None,
    };
    let mut learner = Learner::new(&source.to_string(), loaded, classes, &seeds, config)?;
    let request = QueryRequest {
        strategy: Strategy::scored(Arc::new(Builtin::Entropy), Selection::TopK),
        n: 20,
        include_pending: false,
        subsample: None,
    };
    let state_dir = out.join("state");
    for _ in 0..3 {
        let batch = learner.query(&request, &candle_core::Device::Cpu, &mut Silent)?;
        let answers: Vec<(String, String)> = batch
            .iter()
            .map(|q| (q.id.clone(), truth[&q.id].clone()))
            .collect();
        learner.teach(&answers)?;
        learner.save(&state_dir)?;
        let r = learner.state().rounds.last().expect("queried");
        println!(
            "round {}: trained on {} labels (fit accuracy {:.0}%), asked for {} items, top score {:.3}",
            r.round,
            r.labeled,
            100.0 * r.fit_acc.unwrap_or(0.0),
            batch.len(),
            batch[0].score.unwrap_or(f32::NAN)
        );
    }
    let st = learner.state();
    println!(
        "{} labeled after {} rounds; per class {:?}; state in {}",
        st.labeled.len(),
        st.rounds.len(),
        st.per_class(),
        state_dir.display()
    );
    Ok(())
}
