# The README names these targets; keep them true.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
EXTRAS ?= dev,local,sim
# Every dependency at the version CI and the images use; pyproject.toml keeps ranges.
LOCK := requirements.lock

.PHONY: console-screenshots install test test-fast test-latest test-oldest lint typecheck fmt demo serve sim openapi lock bench bench-quick clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

## install: the Debian packages in scripts/apt-packages.txt, then venv + editable install
## from the lock; llama-cpp-python built portably (GGML_NATIVE=OFF, cached by build
## settings: scripts/llama_wheel.py) before pip sees it
install: $(BIN)/python
	scripts/system_packages.sh
ifneq (,$(findstring local,$(EXTRAS)))
	$(BIN)/python scripts/llama_wheel.py --install
endif
	$(BIN)/pip install --quiet -c $(LOCK) -e ".[$(EXTRAS)]"

## test: everything CI runs: lint, types, and the whole suite (slow and llama suites included)
## on TEST_WORKERS processes, with app/'s line coverage (service processes included) held at
## COVERAGE_FLOOR (measured: 95 %)
COVERAGE_FLOOR ?= 94
TEST_WORKERS ?= 2
test: install lint typecheck
	$(BIN)/pytest -q -n $(TEST_WORKERS) --cov --cov-report= --cov-fail-under=$(COVERAGE_FLOOR)

## test-fast: lint, types, and the suite without the slow and llama-marked tests (CI runs `make test`)
test-fast: lint typecheck
	$(BIN)/pytest -q -m "not slow and not llama"

## test-latest / test-oldest: the suite on the newest / the oldest releases pyproject.toml
## allows, without the lock, each in a throwaway virtualenv (DEPS_VENV). Not in CI: run them
## before a release and whenever a bound in pyproject.toml changes. llama-cpp-python stays at
## the portable build of the locked version (a newer one would compile natively).
DEPS_VENV ?= /tmp/reprompt-deps
LLAMA_PIN = $(shell grep -m1 '^llama-cpp-python==' $(LOCK) | cut -d' ' -f1)
# Starlette before 0.39 imports `multipart`, which current python-multipart warns about.
OLDEST_PYTEST_FLAGS = -W "ignore:Please use \`import python_multipart\`:PendingDeprecationWarning"

test-latest:
	$(MAKE) _deps-venv RESOLUTION=highest
	$(DEPS_VENV)-highest/bin/pytest -q -n $(TEST_WORKERS)

test-oldest:
	$(MAKE) _deps-venv RESOLUTION=lowest-direct
	$(DEPS_VENV)-lowest-direct/bin/pytest -q -n $(TEST_WORKERS) $(OLDEST_PYTEST_FLAGS)

_deps-venv:
	rm -rf $(DEPS_VENV)-$(RESOLUTION)
	$(PY) -m venv $(DEPS_VENV)-$(RESOLUTION)
	$(DEPS_VENV)-$(RESOLUTION)/bin/pip install --quiet uv
	$(DEPS_VENV)-$(RESOLUTION)/bin/python scripts/llama_wheel.py --install
	echo "$(LLAMA_PIN)" > $(DEPS_VENV)-$(RESOLUTION)/llama.txt
	$(DEPS_VENV)-$(RESOLUTION)/bin/uv pip install --quiet --python $(DEPS_VENV)-$(RESOLUTION)/bin/python \
	  --resolution $(RESOLUTION) --constraint $(DEPS_VENV)-$(RESOLUTION)/llama.txt -e ".[$(EXTRAS)]"
	$(DEPS_VENV)-$(RESOLUTION)/bin/uv pip freeze --python $(DEPS_VENV)-$(RESOLUTION)/bin/python \
	  > $(DEPS_VENV)-$(RESOLUTION)/versions.txt

## console-screenshots: docs/console/*.png and docs/console-render.json, from the browser tests
console-screenshots:
	REPROMPT_SCREENSHOTS=1 $(BIN)/pytest -q -p no:randomly tests/console/test_browser.py

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

## openapi: the checked-in spec, and the TypeScript client's types generated from it
## (clients/typescript: npm ci first when its node_modules is missing)
openapi: install
	$(BIN)/python -m app.api.openapi > openapi/openapi.json
	cd clients/typescript && { test -d node_modules || npm ci --no-audit --no-fund; } && npm run --silent generate

## lock: resolve requirements.lock from pyproject.toml, keeping current pins where they
## still fit; `make lock UPGRADE=1` moves every pin to the newest release allowed
lock: $(BIN)/python
	$(BIN)/pip install --quiet uv
	$(BIN)/uv pip compile pyproject.toml --extra dev --extra local --extra bench --extra sim \
	  $(if $(UPGRADE),--upgrade,) \
	  --python-version 3.11 --python-platform x86_64-unknown-linux-gnu \
	  --custom-compile-command "make lock" --annotation-style line --output-file $(LOCK)

## bench: every benchmark of docs/benchmarks.md, from scratch (about 25 minutes)
bench:
	$(MAKE) install EXTRAS=dev,local,sim,bench
	$(BIN)/python bench/context_growth.py
	$(BIN)/python bench/caching.py
	$(BIN)/python bench/overhead.py
	$(BIN)/python bench/scale.py
	$(BIN)/python bench/efficacy.py
	$(BIN)/python bench/real_model.py
	$(BIN)/python bench/fairness.py
	$(BIN)/python bench/shards.py

bench-quick:
	$(MAKE) install EXTRAS=dev,local,sim,bench
	$(BIN)/python bench/guard.py
	$(BIN)/python bench/overhead.py --quick
	$(BIN)/python bench/scale.py --quick
	$(BIN)/python bench/efficacy.py --quick
	$(BIN)/python bench/real_model.py --quick
	$(BIN)/python bench/fairness.py --quick
	$(BIN)/python bench/shards.py --quick
	$(BIN)/python bench/caching.py --quick

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
