"""Times the `mlp-gauss` regression head in PyTorch as `alkit bench --train mlp-gauss` times it
in alkit, on the same machine, for the side-by-side rows of docs/regression.md.

The same network and work: synthetic rows x ~ N(0, 1) of 64 features (y = x0 + 0.5 x63 +
0.3 noise); Linear 64-128, ReLU, Dropout 0.1, Linear 128-128, ReLU, Dropout 0.1, Linear 128-2;
mean = h[:, 0], variance = softplus(h[:, 1]) + 1e-6; beta-NLL (beta 0.5: the per-row NLL times
the detached variance^0.5), Adam lr 1e-3, batch 256 drawn epoch by epoch from a shuffle,
float32. Training: `--steps` whole optimiser steps (forward, loss, backward, update), from a
fresh initialisation each repeat. Scoring: dropout on, `--passes` passes over every row in
batches of 1024 under no_grad, then the mixture's total variance per row (the mean of the
variances plus the variance of the means). Medians of `--repeats`; `--threads` intra-op
threads (alkit uses every core: 2 on this project's machine).

Usage: python tests/reference/gauss_speed.py [--n 100000] [--steps 200] [--passes 20]
       [--repeats 3] [--threads 2]
Prints one JSON object: {"torch", "train_rows_per_s", "score_rows_per_s", ...}."""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
from torch import nn


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--passes", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.standard_normal((a.n, a.dim)).astype(np.float32))
    y = (x[:, 0] + 0.5 * x[:, -1] + 0.3 * torch.from_numpy(rng.standard_normal(a.n).astype(np.float32)))[:, None]
    train_s, score_s = [], []
    for r in range(a.repeats):
        torch.manual_seed(r)
        model = nn.Sequential(
            nn.Linear(a.dim, 128), nn.ReLU(), nn.Dropout(0.1),
            nn.Linear(128, 128), nn.ReLU(), nn.Dropout(0.1),
            nn.Linear(128, 2),
        )
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        gen = torch.Generator().manual_seed(r)
        order = torch.randperm(a.n, generator=gen)
        cursor = 0
        model.train()
        t = time.perf_counter()
        for _ in range(a.steps):
            if cursor + a.batch > a.n:
                order = torch.randperm(a.n, generator=gen)
                cursor = 0
            ids = order[cursor:cursor + a.batch]
            cursor += a.batch
            h = model(x[ids])
            mean, var = h[:, :1], nn.functional.softplus(h[:, 1:]) + 1e-6
            per = 0.5 * (var.log() + (y[ids] - mean) ** 2 / var)
            loss = (per * var.detach() ** 0.5).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        train_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        with torch.no_grad():
            means = torch.empty(a.passes, a.n)
            variances = torch.empty(a.passes, a.n)
            for p in range(a.passes):
                for s in range(0, a.n, 1024):
                    h = model(x[s:s + 1024])
                    means[p, s:s + 1024] = h[:, 0]
                    variances[p, s:s + 1024] = nn.functional.softplus(h[:, 1]) + 1e-6
            total = variances.mean(0) + means.var(0, unbiased=False)
        score_s.append(time.perf_counter() - t)
        assert torch.isfinite(total).all()
    med = lambda v: sorted(v)[len(v) // 2]
    print(json.dumps({
        "torch": torch.__version__,
        "threads": a.threads,
        "rows": a.n, "dim": a.dim, "batch": a.batch, "steps": a.steps, "passes": a.passes,
        "train_rows_per_s": round(a.batch * a.steps / med(train_s), 1),
        "score_rows_per_s": round(a.n / med(score_s), 1),
    }))


if __name__ == "__main__":
    main()
