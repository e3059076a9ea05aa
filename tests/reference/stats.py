"""SciPy's answers for alkit's statistics over seeds (src/metrics/stats.rs), for
tests/alkit/statistics.rs: scipy.stats.wilcoxon(d) with its defaults (two-sided, zero_method
'wilcox', correction=False, method 'auto'), scipy.stats.t.ppf, scipy.stats.bootstrap's
percentile interval of the mean, scipy.stats.friedmanchisquare over a table's columns,
scipy.stats.chi2.sf, and the studentized range's quantile (infinite degrees of freedom) that
Nemenyi's critical difference divides by sqrt(2).

Usage: stats.py IN.json OUT.json
  IN:  {"wilcoxon": [[d...], ...], "t": [[p, df], ...], "bootstrap": [[d...], ...],
        "resamples": B, "friedman": [[[row...], ...], ...], "chi2": [[x, df], ...],
        "range": [[p, k], ...]}
  OUT: {"wilcoxon": [[statistic, p], ...], "t": [q, ...], "bootstrap": [[lo, hi], ...],
        "friedman": [[chi2, p], ...], "chi2": [sf, ...], "range": [q, ...]}
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
out["friedman"] = []
for table in inp["friedman"]:
    r = stats.friedmanchisquare(*np.array(table, dtype=np.float64).T)
    out["friedman"].append([float(r.statistic), float(r.pvalue)])
out["chi2"] = [float(stats.chi2.sf(x, df)) for x, df in inp["chi2"]]
out["range"] = [float(stats.studentized_range.ppf(p, k, np.inf)) for p, k in inp["range"]]
json.dump(out, open(sys.argv[2], "w"))
