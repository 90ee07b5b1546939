# One entry point for people, CI and scheduled jobs. Every target sets itself up first.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup run test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)            ## create .venv and install the package with test tools

run: setup                 ## run the example pipeline on the bundled Telco churn data
	$(BIN)/pipeline run configs/churn.yaml

test: setup                ## the test suite (CI runs exactly this) and the layering contract
	$(BIN)/pytest -q
	$(BIN)/lint-imports

bench: setup               ## framework overhead vs hand-written code; PyTorch hand-off and batches vs DataLoader
	$(BIN)/python scripts/bench_overhead.py
	$(BIN)/python scripts/bench_torch.py
	$(BIN)/python scripts/bench_cache.py
	$(BIN)/python scripts/bench_scaleout.py

clean:
	rm -rf $(VENV) .venv-gpu runs .pytest_cache bench-data

-include scripts/check-gpu.mk
