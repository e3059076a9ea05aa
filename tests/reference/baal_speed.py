"""Speed of baal's BALD, Entropy and BatchBALD against alkit's Python package, on the same seeded
MC-dropout-like probabilities, in one process.

Workload (float32, baal's layout (n, C, T) = (100_000, 10, 20), made by the generator of
tests/reference/baal_heuristics.py with seed 20240603):
  bald        baal: BALD()(p)                        alkit: score(["bald"], ...)
  entropy     baal: Entropy()(p)                     alkit: score(["mc-entropy"], ...)
  bald+entropy                                       alkit: score(["bald", "mc-entropy"], ...)
              (baal has no joint call: its row is the sum of the two above)
  batchbald   the top 1,000 items by baal's BALD ranking, p[BALD()(p)[:1000]] (what a baal user
              does: BALD to prefilter, BatchBALD on the survivors), then
              baal: BatchBALD(num_samples=10)(top) (num_draw=500, its default; note it picks
              num_samples + 1 = 11 items, see baal_heuristics.py)
              alkit: select_batch("batchbald", 10, draws=top, layout="nct", seed=0)
              items/s counts the 1,000 candidates; the prefilter is not timed here (it is the
              bald row).
baal's timings include its ranking (argsort) as a user's call does; alkit's `score` returns scores
only, so its rows time scoring, not ranking. Each figure is the best of --repeat runs (3).

Threads: --threads N sets OMP/OpenBLAS/MKL threads and torch.set_num_threads before numpy and
torch load (default 1: single process, single thread; pass 0 to leave the libraries' defaults).
alkit's own thread count is whatever the package uses; state it next to the figures.

Run (environment: see tests/reference/baal_heuristics.py; alkit importable for --alkit):
    /tmp/baalvenv/bin/python tests/reference/baal_speed.py --out /tmp/baal_speed.json
    /tmp/baalvenv/bin/python tests/reference/baal_speed.py --alkit --out speed.json

With --alkit it also checks that the two agree: scores (max abs difference), top-100 overlap of
the rankings, and the overlap of alkit's batch with baal's (both with what a baal user labels,
h(top)[:10], and with all 11 items baal picks; both sample, so they need not be identical).
"""

import argparse
import json
import os
import platform
import sys
import time


def parse():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--alkit", action="store_true", help="also time the alkit package")
    ap.add_argument("--out", help="write the figures as JSON here")
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--draws", type=int, default=20)
    ap.add_argument("--top", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=20240603)
    ap.add_argument("--threads", type=int, default=1, help="0: library defaults")
    return ap.parse_args()


ARGS = parse()
if ARGS.threads > 0:
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(ARGS.threads)

import numpy as np  # noqa: E402
import scipy  # noqa: E402
import torch  # noqa: E402

from baal.active.heuristics import BALD, BatchBALD, Entropy  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from baal_heuristics import mc_probs  # noqa: E402


def best_of(fn, repeat):
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def baal_batchbald(top, k, seed):
    torch.manual_seed(seed)
    np.random.seed(seed)
    return BatchBALD(num_samples=k).get_ranks(top)  # h(top) is get_ranks(top)[0]


