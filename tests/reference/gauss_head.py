"""An independent PyTorch float64 reference for alkit's `linear-gauss` regression head: its
optimum under the Gaussian NLL and its beta-NLL fixed point on a small synthetic data set,
written as a JSON fixture a Rust test reads.

Model (alkit's src/nn/gauss.rs, reimplemented here, not imported): inputs x (n, d), a linear
layer with weight W (2k, d) and bias b (2k,) (alkit's tensor names fc1.weight, fc1.bias),

    h    = x W^T + b
    mean = h[:, :k]
    var  = softplus(h[:, k:]) + 1e-6,   softplus(z) = ln(1 + e^z) = max(z, 0) + ln(1 + e^-|z|)

Losses on standardised targets y (n, k):

    nll       = mean over items and outputs of 0.5 (ln var + (y - mean)^2 / var)
                (the constant 0.5 ln(2 pi) dropped)
    beta_nll  = mean of var.detach()^beta * 0.5 (ln var + (y - mean)^2 / var), beta = 0.5
                (Seitzer et al. 2022: each item's term weighted by its own variance, the weight
                held constant in the gradient)

Data (numpy default_rng(0)): d = 3, k = 1; x_train (400, 3) then x_test (50, 3) ~ N(0, 1), then
the noise of train and test ~ N(0, 1); the true model is in the family before standardisation:

    y = 1.5 x0 - 0.7 x1 + 0.3 + noise * sqrt(softplus(0.8 x2 - 0.5) + 1e-6)

x and y are rounded to float32 (the Rust side computes in f32 from exactly those values); every
computation here is float64 from those float32 values. y is standardised by the train mean and
population std (ddof = 0) computed in float64 from the float32 y_train: y_std = (y - y_mean) /
y_std_dev. The fits use that float64 standardised y.

Fits (full batch, float64, single-threaded so that the bytes are reproducible):

  nll       torch.optim.LBFGS (strong_wolfe line search, history 50), run until the Euclidean
            norm of the gradient w.r.t. (W, b) is < 1e-10 (asserted). Near the optimum the
            float64 loss can stop resolving a decrease before the gradient is that small (the
            line search then accepts no step: the gradient norm stops falling); from there
            L-BFGS continues with unit steps and no line search, which uses only gradients,
            until the norm is < 1e-10. Done twice: from W = 0, b = [0, 0.5413] (var starts
            near 1) and from a second, nonzero init; the two must reach the same parameters to
            1e-6 (max abs difference, asserted), evidence that the optimum is unique here. The
            first run's parameters are recorded.
  beta_nll  no objective has the fixed point as its minimum, so it is found by full-batch plain
            gradient descent on the stop-gradient loss (the weights var^beta recomputed and
            detached at each step), until the norm of the update gradient is < 1e-9. Also done
            from both inits and asserted to agree to 1e-6.

Output JSON: "torch" (version), "numpy" (version), "input": {"d", "k", "n_train", "n_test",
"x_train" (n*d flat row-major), "y_train" (raw), "x_test" (flat), "y_test" (raw), these four as
the shortest repr of their float32 values; "y_train_standardised" (float64), "y_mean", "y_std"},
"config" (min_variance, beta, inits, tolerances), and for each of "nll" and "beta_nll":
"weight" (2k x d flat row-major), "bias" (2k), "test_mean" and "test_var" (standardised units,
at x_test, item-major (m, k) flat), "final_grad_norm", "loss" (the final value of the loss the
fit used: nll for "nll", the beta-weighted mean for "beta_nll"), "nll" (the plain NLL at those
parameters), "iterations" (nll: {"strong_wolfe", "unit_step"} L-BFGS iterations; beta_nll:
gradient steps), "init_agreement" (max abs parameter difference between the two inits'
results); "beta_nll" also has "beta". Fitted values are full float64 reprs.

Usage:

    python tests/reference/gauss_head.py [OUT.json]   # default tests/fixtures/gauss_head.json

Deterministic: running it twice writes identical bytes.
"""
import json
import math
import os
import sys

import numpy as np
import torch

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)
DTYPE = torch.float64

MIN_VARIANCE = 1e-6
BETA = 0.5
D, K = 3, 1
N_TRAIN, N_TEST = 400, 50
NLL_TOL = 1e-10
BETA_TOL = 1e-9
AGREE_TOL = 1e-6

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_OUT = os.path.join(ROOT, "tests", "fixtures", "gauss_head.json")


