//! A checkpoint's `config.json` beside valid weights (a tiny MLP): loaded, and when it loads,
//! run on one item of the shape it declares (bounded, so that a declared shape cannot make the
//! target itself allocate).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = alkit_fuzz::scratch().join("ckpt-c");
    if !dir.join("model.safetensors").is_file() {
        alkit_fuzz::tiny_checkpoint(&dir);
    }
    std::fs::write(dir.join("config.json"), data).expect("scratch write");
    if let Ok(ck) = alkit::checkpoint::load(&dir, &candle_core::Device::Cpu) {
        let shape = ck.config.item_shape.clone();
        let n: usize = shape.iter().product();
        if n > 0 && n <= 1 << 16 {
            let mut dims = vec![1];
            dims.extend(shape);
            let x = candle_core::Tensor::zeros(
                dims,
                candle_core::DType::F32,
                &candle_core::Device::Cpu,
            )
            .expect("zeros");
            let _ = ck.model.predict(&x);
        }
    }
});
