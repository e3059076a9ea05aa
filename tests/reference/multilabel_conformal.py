"""MAPIE 1.6's multi-label conformal guarantees on the label probabilities alkit computes, for
tests/alkit/multilabel.rs:

  recall   MultiLabelClassificationController(risk="recall", method="crc",
           target_level=1 - alpha): conformal risk control of the false-negative rate over its
           default thresholds 0, 0.01, .., 0.99 (sets: labels with p > lambda), calibrated on
           the calibration rows; `lambda` is its best_predict_param
  lac      per label, SplitConformalClassifier(conformity_score="lac", prefit=True,
           confidence_level=1 - alpha) on the binary probabilities (1 - p, p) of that label;
           `sets` are its prediction sets on the evaluation rows (lists of answers 0 and 1)

Both wrap the probabilities in an identity "model" (its inputs are the probabilities), so
MAPIE sees exactly the numbers alkit does.

Usage: multilabel_conformal.py IN.json OUT.json
  IN:  {"labels": L, "alpha": a, "cal_truth": [...], "cal_probs": [...], "eval_probs": [...]}
       (row-major (n, L))
  OUT: {"lambda": l, "lac": [[[answers] per evaluation row] per label]}
Written with numpy==2.4.6, scikit-learn==1.9.1, mapie==1.6.0 (scripts/refpython.sh).
"""

import json
import sys
import warnings
from decimal import Decimal

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin


class Identity(ClassifierMixin, BaseEstimator):
    """A prefit binary 'classifier' whose inputs are already the probabilities (1 - p, p)."""

    def __init__(self):
        self.classes_ = np.arange(2)
        self.n_features_in_ = 2

    def fit(self, X, y=None):
        return self

    def predict_proba(self, X):
        return np.asarray(X, dtype=np.float64)

    def predict(self, X):
        return np.argmax(np.asarray(X), axis=1)


def main():
    from mapie.classification import SplitConformalClassifier
    from mapie.risk_control import MultiLabelClassificationController

    with open(sys.argv[1]) as f:
        d = json.load(f)
    L, alpha = d["labels"], d["alpha"]
    Yc = np.array(d["cal_truth"], dtype=int).reshape(-1, L)
    Pc = np.array(d["cal_probs"], dtype=np.float64).reshape(-1, L)
    Pe = np.array(d["eval_probs"], dtype=np.float64).reshape(-1, L)
    level = float(Decimal(1) - Decimal(repr(alpha)))

    ctl = MultiLabelClassificationController(
        predict_function=lambda X: np.asarray(X, dtype=np.float64),
        risk="recall",
        method="crc",
        target_level=level,
    )
    ctl.calibrate(Pc, Yc)
    lam = float(np.asarray(ctl.best_predict_param).ravel()[0])

    lac = []
    for j in range(L):
        scc = SplitConformalClassifier(
            estimator=Identity(), confidence_level=level, conformity_score="lac", prefit=True
        )
        cal = np.stack([1 - Pc[:, j], Pc[:, j]], axis=1)
        ev = np.stack([1 - Pe[:, j], Pe[:, j]], axis=1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            scc.conformalize(cal, Yc[:, j])
            _, sets = scc.predict_set(ev)
        lac.append([[int(a) for a in np.flatnonzero(row)] for row in sets[:, :, 0]])
    with open(sys.argv[2], "w") as f:
        json.dump({"lambda": lam, "lac": lac}, f)


if __name__ == "__main__":
    main()
