# Two commands do everything on a fresh machine: `make run` and `make test`.
# Both start with `make setup`, which creates or reuses .venv/ and installs guardian.
# `make test` is the behaviour tier (lint + every test not marked slow or e2e, about 10 minutes on a fresh
# clone of 2 cores, set-up included); `make test-slow` the slow tier (training, fine-tuning, int8 builds,
# model-quality floors, real end-to-end runs); `make test-all` both. CI runs both.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.guardian-setup-stamp
EXAMPLE ?= examples/gaslighting.txt

.PHONY: setup run test test-slow test-all check lint clean report-check

setup: $(STAMP)

$(STAMP): pyproject.toml scripts/setup.sh
	bash scripts/setup.sh
	touch $(STAMP)

run: setup
	$(VENV)/bin/guardian watch $(EXAMPLE)

test: setup
	bash scripts/check -m "not slow and not e2e"

test-slow: setup
	bash scripts/check --no-lint -m "slow or e2e"

test-all: setup
	bash scripts/check

lint: setup
	$(VENV)/bin/ruff check src tests lab
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# The HTML report of the bundled example, screenshotted by headless Chromium (REPORT_DIR=... keeps it).
report-check: setup
	bash scripts/report_check.sh

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
