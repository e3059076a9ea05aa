"""alkit.curve: the simulated loop from Python writes what ``alkit curve`` writes, on a data
source and on the same data given as arrays, and its folder resumes as the command line's."""

from __future__ import annotations

import csv

import numpy as np
import pytest

import alkit
from conftest import EMBEDDINGS, run_cli

FLAGS = dict(model="linear", initial=20, query=20, cycles=2, steps=40, seeds=2)
SCORERS = ["entropy", "random"]


def rows(path):
    """curve.csv without its timings (train_s, score_s), which differ run to run."""
    with open(path, newline="") as f:
        return [{k: v for k, v in r.items() if not k.endswith("_s")} for r in csv.DictReader(f)]


def test_curve_from_python_writes_what_the_command_line_writes(tmp_path, alkit_bin, embeddings):
    py, cli = tmp_path / "py", tmp_path / "cli"
    got = alkit.curve(py, data=EMBEDDINGS, scorers=SCORERS, **FLAGS)
    run_cli(alkit_bin, "curve", "--data", EMBEDDINGS, "--scorer", ",".join(SCORERS),
            "--model", "linear", "--initial", 20, "--query", 20, "--cycles", 2, "--steps", 40,
            "--seeds", 2, "--out", cli)
    assert (py / "summary.csv").read_bytes() == (cli / "summary.csv").read_bytes()
    assert rows(py / "curve.csv") == rows(cli / "curve.csv")
    # The records returned are the file's, run by run.
    assert [(r["strategy"], r["seed"]) for r in got.runs] == [
        ("entropy", 0), ("random", 0), ("entropy", 1), ("random", 1)
    ]
    by_run = {}
    for r in rows(py / "curve.csv"):
        by_run.setdefault((r["scorer"], int(r["seed"])), []).append(r)
    for run in got.runs:
        want = by_run[(run["strategy"], run["seed"])]
        assert list(run["labeled"]) == [20, 40, 60]
        np.testing.assert_allclose(run["acc"], [float(r["acc"]) for r in want], atol=1e-6)
        balanced = [float(r["balanced_acc"]) for r in want]
        np.testing.assert_allclose(run["balanced_acc"], balanced, atol=1e-6)
        # Balanced accuracy is the mean recall over the classes with test items.
        assert run["recall"].shape == (3, 10)
        np.testing.assert_allclose(run["balanced_acc"], np.nanmean(run["recall"], axis=1))
    # The stopping measures returned are stopping.csv's.
    with open(py / "stopping.csv", newline="") as f:
        stops = list(csv.DictReader(f))
    for run in got.runs:
        want = [r for r in stops if (r["scorer"], int(r["seed"])) == (run["strategy"], run["seed"])]
        for key in ("kappa", "changed", "uncertainty", "delta_f"):
            cells = [float(r[key]) if r[key] else np.nan for r in want]
            np.testing.assert_allclose(run[key], cells, atol=1e-6, equal_nan=True)
        assert np.isnan(run["kappa"][0]) and not np.isnan(run["kappa"][1])
    assert [s["strategy"] for s in got.summary] == SCORERS
    assert all(s["seeds"] == 2 for s in got.summary)
    # The summary returned is summary.csv's, column by column.
    with open(py / "summary.csv", newline="") as f:
        table = list(csv.DictReader(f))
    for s, r in zip(got.summary, table):
        assert list(s) == ["strategy"] + list(r)[1:]
        assert s["verdict"] == r["verdict"]
        for key, cell in list(r.items())[1:-1]:
            v = s[key]
            if cell == "":
                assert v is None or np.isnan(v), (key, v)
            else:
                assert abs(float(cell) - v) <= 5e-5, (key, cell, v)
    assert got.summary[1]["verdict"] == "baseline" and got.summary[1]["vs_random"] is None
    # Two seeds cannot show a difference (the smallest two-sided p is 0.5).
    assert got.summary[0]["verdict"] == "no difference from random"
    assert got.summary[0]["p_random"] >= 0.5


