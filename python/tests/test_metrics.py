"""Metrics against references computed here: the Mann-Whitney AUROC with midranks and
scikit-learn's average precision (one threshold per distinct score), OpenOOD's FPR@95, the
15-bin ECE, NLL and Brier, the temperature's optimality, and split conformal sets by the
repository's reference (tests/reference/conformal.py)."""

from __future__ import annotations

import importlib.util
import math
from fractions import Fraction

import numpy as np
import pytest

import alkit
from conftest import ROOT, conformal_reference


def midrank_auroc(scores, positive):
    order = np.argsort(scores, kind="stable")
    ranks = np.empty(len(scores))
    s = scores[order]
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    npos = positive.sum()
    nneg = len(scores) - npos
    return (ranks[positive].sum() - npos * (npos + 1) / 2) / (npos * nneg)


def average_precision(scores, positive):
    ap, prev_recall = 0.0, 0.0
    npos = positive.sum()
    for t in np.unique(scores)[::-1]:
        sel = scores >= t
        tp = (positive & sel).sum()
        recall = tp / npos
        ap += (recall - prev_recall) * tp / sel.sum()
        prev_recall = recall
    return ap


def test_ood_metrics(model, embeddings):
    # In-distribution: the test digits; OOD: the same features shuffled across dimensions.
    rng = np.random.default_rng(0)
    h = model["h"]
    ood = rng.permuted(h, axis=1)
    e_in = alkit.score("energy", features=h, weight=model["w"], bias=model["b"])["energy"]
    e_out = alkit.score("energy", features=ood, weight=model["w"], bias=model["b"])["energy"]
    m = alkit.ood_metrics(e_in, e_out)
    s = np.r_[e_in, e_out].astype(np.float64)
    is_ood = np.r_[np.zeros(len(e_in), bool), np.ones(len(e_out), bool)]
    assert m["auroc"] == pytest.approx(midrank_auroc(s, is_ood), abs=1e-9)
    assert m["aupr_out"] == pytest.approx(average_precision(s, is_ood), abs=1e-9)
    assert m["aupr_in"] == pytest.approx(average_precision(-s, ~is_ood), abs=1e-9)
    # FPR@95: the fraction of OOD accepted at the first threshold accepting 95% of ID.
    thr = np.sort(-e_in.astype(np.float64))[::-1][math.ceil(0.95 * len(e_in)) - 1]
    assert m["fpr95"] == pytest.approx(np.mean(-e_out.astype(np.float64) >= thr), abs=1e-9)


def test_calibration(model):
    p, y = model["probs"], model["labels"]
    ent = alkit.score("entropy", probs=p)["entropy"]
    m = alkit.calibration(p, y, {"entropy": ent})
    p64 = p.astype(np.float64)
    conf, pred = p.max(1).astype(np.float64), p.argmax(1)
    correct = pred == y
    assert m["accuracy"] == pytest.approx(correct.mean())
    bins = np.clip(np.ceil(conf * 15).astype(int) - 1, 0, 14)
    ece = sum(
        (bins == k).mean() * abs(correct[bins == k].mean() - conf[bins == k].mean())
        for k in range(15)
        if (bins == k).any()
    )
    assert m["ece"] == pytest.approx(ece, abs=1e-6)
    assert m["nll"] == pytest.approx(-np.log(p64[np.arange(len(y)), y]).mean(), rel=1e-6)
    brier = ((p64 - np.eye(10)[y]) ** 2).sum(1).mean()
    assert m["brier"] == pytest.approx(brier, rel=1e-6)
    auroc = midrank_auroc(ent.astype(np.float64), ~correct)
    assert m["scorers"]["entropy"]["misclassification_auroc"] == pytest.approx(auroc, abs=1e-9)
    assert 0 < m["scorers"]["entropy"]["raulc"] <= 1


def test_fit_temperature_minimises_the_nll(model):
    z, y = model["logits"].astype(np.float32), model["labels"]
    t = alkit.fit_temperature(z, y)

    def nll(t):
        s = z.astype(np.float64) / t
        s -= s.max(1, keepdims=True)
        return -(s[np.arange(len(y)), y] - np.log(np.exp(s).sum(1))).mean()

    assert t > 0
    assert nll(t) <= nll(t * 1.01) + 1e-9 and nll(t) <= nll(t / 1.01) + 1e-9


