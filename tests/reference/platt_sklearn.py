"""Platt scaling as scikit-learn fits it, for alkit's `Platt::fit` to be checked against.

Writes tests/fixtures/platt_sklearn.json: for each case the held-out scores, whether each item
is positive, and scikit-learn's slope and intercept (its `_sigmoid_calibration`, the fit behind
`CalibratedClassifierCV(method="sigmoid")`, converted to alkit's sign: `P = sigmoid(a s + b)`),
and its probabilities at the scores. Run: python tests/reference/platt_sklearn.py
(numpy and scikit-learn from PyPI).
"""

import json
import pathlib

import numpy as np
import sklearn
from sklearn.calibration import _sigmoid_calibration


def case(name, scores, positive):
    a, b = _sigmoid_calibration(np.asarray(scores, dtype=np.float64), np.asarray(positive, dtype=np.int64))
    slope, intercept = -float(a), -float(b)
    probs = 1.0 / (1.0 + np.exp(-(slope * np.asarray(scores) + intercept)))
    return {
        "name": name,
        "scores": [float(s) for s in scores],
        "positive": [bool(p) for p in positive],
        "slope": slope,
        "intercept": intercept,
        "probabilities": [float(p) for p in probs],
    }


def main():
    rng = np.random.default_rng(7)
    cases = []
    # Overconfident logits of a noisy binary problem.
    y = rng.random(300) < 0.4
    s = np.where(y, 1.0, -1.0) * 3.0 + rng.normal(0.0, 2.5, 300)
    cases.append(case("noisy", s, y))
    # Perfectly separated items: the smoothed targets keep the fit finite.
    y = np.arange(40) >= 20
    s = np.where(y, 1.0, -1.0) * (1.0 + rng.random(40))
    cases.append(case("separated", s, y))
    # Scores beyond 30: scikit-learn rescales them before fitting; the answer must not change.
    y = rng.random(120) < 0.7
    s = np.where(y, 40.0, -25.0) + rng.normal(0.0, 30.0, 120)
    cases.append(case("large scores", s, y))
    # Few positives, underconfident scores.
    y = rng.random(200) < 0.08
    s = np.where(y, 0.3, -0.3) + rng.normal(0.0, 0.2, 200)
    cases.append(case("rare positives", s, y))
    out = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "platt_sklearn.json"
    out.write_text(json.dumps({"sklearn": sklearn.__version__, "numpy": np.__version__, "cases": cases}, indent=1) + "\n")
    print(f"wrote {out} (scikit-learn {sklearn.__version__})")


if __name__ == "__main__":
    main()
