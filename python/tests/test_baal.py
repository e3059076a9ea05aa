"""Equivalence with baal's heuristics on the same arrays, in baal's layout (n, C, T).

The reference values were recorded by tests/reference/baal_heuristics.py with baal 2.1.0
from PyPI (python/tests/data/baal_reference.json says how and with which versions), so these
tests need neither baal nor torch. The recorded arrays have no ties and no near-ties (relative
gaps of at least 1e-5 between scores), so rankings must agree exactly.

baal -> alkit: BALD -> bald; Entropy -> mc-entropy; Variance -> class-variance (population
variance over draws, mean over classes); Margin (top1 - top2 of the mean, smallest first) ->
margin of the mean (1 - that, largest first); Certainty (max of the mean, smallest first) ->
least-confidence of the mean (1 - that)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import alkit

DATA = Path(__file__).parent / "data" / "baal_reference.npz"


@pytest.fixture(scope="module")
def ref():
    return np.load(DATA)


@pytest.mark.parametrize(
    "baal_name, alkit_name, flip",
    [
        ("bald", "bald", False),
        ("entropy", "mc-entropy", False),
        ("variance", "class-variance", False),
        ("margin", "margin", True),
        ("certainty", "least-confidence", True),
    ],
)
def test_scores_and_ranks_equal_baals(ref, baal_name, alkit_name, flip):
    p = ref["small_probs"]  # (500, 10, 20): baal's layout, passed as is
    got = alkit.score(alkit_name, draws=p)[alkit_name]
    want = ref[f"small_{baal_name}_scores"]
    np.testing.assert_allclose(1 - got if flip else got, want, atol=2e-6)
    order = alkit.select(got, len(got))  # alkit's ranking, label first
    np.testing.assert_array_equal(order, ref[f"small_{baal_name}_ranks"])


def test_batchbald_picks_baals_batch(ref):
    # On the tiny set every seed of baal's sampled BatchBALD and an exact enumeration agree,
    # each pick leading the runner-up by at least 0.03 nats: the order must be the same.
    p = ref["tiny_probs"]
    want = ref["bb_tiny_exact_order"]
    assert (ref["bb_tiny_order"] == want).all()
    got = alkit.select_batch("batchbald", len(want), draws=p, seed=0)
    np.testing.assert_array_equal(got, want)


def test_batchbald_on_ten_classes_agrees_where_baal_agrees_with_itself(ref):
    # With C = 10 and a batch of 10, baal samples T * 500 = 10,000 joint configurations a
    # step and its seeds disagree from the second pick on. alkit enumerates up to
    # `max_configs` configurations exactly (512 by default: the first three picks at C = 10)
    # and samples beyond: by default its first three picks are the exact greedy order; with
    # as many configurations as baal samples, its first four (each leading the runner-up by
    # at least 0.001 nats) are, and its batch shares most items with each of baal's.
    p = ref["small_probs"]
    exact = ref["bb_small_exact_order"]
    got = alkit.select_batch("batchbald", 10, draws=p, seed=0)
    np.testing.assert_array_equal(got[:3], exact[:3])
    for seed in (0, 1):
        got = alkit.select_batch("batchbald", 10, draws=p, seed=seed, max_configs=10_000)
        np.testing.assert_array_equal(got[:4], exact)
        for baal_batch in ref["bb_small_order"]:
            assert len(set(got.tolist()) & set(baal_batch.tolist())) >= 5


EPIG = Path(__file__).parent / "data" / "baal_epig.npz"


@pytest.mark.parametrize("case, targets", [("all", 500), ("spread64", 64)])
def test_epig_equals_baals(ref, case, targets):
    # baal's EPIG (tests/reference/baal_epig.py) on the same draws, its targets the items
    # themselves: all 500, or 64 spread evenly (alkit's rule for `epig_targets` below the
    # item count). baal subtracts float32 entropies of about 4.6 nats, so its scores carry
    # rounding of about 1e-6; alkit sums them in f64.
    e = np.load(EPIG)
    p = ref["small_probs"]
    np.testing.assert_array_equal(e[f"epig_{case}_positions"], np.arange(targets) * 500 // targets)
    got = alkit.score("epig", draws=p, epig_targets=targets)["epig"]
    want = e[f"epig_{case}_scores"]
    np.testing.assert_allclose(got, want, atol=3e-6)
    # The batch both would label first.
    top = np.argsort(-want, kind="stable")[:20]
    assert set(alkit.select(got, 20)) == set(top)
