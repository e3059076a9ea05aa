#!/usr/bin/env bash
# Installs the CUDA 13.0 toolkit parts that `cargo build --features cuda` needs into a local
# folder, from PyPI, without root and without a GPU, and writes an environment file for the
# build. Usage:
#
#   scripts/cuda-toolkit.sh [DIR]          # default DIR: .cuda (ignored by git)
#   source DIR/env.sh                      # CUDA_ROOT, CUDA_PATH, PATH, CUDA_COMPUTE_CAP, ...
#   cargo build --release --features cuda
#
# Every part is pinned to one release: `nvidia-cuda-nvcc` alone pulls the newest NVVM and CRT,
# whose PTX (ISA 9.5) the 13.0 `ptxas` refuses. 13.0 matches the 580 driver of the GPU
# machines this project is lent, so they load the PTX it writes. The runtime libraries
# (cudart, cuBLAS, cuRAND, NVRTC) are for linking the binary and for running it where the
# machine has none; `libcuda` is the driver's, and the link uses the stub below.
# CUDA_COMPUTE_CAP defaults to 90 (H100/H200); set it before sourcing env.sh for another GPU.
set -euo pipefail
dir="${1:-.cuda}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
root="$dir/py/nvidia/cu13"
# A folder that holds this release already is reused as it is (pip --target would reinstall).
if ! "$root/bin/nvcc" --version 2>/dev/null | grep -q "release 13.0"; then
python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
  --root-user-action=ignore --target "$dir/py" \
  nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88 \
  nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85 \
  nvidia-cublas==13.0.2.14 nvidia-curand==10.4.0.35 nvidia-cuda-nvrtc==13.0.88
fi
[ -x "$root/bin/nvcc" ] || { echo "no nvcc in $root/bin after the install" >&2; exit 1; }
[ -x "$root/nvvm/bin/cicc" ] || { echo "no NVVM (cicc) in $root/nvvm after the install" >&2; exit 1; }
# The toolkit's unversioned link names, and a stub libcuda for the link (the real driver is
# loaded by its soname, libcuda.so.1, when the binary runs on a GPU machine).
lib="$root/lib"
for so in "$lib"/lib*.so.*; do
  base="${so%%.so.*}.so"
  [ -e "$base" ] || ln -s "$(basename "$so")" "$base"
done
# The stub exports every driver function cudarc binds (read from cudarc's own bindings, the
# version this workspace resolves), each an empty body that is never called.
mkdir -p "$dir/stubs"
if [ ! -e "$dir/stubs/libcuda.so" ]; then
  cudarc=$(cd "$(dirname "$0")/.." && cargo metadata --quiet --format-version 1 --features cuda |
    python3 -c 'import json,sys; print(next(p["manifest_path"] for p in json.load(sys.stdin)["packages"] if p["name"] == "cudarc"))')
  grep -ohE '\bfn cu[A-Za-z0-9_]+\(' "$(dirname "$cudarc")/src/driver/sys/mod.rs" | sort -u |
    sed -E 's/fn (cu[A-Za-z0-9_]+)\(/void \1(void) {}/' > "$dir/stubs/stub.c"
  cc -shared -o "$dir/stubs/libcuda.so" -Wl,-soname,libcuda.so.1 "$dir/stubs/stub.c"
fi
cat > "$dir/env.sh" <<EOF
# Written by scripts/cuda-toolkit.sh: the environment for \`cargo build --features cuda\`.
export CUDA_ROOT="$root"
export CUDA_PATH="$root"
export CUDA_HOME="$root"
export PATH="$root/bin:\$PATH"
export CUDA_COMPUTE_CAP="\${CUDA_COMPUTE_CAP:-90}"
export LIBRARY_PATH="$lib:$dir/stubs\${LIBRARY_PATH:+:\$LIBRARY_PATH}"
export CPATH="$root/include\${CPATH:+:\$CPATH}"
EOF
"$root/bin/nvcc" --version | tail -2
echo "CUDA toolkit in $root; now: source $dir/env.sh"
