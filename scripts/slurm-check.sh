#!/bin/bash
# scripts/slurm-check.sh: runs docs/sharding.md's Slurm recipe (the files of deploy/slurm/,
# unchanged) on a real single-node Slurm and checks that the merge, after a failed and a
# cancelled task were rerun by the documented recovery, is byte-identical to one unsharded
# `alkit score`.
#
#   sudo ALKIT=target/release/alkit scripts/slurm-check.sh
#
# Needs root (it starts munged, slurmctld and slurmd) and Debian's packages (installed here
# when missing: slurmctld slurmd slurm-client munge). The cluster is one node, this machine,
# described by `slurmd -C`, without cgroups (ProctrackType=proctrack/linuxproc,
# TaskPlugin=task/none); its configuration and state live in a scratch folder (SLURM_CONF
# points there), nothing under /etc/slurm is written. Daemons it started are stopped at the
# end. Takes about a minute after the packages are installed.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
ALKIT=${ALKIT:-$ROOT/target/release/alkit}
[ -x "$ALKIT" ] || { echo "slurm-check: no alkit binary at $ALKIT (set ALKIT)" >&2; exit 2; }
ALKIT=$(cd "$(dirname "$ALKIT")" && pwd)/$(basename "$ALKIT")
[ "$(id -u)" = 0 ] || { echo "slurm-check: run as root (it starts the Slurm daemons)" >&2; exit 2; }
WORK=$(mktemp -d /tmp/alkit-slurm-check.XXXXXX)
say() { echo "slurm-check: $*"; }
fail() { echo "slurm-check: FAILED: $*" >&2; exit 1; }

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  say "installing slurmctld slurmd slurm-client munge"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
    slurmctld slurmd slurm-client munge >"$WORK/apt.log" 2>&1 || fail "apt-get (see $WORK/apt.log)"
fi

# munge: Slurm's authentication; the package made the key.
STARTED_MUNGE=
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge
  runuser -u munge -- /usr/sbin/munged --num-threads=10
  STARTED_MUNGE=1
  sleep 1
  munge -n | unmunge >/dev/null || fail "munged does not answer"
fi

# slurm.conf for this one node.
export SLURM_CONF=$WORK/etc/slurm.conf
mkdir -p "$WORK/etc" "$WORK/state" "$WORK/spool"
NODE=$(slurmd -C | head -1)
HOST=$(hostname -s)
cat >"$SLURM_CONF" <<EOF
ClusterName=alkitcheck
SlurmctldHost=$HOST
AuthType=auth/munge
SlurmUser=root
SlurmdUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
MpiDefault=none
StateSaveLocation=$WORK/state
SlurmdSpoolDir=$WORK/spool
SlurmctldPidFile=$WORK/slurmctld.pid
SlurmdPidFile=$WORK/slurmd.pid
SlurmctldLogFile=$WORK/slurmctld.log
SlurmdLogFile=$WORK/slurmd.log
SlurmctldPort=6917
SlurmdPort=6918
$NODE State=UNKNOWN
PartitionName=check Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
stop() {
  for p in "$WORK/slurmd.pid" "$WORK/slurmctld.pid"; do
    [ -f "$p" ] && kill "$(cat "$p")" 2>/dev/null || true
  done
  if [ -n "$STARTED_MUNGE" ] && [ -f /run/munge/munged.pid ]; then
    kill "$(cat /run/munge/munged.pid)" 2>/dev/null || true
  fi
}
trap stop EXIT
slurmctld -c
slurmd
for _ in $(seq 60); do
  [ "$(sinfo -h -o %T 2>/dev/null)" = idle ] && break
  sleep 1
done
[ "$(sinfo -h -o %T)" = idle ] || fail "the node is not idle: $(sinfo -h -o '%T %E')"
say "Slurm $(sinfo -V | cut -d' ' -f2) up: $NODE"

