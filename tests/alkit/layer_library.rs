//! The layer library (`alkit::nn::net`) and the ResNets built from it: per-sample gradient
//! norms of every layer kind against per-candidate autograd in f64, strided unfolding against
//! its adjoint, max-pool ties by hand, batch norm against PyTorch's formulas, the library's
//! CNN against the built-in one, and the refusals.

use super::*;
use alkit::nn::net::{
    BasicBlock, BatchNorm2d, Bottleneck, Conv2d, Conv2dConfig, Ctx, Dropout, Flatten,
    GlobalAvgPool, Layer, Linear, MaxPool2d, Net, Relu, Sequential,
};
use alkit::nn::resnet::{resnet, ResNetConfig, Stem};
use alkit::nn::Classifier;
use candle_nn::VarBuilder;

/// Batch-norm statistics and affine parameters moved off their initial values (so eval mode
/// is not the identity), reproducibly.
fn perturb_batch_norms(params: &alkit::nn::init::Weights, seed: u64) {
    for (i, (name, var)) in params.named().into_iter().enumerate() {
        let n = var.elem_count();
        let r = randn64(&[n], seed + i as u64).reshape(var.shape()).unwrap();
        let v = if name.ends_with("running_mean") {
            r.affine(0.1, 0.0)
        } else if name.ends_with("running_var") {
            r.abs().unwrap().affine(0.5, 0.5)
        } else if name.contains("bn") || name.contains("downsample.1") {
            if name.ends_with("weight") {
                r.affine(0.2, 1.0)
            } else {
                r.affine(0.1, 0.0)
            }
        } else {
            continue;
        }
        .unwrap();
        var.set(&v.to_dtype(var.dtype()).unwrap()).unwrap();
    }
}

/// `x (n, ...)` and its `copies` noisy copies per item (copy 0 clean), f64.
fn with_copies(x: &Tensor, copies: usize, seed: u64) -> Tensor {
    let n = x.dim(0).unwrap();
    let item: Vec<usize> = x.dims()[1..].to_vec();
    let mut dims = vec![n, copies];
    dims.extend(&item);
    let rep = x
        .unsqueeze(1)
        .unwrap()
        .broadcast_as(dims.as_slice())
        .unwrap();
    let mut noise = randn64(&dims, seed).affine(0.05, 0.0).unwrap();
    noise = noise
        .narrow(1, 1, copies - 1)
        .unwrap()
        .pad_with_zeros(1, 1, 0)
        .unwrap();
    let mut flat = vec![n * copies];
    flat.extend(&item);
    (rep + noise).unwrap().reshape(flat).unwrap()
}

/// The net's batched norms equal per-candidate autograd (f64, relative 1e-9) with one clean
/// copy and with three perturbed copies, on the CPU kernels and on the generic path.
fn assert_batched_norms_match_autograd(
    net: &Net,
    params: &alkit::nn::init::Weights,
    x: &Tensor,
    what: &str,
) {
    let classes = net.classes();
    for copies in [1, 3] {
        let input = if copies == 1 {
            x.clone()
        } else {
            with_copies(x, copies, 77)
        };
        let fast = alkit::nn::grad_norms(net, &input, copies, true)
            .unwrap()
            .expect("a Net has batched gradient norms");
        let slow = autograd_grad_norms(net, &named_tensors(params), &input, copies, true).unwrap();
        let err = max_rel(&fast, &slow, classes, copies == 1);
        assert!(err <= 1e-9, "{what}, {copies} copies: relative error {err}");
        let generic =
            alkit::without_cpu_kernels(|| alkit::nn::grad_norms(net, &input, copies, true))
                .unwrap()
                .unwrap();
        let err = max_rel(&generic, &fast, classes, copies == 1);
        assert!(err <= 1e-12, "{what}, generic path: relative error {err}");
    }
}

fn f64_builder(seed: u64) -> (VarBuilder<'static>, alkit::nn::init::Weights) {
    seeded(stream(seed, Purpose::Init, 0), DType::F64, &Device::Cpu)
}

