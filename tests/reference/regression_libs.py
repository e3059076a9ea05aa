"""Split-conformal regression intervals (absolute, normalized, CQR, Mondrian) from MAPIE and
crepes, and regression metrics (RMSE, MAE, Gaussian NLL, CRPS, central-interval coverage and
width, quantile calibration error, Spearman, sparsification / AUSE) from scikit-learn, scipy and
properscoring, next to the definitions alkit implements, on the same predictions.

Input: a calibration split `cal` and a test split `test`, each with y (targets), mean and std
(> 0) of a Gaussian head, lower / upper (a quantile head's bounds) and group (small ints, the
Mondrian category). Everything is computed in float64 from the inputs cast to float32 (what
alkit reads), so a JSON decimal and its float32 mean the same.

Conformal forms (calibrate on `cal`, intervals for `test`). q = the k-th smallest calibration
score, k = ceil((n + 1)(1 - alpha)) (alpha as written, exact rational arithmetic), q = +inf when
k > n (then the interval is (-inf, +inf); written "inf" / "-inf" in JSON):

  absolute             s = |y - mean|;                  interval [mean - q, mean + q]
  normalized           s = |y - mean| / std;            interval [mean - q std, mean + q std]
  cqr                  s = max(lower - y, y - upper);   interval [lower - q, upper + q]
                       (Romano et al. 2019, one symmetric correction; q may be negative)
  mondrian_absolute    absolute with q_g from the calibration items of the item's group only
  mondrian_normalized  normalized likewise; a test item whose group has no calibration items
                       gets (-inf, +inf) (q_g = inf)

Each form's result: {"config": how it was computed, "threshold": q (Mondrian: {"<group>": q_g}
over every group of cal and test; CQR asymmetric: {"lower": q_lo, "upper": q_hi}), "lower": [m],
"upper": [m], "coverage": fraction of test y with lower <= y <= upper, "width": mean of
upper - lower ("inf" when an interval is infinite)}, or {"config", "error"} where the library
refuses. Extra keys where they apply: "threshold_lower" (MAPIE, when its lower side uses a
different q: q' in lower = mean - q' std), "group_errors" ({group: error} of MAPIE's per-group
loop), "unseen_groups" and "note" (crepes, test groups without calibration items; their
threshold is null), "warnings" (crepes). Per-item arrays (lower, upper) are written as the
shortest repr of their float32 value (alkit's intervals are f32); every scalar is full float64.

Metrics on `test` (z_i = (y_i - mean_i) / std_i; Phi, phi the standard normal cdf and pdf):

  rmse    sqrt(mean (y - mean)^2)            mae   mean |y - mean|
  nll     mean of 0.5 ln(2 pi std^2) + (y - mean)^2 / (2 std^2)
  crps    mean of std (z (2 Phi(z) - 1) + 2 phi(z) - 1/sqrt(pi))   (CRPS of N(mean, std^2) at y)
  z, coverage, width   per level p of `levels` (lists in that order): z_p = Phi^-1((1 + p)/2);
          coverage = fraction with mean - z std <= y <= mean + z std; width = mean of 2 z std
  quantile_calibration_error   Kuleshov et al. 2018 with unit weights: p_j = j/20, j = 1..19;
          phat_j = fraction of items with Phi(z_i) <= p_j; error = sum_j (p_j - phat_j)^2
          (quantile_calibration_observed = [phat_j])
  spearman  Spearman rank correlation of std and |y - mean| (average ranks on ties; null when
          either is constant)
  sparsification  K = 20; for k = 0..K-1 remove the floor(k n / K) items of largest std (stable
          sort by std descending: on ties the lower index goes first) and take the RMSE of the
          rest; the oracle orders by |y - mean| descending the same way; both curves divided by
          the RMSE of all items. {"removed": [floor(k n/K)], "fraction": [k/K], "model": [..],
          "oracle": [..], "ause": mean_k (model_k - oracle_k)}

Libraries (top-level keys; each holds "conformal": {form: ...} and / or "metrics": {name: ...}):
  definition     numpy and math only (math.erf / erfc for Phi, bisection for Phi^-1), every form
                 and metric above.
  mapie          MAPIE 1.6.0. The "estimators" are prefit lookups: X is one column holding a row
                 index into the given arrays (cal rows, then test rows, then one probe row with
                 mean = lower = upper = 0, std = 1), predict returns the given values, so MAPIE
                 computes scores and intervals from exactly these predictions. Thresholds are
                 read off the probe row's interval (upper of a zero prediction with unit std = q).
                 absolute    SplitConformalRegressor(prefit, conformity_score="absolute")
                 normalized  SplitConformalRegressor with StdConformityScore() ("std_normalized"):
                             the estimator answers predict(X, return_std=True) with (mean, std);
                             s = |y - mean| / max(1e-8, std)
                 normalized_residual  ResidualNormalisedScore(residual_estimator=a lookup
                             returning std, prefit=True): with prefit MAPIE uses the residual
                             estimator's output as r_pred directly (no exp), clipped at 1e-8
                 cqr         ConformalizedQuantileRegressor(prefit, [lower, upper, median=mean]
                             lookups), predict_interval(symmetric_correction=True)
                 cqr_asymmetric  the same with symmetric_correction=False (MAPIE's DEFAULT):
                             q_lo = the ceil((n+1)(1 - alpha/2))-th smallest of lower - y,
                             q_hi = the same of y - upper; interval [lower - q_lo, upper + q_hi]
                 mondrian_absolute / mondrian_normalized  MAPIE 1.x has no Mondrian class
                             (0.x's MondrianCP is gone), so one SplitConformalRegressor per
                             group, conformalized on that group's calibration rows
                             (allow_infinite_bounds=True); a group MAPIE refuses (including one
                             with no calibration rows) is listed in "group_errors" and its test
                             items get (-inf, inf) from this script, not from MAPIE.
  crepes         crepes 0.9.1 ConformalRegressor: fit(residuals = y - mean[, sigmas = std]
                 [, bins = group]), predict_int(mean[, sigmas][, bins], confidence = 1 - alpha)
                 for absolute, normalized, mondrian_absolute, mondrian_normalized. crepes has no
                 CQR (its scores are |residual| / sigma, never signed), so no cqr form.
                 Thresholds: predict_int on zero predictions with unit sigmas.
  sklearn        scikit-learn metrics: rmse (root_mean_squared_error), mae
                 (mean_absolute_error), and the sparsification curves with root_mean_squared_error
                 on the kept items (same ordering as the definition).
  properscoring  crps (mean of crps_gaussian(y, mean, std)).
  scipy          nll (-mean norm.logpdf), z / coverage / width (norm.ppf), quantile calibration
                 error (norm.cdf), spearman (stats.spearmanr).

Convention differences found (MAPIE 1.6.0 and crepes 0.9.1 sources; --example and --edge show
each one in the --compare summary):
  * Order statistic. The definition: the k-th smallest, k = ceil((n + 1)(1 - alpha)).
    MAPIE: np.nanquantile(scores, ceil((1 - alpha)(n + 1)) / n, method="lower") = the k-th
    smallest, the same k (its alpha comes from Decimal(str(confidence)), so 0.1 stays 0.1, and
    ceil(0.9 (n + 1)) in float equals the exact k for every n <= 5000 at alpha = 0.05, 0.1,
    0.2); no interpolation. crepes: index int((1 - confidence)(n + 1)) - 1 into the scores sorted
    descending, i.e. the floor(alpha (n + 1))-th largest = the same k in exact arithmetic, but
    1 - 0.9 = 0.09999999999999998 in float and int() truncates, so when alpha (n + 1) is an
    integer crepes takes one rank higher: n = 19, alpha = 0.1 gives the 19th smallest
    (definition: the 18th), n = 9 gives (-inf, inf) (definition: the 9th smallest, finite);
    the same at alpha = 0.2 (1 - 0.8 = 0.19999999999999996), not at 0.05.
  * MAPIE's normalized score with a given std (StdConformityScore, "std_normalized") is NOT
    symmetric: its own get_bounds takes the upper side at the k-th smallest score but the lower
    side as the ceil(alpha (n + 1))-th LARGEST score (reverse quantile), which is the
    (k - 1)-th smallest whenever alpha (n + 1) is not an integer. So its upper bounds equal the
    definition's and its lower bounds are mean - q' std with the next-smaller q' (the form's
    "threshold_lower"; example: q = 1.96935, q' = 1.96683). ResidualNormalisedScore with a
    prefit residual estimator returning std (normalized_residual) goes through the shared
    symmetric path and equals the definition exactly. Both clip std at 1e-8; without prefit
    ResidualNormalisedScore fits its own model on log residuals of a split of the calibration
    set and uses exp(prediction), so a given std only enters with prefit=True.
  * q = inf (k > n). The definition and crepes (with a warning) give (-inf, inf). MAPIE,
    with allow_infinite_bounds=True (used here): "absolute" and ResidualNormalisedScore raise
    ValueError ("... corrected quantile level exceeds 1.0 ..."; the symmetric path does not pass
    `unbounded`); StdConformityScore gives upper = +inf but a FINITE lower bound, mean - s_max std
    (its reverse lower-side quantile is the ceil(alpha (n + 1))-th largest score, which exists:
    --edge group 2, n = 5). Without allow_infinite_bounds MAPIE
    refuses any n < max(1/alpha, 1/(1 - alpha)) (n < 10 at alpha = 0.1, although k <= n at
    n = 9); ConformalizedQuantileRegressor always refuses n < 1/alpha (n < 10; n < 20 for the
    asymmetric default, which checks alpha/2) and ignores allow_infinite_bounds.
  * CQR. MAPIE's default (symmetric_correction=False) is the asymmetric correction: q_lo and
    q_hi each the ceil((n + 1)(1 - alpha/2))-th smallest of its own side's signed score
    (cqr_asymmetric; equals that form of the definition exactly). symmetric_correction=True
    equals the definition (one q from max(lower - y, y - upper)). MAPIE only logs "The
    predictions are ill-sorted." (INFO) when lower > upper or the median is outside; the numbers
    are the same. crepes has no CQR.
  * Mondrian, a test group with no calibration items (group 3 in the example and in --edge).
    crepes neither errors nor warns: its predict_int leaves those items at the array's initial
    zeros, the interval [0, 0] (threshold written null, "unseen_groups" lists the groups). The
    definition (and alkit) give (-inf, inf). A bin with too few items (index < 0) does get
    (-inf, inf) from crepes, with a warning. MAPIE has no Mondrian class in 1.x; the per-group
    loop's conformalize on 0 rows raises ValueError ("zero-size array to reduction operation
    maximum" for absolute, "All conformity scores are NaN" for StdConformityScore), recorded in
    group_errors, and the script gives those items (-inf, inf).
  * The example's calibration group sizes (250, 230, 20) avoid an integer alpha (n_g + 1), so
    crepes equals the definition there except on the empty group; MAPIE equals it except the
    lower side of its StdConformityScore forms (normalized, mondrian_normalized).

Input (.json), keys: alpha; levels (list of central-interval levels); cal and test, each
{"y", "mean", "std", "lower", "upper", "group"} (equal-length lists).
Output JSON: {"definition", "mapie", "crepes", "sklearn", "properscoring", "scipy"} as above (a
library that does not import is left out, with a note on stderr); the built-in cases (--example,
--edge) add an "input" key holding their input (float arrays as shortest float32 reprs), which is
what tests/fixtures/regression_libs.json, written by --example, holds for the suite.

Usage:
  python tests/reference/regression_libs.py IN.json [OUT.json] [--compare]
  python tests/reference/regression_libs.py --example OUT.json  # seeded 500 + 300 rows
  python tests/reference/regression_libs.py --edge [OUT.json]   # tiny groups: n = 19 / 9 / 5 / 0
--compare (implied by the built-in cases) prints to stderr, per library form and metric, the
largest difference from the definition (and the rows that differ).
Pinned versions (the ones this was written against): Python 3.11, numpy==2.4.6,
scikit-learn==1.9.1, scipy==1.17.1, MAPIE==1.6.0, crepes==0.9.1, properscoring==0.1.
"""

