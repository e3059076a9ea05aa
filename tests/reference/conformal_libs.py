"""Split-conformal APS / RAPS / LAC thresholds and sets from MAPIE and TorchCP, next to the
definitions alkit implements, on the same probabilities and the same uniform draws.

What is compared (alkit's forms; `above(c)` = the probability mass of the classes ranked
strictly above c, ranks by probability descending, lower class index first on ties; `rank`
1-based; `pen(c) = lambda * max(0, rank(c) - k_reg)`; q = the ceil((n+1)(1-alpha))-th smallest
calibration score, +inf when that rank exceeds n):

  lac              s = 1 - p_y;                         set {c : 1 - p_c <= q}
  aps              s = above(y)            (Romano's non-randomised rule, u = 0);
                   set {c : above(c) <= q}, never empty
  aps_randomized   s = above(y) + u_i p_y (u_i one draw per calibration item);
                   set {c : above(c) + u_j p_c <= q} (u_j one draw per test item, all classes)
  aps_inclusive    the old form, u = 1: s = mass at and above y (TorchCP randomized=False)
  raps, raps_randomized, raps_inclusive
                   the same plus pen(.); `raps` always keeps the top-ranked class

Libraries ("library" keys of the output):
  definition  numpy, straight from the definitions above (float64 from the f32 inputs).
  mapie       MAPIE's SplitConformalClassifier (prefit, an identity "classifier" whose
              predict_proba returns the given probabilities) with APSConformityScore,
              RAPSConformityScore (a subclass that takes lambda and k_reg as given instead of
              tuning k_star / lambda_star on a held-out split) and LACConformityScore. MAPIE
              always randomises the calibration score (s = cumsum_incl(y) - u p_y, u from
              `random_state.uniform`), so every form injects its draws through a RandomState
              subclass (`FixedUniform`) passed as `random_state`: u_mapie = 1 - u_alkit.
  torchcp     TorchCP's SplitPredictor with APS / RAPS / LAC (score_type="identity"). Its
              scores are cumsum_incl - U p (+ pen), U = torch.rand(n) at calibration and
              torch.rand(m, C) (one draw per class, in rank order) at prediction; fixed draws are
              injected by replacing torch.rand for the call (U = 1 - u_alkit, the test draw
              broadcast over the classes).
Extra forms per library (their own conventions) are named *_ill_true / *_ill_false (MAPIE's
include_last_label), *_native_seeded (the library's own generator seeded with `seed`: MAPIE
`random_state=seed` draws RandomState(seed).uniform(size=n) at calibration and a fresh
RandomState(seed).uniform(size=(m, 1)) at prediction; TorchCP torch.manual_seed(seed) then
torch.rand(n) and torch.rand(m, C)). Every form's dict says its `config`. With --compare, a
summary (rows whose set differs from the definition each form should equal; native draws
reproduced) goes to stderr.

Known differences (MAPIE 1.6.0 sources): include_last_label=True keeps class c iff
above(c) < q - 1e-8 (alkit: <= q); every class tied in p with the last kept class comes in, ties
rank the higher class index first; p = 0 classes never come in; include_last_label=False forces the
top class; RAPS with True charges the previous rank's penalty, and "randomized" divides by
p_L - lambda (L - k_reg - 1) once the last rank L >= k_reg + 2 (raps.py _compute_v_parameter);
APS/RAPS are refused when the calibration labels take <= 2 values (here rerun with check_target
skipped, marked in `config`); no q = inf (ValueError when n < 1/alpha). TorchCP: the RAPS penalty
is float32; its native test draw is one per (item, class).

Input (.json or .npz), keys:
  cal_probs (n, C) or flat with n_cal and c; cal_labels (n,); test_probs (m, C) or flat `probs`
  with n; alpha; lambda (default 0.01); k_reg (default 5); optional u_cal (n,), u_test (m,)
  (alkit's convention, s = above + u p); seed (default 0: draws u_cal, u_test from
  numpy.random.default_rng(seed).random(n), .random(m) when not given, and seeds the native
  forms).
Output JSON: {library: {form: {"config", "threshold" (float or "inf"), "sets": [[class ids]]}}}
(or {"error"} where the library refuses the input, e.g. MAPIE when n < 1/alpha); the built-in
cases (--example, --issue) add an "input" key with their parameters and arrays (what
tests/fixtures/conformal_libs.json, written by --example, holds for the suite).

Usage:
  python tests/reference/conformal_libs.py IN.{json,npz} [OUT.json] [--compare]
  python tests/reference/conformal_libs.py --example OUT.json   # seeded 500 + 200 rows, C = 10
  python tests/reference/conformal_libs.py --issue [OUT.json]   # the issue's 10 + 2 rows, C = 3
Pinned versions (the ones this was written against): Python 3.11, numpy==2.4.6,
scikit-learn==1.9.1, MAPIE==1.6.0, torch==2.15.0, torchcp==1.2.1. Either library is skipped
(with a note on stderr) when it does not import.
"""

