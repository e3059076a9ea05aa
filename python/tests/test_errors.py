"""Errors cross into Python as exceptions of their kind with the library's message and the
setting, file and line they name; hostile inputs are refused, never read as garbage."""

from __future__ import annotations

import numpy as np
import pytest

import alkit
from alkit.errors import AlkitError, DataError, FileError, SettingsError, StateError


def test_unknown_scorer_is_a_settings_error_naming_the_choices():
    with pytest.raises(SettingsError) as e:
        alkit.score("entropyy", probs=np.full((2, 2), 0.5, np.float32))
    assert e.value.field == "scorers"
    assert "entropy" in str(e.value) and isinstance(e.value, ValueError)
    assert isinstance(e.value, AlkitError)


def test_bad_probabilities_are_a_data_error():
    p = np.array([[0.5, 0.5], [0.9, 0.3]], np.float32)
    with pytest.raises(DataError, match="row 1"):
        alkit.score("entropy", probs=p)
    with pytest.raises(DataError):
        alkit.score("entropy", probs=np.array([[np.nan, 1.0]], np.float32))


def test_shapes_and_dtypes_are_checked_before_the_library():
    with pytest.raises(DataError, match="probs: expected 2 axes"):
        alkit.score("entropy", probs=np.ones(3, np.float32))
    with pytest.raises(DataError, match="dtype"):
        alkit.score("entropy", probs=np.array([["a", "b"]]))
    with pytest.raises(DataError, match="integers"):
        alkit.calibration(np.full((2, 2), 0.5, np.float32), np.array([0.0, 1.5]))
    with pytest.raises(DataError, match="label -1") as e:
        alkit.calibration(np.full((2, 2), 0.5, np.float32), np.array([0, -1]))
    assert e.value.field == "labels"
    with pytest.raises(SettingsError, match="layout"):
        alkit.score("bald", draws=np.full((2, 2, 2), 0.5, np.float32), layout="cnt")


def test_mismatched_arrays_are_refused(model):
    with pytest.raises(DataError, match="bias"):
        alkit.score("energy", features=model["h"], weight=model["w"], bias=model["b"][:3])
    with pytest.raises(DataError, match="features"):
        alkit.score("energy", features=model["h"][:, :5], weight=model["w"], bias=model["b"])
    with pytest.raises(DataError):
        alkit.score("entropy", probs=model["probs"], draws=np.full((3, 10, 2), 0.1, np.float32))


def test_selecting_more_than_there_are_is_a_settings_error():
    with pytest.raises(SettingsError) as e:
        alkit.select(np.ones(3, np.float32), 4)
    assert e.value.field == "k"


def test_files_and_sessions_errors_carry_their_path(tmp_path):
    with pytest.raises(StateError) as e:
        alkit.Session(tmp_path / "nothing")
    assert e.value.path is not None and "nothing" in e.value.path
    with pytest.raises(AlkitError) as e:
        alkit.score("entropy", checkpoint=tmp_path / "missing", data=tmp_path / "none")
    assert e.value.path is not None and "missing" in e.value.path


def test_arrays_and_files_are_not_mixed(model, tmp_path):
    with pytest.raises(SettingsError, match="not both"):
        alkit.score("entropy", probs=model["probs"], checkpoint=tmp_path, data=tmp_path)


def test_features_without_their_last_layer_serve_only_distances(model):
    with pytest.raises(SettingsError, match="energy"):
        alkit.score("energy", features=model["h"])
    got = alkit.score(["knn", "mahalanobis"], features=model["h"], train_features=model["train_h"],
                      train_labels=model["train_y"], knn_k=5)
    with_layer = alkit.score(["knn", "mahalanobis"], features=model["h"], weight=model["w"],
                             bias=model["b"], train_features=model["train_h"],
                             train_labels=model["train_y"], knn_k=5)
    for name in ("knn", "mahalanobis"):
        np.testing.assert_allclose(got[name], with_layer[name], rtol=1e-5, err_msg=name)


def test_hostile_shapes_and_counts_are_refused_before_allocating():
    # An empty axis beside a huge one: nothing is allocated for the huge one.
    for layout, shape in [("nct", (0, 5, 2**40)), ("ntc", (0, 2**40, 5)), ("tnc", (2**40, 0, 5))]:
        with pytest.raises(DataError, match="empty axis"):
            alkit.score("bald", draws=np.empty(shape, np.float32), layout=layout)
    # Class counts from a label or a setting, beyond the library's limit.
    h = np.zeros((2, 3), np.float32)
    for label in (2**40, 2**62):
        with pytest.raises(DataError, match="train_labels|class"):
            alkit.score("knn", features=h, train_features=h, train_labels=np.array([0, label]))
    for classes in (2**40, 2**62):
        with pytest.raises(SettingsError, match="classes"):
            alkit.select_batch("coreset", 2, features=np.random.rand(5, 3), classes=classes)
    with pytest.raises(DataError, match="logit"):
        alkit.fit_temperature(np.array([[np.nan, 0.0], [0.0, 1.0]]), np.array([0, 1]))
    with pytest.raises(SettingsError, match="candidates"):
        alkit.select_batch("batchbald", 3, draws=np.full((4, 2, 3), 0.5, np.float32), candidates=2)


