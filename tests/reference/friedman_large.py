"""Writes the Friedman #1 pool and test split of the regression batch-selection reproduction
(docs/reproductions.md, "Batch selection for regression"), too large to ship in data/:

  friedman_train.csv (10,000 rows), friedman_test.csv (5,000 rows)
      sklearn.datasets.make_friedman1(n_samples=15000, n_features=10, noise=1.0,
      random_state=1): the `fried` task of Holzmüller et al. 2023's benchmark (10 inputs
      uniform on [0, 1], y = 10 sin(pi x1 x2) + 20 (x3 - 0.5)^2 + 10 x4 + 5 x5 + N(0, 1)); the
      first 10,000 rows are the pool, the rest the test split.

Same format as data/regression/ (tests/reference/regression_data.py's writer: ids f00000..,
float32 shortest reprs); deterministic.

Usage:  python tests/reference/friedman_large.py OUT_DIR
"""
import os
import sys

from sklearn.datasets import make_friedman1

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from regression_data import write_csv  # noqa: E402


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    X, y = make_friedman1(n_samples=15000, n_features=10, noise=1.0, random_state=1)
    ids = [f"f{i:05d}" for i in range(len(X))]
    header = ["id"] + [f"x{j + 1}" for j in range(10)] + ["y"]
    write_csv(os.path.join(out, "friedman_train.csv"), header, ids[:10000], X[:10000], y[:10000])
    write_csv(os.path.join(out, "friedman_test.csv"), header, ids[10000:], X[10000:], y[10000:])


if __name__ == "__main__":
    main()
