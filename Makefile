# Two set-up commands for a fresh machine: `make quickstart` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
TORCH  := torch==2.13.0

.PHONY: quickstart test docs test-escnn clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet $(TORCH)

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet -e ".[dev,docs]"
	touch $@ $(VENV)/.installed

quickstart: $(VENV)/.installed
	$(BIN)/cyclejepa run examples/quickstart.yaml

test: $(VENV)/.installed-dev
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n 2

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