@pytest.mark.parametrize(
    "score",
    ["lac", "aps", "raps", "aps-randomized", "raps-randomized", "aps-inclusive", "raps-inclusive"],
)
def test_conformal_sets_match_the_reference(model, score):
    ref = conformal_reference()
    method, _, form = score.partition("-")
    form = form or "romano"
    p, y = model["probs"], model["labels"]
    cal_p, cal_y, test_p = p[:250], y[:250], p[250:]
    rng = np.random.default_rng(3)
    u_cal, u = rng.random(250), rng.random(len(test_p))
    draws = dict(cal_draws=u_cal, draws=u) if form == "randomized" else {}
    alpha = 0.1
    qhat, sets = alkit.conformal(cal_p, cal_y, test_p, alpha, score=score, **draws)
    cal = ref.all_scores(cal_p.astype(np.float64), method, 0.01, 5, form, u_cal)
    cal_scores = np.sort(cal[np.arange(250), cal_y])
    index = math.ceil((250 + 1) * (1 - Fraction(repr(alpha))))
    want_q = cal_scores[index - 1]
    assert qhat == pytest.approx(want_q, abs=1e-6)
    test_scores = ref.all_scores(test_p.astype(np.float64), method, 0.01, 5, form, u)
    want = test_scores <= want_q
    assert sets.dtype == np.bool_ and sets.shape == test_p.shape
    # Scores within float32 rounding of the threshold may fall either way.
    near = np.abs(test_scores - want_q) < 1e-6
    np.testing.assert_array_equal(sets[~near], want[~near])
    coverage = sets[np.arange(len(test_p)), y[250:]].mean()
    assert coverage >= 1 - alpha - 0.06
    if form == "romano":
        assert sets.any(axis=1).all(), "Romano's sets always hold the top class"


def test_conformal_sets_of_confident_items_are_not_empty():
    # The surest items of an accurate model: the inclusive form's threshold is 0.9 and the
    # 0.95 item gets no class; Romano's rule gives it its top class.
    cal = np.array([[0.9, 0.1, 0]] * 9 + [[0.5, 0.3, 0.2]], np.float32)
    y = np.zeros(10, np.int64)
    t = np.array([[0.95, 0.05, 0], [0.85, 0.1, 0.05]], np.float32)
    q, sets = alkit.conformal(cal, y, t, 0.2, score="aps")
    assert q == 0.0 and sets.tolist() == [[True, False, False]] * 2
    q, sets = alkit.conformal(cal, y, t, 0.2, score="aps-inclusive")
    assert q == pytest.approx(0.9) and sets.tolist() == [[False] * 3, [True, False, False]]
    with pytest.raises(alkit.errors.AlkitError) as e:
        alkit.conformal(cal, y, t, 0.2, score="aps", draws=np.zeros(2))
    assert e.value.field == "draws" and "randomised forms" in str(e.value)
    with pytest.raises(alkit.errors.SettingsError):
        alkit.conformal(cal, y, t, 0.2, score="aps-bogus")


def test_mondrian_sets_take_one_threshold_per_class(model):
    # LAC per class by hand: each class's threshold is the ceil((n_k + 1)(1 - alpha))-th
    # smallest 1 - p_y among its own calibration items (inf past n_k).
    p, y = model["probs"], model["labels"]
    cal_p, cal_y, test_p = p[:250], y[:250], p[250:]
    alpha = 0.1
    q, sets = alkit.conformal(cal_p, cal_y, test_p, alpha, score="lac", mondrian=True)
    classes = p.shape[1]
    assert q.shape == (classes,)
    for k in range(classes):
        s = np.sort(1 - cal_p[cal_y == k, k].astype(np.float64))
        rank = math.ceil((len(s) + 1) * (1 - Fraction(repr(alpha))))
        want = math.inf if rank > len(s) else s[rank - 1]
        assert q[k] == pytest.approx(want, abs=1e-6), k
    want = (1 - test_p.astype(np.float64)) <= q[None, :]
    near = np.abs((1 - test_p) - q[None, :]) < 1e-6
    np.testing.assert_array_equal(sets[~near], want[~near])
    marginal, _ = alkit.conformal(cal_p, cal_y, test_p, alpha, score="lac")
    assert isinstance(marginal, float)


def test_scores_of_a_perfect_classifier_have_no_rejection_figures():
    # Every item right: rAULC and the misclassification AUROC are undefined (None); the
    # probability figures are still reported.
    m = alkit.calibration(np.eye(3, dtype=np.float32), np.array([0, 1, 2]), {"s": [1.0, 2.0, 3.0]})
    assert m["accuracy"] == 1.0 and m["nll"] == pytest.approx(0.0, abs=1e-6)
    assert m["scorers"]["s"] == {"raulc": None, "misclassification_auroc": None}