import argparse
import contextlib
import json
import math
import sys
import warnings
from decimal import Decimal
from fractions import Fraction

import numpy as np

warnings.filterwarnings("ignore", category=DeprecationWarning)
warnings.filterwarnings("ignore", category=FutureWarning)


# --------------------------------------------------------------------------- input


def load_case(path):
    if path.endswith(".npz"):
        z = np.load(path)
        a = {k: z[k] for k in z.files}
        a = {k: (v.item() if v.ndim == 0 else v) for k, v in a.items()}
    else:
        with open(path) as f:
            a = json.load(f)
    return normalise(a)


def normalise(a):
    cal = np.asarray(a["cal_probs"], dtype=np.float32)
    test = np.asarray(a.get("test_probs", a.get("probs")), dtype=np.float32)
    if cal.ndim == 1:
        cal = cal.reshape(int(a["n_cal"]), int(a["c"]))
    if test.ndim == 1:
        test = test.reshape(-1, cal.shape[1])
    n, m = len(cal), len(test)
    seed = int(a.get("seed", 0))
    rng = np.random.default_rng(seed)
    drawn = []
    u_cal = a.get("u_cal")
    if u_cal is None:
        u_cal = rng.random(n)
        drawn.append("u_cal")
    u_test = a.get("u_test")
    if u_test is None:
        u_test = rng.random(m)
        drawn.append("u_test")
    if drawn:
        print(f"note: {', '.join(drawn)} drawn from numpy default_rng({seed})", file=sys.stderr)
    return {
        "cal": cal.astype(np.float64),
        "labels": np.asarray(a["cal_labels"], dtype=np.int64).reshape(n),
        "test": test.astype(np.float64),
        "alpha": float(a["alpha"]),
        "lambda": float(a.get("lambda", 0.01)),
        "k_reg": int(a.get("k_reg", 5)),
        "u_cal": np.asarray(u_cal, dtype=np.float64).reshape(n),
        "u_test": np.asarray(u_test, dtype=np.float64).reshape(m),
        "seed": seed,
    }


def q_rank(n, alpha):
    """ceil((n + 1)(1 - alpha)) on alpha as written (exact rational arithmetic)."""
    return math.ceil((n + 1) * (1 - Fraction(repr(alpha))))


def as_json_threshold(q):
    q = float(q)
    return "inf" if math.isinf(q) else q


def mask_to_sets(mask):
    return [[int(c) for c in np.nonzero(row)[0]] for row in np.asarray(mask, dtype=bool)]


# --------------------------------------------------------------------------- definitions


def above_and_rank(P):
    """above[i, c]: mass of the classes ranked strictly above c; rank[i, c] 1-based
    (probability descending, lower class index first on ties)."""
    order = np.argsort(-P, axis=1, kind="stable")
    sorted_p = np.take_along_axis(P, order, axis=1)
    excl = np.zeros_like(sorted_p)  # sequential float64 sums, as a loop over ranks adds them
    acc = np.zeros(len(P))
    for j in range(P.shape[1]):
        excl[:, j] = acc
        acc = acc + sorted_p[:, j]
    above = np.empty_like(P)
    rank = np.empty(P.shape, dtype=np.int64)
    rows = np.arange(len(P))[:, None]
    above[rows, order] = excl
    rank[rows, order] = np.arange(1, P.shape[1] + 1)[None, :]
    return above, rank


def definition_scores(P, u, lam, k_reg, raps):
    """above(c) + u p_c (+ pen); u scalar, (rows,) or (rows, C) in class order."""
    above, rank = above_and_rank(P)
    u = np.asarray(u, dtype=np.float64)
    if u.ndim == 1:
        u = u[:, None]
    s = above + u * P
    if raps:
        s = s + lam * np.maximum(0, rank - k_reg)
    return s, rank


