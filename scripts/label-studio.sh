#!/usr/bin/env bash
# Installs PyPI's Label Studio into a Python virtual environment for the test that runs a real
# Label Studio (tests/alkit/label_studio.rs), and writes an environment file naming it. Usage:
#
#   scripts/label-studio.sh [DIR]          # default DIR: .label-studio (ignored by git)
#   source DIR/env.sh                      # ALKIT_LABEL_STUDIO
#   cargo test label_studio
#
# One release is pinned so that every machine tests against the same server. A DIR that
# already holds it is reused as it is. Installed without compiling every module ahead
# (`--no-compile`: about a minute instead of three with pip's cache warm); Python compiles
# what the server imports on its first start. The test starts it offline on loopback with its
# data in the test's own folder.
set -euo pipefail
version=1.23.2
dir="${1:-.label-studio}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
exe="$dir/venv/bin/label-studio"
have=""
if [ -x "$dir/venv/bin/python" ]; then
  have="$("$dir/venv/bin/python" -c 'import importlib.metadata as m; print(m.version("label-studio"))' 2>/dev/null || true)"
fi
if [ "$have" != "$version" ]; then
  [ -x "$dir/venv/bin/python" ] || python3 -m venv "$dir/venv"
  "$dir/venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    --no-warn-script-location --root-user-action=ignore --no-compile "label-studio==$version"
fi
# `label-studio --version` would start a server; the subcommand prints and returns.
LATEST_VERSION_CHECK=false "$exe" version >/dev/null 2>&1 || {
  echo "label-studio does not run from $dir/venv" >&2
  exit 1
}
cat > "$dir/env.sh" <<ENV
# Written by scripts/label-studio.sh: the Label Studio $version that tests/alkit/label_studio.rs runs.
export ALKIT_LABEL_STUDIO="$exe"
ENV
echo "Label Studio $version at $exe; now: source $dir/env.sh"
