# The two commands of the README. Each does all set-up on a fresh machine
# that has Python 3.11 and pip: it creates .venv and installs the project.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,dask]' --config-settings editable_mode=compat
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/privpipe demo

test: $(STAMP)
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) .privpipe out
