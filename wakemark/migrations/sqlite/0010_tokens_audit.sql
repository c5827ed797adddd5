-- Scoped API tokens (only a SHA-256 of each secret is stored) and the audit log of
-- destructive actions. Times are UTC ISO-8601 text, as everywhere else.

CREATE TABLE api_tokens (
    token_id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    secret_sha256 TEXT NOT NULL UNIQUE,
    actor TEXT NOT NULL,
    project TEXT,
    read_only INTEGER NOT NULL CHECK (read_only IN (0, 1)),
    created_at TEXT NOT NULL,
    expires_at TEXT,
    revoked_at TEXT,
    last_used_at TEXT
) STRICT;

CREATE TABLE audit_log (
    id INTEGER PRIMARY KEY,
    at TEXT NOT NULL,
    who TEXT NOT NULL,
    action TEXT NOT NULL,
    namespace TEXT,
    targets TEXT NOT NULL DEFAULT '[]',
    count INTEGER NOT NULL
) STRICT;
