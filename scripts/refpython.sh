#!/usr/bin/env bash
# Makes a Python virtual environment with numpy (and the pinned libraries named below), for
# the independent numpy reference implementations under tests/reference/ (posthoc.py,
# diverse.py, conformal.py) that tests compare alkit's scores, batch picks and conformal sets
# against, and writes an environment file naming its interpreter. Usage:
#
#   scripts/refpython.sh [DIR]             # default DIR: .refpython (ignored by git)
#   source DIR/env.sh                      # ALKIT_PYTHON
#   cargo test
#
# numpy is pinned to one release from PyPI so that every machine computes the references
# with the same library; the scripts use nothing else (no torch or faiss), and
# compute in float64 from the f32 inputs the Rust side hands them. MAPIE (with scikit-learn
# and scipy, pinned here too since MAPIE only asks for >= versions) is the library users
# compare conformal sets with (tests/reference/conformal_libs.py runs it live beside alkit's
# sets); crepes (with pandas, which it imports) and properscoring join it for the regression
# intervals and metrics (tests/reference/regression_libs.py: MAPIE / crepes conformal
# intervals, scikit-learn / scipy / properscoring RMSE, NLL, CRPS, ...), small-text the
# stopping rules (tests/reference/stopping_smalltext.py), and scikit-learn's
# datasets write data/regression/ (tests/reference/regression_data.py). safetensors and pyarrow,
# pinned too, write the embedding files tests read as their users' tools write them:
# safetensors' `save_file` (tests/reference/embedded_head.py, display_embeddings.py) and
# pyarrow's Parquet tables (tests/reference/numpy_embeddings.py, for numpy_files.rs).
set -euo pipefail
dir="${1:-.refpython}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
[ -x "$dir/venv/bin/python" ] || python3 -m venv "$dir/venv"
"$dir/venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  --no-warn-script-location --root-user-action=ignore numpy==2.4.6 safetensors==0.8.0 pyarrow==26.0.1 mapie==1.6.0 \
  scikit-learn==1.9.1 scipy==1.17.1 crepes==0.9.1 pandas==3.1.1 properscoring==0.1 small-text==1.4.1
"$dir/venv/bin/python" -c 'import numpy, safetensors.numpy, pyarrow, mapie, sklearn, scipy, crepes, properscoring, small_text' || { echo "numpy, safetensors, pyarrow, mapie, scikit-learn, scipy, crepes, properscoring or small-text does not import in $dir/venv" >&2; exit 1; }
cat > "$dir/env.sh" <<ENV
# Written by scripts/refpython.sh: the Python (with numpy and pyarrow) that runs tests/reference/*.py.
export ALKIT_PYTHON="$dir/venv/bin/python"
ENV
echo "Python with numpy and pyarrow $dir/venv/bin/python; now: source $dir/env.sh"