# The shared folder the recipe reads ($ALKIT_DIR): a checkpoint, the pool, scores/.
export ALKIT_DIR=$WORK/shared PATH=$(dirname "$ALKIT"):$PATH
mkdir -p "$ALKIT_DIR/scores"
cp -r "$ROOT/data" "$ALKIT_DIR/pool"
alkit -q train --model mlp --steps 30 --data "$ALKIT_DIR/pool" --out "$ALKIT_DIR/ck" >/dev/null
alkit -q score --checkpoint "$ALKIT_DIR/ck" --data "$ALKIT_DIR/pool" --scorer entropy --top 1000 \
  --out "$WORK/whole.csv"
# One task's peak memory, the command of the script for shard 0.
/usr/bin/time -v alkit -q score --checkpoint "$ALKIT_DIR/ck" --data "$ALKIT_DIR/pool" \
  --scorer entropy --top 1000 --shard 0/16 --out "$WORK/rss.csv" 2>"$WORK/time.log"
say "one task: $(grep -E 'Maximum resident' "$WORK/time.log" | sed 's/^[[:space:]]*//'), \
$(grep -E 'Elapsed' "$WORK/time.log" | sed 's/^[[:space:]]*//')"

wait_done() { # job ids...: until none is pending or running
  for _ in $(seq 300); do
    [ -z "$(squeue -h -j "$(IFS=,; echo "$*")" 2>/dev/null)" ] && return 0
    sleep 1
  done
  fail "jobs $* still queued after 300 s: $(squeue -h -j "$(IFS=,; echo "$*")")"
}
state() { scontrol show job "$1" | grep -o 'JobState=[A-Z_]*' | head -1 | cut -d= -f2; }

# The recipe, verbatim, from a copy of deploy/slurm/ (job logs land beside it). Task 5's
# output is made unwritable so that it fails; task 9 is cancelled before it starts.
cp -r "$ROOT/deploy/slurm" "$WORK/recipe"
mkdir "$ALKIT_DIR/scores/shard-5.csv"
T0=$(date +%s)
mapfile -t ids < <("$WORK/recipe/submit.sh")
[ "${#ids[@]}" = 2 ] || fail "submit.sh printed ${ids[*]:-nothing}, not two job ids"
jid=${ids[0]} mid=${ids[1]}
scancel "${jid}_9"
say "submitted array $jid and merge $mid (afterany); task 5 made to fail, task 9 cancelled"
wait_done "$jid" "$mid"
[ "$(state "$mid")" = FAILED ] || fail "the merge after a failed task is $(state "$mid"), not FAILED"
grep -q 'error:' "$WORK/recipe/slurm-$mid.out" || fail "the refused merge said nothing"
say "first merge refused: $(grep error: "$WORK/recipe/slurm-$mid.out")"
[ ! -e "$ALKIT_DIR/scores/top1000.csv" ] || fail "a refused merge wrote its output"
failed=$(for i in $(seq 0 15); do s=$(state "${jid}_$i" || true); [ "$s" = COMPLETED ] || echo "$i:${s:-no record (cancelled while pending)}"; done)
say "array tasks not completed: $(echo $failed)"

# The documented recovery: rerun the two tasks, merge once they succeeded.
rmdir "$ALKIT_DIR/scores/shard-5.csv"
mapfile -t ids < <("$WORK/recipe/rerun.sh" 5,9)
[ "${#ids[@]}" = 2 ] || fail "rerun.sh printed ${ids[*]:-nothing}, not two job ids"
rid=${ids[0]} mid2=${ids[1]}
say "rerun array $rid (tasks 5,9) and merge $mid2 (afterok)"
wait_done "$rid" "$mid2"
[ "$(state "$mid2")" = COMPLETED ] || fail "the merge after the rerun is $(state "$mid2"): $(cat "$WORK/recipe/slurm-$mid2.out")"
T1=$(date +%s)
cmp "$ALKIT_DIR/scores/top1000.csv" "$WORK/whole.csv" || fail "the merge differs from the unsharded score"
say "merged $(($(wc -l <"$WORK/whole.csv") - 1)) rows, $(wc -c <"$WORK/whole.csv") bytes: identical to the unsharded score ($((T1 - T0)) s on Slurm)"
say "passed (scratch folder $WORK)"
