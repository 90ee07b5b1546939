# GPU-API conformance check, included by the main Makefile (or: make -f scripts/check-gpu.mk check-gpu).
#
# Installs a GPU extra (cuDF, cuML, CuPy, Dask-CUDA, XGBoost: several GB) into its own virtualenv
# and checks, without a GPU, that every call our code makes into those libraries binds to the
# installed signatures and that every registry model constructs with its translated parameters.
# A separate command, not part of `make test`: the install is too big for every CI run.
#
#   make check-gpu                                          # the `gpu` extra (CUDA 13) in .venv-gpu
#   make check-gpu GPU_EXTRA=gpu-cu12 GPU_VENV=.venv-gpu-cu12   # the CUDA 12 stack
#
# The virtualenv is rebuilt from scratch whenever pyproject.toml changes or another extra is
# asked for: the CUDA 12 and CUDA 13 wheels install the same packages (cudf, cupy, xgboost, ...),
# so installing one set over the other leaves a mix of files from both.
GPU_PYTHON ?= python3
GPU_EXTRA  ?= gpu
GPU_VENV   ?= .venv-gpu
GPU_BIN    := $(GPU_VENV)/bin
GPU_STAMP  := $(GPU_VENV)/.installed-$(GPU_EXTRA)

.PHONY: check-gpu

$(GPU_STAMP): pyproject.toml
	@test -n "$(strip $(GPU_VENV))" || { echo "GPU_VENV is empty" >&2; exit 1; }
	rm -rf -- '$(GPU_VENV)'
	$(GPU_PYTHON) -m venv '$(GPU_VENV)'
	$(GPU_BIN)/pip install --quiet --upgrade pip
	$(GPU_BIN)/pip install --quiet -e '.[$(GPU_EXTRA),dev]'
	touch '$(GPU_STAMP)'

check-gpu: $(GPU_STAMP)    ## GPU-API conformance check without a GPU (GPU_EXTRA=gpu|gpu-cu12, GPU_VENV=.venv-gpu)
	$(GPU_BIN)/python scripts/check_gpu_api.py
