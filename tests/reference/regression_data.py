"""Writes the two small regression data sets alkit ships under data/regression/ (see its
README.md), from scikit-learn:

  friedman1_train.csv (1,000 rows), friedman1_test.csv (500 rows)
      sklearn.datasets.make_friedman1(n_samples=1500, n_features=10, noise=1.0,
      random_state=0): x1..x10 ~ U[0, 1] and y = 10 sin(pi x1 x2) + 20 (x3 - 0.5)^2 + 10 x4
      + 5 x5 + N(0, 1) (x6..x10 do not enter y); the first 1,000 rows train, the rest test.
      Columns id,x1,...,x10,y; ids f0000..f1499 in generation order (unique across both files).
  diabetes_train.csv (342 rows), diabetes_test.csv (100 rows)
      sklearn.datasets.load_diabetes() (scikit-learn's bundled copy of the Efron et al. 2004
      data: 442 patients, the ten features mean-centred and scaled so that each column's sum of
      squares is 1), rows permuted by numpy.random.default_rng(0).permutation(442), the first 342
      train, the last 100 test. Columns id,age,sex,bmi,bp,s1,s2,s3,s4,s5,s6,progression; ids
      d000..d441 are the rows' indices in scikit-learn's order (so each file lists them in the
      permuted order).

Every number is written as the shortest repr of its float32 value (str(numpy.float32(v)):
"0.5488135", "151.0", "1e-05"), so a float32 reader gets exactly the value alkit uses; lines end
in "\\n", no index column, no quoting. The output is a pure function of the pinned libraries
(make_friedman1 draws from numpy's legacy RandomState(0), whose stream numpy keeps fixed; the
diabetes permutation from default_rng(0)): rerunning writes identical bytes.

Usage:  python tests/reference/regression_data.py [OUT_DIR]   # default: data/regression
Written with Python 3.11, numpy==2.4.6, scikit-learn==1.9.1 (scripts/refpython.sh).
"""

import hashlib
import os
import sys

import numpy as np
import sklearn
from sklearn.datasets import load_diabetes, make_friedman1

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "..", "..", "data", "regression")


def f32(v):
    x = np.float32(v)
    if not np.isfinite(x):
        raise ValueError(f"non-finite value {v}")
    return str(x)


def write_csv(path, header, ids, X, y):
    lines = [",".join(header)]
    for i, row, t in zip(ids, X, y):
        lines.append(",".join([i] + [f32(v) for v in row] + [f32(t)]))
    with open(path, "w", newline="\n") as f:
        f.write("\n".join(lines) + "\n")


def main():
    out = os.path.normpath(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT)
    os.makedirs(out, exist_ok=True)
    written = []

    X, y = make_friedman1(n_samples=1500, n_features=10, noise=1.0, random_state=0)
    ids = [f"f{i:04d}" for i in range(len(X))]
    header = ["id"] + [f"x{j}" for j in range(1, 11)] + ["y"]
    for name, sl in (("friedman1_train.csv", slice(0, 1000)), ("friedman1_test.csv", slice(1000, 1500))):
        write_csv(os.path.join(out, name), header, ids[sl], X[sl], y[sl])
        written.append(name)

    d = load_diabetes()
    assert list(d.feature_names) == ["age", "sex", "bmi", "bp", "s1", "s2", "s3", "s4", "s5", "s6"]
    assert d.data.shape == (442, 10)
    perm = np.random.default_rng(0).permutation(len(d.data))
    ids = np.array([f"d{i:03d}" for i in range(len(d.data))])
    header = ["id"] + list(d.feature_names) + ["progression"]
    for name, rows in (("diabetes_train.csv", perm[:342]), ("diabetes_test.csv", perm[342:])):
        write_csv(os.path.join(out, name), header, ids[rows], d.data[rows], d.target[rows])
        written.append(name)

    print(f"numpy {np.__version__}, scikit-learn {sklearn.__version__}", file=sys.stderr)
    for name in written:
        path = os.path.join(out, name)
        with open(path, "rb") as f:
            data = f.read()
        rows = data.count(b"\n") - 1
        print(f"{hashlib.sha256(data).hexdigest()}  {name}  ({len(data)} bytes, {rows} rows)")


if __name__ == "__main__":
    main()
