"""Writes data/embeddings/mnist-rp32.safetensors: the shipped MNIST subset (data/) embedded
the way a user computes embeddings in PyTorch, saved with safetensors' own torch writer.

The encoder is a fixed random ReLU projection (torch.manual_seed(0), Linear(784, 32), ReLU)
of pixels in [0, 1]: not a good encoder, a real one (features a linear head can separate
far above chance). Layout (docs/data.md, "Embedding files"): `features` (2000, 32) F16,
`labels` (2000,) I64, `test_features` (500, 32) F16, `test_labels` (500,) I64, metadata
`classes` "0,...,9" and `ids` ["train-00000", ...].

Run from the repository root with torch and safetensors installed:
    python tests/reference/mnist_embeddings.py
"""

import gzip
import json
import struct

import torch
from safetensors.torch import save_file


def idx(path):
    raw = gzip.open(path).read()
    magic, n = struct.unpack(">II", raw[:8])
    if magic == 0x803:
        h, w = struct.unpack(">II", raw[8:16])
        return torch.frombuffer(bytearray(raw[16:]), dtype=torch.uint8).reshape(n, h * w)
    return torch.frombuffer(bytearray(raw[8:]), dtype=torch.uint8).reshape(n)


def main():
    torch.manual_seed(0)
    encoder = torch.nn.Sequential(torch.nn.Linear(784, 32), torch.nn.ReLU())
    out = {}
    with torch.no_grad():
        for split, prefix in (("train", ""), ("t10k", "test_")):
            x = idx(f"data/{split}-images-idx3-ubyte.gz").float() / 255.0
            y = idx(f"data/{split}-labels-idx1-ubyte.gz").long()
            out[prefix + "features"] = encoder(x).half().contiguous()
            out[prefix + "labels"] = y.contiguous()
    n = out["features"].shape[0]
    meta = {
        "classes": ",".join(str(c) for c in range(10)),
        "ids": json.dumps([f"train-{i:05d}" for i in range(n)]),
    }
    save_file(out, "data/embeddings/mnist-rp32.safetensors", metadata=meta)


if __name__ == "__main__":
    main()
