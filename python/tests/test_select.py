"""Selections: top-k and the seeded stochastic modes from scores, and the joint selectors,
checked against what each must do, worked out here in numpy."""

from __future__ import annotations

import numpy as np
import pytest

import alkit


def test_top_k_is_a_stable_descending_sort(model):
    s = alkit.score("entropy", probs=model["probs"])["entropy"]
    s[:5] = s[5]  # ties: lower position first
    picks = alkit.select(s, 40)
    assert picks.dtype == np.int64
    np.testing.assert_array_equal(picks, np.argsort(-s, kind="stable")[:40])


@pytest.mark.parametrize("method", ["random", "power", "softmax", "softrank"])
def test_stochastic_selections_are_seeded_distinct_and_in_range(model, method):
    s = alkit.score("entropy", probs=model["probs"])["entropy"]
    a = alkit.select(s, 50, method=method, seed=3)
    assert len(set(a.tolist())) == 50 and a.min() >= 0 and a.max() < len(s)
    np.testing.assert_array_equal(a, alkit.select(s, 50, method=method, seed=3))
    assert not np.array_equal(a, alkit.select(s, 50, method=method, seed=4))


def test_power_selection_prefers_high_scores():
    # Weights score**beta: items of score 1 against items of score 1e-3 at beta 4.
    s = np.r_[np.ones(10), np.full(990, 1e-3)].astype(np.float32)
    picks = alkit.select(s, 10, method="power", beta=4.0, seed=0)
    assert set(picks.tolist()) == set(range(10))


def test_batchbald_first_pick_is_balds_argmax(draws):
    bald = alkit.score("bald", draws=draws)["bald"]
    picks = alkit.select_batch("batchbald", 5, draws=draws, seed=0)
    assert len(set(picks.tolist())) == 5
    assert picks[0] == int(np.argmax(bald))
    among = alkit.select_batch("batchbald", 5, draws=draws, candidates=50, seed=0)
    top50 = set(np.argsort(-bald, kind="stable")[:50].tolist())
    assert set(among.tolist()) <= top50 and among[0] == picks[0]


def test_coreset_is_k_center_greedy(model):
    h, lab = model["h"][:300].astype(np.float64), model["train_h"][:20].astype(np.float64)
    picks = alkit.select_batch("coreset", 15, features=model["h"][:300],
                               labeled=model["train_h"][:20], classes=10)
    d = np.sqrt(((h[:, None, :] - lab[None, :, :]) ** 2).sum(-1)).min(1)
    want = []
    for _ in range(15):
        i = int(np.argmax(np.where(np.isin(np.arange(len(h)), want), -np.inf, d)))
        want.append(i)
        d = np.minimum(d, np.sqrt(((h - h[i]) ** 2).sum(-1)))
    np.testing.assert_array_equal(picks, want)


def test_badge_reads_the_last_layer_and_is_seeded(model):
    kw = dict(features=model["h"], weight=model["w"], bias=model["b"])
    a = alkit.select_batch("badge", 20, seed=1, **kw)
    assert len(set(a.tolist())) == 20
    np.testing.assert_array_equal(a, alkit.select_batch("badge", 20, seed=1, **kw))
    # The first pick of k-means++ on gradient embeddings: the largest embedding norm,
    # ||p - e_yhat|| * ||h|| (Ash et al. 2020's seeding starts there).
    h = model["h"].astype(np.float64)
    z = h @ model["w"].T + model["b"]
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    g = p - np.eye(p.shape[1])[p.argmax(1)]
    norm = np.linalg.norm(g, axis=1) * np.linalg.norm(h, axis=1)
    assert a[0] == int(np.argmax(norm))
    with pytest.raises(alkit.SettingsError, match="weight"):
        alkit.select_batch("badge", 5, features=model["h"])


def test_cold_start_selectors_choose_from_features_alone(model):
    h = model["h"]
    for name in ["typiclust", "probcover", "coreset"]:
        picks = alkit.select_batch(name, 10, features=h, classes=10, seed=2)
        assert len(set(picks.tolist())) == 10 and picks.max() < len(h), name
    with pytest.raises(alkit.SettingsError, match="classes"):
        alkit.select_batch("probcover", 10, features=h)
    radius = alkit.select_batch("probcover", 10, features=h, probcover_delta=0.3)
    assert len(radius) == 10


def test_per_item_scorers_are_not_batch_selectors(draws):
    with pytest.raises(alkit.SettingsError, match="one at a time"):
        alkit.select_batch("entropy", 3, draws=draws)
    with pytest.raises(alkit.SettingsError, match="select_batch"):
        alkit.select(np.ones(5, np.float32), 2, method="batchbald")
