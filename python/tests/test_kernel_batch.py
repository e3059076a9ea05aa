"""The regression batch rules from arrays: alkit.select_batch over kernel features picks what
bmdal-reg 3.0.2 (the paper's implementation) picks on the same features, recorded in
tests/fixtures/bmdal_picks.json by tests/reference/bmdal_picks.py (torch and bmdal-reg are
not needed here)."""
import json
from pathlib import Path

import numpy as np
import pytest

import alkit

FIXTURE = Path(__file__).parents[2] / "tests" / "fixtures" / "bmdal_picks.json"


@pytest.fixture(scope="module")
def fx():
    d = json.loads(FIXTURE.read_text())
    p = d["p"]
    d["pool_rows"] = np.asarray(d["pool"], dtype=np.float32).reshape(-1, p)
    d["labeled_rows"] = np.asarray(d["labeled"], dtype=np.float32).reshape(-1, p)
    return d


@pytest.mark.parametrize("case", ["lcmd", "lcmd-p", "maxdist", "maxdet", "bait", "bait-fb", "maxdiag"])
def test_picks_equal_bmdal_regs(fx, case):
    c = fx["cases"][case]
    name = {"bait": "bait-fb" if c["backward"] else "bait"}.get(c["rule"], c["rule"])
    picks = alkit.select_batch(
        name,
        fx["k"],
        features=fx["pool_rows"],
        labeled=fx["labeled_rows"],
        kernel_mode="tp" if c["with_labeled"] else "p",
        kernel_transform="train" if c["posterior"] is not None else "none",
        kernel_sigma=fx["sigma"],
    )
    want = c["picks"][::-1] if case == "maxdiag" else c["picks"]
    assert picks.dtype == np.int64
    assert picks.tolist() == want


def test_kmeanspp_is_seeded_and_distinct(fx):
    a = alkit.select_batch("kmeanspp", 30, features=fx["pool_rows"], labeled=fx["labeled_rows"], seed=4)
    b = alkit.select_batch("kmeanspp", 30, features=fx["pool_rows"], labeled=fx["labeled_rows"], seed=4)
    assert a.tolist() == b.tolist() and len(set(a.tolist())) == 30


def test_bad_inputs_are_refused_by_name(fx):
    with pytest.raises(alkit.AlkitError, match="labeled"):
        alkit.select_batch("lcmd", 5, features=fx["pool_rows"], labeled=fx["labeled_rows"][:, :3])
    with pytest.raises(alkit.AlkitError, match="features"):
        alkit.select_batch("lcmd", 5, labeled=fx["labeled_rows"])
    with pytest.raises(alkit.SettingsError, match="sketch"):
        alkit.select_batch("lcmd", 5, features=fx["pool_rows"], sketch=64)
    with pytest.raises(alkit.SettingsError, match="kernel_sigma"):
        alkit.select_batch("bait", 5, features=fx["pool_rows"], kernel_sigma=-1.0)
    with pytest.raises(alkit.AlkitError, match="cannot select"):
        alkit.select_batch("maxdet", 401, features=fx["pool_rows"])
