"""alkit.Session and the command line take turns on one session folder: the same steps give
the same bytes in session.json whichever side runs them, and each side continues what the
other saved."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

import alkit
from conftest import EMBEDDINGS, run_cli

ARGS = dict(model="linear", steps=40, seed=3)


def truth(embeddings, rows):
    return [(r["id"], str(int(embeddings["labels"][r["index"]]))) for r in rows]


def test_python_and_cli_sessions_write_the_same_bytes(tmp_path, alkit_bin, embeddings):
    py_dir, cli_dir = tmp_path / "py", tmp_path / "cli"
    s = alkit.Session.start(py_dir, EMBEDDINGS, **ARGS)
    run_cli(alkit_bin, "init", "--pool", EMBEDDINGS, "--state", cli_dir, "--model", "linear",
            "--steps", 40, "--seed", 3)
    same = lambda: (py_dir / "session.json").read_bytes() == (cli_dir / "session.json").read_bytes()
    assert same()

    for round, scorer in enumerate(["margin", "margin", "least-confidence"]):
        # Round 1 has no label yet: a random batch without scores; then the model's.
        py_csv, cli_csv = tmp_path / f"py{round}.csv", tmp_path / f"cli{round}.csv"
        batch = s.query(12, scorer=scorer, out=py_csv)
        run_cli(alkit_bin, "query", "--state", cli_dir, "--n", 12, "--scorer", scorer,
                "--out", cli_csv)
        with open(cli_csv, newline="") as f:
            cli_rows = list(csv.DictReader(f))
        assert [r["id"] for r in cli_rows] == [r["id"] for r in batch]
        want = [np.float32(r["score"]) if r["score"] else None for r in cli_rows]
        assert want == [r["score"] and np.float32(r["score"]) for r in batch]
        assert (want[0] is None) == (round == 0)
        assert py_csv.read_bytes() == cli_csv.read_bytes()
        assert same()

        answers = truth(embeddings, batch)
        assert s.teach(dict(answers)) == 12
        with open(tmp_path / "answers.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["id", "label"])
            w.writerows(answers)
        run_cli(alkit_bin, "teach", "--state", cli_dir, "--labels", tmp_path / "answers.csv")
        assert same()


def test_each_side_continues_what_the_other_saved(tmp_path, alkit_bin, embeddings):
    d = tmp_path / "s"
    run_cli(alkit_bin, "init", "--pool", EMBEDDINGS, "--state", d, "--model", "linear",
            "--steps", 40)
    s = alkit.Session(d)
    first = s.query(8, scorer="entropy")
    run_cli(alkit_bin, "query", "--state", d, "--n", 8, "--include-pending",
            "--out", tmp_path / "q.csv")
    assert s.status()["rounds"] == 2 and s.status()["pending"] == 16
    n = s.teach(truth(embeddings, first))
    assert n == 8
    cli_status = json.loads(run_cli(alkit_bin, "status", "--state", d, "--json"))
    assert cli_status == s.status()
    assert cli_status["labeled"] == 8 and sum(cli_status["per_class"].values()) == 8
    # The 8 answers were taught after round 2: one per-round entry, the same class counts.
    assert [r["round"] for r in cli_status["per_round"]] == [2]
    assert cli_status["per_round"][0]["per_class"] == cli_status["per_class"]


def test_a_stopping_rule_and_class_balance_in_a_session_as_on_the_command_line(
        tmp_path, alkit_bin, embeddings):
    py_dir, cli_dir = tmp_path / "py", tmp_path / "cli"
    s = alkit.Session.start(py_dir, EMBEDDINGS, stop="classification-change", **ARGS)
    run_cli(alkit_bin, "init", "--pool", EMBEDDINGS, "--state", cli_dir, "--model", "linear",
            "--steps", 40, "--seed", 3, "--stop", "classification-change")
    same = lambda: (py_dir / "session.json").read_bytes() == (cli_dir / "session.json").read_bytes()
    assert same()
    assert s.status()["stopping"] is None
    for round in range(3):
        batch = s.query(10, scorer="margin", class_balance=True)
        run_cli(alkit_bin, "query", "--state", cli_dir, "--n", 10, "--scorer", "margin",
                "--class-balance", "--out", tmp_path / f"q{round}.csv")
        assert same()
        answers = truth(embeddings, batch)
        s.teach(answers)
        with open(tmp_path / "answers.csv", "w", newline="") as f:
            csv.writer(f).writerows([("id", "label"), *answers])
        run_cli(alkit_bin, "teach", "--state", cli_dir, "--labels", tmp_path / "answers.csv")
    # The first round trained no model; rounds 2 and 3 measured the stop set.
    status = s.status()
    stopping = status["stopping"]
    assert stopping["round"] == 3 and stopping["rule"] == "classification-change"
    assert 0.0 <= stopping["measure"]["changed"] <= 1.0
    assert stopping["stop"] == (stopping["measure"]["changed"] == 0.0)
    assert set(stopping["since"]) == {"kappa-average", "classification-change",
                                      "overall-uncertainty", "delta-f"}
    assert status["last_round"]["scorer"] == "balanced-margin"
    printed = run_cli(alkit_bin, "status", "--state", cli_dir)
    assert "stopping  round 3: kappa" in printed and "stop rule classification-change" in printed
    with pytest.raises(alkit.SettingsError, match="unknown stopping rule") as e:
        alkit.Session.start(tmp_path / "bad", EMBEDDINGS, stop="never", **ARGS)
    assert e.value.field == "stop"


def test_a_bad_answer_changes_nothing(tmp_path, embeddings):
    s = alkit.Session.start(tmp_path / "s", EMBEDDINGS, **ARGS)
    batch = s.query(4)
    before = (tmp_path / "s" / "session.json").read_bytes()
    answers = truth(embeddings, batch)
    answers[2] = (answers[2][0], "eleven")
    with pytest.raises(alkit.AlkitError, match="eleven"):
        s.teach(answers)
    assert (tmp_path / "s" / "session.json").read_bytes() == before
    with pytest.raises(alkit.DataError):
        s.teach([("only-one",)])


def test_an_existing_session_is_not_replaced(tmp_path):
    alkit.Session.start(tmp_path / "s", EMBEDDINGS, **ARGS)
    with pytest.raises(alkit.StateError, match="already holds a session"):
        alkit.Session.start(tmp_path / "s", EMBEDDINGS, **ARGS)


def test_label_studio_batches(tmp_path):
    s = alkit.Session.start(tmp_path / "s", EMBEDDINGS, **ARGS)
    s.query(5, out=tmp_path / "tasks.json", format="label-studio")
    tasks = json.loads((tmp_path / "tasks.json").read_text())
    assert len(tasks) == 5 and (tmp_path / "tasks.xml").exists()
    with pytest.raises(alkit.SettingsError, match="out"):
        s.query(5, out=tmp_path / "s" / "session.json")


def test_label_studio_exports_teach_by_alkit_id_and_repeats_are_skipped(tmp_path):
    # Exports a real Label Studio 1.23.2 wrote (tests/fixtures/label-studio/1.23.2) of
    # tasks on the shipped IDX subset, whose ids are positions.
    root = EMBEDDINGS.parents[2]
    fixtures = root / "tests" / "fixtures" / "label-studio" / "1.23.2"
    s = alkit.Session.start(tmp_path / "s", root / "data", model="mlp", steps=10)
    before = s.status()["labeled"]
    assert s.teach(fixtures / "export.csv") == 3
    for name in ["export.json", "export.min.json", "export.tsv"]:
        assert s.teach(fixtures / name) == 0, name
    assert s.status()["labeled"] == before + 3


def test_a_session_on_a_frozen_backbone_writes_what_init_backbone_writes(tmp_path, alkit_bin):
    data = EMBEDDINGS.parents[1]
    ck, cache = tmp_path / "cnn", tmp_path / "cache"
    run_cli(alkit_bin, "train", "--data", data, "--steps", 20, "--out", ck)
    py_dir, cli_dir = tmp_path / "py", tmp_path / "cli"
    alkit.Session.start(py_dir, str(data), backbone=str(ck), embed_cache=str(cache), steps=20)
    run_cli(alkit_bin, "init", "--pool", data, "--state", cli_dir, "--backbone", ck,
            "--embed-cache", cache, "--steps", 20)
    assert (py_dir / "session.json").read_bytes() == (cli_dir / "session.json").read_bytes()
    state = json.loads((py_dir / "session.json").read_text())
    # One embedding of the pool, shared by both; each round trains a linear head on it.
    assert [p.suffix for p in cache.iterdir()] == [".safetensors"]
    assert state["source"] == str(next(cache.iterdir()).resolve())
    assert state["config"]["arch"]["hidden"] == []
