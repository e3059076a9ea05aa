#!/usr/bin/env bash
# The one script a GPU machine runs: alkit's proof run on CUDA, from the kit that
# scripts/gpu-kit.sh packed (no Rust toolchain, no network needed there). Sized for about 6
# minutes on an H100/H200 (an estimate until a GPU has run it). Every log, and the figures as
# JSON and Markdown, go under --out:
#
#   bash scripts/gpu-run.sh --kit target/gpu-kit/kit --out "$OUT"          # on the GPU machine
#   scripts/gpu-run.sh --dry-run --kit target/gpu-kit/kit --out /tmp/dry  # the CPU dry run
#   scripts/gpu-run.sh --dry-run --bin target/debug --tests EXE --out /tmp/dry   # CI: debug build
#
# What it runs, in order, each step under a time limit, its log in OUT/logs/, its exit status
# and seconds in OUT/steps.jsonl (a step that fails is recorded and the run goes on):
#   1. the environment: nvidia-smi, the kit's manifest, Python and PyTorch, and where the CUDA
#      libraries come from (below); nvidia-smi samples utilisation every 200 ms meanwhile;
#   2. the device tests (`device::` of the integration-test binary) with ALKIT_TEST_DEVICE;
#   3. the README's commands with --device (the main `curve` with 2 cycles instead of 10,
#      `--full` for all 10, and `train` here; the others as written or with fewer seeds or
#      cycles, each said in OUT/readme.jsonl, after step 5, skipped once --budget is spent);
#   4. determinism: the same `score` twice on the device, compared byte for byte, and each
#      scorer's top-100 overlap with the CPU's scores of the same checkpoint;
#   5. the benchmark: `alkit bench` rows (one process per row), one curve cycle's training
#      (from step 3's curve.csv), a photo pool embedded by a ResNet-18 backbone, then
#      tests/reference/gpu_bench.py, PyTorch on the same device (TF32 off, then on);
#   6. the report: OUT/figures.json and OUT/figures.md (alkit beside PyTorch, GPU utilisation
#      during each row's timed window), OUT/summary.json (every step's status).
#
# The CUDA libraries the binaries link (cuBLAS and its cuBLASLt, the runtime, cuRAND) are found
# in the machine's PyTorch install: the script asks `python -c "import torch"` for its
# site-packages and puts every `nvidia/*/lib` there (the cu12 layout, one folder per library,
# and the cu13 layout, `nvidia/cu13/lib`) on LD_LIBRARY_PATH, then `ldd` must resolve every
# library of the binary, or the script says which are missing and stops. `--libs DIR` adds a
# folder first (a CUDA toolkit's lib64, or scripts/cuda-toolkit.sh's `py/nvidia/cu13/lib`).
# libcuda.so.1 is the driver's. Recent PyTorch wheels no longer ship cuRAND: candle creates a
# cuRAND generator when it opens the device, but alkit draws every random number on the CPU
# and the binaries import no generating function (gpu-kit.sh checks), so where no
# libcurand.so.10 resolves, the kit's stand-in (kit/lib/curand), which answers the
# generator's create, seed, set-stream and destroy, is used (logs/libraries.log says so).
#
# Options:
#   --kit DIR       the kit (default: target/gpu-kit/kit beside this script's repository)
#   --out DIR       where results go (default: $OUT, else ./gpu-out)
#   --device D      cuda (default) or cpu
#   --profile P     gpu (default: full sizes) or smoke (tiny sizes, for a dry run)
#   --dry-run       --device cpu --profile smoke; the link stub stands in for libcuda.so.1
#   --bin DIR       take `alkit` from DIR instead of the kit (e.g. target/debug)
#   --tests PATH    the integration-test binary instead of the kit's (skipped with --bin and
#                   no --tests)
#   --data DIR      the shipped data (default: the kit's copy, else the repository's data/)
#   --python PY     the Python with PyTorch (default: python3)
#   --libs DIR      a folder of CUDA libraries put first on LD_LIBRARY_PATH (repeatable)
#   --budget S      seconds after which optional steps are skipped (default 330; smoke 240)
#   --full          the README's `curve` unreduced (10 cycles; its time limit 900 s, not 240)
#   --no-torch      skip the PyTorch side
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
kit="" out="${OUT:-}" device=cuda profile=gpu bindir="" tests="" data="" py=python3
budget="" full=0 notorch=0 dry=0
libs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --kit) kit="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --device) device="$2"; shift 2 ;;
    --profile) profile="$2"; shift 2 ;;
    --dry-run) dry=1; device=cpu; profile=smoke; shift ;;
    --bin) bindir="$2"; shift 2 ;;
    --tests) tests="$2"; shift 2 ;;
    --data) data="$2"; shift 2 ;;
    --python) py="$2"; shift 2 ;;
    --libs) libs+=("$(cd "$2" && pwd)"); shift 2 ;;
    --budget) budget="$2"; shift 2 ;;
    --full) full=1; shift ;;
    --no-torch) notorch=1; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//;$d'; exit 0 ;;
    *) echo "gpu-run.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$device" in cuda|cpu) ;; *) echo "gpu-run.sh: --device cuda or cpu" >&2; exit 2 ;; esac
