-- Runs once, as the Postgres superuser, when the data volume is first initialised.
-- `wakemark migrate` creates these itself only when its role may (vector needs a
-- superuser), so the deployment installs them here: in `wakemark`, and in
-- `wakemark_test` for the integration suite (compose's `tests` profile).
CREATE EXTENSION IF NOT EXISTS vector;
CREATE EXTENSION IF NOT EXISTS unaccent;
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE EXTENSION IF NOT EXISTS btree_gin;

CREATE DATABASE wakemark_test OWNER wakemark;
\connect wakemark_test
CREATE EXTENSION IF NOT EXISTS vector;
CREATE EXTENSION IF NOT EXISTS unaccent;
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE EXTENSION IF NOT EXISTS btree_gin;
