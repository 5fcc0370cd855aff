# kvwatch — `make demo` and `make test` are all a fresh machine needs.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit system-deps bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

## demo: install, then run the main job on the embedded default scenario
demo: $(STAMP)
	$(BIN)/kvwatch demo

## test: install what the tests need (Python packages and Debian packages), lint, type-check, test
test: $(STAMP) system-deps lint typecheck unit

system-deps:
	./scripts/install-system-deps.sh

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check collector detectors simulator tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python bench/parse_bench.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
