-- Runs once, as the Postgres superuser, when the data volume is first initialised.
-- wakemark's migrations need these extensions but never create them (an ordinary role
-- cannot), so the deployment installs them here.
CREATE EXTENSION IF NOT EXISTS vector;
CREATE EXTENSION IF NOT EXISTS unaccent;
