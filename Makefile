# wakemark — developer commands. `make run` and `make test` work on a fresh machine.
PY ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1

.PHONY: install model run test test-fast lint fmt typecheck pytest services bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first and pinned: any other spec pulls a multi-GB CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev,export]'
	touch $(STAMP)

install: $(STAMP) model

model: $(STAMP)
	$(BIN)/wakemark model export --quiet

run: install
	$(BIN)/wakemark migrate
	$(BIN)/wakemark serve

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

fmt: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

typecheck: $(STAMP)
	$(BIN)/mypy

# Test processes per run (pytest-xdist). Postgres tests each make their own schema; the
# tests of the one test Redis database (marked shared_redis by tests/conftest.py) run in
# a serial pass of their own.
WORKERS ?= auto
XDIST = -n $(WORKERS)

# Everything that needs no service (and bench's own tests), then the integration suite
# (Postgres, Redis) through the image's entry point: the same line compose's `tests`
# service runs in the image, here in two passes (a later -m replaces the entry point's).
pytest: install
	$(BIN)/pytest $(XDIST) -m "not (postgres or redis)" tests bench/tests
	PATH="$(CURDIR)/$(BIN):$$PATH" sh docker/entrypoint.sh tests $(XDIST) \
		-m "(postgres or redis) and not shared_redis"
	PATH="$(CURDIR)/$(BIN):$$PATH" sh docker/entrypoint.sh tests -p no:xdist -m shared_redis

# The lane before each commit: lint, types and the tests that need no service, start no
# server process, drive no browser, build no wheel and fuzz nothing.
test-fast: lint typecheck
	$(BIN)/pytest $(XDIST) -m "not (postgres or redis or slow or browser or wheel or fuzz)"

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

# --- deployment: docker compose (see README "Deploy with Docker Compose") ------------------
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
