-- Which model made the vectors (wakemark.shared.jobs.models): ``model`` is the identity
-- of the one whose vectors are in memory_records.embedding (NULL until the first process
-- that embeds takes it as its own: a database from before this migration is taken as
-- made by the model configured then); ``staged`` that of a rebuild under way, whose
-- vectors go to embedding_staged until they replace the others in one transaction.
CREATE TABLE embedding_model (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    model TEXT,
    staged TEXT
) STRICT;
INSERT INTO embedding_model (id) VALUES (1);

ALTER TABLE memory_records ADD COLUMN embedding_staged BLOB;
