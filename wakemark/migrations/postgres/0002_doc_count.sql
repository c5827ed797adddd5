-- The number of memory records, kept exact by the lexeme_df trigger, so a search can tell
-- which query terms are in most documents (and drop them) without a count(*) per query.
-- Writers already serialize on the rows of common lexemes; this one row adds no new wait.
CREATE TABLE fts_doc_count (
    id integer PRIMARY KEY CHECK (id = 1),
    n  bigint NOT NULL
);
INSERT INTO fts_doc_count (id, n) SELECT 1, count(*) FROM memory_records;

CREATE OR REPLACE FUNCTION wakemark_lexeme_df_sync() RETURNS trigger
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
    -- After the lexemes, so every writer takes its locks in one order.
    IF TG_OP = 'INSERT' THEN
        UPDATE fts_doc_count SET n = n + 1 WHERE id = 1;
    ELSIF TG_OP = 'DELETE' THEN
        UPDATE fts_doc_count SET n = n - 1 WHERE id = 1;
    END IF;
    RETURN NULL;
END
$$;
