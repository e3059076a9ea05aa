"""Speed of the alkit package's BALD and entropy of the mean against plain numpy on the same
draws, in one process (issue 59's first two rows).

Workload: float32 MC-dropout-like probabilities in baal's layout (n, C, T) = (100_000, 10, 20)
(softmax of seeded normal logits with a per-item scale). numpy computes each score as a user
writes it:
  bald      H(mean_t p) - mean_t H(p_t)       (np.log on every draw)
  entropy   H(mean_t p)                        (alkit: "mc-entropy")
Each figure is the best of --repeat runs; the scores are checked to agree (max abs difference)
and the rankings' top-100 overlap is reported.

    python tests/reference/numpy_speed.py [--n 100000] [--repeat 5] [--out FILE]
(numpy and the alkit wheel installed). Threads: numpy's ufuncs run on one core; alkit's
scorers use the package's thread pool (state the machine's cores beside the figures).
"""

import argparse
import json
import os
import platform
import time

import numpy as np

import alkit


def draws(n, c, t, seed=20240603):
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((n, c, t), dtype=np.float32) * rng.uniform(0.5, 4, (n, 1, 1)).astype(
        np.float32
    )
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    return np.ascontiguousarray(p, dtype=np.float32)


def plogp(x):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(x > 0, x * np.log(x), 0.0)


def numpy_bald(p):
    mean = p.mean(axis=2)
    return -plogp(mean).sum(axis=1) + plogp(p).sum(axis=1).mean(axis=1)


def numpy_entropy(p):
    return -plogp(p.mean(axis=2)).sum(axis=1)


def best(f, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = f()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--draws", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out")
    a = ap.parse_args()
    p = draws(a.n, a.classes, a.draws)
    rows = {}
    for name, ours, theirs in [
        ("bald", "bald", numpy_bald),
        ("entropy of the mean", "mc-entropy", numpy_entropy),
    ]:
        t_np, s_np = best(lambda: theirs(p), a.repeat)
        t_al, s_al = best(lambda: alkit.score(ours, draws=p)[ours], a.repeat)
        top = lambda s: set(np.argsort(-s, kind="stable")[:100])  # noqa: E731
        rows[name] = {
            "numpy_s": t_np,
            "alkit_s": t_al,
            "alkit_vs_numpy": t_np / t_al,
            "max_abs_diff": float(np.abs(s_np - s_al).max()),
            "top100_overlap": len(top(s_np) & top(s_al)),
        }
        print(
            f"{name:<20} numpy {1000 * t_np:8.1f} ms   alkit {1000 * t_al:8.1f} ms   "
            f"{t_np / t_al:5.2f}x   max|diff| {rows[name]['max_abs_diff']:.2e}   "
            f"top-100 overlap {rows[name]['top100_overlap']}"
        )
    info = {
        "n": a.n, "classes": a.classes, "draws": a.draws, "repeat": a.repeat,
        "numpy": np.__version__, "alkit": alkit.__version__,
        "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
        "rows": rows,
    }
    if a.out:
        with open(a.out, "w") as f:
            json.dump(info, f, indent=1)


if __name__ == "__main__":
    main()
