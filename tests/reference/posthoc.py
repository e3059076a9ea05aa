"""Independent numpy reference for alkit's post-hoc out-of-distribution scores.

Each score is written from its paper's equations (and, where the paper leaves a choice open,
from OpenOOD v1.5's postprocessor, which is named), not from alkit's code:

  max-logit    Hendrycks et al. 2022, "Scaling Out-of-Distribution Detection for Real-World
               Settings": -max_c z_c.
  energy       Liu et al. 2020, "Energy-based Out-of-distribution Detection": -logsumexp(z).
  gen          Liu et al. 2023, "GEN: Pushing the Limits of Softmax-Based Out-of-Distribution
               Detection": sum over the M largest p_j of p_j^g (1 - p_j)^g.
  react        Sun et al. 2021, "ReAct": features clipped at the given percentile of the
               reference features, then -logsumexp.
  ash          Djurisic et al. 2023, "Extremely Simple Activation Shaping" (ASH-S): keep the
               k largest features, zero the rest, scale by exp(s1 / s2), then -logsumexp.
  scale        Xu et al. 2024, "Scaling for Training Time and Post-hoc OOD Detection
               Enhancement" (SCALE): the whole feature row times exp(s1 / s2), then -logsumexp.
  knn          Sun et al. 2022, "Out-of-Distribution Detection with Deep Nearest Neighbors":
               Euclidean distance from the L2-normalised query to its k-th nearest
               L2-normalised reference row.
  mahalanobis  Lee et al. 2018, "A Simple Unified Framework for Detecting Out-of-Distribution
               Samples and Adversarial Attacks", as OpenOOD's MDS: class means, one tied
               covariance (maximum likelihood), pseudo-inverse; min over classes of the squared
               Mahalanobis distance.
  vim          Wang et al. 2022, "ViM: Out-Of-Distribution with Virtual-logit Matching":
               alpha * ||(h - u) NS|| - logsumexp(z).

Conventions: logits z = h @ W.T + b with h (n, d), W (c, d), b (c,); every score is "higher =
more likely out-of-distribution". Inputs arrive as f32 values and are computed on in float64.

Protocol: python posthoc.py IN.json OUT.json
  IN  {"n", "d", "c", "h": [n*d], "w": [c*d], "b": [c], "m", "ref_h": [m*d],
       "ref_labels": [m ints in 0..c], "knn_k", "vim_dim", "react_percentile",
       "ash_percentile", "scale_percentile", "gen_gamma", "gen_m"}
  OUT {name: [n floats]} for the names above.

Run with numpy only (scripts/refpython.sh makes a virtual environment with it).
"""

import json
import sys

import numpy as np


def f64(values, *shape):
    return np.asarray(values, dtype=np.float32).astype(np.float64).reshape(shape)


def logsumexp(z):
    top = z.max(axis=1, keepdims=True)
    return (top + np.log(np.exp(z - top).sum(axis=1, keepdims=True)))[:, 0]


def softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def kept_count(d, percentile):
    # ASH / SCALE: the top k = d - round(d * percentile / 100) activations are kept.
    return d - int(np.round(d * percentile / 100.0))


def ash_s(h, percentile):
    k = kept_count(h.shape[1], percentile)
    out = h.copy()
    for i, row in enumerate(h):
        s1 = row.sum()
        top = np.argsort(-row, kind="stable")[:k]
        kept = np.zeros_like(row)
        kept[top] = row[top]
        s2 = kept.sum()
        if s2 > 0:
            out[i] = kept * np.exp(s1 / s2)
    return out


def ash_b(h, percentile):
    # ASH-B (Djurisic et al. 2023; OpenOOD v1.5's "ASH"): the top k positions of each row
    # get the row's sum divided by k, every other position 0.
    k = kept_count(h.shape[1], percentile)
    out = np.zeros_like(h)
    for i, row in enumerate(h):
        top = np.argsort(-row, kind="stable")[:k]
        out[i, top] = row.sum() / k
    return out


