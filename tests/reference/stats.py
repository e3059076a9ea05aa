"""SciPy's answers for alkit's statistics over seeds (src/metrics/stats.rs), for
tests/alkit/statistics.rs: scipy.stats.wilcoxon(d) with its defaults (two-sided, zero_method
'wilcox', correction=False, method 'auto'), scipy.stats.t.ppf, and scipy.stats.bootstrap's
percentile interval of the mean.

Usage: stats.py IN.json OUT.json
  IN:  {"wilcoxon": [[d...], ...], "t": [[p, df], ...], "bootstrap": [[d...], ...],
        "resamples": B}
  OUT: {"wilcoxon": [[statistic, p], ...], "t": [q, ...], "bootstrap": [[lo, hi], ...]}
Written with scipy==1.17.1, numpy==2.4.6 (scripts/refpython.sh).
"""

import json
import sys

import numpy as np
from scipy import stats

inp = json.load(open(sys.argv[1]))
out = {"wilcoxon": [], "t": [], "bootstrap": []}
for d in inp["wilcoxon"]:
    r = stats.wilcoxon(np.array(d, dtype=np.float64))
    out["wilcoxon"].append([float(r.statistic), float(r.pvalue)])
for p, df in inp["t"]:
    out["t"].append(float(stats.t.ppf(p, df)))
for i, d in enumerate(inp["bootstrap"]):
    r = stats.bootstrap((np.array(d, dtype=np.float64),), np.mean, confidence_level=0.95,
                        n_resamples=inp["resamples"], method="percentile",
                        rng=np.random.default_rng(i))
    out["bootstrap"].append([float(r.confidence_interval.low),
                             float(r.confidence_interval.high)])
json.dump(out, open(sys.argv[2], "w"))
