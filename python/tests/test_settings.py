"""The scorers' settings are declared once, in the library: Python's keyword arguments are read
into the library's type (names, types and ranges checked there), and the package's
``ScorerSettings`` lists exactly the library's settings."""

import numpy as np
import pytest

import alkit
from alkit import SettingsError


def test_the_typed_keywords_are_the_library_settings():
    library = alkit.scorer_settings()
    typed = {"lambda" if k == "lambda_" else k for k in alkit.ScorerSettings.__annotations__}
    assert typed == set(library), (typed ^ set(library))
    # The defaults the command line shows (alkit score --help) come from the same place.
    assert library["lambda"] == pytest.approx(0.3)
    assert library["knn_k"] == 50 and library["select"] == "top-k" and library["vim_dim"] is None


def _probs(n=40, c=5, seed=0):
    return np.random.default_rng(seed).dirichlet(np.ones(c), size=n).astype(np.float32)


def test_keyword_settings_change_the_scores_they_name():
    rng = np.random.default_rng(1)
    h = rng.normal(size=(40, 6)).astype(np.float32)
    w = rng.normal(size=(4, 6)).astype(np.float32)
    b = rng.normal(size=4).astype(np.float32)
    default = alkit.score("regrad", features=h, weight=w, bias=b)["regrad@last"]
    same = alkit.score("regrad", features=h, weight=w, bias=b, lambda_=np.float32(0.3))
    other = alkit.score("regrad", features=h, weight=w, bias=b, lambda_=1.5)["regrad@last"]
    np.testing.assert_array_equal(default, same["regrad@last"])
    assert not np.allclose(default, other)


def test_a_bad_setting_is_refused_naming_it():
    p = _probs()
    with pytest.raises(SettingsError, match="`bogus` is not a scorer setting; known:.*knn_k") as e:
        alkit.score("entropy", probs=p, bogus=1)
    assert e.value.field == "scorer_settings"
    for key, value in (("knn_k", -5), ("knn_k", 2.5), ("knn_k", True), ("lambda_", float("nan"))):
        with pytest.raises(SettingsError) as e:
            alkit.score("knn", probs=p, **{key: value})
        assert e.value.field == key.rstrip("_"), (key, value, e.value)
    with pytest.raises(SettingsError) as e:
        alkit.select_batch("probcover", 3, features=np.ones((5, 2), np.float32),
                           probcover_delta=3.0)
    assert e.value.field == "probcover_delta"
    with pytest.raises(SettingsError) as e:
        alkit.select_batch("coreset", 3, features=np.ones((5, 2), np.float32), mc_samples=3)
    assert e.value.field == "mc_samples"
