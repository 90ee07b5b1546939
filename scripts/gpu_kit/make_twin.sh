#!/usr/bin/env bash
# Make the "image twin": a CPU-only virtualenv that holds the lent GPU image's own versions of
# what the GPU kit relies on and does not ship (numpy, pandas, pyarrow, cupy, numba, numba-cuda,
# cuda-python, every nvidia-* CUDA library wheel, and the image packages that the kit's wheels
# require: toolz, msgpack, Jinja2, ...), pinned to the image's `pip freeze`. No torch: it would
# preload CUDA libraries and hide a kit environment that cannot find them itself.
#
# With it, a kit built by prepare.py is checked on a machine without a GPU:
#   scripts/gpu_kit/make_twin.sh                        # about 4 GB, a minute from a local mirror
#   .venv-gpu-twin/bin/python scripts/gpu_kit/unpack.py gpu-kit/parts --target /tmp/twin-site
#   python -m pytest tests/test_gpu_kit_twin.py         # unpacks again, imports cudf and cuml
#
#   usage: scripts/gpu_kit/make_twin.sh [FREEZE] [VENV]
#   FREEZE defaults to scripts/gpu_kit/image-freeze-h200.txt, VENV to .venv-gpu-twin (replaced);
#   PYTHON (default python3.12) must be the image's Python minor version.
set -euo pipefail
cd "$(dirname "$0")/../.."
FREEZE=${1:-scripts/gpu_kit/image-freeze-h200.txt}
VENV=${2:-.venv-gpu-twin}
PYTHON=${PYTHON:-python3.12}

# The image packages the twin installs: those a fresh `import cudf, cuml` (and dask_cudf,
# dask_cuda) needs from the image, plus every nvidia-* line. Their own dependencies come too,
# at the freeze's versions (it is the constraints file).
WANTED="cupy-cuda13x numpy pandas pyarrow scipy scikit-learn numba llvmlite numba-cuda
cuda-bindings cuda-core cuda-pathfinder cuda-toolkit nvidia-ml-py packaging fsspec cachetools
psutil rich click PyYAML typing_extensions toolz msgpack sortedcontainers Jinja2 MarkupSafe
contourpy pillow tqdm matplotlib"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
grep -vE '^\s*(#|$)' "$FREEZE" > "$work/constraints.txt"
: > "$work/requirements.txt"
for name in $WANTED; do
    # pip's name normalization: case, and -, _ and . alike
    pattern=$(printf '%s' "$name" | sed -E 's/[-_.]+/[-_.]+/g')
    if line=$(grep -iE "^${pattern}==" "$work/constraints.txt"); then
        echo "$line" >> "$work/requirements.txt"
    else
        echo "note: $name is not in $FREEZE; skipped" >&2
    fi
done
grep -iE '^nvidia[-_.]' "$work/constraints.txt" >> "$work/requirements.txt"
sort -u -o "$work/requirements.txt" "$work/requirements.txt"

echo "==> $VENV: $(wc -l < "$work/requirements.txt") packages pinned to $FREEZE"
start=$(date +%s)
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --progress-bar off --upgrade pip
"$VENV/bin/python" -m pip install --progress-bar off -r "$work/requirements.txt" -c "$work/constraints.txt"
"$VENV/bin/python" -m pip check || true     # the kit's own wheels are not here yet
echo "==> $VENV ready in $(( $(date +%s) - start ))s, $(du -sh "$VENV" | cut -f1)"
