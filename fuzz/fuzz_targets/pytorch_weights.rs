//! A PyTorch weights file (`torch.save`'s zip archive or legacy format, as `pytorch_model.bin`
//! or a `.pth`), read to tensors.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| alkit_fuzz::pytorch_weights(data));
