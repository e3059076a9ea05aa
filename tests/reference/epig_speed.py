"""EPIG, alkit against baal 2.1.0, in one process on the same machine and the same draws.

Workload: MC-dropout-like probabilities in baal's layout (n, C, T) = (--n 10,000, 10, 20),
float32, made from seeded Dirichlet-perturbed class profiles (numpy default_rng(0)); the
targets are --targets 256 of the items at positions floor(j n / m), the ones alkit takes for
setting `epig_targets` m.
  baal:  EPIG().compute_score(p, target_predictions=p[positions])   (its scores only)
  alkit: alkit.score("epig", draws=p, layout="nct", epig_targets=m)
Each is timed --repeats times (3), best printed, with the largest difference between their
scores (baal computes in float32, alkit sums in float64).

    /work/venvs/ref/bin/pip install baal==2.1.0   # beside torch and the alkit wheel
    python tests/reference/epig_speed.py [--n 10000] [--targets 256] [--threads 1]

--threads sets torch's and the BLAS libraries' threads (default 1; 0 leaves their defaults);
alkit uses its own pool (RAYON_NUM_THREADS): state both beside the figures.
"""
import argparse
import os
import time

ap = argparse.ArgumentParser()
ap.add_argument("--n", type=int, default=10_000)
ap.add_argument("--classes", type=int, default=10)
ap.add_argument("--draws", type=int, default=20)
ap.add_argument("--targets", type=int, default=256)
ap.add_argument("--repeats", type=int, default=3)
ap.add_argument("--threads", type=int, default=1)
args = ap.parse_args()
if args.threads > 0:
    for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[v] = str(args.threads)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from baal.active.heuristics import EPIG  # noqa: E402

import alkit  # noqa: E402

if args.threads > 0:
    torch.set_num_threads(args.threads)


def draws(n, c, t, seed=0):
    rng = np.random.default_rng(seed)
    profile = rng.dirichlet(np.full(c, 0.3), size=n)
    logits = np.log(profile[:, :, None] + 1e-3) + rng.normal(0.0, 0.7, (n, c, t))
    p = np.exp(logits - logits.max(1, keepdims=True))
    return (p / p.sum(1, keepdims=True)).astype(np.float32)


def best(f):
    times, out = [], None
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        out = f()
        times.append(time.perf_counter() - t0)
    return min(times), out


p = draws(args.n, args.classes, args.draws)
m = min(args.targets, args.n)
positions = np.arange(m) * args.n // m
q = p[positions]
t_baal, s_baal = best(lambda: np.asarray(EPIG().compute_score(p, target_predictions=q)))
t_alkit, s_alkit = best(
    lambda: alkit.score("epig", draws=p, layout="nct", epig_targets=m)["epig"]
)
print(
    f"EPIG n={args.n} C={args.classes} T={args.draws} targets={m}: "
    f"baal {t_baal:.3f} s, alkit {t_alkit:.3f} s ({t_baal / t_alkit:.1f}x); "
    f"max |difference| {np.abs(s_baal - s_alkit).max():.2e} (scores up to {s_alkit.max():.3f}); "
    f"torch threads {torch.get_num_threads()}, RAYON_NUM_THREADS {os.environ.get('RAYON_NUM_THREADS', 'unset')}"
)
