"""baal reference for alkit's Python package: baal's own heuristics run on seeded MC-dropout-like
probabilities, written to python/tests/data/baal_reference.{npz,json} for the pytest suite to
compare alkit's scorers and BatchBALD picks against.

Nothing here re-implements a baal heuristic for the reference values: every score and ranking
comes from `baal.active.heuristics` called as a baal user calls it (`h.compute_score(p)` for the
raw scores, `h(p)` for the ranking). The one addition is an exact-enumeration BatchBALD in numpy
(`exact_batchbald`, float64) used only to say whether baal's sampled picks are the exact greedy
ones on the tiny set.

Environment (recorded in the JSON; made with these versions: baal 2.1.0, numpy 2.4.6,
scipy 1.17.1, torch 2.15.0+cu132 on CPU, Python 3.11.7):

    python3 -m venv /tmp/baalvenv
    # reuse an existing torch instead of downloading it again (optional):
    echo /tmp/venv-torch/lib/python3.11/site-packages \\
        > /tmp/baalvenv/lib/python3.11/site-packages/venv_torch.pth
    /tmp/baalvenv/bin/pip install baal==2.1.0        # pulls torch itself when no .pth is given
    /tmp/baalvenv/bin/python tests/reference/baal_heuristics.py   # from the repository root

Takes about a minute on one core (the n=500, C=10 BatchBALD runs dominate).

Inputs (float32, baal's layout (n, C, T): item, class, MC draw), from `mc_probs(seed, n, C, T)`:
per item a sharpness a ~ U(0.5, 4) and a noise scale s = exp(U(log 0.05, log 3)); logits
z[c, t] = a * g[c] + s * e[c, t] with g, e standard normal; p = softmax over C (computed in
float64, stored as float32). `small` is n=500, C=10, T=20 (seed 20240602); `tiny` is n=200, C=5,
T=16 (seed 20240616). The seeds were chosen, among the 12 to 15 consecutive ones tried, so that
(small) no two of a heuristic's 500 scores lie within a relative 1.2e-5 of each other and baal's
float32 ranking equals its ranking of the same inputs widened to float64, and (tiny) each exact
greedy BatchBALD pick leads the runner-up by >= 0.03 nats, well above baal's sampling noise.
JSON `min_rel_gap`, `ties` and `float32_vs_float64_rank_diffs` record these per heuristic.

What each baal 2.1.0 heuristic computes (read from baal/active/heuristics/heuristics.py;
p has shape (n, C, T); "mean" is over T; logs are natural; ranking = `np.argsort(score)`,
reversed when the heuristic has `reverse=True`, so `h(p)[0]` is the most informative item):

  BALD       xlogy-based, in the input dtype (float32):
             score = H[mean_t p_t] - mean_t H[p_t],  H[q] = -sum_c q_c ln q_c.   reverse=True.
  Entropy    mean over T first (`singlepass`), then scipy.stats.entropy over C, which
             RENORMALISES the mean to sum 1: score = H[pbar / sum(pbar)]. reverse=True.
  Margin     mean over T, sort over C: score = pbar_(1) - pbar_(2) (top-1 minus top-2 of the
             MEAN). reverse=False: smallest margin first.
  Certainty  mean over T: score = max_c pbar_c (max of the MEAN, not mean of the max).
             reverse=False: least confident first.
  Variance   np.var(p, axis=-1) (population variance, ddof=0, over T) -> (n, C), then the
             default reduction "mean" over C: score = (1/C) sum_c Var_t p_tc. reverse=True.
  All but Certainty and Variance pass the input through baal's `to_prob`, which softmaxes it
  unless it already lies in [0, 1] and sums to 1 over C (np.allclose); the inputs here do, so
  it is the identity (asserted below). Non-finite scores would be replaced (10000 / 0.0).
  Ranking ties: np.argsort's default (introsort, not stable), then reversed for reverse=True,
  so tied items need not come out in index order.

  BatchBALD(num_samples, num_draw=500): greedy, seeded by the BALD argmax. Each step it
  draws, for every MC draw k, num_draw joint label configurations of the items picked so far
  from p(.|theta_k) (torch.multinomial, so M = T * num_draw configurations in all, fresh
  each step), estimates the joint entropy H(y_picked, y_b) for every candidate b by the
  importance-weighted estimator of BlackHC/BatchBALD, subtracts b's own mean conditional
  entropy mean_t H[p_t(b)] (the picked items' conditional entropies are a constant it drops),
  masks picked items with -1000 and takes the argmax. It ALWAYS samples (there is no exact
  enumeration path, however few the configurations), so its picks are random: reproducible
  only under torch.manual_seed, and equal to the exact greedy picks only when the gaps
  between candidates exceed the Monte-Carlo noise. Quirks a test must know:
    * the loop runs num_samples times after the BALD seed, so it picks num_samples + 1 items;
    * `compute_score` returns zeros except at the picks, where it stores the step's gain
      (BALD for the first); `h(p)` ranks by those scores, so `h(p)[:k]` is NOT the selection
      order (gains grow with the batch, so the first, BALD, pick usually falls last and
      `h(p)[:num_samples]` usually drops it);
    * a step whose best gain is under 0.1 may stop early (never happens on these inputs).
  The greedy order is captured here by a subclass that only records the `probs` argument of
  `_sample_from_history` (the picked items, in order) and matches its rows to the inputs; the
  selection itself is baal's, untouched.

Written arrays (npz; `h` in bald, entropy, margin, certainty, variance):
  small_probs (500,10,20) f32, tiny_probs (200,5,16) f32
  small_{h}_scores f64 (baal's float32 scores, widened), small_{h}_ranks i64 (h(p))
  small_{h}_scores64 f64    baal's same heuristic on the inputs widened to float64
  tiny_bald_scores, tiny_bald_ranks
  bb_seeds i64 (S,) torch/numpy seeds used for the BatchBALD runs
  bb_tiny_order (S,4) i64   baal BatchBALD(num_samples=4) greedy order on tiny (first 3 = the
                            batch-3 picks: the draws of a num_samples=3 run are the same)
  bb_tiny_gains (S,4) f64   baal's score at each pick (step gain; first = BALD)
  bb_tiny_extra (S,) i64    the (num_samples+1)-th item baal also picks
  bb_tiny_user_top (S,4)    h(p)[:4], what a baal user labelling query_size=4 gets
  bb_tiny_exact_order (4,), bb_tiny_exact_gains (4,) exact greedy BatchBALD (numpy, float64,
                            all C^|picked| configurations enumerated), gains in baal's form;
  bb_tiny_exact_lead (4,)   each exact pick's gain minus the runner-up's
  bb_small_order (S,10), bb_small_gains (S,10), bb_small_extra (S,), bb_small_user_top (S,10):
                            the same for BatchBALD(num_samples=10) on small (sampled in baal,
                            and in alkit beyond its exact limit: compare sets/overlap, not order;
                            baal's own seeds disagree here, see `set_overlap` in the JSON)
  bb_small_exact_order (4,), bb_small_exact_gains, bb_small_exact_lead: exact greedy for the
                            first 4 picks on small (10^3 configurations at the 4th)
"""

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import scipy
import torch

