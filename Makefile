# Kiln. `make up` sets everything up and starts the portal; `make test` runs the whole suite.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export KILN_DATA_DIR ?= $(CURDIR)/data
HOST ?= 127.0.0.1
PORT ?= 8000

# The integration tests use the real services of the machine (see README).
TEST_DATABASE_URL ?= postgresql://postgres@127.0.0.1:5432/test
TEST_BROKER_URL ?= redis://127.0.0.1:6379/9

.PHONY: install up test lint bench-fanout demo-reset clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

install: $(VENV)/.installed

up: install
	$(BIN)/python manage.py migrate --noinput -v0
	$(BIN)/python manage.py collectstatic --noinput -v0
	$(BIN)/python manage.py kiln_keys init --if-missing --site "Kiln demo ($$(hostname))"
	KILN_ALLOW_LOCAL_TRANSPORT=$${KILN_ALLOW_LOCAL_TRANSPORT:-1} $(BIN)/python manage.py kiln_demo
	@bash scripts/up.sh "$(HOST)" "$(PORT)"

test: install
	DATABASE_URL=$(TEST_DATABASE_URL) CELERY_BROKER_URL=$(TEST_BROKER_URL) KILN_DATA_DIR=$(CURDIR)/data/test \
	  $(BIN)/python -m pytest $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Kiln's quick plan against pdsh/clush/asyncssh on testbed nodes (root; PostgreSQL and Redis as for
# `make test`). BENCH_ARGS="--nodes 64" for one size.
bench-fanout: install
	$(BIN)/pip install -q -e '.[dev,bench]'
	$(BIN)/python bench/bench_fanout.py $(BENCH_ARGS)
