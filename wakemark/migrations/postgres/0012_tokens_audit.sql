-- Scoped API tokens (only a SHA-256 of each secret is stored) and the audit log of
-- destructive actions.

CREATE TABLE api_tokens (
    token_id text PRIMARY KEY,
    name text NOT NULL,
    secret_sha256 text NOT NULL UNIQUE,
    actor text NOT NULL,
    project text,
    read_only boolean NOT NULL,
    created_at timestamptz NOT NULL,
    expires_at timestamptz,
    revoked_at timestamptz,
    last_used_at timestamptz
);

CREATE TABLE audit_log (
    id bigserial PRIMARY KEY,
    at timestamptz NOT NULL,
    who text NOT NULL,
    action text NOT NULL,
    namespace text,
    targets text[] NOT NULL DEFAULT '{}',
    count integer NOT NULL
);
