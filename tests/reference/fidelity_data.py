"""Writes the fidelity pack alkit ships under data/fidelity/ (see its README.md): the two
synthetic data sets of CDALBench (Werner et al., "A Cross-Domain Benchmark for Active
Learning", NeurIPS 2024 Datasets and Benchmarks) built to catch a selector out, generated
from their published definitions (the benchmark's SynthData generators, restated here):

  threeclust.safetensors
      Four Gaussians of 150 points each, identity covariance, centred at (0, 0) and (4, 3)
      with label 1 and at (0, 6) and (4, 3) with label 0: the two clusters at (4, 3) lie on
      top of each other with opposite labels (the honeypot an uncertainty score keeps
      labeling, since nothing can be learned there). 600 points.
  divergingsin.safetensors
      x = 1,000 points evenly spaced on [0, 10]; label 1 at y = sin(2x) + 0.5x + N(0, 0.3^2),
      label 0 at y = sin(2x) - 0.5x + N(0, 0.3^2): two sine bands that touch at the left and
      drift apart to the right. 2,000 points.

As CDALBench does, the points are drawn in that order from one numpy Generator
(default_rng(SEED)), then shuffled by it, and the first 20% of the shuffled points are the
test split. The features are the raw coordinates (CDALBench min-max scales them by the
train split; alkit standardises each feature of an embedding file by the train split, an
affine map of the same kind, so the models see the same geometry). Tensors: `features`
(n, 2) f32, `labels` (n,) i64, `test_features`, `test_labels`. safetensors' `save_file`
writes the same bytes for the same arrays, so rerunning the script writes identical files
(tests/alkit/fidelity.rs checks both that and the points against the definitions).

Usage:  python tests/reference/fidelity_data.py [OUT_DIR]   # default: data/fidelity
Written with Python 3.11, numpy==2.4.6, safetensors==0.8.0 (scripts/refpython.sh).
"""

import hashlib
import os
import sys

import numpy as np
from safetensors.numpy import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "..", "..", "data", "fidelity")
SEED = 0
TEST_SHARE = 0.2


def three_clust(rng, per_cluster=150):
    cov = np.eye(2)
    clusters = [rng.multivariate_normal(m, cov, per_cluster) for m in ([0, 0], [4, 3], [0, 6], [4, 3])]
    x = np.concatenate(clusters)
    y = np.concatenate([np.ones(2 * per_cluster), np.zeros(2 * per_cluster)])
    return x, y


def diverging_sin(rng, n=1000, divergence=0.5, freq=2.0, noise=0.3):
    x = np.linspace(0, 10, n)
    curve = np.sin(freq * x)
    above = curve + divergence * x + rng.normal(0, noise, n)
    below = curve - divergence * x + rng.normal(0, noise, n)
    pts = np.concatenate([np.c_[x, above], np.c_[x, below]])
    y = np.concatenate([np.ones(n), np.zeros(n)])
    return pts, y


def write(path, rng, x, y):
    ids = np.arange(len(x))
    rng.shuffle(ids)
    cut = int(len(ids) * TEST_SHARE)
    test, train = ids[:cut], ids[cut:]
    save_file(
        {
            "features": x[train].astype(np.float32),
            "labels": y[train].astype(np.int64),
            "test_features": x[test].astype(np.float32),
            "test_labels": y[test].astype(np.int64),
        },
        path,
    )
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    print(f"{os.path.basename(path)}: {len(train)} train, {len(test)} test, sha256 {digest}")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT
    os.makedirs(out, exist_ok=True)
    for name, make in (("threeclust", three_clust), ("divergingsin", diverging_sin)):
        rng = np.random.default_rng(SEED)
        x, y = make(rng)
        write(os.path.join(out, f"{name}.safetensors"), rng, x, y)


if __name__ == "__main__":
    main()