def definition_form(case, score, u_cal, u_test, force_top, config):
    cal, labels, test = case["cal"], case["labels"], case["test"]
    lam, k_reg, alpha = case["lambda"], case["k_reg"], case["alpha"]
    n = len(cal)
    if score == "lac":
        cal_s = 1.0 - cal[np.arange(n), labels]
        test_s, rank = 1.0 - test, None
    else:
        raps = score == "raps"
        s, _ = definition_scores(cal, u_cal, lam, k_reg, raps)
        cal_s = s[np.arange(n), labels]
        test_s, rank = definition_scores(test, u_test, lam, k_reg, raps)
    k = q_rank(n, alpha)
    q = math.inf if k > n else float(np.sort(cal_s)[max(k, 1) - 1])
    mask = test_s <= q
    if force_top:
        mask |= rank == 1
    return {"config": config, "threshold": as_json_threshold(q), "sets": mask_to_sets(mask)}


def run_definition(case):
    n, m = len(case["cal"]), len(case["test"])
    zc, zt, oc, ot = np.zeros(n), np.zeros(m), np.ones(n), np.ones(m)
    out = {"lac": definition_form(case, "lac", None, None, False, "s = 1 - p_y")}
    for score in ("aps", "raps"):
        out[score] = definition_form(
            case, score, zc, zt, True, "non-randomised (Romano): s = above(y)" + (" + pen" if score == "raps" else "") + "; top class always kept"
        )
        out[score + "_randomized"] = definition_form(
            case, score, case["u_cal"], case["u_test"], False, "s = above + u p (+ pen), u_cal / u_test as given"
        )
        out[score + "_inclusive"] = definition_form(
            case, score, oc, ot, False, "old inclusive form, u = 1 (may give empty sets)"
        )
    return out


# --------------------------------------------------------------------------- MAPIE


