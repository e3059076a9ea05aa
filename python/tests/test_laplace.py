"""The last-layer Laplace score from arrays: alkit.score's `la` on features, a last layer and
the training features is the entropy of laplace-torch 0.3's probit predictive on the same
rows, recorded in tests/fixtures/laplace_torch.json by tests/reference/laplace_torch.py
(torch and laplace-torch are not needed here)."""
import json
from pathlib import Path

import numpy as np
import pytest

import alkit

FIXTURE = Path(__file__).parents[2] / "tests" / "fixtures" / "laplace_torch.json"


@pytest.fixture(scope="module")
def fx():
    d = json.loads(FIXTURE.read_text())
    for k in ["train_features", "test_features", "weight", "bias"]:
        d[k] = np.asarray(d[k], dtype=np.float32)
    d["train_labels"] = np.asarray(d["train_labels"], dtype=np.int64)
    return d


def arrays(fx):
    return dict(
        features=fx["test_features"],
        weight=fx["weight"],
        bias=fx["bias"],
        train_features=fx["train_features"],
        train_labels=fx["train_labels"],
    )


@pytest.mark.parametrize("hessian", ["diag", "kron", "full"])
def test_la_is_the_entropy_of_laplace_torchs_probit_predictive(fx, hessian):
    want = fx["structures"][hessian]
    got = alkit.score(
        "la", **arrays(fx), hessian=hessian, prior_precision=want["fitted"]
    )["la"]
    p = np.asarray(want["probit"])
    entropy = -(p * np.log(p)).sum(1)
    np.testing.assert_allclose(got, entropy, rtol=1e-5, atol=1e-6)
    # The prior precision fitted by the marginal likelihood is laplace-torch's optimum.
    fitted = alkit.score("la", **arrays(fx), hessian=hessian)["la"]
    np.testing.assert_allclose(fitted, entropy, rtol=1e-5, atol=1e-6)


def test_la_refuses_a_bad_prior_precision_and_a_missing_training_set(fx):
    with pytest.raises(alkit.SettingsError, match="prior_precision"):
        alkit.score("la", **arrays(fx), prior_precision=0.0)
    a = arrays(fx)
    del a["train_features"], a["train_labels"]
    with pytest.raises(alkit.AlkitError, match="training features"):
        alkit.score("la", **a)
