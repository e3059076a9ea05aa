"""Multi-label metrics by scikit-learn, and the per-label ECE by its definition in numpy, on
the same predictions alkit measures (tests/alkit/multilabel.rs):

  subset accuracy   sklearn.metrics.accuracy_score(Y, P >= t)
  Hamming loss      sklearn.metrics.hamming_loss(Y, P >= t)
  micro, macro F1   sklearn.metrics.f1_score(Y, P >= t, average=..., zero_division=0)
  mAP               sklearn.metrics.average_precision_score(Y, P, average="macro")
  per-label ECE     per label: 15 equal-width bins (b/15, (b+1)/15], a probability of 0 in
                    the first, sum_b |B_b|/n |mean(y in B_b) - mean(p in B_b)|; mean over
                    labels

Usage:
  multilabel_sklearn.py IN.json OUT.json   reads {"labels": L, "threshold": t, "truth": [...],
                                           "probs": [...]} (row-major (n, L)), writes the
                                           figures as JSON
  multilabel_sklearn.py --example OUT.json writes a seeded example (numpy default_rng(0):
                                           n=300, L=5, probabilities multiples of 1/64 so that
                                           ties and bin edges are exact in float32; label 4
                                           never present) with its figures: the fixture
                                           tests/fixtures/multilabel_sklearn.json
Written with numpy==2.4.6, scikit-learn==1.9.1 (scripts/refpython.sh).
"""

import json
import sys
import warnings

import numpy as np
from sklearn.metrics import (
    accuracy_score,
    average_precision_score,
    f1_score,
    hamming_loss,
)


def ece(y, p, bins=15):
    b = np.clip(np.ceil(p * bins).astype(int), 1, bins) - 1
    total = 0.0
    for k in range(bins):
        m = b == k
        if m.any():
            total += m.sum() / len(p) * abs(y[m].mean() - p[m].mean())
    return total


def figures(Y, P, t):
    pred = (P >= t).astype(int)
    with warnings.catch_warnings():
        # A label without a positive: scikit-learn warns and counts its AP as 0.
        warnings.simplefilter("ignore")
        ap = average_precision_score(Y, P, average="macro")
    return {
        "subset_accuracy": float(accuracy_score(Y, pred)),
        "hamming_loss": float(hamming_loss(Y, pred)),
        "micro_f1": float(f1_score(Y, pred, average="micro", zero_division=0)),
        "macro_f1": float(f1_score(Y, pred, average="macro", zero_division=0)),
        "map": float(ap),
        "ece": float(np.mean([ece(Y[:, j], P[:, j]) for j in range(Y.shape[1])])),
    }


def example():
    rng = np.random.default_rng(0)
    n, L = 300, 5
    logits = rng.normal(size=(n, L))
    Y = (rng.random((n, L)) < 1 / (1 + np.exp(-2 * logits))).astype(int)
    Y[:, 4] = 0
    P = np.round(1 / (1 + np.exp(-logits)) * 64) / 64
    return Y, P, 0.5


def main():
    if sys.argv[1] == "--example":
        Y, P, t = example()
        out = {
            "labels": int(Y.shape[1]),
            "threshold": t,
            "truth": Y.ravel().tolist(),
            "probs": P.ravel().tolist(),
            "figures": figures(Y, P, t),
        }
        with open(sys.argv[2], "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
        return
    with open(sys.argv[1]) as f:
        d = json.load(f)
    L = d["labels"]
    Y = np.array(d["truth"], dtype=int).reshape(-1, L)
    P = np.array(d["probs"], dtype=np.float64).reshape(-1, L)
    with open(sys.argv[2], "w") as f:
        json.dump(figures(Y, P, d["threshold"]), f)


if __name__ == "__main__":
    main()
