"""small-text's stopping criteria on prediction sequences, for tests/alkit/statistics.rs's
check of alkit's stopping rules (src/metrics/stopping.rs): each sequence's rounds are fed in
order to small_text.stopping_criteria's KappaAverage, ClassificationChange,
OverallUncertainty (with every item as the stop set) and, for two classes, DeltaFScore, all
with their defaults; predictions are the argmax of each round's probabilities (the lowest
class on ties, as numpy's argmax). Beside each round's answers it writes the kappa small-text
computes (its scikit-learn-based adapted Cohen's kappa), the fraction of changed predictions,
the mean entropy over ln C (scipy.stats.entropy) and the change in F of DeltaFScore's formula.

Usage: stopping_smalltext.py IN.json OUT.json
  IN:  {"sequences": [{"classes": C, "rounds": [[[p...], ...], ...]}, ...]}  (rounds x n x C)
  OUT: {"sequences": [[{"stop": {"kappa-average": b, "classification-change": b,
        "overall-uncertainty": b, "delta-f": b or null}, "kappa": k or null,
        "changed": f or null, "uncertainty": u, "delta_f": d or null}, ...], ...]}
Written with small-text==1.4.1, scikit-learn==1.9.1, scipy==1.17.1, numpy==2.4.6
(scripts/refpython.sh).
"""

import json
import sys

import numpy as np
from scipy.stats import entropy
from small_text.stopping_criteria import (
    ClassificationChange,
    DeltaFScore,
    KappaAverage,
    OverallUncertainty,
)
from small_text.stopping_criteria.kappa import _adapted_cohen_kappa_score


def run(seq):
    c = seq["classes"]
    rules = {
        "kappa-average": KappaAverage(c),
        "classification-change": ClassificationChange(c),
        "overall-uncertainty": OverallUncertainty(c),
    }
    if c == 2:
        rules["delta-f"] = DeltaFScore(2)
    out, last = [], None
    for proba in seq["rounds"]:
        proba = np.array(proba, dtype=np.float64)
        pred = np.argmax(proba, axis=1)
        idx = np.arange(len(pred))
        stop = {name: bool(r.stop(predictions=pred, proba=proba, indices_stopping=idx))
                for name, r in rules.items()}
        stop.setdefault("delta-f", None)
        row = {"stop": stop, "kappa": None, "changed": None, "delta_f": None,
               "uncertainty": float(np.mean(np.apply_along_axis(entropy, 1, proba)) / np.log(c))}
        if last is not None:
            row["kappa"] = float(_adapted_cohen_kappa_score(pred, last, labels=np.arange(c)))
            row["changed"] = float(np.mean(pred != last))
            if c == 2:
                a = int(((last == 1) & (pred == 1)).sum())
                b = int(((last == 1) & (pred == 0)).sum())
                d = int(((last == 0) & (pred == 1)).sum())
                row["delta_f"] = None if 2 * a + b + d == 0 else 1 - 2 * a / (2 * a + b + d)
        out.append(row)
        last = pred
    return out


inp = json.load(open(sys.argv[1]))
json.dump({"sequences": [run(s) for s in inp["sequences"]]}, open(sys.argv[2], "w"))