import baal
from baal.active.heuristics import BALD, BatchBALD, Certainty, Entropy, Margin, Variance
from baal.utils.array_utils import to_prob

REPO = Path(__file__).resolve().parents[2]
SMALL = dict(seed=20240602, n=500, c=10, t=20)
TINY = dict(seed=20240616, n=200, c=5, t=16)
BB_SEEDS = [0, 1, 2, 3, 4]
BB_SMALL_SEEDS = [0, 1, 2]
BB_TINY_K = 4
BB_SMALL_K = 10
NUM_DRAW = 500  # baal's default


def mc_probs(seed, n, c, t):
    """MC-dropout-like probabilities (n, C, T), float32; see the module docstring."""
    rng = np.random.default_rng(seed)
    sharp = rng.uniform(0.5, 4.0, size=(n, 1, 1))
    noise = np.exp(rng.uniform(np.log(0.05), np.log(3.0), size=(n, 1, 1)))
    base = rng.standard_normal((n, c, 1))
    eps = rng.standard_normal((n, c, t))
    z = sharp * base + noise * eps
    z -= z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)


class RecordingBatchBALD(BatchBALD):
    """baal's BatchBALD, recording the picked items handed to `_sample_from_history`."""

    def _sample_from_history(self, probs, num_draw=1000):
        self.last_history_probs = np.array(probs, copy=True)
        return super()._sample_from_history(probs, num_draw=num_draw)


