"""Independent numpy reference for alkit's split conformal prediction sets.

Written from the papers' equations, not from alkit's code:

  lac   Angelopoulos & Bates 2021, "A Gentle Introduction to Conformal Prediction and
        Distribution-Free Uncertainty Quantification" (section 1): score 1 - p_y.
  aps   Romano, Sesia & Candes 2020, "Classification with Valid and Adaptive Coverage"
        (eq. 5, the generalised conditional quantile): with the classes ordered by p
        descending (ties: lower class index first), the total p of the classes ranked
        strictly above y, plus u * p_y. The form says what u is: "romano" u = 0 (their
        non-randomised rule: the set runs down the ranking while the mass above is at most
        qhat, so it always holds the top class), "randomized" u ~ U(0, 1) given per row, one
        draw shared by the row's classes, "inclusive" u = 1 (the mass up to and including y).
  raps  Angelopoulos, Bates, Malik & Jordan 2021, "Uncertainty Sets for Image Classifiers using
        Conformal Prediction": aps + lambda * max(0, rank(y) - k_reg), rank 1-based.

qhat is the ceil((n_cal + 1)(1 - alpha))-th smallest calibration score (1-based), +inf when
that exceeds n_cal; a test row's set is {y : score(x, y) <= qhat}. Inputs arrive as f32 values
and are computed on in float64.

Protocol: python conformal.py IN.json OUT.json
  IN  {"method": "lac" | "aps" | "raps", "form": "romano" | "randomized" | "inclusive",
       "alpha", "lambda", "k_reg", "n_cal", "c", "cal_probs": [n_cal*c],
       "cal_labels": [n_cal ints], "n", "probs": [n*c], "u_cal": [n_cal], "u": [n]}
       (the draws only for the randomized form)
  OUT {"qhat": float or "inf", "sets": [[sorted class ids] per test row]}

Run with numpy only (scripts/refpython.sh makes a virtual environment with it).
"""

import json
import math
from fractions import Fraction
import sys

import numpy as np


def f64(values, *shape):
    return np.asarray(values, dtype=np.float32).astype(np.float64).reshape(shape)


def all_scores(probs, method, lam, k_reg, form="romano", u=None):
    """scores[i, y] = score(x_i, y) for every class y; `u` (n,) the randomized form's draws."""
    if method == "lac":
        return 1.0 - probs
    out = np.empty_like(probs)
    for i, p in enumerate(probs):
        weight = {"romano": 0.0, "inclusive": 1.0}.get(form)
        if weight is None:
            weight = float(u[i])
        order = np.argsort(-p, kind="stable")
        above = np.concatenate([[0.0], np.cumsum(p[order])[:-1]])
        for rank0, y in enumerate(order):
            out[i, y] = above[rank0] + weight * p[y]
            if method == "raps":
                out[i, y] += lam * max(0, rank0 + 1 - k_reg)
    if method not in ("aps", "raps"):
        raise ValueError(f"unknown method {method}")
    return out


def main():
    src, dst = sys.argv[1:3]
    with open(src) as f:
        a = json.load(f)
    n_cal, c, n = a["n_cal"], a["c"], a["n"]
    method, lam, k_reg = a["method"], a.get("lambda", 0.0), a.get("k_reg", 0)
    form = a.get("form", "romano")
    cal = all_scores(f64(a["cal_probs"], n_cal, c), method, lam, k_reg, form, a.get("u_cal"))
    labels = np.asarray(a["cal_labels"], dtype=np.int64).reshape(n_cal)
    cal_scores = np.sort(cal[np.arange(n_cal), labels])
    # Exact rational arithmetic on alpha as written (0.1 is one tenth, not its binary
    # approximation), so an integer (n + 1)(1 - alpha) is not rounded up to the next rank.
    index = math.ceil((n_cal + 1) * (1 - Fraction(repr(a["alpha"]))))
    if index < 1:
        raise ValueError(f"alpha {a['alpha']} leaves no calibration score to take")
    qhat = float(cal_scores[index - 1]) if index <= n_cal else math.inf
    test = all_scores(f64(a["probs"], n, c), method, lam, k_reg, form, a.get("u"))
    sets = [[int(y) for y in np.nonzero(row <= qhat)[0]] for row in test]
    out = {"qhat": "inf" if math.isinf(qhat) else qhat, "sets": sets}
    with open(dst, "w") as f:
        json.dump(out, f, allow_nan=False)


if __name__ == "__main__":
    main()