def run_mapie(case):
    from sklearn.base import BaseEstimator, ClassifierMixin
    from mapie.classification import SplitConformalClassifier
    from mapie.conformity_scores import (
        APSConformityScore,
        LACConformityScore,
        RAPSConformityScore,
    )
    from mapie.utils import _compute_classification_quantile

    C = case["cal"].shape[1]

    class Identity(ClassifierMixin, BaseEstimator):
        """A prefit 'classifier' whose inputs are already the probabilities."""

        def __init__(self, n_classes=C):
            self.n_classes = n_classes
            self.classes_ = np.arange(n_classes)
            self.n_features_in_ = n_classes

        def fit(self, X, y=None):
            return self

        def predict_proba(self, X):
            return np.asarray(X, dtype=np.float64)

        def predict(self, X):
            return np.argmax(np.asarray(X), axis=1)

    class FixedUniform(np.random.RandomState):
        """A RandomState whose uniform() hands out the given arrays in turn (MAPIE calls
        check_random_state, which returns a RandomState instance unchanged)."""

        def __init__(self, *draws):
            super().__init__(0)
            self._draws = [np.asarray(d, dtype=np.float64) for d in draws]

        def uniform(self, low=0.0, high=1.0, size=None):
            if not self._draws:
                raise RuntimeError("MAPIE drew more uniforms than expected")
            d = self._draws.pop(0)
            if int(np.prod(size)) != d.size:
                raise RuntimeError(f"MAPIE asked for {size} uniforms, the next given has {d.size}")
            return d.reshape(size)

    lam, k_reg = case["lambda"], case["k_reg"]

    class FixedRAPS(RAPSConformityScore):
        """RAPS with lambda and k_reg as given: no held-out split, no k_star / lambda_star
        search (raps.py split_data / get_conformity_scores / get_conformity_score_quantiles)."""

        def split_data(self, X, y, y_enc, sample_weight=None, groups=None):
            self.n_samples_ = len(X)
            return X, y, y_enc, sample_weight, groups

        def get_conformity_scores(self, y, y_pred, y_enc=None, **kwargs):
            kwargs.pop("predict_params", None)
            return APSConformityScore.get_conformity_scores(self, y, y_pred, y_enc=y_enc, **kwargs)

        def get_conformity_score_quantiles(self, conformity_scores, alpha_np, cv, agg_scores="mean", include_last_label=True, **kwargs):
            self.k_star = np.full(len(alpha_np), k_reg)
            self.lambda_star = lam
            reg = self._regularize_conformity_score(self.k_star, self.lambda_star, conformity_scores, self.cutoff)
            return _compute_classification_quantile(reg, alpha_np)

    confidence = float(Decimal(1) - Decimal(repr(case["alpha"])))
    n, m = len(case["cal"]), len(case["test"])

    def attempt(score, ill, random_state):
        scc = SplitConformalClassifier(
            estimator=Identity(),
            confidence_level=confidence,
            conformity_score=score,
            prefit=True,
            random_state=random_state,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "fewer labels than classes"
            scc.conformalize(case["cal"], case["labels"])
            _, sets = scc.predict_set(case["test"], conformity_score_params={"include_last_label": ill})
        q = scc._mapie_classifier.conformity_score_function_.quantiles_[0]
        return {"threshold": as_json_threshold(q), "sets": mask_to_sets(sets[:, :, 0])}

    def one(make, ill, draws, config):
        """draws: a callable giving a fresh random_state (FixedUniform queues are used up)."""
        try:
            return {"config": config, **attempt(make(), ill, draws())}
        except ValueError as e:
            if "binary target" not in str(e):
                return {"config": config, "error": f"{type(e).__name__}: {e}"}
            # MAPIE refuses APS / RAPS when the calibration labels take at most two values
            # (classification.py:924 check_target -> type_of_target == "binary"); the issue's
            # example (all labels 0) is such a case. Compute anyway with the check skipped.
            import mapie.classification as mc

            saved = mc.check_target
            mc.check_target = lambda *args, **kw: None
            try:
                r = attempt(make(), ill, draws())
            except Exception as e2:
                return {"config": config, "error": f"{type(e2).__name__}: {e2}"}
            finally:
                mc.check_target = saved
            return {"config": config + " [check_target bypassed]", "refused": f"{e}", **r}
        except Exception as e:  # MAPIE refuses small n (n < 1/alpha) etc.
            return {"config": config, "error": f"{type(e).__name__}: {e}"}

    one_c, one_t = np.ones(n), np.ones((m, 1))
    ur_c, ur_t = 1.0 - case["u_cal"], (1.0 - case["u_test"]).reshape(m, 1)
    seed = case["seed"]
    fixed = lambda *d: (lambda: FixedUniform(*d))  # noqa: E731
    out = {"lac": one(LACConformityScore, True, lambda: None, "LACConformityScore")}
    for name, make in (("aps", APSConformityScore), ("raps", FixedRAPS)):
        label = "APSConformityScore" if name == "aps" else "RAPSConformityScore(lambda_star, k_star fixed)"
        out[name] = one(make, "randomized", fixed(one_c, one_t),
                        f"{label}, calibration u=1 (s = above(y)), include_last_label='randomized' with test u=1")
        out[name + "_ill_true"] = one(make, True, fixed(one_c),
                                      f"{label}, calibration u=1, include_last_label=True")
        out[name + "_randomized"] = one(make, "randomized", fixed(ur_c, ur_t),
                                        f"{label}, include_last_label='randomized', u_mapie = 1 - u_cal, 1 - u_test")
        out[name + "_inclusive"] = one(make, False, fixed(np.zeros(n)),
                                       f"{label}, calibration u=0 (s = mass at and above y), include_last_label=False (top class forced)")
        out[name + "_native_seeded"] = one(make, "randomized", lambda: seed,
                                           f"{label}, random_state={seed}, include_last_label='randomized'")
        out[name + "_native_ill_true"] = one(make, True, lambda: seed,
                                             f"{label}, random_state={seed}, include_last_label=True (MAPIE's default use)")
    return out


# --------------------------------------------------------------------------- TorchCP


@contextlib.contextmanager
def fixed_torch_rand(*makers):
    """Replace torch.rand while TorchCP scores: the k-th call gets makers[k](shape)."""
    import torch

    original = torch.rand
    queue = list(makers)

    def fake(*size, **kw):
        shape = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)) else tuple(int(s) for s in size)
        if not queue:
            raise RuntimeError("TorchCP drew more uniforms than expected")
        arr = np.asarray(queue.pop(0)(shape), dtype=np.float64)
        if arr.shape != shape:
            raise RuntimeError(f"TorchCP asked for {shape}, the given draw is {arr.shape}")
        return torch.from_numpy(arr.copy()).to(kw.get("device") or "cpu")

    torch.rand = fake
    try:
        yield
    finally:
        torch.rand = original


