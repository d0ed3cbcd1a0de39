# One virtual environment in .venv/, created on first use and updated only when the inputs change.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.loadguard-installed

COMPAT       := .venv-compat
COMPAT_STAMP := $(COMPAT)/.loadguard-installed

.PHONY: demo test lint test-slow test-ray bench-ray test-compat test-newest test-versions api-diff bench bench-run bench-large clean

demo: $(STAMP)
	$(BIN)/loadguard demo

# -n auto: as many pytest-xdist workers as cores (2 on CI); --dist worksteal: an idle worker takes tests queued on the
# other, so a long test left last does not hold the run (Dec 8, 2 cores: 813 s against 870-903 s with the default)
test: $(STAMP)
	$(BIN)/python -m pytest -n auto --dist worksteal

# ruff, configured in pyproject.toml: the lint rules, then the formatting (CI fails on either)
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow

# The executor on Ray: a 2-node cluster started on this machine by the tests (and stopped by its process ids).
# Installs the optional extra loadguard[ray] (pinned in constraints.txt) into .venv first.
test-ray: $(STAMP)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[test,ray]'
	$(BIN)/python -m pytest -m ray

# The suite against transformers 4.57 (pre-v5 loading): the failure modes skip, naming the version.
# The suite on whatever pip resolves today with no constraints (newest torch, transformers, accelerate; a CUDA build
# of torch where pip picks one): what a user's `pip install loadguard` gets. Not in CI: it downloads gigabytes.
test-newest:
	rm -rf .venv-newest
	$(PYTHON) -m venv .venv-newest
	.venv-newest/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	.venv-newest/bin/loadguard env
	.venv-newest/bin/python -m pytest -n auto

test-compat: $(COMPAT_STAMP)
	$(COMPAT)/bin/python -m pytest -n auto --dist worksteal

# Not in CI (about 30-60 min, needs the package index): the scan's self-check, the scan-vs-full-audit differential
# over every zoo entry and the zoo's expectations on 4.57.6, 5.0.0, every 5.x minor's last patch and the newest
# release, each in the matrix's cached environments; prints the README's "Before you bump" table (versions.md)
test-versions: $(STAMP)
	$(BIN)/python tools/test_versions.py --jobs 2 | tee versions.md

# What code written for transformers 4 can touch and 5.x changed, as data (checked in; tests/workarounds/test_api_diff.py
# requires every entry covered by a workaround or declined with a reason)
# 4.x releases before 4.57 whose names the diff adds (code written for them imports what 4.57 had already dropped);
# each is dumped in loadguard's environment for it (created on first use, ~20 s each)
API_DIFF_OLDER ?= 4.26.1 4.30.2 4.33.3 4.36.2 4.40.2 4.44.2 4.46.3 4.50.3 4.54.1

api-diff: $(STAMP) $(COMPAT_STAMP)
	$(COMPAT)/bin/python tools/api_surface.py --modules all > .api-surface-old.json
	$(BIN)/python tools/api_surface.py --modules all > .api-surface-new.json
	for v in $(API_DIFF_OLDER); do \
	  py=$$($(BIN)/python -c "from loadguard._infra import envs; e = envs.environment('$$v'); print(e.python if e.ok else '')") \
	  && test -n "$$py" && $$py tools/api_surface.py --modules all > .api-surface-$$v.json || exit 1; \
	done
	$(BIN)/python tools/api_diff.py .api-surface-old.json .api-surface-new.json $(API_DIFF_OLDER:%=.api-surface-%.json) \
	  > src/loadguard/workarounds/data/api_diff.json
	rm -f .api-surface-*.json

$(COMPAT_STAMP): pyproject.toml constraints-compat.txt
	test -x $(COMPAT)/bin/python || $(PYTHON) -m venv $(COMPAT)
	$(COMPAT)/bin/python -m pip install --quiet --disable-pip-version-check -c constraints-compat.txt -e '.[test]'
	touch $(COMPAT_STAMP)

# Every benchmark appends its figures to .bench-run.jsonl; benchmarks/guard.py then prints each figure more than 10%
# worse than the previous release's (benchmarks/history/, with the machine of each), stores this run's there (check
# it in with the release) and fails when one is worse
bench: $(STAMP)
	rm -f .bench-run.jsonl
	LOADGUARD_BENCH_RECORD=$(CURDIR)/.bench-run.jsonl $(MAKE) --no-print-directory bench-run
	$(BIN)/python benchmarks/guard.py .bench-run.jsonl

bench-run:
	$(BIN)/python benchmarks/bench_zoo.py
	$(BIN)/python benchmarks/bench_audit.py
	$(BIN)/python benchmarks/bench_observed.py
	$(BIN)/python benchmarks/bench_scan.py
	$(BIN)/python benchmarks/bench_cost.py
	$(BIN)/python benchmarks/bench_plugin.py
	$(BIN)/python benchmarks/bench_hook.py
	$(BIN)/python benchmarks/bench_formats.py
	$(BIN)/python benchmarks/bench_fix.py
	$(BIN)/python benchmarks/bench_fix_checks.py
	$(BIN)/python benchmarks/bench_missing.py
	$(BIN)/python benchmarks/bench_startup.py
	$(BIN)/python benchmarks/bench_hub.py

# The local and the Ray executor side by side (fleet and matrix; needs the package index for the matrix environments)
bench-ray: $(STAMP)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[test,ray]'
	$(BIN)/python benchmarks/bench_executors.py
	$(BIN)/python benchmarks/bench_matrix.py

# torchao (a quantized load in the suite) goes to a folder of its own: installed in the environment, transformers
# imports it on every load, and it prints warnings about CUDA kernels it cannot load
# Not in CI: writes ~25 GB of random-weight checkpoints under $$LOADGUARD_CACHE/bench (reused), takes minutes
bench-large: $(STAMP)
	$(BIN)/python benchmarks/bench_large.py

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[test]'
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --upgrade --target $(VENV)/quantization -c constraints.txt torchao
	touch $(STAMP)

clean:
	rm -rf $(VENV) $(COMPAT) .pytest_cache .hypothesis src/*.egg-info
