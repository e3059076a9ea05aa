#!/bin/bash
# rerun.sh I[,J...]: reruns the failed tasks (their shards, each I of SHARDS as the script
# says), then the merge once they all succeeded.
set -euo pipefail
cd "$(dirname "$0")"
rid=$(sbatch --parsable --array="$1" score.sbatch)
echo "${rid}"   # the rerun's job id, then the merge's
sbatch --parsable --dependency=afterok:"${rid}" merge.sbatch
