#!/bin/bash
# scripts/k8s-validate.sh: validates deploy/k8s/*.yaml, and the one-index rerun that
# docs/sharding.md derives from score-job.yaml, against the Kubernetes API schemas of the
# minimum version the recipe states (1.29) and of the newest the validator knows, strictly
# (an unknown field is an error). The validator is PyPI's kubernetes-validate (a Python
# package: no Go toolchain or cluster needed), pinned, in a scratch virtual environment.
#
#   scripts/k8s-validate.sh
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${K8S_VALIDATE_VENV:-/tmp/alkit-k8s-validate}
[ -x "$VENV/bin/kubernetes-validate" ] || {
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q kubernetes-validate==1.37.0
}
cd "$ROOT/deploy/k8s"
rerun=$(mktemp /tmp/alkit-rerun-XXXXXX.yaml)
trap 'rm -f "$rerun"' EXIT
# The documented rerun of index 5 alone (docs/sharding.md), as it would be applied.
sed -e 's/^  name: alkit-score$/  name: alkit-score-5/' -e 's/^  completions: 16 .*/  completions: 1/' \
  -e 's/^  parallelism: 16/  parallelism: 1/' -e 's|--shards 16|--shard 5/16|' \
  -e 's|shard-${JOB_COMPLETION_INDEX}|shard-5|' score-job.yaml >"$rerun"
grep -q -- '--shard 5/16' "$rerun" && grep -q 'completions: 1$' "$rerun"
for k in 1.29.0 1.37.0; do
  "$VENV/bin/kubernetes-validate" --strict -k "$k" volumes.yaml prepare-job.yaml \
    score-job.yaml merge-job.yaml "$rerun"
done