def run_batchbald(p, k, seed):
    torch.manual_seed(seed)
    np.random.seed(seed)
    h = RecordingBatchBALD(num_samples=k, num_draw=NUM_DRAW)
    t0 = time.perf_counter()
    user_ranks, scores = h.get_ranks(p)  # h(p) is get_ranks(p)[0]
    secs = time.perf_counter() - t0
    hist = h.last_history_probs  # the first k picks, in order
    flat = p.reshape(p.shape[0], -1)
    order = []
    for row in hist.reshape(hist.shape[0], -1):
        hit = np.flatnonzero((flat == row).all(axis=1))
        assert hit.size == 1, "picked row not matched uniquely"
        order.append(int(hit[0]))
    picked = np.flatnonzero(scores != 0)
    extra = [int(i) for i in picked if i not in order]
    assert len(order) == k and len(extra) == 1 and len(picked) == k + 1, (order, picked)
    return dict(
        order=np.array(order, dtype=np.int64),
        gains=scores[order].astype(np.float64),
        extra=extra[0],
        user_top=np.asarray(user_ranks[:k], dtype=np.int64),
        seconds=secs,
    )


def _entropy(q, axis):
    return -(np.where(q > 0, q * np.log(np.where(q > 0, q, 1.0)), 0.0)).sum(axis=axis)


def exact_batchbald(p, k):
    """Exact greedy BatchBALD (float64): order, gains in baal's form H(y_picked, y_b) - E_t H[p_t(b)],
    and each step's lead of the pick over the runner-up."""
    p = p.astype(np.float64)
    n, c, t = p.shape
    cond = _entropy(p, axis=1).mean(axis=1)  # (n,)
    bald = _entropy(p.mean(axis=2), axis=1) - cond
    order = [int(np.argmax(bald))]
    gains = [float(bald[order[0]])]
    runner_up = [float(bald[order[0]] - np.sort(bald)[-2])]
    joint = p[order[0]].T  # (T, C^1): P(y_picked | theta_t)
    while len(order) < k:
        # P(y_picked, y_b = c) = mean_t P(y_picked | t) p_t(b)[c]  -> (n, M, C)
        pj = np.einsum("tm,nct->nmc", joint, p) / t
        g = _entropy(pj.reshape(n, -1), axis=1) - cond
        g[order] = -np.inf
        b = int(np.argmax(g))
        order.append(b)
        gains.append(float(g[b]))
        runner_up.append(float(g[b] - np.sort(g)[-2]))
        joint = (joint[:, :, None] * p[b].T[:, None, :]).reshape(t, -1)
    return np.array(order, dtype=np.int64), np.array(gains), np.array(runner_up)


def ties(scores):
    s = np.sort(scores)
    return int(np.sum(s[1:] == s[:-1]))