#[test]
fn every_layer_kind_gives_per_sample_norms_equal_to_autograd_in_f64() {
    // Odd sizes (9x9) make the strided and padded unfoldings and pools drop and pad edges.
    let x = randn64(&[4, 3, 9, 9], 3);
    let conv = |k, stride, padding, groups, bias| Conv2dConfig {
        kernel: k,
        stride,
        padding,
        groups,
        bias,
        init: None,
    };
    // Strided, padded, grouped and bias-free convolutions, batch norm, both pools, dropout.
    let (vb, params) = f64_builder(1);
    let body = Sequential::new()
        .with(Conv2d::new(3, 4, conv(3, 2, 1, 1, true), vb.pp("c1")).unwrap())
        .with(BatchNorm2d::new(4, vb.pp("bn1")).unwrap())
        .with(Relu)
        .with(MaxPool2d::new(3, 2, 1).unwrap())
        .with(Conv2d::new(4, 6, conv(3, 1, 1, 2, false), vb.pp("c2")).unwrap())
        .with(BatchNorm2d::new(6, vb.pp("bn2")).unwrap())
        .with(Relu)
        .with(GlobalAvgPool)
        .with(Dropout::new(0.3).unwrap())
        .with(Linear::new(6, 5, true, vb.pp("fc")).unwrap());
    perturb_batch_norms(&params, 10);
    let net = Net::new(body, 5);
    assert_batched_norms_match_autograd(&net, &params, &x, "conv/bn/pools");

    // 2x2 max-pool (the CPU kernel), flatten in NCHW order, a bias-free dense layer.
    let (vb, params) = f64_builder(2);
    let body = Sequential::new()
        .with(Conv2d::new(3, 4, conv(3, 1, 0, 1, true), vb.pp("c1")).unwrap())
        .with(Relu)
        .with(MaxPool2d::new(2, 2, 0).unwrap())
        .with(Flatten)
        .with(Linear::new(4 * 3 * 3, 8, false, vb.pp("fc1")).unwrap())
        .with(Relu)
        .with(Linear::new(8, 5, true, vb.pp("fc2")).unwrap());
    let net = Net::new(body, 5);
    assert_batched_norms_match_autograd(&net, &params, &x, "flatten/dense");

    // Both residual blocks with their downsampling shortcuts.
    let (vb, params) = f64_builder(3);
    let body = Sequential::new()
        .with(BasicBlock::new(3, 8, 2, vb.pp("b1")).unwrap())
        .with(Bottleneck::new(8, 4, 1, vb.pp("b2")).unwrap())
        .with(GlobalAvgPool)
        .with(Linear::new(16, 5, true, vb.pp("fc")).unwrap());
    perturb_batch_norms(&params, 20);
    let net = Net::new(body, 5);
    assert_batched_norms_match_autograd(&net, &params, &x, "residual blocks");
}

#[test]
fn resnet18_per_sample_norms_equal_autograd_in_f64() {
    // The CIFAR-stem ResNet-18 in eval mode (batch norm on moved running statistics) on two
    // colour images: 21 parameterised layers (20 conv/bn pairs... counted as the model orders
    // them), every class row, the expected row and GradNorm's L1.
    let cfg = ResNetConfig {
        depth: 18,
        stem: Stem::Cifar,
        in_channels: 3,
        classes: 10,
    };
    let (vb, params) = f64_builder(4);
    let net = resnet(&cfg, vb).unwrap();
    perturb_batch_norms(&params, 30);
    // 8x8 inputs: every stage still runs (8, 8, 4, 2, 1 pixels a side), at a sixteenth of
    // 32x32's cost.
    let x = randn64(&[2, 3, 8, 8], 5);
    let fast = alkit::nn::grad_norms(&net, &x, 1, true).unwrap().unwrap();
    let slow = autograd_grad_norms(&net, &named_tensors(&params), &x, 1, true).unwrap();
    // conv1, bn1, 8 blocks of two conv/bn pairs, 3 downsample pairs, fc.
    assert_eq!(fast.layers, 2 + 8 * 4 + 3 * 2 + 1);
    let err = max_rel(&fast, &slow, 10, true);
    assert!(err <= 1e-9, "ResNet-18: relative error {err}");
}

#[test]
fn strided_unfolding_and_its_adjoint_agree_on_every_path() {
    use alkit::nn::layers::{col2im_strided, im2col_strided};
    let x = randn64(&[2, 7, 8, 3], 6);
    for (k, pad, stride) in [(3, 1, 2), (1, 0, 2), (3, 0, 3), (7, 3, 2), (3, 1, 1)] {
        let cols = im2col_strided(&x, k, pad, stride).unwrap();
        let generic = alkit::without_cpu_kernels(|| im2col_strided(&x, k, pad, stride)).unwrap();
        assert_eq!(
            cols.flatten_all().unwrap().to_vec1::<f64>().unwrap(),
            generic.flatten_all().unwrap().to_vec1::<f64>().unwrap(),
            "k {k} pad {pad} stride {stride}"
        );
        let (_, oh, ow, _) = cols.dims4().unwrap();
        assert_eq!(
            (oh, ow),
            (
                (7 + 2 * pad - k) / stride + 1,
                (8 + 2 * pad - k) / stride + 1
            )
        );
        // <im2col(x), g> = <x, col2im(g)>: col2im is the adjoint, on both paths.
        let g = randn64(cols.dims(), 7);
        let lhs = (&cols * &g)
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar::<f64>()
            .unwrap();
        for back in [
            col2im_strided(&g, k, pad, stride, Some((7, 8))).unwrap(),
            alkit::without_cpu_kernels(|| col2im_strided(&g, k, pad, stride, Some((7, 8))))
                .unwrap(),
        ] {
            let rhs = (&x * &back)
                .unwrap()
                .sum_all()
                .unwrap()
                .to_scalar::<f64>()
                .unwrap();
            assert!(
                (lhs - rhs).abs() <= 1e-10 * lhs.abs().max(1.0),
                "{lhs} vs {rhs}"
            );
        }
    }
    // A grid that no input of the given size produces is refused, not guessed.
    let g = randn64(&[1, 3, 4, 9], 8);
    assert!(col2im_strided(&g, 3, 1, 2, Some((9, 9))).is_err());
}

