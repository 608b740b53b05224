# attention-from-scratch: one command to read the series, one to check everything.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 8888
# Jupyter refuses to run as root unless told; containers and CI machines often are root.
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)

.PHONY: install lab notebooks export check-export lint test test-unit test-notebooks bench quote-bench clean

install: $(STAMP)

# torch first, pinned: an unpinned torch would pull a CUDA build of several GB.
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -c constraints.txt torch
	$(PY) -m pip install --quiet -c constraints.txt -e ".[dev]"
	touch $(STAMP)

lab: install
	$(VENV)/bin/jupyter lab $(ROOT_FLAG) --ServerApp.root_dir=notebooks --ip=$(HOST) --port=$(PORT)

# Re-execute every notebook in a fresh kernel, in place, then regenerate the package from them.
# Streams are coalesced so that a re-run writes the same bytes however the kernel chunked its output.
notebooks: install
	$(VENV)/bin/jupyter nbconvert --to notebook --execute --inplace \
	    --ExecutePreprocessor.timeout=300 --ExecutePreprocessor.record_timing=False \
	    --Exporter.preprocessors='["nbconvert.preprocessors.CoalesceStreamsPreprocessor"]' \
	    notebooks/[0-9]*.ipynb
	$(MAKE) export

export: install
	$(PY) scripts/export.py

check-export: install
	$(PY) scripts/export.py --check

lint: install
	$(VENV)/bin/ruff check attention_lib tests notebooks benchmarks scripts solutions

test-unit: install
	$(VENV)/bin/pytest -v tests

test-notebooks: install
	$(VENV)/bin/pytest -v --nbval --nbval-current-env --nbval-cell-timeout=300 --nbval-sanitize-with notebooks/sanitize.cfg notebooks

test: lint check-export test-unit test-notebooks

bench: install
	$(PY) benchmarks/run.py

# Write the tables of the recorded run each marker names (run=latest: the newest in benchmarks/results/) into
# README.md and the notebooks; tests/test_quote_bench.py fails when a quoted table differs from its run.
quote-bench:
	$(PYTHON) scripts/quote_bench.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache test-artifacts build *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
