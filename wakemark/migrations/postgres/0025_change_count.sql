-- A counter every record written or deleted, and every vector written or cleared, moves
-- in its project's row, in the writing transaction: a process without Redis (no shared
-- cache epochs) reads it at each vector search to learn of another process's writes
-- (Vectors.change_stamp; SQLite sums embedding_seq and text_seq instead). It only grows
-- while the row lives. The embedding trigger now fires on every vector written, not only
-- when a record gains or loses one: a vector rewritten in place changes what a cache holds.
ALTER TABLE namespace_record_counts ADD COLUMN changes bigint NOT NULL DEFAULT 0;

CREATE OR REPLACE FUNCTION wakemark_count_records() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO namespace_record_counts AS c
               (namespace, memories, embedded, last_record_at, changes)
        VALUES (NEW.namespace, 1, (NEW.embedding IS NOT NULL)::int, NEW.created_at, 1)
        ON CONFLICT (namespace) DO UPDATE SET
            memories = c.memories + 1,
            embedded = c.embedded + excluded.embedded,
            last_record_at = greatest(c.last_record_at, excluded.last_record_at),
            changes = c.changes + 1;
    ELSIF TG_OP = 'DELETE' THEN
        UPDATE namespace_record_counts
           SET memories = memories - 1, embedded = embedded - (OLD.embedding IS NOT NULL)::int,
               changes = changes + 1
         WHERE namespace = OLD.namespace;
    ELSE
        UPDATE namespace_record_counts
           SET embedded = embedded + (NEW.embedding IS NOT NULL)::int - (OLD.embedding IS NOT NULL)::int,
               changes = changes + 1
         WHERE namespace = NEW.namespace;
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER memory_records_embedded_count ON memory_records;
CREATE TRIGGER memory_records_embedded_count AFTER UPDATE OF embedding ON memory_records
    FOR EACH ROW EXECUTE FUNCTION wakemark_count_records();
