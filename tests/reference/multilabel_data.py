"""Writes the small multi-label data set alkit ships under data/multilabel/ (see its
README.md), from scikit-learn:

  tags_train.csv (1,000 rows), tags_test.csv (500 rows)
      sklearn.datasets.make_multilabel_classification(n_samples=1500, n_features=20,
      n_classes=6, n_labels=2, length=50, allow_unlabeled=False, random_state=0): McCallum's
      generative model of documents as bags of words, each of 6 topics a label; the features
      x1..x20 are word counts, the labels t0..t5 the topics the document was drawn from
      (at least one each). The first 1,000 rows train, the rest test. Columns
      id,x1,...,x20,tags; tags are the label names joined by "|" in label order; ids
      m0000..m1499 in generation order.

Counts are written as integers; lines end in "\\n", no quoting. The output is a pure function
of the pinned libraries (make_multilabel_classification draws from numpy's legacy
RandomState(0), whose stream numpy keeps fixed): rerunning writes identical bytes.

Usage:  python tests/reference/multilabel_data.py [OUT_DIR]   # default: data/multilabel
Written with Python 3.11, numpy==2.4.6, scikit-learn==1.9.1 (scripts/refpython.sh).
"""

import hashlib
import os
import sys

import numpy as np
from sklearn.datasets import make_multilabel_classification

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "..", "..", "data", "multilabel")
NAMES = [f"t{j}" for j in range(6)]


def write_csv(path, ids, X, Y):
    header = ["id"] + [f"x{j + 1}" for j in range(X.shape[1])] + ["tags"]
    lines = [",".join(header)]
    for i, row, y in zip(ids, X, Y):
        tags = "|".join(n for n, v in zip(NAMES, y) if v == 1)
        lines.append(",".join([i] + [str(int(v)) for v in row] + [tags]))
    with open(path, "w", newline="\n") as f:
        f.write("\n".join(lines) + "\n")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT
    os.makedirs(out, exist_ok=True)
    X, Y = make_multilabel_classification(
        n_samples=1500,
        n_features=20,
        n_classes=6,
        n_labels=2,
        length=50,
        allow_unlabeled=False,
        random_state=0,
    )
    assert np.all(X == np.round(X)) and Y.sum(axis=1).min() >= 1
    ids = [f"m{i:04d}" for i in range(len(X))]
    write_csv(os.path.join(out, "tags_train.csv"), ids[:1000], X[:1000], Y[:1000])
    write_csv(os.path.join(out, "tags_test.csv"), ids[1000:], X[1000:], Y[1000:])
    for name in ["tags_train.csv", "tags_test.csv"]:
        with open(os.path.join(out, name), "rb") as f:
            print(name, hashlib.sha256(f.read()).hexdigest())


if __name__ == "__main__":
    main()
