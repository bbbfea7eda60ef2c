# Kiln. `make up` sets everything up and starts the portal; `make test` runs the whole suite.
SHELL := /bin/bash
PYTHON ?= python3
# VENV: where `make install` puts the virtualenv (tests/integration/test_kiln_install.py installs into a
# fresh one with the interpreter's own bundled pip, as a new user's `python3 -m venv` has).
VENV ?= .venv
BIN := $(VENV)/bin
# The data directory comes from the environment, else .env, else ./data (portal/settings.py reads .env:
# make sets nothing here, so .env's KILN_DATA_DIR is honoured).
HOST ?= 127.0.0.1
PORT ?= 8000

# The integration tests use the real services of the machine (see README).
TEST_DATABASE_URL ?= postgresql://postgres@127.0.0.1:5432/test
TEST_BROKER_URL ?= redis://127.0.0.1:6379/9
# Several pytest processes, each with its own test database and broker database (TEST_BROKER_URL's
# + the process's index: 9, 10, ...); the tests that need the machine alone run in one of them, in
# order (tests/conftest.py). Four on two cores: the long integration tests mostly wait on the
# processes they start; with four, both cores were busy for the whole run (/proc/stat, sampled every
# 5 s), with three they were not. TEST_PROCESSES=0 runs everything in this one process.
TEST_PROCESSES ?= 4
# Coverage of the pytest processes, in the output; the run fails below the floor in
# .ci/coverage-floor, which may only rise (tests/meta/test_coverage_floor.py). COVERAGE= turns it off.
COVERAGE ?= --cov --cov-report=term --cov-fail-under=$$(cat .ci/coverage-floor)

# The lock: exact versions with hashes, generated from the ranges in pyproject.toml by `make lock`.
# Everything installed comes from it, pip and setuptools included (requirements/build.in).
LOCK := requirements/dev.txt
# Installed without resolving (--no-deps): whatever pip a venv starts with installs exactly the lock,
# and never resolves a requested extra (WeasyPrint's fonttools[woff]) against a newer release on the
# index. scripts/check_lock.py then proves the lock complete: every requirement of every installed
# package, extras included, pinned with hashes and installed at that version.
PIP_LOCKED := -m pip install -q --no-deps --require-hashes -r
CHECK_LOCK := scripts/check_lock.py --also requirements/build.in
UV_COMPILE := $(BIN)/uv pip compile -q --universal --python-version 3.11 --generate-hashes \
  pyproject.toml requirements/build.in

# `manage.py check --deploy` against production-like settings: HTTPS on, DEBUG off, PostgreSQL and
# Redis named (nothing connects to them), a throw-away secret key of Django's recommended length.
DEPLOY_ENV := KILN_HTTPS=1 KILN_DEBUG=0 KILN_REQUIRE_POSTGRES=1 KILN_ALLOWED_HOSTS=kiln.example.org \
  DATABASE_URL=postgresql://kiln@db.invalid/kiln CELERY_BROKER_URL=redis://redis.invalid:6379/0 \
  KILN_SECRET_KEY=$$($(BIN)/python -c 'import secrets; print(secrets.token_urlsafe(50))')

# The theme's end-of-life notice for mkdocs 2 would print on every build; the lock pins mkdocs 1.
MKDOCS := NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs

.PHONY: install up test soak-demo lint docs lock bench-fanout clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# .installed records which pip installed the lock (in a new virtualenv, the one its interpreter
# bundles) and the digests of the files installed from: tests/integration/test_kiln_install.py reads
# it to know whether the suite runs in a fresh install (CI's clean clone) or must make one itself.
$(VENV)/.installed: $(LOCK) pyproject.toml | $(BIN)/python
	set -o pipefail; $(BIN)/python -m pip --version | cut -d" " -f1,2 > $@.new
	$(BIN)/python $(PIP_LOCKED) $(LOCK)
	$(BIN)/python -m pip install -q --no-deps --no-build-isolation --no-index -e .
	set -o pipefail; $(BIN)/python $(CHECK_LOCK) --extra dev $(LOCK) | tee -a $@.new
	sha256sum $(LOCK) pyproject.toml >> $@.new
	mv $@.new $@