def test_the_native_module_reads_any_memory_order(model):
    # The wrapper makes arrays C-ordered; the native module must read any order as numpy does.
    from alkit import _alkit

    h, w, b = model["h"], model["w"], model["b"]
    want = dict(_alkit.score_arrays(["energy"], features=h, weight=w, bias=b))["energy"]
    for variant in (np.asfortranarray(h), h[::-1][::-1], np.ascontiguousarray(h[::-1])[::-1]):
        got = dict(_alkit.score_arrays(["energy"], features=variant, weight=w, bias=b))["energy"]
        np.testing.assert_array_equal(got, want)
    d = np.random.default_rng(0).dirichlet(np.ones(4), size=(30, 6)).transpose(0, 2, 1)
    d = d.astype(np.float32)  # (30, 4, 6), strided: nct
    want = dict(_alkit.score_arrays(["bald"], draws=np.ascontiguousarray(d)))["bald"]
    for variant in (d, np.asfortranarray(d)):
        np.testing.assert_array_equal(dict(_alkit.score_arrays(["bald"], draws=variant))["bald"], want)


def test_settings_the_input_kind_does_not_read_are_refused(model, tmp_path):
    with pytest.raises(SettingsError, match="split") as e:
        alkit.score("entropy", probs=model["probs"], split="test")
    assert e.value.field == "split"
    with pytest.raises(SettingsError, match="beta") as e:
        alkit.score("entropy", checkpoint=tmp_path, data=tmp_path, beta=2.0)
    assert e.value.field == "beta"
    with pytest.raises(SettingsError, match="sigma") as e:
        alkit.score("entropy", probs=model["probs"], sigma=0.1)
    assert e.value.field == "sigma"
    with pytest.raises(SettingsError, match="more than once"):
        alkit.score(["entropy", "entropy"], probs=model["probs"])


def test_negative_or_fractional_counts_are_settings_errors(model):
    s = np.ones(5, np.float32)
    for bad in (-1, 2.5, True):
        with pytest.raises(SettingsError) as e:
            alkit.select(s, bad)
        assert e.value.field == "k"
    with pytest.raises(SettingsError) as e:
        alkit.select(s, 2, seed=-3)
    assert e.value.field == "seed"
    with pytest.raises(SettingsError) as e:
        alkit.score("knn", features=model["h"], train_features=model["train_h"],
                    train_labels=model["train_y"], knn_k=-5)
    assert e.value.field == "knn_k"


def test_counts_and_seeds_past_64_bits_are_settings_errors_not_overflow():
    s = np.ones(3, np.float32)
    for kw in (dict(k=2**64), dict(k=1, seed=2**64), dict(k=-1)):
        with pytest.raises(SettingsError) as e:
            alkit.select(s, **kw)
        assert e.value.field in kw and "2**" in str(e.value)
    assert alkit.select(s, 1, method="random", seed=2**64 - 1).shape == (1,)


def test_a_view_larger_than_memory_is_refused_before_it_is_copied():
    # One value broadcast to 10^12 items: strides of 0, four terabytes once copied. The
    # private entry point takes the view as it is (the public one copies with numpy first).
    view = np.broadcast_to(np.float32(0.5), (10**12,))
    with pytest.raises(DataError) as e:
        alkit._alkit.select(view, 1)
    assert e.value.field == "scores" and "memory" in str(e.value)


def test_power_selection_refuses_negative_scores():
    with pytest.raises(SettingsError, match="softmax or softrank") as e:
        alkit.select(np.array([0.5, -0.2, 1.0], np.float32), 1, method="power")
    assert e.value.field == "select"


def test_a_thread_count_the_machine_cannot_hold_is_refused_at_import():
    import subprocess
    import sys

    code = "import alkit"
    env = dict(__import__("os").environ, RAYON_NUM_THREADS="100000")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode != 0
    assert "RAYON_NUM_THREADS=100000" in out.stderr and "SettingsError" in out.stderr


def test_errors_say_the_fix_for_the_usual_mistakes(model):
    p = model["probs"]
    # Draws stacked (T, n, C) under the default layout (n, C, T).
    draws = np.stack([p, p[::-1]])
    with pytest.raises(DataError, match="layout='tnc'") as e:
        alkit.score("bald", draws=draws)
    assert e.value.field == "draws"
    assert alkit.score("bald", draws=draws, layout="tnc")["bald"].shape == (len(p),)
    # Logits where probabilities go.
    z = np.log(p + 1e-9) * 3
    with pytest.raises(DataError, match="softmax"):
        alkit.score("entropy", probs=z.astype(np.float32))
    # A transposed weight is named, not blamed on the bias.
    with pytest.raises(SettingsError, match="weight.T"):
        alkit.score("energy", features=model["h"], weight=model["w"].T.copy(), bias=model["b"])
    # score()'s dict goes to select() as it is when it holds one scorer.
    s = alkit.score("entropy", probs=p)
    assert (alkit.select(s, 3) == alkit.select(s["entropy"], 3)).all()
    with pytest.raises(SettingsError, match="select from one"):
        alkit.select(alkit.score(["entropy", "margin"], probs=p), 3)
    # Arrays where a pool's path goes.
    with pytest.raises(SettingsError, match="np.savez"):
        alkit.Session.start("s", np.zeros((3, 2), np.float32))
