#!/usr/bin/env bash
# Start the services the test suite needs and prepare the test database.
#
#   * PostgreSQL 15 on 127.0.0.1:5432 (with pgvector; see install-pgvector.sh)
#   * Redis on 127.0.0.1:6379
#   * role "wakemark" + database "wakemark_test" (owned by it) with the
#     extensions vector, unaccent, pg_trgm and btree_gin, created as superuser.
#
# Idempotent. Logs go to stderr; stdout carries only `export` lines, so a
# developer (or .ci/run) can do:   eval "$(scripts/ci-services.sh)"
set -euo pipefail

PG_MAJOR="${PG_MAJOR:-15}"
PG_HOST=127.0.0.1
PG_PORT=5432
PG_SUPERUSER=postgres
REDIS_PORT="${CI_REDIS_PORT:-6379}"
DB_ROLE=wakemark
DB_NAME=wakemark_test
REDIS_DB=15

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
log() { printf '[ci-services] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ------------------------------------------------------------ pgvector
"$here/install-pgvector.sh" >&2

# ------------------------------------------------------------ PostgreSQL
pg_ready() { pg_isready -q -h "$PG_HOST" -p "$PG_PORT"; }
if ! pg_ready; then
    log "starting PostgreSQL ${PG_MAJOR}/main"
    # "already running" is not an error for us; readiness is checked below.
    pg_ctlcluster --skip-systemctl-redirect "$PG_MAJOR" main start >&2 || true
fi
for _ in $(seq 60); do pg_ready && break; sleep 0.5; done
pg_ready || die "PostgreSQL not ready on ${PG_HOST}:${PG_PORT}"
log "PostgreSQL ready on ${PG_HOST}:${PG_PORT}"

# ------------------------------------------------------------ Redis
redis_ready() { [[ "$(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null)" == PONG ]]; }
if ! redis_ready; then
    log "starting Redis on 127.0.0.1:${REDIS_PORT}"
    redis-server --daemonize yes --bind 127.0.0.1 --port "$REDIS_PORT" \
        --save "" --appendonly no --dir /tmp >&2
fi
for _ in $(seq 60); do redis_ready && break; sleep 0.5; done
redis_ready || die "Redis not answering PING on 127.0.0.1:${REDIS_PORT}"
log "Redis ready on 127.0.0.1:${REDIS_PORT}"

# ------------------------------------------------------------ role + database
psql_su() { psql -X -q -v ON_ERROR_STOP=1 -h "$PG_HOST" -p "$PG_PORT" -U "$PG_SUPERUSER" "$@"; }

psql_su -d postgres >&2 <<SQL
DO \$\$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '${DB_ROLE}') THEN
    CREATE ROLE ${DB_ROLE} LOGIN;
  END IF;
END
\$\$;
-- as compose runs the app: never a superuser
ALTER ROLE ${DB_ROLE} LOGIN NOSUPERUSER;
SELECT 'CREATE DATABASE ${DB_NAME} OWNER ${DB_ROLE}'
 WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = '${DB_NAME}') \gexec
ALTER DATABASE ${DB_NAME} OWNER TO ${DB_ROLE};
SQL

# vector is not a trusted extension, so it must be created by a superuser.
psql_su -d "$DB_NAME" >&2 <<SQL
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS vector;
ALTER EXTENSION vector UPDATE;
CREATE EXTENSION IF NOT EXISTS unaccent;
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE EXTENSION IF NOT EXISTS btree_gin;
SQL

# Check as the test role itself: login, pgvector + HNSW iterative scan, unaccent.
psql -X -q -v ON_ERROR_STOP=1 -At -h "$PG_HOST" -p "$PG_PORT" -U "$DB_ROLE" -d "$DB_NAME" >&2 <<'SQL'
SET hnsw.iterative_scan = relaxed_order;
SELECT 'db ok: ' || current_user || '@' || current_database()
       || ', vector ' || (SELECT extversion FROM pg_extension WHERE extname = 'vector')
       || ', distance=' || ('[1,0]'::vector <=> '[0,1]'::vector)
       || ', unaccent(Crème)=' || unaccent('Crème');
SQL

cat <<ENV
export WAKEMARK_TEST_DATABASE_URL=postgresql://${DB_ROLE}@${PG_HOST}:${PG_PORT}/${DB_NAME}
export WAKEMARK_TEST_REDIS_URL=redis://127.0.0.1:${REDIS_PORT}/${REDIS_DB}
export WAKEMARK_REQUIRE_SERVICES=1
ENV
