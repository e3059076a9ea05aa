"""Independent numpy reference for alkit's diversity batch selectors.

Each selector is written from its paper (and, where named, its authors' code), not from
alkit's code:

  badge            Ash et al. 2020, "Deep Batch Active Learning by Diverse, Uncertain
                   Gradient Lower Bounds": last-layer gradient embeddings
                   (p - onehot(argmax p)) outer h, seeded with k-means++ (first pick: largest
                   norm; then D^2 sampling on squared distances).
  coreset          Sener & Savarese 2018, "Active Learning for Convolutional Neural Networks:
                   A Core-Set Approach": k-center greedy on Euclidean distances; also the
                   covering radius after the picks.
  typiclust        Hacohen et al. 2022, "Active Learning on a Budget: Opposite Strategies Suit
                   High and Low Budgets": the authors' select_samples (avihu111/TypiClust):
                   clusters ordered by (labeled count, -size, id), the most typical untaken
                   member of each in turn, typicality 1 / (mean squared distance to the K
                   nearest members + 1e-5); an exhausted cluster passes to the next one.
  probcover        Yehuda et al. 2022, "Active Learning Through a Covering Lens": greedy max
                   coverage on the graph x -> y iff ||x - y|| < delta over L2-normalised rows.
  probcover_delta  The same paper's choice of delta: the largest delta whose purity (the share
                   of points whose delta-ball holds one cluster only) is at least alpha.

"picks" are 0-based positions into the candidates h, in pick order. Inputs arrive as f32
values and are computed on in float64.

Random draws: the Rust side records the raw u64 values it drew; IN carries them as "draws"
and the i-th uniform is u = (x >> 11) * 2**-53, used in order. A draw the reference needs
and lacks, or one it leaves unused, is an error; OUT reports "draws_used".

Protocol: python diverse.py IN.json OUT.json
  IN  {"method": "badge" | "coreset" | "typiclust" | "probcover" | "probcover_delta",
       "draws": [u64 ints], ...the method's fields}
       badge           n, d, c, h [n*d], w [c*d], b [c], k
       coreset         n, d, h, m, ref_h [m*d], k
       typiclust       n, d, h, m, ref_h, clusters [m+n ints: labeled rows first], k,
                       min_cluster_size, knn
       probcover       n, d, h, m, ref_h, delta, k
       probcover_delta n, d, h, clusters [n ints], alpha
  OUT {"picks": [ints], "draws_used": int}, plus "radius" (coreset) or "delta"
       (probcover_delta, instead of picks); an infinite value is written as "inf".

Run with numpy only (scripts/refpython.sh makes a virtual environment with it).
"""

import json
import math
import sys

import numpy as np


def f64(values, *shape):
    return np.asarray(values, dtype=np.float32).astype(np.float64).reshape(shape)


class Draws:
    def __init__(self, raw):
        self.raw = [int(x) for x in raw]
        self.used = 0
        if any(not 0 <= x < 2**64 for x in self.raw):
            raise ValueError("draws must be u64 values")

    def uniform(self):
        if self.used >= len(self.raw):
            raise ValueError(f"the reference needs draw {self.used + 1}; only {len(self.raw)} given")
        x = self.raw[self.used]
        self.used += 1
        return (x >> 11) * 2.0**-53


def nth_of(positions, u):
    # The floor(u * r)-th (0-based) of r positions in ascending order.
    positions = sorted(positions)
    return positions[math.floor(u * len(positions))]


def distances(a, b):
    return np.sqrt(((a[:, None, :] - b[None, :, :]) ** 2).sum(axis=2))


def l2_normalise(x):
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)


def badge(a, draws):
    n, d, c, k = a["n"], a["d"], a["c"], a["k"]
    h = f64(a["h"], n, d)
    z = h @ f64(a["w"], c, d).T + f64(a["b"], c)
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    onehot = np.eye(c)[np.argmax(p, axis=1)]
    g = ((p - onehot)[:, :, None] * h[:, None, :]).reshape(n, c * d)
    picks = [int(np.argmax(np.linalg.norm(g, axis=1)))] if k > 0 else []
    while len(picks) < k:
        d2 = (((g[:, None, :] - g[None, picks, :]) ** 2).sum(axis=2)).min(axis=1)
        d2[picks] = 0.0
        cum = np.cumsum(d2)
        total = cum[-1]
        u = draws.uniform()
        if total > 0:
            picks.append(int(np.nonzero(cum > u * total)[0][0]))
        else:
            picks.append(nth_of(set(range(n)) - set(picks), u))
    return {"picks": picks}