def test_a_curve_on_arrays_is_the_curve_on_the_file_and_resumes(tmp_path, embeddings):
    train = (embeddings["features"], embeddings["labels"].astype(np.int64))
    test = (embeddings["test_features"], embeddings["test_labels"].astype(np.int64))
    on_file = alkit.curve(tmp_path / "file", data=EMBEDDINGS, scorers=SCORERS, **FLAGS)
    on_arrays = alkit.curve(tmp_path / "arrays", train=train, test=test, scorers=SCORERS, **FLAGS)
    for a, b in zip(on_file.runs, on_arrays.runs):
        np.testing.assert_array_equal(a["acc"], b["acc"])
        np.testing.assert_array_equal(a["nll"], b["nll"])
    assert (tmp_path / "arrays" / "arrays.safetensors").is_file()
    # Resuming a finished run reads the arrays it saved and gives the same records.
    again = alkit.curve(tmp_path / "arrays", resume=True)
    for a, b in zip(again.runs, on_arrays.runs):
        np.testing.assert_array_equal(a["acc"], b["acc"])
    with pytest.raises(alkit.SettingsError, match="arrays it saved"):
        alkit.curve(tmp_path / "arrays", train=train, test=test, resume=True)
    # Over a run: refused without force.
    with pytest.raises(alkit.SettingsError, match="holds a curve run"):
        alkit.curve(tmp_path / "arrays", train=train, test=test, scorers=SCORERS, **FLAGS)


def test_curve_settings_are_checked_before_any_work(tmp_path, embeddings):
    train = (embeddings["features"], embeddings["labels"].astype(np.int64))
    with pytest.raises(alkit.SettingsError, match="`bogus` is not a scorer setting; known:.*lambda"):
        alkit.curve(tmp_path / "a", data=EMBEDDINGS, scorer_settings={"bogus": 1}, **FLAGS)
    with pytest.raises(alkit.SettingsError, match="both `train` and `test`"):
        alkit.curve(tmp_path / "b", train=train, **FLAGS)
    with pytest.raises(alkit.SettingsError, match="scorers"):
        alkit.curve(tmp_path / "c", data=EMBEDDINGS, scorers=["entropyy"], **FLAGS)
    with pytest.raises(alkit.DataError, match="train labels"):
        alkit.curve(tmp_path / "d", train=(train[0], train[1].astype(np.float32)),
                    test=train, **FLAGS)
    with pytest.raises(alkit.SettingsError, match="class name"):
        alkit.curve(tmp_path / "e", train=train, test=train, classes=[str(c) for c in range(9)]
                    + ["New York, NY"], **FLAGS)
    assert not (tmp_path / "a").exists() and not (tmp_path / "c").exists()
    assert not (tmp_path / "e" / "arrays.safetensors").exists()


def test_a_run_on_arrays_resumes_from_another_folder(tmp_path, embeddings, monkeypatch):
    train = (embeddings["features"], embeddings["labels"].astype(np.int64))
    test = (embeddings["test_features"], embeddings["test_labels"].astype(np.int64))
    monkeypatch.chdir(tmp_path)
    first = alkit.curve("run", train=train, test=test, scorers=SCORERS, **FLAGS)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    again = alkit.curve(tmp_path / "run", resume=True)
    for a, b in zip(first.runs, again.runs):
        np.testing.assert_array_equal(a["acc"], b["acc"])


def test_a_stopping_rule_and_class_balance_from_python_are_the_command_line_s(
        tmp_path, alkit_bin, embeddings):
    # A rule every run meets early (no prediction changed), and class-balanced batches.
    flags = dict(FLAGS, cycles=8, query=5)
    py, cli = tmp_path / "py", tmp_path / "cli"
    got = alkit.curve(py, data=EMBEDDINGS, scorers=SCORERS, stop="overall-uncertainty",
                      scorer_settings={"class_balance": True}, **flags)
    run_cli(alkit_bin, "curve", "--data", EMBEDDINGS, "--scorer", ",".join(SCORERS),
            "--model", "linear", "--initial", 20, "--query", 5, "--cycles", 8, "--steps", 40,
            "--seeds", 2, "--stop", "overall-uncertainty", "--class-balance", "--out", cli)
    assert (py / "summary.csv").read_bytes() == (cli / "summary.csv").read_bytes()
    assert rows(py / "curve.csv") == rows(cli / "curve.csv")
    assert [s["strategy"] for s in got.summary] == ["balanced-entropy", "random"]
    for run in got.runs:
        # Each run ends at the first cycle whose normalised entropy is below 0.05, or runs out.
        below = np.flatnonzero(run["uncertainty"] < 0.05)
        end = below[0] + 1 if len(below) else 9
        assert len(run["acc"]) == end, (run["strategy"], run["uncertainty"])
    for s in got.summary:
        ends = [r["labeled"][-1] for r in got.runs if r["strategy"] == s["strategy"]]
        assert s["final_labels"] == pytest.approx(np.mean(ends))
    with pytest.raises(alkit.SettingsError, match="unknown stopping rule `kappa`") as e:
        alkit.curve(tmp_path / "bad", data=EMBEDDINGS, stop="kappa", **FLAGS)
    assert e.value.field == "stop"
