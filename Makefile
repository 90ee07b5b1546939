# One entry point for people, CI and scheduled jobs. Every target sets itself up first.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup run test lint bench clean resolve-gpu browser

# A new pyproject.toml gets a new virtualenv: a package dropped or renamed there (xgboost became
# xgboost-cpu) must not linger beside its replacement, which installs the same files.
$(STAMP): pyproject.toml
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[cpu,dev,bench]'
	touch $(STAMP)

setup: $(STAMP)            ## create .venv and install the package (CPU extra) with test and benchmark tools

run: setup                 ## run the example pipeline on the bundled Telco churn data
	$(BIN)/pipeline run configs/churn.yaml

test: setup browser        ## the test suite (CI runs exactly this) and the layering contract
	$(BIN)/pytest -q -n auto --maxprocesses 4 --dist loadfile
	$(BIN)/lint-imports

# The report's browser test opens report.html in the distribution's Chromium. Installed here
# when missing and this is a Debian/Ubuntu machine run as root (CI); otherwise the test says how.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	{ if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; \
	  else echo "no Chromium: install your distribution's chromium package for the report's browser test"; fi; }

bench: setup               ## framework overhead vs hand-written code; PyTorch hand-off and batches vs DataLoader
	$(BIN)/python scripts/bench_overhead.py
	$(BIN)/python scripts/bench_torch.py
	$(BIN)/python scripts/bench_cache.py
	$(BIN)/python scripts/bench_scaleout.py

resolve-gpu: setup         ## re-resolve each GPU extra for a GPU host from package metadata (network), then check
	$(BIN)/python scripts/resolve_gpu_extras.py refresh --python $(BIN)/python

clean:
	rm -rf $(VENV) .venv-gpu .venv-gpu-* runs .pytest_cache bench-data gpu-kit

-include scripts/check-gpu.mk
