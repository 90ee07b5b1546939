# One entry point for people, CI and scheduled jobs. Every target sets itself up first.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The lock: every distribution `make setup` (and so CI) installs, pinned with its hashes, for
# CPython 3.11 on Linux x86-64. pyproject.toml keeps ranges (the package is a library too);
# `make lock` re-resolves them, `make test-latest` tests the newest releases they admit.
LOCK   := requirements/cpu-dev-bench.txt
PYTEST := pytest -q -n auto --maxprocesses 4 --dist loadfile --no-loadscope-reorder --durations=25

.PHONY: setup run test coverage test-latest lock lint bench clean resolve-gpu browser

# A new pyproject.toml or lock gets a new virtualenv: a package dropped or renamed there
# (xgboost became xgboost-cpu) must not linger beside its replacement, which installs the same
# files. pip checks every file against the lock's hashes; torch is the lock's CPU build. On
# another platform than the lock's, the ranges of pyproject.toml are resolved instead.
LOCK_PLATFORM := cpython-3.11-linux-x86_64
HERE_PLATFORM  = $(shell $(PYTHON) -c 'import platform as p, sys; print(f"{p.python_implementation().lower()}-{p.python_version_tuple()[0]}.{p.python_version_tuple()[1]}-{sys.platform}-{p.machine()}")')
$(STAMP): pyproject.toml $(LOCK)
	@echo "==> setup: a new $(VENV) (a few minutes on 2 cores the first time)"
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
ifeq ($(HERE_PLATFORM),$(LOCK_PLATFORM))
	@echo "==> setup: the lock's pip first (it installs faster than the one venv brings)"
	sed -n '/^pip==/,/# via/p' $(LOCK) > $(VENV)/pip-lock.txt
	$(BIN)/python -m pip install --progress-bar off --require-hashes --no-deps -r $(VENV)/pip-lock.txt
	@echo "==> setup: installing the locked distributions from $(LOCK), hash-checked"
	$(BIN)/python -m pip install --progress-bar off --require-hashes -r $(LOCK)
	@echo "==> setup: installing the package itself (editable; the lock has its dependencies)"
	$(BIN)/python -m pip install --progress-bar off --no-deps --no-build-isolation -e .
else
	@echo "==> setup: the lock is for $(LOCK_PLATFORM), this is $(HERE_PLATFORM): resolving pyproject.toml's ranges"
	$(BIN)/python -m pip install --progress-bar off --upgrade pip
	$(BIN)/python -m pip install --progress-bar off -e '.[cpu,dev,bench]'
endif
	touch $(STAMP)
	@echo "==> setup: done; source $(VENV)/bin/activate puts pipeline on PATH"

setup: $(STAMP)            ## create .venv and install the package (CPU extra) with test and benchmark tools

run: setup                 ## run the example pipeline on the bundled Telco churn data
	$(BIN)/pipeline run configs/churn.yaml

test: setup browser        ## the test suite (CI runs exactly this) and the layering contract
	$(BIN)/$(PYTEST)
	$(BIN)/lint-imports

# The same suite under coverage (slower: no slow-test budget), lines and branches of pipeline/.
coverage: setup browser    ## the suite under coverage: the total on stdout, htmlcov/ for the lines
	rm -f .coverage .coverage.*
	PIPELINE_SLOW_BUDGET=off $(BIN)/$(PYTEST) --cov --cov-report=term --cov-report=html
	$(BIN)/coverage report --format=total | sed 's/^/==> coverage: lines and branches of pipeline\/: /; s/$$/%/'

# The newest releases the requirements admit, in a virtualenv of their own (not the lock), and
# the same tests: an upstream release that breaks the project fails here, not in a landing.
LATEST_VENV := .venv-latest
# name==version of each pin in a lock or `pip freeze` on stdin, the names normalized, sorted.
PINS = sed -nE 's/^([A-Za-z0-9][A-Za-z0-9._-]*)==([^ ;\\]+).*/\1==\2/p' | \
       sed -E 'h; s/==.*//; s/[-_.]+/-/g; s/.*/\L&/; G; s/\n[^=]*//' | sort
