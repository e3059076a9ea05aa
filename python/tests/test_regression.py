"""Regression from Python: Gaussian scores, metrics and conformal intervals.

The intervals and metrics are compared with MAPIE 1.6.0, crepes 0.9.1, properscoring 0.1,
scikit-learn and SciPy as recorded by tests/reference/regression_libs.py --example in
tests/fixtures/regression_libs.json (so these tests need none of them); the scores with the
mixture's moments worked out in numpy."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import alkit

FIXTURE = Path(__file__).parents[2] / "tests" / "fixtures" / "regression_libs.json"


@pytest.fixture(scope="module")
def fx():
    return json.loads(FIXTURE.read_text())


def col(split, key):
    # The reference computes from the float32 values of its inputs.
    return np.asarray(split[key], dtype=np.float32).astype(np.float64)


def inf(v):
    return math.inf if v == "inf" else -math.inf if v == "-inf" else v


def test_intervals_equal_mapie_and_crepes(fx):
    cal, test, alpha = fx["input"]["cal"], fx["input"]["test"], fx["input"]["alpha"]
    cases = [
        ("absolute", dict(cal_mean=col(cal, "mean"), mean=col(test, "mean")), fx["mapie"], "absolute"),
        (
            "normalized",
            dict(cal_mean=col(cal, "mean"), cal_std=col(cal, "std"), mean=col(test, "mean"), std=col(test, "std")),
            fx["mapie"],
            "normalized_residual",
        ),
        (
            "normalized",
            dict(cal_mean=col(cal, "mean"), cal_std=col(cal, "std"), mean=col(test, "mean"), std=col(test, "std")),
            fx["crepes"],
            "normalized",
        ),
        (
            "cqr",
            dict(cal_lower=col(cal, "lower"), cal_upper=col(cal, "upper"), lower=col(test, "lower"), upper=col(test, "upper")),
            fx["mapie"],
            "cqr",
        ),
    ]
    for score, arrays, lib, key in cases:
        q, lo, hi = alkit.conformal_intervals(col(cal, "y"), alpha, score=score, **arrays)
        want = lib["conformal"][key]
        assert q[None] == pytest.approx(want["threshold"], rel=1e-12), key
        np.testing.assert_array_equal(lo.astype(np.float32), np.asarray(want["lower"], dtype=np.float32))
        np.testing.assert_array_equal(hi.astype(np.float32), np.asarray(want["upper"], dtype=np.float32))


def test_mondrian_groups_and_an_unseen_group(fx):
    cal, test, alpha = fx["input"]["cal"], fx["input"]["test"], fx["input"]["alpha"]
    q, lo, hi = alkit.conformal_intervals(
        col(cal, "y"), alpha, cal_mean=col(cal, "mean"), mean=col(test, "mean"),
        cal_groups=np.asarray(cal["group"]), groups=np.asarray(test["group"]),
    )
    want = fx["mapie"]["conformal"]["mondrian_absolute"]
    for g, t in want["threshold"].items():
        assert q.get(int(g), math.inf) == pytest.approx(inf(t), rel=1e-12), g
    unseen = np.asarray(test["group"]) == 3
    assert unseen.any() and np.isinf(lo[unseen]).all() and np.isinf(hi[unseen]).all()


def test_metrics_equal_sklearn_scipy_and_properscoring(fx):
    test = fx["input"]["test"]
    m = alkit.regression_metrics(col(test, "y"), col(test, "mean"), col(test, "std"), fx["input"]["levels"])
    assert m["rmse"] == pytest.approx(fx["sklearn"]["metrics"]["rmse"], rel=1e-12)
    assert m["mae"] == pytest.approx(fx["sklearn"]["metrics"]["mae"], rel=1e-12)
    assert m["crps"] == pytest.approx(fx["properscoring"]["metrics"]["crps"], rel=1e-12)
    s = fx["scipy"]["metrics"]
    assert m["nll"] == pytest.approx(s["nll"], rel=1e-12)
    assert m["spearman"] == pytest.approx(s["spearman"], rel=1e-12)
    assert m["quantile_calibration_error"] == pytest.approx(s["quantile_calibration_error"], rel=1e-12)
    np.testing.assert_allclose(m["coverage"], s["coverage"], rtol=1e-12)
    np.testing.assert_allclose(m["width"], s["width"], rtol=1e-12)
    assert m["ause"] == pytest.approx(fx["definition"]["metrics"]["sparsification"]["ause"], rel=1e-12)


def test_gaussian_scores_are_the_mixture_moments():
    rng = np.random.default_rng(0)
    means = rng.normal(size=(5, 40, 2)).astype(np.float32)
    variances = rng.uniform(0.1, 2.0, size=(5, 40, 2)).astype(np.float32)
    s = alkit.score(["variance", "epistemic", "aleatoric", "gauss-mi"], means=means, variances=variances)
    m, v = means.astype(np.float64), variances.astype(np.float64)
    alea, epi = v.mean(0), m.var(0)
    np.testing.assert_allclose(s["aleatoric"], alea.sum(-1), rtol=1e-5)
    np.testing.assert_allclose(s["epistemic"], epi.sum(-1), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(s["variance"], (alea + epi).sum(-1), rtol=1e-5)
    mi = (0.5 * np.log(alea + epi) - 0.5 * np.log(v).mean(0)).sum(-1)
    np.testing.assert_allclose(s["gauss-mi"], mi, rtol=1e-4, atol=1e-6)
    # One prediction per item: its variance; no disagreement to read.
    one = alkit.score("variance", means=means[0, :, 0], variances=variances[0, :, 0])
    np.testing.assert_array_equal(one["variance"], variances[0, :, 0])
    with pytest.raises(alkit.AlkitError, match="two or more draws"):
        alkit.score("epistemic", means=means[0, :, 0], variances=variances[0, :, 0])


def test_bad_regression_inputs_are_refused_by_name():
    m = np.zeros(4, dtype=np.float32)
    with pytest.raises(alkit.SettingsError, match="classifier"):
        alkit.score("entropy", means=m, variances=m + 1)
    with pytest.raises(alkit.AlkitError, match="position 2"):
        alkit.score("variance", means=m, variances=np.array([1, 1, 0, 1], dtype=np.float32))
    with pytest.raises(alkit.SettingsError, match="both"):
        alkit.score("variance", means=m)
    with pytest.raises(alkit.SettingsError, match="needs"):
        alkit.conformal_intervals(np.zeros(3), 0.1, score="normalized", cal_mean=np.zeros(3), mean=np.zeros(2))
    with pytest.raises(alkit.AlkitError, match="item 1"):
        alkit.regression_metrics([1.0, 2.0], [0.0, 0.0], [1.0, -1.0])
