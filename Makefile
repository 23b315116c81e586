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

# The checkout's modules compiled as pip compiles an installed package's: where
# PYTHONDONTWRITEBYTECODE is set, Python would otherwise compile them at every start (about
# 60 ms of each `hetsched` command). Rerun at every setup (and so before lint, typecheck and
# tests): it recompiles only the modules whose source changed since, in well under a second.
setup: $(STAMP)
	$(BIN)/python -m compileall -q src

lint: setup
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

typecheck: setup
	$(BIN)/mypy

# pytest-xdist workers: twice the CPUs this process may use, at most 4 more than them. Many
# tests wait on processes they started (servers killed and restarted, tasks that sleep), so
# one worker a CPU leaves the CPUs idle a good part of the run.
WORKERS ?= $(shell $(PYTHON) -c "import os; n = len(os.sched_getaffinity(0)); print(min(2 * n, n + 4))")

pytest: setup
	$(BIN)/pytest -n $(WORKERS) -q

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