case "$profile" in gpu|smoke) ;; *) echo "gpu-run.sh: --profile gpu or smoke" >&2; exit 2 ;; esac
[ -n "$budget" ] || { [ "$profile" = gpu ] && budget=330 || budget=240; }
[ -n "$out" ] || out="$PWD/gpu-out"
mkdir -p "$out/logs" || exit 2
out="$(cd "$out" && pwd)"
if [ -z "$kit" ] && [ -z "$bindir" ]; then kit="$repo/target/gpu-kit/kit"; fi
if [ -n "$kit" ]; then
  [ -f "$kit/manifest.json" ] || { echo "gpu-run.sh: no kit at $kit (scripts/gpu-kit.sh makes one)" >&2; exit 2; }
  kit="$(cd "$kit" && pwd)"
fi
work="$(mktemp -d "${TMPDIR:-/tmp}/alkit-gpu-run.XXXXXX")"
made_link=""
trap 'kill "${sampler:-}" 2>/dev/null; rm -rf "$work"; [ -z "$made_link" ] || rm -f "$made_link"' EXIT
start=$(date +%s.%N)
: > "$out/steps.jsonl"; : > "$out/alkit-rows.jsonl"; : > "$out/readme.jsonl"
exec > >(tee -a "$out/run.log") 2>&1

