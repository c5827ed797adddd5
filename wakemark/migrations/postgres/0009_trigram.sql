-- A trigram index beside the word index: to_tsvector keeps a whole run of CJK characters
-- as one lexeme, so a Chinese or Japanese query matched nothing, and it keeps a long
-- identifier as one word; pg_trgm's index serves any substring of three characters or
-- more (ILIKE '%...%'). `wakemark migrate` creates the pg_trgm extension beforehand (a
-- trusted one: the database owner may).

-- The text the trigram leg searches (array_to_string is only STABLE, hence the wrapper).
CREATE FUNCTION wakemark_trgm_text(title text, summary text, facts text[]) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT coalesce(title, '') || ' ' || coalesce(summary, '') || ' '
             || coalesce(array_to_string(facts, ' '), '') $$;

-- Built over the existing rows as it is created.
CREATE INDEX memory_records_trgm ON memory_records
    USING gin (wakemark_trgm_text(title, summary, facts) gin_trgm_ops);