def scale(h, percentile):
    k = kept_count(h.shape[1], percentile)
    out = h.copy()
    for i, row in enumerate(h):
        s1 = row.sum()
        s2 = np.sort(row)[::-1][:k].sum()
        if s2 > 0:
            out[i] = row * np.exp(s1 / s2)
    return out


def pinvh(a):
    # Pseudo-inverse of a symmetric matrix as scipy.linalg.pinvh: eigenvalues whose magnitude
    # is at most max(shape) * eps * (largest magnitude) count as zero.
    vals, vecs = np.linalg.eigh(a)
    cutoff = max(a.shape) * np.finfo(np.float64).eps * np.abs(vals).max()
    keep = np.abs(vals) > cutoff
    inv = np.zeros_like(vals)
    inv[keep] = 1.0 / vals[keep]
    return (vecs * inv) @ vecs.T


def scores(a):
    n, d, c, m = a["n"], a["d"], a["c"], a["m"]
    h = f64(a["h"], n, d)
    w = f64(a["w"], c, d)
    b = f64(a["b"], c)
    ref = f64(a["ref_h"], m, d)
    labels = np.asarray(a["ref_labels"], dtype=np.int64).reshape(m)

    def logits(x):
        return x @ w.T + b

    z = logits(h)
    out = {}
    out["max-logit"] = -z.max(axis=1)
    out["energy"] = -logsumexp(z)

    g = a["gen_gamma"]
    top = np.sort(softmax(z), axis=1)[:, ::-1][:, : min(a["gen_m"], c)]
    out["gen"] = (top**g * (1.0 - top) ** g).sum(axis=1)

    t = np.percentile(ref.ravel(), a["react_percentile"])
    out["react"] = -logsumexp(logits(np.minimum(h, t)))
    out["ash"] = -logsumexp(logits(ash_s(h, a["ash_percentile"])))
    out["ash-b"] = -logsumexp(logits(ash_b(h, a["ash_percentile"])))
    out["scale"] = -logsumexp(logits(scale(h, a["scale_percentile"])))

    k = a["knn_k"]
    if not 1 <= k <= m:
        raise ValueError(f"knn_k {k} needs 1..m={m}")
    qn = h / (np.linalg.norm(h, axis=1, keepdims=True) + 1e-10)
    rn = ref / (np.linalg.norm(ref, axis=1, keepdims=True) + 1e-10)
    dist = np.sqrt(((qn[:, None, :] - rn[None, :, :]) ** 2).sum(axis=2))
    out["knn"] = np.sort(dist, axis=1)[:, k - 1]

    present = np.unique(labels)
    means = np.stack([ref[labels == cl].mean(axis=0) for cl in present])
    centered = ref - means[np.searchsorted(present, labels)]
    precision = pinvh(centered.T @ centered / m)
    maha = np.stack([np.einsum("ij,jk,ik->i", h - mu, precision, h - mu) for mu in means], axis=1)
    out["mahalanobis"] = maha.min(axis=1)

    dim = a["vim_dim"]
    if not 0 <= dim < d:
        raise ValueError(f"vim_dim {dim} needs 0..d-1={d - 1}")
    u = -np.linalg.pinv(w) @ b
    zc = ref - u
    vals, vecs = np.linalg.eigh(zc.T @ zc / m)
    order = np.argsort(-vals, kind="stable")
    ns = vecs[:, order[dim:]]
    alpha = logits(ref).max(axis=1).mean() / np.linalg.norm(zc @ ns, axis=1).mean()
    out["vim"] = alpha * np.linalg.norm((h - u) @ ns, axis=1) - logsumexp(z)

    return {name: [float(x) for x in v] for name, v in out.items()}


def main():
    src, dst = sys.argv[1:3]
    with open(src) as f:
        a = json.load(f)
    with open(dst, "w") as f:
        json.dump(scores(a), f, allow_nan=False)


if __name__ == "__main__":
    main()
