-- Incremental vector-cache refresh: every embedding write stamps its row with the id of
-- its transaction. A reader that saw snapshot S asks for rows stamped >= xmin(S): every
-- transaction below xmin(S) had finished before S, so its writes were already seen.
-- (A plain sequence would not do: values are taken in start order, not commit order.)
ALTER TABLE memory_records ADD COLUMN embedded_xid bigint NOT NULL DEFAULT 0;

CREATE FUNCTION wakemark_stamp_embedding() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    NEW.embedded_xid := pg_current_xact_id()::text::bigint;
    RETURN NEW;
END;
$$;

-- A trigger, so every writer of the embedding column stamps it (no code path can forget).
CREATE TRIGGER memory_records_stamp_embedding
    BEFORE UPDATE OF embedding ON memory_records
    FOR EACH ROW WHEN (NEW.embedding IS NOT NULL)
    EXECUTE FUNCTION wakemark_stamp_embedding();

-- Covers the cache's per-refresh queries (count, changed rows, ids): index-only scans
-- that never read the wide heap rows holding the vectors.
CREATE INDEX memory_records_embedded ON memory_records (namespace, embedded_xid, record_id)
    WHERE embedding IS NOT NULL;
