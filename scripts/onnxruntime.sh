#!/usr/bin/env bash
# Installs ONNX Runtime's shared library, which `alkit` built with the cargo feature `onnx`
# opens at run time, into a local folder, from PyPI, without root, and writes an environment
# file naming it. Usage:
#
#   scripts/onnxruntime.sh [DIR]           # default DIR: .onnxruntime (ignored by git)
#   source DIR/env.sh                      # ORT_DYLIB_PATH
#   cargo build --release --features onnx
#
# The library is the one inside PyPI's `onnxruntime` wheel (onnxruntime/capi/
# libonnxruntime.so.VERSION), pinned to one release: the `ort` crate alkit uses speaks ONNX
# Runtime's 1.31 API and refuses an older library. The wheel's Python dependencies are not
# installed (`--no-deps`): only its shared library is used, and it needs none of them.
set -euo pipefail
dir="${1:-.onnxruntime}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
  --root-user-action=ignore --no-deps --upgrade --target "$dir/py" onnxruntime==1.32.0
lib=$(ls "$dir"/py/onnxruntime/capi/libonnxruntime.so.* 2>/dev/null | head -1 || true)
[ -n "$lib" ] && [ -f "$lib" ] || { echo "no libonnxruntime.so.* in $dir/py/onnxruntime/capi after the install" >&2; exit 1; }
cat > "$dir/env.sh" <<ENV
# Written by scripts/onnxruntime.sh: the ONNX Runtime library \`alkit\` (feature \`onnx\`) opens.
export ORT_DYLIB_PATH="$lib"
ENV
echo "ONNX Runtime library $lib; now: source $dir/env.sh"
