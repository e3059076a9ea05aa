"""Shared fixtures: the repository's shipped data as real arrays, a softmax-regression model
fitted on them in numpy (probabilities, features and a last layer a user's model would give),
and the ``alkit`` binary for the interop tests."""

from __future__ import annotations

import importlib.util

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

ROOT = Path(__file__).resolve().parents[2]
EMBEDDINGS = ROOT / "data" / "embeddings" / "mnist-rp32.safetensors"


@pytest.fixture(scope="session")
def embeddings():
    """MNIST digits embedded by a PyTorch random projection (shipped in data/): features
    (2000, 32) and labels, and a test split of 500."""
    d = load_file(str(EMBEDDINGS))
    return {k: (v.astype(np.float32) if v.dtype.kind == "f" else v) for k, v in d.items()}


def fit_softmax(x, y, classes=10, steps=300, lr=0.5):
    """Multinomial logistic regression by full-batch gradient descent in float64 (standardised
    inputs), so the tests score a real model's outputs."""
    mu, sd = x.mean(0), x.std(0) + 1e-6
    xs = (x - mu) / sd
    n, d = xs.shape
    w = np.zeros((classes, d))
    b = np.zeros(classes)
    onehot = np.eye(classes)[y]
    for _ in range(steps):
        z = xs @ w.T + b
        z -= z.max(1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(1, keepdims=True)
        g = (p - onehot) / n
        w -= lr * g.T @ xs
        b -= lr * g.sum(0)
    # Fold the standardisation into the layer: logits = x W'^T + b'.
    w2 = w / sd
    b2 = b - (w * mu / sd).sum(1)
    return w2.astype(np.float32), b2.astype(np.float32)


@pytest.fixture(scope="session")
def model(embeddings):
    """The fitted model's last layer and its outputs on the test split: features h (500, 32),
    W (10, 32), b (10,), logits, probabilities; the train split's features and labels."""
    h, y = embeddings["features"], embeddings["labels"]
    w, b = fit_softmax(h.astype(np.float64), y)
    ht = embeddings["test_features"]
    z = ht.astype(np.float64) @ w.T.astype(np.float64) + b
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    return {
        "h": ht,
        "w": w,
        "b": b,
        "logits": z,
        "probs": p.astype(np.float32),
        "labels": embeddings["test_labels"],
        "train_h": h,
        "train_y": y,
    }


@pytest.fixture(scope="session")
def draws(model):
    """MC-dropout-like draws (500, 10, 20) in baal's layout: the model's logits under seeded
    multiplicative noise on the features."""
    rng = np.random.default_rng(7)
    h, w, b = (model[k].astype(np.float64) for k in ("h", "w", "b"))
    t = 20
    out = np.empty((h.shape[0], w.shape[0], t), dtype=np.float32)
    for s in range(t):
        mask = rng.binomial(1, 0.8, size=h.shape) / 0.8
        z = (h * mask) @ w.T + b
        p = np.exp(z - z.max(1, keepdims=True))
        out[:, :, s] = p / p.sum(1, keepdims=True)
    return out


def _binary():
    explicit = os.environ.get("ALKIT_BIN")
    if explicit:
        return explicit
    for profile in ("debug", "release"):
        p = ROOT / "target" / profile / "alkit"
        if p.exists():
            return str(p)
    return shutil.which("alkit")


@pytest.fixture(scope="session")
def alkit_bin():
    """The command line, for the interop tests: ``ALKIT_BIN``, else the workspace's build.
    Missing, they skip, unless ``ALKIT_REQUIRE_CLI=1`` (CI) makes that a failure."""
    b = _binary()
    if b is None:
        if os.environ.get("ALKIT_REQUIRE_CLI") == "1":
            pytest.fail("the alkit binary is required (ALKIT_REQUIRE_CLI=1) but was not found")
        pytest.skip("no alkit binary (build it with cargo build, or set ALKIT_BIN)")
    return b


def run_cli(binary, *args, cwd=None):
    """Runs ``alkit -q ARGS``; returns stdout, failing the test with stderr on an error."""
    r = subprocess.run([binary, "-q", *map(str, args)], capture_output=True, text=True, cwd=cwd)
    if r.returncode != 0:
        pytest.fail(f"alkit {' '.join(map(str, args))} failed ({r.returncode}):\n{r.stderr}")
    return r.stdout


def conformal_reference():
    """tests/reference/conformal.py, the independent numpy reference of conformal sets."""
    spec = importlib.util.spec_from_file_location(
        "conformal_reference", ROOT / "tests" / "reference" / "conformal.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

