"""Per-item scores from arrays against formulas computed here in float64 numpy, and the
post-hoc detectors against the repository's own independent reference
(tests/reference/posthoc.py, written from the papers)."""

from __future__ import annotations

import importlib.util
import math
import sys

import numpy as np
import pytest

import alkit
from conftest import ROOT, conformal_reference


def entropy(p):
    p = p.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.where(p > 0, p * np.log(p), 0.0).sum(-1)


def test_probability_scores(model):
    p = model["probs"]
    got = alkit.score(["entropy", "margin", "least-confidence"], probs=p)
    assert list(got) == ["entropy", "margin", "least-confidence"]
    for v in got.values():
        assert v.dtype == np.float32 and v.shape == (len(p),)
    s = np.sort(p.astype(np.float64), axis=1)
    np.testing.assert_allclose(got["entropy"], entropy(p), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["margin"], 1 - (s[:, -1] - s[:, -2]), atol=1e-6)
    np.testing.assert_allclose(got["least-confidence"], 1 - s[:, -1], atol=1e-6)


def test_sample_scores_every_layout(draws):
    mean = draws.astype(np.float64).mean(axis=2)
    per_draw = entropy(np.moveaxis(draws, 2, 1))  # (n, T)
    bald = entropy(mean) - per_draw.mean(axis=1)
    variance = draws.astype(np.float64).var(axis=2).mean(axis=1)
    votes = draws.argmax(axis=1)  # (n, T)
    modal = np.array([np.bincount(v, minlength=draws.shape[1]).max() for v in votes])
    names = ["bald", "mc-entropy", "class-variance", "variation-ratio", "mc-max-prob", "entropy"]
    for layout, arr in [
        ("nct", draws),
        ("tnc", np.ascontiguousarray(np.transpose(draws, (2, 0, 1)))),
        ("ntc", np.ascontiguousarray(np.transpose(draws, (0, 2, 1)))),
    ]:
        got = alkit.score(names, draws=arr, layout=layout)
        np.testing.assert_allclose(got["bald"], bald, atol=2e-6)
        np.testing.assert_allclose(got["mc-entropy"], entropy(mean), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got["class-variance"], variance, rtol=1e-4, atol=1e-7)
        np.testing.assert_allclose(got["variation-ratio"], 1 - modal / draws.shape[2], atol=1e-6)
        np.testing.assert_allclose(
            got["mc-max-prob"], 1 - draws.astype(np.float64).max(axis=1).mean(axis=1), atol=1e-6
        )
        # A probability scorer over draws reads their mean.
        np.testing.assert_allclose(got["entropy"], entropy(mean), rtol=1e-5, atol=1e-6)


def test_non_contiguous_and_float64_inputs_are_read_in_order(draws):
    view = np.transpose(draws, (2, 0, 1))  # a strided view in tnc layout
    a = alkit.score("bald", draws=view, layout="tnc")["bald"]
    b = alkit.score("bald", draws=draws.astype(np.float64), layout="nct")["bald"]
    np.testing.assert_array_equal(a, b)


def test_last_layer_gradient_scores(model):
    h, w, b, p = model["h"], model["w"], model["b"], None
    z = h.astype(np.float64) @ w.T.astype(np.float64) + b
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    # d log p_c / d(W, b) = (e_c - p) outer [h, 1]: its norm, per class, in closed form.
    e = np.eye(w.shape[0])[None, :, :] - p[:, None, :]  # (n, c, c)
    norm = np.sqrt((e**2).sum(-1) * ((h.astype(np.float64) ** 2).sum(1, keepdims=True) + 1))
    got = alkit.score(["exgrad", "ungrad", "negrad", "regrad"], features=h, weight=w, bias=b)
    assert list(got) == ["exgrad@last", "ungrad@last", "negrad@last", "regrad@last"]
    np.testing.assert_allclose(got["exgrad@last"], (p * norm).sum(1), rtol=2e-4, atol=1e-5)
    np.testing.assert_allclose(got["ungrad@last"], norm.mean(1), rtol=2e-4, atol=1e-5)
    # NEGrad: the norm of the expected gradient sum_c p_c g_c, which is 0 (rounding only).
    assert np.abs(got["negrad@last"]).max() < 1e-5
    # REGrad over one layer: sum_c sqrt(p_c) ||g_c|| times that layer's weight exp(lambda l).
    ratio = got["regrad@last"] / (np.sqrt(p) * norm).sum(1)
    np.testing.assert_allclose(ratio, ratio[0], rtol=2e-4)


