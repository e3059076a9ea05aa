"""laplace-torch 0.3's last-layer Laplace (Daxberger et al. 2021's own library, PyPI
`laplace-torch`, on the CPU in float64) on real features, written as a JSON fixture that
tests/alkit/laplace.rs compares alkit's `la` posterior with.

Usage (a venv with torch and laplace-torch==0.3):

    python tests/reference/laplace_torch.py > tests/fixtures/laplace_torch.json

Data: the shipped data/embeddings/mnist-rp32.safetensors (MNIST through a 32-dimensional
random projection, float16). The first 300 training rows are the training set, the first 60
test rows the candidates. A linear softmax head (10 classes) is fitted to the training rows
in float64 by L-BFGS (mean cross-entropy plus 1e-3 ||theta||^2 / 2) and rounded to float32,
the precision alkit's last layer has, before laplace-torch sees it.

For each Hessian structure (diag, kron, full), `Laplace(model, 'classification',
subset_of_weights='last_layer', hessian_structure=...)` is fitted on the training rows in one
batch (laplace-torch's default backend, curvlinops' exact Gauss-Newton), and the fixture
records:
- `loss`: the summed cross-entropy at the trained weights;
- `marglik`: `log_marginal_likelihood(delta)` at each `deltas` value;
- `precision_rows`: rows `rows` of `posterior_precision` at delta = 1, dense (kron's
  `to_matrix()`, diag's vector on the diagonal), in laplace-torch's parameter order (weight
  row by row, then bias);
- `fitted`: the prior precision `optimize_prior_precision(method='marglik',
  prior_structure='scalar', n_steps=3000, lr=0.05)` reaches from 1 (its default 100 steps
  stop short of the optimum; `fitted_100` records where they stop);
- `probit` (60, 10) and `fvar` (60, 10, 10): the probit predictive and the functional
  variance of the candidates at the fitted prior precision.
"""
import json
import warnings

import numpy as np
import torch
from laplace import Laplace
from safetensors.numpy import load_file
from torch.utils.data import DataLoader, TensorDataset

warnings.filterwarnings("ignore")
torch.set_default_dtype(torch.float64)

t = load_file("data/embeddings/mnist-rp32.safetensors")
x = t["features"][:300].astype(np.float64)
y = t["labels"][:300].astype(np.int64)
xt = t["test_features"][:60].astype(np.float64)
d, c = x.shape[1], 10

torch.manual_seed(0)
head = torch.nn.Linear(d, c)
X, Y, XT = torch.tensor(x), torch.tensor(y), torch.tensor(xt)
opt = torch.optim.LBFGS(head.parameters(), max_iter=500, tolerance_grad=1e-12,
                        tolerance_change=1e-14, history_size=50, line_search_fn="strong_wolfe")


def closure():
    opt.zero_grad()
    theta = torch.cat([head.weight.flatten(), head.bias])
    loss = torch.nn.functional.cross_entropy(head(X), Y) + 1e-3 * theta.dot(theta) / 2
    loss.backward()
    return loss


opt.step(closure)
with torch.no_grad():
    head.weight.copy_(head.weight.float().double())
    head.bias.copy_(head.bias.float().double())
# laplace-torch looks for the last layer behind at least one other module.
model = torch.nn.Sequential(torch.nn.Identity(), head)
loader = DataLoader(TensorDataset(X, Y), batch_size=300)

deltas = [0.01, 1.0, 30.0]
rows = [0, 5, 37, 100, 319, 320, 329]
out = {
    "train_features": x.tolist(),
    "train_labels": y.tolist(),
    "test_features": xt.tolist(),
    "weight": head.weight.detach().numpy().tolist(),
    "bias": head.bias.detach().numpy().tolist(),
    "deltas": deltas,
    "rows": rows,
    "structures": {},
}
for structure in ["diag", "kron", "full"]:
    la = Laplace(model, "classification", subset_of_weights="last_layer",
                 hessian_structure=structure)
    la.fit(loader)
    marglik = [la.log_marginal_likelihood(torch.tensor(v)).item() for v in deltas]
    la.prior_precision = 1.0
    pp = la.posterior_precision
    if structure == "diag":
        dense = torch.diag(pp)
    elif structure == "kron":
        dense = pp.to_matrix()
    else:
        dense = pp
    precision_rows = dense[rows].detach().numpy().tolist()
    la.optimize_prior_precision(pred_type="glm", method="marglik", prior_structure="scalar")
    fitted_100 = la.prior_precision.item()
    la.optimize_prior_precision(pred_type="glm", method="marglik", prior_structure="scalar",
                                n_steps=3000, lr=0.05)
    fitted = la.prior_precision.item()
    with torch.no_grad():
        probit = la(XT, pred_type="glm", link_approx="probit")
        _, fvar = la._glm_predictive_distribution(XT)
    out["structures"][structure] = {
        "loss": float(la.loss),
        "marglik": marglik,
        "precision_rows": precision_rows,
        "fitted_100": fitted_100,
        "fitted": fitted,
        "probit": probit.numpy().tolist(),
        "fvar": fvar.numpy().tolist(),
    }
print(json.dumps(out))
