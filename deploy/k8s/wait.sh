#!/bin/sh
# wait.sh JOB: waits, without a time limit, until the Job has completed (exit 0) or failed
# (exit 1, printing its failed indexes); `kubectl wait` would stop after 30 s and watches one
# condition only.
set -eu
job=$1
while :; do
  conds=$(kubectl get job "$job" -o jsonpath='{range .status.conditions[?(@.status=="True")]}{.type} {end}')
  case " $conds" in
    *" Complete "*) echo "job/$job complete"; exit 0 ;;
    *" Failed "*)
      echo "job/$job failed; failed indexes: $(kubectl get job "$job" -o jsonpath='{.status.failedIndexes}')" >&2
      exit 1 ;;
  esac
  sleep 10
done