install: $(VENV)/.installed

# exec: no shell stands between make and the supervisor to die of the Ctrl-C (or TERM) that stops the
# demo; it stops its programs and exits 0, so make prints no "Error 130/143" (tests/portal/test_up_script.py).
up: install
	$(BIN)/python manage.py kiln_init
	$(BIN)/python manage.py migrate --noinput -v0
	$(BIN)/python manage.py collectstatic --noinput -v0
	$(BIN)/python manage.py kiln_keys init --if-missing --site "Kiln demo ($$(hostname))"
	KILN_ALLOW_LOCAL_TRANSPORT=$${KILN_ALLOW_LOCAL_TRANSPORT:-1} $(BIN)/python manage.py kiln_demo
	@exec $(BIN)/python -m portal.demo.up "$(HOST)" "$(PORT)"

# KILN_ENV_FILE empty: the tests never read a developer's .env.
test: export KILN_ENV_FILE =
# Bytecode written (PYTHONDONTWRITEBYTECODE emptied, as some machines and CI images set it): else every
# pytest process rewrites the assertions of all test modules again (21 s of CPU to collect, 6.5 s
# with the cache) and every Python process the tests start compiles Kiln's modules again.
test: export PYTHONDONTWRITEBYTECODE =
test: install
	KILN_DATA_DIR=$(CURDIR)/data/test $(BIN)/python manage.py kiln_init -v0
	DATABASE_URL=$(TEST_DATABASE_URL) CELERY_BROKER_URL=$(TEST_BROKER_URL) KILN_DATA_DIR=$(CURDIR)/data/test \
	  $(BIN)/python -m pytest -n $(TEST_PROCESSES) --dist loadgroup \
	  --durations=30 $(COVERAGE) $(PYTEST_ARGS)

# The demo certificate beside a CPU hog three times in a row on one install, 3 of 3 to pass (make test
# runs it once: tests/certificates/test_demo_certificate.py). About 10 minutes on 2 cores.
soak-demo: export KILN_ENV_FILE =
soak-demo: install
	KILN_DATA_DIR=$(CURDIR)/data/test $(BIN)/python manage.py kiln_init -v0
	KILN_DEMO_TRIES=3 KILN_DATA_DIR=$(CURDIR)/data/test $(BIN)/python -m pytest -p no:cacheprovider -q \
	  tests/certificates/test_demo_certificate.py

# The tool checks CI runs (.ci/run) and .pre-commit-config.yaml repeats. makemigrations reads the
# settings, which refuse to start without a secret key: a clean clone has none (kiln_init makes it).
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	KILN_SECRET_KEY=lint-only-throwaway-key $(BIN)/python manage.py makemigrations --check --dry-run
	$(DEPLOY_ENV) $(BIN)/python manage.py check --deploy --fail-level WARNING
	$(MKDOCS) build --strict --quiet

# The documentation site into site/ (mkdocs.yml; docs/hooks.py generates the checks and API references).
docs: install
	$(MKDOCS) build --strict

# Regenerate the lock after changing a range in pyproject.toml (or to take newer versions).
lock: install
	$(UV_COMPILE) -o requirements/base.txt
	$(UV_COMPILE) --extra dev -o requirements/dev.txt
	$(UV_COMPILE) --extra dev --extra bench -o requirements/bench.txt

# Kiln's quick plan against pdsh/clush/asyncssh on testbed nodes (root; PostgreSQL and Redis as for
# `make test`). BENCH_ARGS="--nodes 64" for one size.
bench-fanout: install
	$(BIN)/python $(PIP_LOCKED) requirements/bench.txt
	$(BIN)/python $(CHECK_LOCK) --extra dev --extra bench requirements/bench.txt
	$(BIN)/python bench/bench_fanout.py $(BENCH_ARGS)

# The virtualenv and what builds and tests leave in the checkout. Never the data folder: it holds the
# database, the signing keys and the issued certificates (remove it by hand to start over).
clean:
	rm -rf $(VENV) build *.egg-info test-artifacts .mypy_cache .ruff_cache .pytest_cache
	find . -name __pycache__ -type d -prune -not -path './data/*' -exec rm -rf {} +
