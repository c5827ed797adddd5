-- Incremental refresh of the full-text index held in the process
-- (wakemark.shared.storage.sqlite.lexicon): every write of a record's searchable columns
-- stamps the row with the next value of a counter that never goes back (SQLite writers
-- are serialized, so stamp order is commit order); a delete moves the counter too. An
-- index that read up to value W is current while the counter reads W, and otherwise
-- asks only for rows stamped after W.
CREATE TABLE text_seq (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    value INTEGER NOT NULL
) STRICT;
INSERT INTO text_seq (id, value) VALUES (1, 0);

ALTER TABLE memory_records ADD COLUMN text_seq INTEGER NOT NULL DEFAULT 0;

CREATE INDEX memory_by_text_seq ON memory_records (text_seq);

CREATE TRIGGER memory_text_seq_insert AFTER INSERT ON memory_records BEGIN
    UPDATE text_seq SET value = value + 1 WHERE id = 1;
    UPDATE memory_records SET text_seq = (SELECT value FROM text_seq WHERE id = 1)
     WHERE id = new.id;
END;

CREATE TRIGGER memory_text_seq_update
    AFTER UPDATE OF namespace, title, summary, facts_text, observation_type, created_at
    ON memory_records
BEGIN
    UPDATE text_seq SET value = value + 1 WHERE id = 1;
    UPDATE memory_records SET text_seq = (SELECT value FROM text_seq WHERE id = 1)
     WHERE id = new.id;
END;

CREATE TRIGGER memory_text_seq_delete AFTER DELETE ON memory_records BEGIN
    UPDATE text_seq SET value = value + 1 WHERE id = 1;
END;
