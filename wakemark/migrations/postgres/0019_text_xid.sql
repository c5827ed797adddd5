-- Incremental refresh of the full-text index held in the process
-- (wakemark.shared.storage.postgres.lexicon): every write of a record's searchable
-- columns stamps the row with the id of its transaction, as 0003 does for embeddings. An
-- index read in snapshot S asks for rows stamped >= xmin(S): every transaction below it
-- had ended before S, so its writes were already read. (A sequence would not do: its
-- values are taken in start order, not commit order.)
ALTER TABLE memory_records ADD COLUMN text_xid bigint NOT NULL DEFAULT 0;

CREATE FUNCTION wakemark_stamp_text() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    NEW.text_xid := pg_current_xact_id()::text::bigint;
    RETURN NEW;
END;
$$;

-- A trigger, so no writer of these columns can forget the stamp. The columns are those
-- the index holds (memory_records_fts re-indexes the same ones).
CREATE TRIGGER memory_records_stamp_text
    BEFORE INSERT
        OR UPDATE OF record_id, namespace, created_at, observation_type, title, summary, facts
    ON memory_records
    FOR EACH ROW EXECUTE FUNCTION wakemark_stamp_text();

-- The per-search check (the rows stamped since the index's snapshot) reads this alone.
CREATE INDEX memory_records_text_xid ON memory_records (text_xid, record_id);
