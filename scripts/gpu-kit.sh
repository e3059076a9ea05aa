#!/usr/bin/env bash
# Builds everything a GPU machine without a Rust toolchain or network needs to run alkit on
# CUDA, and packs it into one folder (the "kit") small enough to carry there (64 MiB; the kit
# is about 20 MiB). Runs on any Linux x86-64 machine with a Rust toolchain and a C compiler;
# no GPU needed. Then, on the GPU machine: `bash scripts/gpu-run.sh --kit KIT --out OUT`.
#
#   scripts/gpu-kit.sh [--kit DIR] [--toolkit DIR] [--compute-cap 90] [--jobs N]
#   nice -n 19 scripts/gpu-kit.sh --jobs 1     # on a shared machine
#
# Steps:
#   1. the CUDA 13.0 toolkit from PyPI (scripts/cuda-toolkit.sh; reused when --toolkit DIR
#      already holds one), CUDA_COMPUTE_CAP 90 (H100/H200) unless --compute-cap says otherwise;
#   2. `cargo build --release --features cuda --bin alkit` and the integration-test binary
#      (`cargo test --release --features cuda --no-run --test alkit`: the `device::` tests run
#      from it), into CARGO_TARGET_DIR (default target/gpu-kit, apart from target/'s locks);
#   3. both stripped and xz-compressed into KIT/bin/; KIT/lib/curand/libcurand.so.10, a
#      stand-in for the four cuRAND calls the binaries import (candle creates, seeds, streams
#      and destroys a generator when it opens a device; alkit draws nothing on the device),
#      for machines whose PyTorch no longer ships cuRAND; the build refuses to pack one if the
#      binaries import any other cuRAND function; KIT/lib/stub/libcuda.so.1, the link stub,
#      for CPU dry runs only; the shipped data (data/ without data/onnx), the PyTorch side
#      (tests/reference/gpu_bench.py, resnet18_model.py, duq_fm_model.py), a copy of
#      gpu-run.sh, and
#      manifest.json (commit, changed files, toolchain, compute capability, the libraries the
#      binaries need, sizes and SHA-256s);
#   4. the sizes, and a refusal if the kit would not fit in 64 MiB.
#
# KIT defaults to target/gpu-kit/kit (ignored by git, so it travels as a carried path).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
kit="$repo/target/gpu-kit/kit" toolkit="$repo/.cuda" cap="${CUDA_COMPUTE_CAP:-90}" jobs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --kit) kit="$2"; shift 2 ;;
    --toolkit) toolkit="$2"; shift 2 ;;
    --compute-cap) cap="$2"; shift 2 ;;
    --jobs|-j) jobs=(-j "$2"); shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//;$d'; exit 0 ;;
    *) echo "gpu-kit.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
cd "$repo"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target/gpu-kit}"
t_start=$(date +%s)
for tool in xz strip nm readelf cc python3; do
  command -v "$tool" >/dev/null || { echo "gpu-kit.sh: needs $tool" >&2; exit 1; }
done

# 1. The toolkit.
if [ -x "$toolkit/py/nvidia/cu13/bin/nvcc" ] && [ -f "$toolkit/env.sh" ] && [ -f "$toolkit/stubs/libcuda.so" ]; then
  echo "== CUDA toolkit: reusing $toolkit"
else
  echo "== CUDA toolkit into $toolkit"
  scripts/cuda-toolkit.sh "$toolkit"
fi
toolkit="$(cd "$toolkit" && pwd)"
export CUDA_COMPUTE_CAP="$cap"
# shellcheck source=/dev/null
source "$toolkit/env.sh"

# 2. The binaries.
echo "== cargo build --release --features cuda --bin alkit (CUDA_COMPUTE_CAP=$CUDA_COMPUTE_CAP, target $CARGO_TARGET_DIR)"
cargo build --release --features cuda --bin alkit "${jobs[@]+"${jobs[@]}"}"
echo "== cargo test --release --features cuda --no-run --test alkit"
cargo test --release --features cuda --no-run --test alkit "${jobs[@]+"${jobs[@]}"}" \
  --message-format=json-render-diagnostics > "$CARGO_TARGET_DIR/gpu-kit-tests.json"
