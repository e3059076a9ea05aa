"""Latency of the ML backend's predict call, as Label Studio makes it.

Posts the tasks of a Label Studio task file alkit wrote (images inline) to a running
`alkit serve-label-studio` in the body Label Studio 1.23 sends (tasks, project, label_config,
params), after its first model is ready, and prints the median, 95th percentile and minimum
round trip over 50 calls. Uses `requests` (any venv with Label Studio has it).

    alkit query --state S --n 100 --format label-studio --out q100.json   # and q100.xml
    alkit serve-label-studio --state S2 --port 9091   # S2: a copy of S, or S itself
    python tests/reference/label_studio_predict.py http://127.0.0.1:9091/SECRET q100.json
"""

import json
import statistics
import sys
import time

import requests


def main():
    url, tasks_file = sys.argv[1], sys.argv[2]
    tasks = json.load(open(tasks_file))
    config = open(tasks_file.rsplit(".", 1)[0] + ".xml").read()
    body = {
        "tasks": [{"id": k + 1, "data": t["data"]} for k, t in enumerate(tasks)],
        "project": "1.1700000000",
        "label_config": config,
        "params": {"login": None, "password": None, "context": None},
    }
    raw = json.dumps(body)
    s = requests.Session()
    for _ in range(600):
        h = s.get(url + "/health").json()
        if h["round"] is not None and not h["training"]:
            break
        time.sleep(0.2)
    else:
        sys.exit("the backend trained no model within two minutes")
    times = []
    for _ in range(50):
        t0 = time.perf_counter()
        r = s.post(url + "/predict", data=raw, headers={"Content-Type": "application/json"})
        times.append(time.perf_counter() - t0)
        results = r.json()["results"]
        assert r.status_code == 200 and len(results) == len(tasks), r.text[:300]
        assert all("result" in x for x in results), r.text[:300]
    times.sort()
    print(
        f"{len(tasks)} tasks, request body {len(raw) / 1024:.0f} KiB, 50 calls: "
        f"median {statistics.median(times) * 1e3:.2f} ms, "
        f"p95 {times[int(0.95 * len(times)) - 1] * 1e3:.2f} ms, min {times[0] * 1e3:.2f} ms"
    )


if __name__ == "__main__":
    main()
