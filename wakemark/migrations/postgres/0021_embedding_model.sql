-- Which model made the vectors (wakemark.shared.jobs.models): ``model`` is the identity
-- of the one whose vectors are in memory_records.embedding (NULL until the first process
-- that embeds takes it as its own: a database from before this migration is taken as
-- made by the model configured then); ``staged`` that of a rebuild under way, whose
-- vectors go to embedding_staged until they replace the others in one transaction.
CREATE TABLE embedding_model (
    id integer PRIMARY KEY CHECK (id = 1),
    model text,
    staged text
);
INSERT INTO embedding_model (id) VALUES (1);

-- Default storage: a staged vector is kept out of line, so the scans of the records'
-- own vectors read no wider rows while a rebuild is under way.
ALTER TABLE memory_records ADD COLUMN embedding_staged vector(384);
