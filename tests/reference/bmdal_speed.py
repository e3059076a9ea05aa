"""Times one regression batch selection, alkit or bmdal-reg 3.0.2, on the same features: 256
picks from a pool of n (100,000) rows of p (512) sketched-gradient-sized features with m (256)
labeled rows, for farm-bench to pair (`farm-bench --vs`):

    python tests/reference/bmdal_speed.py --impl alkit --rule lcmd
    python tests/reference/bmdal_speed.py --impl bmdal --rule lcmd

Rules: lcmd (LCMD-TP, no transform), bait (BAIT-F-P with the posterior, sigma 1e-3), maxdet
(MaxDet-P with the posterior): the paper's combinations, on the features as bmdal's `linear`
base kernel reads them (float64, `allow_float64=True`), so that both sides run the selection
alone. Features (numpy default_rng(0), float32): rows x = z A with z ~ N(0, I_p) and A a fixed
random (p, p) matrix ~ N(0, 1/p), so that the kernel is not isotropic. torch runs on the CPU
with its default threads (all cores), alkit with its own (all cores). Prints the selection's
wall seconds (feature generation excluded), the first picks and a hash of all picks in
order, which must agree.
"""
import argparse
import hashlib
import time

import numpy as np

np.Inf = np.inf  # bmdal-reg 3.0.2 writes np.Inf, which numpy 2 removed

ap = argparse.ArgumentParser()
ap.add_argument("--impl", choices=["alkit", "bmdal"], required=True)
ap.add_argument("--rule", choices=["lcmd", "bait", "maxdet"], required=True)
ap.add_argument("--n", type=int, default=100_000)
ap.add_argument("--p", type=int, default=512)
ap.add_argument("--m", type=int, default=256)
ap.add_argument("--k", type=int, default=256)
a = ap.parse_args()

rng = np.random.default_rng(0)
mix = rng.normal(size=(a.p, a.p)) / np.sqrt(a.p)
pool = (rng.normal(size=(a.n, a.p)) @ mix).astype(np.float32)
train = (rng.normal(size=(a.m, a.p)) @ mix).astype(np.float32)

if a.impl == "alkit":
    import alkit

    t = time.perf_counter()
    picks = alkit.select_batch(a.rule, a.k, features=pool, labeled=train)
    dt = time.perf_counter() - t
else:
    import torch
    import torch.nn as nn
    from bmdal_reg.bmdal.algorithms import select_batch
    from bmdal_reg.bmdal.feature_data import TensorFeatureData

    post = [("train", [1e-3, None])]
    cfg = {
        "lcmd": ("lcmd", [], True),
        "bait": ("bait", post, False),
        "maxdet": ("maxdet", post, False),
    }[a.rule]
    t = time.perf_counter()
    data = {
        "train": TensorFeatureData(torch.as_tensor(train, dtype=torch.float64)),
        "pool": TensorFeatureData(torch.as_tensor(pool, dtype=torch.float64)),
    }
    idxs, _ = select_batch(
        batch_size=a.k, models=[nn.Identity()], data=data, y_train=None, base_kernel="linear",
        kernel_transforms=cfg[1], selection_method=cfg[0], sel_with_train=cfg[2],
        maxdet_sigma=1e-3, bait_sigma=1e-3, allow_float64=True, verbosity=0)
    dt = time.perf_counter() - t
    picks = idxs.numpy()
picks = list(map(int, picks))
digest = hashlib.sha256(",".join(map(str, picks)).encode()).hexdigest()[:12]
print(f"{a.impl} {a.rule} n={a.n} p={a.p} m={a.m} k={a.k}: {dt:.3f} s; "
      f"first picks {picks[:8]}, all {len(picks)} picks in order hash to {digest}")
