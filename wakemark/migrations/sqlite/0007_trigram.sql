-- A trigram index beside the word index. unicode61 keeps a whole run of CJK characters
-- as one token, so a Chinese or Japanese query matched nothing, and it keeps a long
-- identifier as one word; trigrams match any substring of three characters or more.
-- External content: the triggers below are its only writers, so it never drifts.
CREATE VIRTUAL TABLE memory_trgm USING fts5 (
    title, summary, facts_text,
    content = 'memory_records', content_rowid = 'id',
    tokenize = 'trigram'
);

CREATE TRIGGER memory_trgm_insert AFTER INSERT ON memory_records BEGIN
    INSERT INTO memory_trgm (rowid, title, summary, facts_text)
    VALUES (new.id, new.title, new.summary, new.facts_text);
END;

CREATE TRIGGER memory_trgm_delete AFTER DELETE ON memory_records BEGIN
    INSERT INTO memory_trgm (memory_trgm, rowid, title, summary, facts_text)
    VALUES ('delete', old.id, old.title, old.summary, old.facts_text);
END;

CREATE TRIGGER memory_trgm_update AFTER UPDATE OF title, summary, facts_text ON memory_records
BEGIN
    INSERT INTO memory_trgm (memory_trgm, rowid, title, summary, facts_text)
    VALUES ('delete', old.id, old.title, old.summary, old.facts_text);
    INSERT INTO memory_trgm (rowid, title, summary, facts_text)
    VALUES (new.id, new.title, new.summary, new.facts_text);
END;

-- The records stored before this migration.
INSERT INTO memory_trgm (memory_trgm) VALUES ('rebuild');
