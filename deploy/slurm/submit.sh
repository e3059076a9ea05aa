#!/bin/bash
# submit.sh: the array, then a merge once every task has ended, failed ones included
# (afterany: with afterok a failed task would leave the merge pending forever).
set -euo pipefail
cd "$(dirname "$0")"
jid=$(sbatch --parsable score.sbatch)
echo "${jid}"   # the array's job id, then the merge's
sbatch --parsable --dependency=afterany:"${jid}" merge.sbatch
