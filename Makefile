# Two set-up commands for a fresh machine: `make quickstart` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
TORCH  := torch==2.13.0

.PHONY: quickstart test test-slow docs test-escnn ptbxl-dev clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet $(TORCH)

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet -e .
	touch $@

# litdata (the stream extra) declares torchvision, which it never imports and whose pins could
# replace the torch above: installed without it, its other dependencies come with the dev extra.
$(VENV)/.installed-dev: $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet -e ".[dev,docs]"
	$(BIN)/pip install --quiet --no-deps "litdata>=0.2.50"
	touch $@ $(VENV)/.installed

quickstart: $(VENV)/.installed
	$(BIN)/cyclejepa run examples/quickstart.yaml

# The suite but its slower tests (signals, torchrun, worker pools, processes side by side, scripts run
# whole, torch.compile traces, whole benchmark runs: `slow`), which `make test-slow` runs; CI (.ci/run) runs both. `loadgroup`:
# a test module with costly module fixtures runs on one worker (its `xdist_group`), built once.
test: $(VENV)/.installed-dev
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n 2 --dist loadgroup -m "not slow"

test-slow: $(VENV)/.installed-dev
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n 2 --dist loadgroup -m slow

# The development protocol on the 434 real PTB-XL records of ../shared (a GPU run: examples/ptbxl_dev.yaml).
PTBXL_DEV_ARCHIVE ?= ../shared/data/ptbxl-dev/ptbxl-dev-434.tar.xz
ptbxl-dev: $(VENV)/.installed
	test -f runs/ptbxl_dev/data/ptbxl-dev/ptbxl_database.csv || \
		(mkdir -p runs/ptbxl_dev/data && tar -xJf $(PTBXL_DEV_ARCHIVE) -C runs/ptbxl_dev/data)
	$(BIN)/cyclejepa run examples/ptbxl_dev.yaml

docs: $(VENV)/.installed-dev
	$(BIN)/mkdocs build --strict

# The escnn cross-check lives in its own environment: escnn needs numpy < 2 and a Fortran compiler.
test-escnn:
	command -v gfortran >/dev/null || (apt-get update -qq && apt-get install -y -qq gfortran)
	test -x .venv-escnn/bin/python || $(PYTHON) -m venv .venv-escnn
	.venv-escnn/bin/pip install --quiet $(TORCH)
	.venv-escnn/bin/pip install --quiet -e ".[dev,escnn]"
	.venv-escnn/bin/python -m pytest -q tests/test_escnn_adapter.py

clean:
	rm -rf $(VENV) .venv-escnn site