#[test]
fn max_pool_sends_each_window_to_its_first_maximum() {
    // 3x3 windows, stride 2, padding 1 on a 4x4 image, worked by hand: windows cover rows and
    // columns {0,1}, {1,2,3}; the maxima are 3 (first at (1,0)), 3 (at (1,1)), 5 (at (2,1)),
    // and 5 again, whose first maximum in row-major order is (2,1), not (2,2).
    let v = [
        1., 2., 2., 0., //
        3., 3., 0., 1., //
        0., 5., 5., 2., //
        1., 0., 2., 2.,
    ];
    for generic in [false, true] {
        let x =
            Var::from_tensor(&Tensor::from_vec(v.to_vec(), (1, 4, 4, 1), &Device::Cpu).unwrap())
                .unwrap();
        let pool = MaxPool2d::new(3, 2, 1).unwrap();
        let run = || pool.forward(x.as_tensor(), &mut Ctx::eval());
        let y = if generic {
            alkit::without_cpu_kernels(run)
        } else {
            run()
        }
        .unwrap();
        assert_eq!(
            y.flatten_all().unwrap().to_vec1::<f64>().unwrap(),
            [3., 3., 5., 5.]
        );
        let g = y.sum_all().unwrap().backward().unwrap();
        let mut want = [0f64; 16];
        want[4] = 1.0;
        want[5] = 1.0;
        want[9] = 2.0;
        assert_eq!(
            g.get(x.as_tensor())
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1::<f64>()
                .unwrap(),
            want
        );
    }
}

#[test]
fn batch_norm_follows_pytorch_in_training_and_evaluation() {
    // Training: (x - mean) / sqrt(biased var + 1e-5) per channel, running statistics
    // 0.9 * old + 0.1 * batch (the variance unbiased); evaluation then uses them.
    let (vb, params) = f64_builder(5);
    let bn = BatchNorm2d::new(2, vb).unwrap();
    // Channel 0: 1, 2, 3, 6 (mean 3, biased var 3.5, unbiased 14/3); channel 1: all 4.
    let x = Tensor::from_vec(
        vec![1., 4., 2., 4., 3., 4., 6., 4.],
        (2, 1, 2, 2),
        &Device::Cpu,
    )
    .unwrap();
    let mut rng = stream(0, Purpose::Tool, 0);
    let y = bn.forward(&x, &mut Ctx::train(&mut rng)).unwrap();
    let y = y.flatten_all().unwrap().to_vec1::<f64>().unwrap();
    let s = (3.5f64 + 1e-5).sqrt();
    let want = [-2.0 / s, 0.0, -1.0 / s, 0.0, 0.0, 0.0, 3.0 / s, 0.0];
    for (a, b) in y.iter().zip(want) {
        assert!((a - b).abs() < 1e-12, "{y:?}");
    }
    let named = params.named();
    let get = |n: &str| {
        named
            .iter()
            .find(|(m, _)| m == n)
            .unwrap()
            .1
            .as_tensor()
            .to_vec1::<f64>()
            .unwrap()
    };
    let mean = get("running_mean");
    let var = get("running_var");
    assert!((mean[0] - 0.3).abs() < 1e-12 && (mean[1] - 0.4).abs() < 1e-12);
    assert!((var[0] - (0.9 + 0.1 * 14.0 / 3.0)).abs() < 1e-12 && (var[1] - 0.9).abs() < 1e-12);
    // Buffers are the layer's to update, not the optimiser's.
    assert_eq!(params.trainable().len(), 2);
    let e = bn
        .forward(&x, &mut Ctx::eval())
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f64>()
        .unwrap();
    let e0 = (1.0 - 0.3) / (var[0] + 1e-5).sqrt();
    assert!((e[0] - e0).abs() < 1e-12, "{e:?}");
}