def torchcp_native_draws(seed, n, m, C):
    """What TorchCP draws after torch.manual_seed(seed): U_cal (n,), U_test (m, C) in rank order."""
    import torch

    torch.manual_seed(seed)
    return torch.rand(n).double().numpy(), torch.rand((m, C)).double().numpy()


def run_torchcp(case):
    import torch
    from torchcp.classification.predictor import SplitPredictor
    from torchcp.classification.score import APS, LAC, RAPS

    cal = torch.from_numpy(case["cal"])
    labels = torch.from_numpy(case["labels"])
    test = torch.from_numpy(case["test"])
    n, m = len(cal), len(test)
    lam, k_reg, alpha, seed = case["lambda"], case["k_reg"], case["alpha"], case["seed"]

    def one(score_fn, config, makers=None, manual_seed=None):
        try:
            pred = SplitPredictor(score_fn, model=None, alpha=alpha)
            ctx = fixed_torch_rand(*makers) if makers is not None else contextlib.nullcontext()
            with ctx:
                if manual_seed is not None:
                    torch.manual_seed(manual_seed)
                pred.calculate_threshold(cal, labels, alpha)
                sets = pred.predict_with_logits(test)
            q = pred.q_hat
            q = float(q) if not torch.is_tensor(q) else float(q.item())
            return {"config": config, "threshold": as_json_threshold(q), "sets": mask_to_sets(sets.numpy())}
        except Exception as e:
            return {"config": config, "error": f"{type(e).__name__}: {e}"}

    def cal_draw(values):
        return lambda shape: values

    def test_draw(per_item):
        return lambda shape: np.broadcast_to(per_item[:, None], shape)

    out = {"lac": one(LAC(score_type="identity"), "LAC(score_type='identity')")}
    for name in ("aps", "raps"):
        def make(randomized):
            if name == "aps":
                return APS(score_type="identity", randomized=randomized)
            return RAPS(score_type="identity", randomized=randomized, penalty=lam, kreg=k_reg)

        label = "APS" if name == "aps" else f"RAPS(penalty={lam}, kreg={k_reg})"
        out[name] = one(make(True), f"{label}, randomized=True with torch.rand -> 1 (s = above(y))",
                        [cal_draw(np.ones(n)), test_draw(np.ones(m))])
        out[name + "_randomized"] = one(make(True), f"{label}, randomized=True with torch.rand -> 1 - u (test draw shared by the classes)",
                                        [cal_draw(1.0 - case["u_cal"]), test_draw(1.0 - case["u_test"])])
        out[name + "_inclusive"] = one(make(False), f"{label}, randomized=False")
        out[name + "_native_seeded"] = one(make(True), f"{label}, randomized=True, torch.manual_seed({seed}) (per-class test draws)",
                                           manual_seed=seed)
    return out


# --------------------------------------------------------------------------- comparison


def compare(case, results):
    """Rows whose set differs from the definition each library form is meant to equal."""
    d = results["definition"]
    n, m, C = len(case["cal"]), len(case["test"]), case["cal"].shape[1]
    extra = {}
    # MAPIE native: u_mapie = RandomState(seed).uniform(size=n), again (m, 1) from a fresh one.
    rs_c = np.random.RandomState(case["seed"]).uniform(size=n)
    rs_t = np.random.RandomState(case["seed"]).uniform(size=(m, 1)).ravel()
    # TorchCP native: U (n,), U (m, C) in rank order -> u_alkit per class in class order.
    tc, tt = torchcp_native_draws(case["seed"], n, m, C) if "torchcp" in results else (None, None)
    for score in ("aps", "raps"):
        sub = dict(case, u_cal=1.0 - rs_c, u_test=1.0 - rs_t)
        extra[f"mapie:{score}_native_seeded"] = definition_form(sub, score, sub["u_cal"], sub["u_test"], False, "")
        # include_last_label=True after a seeded calibration: Romano's set rule at test (u = 0).
        extra[f"mapie:{score}_native_ill_true"] = definition_form(sub, score, sub["u_cal"], np.zeros(m), True, "")
        if tc is not None:
            _, rank = above_and_rank(case["test"])
            u_class = 1.0 - np.take_along_axis(tt, rank - 1, axis=1)
            extra[f"torchcp:{score}_native_seeded"] = definition_form(case, score, 1.0 - tc, u_class, False, "")
    lines = []
    for lib, forms in results.items():
        if lib == "definition":
            continue
        for form, r in forms.items():
            base = form.replace("_native_seeded", "_randomized").replace("_native_ill_true", "").replace("_ill_true", "")
            want = extra.get(f"{lib}:{form}", d.get(base))
            if want is None:
                continue
            if "error" in r:
                lines.append(f"{lib:8s} {form:24s} error: {r['error'][:70]}")
                continue
            diff = [j for j, (a, b) in enumerate(zip(r["sets"], want["sets"])) if a != b]
            qa, qb = r["threshold"], want["threshold"]
            dq = 0.0 if qa == qb else (math.inf if "inf" in (qa, qb) else abs(qa - qb))
            ref = "definition, the library's seeded draws" if f"{lib}:{form}" in extra else f"definition {base}"
            lines.append(f"{lib:8s} {form:24s} vs {ref}: |dq| {dq:.2e}, {len(diff)}/{m} sets differ {diff[:8]}")
    return lines


