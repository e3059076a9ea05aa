"""Embedding files as numpy (and pyarrow, when it imports) write them, for
tests/alkit/numpy_files.rs: alkit must read these files as the writers meant them.

Usage: numpy_embeddings.py OUT_DIR

Writes into OUT_DIR:
  pool32.npy, pool16.npy, pool64.npy   np.save of one (n, d) array (float32, float16, float64)
  v2.npy, v3.npy                       the float32 pool with format version 2.0 and 3.0 headers
  fortran.npy                          the float32 pool transposed (saved in Fortran order)
  object.npy                           an object array (pickled): must be refused
  big64.npy                            a float64 beyond float32's range: must be refused
  emb.npz                              np.savez: features f32, labels, unicode ids and classes,
                                       test_features, test_labels (every item labeled)
  emb_pool.npy                         np.save of emb.npz's features alone
  emb_c.npz                            np.savez_compressed of the same, features float16
  partial.npz                          features, labels with -1 (unlabeled), integer ids
  no_features.npz                      labels alone: must be refused
  repeated_ids.npz                     ids given twice: must be refused
  *.f32                                what alkit must read for each file: the values as
                                       numpy's astype(float32) gives them, raw little-endian
  emb.parquet, emb_fixed.parquet, emb64.parquet (pyarrow only): a list<float>,
                                       fixed_size_list<float, d> and list<double> column
                                       `embedding` with `label` and `id` columns
  manifest.json                        ids, labels, classes, and whether pyarrow wrote Parquet
"""

import json
import sys
from pathlib import Path

import numpy as np

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
rng = np.random.default_rng(7)

n, d, m, k = 120, 6, 40, 3
classes = ["chat", "Hund", "猫"]
centres = rng.normal(0, 3, size=(k, d))
labels = np.arange(n) % k
test_labels = np.arange(m) % k
features = (centres[labels] + rng.normal(0, 0.5, size=(n, d))).astype(np.float32)
test_features = (centres[test_labels] + rng.normal(0, 0.5, size=(m, d))).astype(np.float32)
ids = np.array([f"doc-{i:03d}-é" for i in range(n)])


def raw(name, a):
    (out / f"{name}.f32").write_bytes(np.ascontiguousarray(a, dtype="<f4").tobytes())


# Values that are not round in any precision.
pool = rng.normal(0, 1, size=(50, 8))
np.save(out / "pool32.npy", pool.astype(np.float32))
raw("pool32", pool.astype(np.float32))
np.save(out / "pool16.npy", pool.astype(np.float16))
raw("pool16", pool.astype(np.float16).astype(np.float32))
np.save(out / "pool64.npy", pool)
raw("pool64", pool.astype(np.float32))
for v in (2, 3):
    with open(out / f"v{v}.npy", "wb") as f:
        np.lib.format.write_array(f, pool.astype(np.float32), version=(v, 0))
np.save(out / "fortran.npy", np.asfortranarray(pool.astype(np.float32)))
np.save(out / "object.npy", np.array([[1, "a"], [2, "b"]], dtype=object), allow_pickle=True)
big = pool.copy()
big[3, 5] = 1e300
np.save(out / "big64.npy", big)

np.savez(out / "emb.npz", features=features, labels=labels.astype(np.int64), ids=ids,
         classes=np.array(classes), test_features=test_features,
         test_labels=test_labels.astype(np.int32))
raw("emb", features)
np.save(out / "emb_pool.npy", features)
raw("emb_test", test_features)
np.savez_compressed(out / "emb_c.npz", features=features.astype(np.float16), labels=labels,
                    ids=ids, classes=np.array(classes),
                    test_features=test_features.astype(np.float16), test_labels=test_labels)
raw("emb_c", features.astype(np.float16).astype(np.float32))
partial = labels.copy()
partial[::4] = -1
np.savez(out / "partial.npz", features=features, labels=partial.astype(np.int16),
         ids=np.arange(1000, 1000 + n))
np.savez(out / "no_features.npz", labels=labels)
rep = ids.copy()
rep[7] = rep[3]
np.savez(out / "repeated_ids.npz", features=features, ids=rep)

manifest = {
    "ids": ids.tolist(),
    "labels": labels.tolist(),
    "test_labels": test_labels.tolist(),
    "classes": classes,
    "partial_labels": partial.tolist(),
    "parquet": False,
}
try:
    import pyarrow as pa
    import pyarrow.parquet as pq
except ImportError:
    pyarrow = None
else:
    rows = [r.tolist() for r in features]
    label = pa.array(labels, pa.int64())
    pid = pa.array(ids.tolist(), pa.string())
    pq.write_table(pa.table({"id": pid, "embedding": pa.array(rows, pa.list_(pa.float32())),
                             "label": label}), out / "emb.parquet")
    pq.write_table(pa.table({"id": pid,
                             "embedding": pa.array(rows, pa.list_(pa.float32(), d)),
                             "label": label}), out / "emb_fixed.parquet")
    rows64 = [r.tolist() for r in pool]
    pq.write_table(pa.table({"embedding": pa.array(rows64, pa.list_(pa.float64()))}),
                   out / "emb64.parquet")
    ragged = rows[:3] + [rows[3][:4]] + rows[4:]
    pq.write_table(pa.table({"embedding": pa.array(ragged, pa.list_(pa.float32()))}),
                   out / "ragged.parquet")
    holes = [list(r) for r in rows]
    holes[5][2] = None
    pq.write_table(pa.table({"embedding": pa.array(holes, pa.list_(pa.float32()))}),
                   out / "null.parquet")
    nan = [list(r) for r in rows]
    nan[9][1] = float("nan")
    pq.write_table(pa.table({"embedding": pa.array(nan, pa.list_(pa.float32()))}),
                   out / "nan.parquet")
    manifest["parquet"] = True
(out / "manifest.json").write_text(json.dumps(manifest, ensure_ascii=False))
