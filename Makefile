# Everything a fresh machine needs, from nothing but python3.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup test lint typecheck pytest demo bench soak clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

lint: setup
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

typecheck: setup
	$(BIN)/mypy

pytest: setup
	$(BIN)/pytest -n auto -q

test: lint typecheck pytest

demo: setup
	$(BIN)/python -m hetsched.service.demo

bench: setup
	$(BIN)/python bench/placement.py

# the crash soak at full length: 200 SIGKILL-and-restart cycles across every phase
soak: setup
	HETSCHED_SOAK_CYCLES=$${HETSCHED_SOAK_CYCLES:-200} $(BIN)/pytest -q -s \
		tests/service/test_soak.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
