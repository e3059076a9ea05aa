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
    with pytest.raises(SettingsError, match="label -1"):
        alkit.calibration(np.full((2, 2), 0.5, np.float32), np.array([0, -1]))
    with pytest.raises(SettingsError, match="layout"):
        alkit.score("bald", draws=np.full((2, 2, 2), 0.5, np.float32), layout="cnt")


def test_mismatched_arrays_are_refused(model):
    with pytest.raises(SettingsError, match="bias"):
        alkit.score("energy", features=model["h"], weight=model["w"], bias=model["b"][:3])
    with pytest.raises(SettingsError, match="features"):
        alkit.score("energy", features=model["h"][:, :5], weight=model["w"], bias=model["b"])
    with pytest.raises(SettingsError):
        alkit.score("entropy", probs=model["probs"], draws=np.full((3, 10, 2), 0.1, np.float32))


def test_selecting_more_than_there_are_is_a_settings_error():
    with pytest.raises(SettingsError) as e:
        alkit.select(np.ones(3, np.float32), 4)
    assert e.value.field == "k"


def test_files_and_sessions_errors_carry_their_path(tmp_path):
    with pytest.raises(StateError) as e:
        alkit.Session(tmp_path / "nothing")
    assert e.value.path is not None and "nothing" in e.value.path
    with pytest.raises((FileError, AlkitError)) as e:
        alkit.score("entropy", checkpoint=tmp_path / "missing", data=tmp_path / "none")
    assert "missing" in str(e.value) or "none" in str(e.value)


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