def run_all(case):
    results = {"definition": run_definition(case)}
    for lib, fn in (("mapie", run_mapie), ("torchcp", run_torchcp)):
        try:
            results[lib] = fn(case)
        except ImportError as e:
            print(f"note: {lib} skipped ({e})", file=sys.stderr)
    return results


# --------------------------------------------------------------------------- built-in cases


def example_case(seed=20240611, n=500, m=200, C=10, accuracy=0.9):
    """Dirichlet(0.3) probabilities, the largest given to the label with prob `accuracy`."""
    rng = np.random.default_rng(seed)

    def rows(k):
        labels = rng.integers(0, C, size=k)
        P = np.empty((k, C))
        for i in range(k):
            p = np.sort(rng.dirichlet(np.full(C, 0.3)))[::-1]
            top = labels[i] if rng.random() < accuracy else rng.choice([c for c in range(C) if c != labels[i]])
            rest = rng.permutation([c for c in range(C) if c != top])
            P[i, top] = p[0]
            P[i, rest] = p[1:]
        P = P.astype(np.float32)
        return P / P.sum(axis=1, keepdims=True, dtype=np.float32), labels

    cal, y = rows(n)
    test, _ = rows(m)
    return {
        "cal_probs": cal.tolist(), "cal_labels": y.tolist(), "test_probs": test.tolist(),
        "alpha": 0.1, "lambda": 0.01, "k_reg": 2,
        "u_cal": rng.random(n).tolist(), "u_test": rng.random(m).tolist(), "seed": 0,
    }


def issue_case():
    cal = [[0.9, 0.1, 0.0]] * 9 + [[0.5, 0.3, 0.2]]
    rng = np.random.default_rng(0)
    return {
        "cal_probs": cal, "cal_labels": [0] * 10,
        "test_probs": [[0.95, 0.05, 0.0], [0.85, 0.1, 0.05]],
        "alpha": 0.2, "lambda": 0.01, "k_reg": 1,
        "u_cal": [round(float(v), 4) for v in rng.random(10)],
        "u_test": [round(float(v), 4) for v in rng.random(2)], "seed": 0,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("input", nargs="?")
    ap.add_argument("output", nargs="?")
    ap.add_argument("--example", metavar="OUT")
    ap.add_argument("--issue", nargs="?", const="-", metavar="OUT")
    ap.add_argument("--compare", action="store_true")
    a = ap.parse_args()
    if a.example:
        raw, dst, a.compare = example_case(), a.example, True
    elif a.issue:
        raw, dst, a.compare = issue_case(), (None if a.issue == "-" else a.issue), True
    elif a.input:
        raw, dst = None, a.output
    else:
        ap.error("give IN, --example OUT or --issue")
    case = normalise(raw) if raw is not None else load_case(a.input)
    results = run_all(case)
    if raw is not None:
        results["input"] = {k: raw[k] for k in ("alpha", "lambda", "k_reg", "seed")}
        results["input"].update({k: raw[k] for k in ("cal_probs", "cal_labels", "test_probs", "u_cal", "u_test")})
    if a.compare:
        for line in compare(case, {k: v for k, v in results.items() if k != "input"}):
            print(line, file=sys.stderr)
    text = json.dumps(results, allow_nan=False)
    if dst:
        with open(dst, "w") as f:
            f.write(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
