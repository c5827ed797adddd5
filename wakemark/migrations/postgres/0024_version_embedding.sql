-- A version keeps the vector it had as a current record, and the identity of the model
-- that made it (embedding_model.model then): the subject rule compares a follow-up with
-- what the session's recent turns wrote, including what has since been superseded
-- (wakemark.shared.extraction.subject), and only a vector of the stored model compares.
-- It goes with its row (a split, the deletion of the current record). Only the
-- extraction reads it, a few rows by key: no index.
ALTER TABLE record_history ADD COLUMN embedding vector(384), ADD COLUMN embedding_model text;
