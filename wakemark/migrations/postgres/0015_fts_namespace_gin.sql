-- The word index holds each row's namespace beside its lexemes (btree_gin, a trusted
-- extension `wakemark migrate` creates beforehand), so a search of one project gets that
-- project's matches straight from the index. With the lexemes alone the bitmap held every
-- project's matches and was intersected with all of the project's rows (on a 200k-record
-- project of a million: 23 ms reading the namespace's whole btree range, per search). A
-- search over several projects (an actor prefix) still uses the lexemes alone.
CREATE INDEX memory_fts_namespace_tsv ON memory_fts USING gin (namespace, tsv);
DROP INDEX memory_fts_tsv;
