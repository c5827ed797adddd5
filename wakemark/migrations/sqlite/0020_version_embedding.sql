-- A version keeps the vector it had as a current record, and the identity of the model
-- that made it (embedding_model.model then): the subject rule compares a follow-up with
-- what the session's recent turns wrote, including what has since been superseded
-- (wakemark.shared.extraction.subject), and only a vector of the stored model compares.
-- It goes with its row (a split, the deletion of the current record).
ALTER TABLE record_history ADD COLUMN embedding BLOB;
ALTER TABLE record_history ADD COLUMN embedding_model TEXT;
