# GPU-API conformance check, included by the main Makefile (or: make -f scripts/check-gpu.mk check-gpu).
#
# Installs the `gpu` extra (cuDF, cuML, CuPy, Dask-CUDA: several GB) into its own virtualenv and
# checks, without a GPU, that every cuDF / cuML / CuPy call the GPU backend makes binds to the
# installed signatures and that every registry model constructs with its translated parameters.
# A separate command, not part of `make test`: the install is too big for every CI run.
GPU_PYTHON ?= python3
GPU_VENV   ?= .venv-gpu
GPU_BIN    := $(GPU_VENV)/bin
GPU_STAMP  := $(GPU_VENV)/.installed

.PHONY: check-gpu

$(GPU_STAMP): pyproject.toml
	$(GPU_PYTHON) -m venv $(GPU_VENV)
	$(GPU_BIN)/pip install --quiet --upgrade pip
	$(GPU_BIN)/pip install --quiet -e '.[gpu]'
	touch $(GPU_STAMP)

check-gpu: $(GPU_STAMP)    ## GPU-API conformance check without a GPU (installs the gpu extra in .venv-gpu)
	$(GPU_BIN)/python scripts/check_gpu_api.py