import argparse
import json
import math
import sys
import warnings
from decimal import Decimal
from fractions import Fraction

import numpy as np

warnings.filterwarnings("ignore", category=DeprecationWarning)
warnings.filterwarnings("ignore", category=FutureWarning)

FIELDS = ("y", "mean", "std", "lower", "upper")
K_SPARSE = 20
QCE_STEPS = 20


# --------------------------------------------------------------------------- input / output


class F32List(list):
    """A list of floats written as the shortest repr of their float32 values."""


def f32_text(v):
    v = float(v)
    if math.isnan(v):
        return "null"
    if math.isinf(v):
        return '"inf"' if v > 0 else '"-inf"'
    return str(np.float32(v))


def dumps(x):
    """JSON with inf as "inf" / "-inf", nan as null, F32List as float32 reprs."""
    if isinstance(x, F32List):
        return "[" + ",".join(f32_text(v) for v in x) + "]"
    if isinstance(x, dict):
        return "{" + ",".join(json.dumps(str(k)) + ":" + dumps(v) for k, v in x.items()) + "}"
    if isinstance(x, (list, tuple)):
        return "[" + ",".join(dumps(v) for v in x) + "]"
    if isinstance(x, (bool, np.bool_)):
        return "true" if x else "false"
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    if isinstance(x, (float, np.floating)):
        v = float(x)
        if math.isnan(v):
            return "null"
        if math.isinf(v):
            return '"inf"' if v > 0 else '"-inf"'
        return repr(v)
    if x is None:
        return "null"
    return json.dumps(x)