# ------------------------------------------------------------------------------- helpers
now() { date +%s.%N; }
elapsed() { awk -v a="$start" -v b="$(now)" 'BEGIN { printf "%.0f", b - a }'; }
jstr() { local s=${1//\\/\\\\}; s=${s//\"/\\\"}; s=${s//$'\n'/ }; printf '"%s"' "$s"; }
record() {  # record NAME RC SECONDS T0 T1 NOTE
  printf '{"step": %s, "rc": %s, "seconds": %s, "t0": %s, "t1": %s, "note": %s}\n' \
    "$(jstr "$1")" "$2" "$3" "$4" "$5" "$(jstr "$6")" >> "$out/steps.jsonl"
}
skip() {  # skip NAME REASON
  echo "-- skipped $1: $2"
  printf '{"step": %s, "skipped": %s}\n' "$(jstr "$1")" "$(jstr "$2")" >> "$out/steps.jsonl"
}
over() { [ "$(elapsed)" -ge "$budget" ]; }
# step NAME LIMIT CMD...: runs CMD (stdout and stderr to logs/NAME.log) under a time limit.
step() {
  local name=$1 limit=$2; shift 2
  local t0 t1 rc
  echo "== $name ($(elapsed) s in): $*"
  t0=$(now)
  timeout -k 10 "$limit" "$@" > "$out/logs/$name.log" 2>&1
  rc=$?
  t1=$(now)
  local secs; secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
  local note=""; [ "$rc" = 124 ] || [ "$rc" = 137 ] && note="timed out after ${limit} s"
  record "$name" "$rc" "$secs" "$t0" "$t1" "$note"
  [ "$rc" = 0 ] || { echo "   $name: exit $rc${note:+ ($note)}; last lines:"; tail -5 "$out/logs/$name.log" | sed 's/^/   | /'; }
  LAST_T0=$t0 LAST_T1=$t1
  return "$rc"
}
# readme NAME LIMIT NOTE CMD...: a README command, recorded in readme.jsonl too.
readme() {
  local name=$1 limit=$2 note=$3; shift 3
  local rc=0
  if over; then skip "readme-$name" "time budget ($budget s) spent"; rc=skipped
  else step "readme-$name" "$limit" "$@"; rc=$?; fi
  printf '{"name": %s, "rc": %s, "command": %s, "note": %s}\n' "$(jstr "$name")" \
    "$(jstr "$rc")" "$(jstr "${*#"$ALKIT"}")" "$(jstr "$note")" >> "$out/readme.jsonl"
}
# arow WORKLOAD UNIT VALUE N T0 T1 [EXTRA_JSON]: one alkit row of the benchmark.
arow() {
  printf '{"workload": %s, "side": "alkit", "unit": %s, "value": %s, "n": %s, "t0": %s, "t1": %s%s}\n' \
    "$(jstr "$1")" "$(jstr "$2")" "${3:-null}" "${4:-null}" "${5:-null}" "${6:-null}" "${7:+, $7}" \
    >> "$out/alkit-rows.jsonl"
}
pyok() { "$py" -c 'import sys' >/dev/null 2>&1; }
# A Python for the stdlib helpers: --python when it runs, else python3.
spy="$py"; pyok || spy=python3

# ------------------------------------------------------------------------------- 1. environment
echo "alkit GPU run: device $device, profile $profile, budget $budget s, out $out"
{
  echo "date: $(date -u +%FT%TZ)"; echo "host: $(uname -a)"; echo "cores: $(nproc)"
  free -g 2>/dev/null | sed -n 2p | awk '{print "memory: " $2 " GiB"}'
  [ -n "$kit" ] && { echo "kit: $kit"; cat "$kit/manifest.json"; }
} > "$out/logs/env.log"
if command -v nvidia-smi >/dev/null 2>&1; then
  step nvidia-smi 60 nvidia-smi
  nvidia-smi -q > "$out/logs/nvidia-smi-q.log" 2>&1
  nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader,nounits \
    -lms 200 > "$out/gpu-samples.csv" 2>/dev/null &
  sampler=$!
else
  skip nvidia-smi "no nvidia-smi on this machine"
  [ "$device" = cuda ] && echo "warning: --device cuda without nvidia-smi"
fi

# The binaries: the kit's (xz-compressed, unpacked into a scratch folder) or --bin's.
mkdir -p "$work/bin"
unxz_to() {  # unxz_to FILE.xz DEST
  if command -v xz >/dev/null 2>&1; then xz -dc "$1" > "$2"
  else "$spy" -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$2"; fi
  chmod +x "$2"
}
if [ -n "$bindir" ]; then
  ALKIT="$(cd "$bindir" && pwd)/alkit"
  [ -x "$ALKIT" ] || { echo "gpu-run.sh: no alkit in $bindir" >&2; exit 2; }
else
  unxz_to "$kit/bin/alkit.xz" "$work/bin/alkit" || { echo "gpu-run.sh: cannot unpack the kit's alkit" >&2; exit 2; }
  ALKIT="$work/bin/alkit"
  if [ -z "$tests" ] && [ -f "$kit/bin/alkit-tests.xz" ]; then
    unxz_to "$kit/bin/alkit-tests.xz" "$work/bin/alkit-tests" && tests="$work/bin/alkit-tests"
  fi
fi
[ -z "$tests" ] || tests="$(cd "$(dirname "$tests")" && pwd)/$(basename "$tests")"
if [ -z "$data" ]; then
  if [ -n "$kit" ] && [ -d "$kit/data" ]; then data="$kit/data"; else data="$repo/data"; fi
fi
data="$(cd "$data" && pwd)"
ref="$repo/tests/reference"
[ -n "$kit" ] && [ -f "$kit/reference/gpu_bench.py" ] && ref="$kit/reference"

# The CUDA libraries: --libs first, then PyTorch's nvidia/*/lib, then (for a CPU dry run of a
# CUDA build) the kit's link stub as libcuda.so.1; cuRAND's stand-in last, only if needed.
lib_note=""
torch_libs=""
if pyok; then
  torch_libs=$("$py" - <<'EOF' 2>/dev/null
import glob, os, site, sys
try:
    import torch
    roots = {os.path.dirname(os.path.dirname(torch.__file__))}
except Exception:
    roots = set()
roots |= set(site.getsitepackages()) | {site.getusersitepackages()}
seen = []
for r in sorted(roots):
    for d in sorted(glob.glob(os.path.join(r, "nvidia", "*", "lib"))):
        if d not in seen and glob.glob(os.path.join(d, "lib*.so*")):
            seen.append(d)
print(":".join(seen))
EOF
  )
fi
ldpath=""
for d in "${libs[@]+"${libs[@]}"}"; do ldpath="$ldpath${ldpath:+:}$d"; done
[ -z "$torch_libs" ] || ldpath="$ldpath${ldpath:+:}$torch_libs"
export LD_LIBRARY_PATH="$ldpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
missing() { ldd "$ALKIT" 2>/dev/null | awk '/not found/ {print $1}' | sort -u | tr '\n' ' '; }
miss=$(missing)
if [[ " $miss " == *" libcuda.so.1 "* ]] && [ "$device" = cpu ] && [ -n "$kit" ] && [ -e "$kit/lib/stub/libcuda.so.1" ]; then
  export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$kit/lib/stub"
  lib_note="$lib_note libcuda.so.1: the kit's link stub (no driver; --device cpu only)."
  miss=$(missing)
fi
if [[ " $miss " == *" libcurand.so.10 "* ]] && [ -n "$kit" ] && [ -e "$kit/lib/curand/libcurand.so.10" ]; then
  export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$kit/lib/curand"
  lib_note="$lib_note libcurand.so.10: the kit's stand-in (no cuRAND beside PyTorch; alkit draws no random numbers on the device)."
  miss=$(missing)
fi
{
  echo "python: $py"; echo "PyTorch's CUDA library folders: ${torch_libs:-none}"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"; echo "notes:$lib_note"; echo; ldd "$ALKIT"
} > "$out/logs/libraries.log" 2>&1
if [ -n "$miss" ]; then
  echo "gpu-run.sh: $ALKIT cannot load: not found: $miss"
  echo "  searched: ${LD_LIBRARY_PATH:-nothing}; give a folder holding them with --libs DIR"
  record libraries 1 0 "$(now)" "$(now)" "not found: $miss"
  exit 1
fi
record libraries 0 0 "$(now)" "$(now)" "resolved;$lib_note"
echo "libraries: every one resolves;${lib_note:- nothing stood in}"
"$ALKIT" --version > "$out/logs/alkit-version.log" 2>&1 || { echo "gpu-run.sh: $ALKIT does not run" >&2; exit 1; }

# Sizes per profile.
if [ "$profile" = gpu ]; then
  steps_short=() pool=65536 reps=3 pass_s=1.0 photos=2048 duq_steps=10 train_steps=()
  curve_cycles=(--cycles 2); curve_limit=240
  [ "$full" = 1 ] && curve_cycles=() curve_limit=900
  small=(--cycles 2 --seeds 1)
else
  steps_short=(--steps 20) pool=512 reps=1 pass_s=0.2 photos=16 duq_steps=1 train_steps=(--train-steps 20)
  curve_cycles=(--cycles 1 --scorer entropy,random) small=(--cycles 1 --seeds 1) curve_limit=120
fi
curve_steps=500; [ "$profile" = smoke ] && curve_steps=20
r="$work/readme"; mkdir -p "$r"
export ALKIT_CACHE="$work/cache"
cd "$work"
ln -s "$data" data

# ------------------------------------------------------------------------------- 2. device tests
if [ -z "$tests" ]; then
  skip device-tests "no integration-test binary (give --tests PATH)"
else
  # The tests read data/ beside their crate's manifest (a path fixed when they were built).
  mdir=""
  [ -n "$kit" ] && mdir=$("$spy" -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifest_dir"])' "$kit/manifest.json" 2>/dev/null)
  tnote=""
  if [ -n "$mdir" ] && [ ! -f "$mdir/data/train-images-idx3-ubyte.gz" ]; then
    if [ ! -e "$mdir" ] && mkdir -p "$(dirname "$mdir")" 2>/dev/null && ln -s "$(dirname "$data")" "$mdir" 2>/dev/null; then
      made_link="$mdir"
      tnote="linked $mdir -> $(dirname "$data") (the path the tests were built at)"
    else
      tnote="cannot provide $mdir/data"
    fi
  fi
  step device-tests-list 60 "$tests" --list device::
  ntests=$(grep -c ': test$' "$out/logs/device-tests-list.log")
  echo "   $ntests device tests${tnote:+; $tnote}"
  if [ "$profile" = gpu ]; then filter=(device::); else filter=(device::col2im_and_the_max_pool_route); fi
  step device-tests 240 env ALKIT_TEST_DEVICE="$device" "$tests" "${filter[@]}"
  grep -E '^test |test result' "$out/logs/device-tests.log" | sed 's/^/   /'
fi

# ------------------------------------------------------------------------------- 3. README commands
D=(--device "$device" -q)
readme curve "$curve_limit" "the main job; ${curve_cycles[*]:-unreduced}" \
  "$ALKIT" curve "${D[@]}" "${steps_short[@]}" "${curve_cycles[@]}" --out "$r/curve"
cp "$r/curve/curve.csv" "$out/readme-curve.csv" 2>/dev/null
cp "$r/curve/summary.csv" "$out/readme-curve-summary.csv" 2>/dev/null
readme train-cnn 90 "the backbone for --backbone and the determinism check" \
  "$ALKIT" train "${D[@]}" --data data --model cnn "${steps_short[@]}" --out "$r/cnn"

# ------------------------------------------------------------------------------- 4. determinism
det_note="skipped"
if [ -d "$r/cnn" ] && ! over; then
  sc=entropy,bald,regrad
  # (A relative path: `--checkpoint` splits a comma-separated list into an ensemble, so a
  # path with a comma in it would not open.)
  step score-device-1 60 "$ALKIT" score --device "$device" -q --checkpoint readme/cnn --data data --scorer $sc --out "$work/s1.csv"
  step score-device-2 60 "$ALKIT" score --device "$device" -q --checkpoint readme/cnn --data data --scorer $sc --out "$work/s2.csv"
  step score-cpu 120 "$ALKIT" score --device cpu -q --checkpoint readme/cnn --data data --scorer $sc --out "$work/s-cpu.csv"
  "$spy" - "$work/s1.csv" "$work/s2.csv" "$work/s-cpu.csv" "$out/determinism.json" <<'EOF'
import csv, json, os, sys
a, b, c, dst = sys.argv[1:5]
def load(p):
    rows = list(csv.DictReader(open(p))) if os.path.exists(p) else []
    return rows
doc = {}
if os.path.exists(a) and os.path.exists(b):
    ba, bb = open(a, "rb").read(), open(b, "rb").read()
    ra, rb = load(a), load(b)
    doc["identical_bytes"] = ba == bb
    doc["rows"] = len(ra)
    doc["differing_rows"] = sum(x != y for x, y in zip(ra, rb)) + abs(len(ra) - len(rb))
rc = load(c)
ra = load(a)
if ra and rc:
    overlap, maxrel = {}, {}
    for s in [k for k in ra[0] if k not in ("index", "id", "path")]:
        top = lambda rows: {r["id"] for r in sorted(rows, key=lambda r: -float(r[s]))[:100]}
        overlap[s] = len(top(ra) & top(rc)) / 100
        maxrel[s] = max(abs(float(x[s]) - float(y[s])) / (1 + abs(float(y[s]))) for x, y in zip(ra, rc))
    doc["top100_overlap_with_cpu"] = overlap
    doc["max_rel_diff_vs_cpu"] = maxrel
json.dump(doc, open(dst, "w"), indent=1)
print("   determinism:", json.dumps(doc))
EOF
  det_note="done"
else
  skip determinism "no checkpoint from readme-train-cnn, or the time budget is spent"
fi

# ------------------------------------------------------------------------------- 5. benchmark, alkit
bjson() {  # bjson KEY FILE: a number from alkit bench's one JSON line
  "$spy" -c 'import json,sys; print(json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])[sys.argv[1]])' "$1" "$2" 2>/dev/null
}
# fit RATE MIN MAX MULT: the pool size whose pass takes about pass_s seconds.
fit() { awk -v r="$1" -v lo="$2" -v hi="$3" -v m="$4" -v s="$pass_s" \
  'BEGIN { n = int(r * s / m) * m; if (n < lo) n = lo; if (n > hi) n = hi; print n }'; }
# brow WORKLOAD PROBE_N MAX_N MULT SCORER [bench flags...]: one scoring row, its pool size
# from a probe pass when PROBE_N > 0.
brow() {
  local w=$1 probe=$2 max=$3 mult=$4 s=$5; shift 5
  local n=$max rate
  if over; then skip "bench-$w" "time budget ($budget s) spent"; arow "$w" samples/s null null null null '"skipped": "time budget"'; return; fi
  if [ "$probe" -gt 0 ]; then
    step "bench-$w-probe" 90 "$ALKIT" bench --device "$device" -q --data data --scorer "$s" --n "$probe" --repeats 1 --json "$@" || { arow "$w" samples/s null null null null '"skipped": "probe failed"'; return; }
    rate=$(bjson "$s" "$out/logs/bench-$w-probe.log")
    n=$(fit "$rate" "$probe" "$max" "$mult")
  fi
  if step "bench-$w" 180 "$ALKIT" bench --device "$device" -q --data data --scorer "$s" --n "$n" --repeats "$reps" --json "$@"; then
    rate=$(bjson "$s" "$out/logs/bench-$w.log")
    # The timed passes are the last n * repeats / rate seconds of the process.
    local t0; t0=$(awk -v t="$LAST_T1" -v n="$n" -v k="$reps" -v r="$rate" 'BEGIN { printf "%.3f", t - n * k / r }')
    arow "$w" samples/s "$rate" "$n" "$t0" "$LAST_T1" "\"repeats\": $reps, \"command\": $(jstr "alkit bench --scorer $s --n $n --repeats $reps $*")"
  else
    arow "$w" samples/s null "$n" null null '"skipped": "alkit bench failed (see its log)"'
  fi
}
ts=("${train_steps[@]+"${train_steps[@]}"}")
brow cnn-entropy 0 "$pool" 256 entropy "${ts[@]+"${ts[@]}"}"
brow cnn-bald 0 "$pool" 256 bald "${ts[@]+"${ts[@]}"}"
probe() { [ "$profile" = gpu ] && echo "$1" || echo 0; }
brow cnn-regrad "$(probe 2048)" "$pool" 256 regrad "${ts[@]+"${ts[@]}"}"
brow cnn-regrad-star "$(probe 512)" "$([ "$profile" = gpu ] && echo "$pool" || echo 128)" 256 regrad-star "${ts[@]+"${ts[@]}"}"
if [ "$profile" = gpu ]; then
  brow resnet18-entropy 1024 "$pool" 256 entropy --model resnet18 --train-steps 1
  # Whole batches (256): a GPU pads a partial batch to its full size, so a smaller pool
  # would be timed as 256 rows of work.
  brow resnet18-regrad 256 "$pool" 256 regrad --model resnet18 --train-steps 1
else
  brow resnet18-entropy 0 32 1 entropy --model resnet18 --train-steps 1
  # A built-in model's gradient scores run whole batches of 256 rows: minutes on a CPU.
  skip bench-resnet18-regrad "smoke profile: one padded batch of 256 ResNet-18 REGrad rows takes minutes on a CPU"
  arow resnet18-regrad samples/s null null null null '"skipped": "smoke profile (CPU)"'
fi
# One curve cycle's training: curve.csv's train_s of the cycles after the first (warm).
if [ -f "$r/curve/curve.csv" ]; then
  read -r med cnt < <("$spy" -c '
import csv, statistics, sys
v = [float(r["train_s"]) for r in csv.DictReader(open(sys.argv[1])) if int(r["cycle"]) >= 1]
print(statistics.median(v), len(v))' "$r/curve/curve.csv")
  arow cnn-curve-train "s per $curve_steps Adam steps" "$med" null null null \
    "\"higher_is_better\": false, \"cycles_timed\": $cnt, \"source\": \"readme curve: curve.csv train_s, cycles >= 1, median\""
else
  arow cnn-curve-train "s per $curve_steps Adam steps" null null null null '"higher_is_better": false, "skipped": "no curve.csv"'
fi
for lam in 0 0.5; do
  w="duq-train-l$lam"
  if over; then skip "bench-$w" "time budget"; continue; fi
  if step "bench-$w" 120 "$ALKIT" bench --device "$device" -q --data data --train duq-fm --penalty-weight "$lam" --steps "$duq_steps" --repeats "$reps" --json; then
    rate=$(bjson duq-fm "$out/logs/bench-$w.log")
    t0=$(awk -v t="$LAST_T1" -v n="$((duq_steps * 128))" -v k="$reps" -v r="$rate" 'BEGIN { printf "%.3f", t - n * k / r }')
    arow "$w" images/s "$rate" "$((duq_steps * 128))" "$t0" "$LAST_T1" "\"penalty_weight\": $lam, \"steps\": $duq_steps, \"repeats\": $reps"
  fi
done
# A photo pool embedded through a frozen layer-library ResNet-18 (ImageNet stem at the 64x64
# items a folder of photos of mixed sizes becomes), trained one step on a few labeled photos.
if ! over && step photos 120 "$spy" "$ref/gpu_bench.py" photos "$work/photos" --pool "$photos"; then
  step train-resnet18 120 "$ALKIT" train --device "$device" -q --data "$work/photos/labeled" --model resnet18 --steps 1 --out "$work/res18"
  if [ -d "$work/res18" ]; then
    # The pool's first eighth as a pool of its own: the difference between the two runs is
    # the marginal cost of the other photos, the process's fixed costs (start, device set-up,
    # checkpoint) cancelled.
    k=$((photos / 8)); [ "$k" -ge 2 ] || k=2
    mkdir -p "$work/photos/head"
    find "$work/photos/pool" -name '*.png' | sort | head -n "$k" | while read -r f; do cp "$f" "$work/photos/head/"; done
    step embed-first 120 "$ALKIT" embed --device "$device" -q --checkpoint "$work/res18" --data "$work/photos/pool" --out "$work/e1.safetensors"
    if step embed-head 120 "$ALKIT" embed --device "$device" -q --checkpoint "$work/res18" --data "$work/photos/head" --out "$work/e3.safetensors"; then
      th0=$LAST_T0 th1=$LAST_T1
      if step embed 120 "$ALKIT" embed --device "$device" -q --checkpoint "$work/res18" --data "$work/photos/pool" --out "$work/e2.safetensors"; then
        read -r rate whole < <(awk -v n="$photos" -v k="$k" -v a="$LAST_T0" -v b="$LAST_T1" -v c="$th0" -v d="$th1" \
          'BEGIN { m = (b - a) - (d - c); printf "%s %.2f\n", (m > 0 ? sprintf("%.2f", (n - k) / m) : "null"), n / (b - a) }')
        arow resnet18-embed-photos images/s "$rate" "$photos" "$LAST_T0" "$LAST_T1" \
          "\"timed\": \"alkit embed of $photos photos minus alkit embed of their first $k, whole processes (decode, forward, file written)\", \"whole_process_images_per_s\": $whole"
      fi
    fi
  fi
else
  skip embed "no photos (or the time budget is spent)"
fi

# ------------------------------------------------------------------------------- 5b. PyTorch
if [ "$notorch" = 1 ]; then
  printf '{"skipped": "--no-torch", "rows": []}\n' > "$out/torch-rows.json"; skip pytorch "--no-torch"
elif ! "$py" -c 'import torch' > "$out/logs/torch-import.log" 2>&1; then
  why="PyTorch is not importable by $py: $(tail -1 "$out/logs/torch-import.log")"
  printf '{"skipped": %s, "rows": []}\n' "$(jstr "$why")" > "$out/torch-rows.json"; skip pytorch "$why"
elif [ "$device" = cuda ] && ! "$py" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
  why="torch.cuda.is_available() is False for $py"
  printf '{"skipped": %s, "rows": []}\n' "$(jstr "$why")" > "$out/torch-rows.json"; skip pytorch "$why"
else
  [ -d "$work/photos" ] && ph=(--photos "$work/photos") || ph=()
  step pytorch 300 "$py" "$ref/gpu_bench.py" bench --device "$device" --profile "$profile" \
    --out "$out/torch-rows.json" "${ph[@]+"${ph[@]}"}" || true
  [ -f "$out/torch-rows.json" ] || printf '{"skipped": "gpu_bench.py failed (logs/pytorch.log)", "rows": []}\n' > "$out/torch-rows.json"
fi

# ------------------------------------------------------------------------------- 3b. the other README commands
E=data/embeddings/mnist-rp32.safetensors
readme cold-start 120 "${small[*]} (README: 10 cycles, --seeds 3)" \
  "$ALKIT" curve "${D[@]}" --data "$E" --model linear --cold-start --initial 10 --query 10 \
  --scorer typiclust,probcover,badge,random "${small[@]}" "${steps_short[@]}" --out "$r/cold"
readme calibrate 120 "as written" \
  "$ALKIT" calibrate "${D[@]}" --data data --steps "$([ "$profile" = gpu ] && echo 300 || echo 20)" \
  --scorer energy,knn,mahalanobis,vim --conformal 0.1 --out "$r/cal"
readme embeddings-curve 120 "${small[*]} (README: 10 cycles, 1 seed)" \
  "$ALKIT" curve "${D[@]}" --data "$E" --model linear --scorer entropy,regrad,random --layers last \
  "${small[@]}" "${steps_short[@]}" --out "$r/emb"
if [ -d "$r/cnn" ]; then
  readme frozen-curve 120 "${small[*]} (README: 10 cycles)" \
    "$ALKIT" curve "${D[@]}" --data data --backbone "$r/cnn" --scorer entropy,regrad --layers last \
    "${small[@]}" "${steps_short[@]}" --out "$r/frozen"
  readme init 90 "--pool data (the shipped MNIST subset) instead of my_photos/" \
    "$ALKIT" init "${D[@]}" --pool data --backbone "$r/cnn" --classes 0,1,2,3,4,5,6,7,8,9 --state "$r/sess"
  readme query-csv 90 "a first batch to answer" "$ALKIT" query "${D[@]}" --state "$r/sess" --n 20 --out "$r/b1.csv"
  if [ -f "$r/b1.csv" ]; then
    awk -F, 'NR == 1 { print "id,label"; next } { print $1 "," ($2 % 10) }' "$r/b1.csv" > "$r/answers.csv"
    readme teach 60 "answers made up from the batch (label = index mod 10)" \
      "$ALKIT" teach "${D[@]}" --state "$r/sess" --labels "$r/answers.csv"
    readme query-label-studio 90 "as written, after the answers" \
      "$ALKIT" query "${D[@]}" --state "$r/sess" --n 50 --format label-studio --out "$r/round1.json"
    readme status 30 "as written" "$ALKIT" status --state "$r/sess"
  fi
fi
for why in "score --checkpoint emb.safetensors: needs an embedding file carrying its model's last layer; none ships" \
           "ONNX (score --checkpoint model.onnx): the onnx feature and ONNX Runtime are not in the kit" \
           "serve-label-studio, label: a Label Studio server or a person in a browser" \
           "the Python package: not built for CUDA here"; do
  printf '{"name": %s, "rc": "skipped", "note": %s}\n' "$(jstr "${why%%:*}")" "$(jstr "${why#*: }")" >> "$out/readme.jsonl"
done

# ------------------------------------------------------------------------------- 6. report
kill "${sampler:-}" 2>/dev/null; sampler=""
sleep 0.3
"$spy" "$ref/gpu_bench.py" report --out "$out" > "$out/logs/report.log" 2>&1 || echo "report failed: logs/report.log"
"$spy" - "$out" "$device" "$profile" "$(elapsed)" "$kit" <<'EOF'
import json, os, sys
out, device, profile, wall, kit = sys.argv[1:6]
steps = [json.loads(l) for l in open(os.path.join(out, "steps.jsonl")) if l.strip()]
readme = [json.loads(l) for l in open(os.path.join(out, "readme.jsonl")) if l.strip()]
def j(name):
    p = os.path.join(out, name)
    return json.load(open(p)) if os.path.exists(p) else None
fig = j("figures.json") or {}
doc = {"device": device, "profile": profile, "wall_s": int(wall),
       "kit": j(os.path.join(kit, "manifest.json")) if kit else None,
       "failed": [s["step"] for s in steps if s.get("rc") not in (0, None)],
       "skipped": [f'{s["step"]}: {s["skipped"]}' for s in steps if "skipped" in s],
       "steps": steps, "readme": readme, "determinism": j("determinism.json"),
       "benchmark": fig.get("table"), "torch": fig.get("torch")}
json.dump(doc, open(os.path.join(out, "summary.json"), "w"), indent=1)
print(f"\n{len(steps)} steps in {wall} s; failed: {doc['failed'] or 'none'}")
for s in doc["skipped"]:
    print("skipped:", s)
EOF
cat "$out/figures.md" 2>/dev/null
echo "results: $out (summary.json, figures.json, figures.md, logs/)"
"$spy" -c 'import json,sys; sys.exit(1 if json.load(open(sys.argv[1]))["failed"] else 0)' "$out/summary.json"