#[test]
fn the_library_cnn_equals_the_built_in_cnn() {
    // The REGrad CNN rebuilt from library layers on the built-in one's tensors: the same
    // logits, the same gradient norms (the built-in's sparse CPU kernel against the library's
    // recording pass) and the same MC-dropout draws from the same stream, in f64 on real
    // digits.
    let (train, _) = normalised();
    let (vb, params) = f64_builder(6);
    let cnn = Arch::Cnn(CnnConfig::standard(train.item_shape(), 10))
        .build(vb)
        .unwrap();
    let tensors: std::collections::HashMap<String, Tensor> =
        named_tensors(&params).into_iter().collect();
    let vb = VarBuilder::from_tensors(tensors, DType::F64, &Device::Cpu);
    let conv = Conv2dConfig {
        kernel: 3,
        ..Default::default()
    };
    let body = Sequential::new()
        .with(Conv2d::new(1, 32, conv, vb.pp("conv1")).unwrap())
        .with(Relu)
        .with(MaxPool2d::new(2, 2, 0).unwrap())
        .with(Conv2d::new(32, 64, conv, vb.pp("conv2")).unwrap())
        .with(Relu)
        .with(MaxPool2d::new(2, 2, 0).unwrap())
        .with(Flatten)
        .with(Linear::new(64 * 5 * 5, 128, true, vb.pp("fc1")).unwrap())
        .with(Relu)
        .with(Dropout::new(0.5).unwrap())
        .with(Linear::new(128, 10, true, vb.pp("fc2")).unwrap());
    let net = Net::new(body, 10);
    let idx: Vec<usize> = (0..8).collect();
    let x = train
        .batch(&idx, &Device::Cpu)
        .unwrap()
        .to_dtype(DType::F64)
        .unwrap();
    let a = cnn.predict(&x).unwrap();
    let b = net.predict(&x).unwrap();
    assert!(rel_max(&b, &a) <= 1e-12, "logits: {}", rel_max(&b, &a));
    let fast = alkit::nn::grad_norms(cnn.as_ref(), &x, 1, true)
        .unwrap()
        .unwrap();
    let lib = alkit::nn::grad_norms(&net, &x, 1, true).unwrap().unwrap();
    let err = max_rel(&lib, &fast, 10, true);
    assert!(err <= 1e-9, "gradient norms: relative error {err}");
    let mut r1 = stream(3, Purpose::Perturb, 0);
    let mut r2 = stream(3, Purpose::Perturb, 0);
    let d1 = alkit::nn::mc_dropout_logits(cnn.as_ref(), &x, 3, &mut r1).unwrap();
    let d2 = alkit::nn::mc_dropout_logits(&net, &x, 3, &mut r2).unwrap();
    for (p, q) in d1.iter().zip(&d2) {
        assert!(rel_max(q, p) <= 1e-12);
    }
}

#[test]
fn a_dropout_free_model_refuses_mc_dropout_and_bad_layers_are_refused() {
    let (vb, _) = f64_builder(7);
    let cfg = ResNetConfig {
        depth: 18,
        stem: Stem::Cifar,
        in_channels: 1,
        classes: 3,
    };
    let net = resnet(&cfg, vb.clone()).unwrap();
    let x = randn64(&[2, 1, 8, 8], 1);
    let mut rng = stream(0, Purpose::Tool, 0);
    let e = alkit::nn::mc_dropout_logits(&net, &x, 2, &mut rng)
        .expect_err("no dropout layer")
        .to_string();
    assert!(e.contains("no dropout layer"), "{e}");
    // Shapes that cannot be built are refused by name, not panicked on.
    let bad = |e: candle_core::Error, what: &str| {
        let m = e.to_string();
        assert!(m.contains(what), "{m}");
    };
    bad(
        resnet(
            &ResNetConfig {
                depth: 20,
                ..cfg.clone()
            },
            vb.clone(),
        )
        .err()
        .unwrap(),
        "ResNet-20",
    );
    let grouped = Conv2dConfig {
        groups: 3,
        ..Default::default()
    };
    bad(
        Conv2d::new(4, 6, grouped, vb.pp("g")).err().unwrap(),
        "3 groups",
    );
    bad(MaxPool2d::new(2, 2, 2).err().unwrap(), "padding");
    bad(Dropout::new(1.0).err().unwrap(), "dropout probability");
    // Activations of the wrong width are an error naming the layer.
    let lin = Linear::new(4, 2, true, vb.pp("l")).unwrap();
    bad(
        lin.forward(&randn64(&[2, 5], 2), &mut Ctx::eval())
            .err()
            .unwrap(),
        "linear layer of 4 inputs",
    );
}

