#!/bin/sh
# Runs once, as the Postgres superuser, when the data volume is first initialised: the
# superuser only makes the app's role, its databases and the extensions (vector needs a
# superuser). The app, workers, beat and migrate connect as `wakemark`, which owns its
# databases and is no superuser: no COPY ... TO PROGRAM, no reading the server's files.
# `wakemark_test` is for the integration suite (compose's `tests` profile).
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
    -v app_password="$POSTGRES_APP_PASSWORD" <<'SQL'
CREATE ROLE wakemark LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION PASSWORD :'app_password';
CREATE DATABASE wakemark OWNER wakemark;
CREATE DATABASE wakemark_test OWNER wakemark;
\connect wakemark
CREATE EXTENSION IF NOT EXISTS vector;
CREATE EXTENSION IF NOT EXISTS unaccent;
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE EXTENSION IF NOT EXISTS btree_gin;
\connect wakemark_test
CREATE EXTENSION IF NOT EXISTS vector;
CREATE EXTENSION IF NOT EXISTS unaccent;
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE EXTENSION IF NOT EXISTS btree_gin;
SQL
