"""Class-balanced top-k batches in numpy, for tests/alkit/statistics.rs's check of alkit's
class balancing (acquisition/src/balance.rs): per case, the slots each predicted class gets
(one at a time to the class whose labeled count plus slots is lowest among the classes that
still have unpicked candidates, ties to the class ranked first in the given order: the levels
small-text's ClassBalancer fills), then each class's highest scores (ties to the lower
position), the batch sorted by score, best first (ties to the lower position).

Usage: class_balance.py IN.json OUT.json
  IN:  {"cases": [{"scores": [s...], "predicted": [c...], "labeled": [count per class],
        "n": n, "order": [class...]}, ...]}
  OUT: {"cases": [{"quotas": [q per class], "picks": [position...]}, ...]}
Written with numpy==2.4.6 (scripts/refpython.sh).
"""

import json
import sys

import numpy as np


def quotas(labeled, available, n, order):
    labeled = np.asarray(labeled, dtype=np.int64)
    available = np.asarray(available, dtype=np.int64)
    rank = np.empty(len(order), dtype=np.int64)
    rank[np.asarray(order)] = np.arange(len(order))
    q = np.zeros_like(labeled)
    for _ in range(n):
        level = np.where(q < available, labeled + q, np.iinfo(np.int64).max)
        # lexsort's last key is the primary one.
        q[np.lexsort((rank, level))[0]] += 1
    return q


def run(case):
    scores = np.asarray(case["scores"], dtype=np.float64)
    predicted = np.asarray(case["predicted"], dtype=np.int64)
    classes = len(case["labeled"])
    available = np.bincount(predicted, minlength=classes)
    q = quotas(case["labeled"], available, case["n"], case["order"])
    picks = []
    for c in range(classes):
        members = np.flatnonzero(predicted == c)
        best = members[np.lexsort((members, -scores[members]))][: q[c]]
        picks.extend(best.tolist())
    picks = np.asarray(picks, dtype=np.int64)
    picks = picks[np.lexsort((picks, -scores[picks]))]
    return {"quotas": q.tolist(), "picks": picks.tolist()}


def main():
    with open(sys.argv[1]) as f:
        cases = json.load(f)["cases"]
    with open(sys.argv[2], "w") as f:
        json.dump({"cases": [run(c) for c in cases]}, f)


if __name__ == "__main__":
    main()
