-- Full-text index with a scope column, so a search restricted to a namespace or actor is
-- one MATCH: FTS5 only ever walks (and bm25 only ranks) that namespace's rows. Scope
-- tokens are the hex of the namespace ("ns...") and of its actor prefix ("na..."): hex
-- is alphanumeric, so the tokenizer keeps each whole, and every prefix ends in '/'
-- (hex 2f), which no porter rule strips.

DROP TRIGGER memory_fts_insert;
DROP TRIGGER memory_fts_delete;
DROP TRIGGER memory_fts_update;
DROP TABLE memory_fts_vocab;
DROP TABLE memory_fts;

-- The index's external content: a view, so memory_records keeps its columns.
CREATE VIEW memory_fts_content AS
SELECT id, title, summary, facts_text,
       'ns' || hex(namespace) || ' na' || hex(substr(namespace, 1, instr(substr(namespace, 8), '/') + 7))
           AS scope
  FROM memory_records;

CREATE VIRTUAL TABLE memory_fts USING fts5 (
    title, summary, facts_text, scope,
    content = 'memory_fts_content', content_rowid = 'id',
    tokenize = 'porter unicode61 remove_diacritics 2'
);

CREATE VIRTUAL TABLE memory_fts_vocab USING fts5vocab (memory_fts, 'row');

CREATE TRIGGER memory_fts_insert AFTER INSERT ON memory_records BEGIN
    INSERT INTO memory_fts (rowid, title, summary, facts_text, scope)
    SELECT id, title, summary, facts_text, scope FROM memory_fts_content WHERE id = new.id;
END;

CREATE TRIGGER memory_fts_delete AFTER DELETE ON memory_records BEGIN
    INSERT INTO memory_fts (memory_fts, rowid, title, summary, facts_text, scope)
    VALUES ('delete', old.id, old.title, old.summary, old.facts_text,
            'ns' || hex(old.namespace) || ' na'
            || hex(substr(old.namespace, 1, instr(substr(old.namespace, 8), '/') + 7)));
END;

CREATE TRIGGER memory_fts_update AFTER UPDATE OF namespace, title, summary, facts_text
    ON memory_records
BEGIN
    INSERT INTO memory_fts (memory_fts, rowid, title, summary, facts_text, scope)
    VALUES ('delete', old.id, old.title, old.summary, old.facts_text,
            'ns' || hex(old.namespace) || ' na'
            || hex(substr(old.namespace, 1, instr(substr(old.namespace, 8), '/') + 7)));
    INSERT INTO memory_fts (rowid, title, summary, facts_text, scope)
    SELECT id, title, summary, facts_text, scope FROM memory_fts_content WHERE id = new.id;
END;

INSERT INTO memory_fts (memory_fts) VALUES ('rebuild');
