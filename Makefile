# The README names these targets; keep them true.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
EXTRAS ?= dev,local

.PHONY: install test lint typecheck fmt demo sim clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install --quiet -e ".[$(EXTRAS)]"

## test: everything CI runs — lint, types, and the whole test suite (slow and llama included)
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

## demo: start the simulator and run a sample job through the turn loop
demo: install
	$(BIN)/reprompt demo

sim: install
	$(BIN)/reprompt sim

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
