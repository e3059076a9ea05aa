"""The picks of bmdal-reg 3.0.2 (Holzmüller et al. 2023's own implementation, PyPI
`bmdal-reg`, run on the CPU with torch) for alkit's regression batch rules, written as a JSON
fixture that tests/alkit/kernel_batch.rs compares alkit's picks with.

Usage (a venv with torch and bmdal-reg==3.0.2, dill and psutil; bmdal-reg's other declared
requirements are for its benchmark and are not imported here):

    python tests/reference/bmdal_picks.py > tests/fixtures/bmdal_picks.json

Part 1, selection rules on given features (bmdal's base kernel `linear`, i.e. the features
themselves; float64 throughout, as bmdal's `allow_float64=True`, the setting of the paper's
experiments). Features (numpy default_rng(0)): p = 64, more than the 30 labeled rows and 25
picks together, so that TP mode without the posterior stays well posed (once the labeled rows
and picks span the space, MaxDet's and BAIT's scores are at rounding level and neither
implementation's picks mean anything); five cluster centres ~ N(0, 3^2 I); pool
n = 400 and labeled m = 30 rows, each a centre (uniform) plus N(0, s^2 I) noise with s uniform
in [0.2, 1.5] per row; the labeled rows come from the first three centres only (so that the
pool has regions the labeled set does not cover); all rounded to float32 (what alkit reads).
Each case runs `select_batch(k=25, models=[nn.Identity()], data={'train', 'pool'},
base_kernel='linear', ...)` (the model is unused by `linear`) with the case's kernel
transforms, selection method, `sel_with_train` and sigmas, and records the picks in bmdal's
order. A case may read only the first `columns` features (its own `columns` in the fixture).

Part 2, k-means++'s first pick in TP mode is drawn with probability proportional to each pool
row's squared distance to its nearest labeled row: recorded from bmdal's own
KmeansppSelectionMethod state after adding the labeled rows (`min_sq_dists`), normalised.

Part 3, the base kernels of a network: a ReLU MLP 5 -> 16 -> 16 -> 1 (torch's default init
under torch.manual_seed(0), float64) and 6 inputs ~ N(0, 1) (numpy default_rng(1), float32);
bmdal's `grad` and `ll` feature maps (create_grad_feature_map over every nn.Linear, or the last
one) give the exact kernel matrices (6, 6), recorded with the weights (fc{i}.weight (out, in),
fc{i}.bias) that alkit loads into a one-output network whose mean path is this MLP.
"""
import json
import sys

import numpy as np

# bmdal-reg 3.0.2 writes `np.Inf`, which numpy 2 removed; the alias is the same float.
np.Inf = np.inf

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
from bmdal_reg.bmdal.algorithms import select_batch
from bmdal_reg.bmdal.feature_data import TensorFeatureData
from bmdal_reg.bmdal.features import Features
from bmdal_reg.bmdal.feature_maps import IdentityFeatureMap
from bmdal_reg.bmdal.layer_features import LinearGradientComputation, create_grad_feature_map
from bmdal_reg.bmdal.selection import KmeansppSelectionMethod

torch.set_num_threads(1)
SIGMA = 1e-3


def f32_list(a):
    """float32 values as their shortest decimals (str(numpy.float32)): a float32 reader gets
    exactly these values back."""
    return [float(str(np.float32(v))) for v in np.asarray(a, dtype=np.float32).ravel()]


def features():
    rng = np.random.default_rng(0)
    p, centres = 64, 5
    mu = rng.normal(0.0, 3.0, size=(centres, p))

    def rows(n, allowed):
        c = rng.integers(0, allowed, size=n)
        s = rng.uniform(0.2, 1.5, size=(n, 1))
        return (mu[c] + rng.normal(size=(n, p)) * s).astype(np.float32)

    return rows(400, centres), rows(30, 3)


