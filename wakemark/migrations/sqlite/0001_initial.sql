-- Events, turns and memory records with their full-text index.
-- Times are UTC ISO-8601 text with microseconds, so text order is time order.

CREATE TABLE events (
    event_id TEXT PRIMARY KEY,
    parent_event_id TEXT,
    session_id TEXT NOT NULL,
    actor_id TEXT NOT NULL,
    namespace TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('prompt', 'tool_use', 'session_summary', 'note')),
    body TEXT NOT NULL,
    valid_time TEXT NOT NULL,
    source TEXT NOT NULL,
    schema_version INTEGER NOT NULL,
    transaction_time TEXT NOT NULL,
    turn_id TEXT NOT NULL
) STRICT;

CREATE INDEX events_by_time ON events (transaction_time DESC, event_id DESC);
CREATE INDEX events_by_namespace ON events (namespace, transaction_time DESC, event_id DESC);
CREATE INDEX events_by_session ON events (session_id, transaction_time DESC, event_id DESC);
CREATE INDEX events_by_turn ON events (turn_id, valid_time, event_id);

CREATE TABLE turns (
    turn_id TEXT PRIMARY KEY,
    namespace TEXT NOT NULL,
    session_id TEXT NOT NULL,
    opened_at TEXT NOT NULL,
    last_event_at TEXT NOT NULL,
    closed_at TEXT,
    extracted_at TEXT,
    record_ids TEXT NOT NULL DEFAULT '[]'
) STRICT;

-- At most one open turn per session.
CREATE UNIQUE INDEX turns_open ON turns (namespace, session_id) WHERE closed_at IS NULL;
CREATE INDEX turns_idle ON turns (last_event_at) WHERE closed_at IS NULL;
CREATE INDEX turns_pending ON turns (closed_at, turn_id) WHERE extracted_at IS NULL;

-- An explicit INTEGER PRIMARY KEY: VACUUM may renumber an implicit rowid, which would
-- detach the external-content full-text index from its rows.
CREATE TABLE memory_records (
    id INTEGER PRIMARY KEY,
    record_id TEXT NOT NULL UNIQUE,
    namespace TEXT NOT NULL,
    title TEXT NOT NULL,
    summary TEXT NOT NULL,
    facts TEXT NOT NULL,
    facts_text TEXT NOT NULL,
    concepts TEXT NOT NULL,
    files_touched TEXT NOT NULL,
    observation_type TEXT NOT NULL,
    source_event_ids TEXT NOT NULL,
    strategy TEXT NOT NULL,
    quality TEXT NOT NULL,
    pinned INTEGER NOT NULL DEFAULT 0 CHECK (pinned IN (0, 1)),
    created_at TEXT NOT NULL,
    embedding BLOB
) STRICT;

CREATE INDEX memory_by_namespace ON memory_records (namespace, created_at DESC, record_id DESC);
CREATE INDEX memory_missing_embedding ON memory_records (created_at, record_id)
    WHERE embedding IS NULL;

-- External-content index: the triggers below are the only writers, so it never drifts.
CREATE VIRTUAL TABLE memory_fts USING fts5 (
    title, summary, facts_text,
    content = 'memory_records', content_rowid = 'id',
    tokenize = 'porter unicode61 remove_diacritics 2'
);

CREATE VIRTUAL TABLE memory_fts_vocab USING fts5vocab (memory_fts, 'row');

CREATE TRIGGER memory_fts_insert AFTER INSERT ON memory_records BEGIN
    INSERT INTO memory_fts (rowid, title, summary, facts_text)
    VALUES (new.id, new.title, new.summary, new.facts_text);
END;

CREATE TRIGGER memory_fts_delete AFTER DELETE ON memory_records BEGIN
    INSERT INTO memory_fts (memory_fts, rowid, title, summary, facts_text)
    VALUES ('delete', old.id, old.title, old.summary, old.facts_text);
END;

CREATE TRIGGER memory_fts_update AFTER UPDATE OF title, summary, facts_text ON memory_records
BEGIN
    INSERT INTO memory_fts (memory_fts, rowid, title, summary, facts_text)
    VALUES ('delete', old.id, old.title, old.summary, old.facts_text);
    INSERT INTO memory_fts (rowid, title, summary, facts_text)
    VALUES (new.id, new.title, new.summary, new.facts_text);
END;
