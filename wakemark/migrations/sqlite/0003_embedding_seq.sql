-- Incremental vector-cache refresh: every embedding write stamps its row with the next
-- value of a counter that never goes back (SQLite writers are serialized, so stamp order
-- is commit order). A cache that read up to value W asks only for rows stamped after W.
CREATE TABLE embedding_seq (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    value INTEGER NOT NULL
) STRICT;
INSERT INTO embedding_seq (id, value) VALUES (1, 0);

ALTER TABLE memory_records ADD COLUMN embedded_seq INTEGER NOT NULL DEFAULT 0;

-- A trigger, so every writer of the embedding column stamps it (no code path can forget).
CREATE TRIGGER memory_embedding_seq AFTER UPDATE OF embedding ON memory_records
WHEN new.embedding IS NOT NULL
BEGIN
    UPDATE embedding_seq SET value = value + 1 WHERE id = 1;
    UPDATE memory_records SET embedded_seq = (SELECT value FROM embedding_seq WHERE id = 1)
     WHERE id = new.id;
END;

-- Covers the cache's per-refresh queries (count, changed rows, ids) without touching the
-- wide rows that hold the vectors.
CREATE INDEX memory_embedded ON memory_records (namespace, embedded_seq, record_id)
    WHERE embedding IS NOT NULL;
