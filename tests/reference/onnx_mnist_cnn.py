"""Writes data/onnx/mnist_cnn/: a small 1-channel PyTorch CNN trained briefly on the shipped MNIST
subset, exported to ONNX with no config.json, and what ONNX Runtime computes for it.

The model takes (N, 1, 28, 28) images in [0, 1] (pixels / 255, no mean/std normalisation):
Conv(1, 8, 3) + ReLU + MaxPool(2), Conv(8, 16, 3) + ReLU + MaxPool(2), flatten (400),
Linear(400, 32) + ReLU (the features), Linear(32, 10) (the logits); 14,410 weights, initialised
after torch.manual_seed(0) and trained for 200 Adam steps (lr 1e-3, batches of 64 drawn as
seeded per-epoch permutations of data/train-*-ubyte.gz, 2,000 items) so that its predictions
are not uniform. In eval mode it is exported by the legacy exporter
(`torch.onnx.export(dynamo=False)`, opset 17) with one input `input` (dynamic batch axis) and ONE
output `logits` (N, 10), into `model.onnx`; there is NO config.json, so alkit has to take the
item shape from the graph and find the features as the last Gemm's input.

`expected.safetensors` holds, for the first 64 items of the shipped TEST split
(data/t10k-*-ubyte.gz) with inputs `pixels / 255` in float32, ONNX Runtime's (CPU,
intra_op_num_threads = 1) results:
  ort_probs    (64, 10) float32: softmax of ORT's logits, computed in float64, then cast;
  ort_entropy  (64,)    float64: -sum p log p (natural log) of those float64 probabilities.
The script prints the file sizes and the accuracy on the 500 shipped test items.

Usage: python tests/reference/onnx_mnist_cnn.py [DIR]   (writes DIR/mnist_cnn/, default
data/onnx/ under the repository root). Written with Python 3.11, torch==2.15.0 (PyPI default
build, run on CPU), onnx==1.23.2, onnxruntime==1.32.0, safetensors==0.8.0, numpy==2.4.6.
"""

import gzip
import os
import struct
import sys

import numpy as np
import onnx
import onnxruntime as ort
import torch
from safetensors.numpy import save_file

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.join(here, "..", "..")
data_dir = os.path.join(root, "data")
out_root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(data_dir, "onnx")
STEPS, BATCH, LR, EXPECTED_ITEMS = 200, 64, 1e-3, 64


def read_idx(path):
    """A gzip IDX file (data/README.md): magic 0x0803 images (n, rows, cols) u8, 0x0801 labels."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    zero, dtype, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype != 0x08:
        raise ValueError(f"{path}: not a u8 IDX file")
    dims = struct.unpack(">" + "I" * ndim, raw[4 : 4 + 4 * ndim])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def split(prefix):
    images = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"))
    x = (images.astype(np.float32) / np.float32(255.0))[:, None, :, :]
    return x, labels.astype(np.int64)


class MnistCnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(1, 8, 3),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(8, 16, 3),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
            torch.nn.Flatten(),
            torch.nn.Linear(16 * 5 * 5, 32),
            torch.nn.ReLU(),
        )
        self.head = torch.nn.Linear(32, 10)

    def forward(self, x):
        return self.head(self.body(x))


def train(x, y):
    torch.manual_seed(0)
    model = MnistCnn()
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    gen = torch.Generator().manual_seed(0)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    order, pos = torch.randperm(len(x), generator=gen), 0
    model.train()
    for step in range(STEPS):
        if pos + BATCH > len(order):
            order, pos = torch.randperm(len(x), generator=gen), 0
        idx = order[pos : pos + BATCH]
        pos += BATCH
        loss = torch.nn.functional.cross_entropy(model(xt[idx]), yt[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step in (0, STEPS - 1):
            print(f"step {step + 1}: loss {loss.item():.4f}")
    return model.eval()


def softmax64(logits):
    z = logits.astype(np.float64)
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def main():
    torch.set_num_threads(1)
    x_train, y_train = split("train")
    x_test, y_test = split("t10k")
    model = train(x_train, y_train)
    n_weights = sum(p.numel() for p in model.parameters())

    dest = os.path.join(out_root, "mnist_cnn")
    os.makedirs(dest, exist_ok=True)
    path = os.path.join(dest, "model.onnx")
    torch.onnx.export(
        model,
        (torch.from_numpy(x_test[:2].copy()),),
        path,
        dynamo=False,
        opset_version=17,
        input_names=["input"],
        output_names=["logits"],
        dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
        do_constant_folding=True,
    )
    onnx.checker.check_model(onnx.load(path))
    stale = os.path.join(dest, "config.json")
    if os.path.exists(stale):
        os.remove(stale)

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    (ort_logits,) = sess.run(None, {"input": x_test})
    with torch.no_grad():
        torch_logits = model(torch.from_numpy(x_test)).numpy()
        train_pred = model(torch.from_numpy(x_train)).argmax(dim=1).numpy()
    p64 = softmax64(ort_logits[:EXPECTED_ITEMS])
    logp = np.log(np.where(p64 > 0, p64, 1.0))
    entropy = -(p64 * logp).sum(axis=1)
    expected = os.path.join(dest, "expected.safetensors")
    save_file(
        {
            "ort_probs": np.ascontiguousarray(p64.astype(np.float32)),
            "ort_entropy": np.ascontiguousarray(entropy.astype(np.float64)),
        },
        expected,
    )

    acc_ort = float((ort_logits.argmax(axis=1) == y_test).mean())
    acc_torch = float((torch_logits.argmax(axis=1) == y_test).mean())
    acc_train = float((train_pred == y_train).mean())
    err = np.abs(ort_logits - torch_logits).max() / np.abs(torch_logits).max()
    print(f"{path}: {os.path.getsize(path)} bytes, {n_weights} weights")
    print(f"{expected}: {os.path.getsize(expected)} bytes ({EXPECTED_ITEMS} test items)")
    print(f"accuracy on the {len(y_test)} shipped test items: ORT {acc_ort:.3f}, torch {acc_torch:.3f}; train {acc_train:.3f}")
    print(f"ORT vs torch logits {err:.2e}; mean entropy of the first {EXPECTED_ITEMS} {entropy.mean():.4f} nats (uniform {np.log(10):.4f})")


if __name__ == "__main__":
    main()
