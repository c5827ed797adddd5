# wakemark — developer commands. `make run` and `make test` work on a fresh machine.
# Python 3.11-3.13: python3 if it is one, else the newest found (scripts/find-python.sh).
PY ?= $(shell scripts/find-python.sh)
VENV ?= .venv
BIN := $(VENV)/bin
# Installed: wakemark and its run-time dependencies (RUN_STAMP), plus the dev extra (STAMP).
RUN_STAMP := $(VENV)/.installed-run
STAMP := $(VENV)/.installed

.PHONY: install model run test test-fast lint fmt typecheck pytest services bench clean

$(RUN_STAMP): pyproject.toml
	@test -n "$(PY)" || { echo "make: no Python 3.11, 3.12 or 3.13 found (set PY=...)"; exit 1; }
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q -e .
	touch $(RUN_STAMP)

$(STAMP): $(RUN_STAMP)
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP) model

model: $(RUN_STAMP)
	$(BIN)/wakemark model export --quiet

# serve migrates, and builds the model on first start: no dev tools needed to run.
run: $(RUN_STAMP)
	$(BIN)/wakemark serve

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

fmt: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

typecheck: $(STAMP)
	$(BIN)/mypy

# Test processes of `make test` (pytest-xdist): one more than the cores, since many of
# its tests wait on Postgres or on a process they started (test-fast's keep the cores
# busy, one per core). Postgres tests each make their own schema; the tests of the one
# test Redis database (marked shared_redis by tests/conftest.py) run in a serial pass.
WORKERS ?= $(shell echo $$(( $$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1) + 1 )))
XDIST = -n $(WORKERS)

# Every test, bench's own included, through the image's entry point (the line compose's
# `tests` service runs in the image; a later -m replaces the entry point's): all but the
# shared_redis tests on every core in one pass, then those alone.
pytest: install
	PATH="$(CURDIR)/$(BIN):$$PATH" sh docker/entrypoint.sh tests $(XDIST) \
		-m "not shared_redis" tests bench/tests
	PATH="$(CURDIR)/$(BIN):$$PATH" sh docker/entrypoint.sh tests -p no:xdist -m shared_redis

# The lane before each commit: lint, types and the tests that need no service, start no
# server process, drive no browser, build no wheel and fuzz nothing.
test-fast: lint typecheck
	$(BIN)/pytest -n auto -m "not (postgres or redis or slow or browser or wheel or fuzz)"

# Start Postgres and Redis if they are installed but stopped, install pgvector where
# apt can, and create the test role and database: what .ci/run does before `make test`.
services:
	scripts/ci-services.sh >/dev/null

test: lint typecheck pytest

bench: install
	$(BIN)/python -m bench

# The generated reference in docs/ (CLI, settings, routes); tests/test_docs.py fails when stale.
.PHONY: docs
docs: $(STAMP)
	$(BIN)/python scripts/gen_docs.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

# --- deployment: docker compose (see docs/team-server.md, "Deploy with Docker Compose")
COMPOSE ?= docker compose
N ?= 2

.PHONY: env up down logs ps scale-workers stack

env:
	scripts/make-env.sh .env

.env:
	scripts/make-env.sh .env

up: .env
	$(COMPOSE) up -d --build

down:
	$(COMPOSE) down

logs:
	$(COMPOSE) logs -f --tail=200

ps:
	$(COMPOSE) ps

scale-workers:
	$(COMPOSE) up -d --no-recreate --scale worker=$(N) worker

# The same processes as compose.yaml (migrate, gunicorn, two Celery workers, beat), in
# the foreground, against WAKEMARK_DATABASE_URL and WAKEMARK_REDIS_URL.
stack: install
	$(BIN)/python tests/stack/stack.py
