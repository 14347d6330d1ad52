# prescient — every set-up step lives here, so a fresh clone needs only `make demo` / `make test`.
#
#   make demo    set up .venv (newest Python, Django 6; the demo's packages only) and run the demo on
#                SQLite: the admin, a prescient_worker, an order a minute (PORT=8001 serves elsewhere)
#   make test    the whole suite: SQLite and PostgreSQL, on Django 6 and on Django 5.2 LTS
#   make bench   benchmarks on PostgreSQL and SQLite, against raw SQL and peers (40 to 60 minutes on 2 CPUs)
#   make bench-quick   small sizes, sweep, idle, scheduling and metrics only (under a minute; make test runs it)
#
# The browser tests (tests/admin/test_browser.py) use the `browser` extra (Playwright's client) and
# Debian's chromium: `make test` installs chromium when it is missing and this is root.

SHELL := /bin/bash
VENV ?= .venv
VENV52 ?= .venv-django52
PG_URL ?= postgres://postgres@127.0.0.1:5432/prescient
STAMP = .tmp/.installed-$(notdir $(1))
DEMO_STAMP = .tmp/.installed-demo-$(notdir $(VENV))
PORT ?= 8000
# Give the venv $(1) a pip when it has none (`make demo` makes .venv without one): ensurepip has
# no -q (its output goes to /dev/null, errors still show) and needs --default-pip for bin/pip.
ENSURE_PIP = { $(1)/bin/python -m pip --version >/dev/null 2>&1 || \
  { echo "adding pip to $(1)"; $(1)/bin/python -m ensurepip --upgrade --default-pip >/dev/null; }; }

.PHONY: demo setup-demo test test-fast test-django6 test-django52 setup setup52 postgres chromium lint clean bench bench-quick faults

$(call STAMP,$(VENV)): pyproject.toml
	@mkdir -p .tmp
	@py=$$(scripts/find-python 3.12 3.14) || { echo "Django 6 needs Python 3.12+"; exit 1; }; \
	  [ -x $(VENV)/bin/python ] || { echo "setting up $(VENV) with $$py"; $$py -m venv $(VENV); }
	@$(call ENSURE_PIP,$(VENV))  # a .venv made by `make demo` has no pip
	$(VENV)/bin/python -m pip install -q --disable-pip-version-check -e ".[dev,browser,bench]" "Django>=6,<7"
	@touch $@

# The demo's packages only (prescient's dependencies and the `demo` extra, scripts/demo-requirements):
# a subset of the above, in the same .venv, which a .venv set up for the tests already has. The
# venv is made without pip and filled by the base Python's pip (seconds faster; the recipe above
# adds pip when the tests need it), and prescient runs from the checkout, so nothing is built.
$(DEMO_STAMP): pyproject.toml
	@mkdir -p .tmp
	@if [ $(call STAMP,$(VENV)) -nt pyproject.toml ]; then touch $@; exit 0; fi; \
	  py=$$(scripts/find-python 3.12 3.14) || { echo "Django 6 needs Python 3.12+"; exit 1; }; \
	  [ -x $(VENV)/bin/python ] || { echo "setting up $(VENV) with $$py"; $$py -m venv --without-pip $(VENV); }; \
	  $(VENV)/bin/python scripts/demo-requirements > .tmp/demo-requirements.txt && \
	  echo "installing the demo's packages: $$(tr '\n' ' ' < .tmp/demo-requirements.txt)" && \
	  { $$py -m pip --python $(VENV)/bin/python install -q --disable-pip-version-check \
	      -r .tmp/demo-requirements.txt "Django>=6,<7" || \
	    { $(call ENSURE_PIP,$(VENV)) && \
	      $(VENV)/bin/python -m pip install -q --disable-pip-version-check -r .tmp/demo-requirements.txt "Django>=6,<7"; }; } && \
	  touch $@

$(call STAMP,$(VENV52)): pyproject.toml
	@mkdir -p .tmp
	@py=$$(scripts/find-python 3.11 3.11 || scripts/find-python 3.12 3.13) || exit 1; \
	  [ -x $(VENV52)/bin/python ] || { echo "setting up $(VENV52) with $$py"; $$py -m venv $(VENV52); }
	@$(call ENSURE_PIP,$(VENV52))
	$(VENV52)/bin/python -m pip install -q --disable-pip-version-check -e ".[dev,browser]" "Django>=5.2,<5.3"
	@touch $@

setup: $(call STAMP,$(VENV))
setup52: $(call STAMP,$(VENV52))
setup-demo: $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(VENV)/bin/python manage.py demo --addrport 127.0.0.1:$(PORT)

postgres:
	@scripts/ensure-postgres

# Headless Chromium for the browser tests: Debian's package (Playwright's own download is
# never used). Quiet; without it the browser tests skip, or fail under CI=true.
chromium:
	@command -v chromium >/dev/null 2>&1 || [ "$$(id -u)" != 0 ] || \
	  { export DEBIAN_FRONTEND=noninteractive; apt-get install -y -qq chromium >/dev/null 2>&1 || \
	    { apt-get update -qq && apt-get install -y -qq chromium; } >/dev/null 2>&1; } || \
	  echo "warning: could not install chromium; the browser tests will skip (fail under CI=true)" >&2

# The whole suite, as CI runs it.
test: setup setup52 postgres chromium
	scripts/run-tests $(VENV) $(VENV52)

# Django 6 on SQLite and PostgreSQL only: the quick loop while developing.
test-fast: setup postgres chromium
	scripts/run-tests $(VENV)

# The fault suite alone: real workers and ticks on PostgreSQL (docs/operations.md, Guarantees).
faults: setup postgres
	DATABASE_URL=postgres://postgres@127.0.0.1:5432/prescient $(VENV)/bin/python -m pytest -q -p no:cacheprovider tests/faults

# Benchmarks: a scratch database (prescient_bench, created and dropped; BENCH_DATABASE_URL
# overrides it), a table on stdout, bench/results.json. See docs/performance.md.
# .venv has the `bench` extra (django-tasks-db, for the comparison in bench/peers.py).
bench: setup postgres
	$(VENV)/bin/python -m bench

bench-quick: setup postgres
	$(VENV)/bin/python -m bench --quick

# ruff, mypy and import-linter (scripts/lint, also run by `make test`), then Django's checks.
lint: setup
	scripts/lint $(VENV)
	$(VENV)/bin/python manage.py check
	$(VENV)/bin/python manage.py makemigrations --check --dry-run

clean:
	rm -rf $(VENV) $(VENV52) .tmp demo.sqlite3
