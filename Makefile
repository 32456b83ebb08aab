# The README names these targets; keep them true.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
EXTRAS ?= dev,local

.PHONY: install test lint typecheck fmt demo serve sim openapi bench bench-quick clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install --quiet -e ".[$(EXTRAS)]"

## test: everything CI runs: lint, types, and the whole suite (slow and llama suites included)
test: install lint typecheck
	$(BIN)/pytest -q

lint:
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck:
	$(BIN)/mypy

fmt:
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

## demo: start the service on the embedded defaults, run examples/invoice.json, stop
demo: install
	$(BIN)/reprompt demo

serve: install
	$(BIN)/reprompt serve

sim: install
	$(BIN)/reprompt sim

openapi: install
	$(BIN)/python -m app.api.openapi > openapi/openapi.json

## bench: every benchmark of docs/benchmarks.md, from scratch (about 20 minutes)
bench:
	$(MAKE) install EXTRAS=dev,local,bench
	$(BIN)/python bench/context_growth.py
	$(BIN)/python bench/overhead.py
	$(BIN)/python bench/scale.py
	$(BIN)/python bench/efficacy.py
	$(BIN)/python bench/real_model.py

bench-quick:
	$(MAKE) install EXTRAS=dev,local,bench
	$(BIN)/python bench/overhead.py --quick
	$(BIN)/python bench/scale.py --quick
	$(BIN)/python bench/efficacy.py --quick
	$(BIN)/python bench/real_model.py --quick

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
