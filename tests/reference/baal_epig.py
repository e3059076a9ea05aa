"""baal reference for alkit's EPIG: baal's own `EPIG` heuristic (baal 2.1.0 from PyPI, code from
Bickford Smith et al.'s repository) run on the `small` MC-dropout-like probabilities of
python/tests/data/baal_reference.npz (n=500, C=10, T=20, baal's layout (n, C, T)), written to
python/tests/data/baal_epig.{npz,json} for the pytest suite.

Nothing here re-implements EPIG: the scores are `baal.active.heuristics.EPIG().compute_score(p,
target_predictions=q)` as a baal user calls it, with the targets `q` alkit uses: the items
themselves (`all`: every one of the 500; `spread64`: the 64 at positions floor(j * 500 / 64)).
baal computes in float32 (its `torch.Tensor(...)` makes float32 whatever it is given), so
its scores carry float32 rounding of the entropies they subtract (about 1e-6 on values up to
0.05); the JSON records each case's range.

    python3 -m venv /tmp/baalvenv && /tmp/baalvenv/bin/pip install baal==2.1.0
    /tmp/baalvenv/bin/python tests/reference/baal_epig.py   # from the repository root
"""

import json
import platform
from importlib.metadata import version
from pathlib import Path

import numpy as np
import torch
from baal.active.heuristics import EPIG

DATA = Path(__file__).resolve().parents[2] / "python" / "tests" / "data"


def scores(p, q, dtype):
    return np.asarray(EPIG().compute_score(p.astype(dtype), target_predictions=q.astype(dtype)))


def main():
    p = np.load(DATA / "baal_reference.npz")["small_probs"]
    n = p.shape[0]
    out, meta = {}, {"made_with": {}, "cases": {}}
    for name, positions in [("all", np.arange(n)), ("spread64", np.arange(64) * n // 64)]:
        q = p[positions]
        s = scores(p, q, np.float32)
        out[f"epig_{name}_positions"] = positions
        out[f"epig_{name}_scores"] = s.astype(np.float32)
        meta["cases"][name] = {
            "targets": int(len(positions)),
            "min": float(s.min()),
            "max": float(s.max()),
        }
    np.savez_compressed(DATA / "baal_epig.npz", **out)
    meta["made_with"] = {
        "baal": version("baal"),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
    }
    (DATA / "baal_epig.json").write_text(json.dumps(meta, indent=1) + "\n")


if __name__ == "__main__":
    main()
