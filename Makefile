# Relaunch: the two commands a newcomer needs are `make demo` and `make test`.
# Both create the project's own virtual environment in .venv on first use.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv demo test test-fast check clean browser constraints

venv: $(STAMP)

# torch is installed first and pinned: torch==2.13.0 is the CPU build available on this kind of
# machine; any other requirement would pull several GB of CUDA packages.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[trainer,devstack,report,dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/relaunch demo

# The status page is tested in a real headless Chromium: Debian's package, never a downloaded one.
browser:
	@command -v chromium >/dev/null || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium)

# The mechanical checks run first: lint, format, types, import contracts. Then every test.
test: $(STAMP) check browser
	$(BIN)/python -m pytest

# The fast lane while editing: the mechanical checks are left to `make test`; no devstack, no
# processes (tests marked `integration` are deselected), well under 90 s on two cores.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not integration and not slow"

check: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/hadolint Dockerfile

# The versions the images install (Dockerfile, pip --constraint): the ones this venv tests with.
constraints: $(STAMP)
	$(BIN)/python -m pip freeze --exclude-editable | sed -e 's/+cpu$$//' > constraints.txt

clean:
	rm -rf $(VENV) .pytest_cache