def load_case(path):
    with open(path) as f:
        return normalise(json.load(f))


def normalise(a):
    def split(d):
        n = len(d["y"])
        out = {}
        for k in FIELDS:
            v = np.asarray([math.inf if s == "inf" else -math.inf if s == "-inf" else s for s in d[k]], dtype=np.float32)
            if v.shape != (n,):
                raise ValueError(f"{k} has shape {v.shape}, y has {n} items")
            out[k] = v.astype(np.float64)
        out["group"] = np.asarray(d.get("group", [0] * n), dtype=np.int64).reshape(n)
        if np.any(out["std"] <= 0):
            raise ValueError("std must be > 0")
        return out

    return {
        "alpha": float(a["alpha"]),
        "levels": [float(p) for p in a.get("levels", [0.5, 0.8, 0.9, 0.95])],
        "cal": split(a["cal"]),
        "test": split(a["test"]),
    }


def q_rank(n, alpha):
    """ceil((n + 1)(1 - alpha)) on alpha as written (exact rational arithmetic)."""
    return math.ceil((n + 1) * (1 - Fraction(repr(alpha))))


def confidence_of(alpha):
    return float(Decimal(1) - Decimal(repr(alpha)))


def interval_result(config, threshold, lower, upper, y):
    lower = np.asarray(lower, dtype=np.float64)
    upper = np.asarray(upper, dtype=np.float64)
    inside = (lower <= y) & (y <= upper)
    with np.errstate(invalid="ignore"):
        width = float(np.mean(upper - lower))
    return {
        "config": config,
        "threshold": threshold,
        "lower": F32List(lower.tolist()),
        "upper": F32List(upper.tolist()),
        "coverage": float(np.mean(inside)),
        "width": width,
        "_lower64": lower,
        "_upper64": upper,
    }


