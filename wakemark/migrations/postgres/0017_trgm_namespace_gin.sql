-- The trigram index holds each row's namespace beside its trigrams (btree_gin, as the word
-- index of 0015 does), so the trigram leg's search of one project gets that project's
-- matches straight from the index. With the trigrams alone a common fragment's bitmap
-- held every project's matches (150k rows of a million for "json"), built in full before
-- the namespace was applied: ~0.4 s per fragment for a project of 3k rows. A search over
-- several projects (an actor prefix) still uses the trigrams alone.
CREATE INDEX IF NOT EXISTS memory_records_namespace_trgm ON memory_records
    USING gin (namespace, wakemark_trgm_text(title, summary, facts) gin_trgm_ops);
DROP INDEX IF EXISTS memory_records_trgm;
