"""The shipped multi-label tables (data/multilabel/tags_{train,test}.csv) written again as
embedding files, as numpy and safetensors write them, for tests/alkit/multilabel.rs: alkit
must read each as the same items, features and label sets as the CSV table.

Usage: multilabel_files.py OUT_DIR

Writes into OUT_DIR, for SPLIT in train and test:
  SPLIT.npz          np.savez: features (n, 20) float32, y (n, 6) int64 0/1, ids (unicode)
  SPLIT.safetensors  safetensors.numpy.save_file: x (n, 20) F32, y (n, 6) U8 0/1, metadata
                     ids (a JSON array)
and, from the train split only:
  half.npz           y with 0.5 in row 2: not a label set, which alkit refuses
The labels of a file are y[0]..y[5]: the CSV's t0..t5 in order.
Written with numpy==2.4.6, safetensors==0.8.0 (scripts/refpython.sh).
"""

import json
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

HERE = Path(__file__).resolve().parent
DATA = HERE.parent.parent / "data" / "multilabel"
NAMES = [f"t{j}" for j in range(6)]


def read(split):
    lines = (DATA / f"tags_{split}.csv").read_text().splitlines()
    ids, x, y = [], [], []
    for line in lines[1:]:
        cells = line.split(",")
        ids.append(cells[0])
        x.append([np.float32(c) for c in cells[1:-1]])
        tags = cells[-1].split("|")
        y.append([int(n in tags) for n in NAMES])
    return ids, np.array(x, dtype=np.float32), np.array(y, dtype=np.int64)


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for split in ["train", "test"]:
        ids, x, y = read(split)
        np.savez(out / f"{split}.npz", features=x, y=y, ids=np.array(ids))
        save_file(
            {"x": x, "y": y.astype(np.uint8)},
            str(out / f"{split}.safetensors"),
            metadata={"ids": json.dumps(ids)},
        )
        if split == "train":
            half = y.astype(np.float64)
            half[2, 0] = 0.5
            np.savez(out / "half.npz", features=x, y=half, ids=np.array(ids))


if __name__ == "__main__":
    main()