def np_softplus(z):
    return np.maximum(z, 0.0) + np.log1p(np.exp(-np.abs(z)))


def make_data():
    rng = np.random.default_rng(0)
    x_train = rng.normal(size=(N_TRAIN, D))
    x_test = rng.normal(size=(N_TEST, D))
    noise_train = rng.normal(size=N_TRAIN)
    noise_test = rng.normal(size=N_TEST)

    def target(x, noise):
        s = np.sqrt(np_softplus(0.8 * x[:, 2] - 0.5) + MIN_VARIANCE)
        return (1.5 * x[:, 0] - 0.7 * x[:, 1] + 0.3 + noise * s)[:, None]

    y_train = target(x_train, noise_train)
    y_test = target(x_test, noise_test)
    x_train, x_test = x_train.astype(np.float32), x_test.astype(np.float32)
    y_train, y_test = y_train.astype(np.float32), y_test.astype(np.float32)
    y64 = y_train.astype(np.float64)
    y_mean = y64.mean(axis=0)
    y_std = y64.std(axis=0, ddof=0)
    y_train_std = (y64 - y_mean) / y_std
    return x_train, y_train, x_test, y_test, y_mean, y_std, y_train_std


def softplus(z):
    return torch.relu(z) + torch.log1p(torch.exp(-z.abs()))


def forward(x, w, b):
    h = x @ w.T + b
    return h[:, :K], softplus(h[:, K:]) + MIN_VARIANCE


def per_item(mean, var, y):
    return 0.5 * (torch.log(var) + (y - mean) ** 2 / var)


def nll_loss(x, y, w, b):
    mean, var = forward(x, w, b)
    return per_item(mean, var, y).mean()


def beta_nll_loss(x, y, w, b):
    mean, var = forward(x, w, b)
    return (per_item(mean, var, y) * var.detach() ** BETA).mean()


def grad_norm(loss_fn, x, y, w, b):
    w = w.detach().clone().requires_grad_(True)
    b = b.detach().clone().requires_grad_(True)
    loss = loss_fn(x, y, w, b)
    gw, gb = torch.autograd.grad(loss, (w, b))
    return math.sqrt(float((gw**2).sum() + (gb**2).sum())), loss.item()


def fit_nll(x, y, w0, b0):
    """L-BFGS with strong-Wolfe line search; where that stalls (near the optimum the loss no
    longer resolves a decrease in float64, so the line search cannot accept a step while the
    gradient still can shrink), L-BFGS continues with unit steps (no line search), which needs
    only gradients. Returns W, b, gradient norm, loss, and the iterations of each phase."""
    w = w0.clone().requires_grad_(True)
    b = b0.clone().requires_grad_(True)

    def run(line_search, max_iter, steps):
        opt = torch.optim.LBFGS(
            [w, b],
            lr=1.0,
            max_iter=max_iter,
            history_size=50,
            tolerance_grad=0.0,
            tolerance_change=0.0,
            line_search_fn=line_search,
        )

        def closure():
            opt.zero_grad()
            loss = nll_loss(x, y, w, b)
            loss.backward()
            return loss

        prev = math.inf
        for _ in range(steps):
            opt.step(closure)
            gn, _ = grad_norm(nll_loss, x, y, w, b)
            if gn < NLL_TOL or (line_search and gn >= prev):
                break
            prev = gn
        return gn, opt.state[opt._params[0]].get("n_iter", 0)

    gn, wolfe_iters = run("strong_wolfe", 200, 50)
    unit_iters = 0
    if gn >= NLL_TOL:
        gn, unit_iters = run(None, 1, 1000)
    gn, loss = grad_norm(nll_loss, x, y, w, b)
    assert gn < NLL_TOL, f"L-BFGS did not converge: gradient norm {gn}"
    return w.detach(), b.detach(), gn, loss, {"strong_wolfe": wolfe_iters, "unit_step": unit_iters}


def fit_beta(x, y, w0, b0, lr=0.5, max_steps=2_000_000):
    w = w0.clone()
    b = b0.clone()
    for step in range(1, max_steps + 1):
        wv = w.clone().requires_grad_(True)
        bv = b.clone().requires_grad_(True)
        loss = beta_nll_loss(x, y, wv, bv)
        gw, gb = torch.autograd.grad(loss, (wv, bv))
        gn = math.sqrt(float((gw**2).sum() + (gb**2).sum()))
        if not math.isfinite(gn):
            raise AssertionError(f"beta-NLL gradient descent diverged at step {step}")
        if gn < BETA_TOL:
            return w, b, gn, loss.item(), step - 1
        w = w - lr * gw
        b = b - lr * gb
    raise AssertionError(f"beta-NLL gradient descent did not converge: gradient norm {gn}")