def coreset(a, draws):
    n, d, m, k = a["n"], a["d"], a["m"], a["k"]
    h = f64(a["h"], n, d)
    ref = f64(a["ref_h"], m, d)
    min_d = distances(h, ref).min(axis=1) if m > 0 else np.full(n, np.inf)
    picks = []
    for step in range(k):
        if step == 0 and m == 0:
            pick = math.floor(draws.uniform() * n)
        else:
            masked = min_d.copy()
            masked[picks] = -np.inf
            pick = int(np.argmax(masked))
        picks.append(pick)
        min_d = np.minimum(min_d, distances(h, h[pick : pick + 1])[:, 0])
    return {"picks": picks, "radius": float(min_d.max())}


def typiclust(a, draws):
    n, d, m, k = a["n"], a["d"], a["m"], a["k"]
    rows = np.concatenate([f64(a["ref_h"], m, d), f64(a["h"], n, d)])
    clusters = np.asarray(a["clusters"], dtype=np.int64).reshape(m + n)
    ids, sizes = np.unique(clusters, return_counts=True)
    labeled = np.array([(clusters[:m] == cid).sum() for cid in ids])
    kept = [i for i in range(len(ids)) if sizes[i] > a["min_cluster_size"]]
    order = [ids[i] for i in sorted(kept, key=lambda i: (labeled[i], -sizes[i], ids[i]))]
    if not order:
        raise ValueError("no cluster is larger than min_cluster_size")
    taken = np.zeros(m + n, dtype=bool)
    taken[:m] = True
    picks = []
    for i in range(k):
        for shift in range(len(order)):
            members = np.nonzero((clusters == order[(i + shift) % len(order)]) & ~taken)[0]
            if len(members) > 0:
                break
        else:
            raise ValueError("every kept cluster is exhausted")
        nn = min(a["knn"], len(members) // 2)
        if nn == 0:
            best = members[0]
        else:
            feats = rows[members]
            sq = ((feats[:, None, :] - feats[None, :, :]) ** 2).sum(axis=2)
            np.fill_diagonal(sq, np.inf)
            mean_nn = np.sort(sq, axis=1)[:, :nn].mean(axis=1)
            best = members[int(np.argmax(1.0 / (mean_nn + 1e-5)))]
        taken[best] = True
        picks.append(int(best) - m)
    return {"picks": picks}


def probcover(a, draws):
    n, d, m, k = a["n"], a["d"], a["m"], a["k"]
    rows = l2_normalise(np.concatenate([f64(a["ref_h"], m, d), f64(a["h"], n, d)]))
    reach = distances(rows, rows) < a["delta"]
    covered = reach[:m].any(axis=0)
    picks = []
    for _ in range(k):
        degree = (reach[m:] & ~covered).sum(axis=1)
        if degree.max() > 0:
            pick = int(np.argmax(degree))
            covered |= reach[m + pick]
        else:
            pick = nth_of(set(range(n)) - set(picks), draws.uniform())
        picks.append(pick)
    return {"picks": picks}


def probcover_delta(a, draws):
    n, d = a["n"], a["d"]
    rows = l2_normalise(f64(a["h"], n, d))
    clusters = np.asarray(a["clusters"], dtype=np.int64).reshape(n)
    dist = distances(rows, rows)
    dist[clusters[:, None] == clusters[None, :]] = np.inf
    r = dist.min(axis=1)

    def purity(delta):
        # x's ball {y : ||x - y|| < delta} holds one cluster only iff r_x >= delta.
        return (r >= delta).sum() / n

    good = [v for v in r if purity(v) >= a["alpha"]]
    if not good:
        raise ValueError("no delta reaches the purity alpha")
    return {"delta": float(max(good))}


def main():
    src, dst = sys.argv[1:3]
    with open(src) as f:
        a = json.load(f)
    draws = Draws(a.get("draws", []))
    method = {
        "badge": badge,
        "coreset": coreset,
        "typiclust": typiclust,
        "probcover": probcover,
        "probcover_delta": probcover_delta,
    }[a["method"]]
    out = method(a, draws)
    if draws.used != len(draws.raw):
        raise ValueError(f"{len(draws.raw)} draws given, {draws.used} used")
    out["draws_used"] = draws.used
    out = {key: "inf" if isinstance(v, float) and math.isinf(v) else v for key, v in out.items()}
    with open(dst, "w") as f:
        json.dump(out, f, allow_nan=False)


if __name__ == "__main__":
    main()
