"""alkit.score on a checkpoint and a data source by path gives exactly what ``alkit score``
writes for the same job."""

from __future__ import annotations

import csv

import numpy as np
import pytest

import alkit
from conftest import EMBEDDINGS, run_cli


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, alkit_bin):
    out = tmp_path_factory.mktemp("ck") / "linear"
    run_cli(alkit_bin, "train", "--data", EMBEDDINGS, "--model", "linear", "--steps", 60,
            "--out", out)
    return out


@pytest.mark.parametrize("split", ["train", "test"])
def test_scores_equal_the_command_lines(tmp_path, alkit_bin, checkpoint, split):
    names = ["entropy", "margin", "regrad", "gradnorm"]
    got = alkit.score(names, checkpoint=checkpoint, data=EMBEDDINGS, split=split)
    run_cli(alkit_bin, "score", "--checkpoint", checkpoint, "--data", EMBEDDINGS,
            "--split", split, "--scorer", ",".join(names), "--out", tmp_path / "s.csv")
    with open(tmp_path / "s.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert isinstance(got, alkit.ItemScores)
    assert got.ids == [r["id"] for r in rows]
    np.testing.assert_array_equal(got.indices, [int(r["index"]) for r in rows])
    assert list(got) == names
    for name in names:
        want = np.array([np.float32(r[name]) for r in rows])
        np.testing.assert_array_equal(got[name], want, err_msg=name)


def test_a_checkpoint_of_another_shape_is_refused(checkpoint, tmp_path):
    with pytest.raises(alkit.SettingsError, match="checkpoint"):
        alkit.score("entropy", checkpoint=checkpoint, data=EMBEDDINGS.parents[1])
    with pytest.raises(alkit.SettingsError, match="split"):
        alkit.score("entropy", checkpoint=checkpoint, data=EMBEDDINGS, split="val")