def main():
    a = ARGS
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    p = mc_probs(a.seed, a.n, a.classes, a.draws)
    rows = []

    def add(lib, what, items, secs):
        rows.append(dict(library=lib, what=what, items=items, seconds=secs, items_per_s=items / secs))
        print(f"  {lib:6s} {what:14s} {secs:9.4f} s  {items / secs:14,.0f} items/s", flush=True)

    print(f"n={a.n} C={a.classes} T={a.draws} float32, best of {a.repeat}, threads={a.threads or 'default'}")
    t_bald, bald_ranks = best_of(lambda: BALD()(p), a.repeat)
    add("baal", "bald", a.n, t_bald)
    t_ent, ent_ranks = best_of(lambda: Entropy()(p), a.repeat)
    add("baal", "entropy", a.n, t_ent)
    add("baal", "bald+entropy", a.n, t_bald + t_ent)
    top_idx = np.asarray(bald_ranks[: a.top])
    top = np.ascontiguousarray(p[top_idx])
    t_bb, (bb_ranks, bb_scores) = best_of(lambda: baal_batchbald(top, a.batch, 0), a.repeat)
    add("baal", f"batchbald{a.batch}", a.top, t_bb)
    baal_batch = np.asarray(bb_ranks[: a.batch])  # what a user labels
    baal_picked = np.flatnonzero(bb_scores)  # all batch + 1 items baal picked

    checks = {}
    alkit_version = None
    if a.alkit:
        import alkit

        alkit_version = getattr(alkit, "__version__", None)
        t, s_b = best_of(lambda: alkit.score(["bald"], draws=p, layout="nct"), a.repeat)
        add("alkit", "bald", a.n, t)
        t, s_e = best_of(lambda: alkit.score(["mc-entropy"], draws=p, layout="nct"), a.repeat)
        add("alkit", "entropy", a.n, t)
        t, s_be = best_of(
            lambda: alkit.score(["bald", "mc-entropy"], draws=p, layout="nct"), a.repeat
        )
        add("alkit", "bald+entropy", a.n, t)
        t, picks = best_of(
            lambda: alkit.select_batch("batchbald", a.batch, draws=top, layout="nct", seed=0),
            a.repeat,
        )
        add("alkit", f"batchbald{a.batch}", a.top, t)
        # baal samples T * num_draw joint configurations at every step; alkit enumerates up to
        # max_configs (512 by default) and samples that many beyond: the same count as baal's.
        same = a.draws * 500
        t, _ = best_of(
            lambda: alkit.select_batch(
                "batchbald", a.batch, draws=top, layout="nct", seed=0, max_configs=same
            ),
            a.repeat,
        )
        add("alkit", f"batchbald{a.batch}@{same}", a.top, t)

        baal_bald = BALD().compute_score(p).astype(np.float64)
        baal_ent = Entropy().compute_score(p).astype(np.float64)
        ab = np.asarray(s_be["bald"], dtype=np.float64)
        ae = np.asarray(s_be["mc-entropy"], dtype=np.float64)
        picks = np.asarray(picks, dtype=np.int64)
        checks = {
            "bald_max_abs_diff": float(np.max(np.abs(ab - baal_bald))),
            "entropy_max_abs_diff": float(np.max(np.abs(ae - baal_ent))),
            "bald_single_vs_joint_call_equal": bool(np.array_equal(s_b["bald"], s_be["bald"])),
            "entropy_single_vs_joint_call_equal": bool(
                np.array_equal(s_e["mc-entropy"], s_be["mc-entropy"])
            ),
            "bald_top100_overlap": len(
                set(np.argsort(-ab, kind="stable")[:100].tolist()) & set(bald_ranks[:100].tolist())
            ),
            "entropy_top100_overlap": len(
                set(np.argsort(-ae, kind="stable")[:100].tolist()) & set(ent_ranks[:100].tolist())
            ),
            "alkit_batch": picks.tolist(),
            "baal_user_batch": baal_batch.tolist(),
            "baal_picked": baal_picked.tolist(),
            "batch_overlap_user_batch": len(set(picks.tolist()) & set(baal_batch.tolist())),
            "batch_overlap_baal_picked": len(set(picks.tolist()) & set(baal_picked.tolist())),
        }
        for key, val in checks.items():
            print(f"  check {key}: {val}")

    print()
    print(f"{'what':14s} " + " ".join(f"{lib + ' items/s':>18s}" for lib in ("baal", "alkit")) + "   ratio")
    for what in ("bald", "entropy", "bald+entropy", f"batchbald{a.batch}"):
        got = {r["library"]: r["items_per_s"] for r in rows if r["what"] == what}
        cells = [f"{got[lib]:18,.0f}" if lib in got else f"{'-':>18s}" for lib in ("baal", "alkit")]
        ratio = f"{got['alkit'] / got['baal']:7.1f}x" if len(got) == 2 else ""
        print(f"{what:14s} " + " ".join(cells) + "  " + ratio)

    if a.out:
        from importlib.metadata import version

        meta = {
            "workload": {
                "n": a.n, "classes": a.classes, "draws": a.draws, "layout": "nct", "dtype": "float32",
                "seed": a.seed, "top": a.top, "batch": a.batch, "repeat": a.repeat,
                "baal_batchbald": "BatchBALD(num_samples=batch, num_draw=500) on p[BALD()(p)[:top]], "
                "torch/numpy seed 0",
            },
            "threads": a.threads or "library defaults",
            "cpu_count": os.cpu_count(),
            "versions": {
                "baal": version("baal"), "numpy": np.__version__, "scipy": scipy.__version__,
                "torch": torch.__version__, "python": platform.python_version(),
                "alkit": alkit_version,
            },
            "rows": rows,
            "checks": checks,
        }
        with open(a.out, "w") as f:
            json.dump(meta, f, indent=1)
            f.write("\n")
        print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
