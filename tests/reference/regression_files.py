"""The shipped Friedman #1 regression tables (data/regression/friedman1_{train,test}.csv)
written again as embedding files, as numpy, safetensors and pyarrow write them, for
tests/alkit/regression_files.rs: alkit must read each as the same items, features and targets
as the CSV table, so that a regression curve on any of them gives the CSV's figures.

Usage: regression_files.py OUT_DIR

Writes into OUT_DIR, for SPLIT in train and test:
  SPLIT.npz          np.savez: features (n, 10) float32, y (n,) float64, ids (unicode)
  SPLIT.safetensors  safetensors.numpy.save_file: x (n, 10) F32, y (n,) F64, metadata ids
                     (a JSON array)
  SPLIT.parquet      pyarrow.parquet.write_table: features list<float>, y double, id string
and, from the train split only:
  ints.npz           y rounded to int64: integers, which alkit refuses without --task
  two.safetensors    y2 (n, 2) F32: the target and its square, two outputs y2[0], y2[1]
  nulls.parquet      y with a null in row 3 (a target not known yet)
  uint8.parquet      y rounded and clipped to [0, 255] as a uint8 column, int8.parquet the
                     same clipped to [-128, 127] as int8 (pyarrow's narrow integer types)

Features are parsed as numpy.float32 from the CSV's text (which holds float32 reprs), targets
as float64 from the same text, which is how alkit parses a CSV's cells, so every value alkit
reads from these files equals the CSV's bit for bit.
Written with numpy==2.4.6, safetensors==0.8.0, pyarrow==26.0.1 (scripts/refpython.sh).
"""

import json
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from safetensors.numpy import save_file

HERE = Path(__file__).resolve().parent
DATA = HERE.parent.parent / "data" / "regression"
out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)


def read(split):
    lines = (DATA / f"friedman1_{split}.csv").read_text().splitlines()
    header = lines[0].split(",")
    rows = [l.split(",") for l in lines[1:]]
    feats = [i for i, h in enumerate(header) if h not in ("id", "y")]
    ids = np.array([r[header.index("id")] for r in rows])
    x = np.array([[np.float32(r[i]) for i in feats] for r in rows], dtype=np.float32)
    y = np.array([float(r[header.index("y")]) for r in rows], dtype=np.float64)
    return ids, x, y


for split in ("train", "test"):
    ids, x, y = read(split)
    np.savez(out / f"{split}.npz", features=x, y=y, ids=ids)
    save_file({"x": x, "y": y}, str(out / f"{split}.safetensors"),
              metadata={"ids": json.dumps(ids.tolist())})
    table = pa.table({
        "features": pa.array(list(x), type=pa.list_(pa.float32())),
        "y": pa.array(y, type=pa.float64()),
        "id": pa.array(ids.tolist(), type=pa.string()),
    })
    pq.write_table(table, out / f"{split}.parquet")
    if split == "train":
        np.savez(out / "ints.npz", features=x, y=np.round(y).astype(np.int64), ids=ids)
        y2 = np.stack([y, y * y], axis=1).astype(np.float32)
        save_file({"x": x, "y2": y2}, str(out / "two.safetensors"))
        nulls = y.tolist()
        nulls[3] = None
        pq.write_table(table.set_column(1, "y", pa.array(nulls, type=pa.float64())),
                       out / "nulls.parquet")
        for name, kind, lo, hi in (("uint8", pa.uint8(), 0, 255), ("int8", pa.int8(), -128, 127)):
            small = np.clip(np.round(y), lo, hi).astype(np.int64).tolist()
            pq.write_table(table.set_column(1, "y", pa.array(small, type=kind)),
                           out / f"{name}.parquet")
