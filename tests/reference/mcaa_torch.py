"""MC-AA (Alarab & Prakoonwit 2022) in PyTorch float64, written from the paper, for alkit's
`mc-aa` draws and scores to be checked against.

A small ReLU MLP (6 -> 5 -> 4) with weights drawn here, 12 normalised items, a channel standard
deviation `std`. For each item: the predicted class y = argmax f(x); g = d CE(f(x), y) / dx by
autograd; draw t = softmax(f(x + eps_t sign(g) / std)) for eps_t evenly spread over
[-epsilon, epsilon] (T sizes, on the [0, 1] input scale, hence the division by std); the score
is the mutual information H[mean_t p_t] - mean_t H[p_t] (natural logs).

Writes tests/fixtures/mcaa_torch.json. Run: python tests/reference/mcaa_torch.py (torch and
numpy from PyPI).
"""

import json
import pathlib

import numpy as np
import torch


def mlp(params, x):
    h = torch.relu(x @ params["fc1.weight"].T + params["fc1.bias"])
    return h @ params["fc2.weight"].T + params["fc2.bias"]


def entropy(p):
    return -(p * torch.log(p.clamp_min(1e-300))).sum(-1)


def mcaa(params, x, std, epsilon, samples):
    xv = x.clone().requires_grad_(True)
    logits = mlp(params, xv)
    y = logits.argmax(-1)
    loss = torch.nn.functional.cross_entropy(logits, y, reduction="sum")
    (g,) = torch.autograd.grad(loss, xv)
    step = torch.sign(g) / std
    eps = [epsilon * (2.0 * t / (samples - 1) - 1.0) for t in range(samples)]
    with torch.no_grad():
        draws = torch.stack([torch.softmax(mlp(params, x + e * step), -1) for e in eps])
        scores = entropy(draws.mean(0)) - entropy(draws).mean(0)
    return g, draws, scores


def main():
    torch.set_default_dtype(torch.float64)
    rng = np.random.default_rng(11)
    params = {
        "fc1.weight": rng.normal(0.0, 0.8, (5, 6)),
        "fc1.bias": rng.normal(0.0, 0.3, 5),
        "fc2.weight": rng.normal(0.0, 1.2, (4, 5)),
        "fc2.bias": rng.normal(0.0, 0.3, 4),
    }
    # Weights and inputs rounded to float32 first, so that both sides start from the same
    # numbers.
    params = {k: np.asarray(v, dtype=np.float32).astype(np.float64) for k, v in params.items()}
    x = rng.normal(0.0, 1.0, (12, 6)).astype(np.float32).astype(np.float64)
    tp = {k: torch.tensor(v) for k, v in params.items()}
    tx = torch.tensor(x)
    std = 0.5
    cases = []
    for epsilon, samples in [(0.1, 5), (0.3, 11)]:
        g, draws, scores = mcaa(tp, tx, std, epsilon, samples)
        cases.append(
            {
                "epsilon": epsilon,
                "samples": samples,
                # The smallest gradient entry that is not zero: far from zero, so that float32
                # and float64 agree on every sign.
                "min_abs_gradient": float(g.abs()[g != 0].min()),
                "draws": draws.tolist(),
                "scores": scores.tolist(),
            }
        )
    out = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "mcaa_torch.json"
    fixture = {
        "torch": torch.__version__,
        "weights": {k: v.tolist() for k, v in params.items()},
        "x": x.tolist(),
        "std": std,
        "cases": cases,
    }
    out.write_text(json.dumps(fixture) + "\n")
    print(f"wrote {out} (torch {torch.__version__})")


if __name__ == "__main__":
    main()