/// The reference scripts' weight formula (tests/reference/resnet18_reference.py): every tensor
/// from `sin(0.37 i + 0.11 len(name))`, shaped by its role.
fn formula_tensor(name: &str, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let s: Vec<f64> = (0..n)
        .map(|i| (0.37 * i as f64 + 0.11 * name.len() as f64).sin())
        .collect();
    let last = name.rsplit('.').next().unwrap_or("");
    let v: Vec<f64> = if last == "running_mean" {
        s.iter().map(|v| 0.1 * v).collect()
    } else if last == "running_var" {
        s.iter().map(|v| 1.0 + 0.5 * v * v).collect()
    } else if name.contains("bn") || name.contains("downsample.1") {
        if last == "weight" {
            s.iter().map(|v| 1.0 + 0.2 * v).collect()
        } else {
            s.iter().map(|v| 0.1 * v).collect()
        }
    } else {
        let fan_in: usize = if shape.len() > 1 {
            shape[1..].iter().product()
        } else {
            shape[0]
        };
        let a = (3.0 / fan_in as f64).sqrt();
        s.iter().map(|v| a * v).collect()
    };
    Tensor::from_vec(v, shape, &Device::Cpu).unwrap()
}

fn cifar_resnet18(in_channels: usize) -> ResNetConfig {
    ResNetConfig {
        depth: 18,
        stem: Stem::Cifar,
        in_channels,
        classes: 10,
    }
}

/// The tensors of the ResNet `cfg` by the reference formula, in the model's creation order.
pub(super) fn formula_resnet(cfg: &ResNetConfig) -> Vec<(String, Tensor)> {
    let (vb, params) = f64_builder(0);
    resnet(cfg, vb).unwrap();
    params
        .named()
        .into_iter()
        .map(|(n, v)| {
            let t = formula_tensor(&n, v.dims());
            (n, t)
        })
        .collect()
}

#[test]
fn resnet18_matches_pytorch_on_the_same_weights() {
    // Logits and REGrad's per-class, per-layer squared norms of a CIFAR ResNet-18 (eval mode)
    // against PyTorch in f64 on the same formula weights and images (recorded by
    // tests/reference/resnet18_reference.py): the layer library's convolution, batch norm,
    // residual wiring, pooling and gradient evidence against an independent implementation.
    let reference: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference/resnet18_reference.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let tensors: std::collections::HashMap<String, Tensor> =
        formula_resnet(&cifar_resnet18(3)).into_iter().collect();
    let vb = VarBuilder::from_tensors(tensors, DType::F64, &Device::Cpu);
    let net = resnet(&cifar_resnet18(3), vb).unwrap();
    let x = Tensor::from_vec(
        (0..2 * 3 * 32 * 32)
            .map(|i| (0.013 * i as f64).sin())
            .collect::<Vec<_>>(),
        (2, 3, 32, 32),
        &Device::Cpu,
    )
    .unwrap();
    let rel = |a: f64, b: f64| (a - b).abs() / a.abs().max(b.abs()).max(1e-300);
    let logits = net.predict(&x).unwrap().to_vec2::<f64>().unwrap();
    let want = reference["logits"].as_array().unwrap();
    for (row, w) in logits.iter().zip(want) {
        for (a, b) in row.iter().zip(w.as_array().unwrap()) {
            let b = b.as_f64().unwrap();
            assert!((a - b).abs() <= 1e-9 * b.abs().max(1.0), "logit {a} vs {b}");
        }
    }
    let g = alkit::nn::grad_norms(&net, &x, 1, false).unwrap().unwrap();
    let layers = reference["layers"].as_array().unwrap().len();
    assert_eq!((g.rows, g.layers), (10, layers));
    let mut worst = 0f64;
    for (i, img) in reference["sq"].as_array().unwrap().iter().enumerate() {
        for (c, row) in img.as_array().unwrap().iter().enumerate() {
            for (l, v) in row.as_array().unwrap().iter().enumerate() {
                let ours = g.sq[(i * 10 + c) * layers + l];
                worst = worst.max(rel(ours, v.as_f64().unwrap()));
            }
        }
    }
    assert!(
        worst <= 1e-9,
        "REGrad evidence against PyTorch: relative error {worst}"
    );
}

