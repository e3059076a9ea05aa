# Writes embedding files that carry their model's last layer, with PyPI's `safetensors` (its
# numpy API, as a PyTorch user's `save_file` writes them), and the scores alkit must give for
# them, worked out here in float64 from the definitions:
#
#   p        = softmax(h W^T + b)
#   entropy  = -sum_c p_c log p_c
#   regrad   = exp(0.3) * sum_c sqrt(p_c) * ||d log p_c / d(W, b)||, REGrad (Wang & Ji 2024,
#              Eq. 11-12, lambda 0.3) of a one-layer model: the layer weight a_1 = exp(lambda);
#              d log p_c / dW = (e_c - p) h^T and d log p_c / db = e_c - p, so the norm is
#              ||e_c - p|| sqrt(||h||^2 + 1)
#
# Usage: embedded_head.py OUT_DIR. Writes OUT_DIR/head.safetensors (features f32 (n, d),
# labels, head.weight (C, d), head.bias (C,), logits (n, C), metadata classes),
# OUT_DIR/head_f16.safetensors (features F16, head F64, no bias, no logits),
# OUT_DIR/transposed.safetensors (head.weight stored (d, C)), OUT_DIR/wrong_logits.safetensors
# (logits shifted by 0.5) and OUT_DIR/expected.csv (id, entropy, regrad) for head.safetensors
# and OUT_DIR/expected_f16.csv for head_f16.safetensors. The same four are written as numpy's
# `.npz` files too (`np.savez`, the f16 one by `np.savez_compressed`; the arrays by the same
# names, `classes` an array of strings), for which the same expected scores hold.
import os
import sys

import numpy as np
from safetensors.numpy import save_file

out = sys.argv[1]
rng = np.random.default_rng(7)
n, d, c = 300, 24, 5
centers = rng.normal(0, 2, (c, d))
y = rng.integers(0, c, n)
h = (centers[y] + rng.normal(0, 1, (n, d))).astype(np.float32)
w = rng.normal(0, 0.3, (c, d)).astype(np.float32)
b = rng.normal(0, 0.5, c).astype(np.float32)
logits = (h.astype(np.float64) @ w.T.astype(np.float64) + b).astype(np.float32)


def scores(h, w, b):
    z = h.astype(np.float64) @ w.astype(np.float64).T + b.astype(np.float64)
    z -= z.max(1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(1, keepdims=True)
    ent = -(p * np.log(np.maximum(p, 1e-300))).sum(1)
    hn = np.sqrt((h.astype(np.float64) ** 2).sum(1) + 1.0)
    eye = np.eye(p.shape[1])
    diff = np.sqrt(((eye[None, :, :] - p[:, None, :]) ** 2).sum(2))  # (n, C): ||e_c - p||
    regrad = np.exp(0.3) * (np.sqrt(p) * diff).sum(1) * hn
    return ent, regrad


def write_expected(path, h, w, b):
    ent, regrad = scores(h, w, b)
    with open(path, "w") as f:
        f.write("id,entropy,regrad\n")
        for i in range(len(ent)):
            f.write(f"{i},{float(ent[i])!r},{float(regrad[i])!r}\n")


meta = {"classes": ",".join(f"class{k}" for k in range(c))}
save_file(
    {"features": h, "labels": y.astype(np.int64), "head.weight": w, "head.bias": b, "logits": logits},
    os.path.join(out, "head.safetensors"),
    metadata=meta,
)
write_expected(os.path.join(out, "expected.csv"), h, w, b)
h16 = h.astype(np.float16)
save_file(
    {"features": h16, "head.weight": w.astype(np.float64)},
    os.path.join(out, "head_f16.safetensors"),
)
write_expected(os.path.join(out, "expected_f16.csv"), h16.astype(np.float32), w, np.zeros(c, np.float32))
save_file(
    {"features": h, "head.weight": np.ascontiguousarray(w.T), "head.bias": b},
    os.path.join(out, "transposed.safetensors"),
)
save_file(
    {"features": h, "head.weight": w, "head.bias": b, "logits": logits + np.float32(0.5)},
    os.path.join(out, "wrong_logits.safetensors"),
)

# The same files as numpy writes them: arrays named as the tensors (np.savez takes the dotted
# names as keyword arguments), the class names an array of strings.
np.savez(
    os.path.join(out, "head.npz"),
    **{
        "features": h,
        "labels": y.astype(np.int64),
        "head.weight": w,
        "head.bias": b,
        "logits": logits,
        "classes": np.array([f"class{k}" for k in range(c)]),
    },
)
np.savez_compressed(
    os.path.join(out, "head_f16.npz"), **{"features": h16, "head.weight": w.astype(np.float64)}
)
np.savez(
    os.path.join(out, "transposed.npz"),
    **{"features": h, "head.weight": np.ascontiguousarray(w.T), "head.bias": b},
)
np.savez(
    os.path.join(out, "wrong_logits.npz"),
    **{"features": h, "head.weight": w, "head.bias": b, "logits": logits + np.float32(0.5)},
)