test-latest: browser       ## the same tests on the newest releases pyproject.toml admits (network), in .venv-latest
	@echo "==> test-latest: a new $(LATEST_VENV), resolved from pyproject.toml's ranges (not the lock)"
	rm -rf $(LATEST_VENV)
	$(PYTHON) -m venv $(LATEST_VENV)
	$(LATEST_VENV)/bin/python -m pip install --progress-bar off --upgrade pip
	$(LATEST_VENV)/bin/python -m pip install --progress-bar off -e '.[cpu,dev,bench]'
	@$(LATEST_VENV)/bin/python -m pip freeze --exclude-editable | $(PINS) > $(LATEST_VENV)/pins.txt
	@echo "==> test-latest: where the newest releases differ from the lock ($(LOCK)):"
	@<$(LOCK) $(PINS) | comm -13 - $(LATEST_VENV)/pins.txt | sed 's/^/    /'
	$(LATEST_VENV)/bin/$(PYTEST)
	$(LATEST_VENV)/bin/lint-imports

# Re-resolve the lock to the newest releases pyproject.toml admits (network; seconds), with uv
# (pinned here) in a virtualenv of its own. torch must resolve to its CPU build, whose wheel is
# not on the public index: TORCH_CPU_WHEELS names a folder or page that links it (pip's
# find-links on the project's machines; elsewhere, PyTorch's CPU wheel page for torch).
# LOCK_FLAGS= keeps the current pins where they still satisfy pyproject.toml.
UV_VERSION       ?= 0.13.9
LOCK_VENV        := .venv-lock
TORCH_CPU_WHEELS ?= $(or $(PIP_FIND_LINKS),$(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null))
LOCK_FLAGS       ?= --upgrade
lock:                      ## re-resolve requirements/cpu-dev-bench.txt (the lock setup and CI install) to the newest releases
	@echo "==> lock: uv $(UV_VERSION) in $(LOCK_VENV)"
	@test -x $(LOCK_VENV)/bin/uv && $(LOCK_VENV)/bin/uv --version | grep -qF ' $(UV_VERSION)' || \
	  { $(PYTHON) -m venv $(LOCK_VENV) && $(LOCK_VENV)/bin/python -m pip install --progress-bar off 'uv==$(UV_VERSION)'; }
	@echo "==> lock: resolving pyproject.toml [cpu,dev,bench] and requirements/setup.in for CPython 3.11, Linux x86-64"
	@if [ -f $(LOCK) ]; then cp $(LOCK) $(LOCK).new; else rm -f $(LOCK).new; fi
	$(LOCK_VENV)/bin/uv pip compile pyproject.toml requirements/setup.in --extra cpu --extra dev --extra bench \
	  --generate-hashes --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
	  $(if $(strip $(TORCH_CPU_WHEELS)),--find-links $(TORCH_CPU_WHEELS)) $(LOCK_FLAGS) \
	  --custom-compile-command 'make lock' -o $(LOCK).new >/dev/null
	@grep -q '^torch==[^ ]*+cpu ' $(LOCK).new && ! grep -E '^(nvidia-|cuda-|triton==)' $(LOCK).new | grep -qv '^nvidia-ml-py==' || \
	  { rm -f $(LOCK).new; echo "lock: torch resolved to a CUDA build, $(LOCK) left as it was; set TORCH_CPU_WHEELS to a folder or page with torch's CPU wheel" >&2; exit 1; }
	@if cmp -s $(LOCK).new $(LOCK); then rm $(LOCK).new; echo "==> lock: $(LOCK) unchanged"; \
	  else mv $(LOCK).new $(LOCK); echo "==> lock: $(LOCK) written; make setup installs it"; fi

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
	rm -rf $(VENV) $(LATEST_VENV) $(LOCK_VENV) .venv-gpu .venv-gpu-* runs .pytest_cache bench-data gpu-kit

-include scripts/check-gpu.mk
