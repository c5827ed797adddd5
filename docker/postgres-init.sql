-- Runs once, as the Postgres superuser, when the data volume is first initialised.
-- `wakemark migrate` creates these itself only when its role may (vector needs a
-- superuser), so the deployment installs them here and migrate never has to.
CREATE EXTENSION IF NOT EXISTS vector;
CREATE EXTENSION IF NOT EXISTS unaccent;