#[test]
fn a_torchvision_state_dict_imports_by_name_and_bad_ones_are_refused_by_name() {
    // A ResNet-18 state dict as PyTorch saves it (batch counters included) becomes a
    // checkpoint whose model gives the same logits; a missing, a misshapen and an unexpected
    // tensor are each refused with its name, and nothing is written then.
    let dir = tmp("torchvision-import");
    let arch = Arch::Resnet(cifar_resnet18(3));
    let norm = Normalizer {
        mean: vec![0.0; 3],
        std: vec![1.0; 3],
    };
    let classes: Vec<String> = (0..10).map(|c| format!("c{c}")).collect();
    let write = |tensors: &[(String, Tensor)], file: &str| {
        let path = dir.join(file);
        let map: std::collections::HashMap<String, Tensor> = tensors.iter().cloned().collect();
        candle_core::safetensors::save(&map, &path).unwrap();
        path
    };
    let mut state: Vec<(String, Tensor)> = formula_resnet(&cifar_resnet18(3))
        .into_iter()
        .map(|(n, t)| (n, t.to_dtype(DType::F32).unwrap()))
        .collect();
    let counters: Vec<(String, Tensor)> = state
        .iter()
        .filter_map(|(n, _)| n.strip_suffix("running_mean"))
        .map(|p| {
            let t = Tensor::new(&[7i64], &Device::Cpu)
                .unwrap()
                .squeeze(0)
                .unwrap();
            (format!("{p}num_batches_tracked"), t)
        })
        .collect();
    state.extend(counters);
    let good = write(&state, "good.safetensors");
    let ck = dir.join("ck");
    alkit::checkpoint::import(&good, &arch, &norm, &[3, 32, 32], classes.clone(), &ck).unwrap();
    let loaded = alkit::checkpoint::load(&ck, &Device::Cpu).unwrap();
    let tensors: std::collections::HashMap<String, Tensor> = state.iter().cloned().collect();
    let direct = resnet(
        &cifar_resnet18(3),
        VarBuilder::from_tensors(tensors, DType::F32, &Device::Cpu),
    )
    .unwrap();
    let x = randn64(&[2, 3, 32, 32], 9).to_dtype(DType::F32).unwrap();
    let (a, b) = (
        loaded.model.predict(&x).unwrap(),
        direct.predict(&x).unwrap(),
    );
    assert_eq!(
        a.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
        b.flatten_all().unwrap().to_vec1::<f32>().unwrap()
    );
    let cases: Vec<(&str, Vec<(String, Tensor)>)> = vec![
        (
            "layer1.0.bn1.running_var",
            state
                .iter()
                .filter(|(n, _)| n != "layer1.0.bn1.running_var")
                .cloned()
                .collect(),
        ),
        (
            "fc.weight",
            state
                .iter()
                .map(|(n, t)| {
                    if n == "fc.weight" {
                        (n.clone(), t.narrow(0, 0, 9).unwrap())
                    } else {
                        (n.clone(), t.clone())
                    }
                })
                .collect(),
        ),
        ("layer5.0.conv1.weight", {
            let mut s = state.clone();
            s.push((
                "layer5.0.conv1.weight".into(),
                Tensor::zeros((2, 2), DType::F32, &Device::Cpu).unwrap(),
            ));
            s
        }),
    ];
    for (i, (name, tensors)) in cases.into_iter().enumerate() {
        let file = write(&tensors, &format!("bad{i}.safetensors"));
        let out = dir.join(format!("bad{i}"));
        let e = alkit::checkpoint::import(&file, &arch, &norm, &[3, 32, 32], classes.clone(), &out)
            .expect_err(name)
            .to_string();
        assert!(e.contains(&format!("`{name}`")), "{name}: {e}");
        assert!(!out.exists(), "{name}: something was written");
    }
}

#[test]
fn duq_on_a_layer_stack_has_exact_input_and_penalty_gradients_in_f64() {
    use alkit::duq::net::NetExtractor;
    use alkit::duq::{check_input_gradient, Duq, DuqSettings};
    let (vb, params) = f64_builder(11);
    let cfg = |k, stride, padding, groups| Conv2dConfig {
        kernel: k,
        stride,
        padding,
        groups,
        bias: false,
        init: None,
    };
    let body = Sequential::new()
        .with(Conv2d::new(3, 4, cfg(3, 1, 1, 1), vb.pp("conv1")).unwrap())
        .with(BatchNorm2d::new(4, vb.pp("bn1")).unwrap())
        .with(Relu)
        .with(MaxPool2d::new(3, 2, 1).unwrap())
        .with(BasicBlock::new(4, 6, 2, vb.pp("layer1.0")).unwrap())
        .with(Conv2d::new(6, 6, cfg(3, 1, 1, 2), vb.pp("conv2")).unwrap())
        .with(GlobalAvgPool)
        .with(Flatten)
        .with(Linear::new(6, 5, true, vb.pp("fc")).unwrap());
    perturb_batch_norms(&params, 5);
    let ext = NetExtractor::new(body, 5, &params).unwrap();
    let x = randn64(&[4, 3, 10, 10], 7);
    let v = randn64(&[4, 5], 8);
    for train in [true, false] {
        let err = check_input_gradient(&ext, &x, &v, train).unwrap();
        assert!(err <= 1e-12, "train {train}: input gradient {err}");
    }
    let settings = DuqSettings {
        centroid_dims: 4,
        sigma: 0.5,
        lambda: 0.8,
        ..DuqSettings::default()
    };
    let model = Duq::from_extractor(
        ext,
        3,
        &settings,
        (DType::F64, &Device::Cpu),
        &mut stream(2, Purpose::Init, 0),
    )
    .unwrap();
    let y = Tensor::new(&[0u32, 1, 2, 1], &Device::Cpu).unwrap();
    let err = model.check_parameter_gradients(&x, &y, 1e-6, 3).unwrap();
    assert!(err < 1e-6, "parameter gradients {err}");
}

