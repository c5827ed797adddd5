-- The product was renamed wakemark (formerly engram). A database created before the
-- rename holds its functions under the old prefix: rename them, then rewrite the bodies
-- that call one another by name (SQL and PL/pgSQL bodies are resolved when they run).
-- On a database created after the rename the loop finds nothing and the rewrites are
-- the definitions it already has.
DO $$
DECLARE
    f text;
BEGIN
    FOREACH f IN ARRAY ARRAY['unaccent(text)', 'fts_text(text)', 'fts_doc(text,text,text[])',
                             'lexeme_df_sync()', 'stamp_embedding()', 'memory_fts_sync()'] LOOP
        IF to_regprocedure('engram_' || f) IS NOT NULL THEN
            EXECUTE format('ALTER FUNCTION %s RENAME TO %I',
                           'engram_' || f, 'wakemark_' || split_part(f, '(', 1));
        END IF;
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION wakemark_fts_text(text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT regexp_replace(wakemark_unaccent(coalesce($1, '')), '[[:punct:]]', ' ', 'g') $$;

CREATE OR REPLACE FUNCTION wakemark_fts_doc(title text, summary text, facts text[]) RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
  SELECT setweight(to_tsvector('english', wakemark_fts_text(title)), 'A')
      || setweight(to_tsvector('english', wakemark_fts_text(summary)), 'B')
      || setweight(to_tsvector('english', wakemark_fts_text(array_to_string(facts, ' '))), 'C')
$$;

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
