"""Mondrian (class-conditional) conformal sets from crepes, for tests/alkit/feature_methods.rs's
check of alkit's ClassConformal (acquisition/src/conformal.rs): crepes' ConformalClassifier is
fitted on the calibration items' non-conformity scores with their labels as the Mondrian
categories, and each class's column of the sets comes from predict_set with every test item
put in that class's category (as crepes' WrapClassifier does with class_cond=True), without
smoothing. The scores are given (alkit's LAC / APS / RAPS class scores), so what is compared
is the class-conditional calibration alone. Beside the sets it writes crepes' p-values: a
class whose p-value equals alpha exactly is in crepes' set (p >= alpha) and out of the split
conformal rule's (score <= the ceil((n+1)(1-alpha))-th smallest), the one place they differ.

Usage: mondrian_crepes.py IN.json OUT.json
  IN:  {"alpha": a, "classes": C, "cal_scores": [s...], "cal_labels": [y...],
        "scores": [[s per class], ...]}
  OUT: {"sets": [[0/1 per class], ...], "p": [[p per class], ...]}
Written with crepes==0.9.1, numpy==2.4.6 (scripts/refpython.sh).
"""

import json
import sys

import numpy as np
from crepes import ConformalClassifier


def main():
    with open(sys.argv[1]) as f:
        case = json.load(f)
    alpha, classes = case["alpha"], case["classes"]
    cal = np.asarray(case["cal_scores"], dtype=np.float64)
    y = np.asarray(case["cal_labels"], dtype=np.int64)
    scores = np.asarray(case["scores"], dtype=np.float64)
    cc = ConformalClassifier().fit(cal, bins=y)
    n = scores.shape[0]
    sets = np.zeros((n, classes), dtype=np.int64)
    p = np.zeros((n, classes))
    for c in range(classes):
        bins = np.full(n, c)
        sets[:, c] = cc.predict_set(scores, bins=bins, confidence=1 - alpha, smoothing=False)[:, c]
        p[:, c] = cc.predict_p(scores, bins=bins, smoothing=False)[:, c]
    with open(sys.argv[2], "w") as f:
        json.dump({"sets": sets.tolist(), "p": p.tolist()}, f)


if __name__ == "__main__":
    main()
