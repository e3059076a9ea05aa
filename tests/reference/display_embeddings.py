# Writes embedding files that name what a person is shown of each item, with PyPI's
# `safetensors` (its numpy API, as a PyTorch user's `save_file` writes them):
#
#   texts.safetensors   features (40, 8) f32, labels (40,) int64, metadata classes "neg,pos",
#                       ids ["r0", ...], display: one text per item (unicode, a newline, quotes)
#   images.safetensors  features (12, 8) f32, labels, metadata display_kind "image" and display
#                       ["img/0.png", ...] (paths relative to the file; the caller writes them)
#   miscount.safetensors  the texts' file with one display entry too few
#   texts.npz           np.savez of the texts' file: features, labels, ids, classes, display
#   texts.parquet       pyarrow's table of it: id, embedding (list<float>), label, display
#                       (written only where pyarrow imports)
#
# Usage: display_embeddings.py OUT_DIR. Prints the texts as a JSON array.
import json
import os
import sys

import numpy as np
from safetensors.numpy import save_file

out = sys.argv[1]
rng = np.random.default_rng(3)
n = 40
y = np.arange(n) % 2
h = (rng.normal(0, 1, (n, 8)) + y[:, None] * 2.0).astype(np.float32)
texts = [
    f"Review {i}: \u201c{'great' if y[i] else 'dull'}\u201d \u2014 caf\u00e9 \"{i}\"\nsecond line"
    for i in range(n)
]
meta = {
    "classes": "neg,pos",
    "ids": json.dumps([f"r{i}" for i in range(n)]),
    "display": json.dumps(texts),
}
save_file({"features": h, "labels": y.astype(np.int64)}, os.path.join(out, "texts.safetensors"), metadata=meta)
bad = dict(meta, display=json.dumps(texts[:-1]))
save_file({"features": h, "labels": y.astype(np.int64)}, os.path.join(out, "miscount.safetensors"), metadata=bad)
m = 12
save_file(
    {"features": h[:m], "labels": y[:m].astype(np.int64)},
    os.path.join(out, "images.safetensors"),
    metadata={
        "classes": "neg,pos",
        "display_kind": "image",
        "display": json.dumps([f"img/{i}.png" for i in range(m)]),
    },
)
np.savez(
    os.path.join(out, "texts.npz"),
    features=h,
    labels=y.astype(np.int64),
    ids=np.array([f"r{i}" for i in range(n)]),
    classes=np.array(["neg", "pos"]),
    display=np.array(texts),
)
try:
    import pyarrow as pa
    import pyarrow.parquet as pq
except ImportError:
    pass
else:
    pq.write_table(
        pa.table(
            {
                "id": [f"r{i}" for i in range(n)],
                "embedding": pa.array(h.tolist(), pa.list_(pa.float32())),
                "label": y.astype(np.int64),
                "display": texts,
            }
        ),
        os.path.join(out, "texts.parquet"),
    )
print(json.dumps(texts))
