# One virtual environment in .venv/, created on first use and updated only when the inputs change.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.loadguard-installed

.PHONY: demo test test-slow bench clean

demo: $(STAMP)
	$(BIN)/loadguard demo

test: $(STAMP)
	$(BIN)/python -m pytest

test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_audit.py

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[test]'
	touch $(STAMP)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis src/*.egg-info
