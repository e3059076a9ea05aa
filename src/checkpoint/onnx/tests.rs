//! Hostile and real model bytes through the reader, the graph and the tensor decoder.

use super::graph::{extra_output, parse_model};
use super::tensors::{decode_tensor, f16_to_f32};
use std::path::Path;

#[test]
fn hostile_bytes_are_refused_not_panicked_on() {
    for bytes in [
        &b""[..],
        b"\x3a",
        b"\x3a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
        b"\x3a\x05\x0a\x03abc",
        b"\x0b\x0c",
        b"\x3a\x02\x0a\x80",
    ] {
        assert!(parse_model(bytes).is_err(), "{bytes:?}");
    }
    // A tensor whose dims promise more than its bytes hold.
    let t = [0x08, 0x80, 0x80, 0x04, 0x10, 0x01, 0x4a, 0x04, 0, 0, 0, 0];
    assert!(decode_tensor(&t, None).is_err());
}

/// Every prefix of a real model, and copies with bytes flipped, are parsed and searched
/// for their last layer without a panic (an error or a graph, nothing else).
#[test]
fn truncated_and_corrupted_models_never_panic() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/onnx/resnet/model.onnx");
    let bytes = std::fs::read(path).unwrap();
    let g = parse_model(&bytes).unwrap();
    let head = g.head("logits").unwrap();
    assert_eq!(
        (head.classes, head.dim, head.features.as_str()),
        (10, 96, "features")
    );
    for cut in (0..bytes.len()).step_by(997) {
        if let Ok(g) = parse_model(&bytes[..cut]) {
            let _ = g.head("logits");
        }
    }
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..300 {
        let mut b = bytes.clone();
        for _ in 0..8 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let i = (state % b.len() as u64) as usize;
            b[i] = (state >> 32) as u8;
        }
        if let Ok(g) = parse_model(&b) {
            let _ = g.head("logits");
        }
    }
}

#[test]
fn an_added_output_parses_back_as_one() {
    let mut m = vec![0x3a, 0x00];
    m.extend(extra_output("h"));
    let g = parse_model(&m).unwrap();
    assert_eq!(g.outputs, ["h"]);
}

#[test]
fn half_precision_values_decode() {
    assert_eq!(f16_to_f32(0x3c00), 1.0);
    assert_eq!(f16_to_f32(0xc000), -2.0);
    assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
    assert!(f16_to_f32(0x7c00).is_infinite());
}
