//! Kernels and gradients against finite differences in f64 and against candle compositions; seeded initialisation and dropout.

use super::*;

#[test]
fn maxpool_and_im2col_kernels_match_finite_differences_in_f64() {
    // Workaround for candle's wrong `max_pool2d` backward (measured on 0.11.1) and slow conv:
    // our kernels' gradients against central differences, odd sizes included (floor
    // semantics).
    let x = Var::from_tensor(&randn64(&[2, 7, 5, 3], 1)).unwrap();
    let coef = randn64(&[2, 3, 2, 3], 2);
    let loss = || {
        max_pool2x2(x.as_tensor())
            .unwrap()
            .mul(&coef)
            .unwrap()
            .sum_all()
            .unwrap()
    };
    let g = loss().backward().unwrap();
    let err = fd_check(
        &x,
        g.get(&x).unwrap(),
        &|| loss().to_scalar::<f64>().unwrap(),
        60,
    );
    assert!(err < 1e-7, "maxpool gradient relative error {err}");

    let y = Var::from_tensor(&randn64(&[2, 6, 5, 4], 3)).unwrap();
    let coef = randn64(&[2, 6, 5, 36], 4); // k = 3, pad = 1: same spatial size
    let loss = || {
        im2col(y.as_tensor(), 3, 1)
            .unwrap()
            .mul(&coef)
            .unwrap()
            .sum_all()
            .unwrap()
    };
    let g = loss().backward().unwrap();
    let err = fd_check(
        &y,
        g.get(&y).unwrap(),
        &|| loss().to_scalar::<f64>().unwrap(),
        60,
    );
    assert!(err < 1e-6, "im2col gradient relative error {err}");
}

#[test]
fn log_softmax_gradient_matches_finite_differences() {
    // `softmax_last_dim` has no backward in candle (measured on 0.11.1); alkit uses
    // log_softmax everywhere.
    let z = Var::from_tensor(&randn64(&[3, 5], 5)).unwrap();
    let coef = randn64(&[3, 5], 6);
    let loss = || {
        log_probs(z.as_tensor())
            .unwrap()
            .exp()
            .unwrap()
            .mul(&coef)
            .unwrap()
            .sum_all()
            .unwrap()
    };
    let g = loss().backward().unwrap();
    let err = fd_check(
        &z,
        g.get(&z).unwrap(),
        &|| loss().to_scalar::<f64>().unwrap(),
        15,
    );
    assert!(
        err < 1e-7,
        "softmax-via-log_softmax gradient relative error {err}"
    );
}

#[test]
fn cnn_parameter_gradients_match_finite_differences_in_f64() {
    let cfg = CnnConfig {
        in_channels: 1,
        height: 14,
        width: 13,
        classes: 4,
        dropout: 0.5,
    };
    let (vb, params) = seeded(stream(7, Purpose::Init, 0), DType::F64, &Device::Cpu);
    let model = Arch::Cnn(cfg).build(vb).unwrap();
    let x = randn64(&[3, 1, 14, 13], 8);
    let y = Tensor::from_vec(vec![0u32, 3, 1], 3, &Device::Cpu).unwrap();
    let loss = || {
        let lp = log_probs(&model.forward(&x, &mut Mode::Eval).unwrap()).unwrap();
        candle_nn::loss::nll(&lp, &y).unwrap()
    };
    let grads = loss().backward().unwrap();
    for (name, var) in params.named() {
        let err = fd_check(
            &var,
            grads.get(&var).unwrap(),
            &|| loss().to_scalar::<f64>().unwrap(),
            12,
        );
        assert!(err < 1e-6, "{name}: relative error {err}");
    }
}

#[test]
fn kernels_agree_with_generic_compositions() {
    // The CPU kernels against plain candle ops (the path other devices take).
    let x = randn64(&[2, 9, 7, 3], 9);
    let cols = im2col(&x, 3, 1).unwrap();
    let padded = x
        .pad_with_zeros(1, 1, 1)
        .unwrap()
        .pad_with_zeros(2, 1, 1)
        .unwrap();
    let mut slices = Vec::new();
    for i in 0..3 {
        for j in 0..3 {
            slices.push(padded.narrow(1, i, 9).unwrap().narrow(2, j, 7).unwrap());
        }
    }
    let want = Tensor::cat(&slices, 3).unwrap();
    let diff = (cols - want)
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f64>()
        .unwrap();
    assert_eq!(diff, 0.0);
    let pooled = max_pool2x2(&x).unwrap();
    let want = x
        .narrow(1, 0, 8)
        .unwrap()
        .narrow(2, 0, 6)
        .unwrap()
        .reshape((2, 4, 2, 3, 2, 3))
        .unwrap()
        .max(4)
        .unwrap()
        .max(2)
        .unwrap();
    let diff = (pooled - want)
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f64>()
        .unwrap();
    assert_eq!(diff, 0.0);
}

#[test]
fn fused_predict_matches_forward() {
    let s = load_idx_dir(&data_dir()).unwrap();
    let ds = Normalizer::fit(&s.train).apply(&s.train).unwrap();
    for dtype in [DType::F32, DType::F64] {
        let (vb, _) = seeded(stream(1, Purpose::Init, 0), dtype, &Device::Cpu);
        let m = Arch::Cnn(CnnConfig::standard(ds.item_shape(), 10))
            .build(vb)
            .unwrap();
        let idx: Vec<usize> = (0..40).collect();
        let x = ds
            .batch(&idx, &Device::Cpu)
            .unwrap()
            .to_dtype(dtype)
            .unwrap();
        let a = m.forward(&x, &mut Mode::Eval).unwrap();
        let b = m.predict(&x).unwrap();
        let d = (a - b)
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_dtype(DType::F64)
            .unwrap()
            .to_scalar::<f64>()
            .unwrap();
        let tol = if dtype == DType::F32 { 1e-5 } else { 1e-12 };
        assert!(d < tol, "{dtype:?}: {d}");
    }
}

// ------------------------------------------------------------------------ randomness

#[test]
fn seeded_init_and_dropout_are_reproducible() {
    let arch = Arch::Mlp(MlpConfig {
        inputs: 6,
        hidden: vec![8],
        classes: 3,
        dropout: 0.5,
    });
    let weights = |seed| {
        let (vb, p) = seeded(stream(seed, Purpose::Init, 0), DType::F32, &Device::Cpu);
        let m = arch.build(vb).unwrap();
        let x = Tensor::ones((4, 6), DType::F32, &Device::Cpu).unwrap();
        let mut rng = stream(seed, Purpose::Train, 0);
        let out: Vec<f32> = m
            .forward(&x, &mut Mode::Train(&mut rng))
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let w: Vec<f32> = p.vars()[0]
            .as_tensor()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        (w, out)
    };
    assert_eq!(weights(3), weights(3));
    assert_ne!(weights(3).0, weights(4).0);
    // PyTorch's default Linear init: U(-1/sqrt(6), 1/sqrt(6)) for 6 inputs.
    let b = 1.0 / 6f32.sqrt();
    assert!(weights(3).0.iter().all(|v| v.abs() <= b));
}