def all_groups(case):
    return sorted(set(case["cal"]["group"].tolist()) | set(case["test"]["group"].tolist()))


# --------------------------------------------------------------------------- definitions: conformal


def kth_smallest(scores, alpha):
    n = len(scores)
    k = q_rank(n, alpha)
    if n == 0 or k > n:
        return math.inf
    return float(np.sort(scores)[max(k, 1) - 1])


def definition_conformal(case):
    cal, test, alpha = case["cal"], case["test"], case["alpha"]
    y = test["y"]
    out = {}
    s = np.abs(cal["y"] - cal["mean"])
    q = kth_smallest(s, alpha)
    out["absolute"] = interval_result("s = |y - mean|", q, test["mean"] - q, test["mean"] + q, y)
    s = np.abs(cal["y"] - cal["mean"]) / cal["std"]
    q = kth_smallest(s, alpha)
    out["normalized"] = interval_result(
        "s = |y - mean| / std", q, test["mean"] - q * test["std"], test["mean"] + q * test["std"], y
    )
    s = np.maximum(cal["lower"] - cal["y"], cal["y"] - cal["upper"])
    q = kth_smallest(s, alpha)
    out["cqr"] = interval_result(
        "s = max(lower - y, y - upper), one symmetric correction", q, test["lower"] - q, test["upper"] + q, y
    )
    for name, norm in (("mondrian_absolute", False), ("mondrian_normalized", True)):
        s = np.abs(cal["y"] - cal["mean"])
        if norm:
            s = s / cal["std"]
        qs = {g: kth_smallest(s[cal["group"] == g], alpha) for g in all_groups(case)}
        qt = np.array([qs[g] for g in test["group"]])
        half = qt * test["std"] if norm else qt
        out[name] = interval_result(
            ("s = |y - mean| / std" if norm else "s = |y - mean|") + ", q per group; no calibration items: inf",
            {str(g): v for g, v in qs.items()},
            test["mean"] - half,
            test["mean"] + half,
            y,
        )
    return out


# --------------------------------------------------------------------------- definitions: metrics


def phi_cdf(z):
    return np.array([0.5 * math.erfc(-v / math.sqrt(2.0)) for v in np.ravel(z)]).reshape(np.shape(z))


def phi_pdf(z):
    return np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)


def phi_inv(p):
    """Phi^-1(p) by bisection on math.erfc (to the last bit)."""
    lo, hi = -40.0, 40.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if 0.5 * math.erfc(-mid / math.sqrt(2.0)) < p:
            lo = mid
        else:
            hi = mid
    return hi


def average_ranks(x):
    order = np.argsort(x, kind="stable")
    xs = x[order]
    ranks = np.empty(len(x))
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and xs[j + 1] == xs[i]:
            j += 1
        ranks[order[i : j + 1]] = 0.5 * (i + j) + 1.0
        i = j + 1
    return ranks


