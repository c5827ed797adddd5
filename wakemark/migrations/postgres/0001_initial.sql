-- wakemark schema for Postgres: events grouped into turns, memory records with a weighted
-- tsvector (GIN) and a 384-d embedding (HNSW cosine). Everything is created in the
-- current schema; the extensions `vector` and `unaccent` are installed beforehand by a
-- superuser and resolve through search_path.

-- unaccent() is only STABLE (it reads a dictionary), so a generated column cannot call it
-- directly: this wrapper pins the dictionary and is declared IMMUTABLE.
CREATE FUNCTION wakemark_unaccent(text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
AS $$ SELECT unaccent('unaccent'::regdictionary, $1) $$;

-- Text as the full-text index sees it, for documents and query terms alike: accents
-- folded, and ASCII punctuation made a word break so that `cli.py`, `src/app` or `a-b`
-- index as their parts (the parser would keep them whole as file/host tokens), matching
-- how the shared query sanitizer splits user text.
CREATE FUNCTION wakemark_fts_text(text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT regexp_replace(wakemark_unaccent(coalesce($1, '')), '[[:punct:]]', ' ', 'g') $$;

-- The document indexed for full-text search: title (A), summary (B), facts (C).
CREATE FUNCTION wakemark_fts_doc(title text, summary text, facts text[]) RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
  SELECT setweight(to_tsvector('english', wakemark_fts_text(title)), 'A')
      || setweight(to_tsvector('english', wakemark_fts_text(summary)), 'B')
      || setweight(to_tsvector('english', wakemark_fts_text(array_to_string(facts, ' '))), 'C')
$$;

-- OR-combine the per-term queries of one search (tsquery_or is the `||` operator).
CREATE AGGREGATE wakemark_tsquery_or(tsquery) (SFUNC = tsquery_or, STYPE = tsquery);

CREATE TABLE turns (
    turn_id       text PRIMARY KEY,
    namespace     text COLLATE "C" NOT NULL,
    session_id    text NOT NULL,
    opened_at     timestamptz NOT NULL,
    last_event_at timestamptz NOT NULL,
    closed_at     timestamptz,
    extracted_at  timestamptz,
    record_ids    text[] NOT NULL DEFAULT '{}'
);
-- At most one open turn per session.
CREATE UNIQUE INDEX turns_open_session ON turns (namespace, session_id) WHERE closed_at IS NULL;
CREATE INDEX turns_open_idle ON turns (last_event_at) WHERE closed_at IS NULL;
CREATE INDEX turns_pending ON turns (opened_at, turn_id)
    WHERE closed_at IS NOT NULL AND extracted_at IS NULL;

CREATE TABLE events (
    event_id         text PRIMARY KEY,
    parent_event_id  text,
    session_id       text NOT NULL,
    actor_id         text NOT NULL,
    namespace        text COLLATE "C" NOT NULL,
    kind             text NOT NULL,
    body             text NOT NULL,
    valid_time       timestamptz NOT NULL,
    source_surface   text NOT NULL,
    source_version   text,
    project_path     text,
    schema_version   integer NOT NULL,
    transaction_time timestamptz NOT NULL,
    turn_id          text REFERENCES turns (turn_id)
);
CREATE INDEX events_namespace_recent ON events (namespace, transaction_time DESC, event_id DESC);
CREATE INDEX events_session_recent ON events (session_id, transaction_time DESC, event_id DESC);
CREATE INDEX events_turn ON events (turn_id, valid_time);

CREATE TABLE memory_records (
    record_id        text PRIMARY KEY,
    namespace        text COLLATE "C" NOT NULL,
    title            text NOT NULL,
    summary          text NOT NULL,
    facts            text[] NOT NULL,
    concepts         text[] NOT NULL,
    files_touched    text[] NOT NULL,
    observation_type text NOT NULL,
    source_event_ids text[] NOT NULL,
    strategy         text NOT NULL,
    quality          text NOT NULL,
    pinned           boolean NOT NULL DEFAULT false,
    created_at       timestamptz NOT NULL,
    embedding        vector(384),
    tsv              tsvector GENERATED ALWAYS AS (wakemark_fts_doc(title, summary, facts)) STORED
);
-- Inline vectors: an exact scan over a namespace reads no TOAST (measured ~2x faster).
ALTER TABLE memory_records ALTER COLUMN embedding SET STORAGE PLAIN;
CREATE INDEX memory_records_namespace_recent
    ON memory_records (namespace, created_at DESC, record_id DESC);
CREATE INDEX memory_records_missing_embedding
    ON memory_records (created_at, record_id) WHERE embedding IS NULL;
CREATE INDEX memory_records_tsv ON memory_records USING gin (tsv);
CREATE INDEX memory_records_embedding ON memory_records USING hnsw (embedding vector_cosine_ops);

-- Document frequency of every lexeme in memory_records.tsv, kept exact by a trigger, so
-- the 32-term IDF cap costs one indexed lookup instead of a ts_stat() scan per query.
CREATE TABLE lexeme_df (
    lexeme text COLLATE "C" PRIMARY KEY,
    df     integer NOT NULL
);

CREATE FUNCTION wakemark_lexeme_df_sync() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    -- Lexemes come sorted out of tsvector_to_array, so concurrent writers lock
    -- lexeme_df rows in the same order and cannot deadlock on each other.
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        PERFORM 1 FROM lexeme_df WHERE lexeme = ANY (tsvector_to_array(OLD.tsv))
         ORDER BY lexeme FOR UPDATE;
        UPDATE lexeme_df d SET df = d.df - 1
          FROM unnest(tsvector_to_array(OLD.tsv)) AS l(lexeme)
         WHERE d.lexeme = l.lexeme;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO lexeme_df (lexeme, df)
        SELECT l.lexeme, 1 FROM unnest(tsvector_to_array(NEW.tsv)) AS l(lexeme)
         ORDER BY l.lexeme
        ON CONFLICT (lexeme) DO UPDATE SET df = lexeme_df.df + 1;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER memory_records_lexeme_df
    AFTER INSERT OR DELETE OR UPDATE OF title, summary, facts ON memory_records
    FOR EACH ROW EXECUTE FUNCTION wakemark_lexeme_df_sync();