def f32s(a):
    """Shortest repr of each float32 value, as JSON numbers."""
    return [float(str(v)) for v in np.asarray(a, dtype=np.float32).ravel()]


def f64s(a):
    return [float(v) for v in np.asarray(a, dtype=np.float64).ravel()]


def result(name, x, y, x_test, w, b, gn, loss, iters, agree):
    mean, var = forward(x_test, w, b)
    _, nll = grad_norm(nll_loss, x, y, w, b)
    return {
        "loss_name": name,
        "weight": f64s(w.numpy()),
        "bias": f64s(b.numpy()),
        "test_mean": f64s(mean.numpy()),
        "test_var": f64s(var.numpy()),
        "final_grad_norm": gn,
        "loss": loss,
        "nll": nll,
        "iterations": iters,
        "init_agreement": agree,
    }


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT
    x_train, y_train, x_test, y_test, y_mean, y_std, y_train_std = make_data()
    x = torch.tensor(x_train.astype(np.float64), dtype=DTYPE)
    y = torch.tensor(y_train_std, dtype=DTYPE)
    xt = torch.tensor(x_test.astype(np.float64), dtype=DTYPE)

    inits = [
        (torch.zeros(2 * K, D, dtype=DTYPE), torch.tensor([0.0, 0.5413], dtype=DTYPE)),
        (
            torch.tensor([[-0.5, 0.8, 0.2], [0.3, -0.4, -0.6]], dtype=DTYPE),
            torch.tensor([1.0, -1.0], dtype=DTYPE),
        ),
    ]

    fits = [fit_nll(x, y, w0, b0) for w0, b0 in inits]
    agree_nll = max(
        float((fits[0][0] - fits[1][0]).abs().max()), float((fits[0][1] - fits[1][1]).abs().max())
    )
    assert agree_nll < AGREE_TOL, f"NLL optima from the two inits differ by {agree_nll}"
    for i, f in enumerate(fits):
        print(f"nll init {i}: grad norm {f[2]:.3e}, loss {f[3]!r}, L-BFGS iterations {f[4]}",
              file=sys.stderr)
    print(f"nll inits agree to {agree_nll:.3e}", file=sys.stderr)

    bfits = [fit_beta(x, y, w0, b0) for w0, b0 in inits]
    agree_beta = max(
        float((bfits[0][0] - bfits[1][0]).abs().max()),
        float((bfits[0][1] - bfits[1][1]).abs().max()),
    )
    assert agree_beta < AGREE_TOL, f"beta-NLL fixed points from the two inits differ by {agree_beta}"
    for i, f in enumerate(bfits):
        print(f"beta_nll init {i}: grad norm {f[2]:.3e}, loss {f[3]!r}, GD steps {f[4]}",
              file=sys.stderr)
    print(f"beta_nll inits agree to {agree_beta:.3e}", file=sys.stderr)

    doc = {
        "torch": torch.__version__,
        "numpy": np.__version__,
        "input": {
            "d": D,
            "k": K,
            "n_train": N_TRAIN,
            "n_test": N_TEST,
            "x_train": f32s(x_train),
            "y_train": f32s(y_train),
            "x_test": f32s(x_test),
            "y_test": f32s(y_test),
            "y_train_standardised": f64s(y_train_std),
            "y_mean": f64s(y_mean),
            "y_std": f64s(y_std),
        },
        "config": {
            "min_variance": MIN_VARIANCE,
            "beta": BETA,
            "inits": [{"weight": f64s(w0.numpy()), "bias": f64s(b0.numpy())} for w0, b0 in inits],
            "nll_fit": "torch.optim.LBFGS strong_wolfe, until gradient norm < 1e-10",
            "beta_nll_fit": "plain gradient descent lr 0.5 on the stop-gradient loss, until "
            "gradient norm < 1e-9",
        },
        "nll": result("nll", x, y, xt, *fits[0][:2], fits[0][2], fits[0][3], fits[0][4], agree_nll),
        "beta_nll": dict(
            result("beta_nll", x, y, xt, *bfits[0][:2], bfits[0][2], bfits[0][3], bfits[0][4],
                   agree_beta),
            beta=BETA,
        ),
    }
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
