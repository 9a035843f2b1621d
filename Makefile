# The two commands of the README. Each does all set-up on a fresh machine
# that has Python 3.11, pip and a C compiler: it creates .venv and installs the project
# (compiling mechanisms/curves/_forest.c).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test lint bench clean chromium

# setup.py and the C source: a changed kernel is rebuilt before the next run or test.
# compileall writes the editable sources' bytecode, as pip does for installed
# packages: an environment with PYTHONDONTWRITEBYTECODE would compile them at every command.
# --write-template migrates an empty Prefect database once (.venv/share/privpipe/): a
# temporary Prefect server on a new PRIVPIPE_HOME starts from a copy of it (flows/prefect_server.py).
$(STAMP): pyproject.toml setup.py mechanisms/curves/_forest.c mechanisms/curves/_evaluate.c \
		tasks/_keystream.c tasks/_popsums.c mechanisms/kernel_buffer.h
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,dask]' --config-settings editable_mode=compat
	$(PY) -m compileall -q flows tasks reports files ledger mechanisms schemas ingest > /dev/null
	$(PY) -m flows.prefect_server --write-template > /dev/null
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/privpipe demo

# Test processes (pytest-xdist): each has its own Prefect harness and PREFECT_HOME;
# a test file runs whole in one process (module fixtures such as a Dask cluster
# are started once). TEST_WORKERS=0 runs everything in this process.
TEST_WORKERS ?= 2

# The audit web page's browser test (tests/reports/test_audit_serve.py) drives headless
# Chromium; CI runs as root on a fresh Debian machine, so install it there when missing.
chromium:
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium)

test: $(STAMP) chromium
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=20

lint: $(STAMP)
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) .privpipe out
