# The two commands: `make demo` and `make test`. Each builds .venv from nothing when needed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.sparktf-pip
STAMP := $(VENV)/.sparktf-installed
JVM_ARCHIVE := $(VENV)/.sparktf-jvm-archive
# Python writes bytecode at first import, even where PYTHONDONTWRITEBYTECODE is set (as on
# our CI machines): else every Spark Python worker and task process would compile TensorFlow
# again on every import (12.7 s instead of 6 s). scripts/write_bytecode.py writes most of it
# once, after each environment's pip install.
unexport PYTHONDONTWRITEBYTECODE
# A second environment at the lowest versions sparktf declares (constraints-lowest.txt:
# pyspark 3.5, TensorFlow 2.16, NumPy 1.26), and a third at the newest releases pip
# resolves with no constraints at all.
LOWEST := .venv-lowest
LOWEST_STAMP := $(LOWEST)/.sparktf-installed
NEWEST := .venv-newest
NEWEST_STAMP := $(NEWEST)/.sparktf-installed
# what the tests need beyond sparktf, in the versions of the tested set
TEST_PINS = $$(grep -E '^(pytest|pytest-timeout|iniconfig|pluggy|hypothesis|sortedcontainers)==' constraints.txt)

.PHONY: demo test test-lowest test-newest test-cluster lint docs unit integration fuzz bench java-check \
	clean environments

$(INSTALLED): pyproject.toml setup.cfg Makefile constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "sparktf needs Python 3.11 or newer; set PYTHON=/path/to/python3.11")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --no-compile -c constraints.txt -e ".[dev]"
	$(BIN)/python scripts/write_bytecode.py --zips
	touch $(INSTALLED)

# The bytecode of what is imported, written once by importing it (why: that script)
$(STAMP): $(INSTALLED)
	$(BIN)/python scripts/write_bytecode.py
	touch $(STAMP)

# Spark's classes, parsed and verified once, for the tests' JVMs (why: that script); built
# beside the bytecode (make test), not for the demo, whose one session would not repay it
$(JVM_ARCHIVE): $(INSTALLED)
	$(BIN)/python scripts/spark_jvm_archive.py
	touch $(JVM_ARCHIVE)

# The lower bounds first, then sparktf as a user installs it (no constraints): nothing the
# runtime holds may move (scripts/check_pins.py).
$(LOWEST_STAMP): pyproject.toml constraints-lowest.txt constraints.txt Makefile
	rm -rf $(LOWEST) && $(PYTHON) -m venv $(LOWEST)
	$(LOWEST)/bin/python -m pip install --quiet --upgrade pip
	$(LOWEST)/bin/python -m pip install --quiet --no-compile -r constraints-lowest.txt
	$(LOWEST)/bin/python -m pip install --quiet --no-compile -e . $(TEST_PINS)
	$(LOWEST)/bin/python scripts/check_pins.py constraints-lowest.txt
	$(LOWEST)/bin/python scripts/write_bytecode.py --zips
	$(LOWEST)/bin/python scripts/write_bytecode.py
	touch $(LOWEST_STAMP)

# The newest releases pip resolves for sparktf with no constraints (`pip install .`),
# built again once a day: the next release of a dependency is tested the day it appears.
$(NEWEST_STAMP): pyproject.toml constraints.txt Makefile
	rm -rf $(NEWEST) && $(PYTHON) -m venv $(NEWEST)
	$(NEWEST)/bin/python -m pip install --quiet --upgrade pip
	$(NEWEST)/bin/python -m pip install --quiet --no-compile -e . $(TEST_PINS)
	$(NEWEST)/bin/python scripts/write_bytecode.py --zips
	$(NEWEST)/bin/python scripts/write_bytecode.py
	touch $(NEWEST_STAMP)

NEWEST_DAILY = find $(NEWEST_STAMP) -mtime +0 -delete 2>/dev/null || true
environments:
	@$(NEWEST_DAILY)
	@$(MAKE) --no-print-directory -j2 $(STAMP) $(JVM_ARCHIVE) $(LOWEST_STAMP) $(NEWEST_STAMP)

java-check:
	@scripts/check_java.sh

