//! An ONNX model file, read as far as alkit reads a graph before ONNX Runtime sees it.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| alkit_fuzz::onnx_model(data));