def _posthoc_reference():
    spec = importlib.util.spec_from_file_location(
        "posthoc_reference", ROOT / "tests" / "reference" / "posthoc.py"
    )
    mod = importlib.util.module_from_spec(spec)
    sys.modules["posthoc_reference"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_posthoc_detectors_match_the_reference(model):
    ref = _posthoc_reference()
    h, w, b = model["h"][:200], model["w"], model["b"]
    th, ty = model["train_h"], model["train_y"]
    a = {
        "n": len(h), "d": h.shape[1], "c": w.shape[0], "m": len(th),
        "h": h.ravel().tolist(), "w": w.ravel().tolist(), "b": b.tolist(),
        "ref_h": th.ravel().tolist(), "ref_labels": ty.tolist(),
        "gen_gamma": 0.1, "gen_m": 100, "react_percentile": 90.0, "ash_percentile": 90.0,
        "scale_percentile": 85.0, "knn_k": 50, "vim_dim": 12,
    }
    want = ref.scores(a)
    names = ["max-logit", "energy", "gen", "react", "ash", "ash-b", "scale", "knn",
             "mahalanobis", "vim"]
    got = alkit.score(names, features=h, weight=w, bias=b, train_features=th,
                      train_labels=ty, knn_k=50, vim_dim=12)
    for name in names:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-3, atol=1e-3, err_msg=name)


def test_conformal_size_and_names_as_the_registry_lists(model):
    listed = {s.name: s for s in alkit.scorers()}
    assert listed["entropy"].per_item and not listed["batchbald"].per_item
    assert "badge" in listed and "random" in listed and not listed["random"].per_item
    # conformal-size: the size of each item's APS set at alpha 0.1, calibrated on the training
    # items (alkit.conformal's sets with those items as the calibration split).
    kw = dict(features=model["h"], weight=model["w"], bias=model["b"])
    got = alkit.score("conformal-size", train_features=model["train_h"],
                      train_labels=model["train_y"], **kw)["conformal-size"]
    th = model["train_h"].astype(np.float64)
    z = th @ model["w"].T + model["b"]
    pt = np.exp(z - z.max(1, keepdims=True))
    pt /= pt.sum(1, keepdims=True)
    # The sets by the independent numpy reference (tests/reference/conformal.py, Romano's
    # rule): the size, plus half the mass outside the set.
    ref = conformal_reference()
    cal = ref.all_scores(pt.astype(np.float32).astype(np.float64), "aps", 0.0, 0)
    cal = np.sort(cal[np.arange(len(pt)), model["train_y"]])
    q = cal[math.ceil((len(pt) + 1) * 0.9) - 1]
    p = model["probs"].astype(np.float64)
    scores = ref.all_scores(p, "aps", 0.0, 0)
    sets = scores <= q
    want = sets.sum(1) + 0.5 * np.clip(1 - np.where(sets, p, 0).sum(1), 0, 1)
    # Items with a class within float32 rounding of the threshold may fall either way.
    near = (np.abs(scores - q) < 1e-6).any(1)
    np.testing.assert_allclose(got[~near], want[~near], atol=1e-5)
    assert near.mean() < 0.05


def test_torch_like_dlpack_producers_are_read_without_numpy_conversion(model):
    class Producer:
        """What a CPU torch tensor offers: the DLPack protocol, and no __array__."""

        def __init__(self, a):
            self._a = a

        def __dlpack__(self, **kw):
            return self._a.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self._a.__dlpack_device__()

    p = model["probs"]
    a = alkit.score("entropy", probs=Producer(p))["entropy"]
    np.testing.assert_array_equal(a, alkit.score("entropy", probs=p)["entropy"])


def test_knn_needs_the_training_features(model):
    with pytest.raises(alkit.SettingsError, match="knn"):
        alkit.score("knn", features=model["h"], weight=model["w"], bias=model["b"])