def min_rel_gap(scores):
    s = np.sort(np.asarray(scores, dtype=np.float64))
    return float(np.min(np.diff(s) / np.maximum(np.abs(s[1:]), 1e-300)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-dir", type=Path, default=REPO / "python" / "tests" / "data")
    args = ap.parse_args()
    torch.set_num_threads(1)

    small = mc_probs(**SMALL)
    tiny = mc_probs(**TINY)
    for p in (small, tiny):
        assert to_prob(p) is p, "baal's to_prob would softmax these inputs"

    out = {"small_probs": small, "tiny_probs": tiny}
    info = {"ties": {}, "min_rel_gap": {}, "float32_vs_float64_rank_diffs": {}}
    small64 = small.astype(np.float64)
    heuristics = {
        "bald": BALD(),
        "entropy": Entropy(),
        "margin": Margin(),
        "certainty": Certainty(),
        "variance": Variance(),
    }
    for name, h in heuristics.items():
        scores = np.asarray(h.compute_score(small))
        if scores.ndim > 1:  # Variance: (n, C) before its "mean" reduction
            scores = h.reduction(scores)
        ranks = np.asarray(h(small), dtype=np.int64)
        # The ranking is argsort of exactly these scores (reversed when h.reversed).
        expect = np.argsort(scores)
        assert np.array_equal(ranks, expect[::-1] if h.reversed else expect)
        out[f"small_{name}_scores"] = scores.astype(np.float64)
        out[f"small_{name}_ranks"] = ranks
        scores64 = np.asarray(h.get_uncertainties(small64), dtype=np.float64)
        out[f"small_{name}_scores64"] = scores64
        info["ties"][name] = ties(scores)
        info["min_rel_gap"][name] = min_rel_gap(scores64)
        info["float32_vs_float64_rank_diffs"][name] = int((h(small64) != ranks).sum())
    tb = BALD()
    out["tiny_bald_scores"] = np.asarray(tb.compute_score(tiny), dtype=np.float64)
    out["tiny_bald_ranks"] = np.asarray(tb(tiny), dtype=np.int64)

    ex_order, ex_gains, ex_lead = exact_batchbald(tiny, BB_TINY_K)
    out["bb_tiny_exact_order"] = ex_order
    out["bb_tiny_exact_gains"] = ex_gains
    out["bb_tiny_exact_lead"] = ex_lead
    sx_order, sx_gains, sx_lead = exact_batchbald(small, 4)
    out["bb_small_exact_order"] = sx_order
    out["bb_small_exact_gains"] = sx_gains
    out["bb_small_exact_lead"] = sx_lead
    out["bb_seeds"] = np.array(BB_SEEDS, dtype=np.int64)
    out["bb_small_seeds"] = np.array(BB_SMALL_SEEDS, dtype=np.int64)
    bb_info = {}
    for label, p, k, seeds in (
        ("tiny", tiny, BB_TINY_K, BB_SEEDS),
        ("small", small, BB_SMALL_K, BB_SMALL_SEEDS),
    ):
        runs = [run_batchbald(p, k, s) for s in seeds]
        for key in ("order", "gains", "user_top"):
            out[f"bb_{label}_{key}"] = np.stack([r[key] for r in runs])
        out[f"bb_{label}_extra"] = np.array([r["extra"] for r in runs], dtype=np.int64)
        orders = out[f"bb_{label}_order"]
        bb_info[label] = {
            "num_samples": k,
            "num_draw": NUM_DRAW,
            "configurations_sampled_per_step": int(p.shape[2] * NUM_DRAW),
            "seeds": seeds,
            "orders": orders.tolist(),
            "same_order_all_seeds": bool((orders == orders[0]).all()),
            "positions_agreeing_all_seeds": int((orders == orders[0]).all(axis=0).sum()),
            "same_set_all_seeds": bool(all(set(o) == set(orders[0]) for o in orders)),
            "set_overlap": [
                [len(set(a.tolist()) & set(b.tolist())) for b in orders] for a in orders
            ],
            "seconds_per_run": [round(r["seconds"], 3) for r in runs],
        }
        print(label, "baal BatchBALD orders:", orders.tolist())
    agree = (out["bb_tiny_order"] == ex_order).all(axis=1)
    bb_info["tiny"]["exact_order"] = ex_order.tolist()
    bb_info["tiny"]["exact_gains"] = ex_gains.tolist()
    bb_info["tiny"]["exact_lead_over_runner_up"] = ex_lead.tolist()
    bb_info["tiny"]["seeds_matching_exact_order"] = int(agree.sum())
    bb_info["small"]["exact_order_first4"] = sx_order.tolist()
    bb_info["small"]["exact_lead_over_runner_up_first4"] = sx_lead.tolist()
    print("small exact greedy first 4:", sx_order.tolist(), "leads", np.round(sx_lead, 4).tolist())
    print("tiny exact greedy order:", ex_order.tolist(), "gains", np.round(ex_gains, 4).tolist())

    args.out_dir.mkdir(parents=True, exist_ok=True)
    npz = args.out_dir / "baal_reference.npz"
    np.savez_compressed(npz, **out)
    meta = {
        "generator": "tests/reference/baal_heuristics.py",
        "versions": {
            "baal": baal.__version__ if hasattr(baal, "__version__") else _dist_version("baal"),
            "numpy": np.__version__,
            "scipy": scipy.__version__,
            "torch": torch.__version__,
            "python": platform.python_version(),
        },
        "layout": "nct (item, class, MC draw), float32",
        "sets": {"small": SMALL, "tiny": TINY},
        "heuristics": {
            "bald": "BALD(): H[mean_t p] - mean_t H[p_t], ln, float32; reverse=True",
            "entropy": "Entropy(): scipy.stats.entropy(mean_t p) (renormalised), ln; reverse=True",
            "margin": "Margin(): top1 - top2 of mean_t p; reverse=False (smallest first)",
            "certainty": "Certainty(): max_c mean_t p; reverse=False (smallest first)",
            "variance": "Variance(): mean_c np.var(p, axis=T, ddof=0); reverse=True",
        },
        "ranks": "h(p) = np.argsort(score), reversed if reverse=True: most informative first",
        "ties": info["ties"],
        "min_rel_gap": info["min_rel_gap"],
        "float32_vs_float64_rank_diffs": info["float32_vs_float64_rank_diffs"],
        "batchbald": bb_info,
    }
    (args.out_dir / "baal_reference.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"wrote {npz} ({npz.stat().st_size} bytes) and baal_reference.json")
    print("ties:", info["ties"], "min relative gaps:",
          {k: f"{v:.1e}" for k, v in info["min_rel_gap"].items()},
          "f32/f64 rank diffs:", info["float32_vs_float64_rank_diffs"])


def _dist_version(name):
    from importlib.metadata import version

    return version(name)


if __name__ == "__main__":
    sys.exit(main())
