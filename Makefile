# The two commands: `make demo` and `make test`. Each builds .venv from nothing when needed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.sparktf-installed

.PHONY: demo test unit integration bench java-check clean

$(STAMP): pyproject.toml setup.cfg Makefile
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "sparktf needs Python 3.11 or newer; set PYTHON=/path/to/python3.11")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	@# Bytecode for every installed package, written once: with PYTHONDONTWRITEBYTECODE set
	@# (as on our CI machines) each Spark Python worker and task process would otherwise
	@# compile TensorFlow again on every import (12.7 s instead of 6 s for `import tensorflow`).
	$(BIN)/python -m compileall -q -j 0 $(VENV)/lib > /dev/null
	touch $(STAMP)

java-check:
	@scripts/check_java.sh

demo: java-check $(STAMP)
	$(BIN)/python -m sparktf.demo

test: java-check $(STAMP)
	$(BIN)/python -m pytest tests

unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit

integration: java-check $(STAMP)
	$(BIN)/python -m pytest tests/integration

bench: java-check $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[bench]"
	$(BIN)/python bench/feed_bench.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
