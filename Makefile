# The README names these targets; keep them true.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
EXTRAS ?= dev,local

.PHONY: install test lint typecheck fmt demo serve sim openapi clean

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

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