tests=$(python3 -c '
import json, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    t = m.get("target", {})
    if m.get("reason") == "compiler-artifact" and t.get("name") == "alkit" and t.get("kind") == ["test"] and m.get("executable"):
        print(m["executable"])' "$CARGO_TARGET_DIR/gpu-kit-tests.json" | tail -1)
[ -x "$tests" ] || { echo "gpu-kit.sh: no integration-test executable in cargo's output" >&2; exit 1; }
bin="$CARGO_TARGET_DIR/release/alkit"

# 3. The kit.
echo "== packing $kit"
rm -rf "$kit"
mkdir -p "$kit/bin" "$kit/lib/curand" "$kit/lib/stub" "$kit/reference"
pack() {  # pack SRC NAME: stripped, xz-compressed into bin/NAME.xz
  strip --strip-all -o "$kit/bin/$2" "$1"
  xz -9 -T0 "$kit/bin/$2"
}
pack "$bin" alkit
pack "$tests" alkit-tests

# cuRAND's stand-in: exactly the functions the binaries import, or no kit.
curand=$( { nm -D --undefined-only "$bin"; nm -D --undefined-only "$tests"; } | awk '$2 ~ /^curand/ {sub(/@.*/, "", $2); print $2}' | sort -u)
allowed="curandCreateGenerator curandDestroyGenerator curandSetPseudoRandomGeneratorSeed curandSetStream"
for f in $curand; do
  [[ " $allowed " == *" $f "* ]] || { echo "gpu-kit.sh: the binaries import $f from cuRAND; the stand-in only answers: $allowed" >&2; exit 1; }
done
cat > "$kit/lib/curand/curand-standin.c" <<'EOF'
/* A stand-in for libcurand.so.10, used only where the machine has no cuRAND (recent PyTorch
   wheels ship none). candle creates, seeds and attaches a generator to its stream when it
   opens a CUDA device; alkit draws every random number on the CPU, so nothing is generated on
   the device and no generating function is imported (scripts/gpu-kit.sh checks). */
static int generator;
int curandCreateGenerator(void **gen, int kind) { (void)kind; *gen = &generator; return 0; }
int curandDestroyGenerator(void *gen) { (void)gen; return 0; }
int curandSetPseudoRandomGeneratorSeed(void *gen, unsigned long long seed) { (void)gen; (void)seed; return 0; }
int curandSetStream(void *gen, void *stream) { (void)gen; (void)stream; return 0; }
EOF
# The binaries ask for version node libcurand.so.10 (as the real library defines it).
printf 'libcurand.so.10 { global: curand*; local: *; };\n' > "$kit/lib/curand/curand.map"
cc -shared -fPIC -O2 -o "$kit/lib/curand/libcurand.so.10" -Wl,-soname,libcurand.so.10 \
  -Wl,--version-script="$kit/lib/curand/curand.map" "$kit/lib/curand/curand-standin.c"
strip --strip-unneeded "$kit/lib/curand/libcurand.so.10"
cp "$toolkit/stubs/libcuda.so" "$kit/lib/stub/libcuda.so.1"

mkdir -p "$kit/data"
( cd data && find . -path ./onnx -prune -o -type f -print | while read -r f; do
    mkdir -p "$kit/data/$(dirname "$f")"; cp "$f" "$kit/data/$f"; done )
cp tests/reference/gpu_bench.py tests/reference/resnet18_model.py tests/reference/duq_fm_model.py "$kit/reference/"
cp scripts/gpu-run.sh "$kit/gpu-run.sh"
cat > "$kit/README.txt" <<'EOF'
alkit GPU kit (scripts/gpu-kit.sh). On a Linux x86-64 machine with an NVIDIA driver for CUDA 13
(580 or later) and a Python whose PyTorch is a CUDA 13 build (its nvidia/*/lib folders hold
cuBLAS, the CUDA runtime and NVRTC), from a checkout of the same commit or from this folder:

    bash gpu-run.sh --kit . --out results          # about 6 minutes on an H100/H200
    bash gpu-run.sh --help                         # options (--python, --libs, --full, ...)

manifest.json says what was built, from which commit, and for which compute capability.
EOF

# manifest.json
python3 - "$kit" "$bin" "$tests" "$repo" "$CUDA_COMPUTE_CAP" "$toolkit" <<'EOF'
import hashlib, json, os, subprocess, sys
kit, bin_, tests, repo, cap, toolkit = sys.argv[1:7]
def run(*a):
    try:
        return subprocess.run(a, capture_output=True, text=True, cwd=repo).stdout.strip()
    except OSError:
        return ""
def needed(p):
    return [l.split("[")[1].rstrip("]") for l in run("readelf", "-d", p).splitlines() if "(NEEDED)" in l]
files = {}
for root, _, names in os.walk(kit):
    for n in names:
        p = os.path.join(root, n)
        rel = os.path.relpath(p, kit)
        files[rel] = {"bytes": os.path.getsize(p),
                      "sha256": hashlib.sha256(open(p, "rb").read()).hexdigest()}
doc = {
    "built": run("date", "-u", "+%FT%TZ"),
    "commit": run("git", "rev-parse", "HEAD"),
    "changed_files": [l[3:] for l in run("git", "status", "--porcelain").splitlines()],
    "rustc": run("rustc", "--version"), "cargo_features": ["cuda"], "profile": "release",
    "cuda_compute_cap": cap, "nvcc": run(os.path.join(toolkit, "py/nvidia/cu13/bin/nvcc"), "--version").splitlines()[-1:],
    # The integration tests read data/ under the path their crate was built at.
    "manifest_dir": repo,
    "needed": {"alkit": needed(bin_), "alkit-tests": needed(tests)},
    "unpacked_bytes": {"alkit": os.path.getsize(bin_), "alkit-tests": os.path.getsize(tests)},
    "files": files,
    "total_bytes": sum(f["bytes"] for f in files.values()),
}
json.dump(doc, open(os.path.join(kit, "manifest.json"), "w"), indent=1)
EOF

# 4. Sizes.
echo "== the kit: $kit"
( cd "$kit" && find . -type f -printf '%s\t%p\n' | sort -k2 | awk -F'\t' '{ printf "%10.2f MiB  %s\n", $1 / 1048576, $2 }' )
total=$(du -sb "$kit" | cut -f1)
printf '%10.2f MiB  total (the carry limit is 64 MiB; built in %d s)\n' "$(awk -v b="$total" 'BEGIN { print b / 1048576 }')" "$(( $(date +%s) - t_start ))"
if [ "$total" -gt $((60 * 1048576)) ]; then
  echo "gpu-kit.sh: the kit is over 60 MiB: too close to the 64 MiB carry limit" >&2; exit 1
fi
echo "next: bash scripts/gpu-run.sh --kit ${kit#"$repo/"} --out \"\$OUT\"  (on the GPU machine, carrying ${kit#"$repo/"})"