def sparsification(err, std, rmse_of):
    """rmse_of(kept indices, ascending) -> RMSE of those items."""
    n = len(err)
    base = rmse_of(np.arange(n))
    by_model = np.argsort(-std, kind="stable")
    by_oracle = np.argsort(-np.abs(err), kind="stable")
    removed = [k * n // K_SPARSE for k in range(K_SPARSE)]
    model = [rmse_of(np.sort(by_model[r:])) / base for r in removed]
    oracle = [rmse_of(np.sort(by_oracle[r:])) / base for r in removed]
    return {
        "removed": removed,
        "fraction": [k / K_SPARSE for k in range(K_SPARSE)],
        "model": model,
        "oracle": oracle,
        "ause": float(np.mean(np.array(model) - np.array(oracle))),
    }


def definition_metrics(case, levels):
    t = case["test"]
    y, mu, sd = t["y"], t["mean"], t["std"]
    err = y - mu
    z = err / sd
    out = {
        "rmse": float(np.sqrt(np.mean(err * err))),
        "mae": float(np.mean(np.abs(err))),
        "nll": float(np.mean(0.5 * np.log(2.0 * math.pi * sd * sd) + err * err / (2.0 * sd * sd))),
        "crps": float(np.mean(sd * (z * (2.0 * phi_cdf(z) - 1.0) + 2.0 * phi_pdf(z) - 1.0 / math.sqrt(math.pi)))),
    }
    zs = [phi_inv((1.0 + p) / 2.0) for p in levels]
    out["z"] = zs
    out["coverage"] = [float(np.mean((mu - zp * sd <= y) & (y <= mu + zp * sd))) for zp in zs]
    out["width"] = [float(np.mean(2.0 * zp * sd)) for zp in zs]
    u = phi_cdf(z)
    ps = [j / QCE_STEPS for j in range(1, QCE_STEPS)]
    phat = [float(np.mean(u <= p)) for p in ps]
    out["quantile_calibration_error"] = float(sum((p - h) ** 2 for p, h in zip(ps, phat)))
    out["quantile_calibration_observed"] = phat
    a, b = average_ranks(sd), average_ranks(np.abs(err))
    a, b = a - a.mean(), b - b.mean()
    den = math.sqrt(float(np.sum(a * a)) * float(np.sum(b * b)))
    out["spearman"] = float(np.sum(a * b) / den) if den > 0 else math.nan
    out["sparsification"] = sparsification(err, sd, lambda idx: math.sqrt(float(np.mean(err[idx] ** 2))))
    return out


def run_definition(case):
    return {"conformal": definition_conformal(case), "metrics": definition_metrics(case, case["levels"])}


# --------------------------------------------------------------------------- MAPIE


def run_mapie(case):
    import logging

    logging.disable(logging.INFO)  # MAPIE logs "The predictions are ill-sorted." (CQR) at INFO
    try:
        return mapie_forms(case)
    finally:
        logging.disable(logging.NOTSET)


def mapie_forms(case):
    from sklearn.base import BaseEstimator, RegressorMixin
    from mapie.conformity_scores import ResidualNormalisedScore, StdConformityScore
    from mapie.regression import ConformalizedQuantileRegressor, SplitConformalRegressor

    cal, test, alpha = case["cal"], case["test"], case["alpha"]
    n, m = len(cal["y"]), len(test["y"])
    table = {k: np.concatenate([cal[k], test[k], [1.0 if k == "std" else 0.0]]) for k in FIELDS}
    probe = n + m

    class Lookup(RegressorMixin, BaseEstimator):
        """A prefit regressor: X[:, 0] is a row index into the given arrays."""

        def __init__(self, field="mean", with_std=False):
            self.field = field
            self.with_std = with_std
            self.n_features_in_ = 1

        def fit(self, X, y=None):
            return self

        def predict(self, X, return_std=False):
            idx = np.asarray(X, dtype=np.float64)[:, 0].astype(np.int64)
            v = table[self.field][idx]
            if return_std:
                return v, table["std"][idx]
            return v

    def rows(idx):
        return np.asarray(idx, dtype=np.float64).reshape(-1, 1)

    conf = confidence_of(alpha)
    X_cal = rows(np.arange(n))

    def split_regressor(score, cal_idx, test_idx):
        scr = SplitConformalRegressor(estimator=Lookup(), confidence_level=conf, conformity_score=score, prefit=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            scr.conformalize(rows(cal_idx), cal["y"][cal_idx])
            _, iv = scr.predict_interval(rows(np.append(n + test_idx, probe)), allow_infinite_bounds=True)
        return iv[:-1, 0, 0], iv[:-1, 1, 0], float(iv[-1, 1, 0]), -float(iv[-1, 0, 0])

    def one(config, fn):
        try:
            return fn(config)
        except Exception as e:
            return {"config": config, "error": f"{type(e).__name__}: {e}"}

    all_cal, all_test = np.arange(n), np.arange(m)
    out = {}

    def plain(score):
        def fn(config):
            lo, up, q, q_lo = split_regressor(score, all_cal, all_test)
            r = interval_result(config, q, lo, up, test["y"])
            if q_lo != q:
                r["threshold_lower"] = q_lo
            return r

        return fn

    out["absolute"] = one("SplitConformalRegressor(prefit, conformity_score='absolute')", plain("absolute"))
    out["normalized"] = one(
        "SplitConformalRegressor(prefit, conformity_score=StdConformityScore()), predict(X, return_std=True) -> (mean, std)",
        plain(StdConformityScore()),
    )

    def residual_score():
        return ResidualNormalisedScore(residual_estimator=Lookup(field="std"), prefit=True)

    out["normalized_residual"] = one(
        "SplitConformalRegressor(prefit, ResidualNormalisedScore(residual_estimator=<returns std>, prefit=True))",
        plain(residual_score()),
    )

    def cqr(symmetric):
        def fn(config):
            ests = [Lookup(field="lower"), Lookup(field="upper"), Lookup(field="mean")]
            cq = ConformalizedQuantileRegressor(estimator=ests, confidence_level=conf, prefit=True)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                cq.conformalize(X_cal, cal["y"])
                _, iv = cq.predict_interval(rows(np.append(n + all_test, probe)), symmetric_correction=symmetric)
            q_lo, q_hi = -float(iv[-1, 0, 0]), float(iv[-1, 1, 0])
            thr = q_hi if symmetric else {"lower": q_lo, "upper": q_hi}
            return interval_result(config, thr, iv[:-1, 0, 0], iv[:-1, 1, 0], test["y"])

        return fn

    out["cqr"] = one(
        "ConformalizedQuantileRegressor(prefit, [lower, upper, mean]), predict_interval(symmetric_correction=True)", cqr(True)
    )
    out["cqr_asymmetric"] = one(
        "ConformalizedQuantileRegressor(prefit, [lower, upper, mean]), predict_interval() (symmetric_correction=False, "
        "MAPIE's default: q_lo, q_hi each at alpha/2)",
        cqr(False),
    )

    for name, make in (("mondrian_absolute", lambda: "absolute"), ("mondrian_normalized", StdConformityScore)):
        def fn(config, make=make):
            lo, up = np.full(m, -math.inf), np.full(m, math.inf)
            thr, thr_lower, errors = {}, {}, {}
            for g in all_groups(case):
                ci = np.nonzero(cal["group"] == g)[0]
                ti = np.nonzero(test["group"] == g)[0]
                try:
                    glo, gup, q, q_lo = split_regressor(make(), ci, ti)
                    lo[ti], up[ti], thr[str(g)] = glo, gup, q
                    if q_lo != q:
                        thr_lower[str(g)] = q_lo
                except Exception as e:
                    errors[str(g)] = f"{type(e).__name__}: {e}"
                    thr[str(g)] = math.inf
            r = interval_result(config, thr, lo, up, test["y"])
            if thr_lower:
                r["threshold_lower"] = thr_lower
            if errors:
                r["group_errors"] = errors
            return r

        score_name = "'absolute'" if name == "mondrian_absolute" else "StdConformityScore()"
        out[name] = one(
            f"one SplitConformalRegressor(prefit, {score_name}) per group on that group's calibration rows, "
            "allow_infinite_bounds=True; groups MAPIE refuses (group_errors) get (-inf, inf) from this script",
            fn,
        )
    return {"conformal": out}


# --------------------------------------------------------------------------- crepes


def run_crepes(case):
    from crepes import ConformalRegressor

    cal, test, alpha = case["cal"], case["test"], case["alpha"]
    conf = confidence_of(alpha)
    res = cal["y"] - cal["mean"]
    out = {}
    for name, norm, mond in (
        ("absolute", False, False),
        ("normalized", True, False),
        ("mondrian_absolute", False, True),
        ("mondrian_normalized", True, True),
    ):
        config = "ConformalRegressor().fit(residuals=y - mean" + (", sigmas=std" if norm else "") + (
            ", bins=group" if mond else ""
        ) + f"), predict_int(mean{', sigmas=std' if norm else ''}{', bins=group' if mond else ''}, confidence={conf})"
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                cr = ConformalRegressor().fit(
                    res, sigmas=cal["std"] if norm else None, bins=cal["group"] if mond else None
                )
                iv = cr.predict_int(
                    test["mean"],
                    sigmas=test["std"] if norm else None,
                    bins=test["group"] if mond else None,
                    confidence=conf,
                )
                if mond:
                    groups = np.array(all_groups(case))
                    pr = cr.predict_int(np.zeros(len(groups)), sigmas=np.ones(len(groups)) if norm else None,
                                        bins=groups, confidence=conf)
                    seen = set(cal["group"].tolist())
                    thr = {str(g): (float(pr[i, 1]) if g in seen else None) for i, g in enumerate(groups)}
                else:
                    pr = cr.predict_int(np.zeros(1), sigmas=np.ones(1) if norm else None, confidence=conf)
                    thr = float(pr[0, 1])
            r = interval_result(config, thr, iv[:, 0], iv[:, 1], test["y"])
            if mond:
                unseen = sorted(set(test["group"].tolist()) - set(cal["group"].tolist()))
                if unseen:
                    r["unseen_groups"] = unseen
                    r["note"] = "test items of groups with no calibration items get crepes' initial [0, 0] (threshold null)"
            if caught:
                r["warnings"] = sorted({str(w.message) for w in caught})
            out[name] = r
        except Exception as e:
            out[name] = {"config": config, "error": f"{type(e).__name__}: {e}"}
    return {"conformal": out}


# --------------------------------------------------------------------------- metric libraries


def run_sklearn(case):
    from sklearn.metrics import mean_absolute_error, root_mean_squared_error

    t = case["test"]
    y, mu, sd = t["y"], t["mean"], t["std"]
    return {"metrics": {
        "rmse": float(root_mean_squared_error(y, mu)),
        "mae": float(mean_absolute_error(y, mu)),
        "sparsification": sparsification(y - mu, sd, lambda idx: float(root_mean_squared_error(y[idx], mu[idx]))),
    }}


def run_properscoring(case):
    import properscoring

    t = case["test"]
    return {"metrics": {"crps": float(np.mean(properscoring.crps_gaussian(t["y"], t["mean"], t["std"])))}}


def run_scipy(case):
    from scipy import stats

    t = case["test"]
    y, mu, sd = t["y"], t["mean"], t["std"]
    zs = [float(stats.norm.ppf((1.0 + p) / 2.0)) for p in case["levels"]]
    u = stats.norm.cdf(y, loc=mu, scale=sd)
    ps = [j / QCE_STEPS for j in range(1, QCE_STEPS)]
    phat = [float(np.mean(u <= p)) for p in ps]
    rho = stats.spearmanr(sd, np.abs(y - mu)).statistic
    return {"metrics": {
        "nll": float(-np.mean(stats.norm.logpdf(y, loc=mu, scale=sd))),
        "z": zs,
        "coverage": [float(np.mean((mu - z * sd <= y) & (y <= mu + z * sd))) for z in zs],
        "width": [float(np.mean(2.0 * z * sd)) for z in zs],
        "quantile_calibration_error": float(sum((p - h) ** 2 for p, h in zip(ps, phat))),
        "quantile_calibration_observed": phat,
        "spearman": float(rho),
    }}


# --------------------------------------------------------------------------- comparison


def compare(case, results):
    lines = []
    d = results["definition"]
    y = case["test"]["y"]
    dc = d["conformal"]
    for lib in ("mapie", "crepes"):
        for form, r in results.get(lib, {}).get("conformal", {}).items():
            base = {"cqr_asymmetric": "cqr", "normalized_residual": "normalized"}.get(form, form)
            if "error" in r:
                lines.append(f"{lib:7s} {form:20s} error: {r['error'][:90]}")
                continue
            want = dc[base]
            if form == "cqr_asymmetric":
                want = asymmetric_cqr(case)
            a = np.stack([r["_lower64"], r["_upper64"]])
            b = np.stack([want["_lower64"], want["_upper64"]])
            same_inf = (np.isinf(a) == np.isinf(b)) & ((a == b) | ~np.isinf(a))
            with np.errstate(invalid="ignore"):
                diff = np.where(np.isinf(a) | np.isinf(b), 0.0, np.abs(a - b))
            bad = sorted(set(np.nonzero(~same_inf | (diff > 1e-9))[1].tolist()))
            extra = ""
            if bad:
                extra = " e.g. " + ", ".join(
                    f"row {i} (group {case['test']['group'][i]}): [{r['_lower64'][i]:.6g}, {r['_upper64'][i]:.6g}] vs "
                    f"[{want['_lower64'][i]:.6g}, {want['_upper64'][i]:.6g}]" for i in bad[:2])
            ref = "definition " + base + (" (asymmetric alpha/2 form)" if form == "cqr_asymmetric" else "")
            lines.append(
                f"{lib:7s} {form:20s} vs {ref}: max |d bound| {float(np.max(diff, initial=0.0)):.2e}, threshold "
                f"{fmt_thr(r['threshold'])} vs {fmt_thr(want['threshold'])}"
                + (f" (lower side {fmt_thr(r['threshold_lower'])})" if "threshold_lower" in r else "")
                + f", {len(bad)}/{len(y)} rows differ{extra}"
            )
    dm = d["metrics"]
    for lib in ("sklearn", "properscoring", "scipy"):
        for name, v in results.get(lib, {}).get("metrics", {}).items():
            w = dm[name]
            if name == "sparsification":
                dv = max(np.max(np.abs(np.array(v["model"]) - w["model"])),
                         np.max(np.abs(np.array(v["oracle"]) - w["oracle"])), abs(v["ause"] - w["ause"]))
            else:
                dv = float(np.max(np.abs(np.atleast_1d(np.array(v, dtype=float)) - np.atleast_1d(np.array(w, dtype=float)))))
            lines.append(f"{lib:13s} {name:30s} max |diff| from definition {dv:.2e}")
    return lines


def fmt_thr(t):
    if isinstance(t, dict):
        return "{" + ", ".join(f"{k}: {fmt_thr(v)}" for k, v in t.items()) + "}"
    if t is None:
        return "null"
    return f"{t:.9g}"


def asymmetric_cqr(case):
    """MAPIE's default CQR in the definition's terms: q_lo, q_hi each at alpha/2."""
    cal, test = case["cal"], case["test"]
    half = float(Fraction(repr(case["alpha"])) / 2)
    q_lo = kth_smallest(cal["lower"] - cal["y"], half)
    q_hi = kth_smallest(cal["y"] - cal["upper"], half)
    return interval_result("", {"lower": q_lo, "upper": q_hi}, test["lower"] - q_lo, test["upper"] + q_hi, test["y"])


def run_all(case):
    results = {"definition": run_definition(case)}
    for lib, fn in (("mapie", run_mapie), ("crepes", run_crepes), ("sklearn", run_sklearn),
                    ("properscoring", run_properscoring), ("scipy", run_scipy)):
        try:
            results[lib] = fn(case)
        except ImportError as e:
            print(f"note: {lib} skipped ({e})", file=sys.stderr)
    return results


def strip_private(x):
    if isinstance(x, dict):
        return {k: strip_private(v) for k, v in x.items() if not k.startswith("_")}
    return x


# --------------------------------------------------------------------------- built-in cases


def f32(a):
    return F32List(np.asarray(a, dtype=np.float32).tolist())


def example_case(seed=20250214, n=500, m=300):
    """mean ~ N(0, 2^2), std = exp(N(0, 0.5^2)), y = mean + 1.2 std N(0, 1) (overdispersed),
    lower / upper = mean -/+ std (1.5 + 0.25 N(0, 1)); cal groups: exactly 20 items in group 2,
    the rest 0 / 1 at random; test groups 0 / 1 / 2 with probabilities .47 / .47 / .06, plus 5
    items of group 3, which has no calibration items (the empty-group rule)."""
    rng = np.random.default_rng(seed)

    def rows(k, groups):
        mean = rng.normal(0.0, 2.0, k)
        std = np.exp(rng.normal(0.0, 0.5, k))
        y = mean + 1.2 * std * rng.normal(0.0, 1.0, k)
        lower = mean - std * (1.5 + 0.25 * rng.normal(0.0, 1.0, k))
        upper = mean + std * (1.5 + 0.25 * rng.normal(0.0, 1.0, k))
        d = {"y": y, "mean": mean, "std": std, "lower": lower, "upper": upper}
        d = {key: np.asarray(v, dtype=np.float32) for key, v in d.items()}
        assert np.all(d["lower"] <= d["upper"]) and np.all(d["std"] > 0)
        out = {key: F32List(v.tolist()) for key, v in d.items()}
        out["group"] = [int(g) for g in groups]
        return out

    cal_groups = np.concatenate([np.full(20, 2), rng.integers(0, 2, n - 20)])
    cal_groups = rng.permutation(cal_groups)
    test_groups = rng.choice(3, size=m - 5, p=[0.47, 0.47, 0.06])
    test_groups = rng.permutation(np.concatenate([test_groups, np.full(5, 3)]))
    case = {"alpha": 0.1, "levels": [0.5, 0.8, 0.9, 0.95], "cal": rows(n, cal_groups), "test": rows(m, test_groups)}
    sizes = np.bincount(cal_groups)
    assert all((int(s) + 1) % 10 != 0 for s in sizes), f"group sizes {sizes}: alpha (n_g + 1) is an integer"
    return case


def edge_case():
    """Tiny cases where the conventions part, alpha = 0.1: cal group 0 has 19 items and group 1
    has 9 (alpha (n + 1) an integer), group 2 has 5 (k = 6 > n: q = inf), group 3 none; test: 2
    items of each group. The unsplit calibration set has 33 items."""
    rng = np.random.default_rng(7)
    n, m = 33, 8

    def rows(k, groups):
        mean = rng.normal(0.0, 1.0, k)
        std = np.exp(rng.normal(0.0, 0.3, k))
        y = mean + std * rng.normal(0.0, 1.0, k)
        d = {"y": y, "mean": mean, "std": std, "lower": mean - std, "upper": mean + std}
        out = {key: f32(v) for key, v in d.items()}
        out["group"] = [int(g) for g in groups]
        return out

    return {"alpha": 0.1, "levels": [0.9], "cal": rows(n, [0] * 19 + [1] * 9 + [2] * 5),
            "test": rows(m, [0, 0, 1, 1, 2, 2, 3, 3])}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("input", nargs="?")
    ap.add_argument("output", nargs="?")
    ap.add_argument("--example", metavar="OUT")
    ap.add_argument("--edge", nargs="?", const="-", metavar="OUT")
    ap.add_argument("--compare", action="store_true")
    a = ap.parse_args()
    if a.example:
        raw, dst, a.compare = example_case(), a.example, True
    elif a.edge:
        raw, dst, a.compare = edge_case(), (None if a.edge == "-" else a.edge), True
    elif a.input:
        raw, dst = None, a.output
    else:
        ap.error("give IN, --example OUT or --edge")
    case = normalise(raw) if raw is not None else load_case(a.input)
    results = run_all(case)
    if a.compare:
        for line in compare(case, results):
            print(line, file=sys.stderr)
    results = strip_private(results)
    if raw is not None:
        results["input"] = raw
    text = dumps(results)
    json.loads(text)  # valid JSON
    if dst:
        with open(dst, "w") as f:
            f.write(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
