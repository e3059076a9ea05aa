"""Two-moons surfaces and Platt scaling from Python: alkit.fit_platt against scikit-learn's
fit on the same scores (tests/fixtures/platt_sklearn.json, written by
tests/reference/platt_sklearn.py; scikit-learn is not needed here), and alkit.surface giving
the command line's figures and files for the same settings."""
import json
from pathlib import Path

import numpy as np
import pytest

import alkit
from alkit import _alkit
from conftest import run_cli

FIXTURE = Path(__file__).parents[2] / "tests" / "fixtures" / "platt_sklearn.json"


@pytest.mark.parametrize("case", json.loads(FIXTURE.read_text())["cases"], ids=lambda c: c["name"])
def test_fit_platt_matches_scikit_learn(case):
    slope, intercept = alkit.fit_platt(np.array(case["scores"]), np.array(case["positive"]))
    assert slope == pytest.approx(case["slope"], rel=1e-4, abs=1e-4)
    assert intercept == pytest.approx(case["intercept"], rel=1e-4, abs=1e-4)
    # 0/1 integers read as booleans.
    ints = np.array(case["positive"], dtype=np.int64)
    assert alkit.fit_platt(np.array(case["scores"]), ints) == (slope, intercept)


def test_fit_platt_refuses_what_it_cannot_read():
    with pytest.raises(alkit.DataError, match="item 1"):
        alkit.fit_platt(np.array([0.5, np.nan]), np.array([True, False]))
    with pytest.raises(alkit.DataError, match="0 or 1"):
        alkit.fit_platt(np.array([0.5, 1.0]), np.array([2, 0]))
    with pytest.raises(alkit.DataError, match="real numbers"):
        alkit.fit_platt(np.array(["a", "b"]), np.array([True, False]))
    with pytest.raises(alkit.DataError, match="real numbers"):
        alkit.fit_platt(np.array([1j, 2j]), np.array([True, False]))
    with pytest.raises(alkit.AlkitError, match="2 scores for 3 labels"):
        alkit.fit_platt(np.array([0.5, 1.0]), np.array([True, False, True]))


def test_surface_settings_are_the_librarys():
    library = json.loads(_alkit.surface_settings())
    assert set(alkit.SurfaceSettings.__annotations__) == set(library)


def test_surface_gives_the_command_lines_figures_and_files(tmp_path, alkit_bin):
    settings = dict(points=200, noise=0.125, steps=200, mc_samples=4, seed=2)
    got = alkit.surface(model="bayes-by-backprop", scorer="bald", beside=["platt"],
                        out=tmp_path / "py", **settings)
    run_cli(alkit_bin, "surface", "--model", "bayes-by-backprop", "--scorer", "bald",
            "--beside", "platt", "--points", 200, "--noise", 0.125, "--steps", 200,
            "--mc-samples", 4, "--seed", 2, "--out", tmp_path / "cli")
    for part in ["metrics.json", "beside/platt/metrics.json", "beside.png"]:
        assert (tmp_path / "py" / part).read_bytes() == (tmp_path / "cli" / part).read_bytes(), part
    metrics = json.loads((tmp_path / "cli" / "metrics.json").read_text())
    assert got["auroc_far"] == metrics["auroc_far"] and got["accuracy"] == metrics["accuracy"]
    assert got["scorer"] == "bald" and got["grid"].shape == (200, 200)
    assert np.isfinite(got["gradient"]).all() and got["train_points"].shape == (200, 3)
    # Draws of the network disagree near the boundary: the mutual information is not all zero.
    assert got["grid"].max() > 0
    (platt,) = got["beside"]
    assert platt["model"] == "Platt-scaled MLP" and platt["scorer"] == "entropy"


def test_surface_refuses_unknown_settings_and_models():
    with pytest.raises(alkit.SettingsError, match="pionts"):
        alkit.surface(pionts=10)
    with pytest.raises(alkit.SettingsError, match="points"):
        alkit.surface(points="many")
    with pytest.raises(alkit.SettingsError, match="bayes-by-backprop"):
        alkit.surface(model="mpl")
    with pytest.raises(alkit.SettingsError, match="list of model names"):
        alkit.surface(beside="platt")
    # Refused before training, with or without files to write, as the command line does.
    with pytest.raises(alkit.SettingsError, match="twice"):
        alkit.surface(model="mlp", beside=["platt", "mlp"])
    with pytest.raises(alkit.SettingsError, match="beside"):
        alkit.surface(model="mlp", beside=["mpl"])
    with pytest.raises(alkit.SettingsError, match="prior_sigma"):
        alkit.surface(model="bayes-by-backprop", prior_sigma=0.0)