demo: java-check $(STAMP)
	$(BIN)/python -m examples.demo

# The environments are built two at a time (a pip install runs on one core).
# The generated cases and the runs at the lowest and at the newest versions (the unit
# tests and the smoke of every environment, tests/integration/test_smoke.py) are pytests
# of their own, run as jobs beside the in-process tests
# (tests/integration/test_separate_runs.py); any failing fails make test. The main
# environment's suite tests each part of the smoke in depth, and runs it no more.
# The lint runs beside the environments' builds (in one of their two slots, once .venv is
# built): from a fresh clone they leave ~44 of their 248 core-seconds idle.
test: java-check
	@$(NEWEST_DAILY)
	@$(MAKE) --no-print-directory -j2 $(STAMP) $(JVM_ARCHIVE) $(LOWEST_STAMP) $(NEWEST_STAMP) \
		lint
	SPARKTF_LOWEST_RUN="$(call VERSION_RUN,$(LOWEST))" \
		SPARKTF_NEWEST_RUN="$(call VERSION_RUN,$(NEWEST))" \
		$(BIN)/python -m pytest --durations=30 --ignore=tests/generated \
		--ignore=tests/integration/test_smoke.py tests

# The generated cases (Hypothesis) with the large budget: 1,000 column frames through the
# runtime in one process (and 200 with a null), 600 Keras models against the padding
# analysis, then 200 fits against Keras and 100 frames
# through Spark on a local-cluster of 8 executors (fits of 8 workers among them), in a
# pytest of their own.
fuzz: java-check $(STAMP)
	SPARKTF_FUZZ=1 $(BIN)/python -m pytest -p no:cacheprovider tests/unit/test_column_cases.py \
		tests/unit/test_padding_cases.py
	SPARKTF_FUZZ=1 $(BIN)/python -m pytest --durations=5 tests/generated

# ruff's rule set, the import contracts of ARCHITECTURE.md (both in pyproject.toml), and
# the documentation site built with warnings as errors.
lint: $(STAMP)
	$(BIN)/ruff check sparktf tests bench examples scripts
	$(BIN)/lint-imports
	@$(MAKE) --no-print-directory docs

# The documentation site (docs/: Sphinx, pydata-sphinx-theme, Markdown pages through
# myst-parser, the API reference from the docstrings) into docs/_build/html; a warning
# fails the build. Its examples run in the suite (tests/integration/test_docs.py).
docs: $(STAMP)
	$(BIN)/python -m sphinx -W --keep-going -q -b html docs docs/_build/html

# The unit tests and the smoke (fit, transform, SQL, save/load, resume, CrossValidator,
# HalvingSearch, sparktf.run) in the environment $(1), the generated unit tests drawing a
# third of the main run's cases (tests/budget.py). The process lifecycle tests of
# spares and task watchdogs (a minute of forks and TensorFlow imports, the same at any
# version) run in the main environment only: the smoke's fits fork from spares here.
VERSION_RUN = env SPARKTF_VERSION_RUN=1 $(1)/bin/python -m pytest -p no:cacheprovider tests/unit \
	tests/integration/test_smoke.py --deselect tests/unit/test_spare.py \
	--deselect tests/unit/test_task_watchdog.py
test-lowest: java-check $(LOWEST_STAMP)
	$(call VERSION_RUN,$(LOWEST))
test-newest: java-check
	@$(NEWEST_DAILY)
	@$(MAKE) --no-print-directory $(NEWEST_STAMP)
	$(call VERSION_RUN,$(NEWEST))

# A Spark standalone cluster (a master and 3 workers from the installed pyspark) and
# applications submitted to it with spark-submit; part of `make test` too.
test-cluster: java-check $(STAMP)
	$(BIN)/python -m pytest -m cluster tests/integration/test_standalone_cluster.py

unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit

integration: java-check $(STAMP)
	$(BIN)/python -m pytest tests/integration

bench: java-check $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[bench]"
	$(BIN)/python bench/feed_bench.py

clean:
	rm -rf $(VENV) $(LOWEST) $(NEWEST) build *.egg-info .pytest_cache docs/_build
