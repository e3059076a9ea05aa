# Writes data/onnx/: small timm classifiers exported to ONNX, with what PyTorch and ONNX
# Runtime compute for them, for tests/alkit/onnx.rs.
#
# Each model is one of timm's tiny test architectures (`test_resnet`, `test_efficientnet`,
# `test_vit`: real timm code, a few hundred thousand weights), 10 classes, random
# initialisation from a fixed seed, in eval mode, exported by the legacy exporter
# (`torch.onnx.export(dynamo=False)`, opset 17) with a dynamic batch axis and two outputs:
# `logits` (N, 10) and `features` (N, d), the penultimate features the classifier multiplies
# (`forward_head(pre_logits=True)`). Its folder holds `model.onnx`, timm's `config.json`
# (`save_config_for_hf`: what alkit reads for the preprocessing) and `expected.safetensors`:
# `torch_logits`, `torch_features`, `ort_logits`, `ort_features` (ORT with one thread) of the
# input `x = (pixels / 255 - mean) / std` in f32 (timm's mean and std of the model), where
# `pixels` (3, 3, 160, 160) u8 come from a formula of the seed (`formula_pixels`) that the test
# repeats, so that no input is shipped. One more model, `efficientnet_b2/`, is the efficientnet with the
# logits output only and a fixed batch of 2 (no dynamic axis, no config.json): alkit must find
# its features as the last Gemm's input, pad the last batch, and take timm's defaults.
#
# Usage: python tests/reference/onnx_export.py [DIR]  (torch 2.15, timm==1.0.31, onnx,
# onnxruntime 1.32, safetensors, numpy); writes data/onnx/ under the repository root, or DIR.
import json, os, sys

import numpy as np
import onnx
import onnxruntime as ort
import timm
import torch
from safetensors.numpy import save_file
from timm.models._hub import save_config_for_hf

here = os.path.dirname(os.path.abspath(__file__))
out_root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "..", "data", "onnx")
CLASSES = 10
ITEMS = 3


def formula_pixels(seed, shape):
    """8-bit pixels from a formula that tests/alkit/onnx.rs repeats: value `i` (row-major) is
    the top byte of the low 32 bits of `(i + 1_000_003 * seed) * 2654435761`."""
    i = np.arange(int(np.prod(shape)), dtype=np.uint64) + np.uint64(1_000_003 * seed)
    v = (i * np.uint64(2654435761)) & np.uint64(0xFFFFFFFF)
    return (v >> np.uint64(24)).astype(np.uint8).reshape(shape)


class WithFeatures(torch.nn.Module):
    """The timm model's logits and the features its classifier multiplies."""

    def __init__(self, m, features=True):
        super().__init__()
        self.m = m
        self.features = features

    def forward(self, x):
        f = self.m.forward_head(self.m.forward_features(x), pre_logits=True)
        logits = self.m.get_classifier()(f)
        return (logits, f) if self.features else logits


def export(name, arch, seed, features=True, fixed_batch=None, config=True):
    torch.manual_seed(seed)
    m = timm.create_model(arch, pretrained=False, num_classes=CLASSES).eval()
    dest = os.path.join(out_root, name)
    os.makedirs(dest, exist_ok=True)
    cfg = m.pretrained_cfg
    c, h, w = cfg["input_size"]
    mean = np.array(cfg["mean"], dtype=np.float32).reshape(1, c, 1, 1)
    std = np.array(cfg["std"], dtype=np.float32).reshape(1, c, 1, 1)
    pixels = formula_pixels(seed, (ITEMS, c, h, w))
    x = ((pixels.astype(np.float32) / np.float32(255.0)) - mean) / std
    wrapped = WithFeatures(m, features).eval()
    outputs = ["logits", "features"] if features else ["logits"]
    batch = fixed_batch or 2
    example = torch.from_numpy(x[:batch].copy())
    path = os.path.join(dest, "model.onnx")
    dynamic = None if fixed_batch else {k: {0: "batch"} for k in ["input"] + outputs}
    torch.onnx.export(
        wrapped,
        (example,),
        path,
        dynamo=False,
        opset_version=17,
        input_names=["input"],
        output_names=outputs,
        dynamic_axes=dynamic,
        do_constant_folding=True,
    )
    onnx.checker.check_model(onnx.load(path))
    if config:
        save_config_for_hf(m, os.path.join(dest, "config.json"))
    with torch.no_grad():
        t = WithFeatures(m, True)(torch.from_numpy(x))
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    if fixed_batch:
        # The fixed batch: the last one padded with zeros, as alkit pads it.
        pad = (-ITEMS) % fixed_batch
        xp = np.concatenate([x, np.zeros((pad, c, h, w), np.float32)])
        o = [sess.run(None, {"input": xp[i : i + fixed_batch]}) for i in range(0, len(xp), fixed_batch)]
        ort_logits = np.concatenate([r[0] for r in o])[:ITEMS]
        ort_features = None
    else:
        ort_logits, ort_features = sess.run(None, {"input": x})
    tensors = {
        "torch_logits": t[0].numpy(),
        "torch_features": t[1].numpy(),
        "ort_logits": ort_logits,
    }
    if ort_features is not None:
        tensors["ort_features"] = ort_features
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, os.path.join(dest, "expected.safetensors"))
    err = np.abs(ort_logits - t[0].numpy()).max() / np.abs(t[0].numpy()).max()
    print(f"{name}: {arch}, {os.path.getsize(path)} bytes, features {t[1].shape[1]}, ORT vs torch {err:.2e}")


if __name__ == "__main__":
    export("resnet", "test_resnet", 1)
    export("efficientnet", "test_efficientnet", 2)
    export("vit", "test_vit", 3)
    export("efficientnet_b2", "test_efficientnet", 2, features=False, fixed_batch=2, config=False)
