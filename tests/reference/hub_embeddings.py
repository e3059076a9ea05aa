# Writes a Hub dataset of embeddings as `datasets` publishes one, with pyarrow: Parquet shards
# `data/train-00000-of-00002.parquet`, `data/train-00001-of-00002.parquet` and
# `data/test-00000-of-00001.parquet`, each a `features` column of list<float> (d = 8) and an
# int64 `label` column, and a dataset card `README.md` naming the classes (`class_label`
# names, as `datasets` writes them). Beside them, `expected.safetensors` holds the same items
# as tensors (`features`, `labels`, `test_features`, `test_labels`) for the test to compare
# with what alkit reads from the shards. tests/alkit/numpy_files.rs runs it.
#
# Usage: hub_embeddings.py OUT_DIR  (pyarrow 26.0.1, numpy 2.4.6, safetensors 0.8.0)
import os
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from safetensors.numpy import save_file

out = sys.argv[1]
os.makedirs(os.path.join(out, "data"), exist_ok=True)
rng = np.random.default_rng(11)
d, classes = 8, ["cat", "dog", "bird"]


def split(n):
    y = np.arange(n) % len(classes)
    x = (rng.normal(0, 1, (n, d)) + 2.0 * y[:, None]).astype(np.float32)
    return x, y.astype(np.int64)


def shard(path, x, y):
    table = pa.table({"features": pa.array(list(x), type=pa.list_(pa.float32())), "label": y})
    pq.write_table(table, path, row_group_size=10)


x1, y1 = split(30)
x2, y2 = split(25)
xt, yt = split(12)
shard(os.path.join(out, "data", "train-00000-of-00002.parquet"), x1, y1)
shard(os.path.join(out, "data", "train-00001-of-00002.parquet"), x2, y2)
shard(os.path.join(out, "data", "test-00000-of-00001.parquet"), xt, yt)
names = "".join(f"          '{i}': {c}\n" for i, c in enumerate(classes))
with open(os.path.join(out, "README.md"), "w") as f:
    f.write(
        "---\ndataset_info:\n  features:\n  - name: features\n    sequence: float32\n"
        f"  - name: label\n    dtype:\n      class_label:\n        names:\n{names}---\n"
    )
save_file(
    {
        "features": np.concatenate([x1, x2]),
        "labels": np.concatenate([y1, y2]),
        "test_features": xt,
        "test_labels": yt,
    },
    os.path.join(out, "expected.safetensors"),
)
