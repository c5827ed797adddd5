-- A record's full-text row is rebuilt only when its text changed. Moving a project
-- (Upkeep.move_namespace) rewrites every record's namespace, and rebuilding each tsv, with
-- every lexeme's document count (memory_fts_lexeme_df fires on an UPDATE OF tsv), took
-- nearly all of the move's time; the namespace, time and type are copied alone now. The
-- other branches are as migration 0006 last wrote them.
CREATE OR REPLACE FUNCTION wakemark_memory_fts_sync() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        DELETE FROM memory_fts WHERE record_id = OLD.record_id;
    ELSIF TG_OP = 'INSERT' THEN
        INSERT INTO memory_fts (record_id, namespace, created_at, observation_type, tsv)
        VALUES (NEW.record_id, NEW.namespace, NEW.created_at, NEW.observation_type,
                wakemark_fts_doc(NEW.title, NEW.summary, NEW.facts));
    ELSIF (NEW.title, NEW.summary, NEW.facts) IS NOT DISTINCT FROM (OLD.title, OLD.summary, OLD.facts) THEN
        UPDATE memory_fts
           SET record_id = NEW.record_id, namespace = NEW.namespace,
               created_at = NEW.created_at, observation_type = NEW.observation_type
         WHERE record_id = OLD.record_id;
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