def cases():
    post = [("train", [SIGMA, None])]
    return [
        # name, selection, transforms, sel_with_train, extra config
        ("maxdiag", "maxdiag", post, False, {}),
        ("maxdet", "maxdet", post, False, {}),
        ("maxdet-tp", "maxdet", [], True, {}),
        ("bait", "bait", post, False, {"overselection_factor": 1.0}),
        ("bait-fb", "bait", post, False, {"overselection_factor": 2.0}),
        ("bait-tp", "bait", [], True, {"overselection_factor": 1.0}),
        ("maxdist", "maxdist", [], True, {}),
        ("maxdist-p", "maxdist", post, False, {}),
        ("lcmd", "lcmd", [], True, {}),
        ("lcmd-p", "lcmd", post, False, {}),
        # More labeled rows (30) than features (the first 16 columns): alkit's MaxDet then
        # takes the posterior as a transform of the rows rather than as conditioning.
        ("maxdet-narrow", "maxdet", post, False, {"columns": 16}),
    ]


def run_case(pool, train, selection, transforms, with_train, extra):
    data = {
        "train": TensorFeatureData(torch.as_tensor(train, dtype=torch.float64)),
        "pool": TensorFeatureData(torch.as_tensor(pool, dtype=torch.float64)),
    }
    idxs, _ = select_batch(
        batch_size=25, models=[nn.Identity()], data=data, y_train=None, base_kernel="linear",
        kernel_transforms=transforms, selection_method=selection, sel_with_train=with_train,
        maxdet_sigma=SIGMA, bait_sigma=SIGMA, allow_float64=True, verbosity=0, **extra)
    return [int(i) for i in idxs]


def kmeanspp_first(pool, train):
    fm = IdentityFeatureMap(n_features=pool.shape[1])
    pf = Features(fm, TensorFeatureData(torch.as_tensor(pool, dtype=torch.float64)))
    tf = Features(fm, TensorFeatureData(torch.as_tensor(train, dtype=torch.float64)))
    alg = KmeansppSelectionMethod(pf, tf, sel_with_train=True, verbosity=0)
    for i in range(len(tf)):
        alg.add(len(pf) + i)
    w = torch.clamp(alg.min_sq_dists, min=0.0)
    return (w / w.sum()).tolist()


def network_kernels():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(),
                          nn.Linear(16, 1)).double()
    x = np.random.default_rng(1).normal(size=(6, 5)).astype(np.float32)
    xt = torch.as_tensor(x, dtype=torch.float64)
    linears = [m for m in model if isinstance(m, nn.Linear)]
    out = {"x": f32_list(x), "weights": {}}
    for i, layer in enumerate(linears):
        out["weights"][f"fc{i + 1}.weight"] = layer.weight.detach().ravel().tolist()
        out["weights"][f"fc{i + 1}.bias"] = layer.bias.detach().ravel().tolist()
    for name, layers in [("grad", linears), ("ll", linears[-1:])]:
        fm = create_grad_feature_map(model, [LinearGradientComputation(l) for l in layers],
                                     use_float64=True)
        f = Features(fm, TensorFeatureData(xt))
        out[name] = f.get_kernel_matrix(f).ravel().tolist()
    return out


def main():
    pool, train = features()
    picks = {}
    for name, selection, transforms, with_train, extra in cases():
        columns = extra.pop("columns", pool.shape[1])
        picks[name] = {
            "rule": selection,
            "with_labeled": with_train,
            "posterior": SIGMA if transforms else None,
            "backward": extra.get("overselection_factor", 1.0) > 1.0,
            "columns": columns,
            "picks": run_case(pool[:, :columns], train[:, :columns], selection, transforms,
                              with_train, extra),
        }
    json.dump({
        "generator": "tests/reference/bmdal_picks.py",
        "bmdal_reg": "3.0.2",
        "torch": torch.__version__.split("+")[0],
        "sigma": SIGMA,
        "k": 25,
        "p": 64,
        "pool": f32_list(pool),
        "labeled": f32_list(train),
        "cases": picks,
        "kmeanspp_first": kmeanspp_first(pool, train),
        "network": network_kernels(),
    }, sys.stdout)


if __name__ == "__main__":
    main()
