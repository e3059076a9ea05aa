//! Shared set-up of the fuzz targets: a private scratch folder per process (the loaders read
//! files, so each input is written where they expect it) and a tiny checkpoint to load.

use std::path::{Path, PathBuf};

/// A per-process folder under `/dev/shm` (memory-backed) or the temp dir, created once.
pub fn scratch() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let base = Path::new("/dev/shm");
        let base = if base.is_dir() {
            base.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("alkit-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch folder");
        dir
    })
}

/// Writes `bytes` to `name` inside the scratch folder and returns its path.
pub fn put(name: &str, bytes: &[u8]) -> PathBuf {
    let p = scratch().join(name);
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).expect("scratch subfolder");
    }
    std::fs::write(&p, bytes).expect("scratch write");
    p
}

/// A checkpoint folder holding a 4-input, 3-class MLP with one hidden layer of 5, saved by
/// alkit itself: the fuzz targets replace one of its two files.
pub fn tiny_checkpoint(dir: &Path) -> alkit::checkpoint::CheckpointConfig {
    use alkit::models::Arch;
    use alkit::nn::MlpConfig;
    use alkit::train::ModelBuilder;
    let arch = Arch::Mlp(MlpConfig {
        inputs: 4,
        hidden: vec![5],
        classes: 3,
        dropout: 0.0,
    });
    let (vb, params) = alkit::nn::init::seeded(
        alkit::rng::stream(0, alkit::rng::Purpose::Tool, 0),
        candle_core::DType::F32,
        &candle_core::Device::Cpu,
    );
    arch.build(vb).expect("tiny MLP builds");
    // Tabular items `(4,)`: one statistic per feature.
    let normalizer = alkit::data::Normalizer {
        mean: vec![0.5; 4],
        std: vec![0.25; 4],
    };
    alkit::checkpoint::save(
        dir,
        &arch,
        &params,
        &normalizer,
        &[4],
        vec!["a".into(), "b".into(), "c".into()],
    )
    .expect("tiny checkpoint saves")
}
