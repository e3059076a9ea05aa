"""Why UNGrad ranks MNIST -> Fashion-MNIST inversely: its last-layer form split into its two
factors, each scored as an OOD detector on its own, from the checkpoint's last layer and the
features `alkit embed` wrote (numpy and scikit-learn, float64, independent of alkit's scorer).

With logits z = W h + b and p = softmax(z), the gradient of log p_c w.r.t. (W, b) is
(e_c - p) [h; 1]^T, so UNGrad over the last layer is
    mean_c ||e_c - p|| * sqrt(||h||^2 + 1)
(a class factor times a feature factor) and ExGrad weights the class factor by p_c.

Usage:
    alkit embed --checkpoint CKPT --data MNIST_DIR --out id.safetensors
    alkit embed --checkpoint CKPT --data FASHION_DIR --out ood.safetensors
    python tests/reference/ungrad_factors.py CKPT/model.safetensors id.safetensors ood.safetensors

Prints each score's AUROC (OOD = positive, higher score = more OOD) on the two test splits,
and the mean feature factor of each.
"""
import sys

import numpy as np
from safetensors.numpy import load_file
from sklearn.metrics import roc_auc_score

ck = load_file(sys.argv[1])
w, b = ck["fc2.weight"].astype(np.float64), ck["fc2.bias"].astype(np.float64)


def factors(path):
    h = load_file(path)["test_features"].astype(np.float64)
    z = h @ w.T + b
    z -= z.max(1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(1, keepdims=True)
    eye = np.eye(p.shape[1])
    cls = np.stack([np.linalg.norm(eye[c] - p, axis=1) for c in range(p.shape[1])], 1)
    return p, cls, np.sqrt((h**2).sum(1) + 1)


(pi, ci, ni), (po, co, no) = factors(sys.argv[2]), factors(sys.argv[3])
y = np.r_[np.zeros(len(ni)), np.ones(len(no))]
rows = {
    "ungrad@last: mean_c ||e_c - p|| sqrt(||h||^2 + 1)": (ci.mean(1) * ni, co.mean(1) * no),
    "class factor alone: mean_c ||e_c - p||": (ci.mean(1), co.mean(1)),
    "feature factor alone: sqrt(||h||^2 + 1)": (ni, no),
    "exgrad@last: sum_c p_c ||e_c - p|| sqrt(||h||^2 + 1)": ((pi * ci).sum(1) * ni, (po * co).sum(1) * no),
    "negated ungrad@last": (-ci.mean(1) * ni, -co.mean(1) * no),
}
for name, (a, o) in rows.items():
    print(f"{roc_auc_score(y, np.r_[a, o]):.4f}  {name}")
print(f"mean feature factor: in-distribution {ni.mean():.2f}, OOD {no.mean():.2f}")
