"""Writes the digit-set pool of docs/multilabel.md: real MNIST digits made multi-label, from
the digits alkit ships in data/ (2,000 train and 500 test images, IDX).

Each item is a 28 x 84 image of three slots side by side; two or three of them (at random)
hold a digit drawn from the split, the rest are blank; its label set is the digits present
(a digit drawn twice counts once, so an item has one to three labels). Its features are the
2,352 pixels scaled to [0, 1], row-major.

  digitsets_train.npz   2,000 items from the train digits: features (2000, 2352) float32,
                        y (2000, 10) int64 0/1 (labels y[0]..y[9]: the digits 0..9), ids
  digitsets_test.npz    500 items from the test digits, the same layout

numpy's default_rng(0) draws the slots and digits (train first, then test): rerunning writes
the same arrays.

Usage: python tests/reference/digit_sets.py [DATA_DIR [OUT_DIR]]   # default: data out/digitsets
Written with numpy==2.4.6 (scripts/refpython.sh).
"""

import gzip
import os
import sys

import numpy as np


def idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def make(rng, images, labels, n):
    x = np.zeros((n, 28, 84), dtype=np.float32)
    y = np.zeros((n, 10), dtype=np.int64)
    for i in range(n):
        k = rng.integers(2, 4)
        slots = rng.choice(3, size=k, replace=False)
        for s in slots:
            j = rng.integers(len(images))
            x[i, :, 28 * s : 28 * (s + 1)] = images[j] / 255.0
            y[i, labels[j]] = 1
    return x.reshape(n, -1), y


def main():
    data = sys.argv[1] if len(sys.argv) > 1 else "data"
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join("out", "digitsets")
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(0)
    for split, images, labels, n in [
        ("train", "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", 2000),
        ("test", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", 500),
    ]:
        im, lb = idx(os.path.join(data, images)), idx(os.path.join(data, labels))
        x, y = make(rng, im, lb, n)
        ids = np.array([f"{split[:2]}{i:04d}" for i in range(n)])
        np.savez(os.path.join(out, f"digitsets_{split}.npz"), features=x, y=y, ids=ids)
        print(split, x.shape, "labels per item", y.sum(1).mean().round(3))


if __name__ == "__main__":
    main()