#[test]
fn duq_on_resnet18_has_exact_input_and_penalty_gradients_in_f64() {
    use alkit::duq::net::NetExtractor;
    use alkit::duq::{check_input_gradient, Duq, DuqSettings, Extractor};
    use alkit::nn::resnet::resnet_trunk_of_width;
    // The DUQ paper's CIFAR model on 8x8 inputs: every stage runs (8, 8, 4, 2, 1 pixels a side),
    // its strided blocks' 1x1 downsampling included, batch norm in training mode. Built 8
    // channels wide instead of 64 (the same layers, blocks and strides; 64 times fewer
    // multiplications, which is what makes f64 finite differences of every tensor affordable).
    let cfg = ResNetConfig {
        depth: 18,
        stem: Stem::Cifar,
        in_channels: 3,
        classes: 3,
    };
    let x = randn64(&[4, 3, 8, 8], 21);
    {
        let (vb, params) = f64_builder(12);
        let (trunk, features) = resnet_trunk_of_width(&cfg, 8, vb).unwrap();
        perturb_batch_norms(&params, 9);
        let ext = NetExtractor::new(trunk, features, &params).unwrap();
        let v = randn64(&[4, features], 22);
        for train in [true, false] {
            let err = check_input_gradient(&ext, &x, &v, train).unwrap();
            assert!(err <= 1e-11, "train {train}: input gradient {err}");
        }
    }
    let settings = DuqSettings {
        centroid_dims: 4,
        sigma: 0.5,
        lambda: 0.8,
        w_std: 0.05,
        n_init: 1.0,
        ..DuqSettings::default()
    };
    let (vb, params) = f64_builder(13);
    let model = Duq::resnet_of_width(&cfg, 8, &settings, vb, &params).unwrap();
    perturb_batch_norms(&params, 10);
    // The optimiser sees the trunk's parameters and the head's W once; never the centroid
    // state or the running statistics.
    let trainable = params
        .named()
        .iter()
        .filter(|(n, _)| !alkit::nn::init::is_buffer(n) && !n.starts_with("duq."))
        .count();
    assert_eq!(model.vars().len(), trainable + 1);
    assert_eq!(model.extractor().features(), 64);
    // Kernel values well inside (0, 1), so that the loss's gradients are not vanishingly small.
    let k = model.kernel_tensor(&x).unwrap();
    let k: Vec<f64> = k.flatten_all().unwrap().to_vec1().unwrap();
    assert!(
        k.iter().any(|&v| v > 0.01) && k.iter().all(|&v| v < 0.99),
        "{k:?}"
    );
    let y = Tensor::new(&[0u32, 1, 2, 1], &Device::Cpu).unwrap();
    // Relative to max(|fd|, |autodiff|, 1e-3): the differences' own rounding is ~1e-7 on a
    // loss of ~81 (the penalty of a deep network's input gradient), so entries with tiny
    // gradients show ~1e-4; a missing or detached term shows ~1.
    let err = model.check_parameter_gradients(&x, &y, 1e-6, 2).unwrap();
    assert!(err < 5e-4, "parameter gradients {err}");
}

