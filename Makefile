# One virtual environment in .venv/, created on first use and updated only when the inputs change.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.loadguard-installed

COMPAT       := .venv-compat
COMPAT_STAMP := $(COMPAT)/.loadguard-installed

.PHONY: demo test test-slow test-compat bench clean

demo: $(STAMP)
	$(BIN)/loadguard demo

test: $(STAMP)
	$(BIN)/python -m pytest

test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow

# The suite against transformers 4.57 (pre-v5 loading): the failure modes skip, naming the version.
test-compat: $(COMPAT_STAMP)
	$(COMPAT)/bin/python -m pytest

$(COMPAT_STAMP): pyproject.toml constraints-compat.txt
	test -x $(COMPAT)/bin/python || $(PYTHON) -m venv $(COMPAT)
	$(COMPAT)/bin/python -m pip install --quiet --disable-pip-version-check -c constraints-compat.txt -e '.[test]'
	touch $(COMPAT_STAMP)

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_zoo.py
	$(BIN)/python benchmarks/bench_audit.py
	$(BIN)/python benchmarks/bench_scan.py
	$(BIN)/python benchmarks/bench_matrix.py

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[test]'
	touch $(STAMP)

clean:
	rm -rf $(VENV) $(COMPAT) .pytest_cache .hypothesis src/*.egg-info
