-- Full-text search moves to a narrow table of its own. A search ranks every match it
-- considers by its tsv; in memory_records, whose inline embedding puts each row past the
-- TOAST threshold, tsv lived out of line, so each rank was a TOAST index lookup and chunk
-- reads, among rows ~3 kB wide. Here a row (~0.9 kB) keeps tsv inline and a walk of the
-- newest matches reads ~9 rows a page.
CREATE TABLE memory_fts (
    record_id        text PRIMARY KEY,
    namespace        text COLLATE "C" NOT NULL,
    created_at       timestamptz NOT NULL,
    observation_type text NOT NULL,
    tsv              tsvector NOT NULL
);
INSERT INTO memory_fts (record_id, namespace, created_at, observation_type, tsv)
SELECT record_id, namespace, created_at, observation_type, tsv FROM memory_records;
CREATE INDEX memory_fts_namespace_recent ON memory_fts (namespace, created_at DESC, record_id DESC);
CREATE INDEX memory_fts_tsv ON memory_fts USING gin (tsv);
-- Statistics now, not at autovacuum's next round: without them the planner expects a
-- handful of full-text matches and picks plans that are slow for common terms.
ANALYZE memory_fts;

-- lexeme_df and fts_doc_count now follow memory_fts (same function: it reads OLD/NEW.tsv);
-- they already count the rows just copied.
DROP TRIGGER memory_records_lexeme_df ON memory_records;
ALTER TABLE memory_records DROP COLUMN tsv;  -- and its GIN index
CREATE TRIGGER memory_fts_lexeme_df
    AFTER INSERT OR DELETE OR UPDATE OF tsv ON memory_fts
    FOR EACH ROW EXECUTE FUNCTION wakemark_lexeme_df_sync();

-- One memory_fts row per memory record, written with it.
CREATE FUNCTION wakemark_memory_fts_sync() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        DELETE FROM memory_fts WHERE record_id = OLD.record_id;
    ELSIF TG_OP = 'INSERT' THEN
        INSERT INTO memory_fts (record_id, namespace, created_at, observation_type, tsv)
        VALUES (NEW.record_id, NEW.namespace, NEW.created_at, NEW.observation_type,
                wakemark_fts_doc(NEW.title, NEW.summary, NEW.facts));
    ELSE
        UPDATE memory_fts
           SET record_id = NEW.record_id, namespace = NEW.namespace,
               created_at = NEW.created_at, observation_type = NEW.observation_type,
               tsv = wakemark_fts_doc(NEW.title, NEW.summary, NEW.facts)
         WHERE record_id = OLD.record_id;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER memory_records_fts
    AFTER INSERT OR DELETE
       OR UPDATE OF record_id, namespace, created_at, observation_type, title, summary, facts
    ON memory_records
    FOR EACH ROW EXECUTE FUNCTION wakemark_memory_fts_sync();

-- The search ORs its per-term queries client-side now.
DROP AGGREGATE wakemark_tsquery_or(tsquery);