#[test]
fn max_pool_kernels_equal_the_generic_windows_for_every_window() {
    // Integer values in a small range make ties common, so the first-maximum rule decides
    // where gradients go; odd sides make windows hang over the edge and padding fall inside.
    let mut rng = stream(11, Purpose::Tool, 0);
    let v: Vec<f64> = (0..2 * 7 * 9 * 3)
        .map(|_| (alkit::rng::uniform(&mut rng) * 4.0).floor())
        .collect();
    let upstream: Vec<f64> = (0..2 * 7 * 9 * 3)
        .map(|_| alkit::rng::uniform(&mut rng))
        .collect();
    for (k, s, p) in [
        (3, 2, 1),
        (3, 1, 1),
        (2, 1, 0),
        (2, 2, 1),
        (5, 2, 2),
        (3, 3, 0),
        (4, 3, 2),
    ] {
        let pool = MaxPool2d::new(k, s, p).unwrap();
        let run = || -> candle_core::Result<(Vec<f64>, Vec<f64>)> {
            let x = Var::from_tensor(&Tensor::from_vec(v.clone(), (2, 7, 9, 3), &Device::Cpu)?)?;
            let y = pool.forward(x.as_tensor(), &mut Ctx::eval())?;
            let n = y.elem_count();
            let w = Tensor::from_vec(upstream[..n].to_vec(), y.shape(), &Device::Cpu)?;
            let g = (y.clone() * w)?.sum_all()?.backward()?;
            Ok((
                y.flatten_all()?.to_vec1()?,
                g.get(x.as_tensor()).unwrap().flatten_all()?.to_vec1()?,
            ))
        };
        let (y, g) = run().unwrap();
        let (y0, g0) = alkit::without_cpu_kernels(run).unwrap();
        assert_eq!(y, y0, "window {k}, stride {s}, padding {p}");
        // The same entries receive gradient; where windows overlap, the sums add the same
        // terms in another order.
        for (a, b) in g.iter().zip(&g0) {
            assert_eq!(*a == 0.0, *b == 0.0, "window {k}, stride {s}, padding {p}");
            assert!(
                (a - b).abs() <= 1e-12 * b.abs(),
                "window {k}, stride {s}, padding {p}"
            );
        }
    }
}

#[test]
fn a_layer_library_models_rows_do_not_depend_on_their_batch() {
    // Row i of a batch's logits and features, against the same item alone and in batches of
    // other sizes and neighbours, bit for bit: what lets scoring run a partial batch as it is.
    // Both ResNet stems (strided, 1x1 and Winograd convolutions, the 3x3 max-pool, batch norm,
    // residual sums) and a dense stack whose products are small enough for gemm's small paths.
    use alkit::nn::{Ask, Offer};
    let imagenet = ResNetConfig {
        depth: 18,
        stem: Stem::Imagenet,
        in_channels: 3,
        classes: 7,
    };
    let (vb, params) = seeded(stream(21, Purpose::Init, 0), DType::F32, &Device::Cpu);
    let resnet_in = resnet(&imagenet, vb).unwrap();
    perturb_batch_norms(&params, 22);
    let (vb, params) = seeded(stream(23, Purpose::Init, 0), DType::F32, &Device::Cpu);
    let resnet_cifar = resnet(&cifar_resnet18(3), vb).unwrap();
    perturb_batch_norms(&params, 24);
    let (vb, _) = seeded(stream(25, Purpose::Init, 0), DType::F32, &Device::Cpu);
    let body = Sequential::new()
        .with(Flatten)
        .with(Linear::new(3 * 8 * 8, 9, true, vb.pp("fc1")).unwrap())
        .with(Relu)
        .with(Linear::new(9, 3, true, vb.pp("fc2")).unwrap());
    let dense = Net::new(body, 3);
    // A grouped convolution's products are candle's: its network keeps filling batches up.
    let (vb, _) = seeded(stream(27, Purpose::Init, 0), DType::F32, &Device::Cpu);
    let grouped = Conv2dConfig {
        kernel: 3,
        stride: 1,
        padding: 1,
        groups: 3,
        bias: true,
        init: None,
    };
    let body = Sequential::new()
        .with(Conv2d::new(3, 6, grouped, vb.pp("c")).unwrap())
        .with(GlobalAvgPool)
        .with(Linear::new(6, 3, true, vb.pp("fc")).unwrap());
    assert!(!Net::new(body, 3).independent_rows(&Device::Cpu));
    let cases: [(&dyn Classifier, usize); 3] = [(&resnet_in, 40), (&resnet_cifar, 16), (&dense, 8)];
    for (model, side) in cases {
        assert!(model.independent_rows(&Device::Cpu));
        let x = randn64(&[9, 3, side, side], 26)
            .to_dtype(DType::F32)
            .unwrap();
        let rows = |t: &Tensor| t.to_vec2::<f32>().unwrap();
        let features = |x: &Tensor| match model.offer(Ask::LastLayer { x }).unwrap() {
            Some(Offer::LastLayer(l)) => rows(&l.h),
            _ => panic!("a layer-library network offers its last layer"),
        };
        let (all, all_h) = (rows(&model.predict(&x).unwrap()), features(&x));
        for (at, n) in [(0, 1), (4, 1), (8, 1), (1, 2), (2, 5), (0, 8)] {
            let part = x.narrow(0, at, n).unwrap();
            assert_eq!(
                rows(&model.predict(&part).unwrap()),
                all[at..at + n],
                "side {side}: rows {at}..+{n}"
            );
            assert_eq!(
                features(&part),
                all_h[at..at + n],
                "side {side}: features {at}..+{n}"
            );
        }
    }
}
