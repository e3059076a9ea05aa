//! A checkpoint's `model.safetensors` beside a valid `config.json` (a tiny MLP): loaded, and
//! when it loads, run on one item.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = alkit_fuzz::scratch().join("ckpt-w");
    if !dir.join("config.json").is_file() {
        alkit_fuzz::tiny_checkpoint(&dir);
    }
    std::fs::write(dir.join("model.safetensors"), data).expect("scratch write");
    if let Ok(ck) = alkit::checkpoint::load(&dir, &candle_core::Device::Cpu) {
        let x =
            candle_core::Tensor::zeros((1, 4), candle_core::DType::F32, &candle_core::Device::Cpu)
                .expect("zeros");
        let _ = ck.model.predict(&x);
    }
});
